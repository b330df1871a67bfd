// SPDX-License-Identifier: MIT
// TYPO3-style use: ask for a locker by capability mask, acquire with a mode.
//
//   example_typo3_style [NAME]
//
// The factory picks the highest-priority strategy that has every requested capability (on a
// default setup, `file`); an admin can change the choice in the JSON config (LOCKSMITH_CONFIG)
// without touching this code.
#include <iostream>

#include <locksmith/locksmith.hpp>

int main(int argc, char** argv) {
    using locksmith::capability;
    const std::string name = argc > 1 ? argv[1] : "page-cache-42";
    try {
        locksmith::lock_factory
            factory;  // finds the config as the locksmith command does (config::discover)
        auto locker = factory.create_lock(name, capability::exclusive | capability::noblock);
        std::cout << "strategy: " << locker.strategy() << "\n";

        // TYPO3's acquire(EXCLUSIVE | NOBLOCK): false when somebody else holds it.
        if (!locker.acquire(capability::exclusive | capability::noblock)) {
            std::cout << "busy: somebody else is building " << name << "\n";
            return 1;
        }
        std::cout << "building " << name << " under the lock\n";
        locker.release();
        return 0;
    } catch (const locksmith::error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
