// SPDX-License-Identifier: MIT
// A program that locks through the flockdir plugin: the config names the plugin and gives the
// strategy its directory; lock_factory loads it before it selects a strategy.
//   flockdir_demo /path/libflockdir.so /path/to/locks
#include <iostream>

#include <nlohmann/json.hpp>

#include <locksmith/locksmith.hpp>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: flockdir_demo PLUGIN LOCK_DIRECTORY\n";
        return 2;
    }
    const nlohmann::json doc{
        {"plugins", {argv[1]}},
        {"strategies", {{"flockdir", {{"priority", 95}, {"options", {{"directory", argv[2]}}}}}}}};
    try {
        locksmith::lock_factory factory(locksmith::config::parse(doc.dump(), "flockdir_demo"));
        auto lock = factory.create_lock("reports/daily");
        if (!lock.try_lock()) {
            std::cerr << "reports/daily is held elsewhere\n";
            return 1;
        }
        std::cout << "holding " << lock.name() << " on " << lock.strategy() << '\n';
        return lock.strategy() == "flockdir" ? 0 : 1;
    } catch (const std::exception& e) {
        std::cerr << "flockdir_demo: " << e.what() << '\n';
        return 2;
    }
}
