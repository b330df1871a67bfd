// SPDX-License-Identifier: MIT
// Symfony-style use: a lock with a TTL, refreshed while long work runs, and a shared (read)
// lock that writers wait for. Also shows the standard C++ lock guards.
//
//   example_symfony_style
//
// Runs on the in-process `memory` strategy (enabled here by an inline config) so that it needs
// nothing else; with a Redis endpoint in the config the same code spans hosts.
#include <chrono>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include <locksmith/locksmith.hpp>

using namespace std::chrono_literals;

int main() {
    try {
        auto cfg = locksmith::config::parse(R"({
            "defaults":   { "ttl_s": 2 },
            "strategies": { "memory": { "enabled": true, "priority": 100 } }
        })");
        locksmith::lock_factory factory(cfg);
        using locksmith::capability;

        // An expiring lock: refresh it while the work goes on, so it never runs out.
        auto report =
            factory.create_lock("pdf-invoice-17", capability::exclusive | capability::expiring);
        if (!report.acquire()) return 1;
        for (int step = 0; step < 3; ++step) {
            std::this_thread::sleep_for(100ms);  // a slice of the long job
            report.refresh();                    // back to the full 2 s
            std::cout << "step " << step << ", lock valid for another "
                      << report.remaining_lifetime()->count() << " ms\n";
        }
        report.release();

        // Shared locks: two readers at once; a writer waits (bounded) until they are done.
        auto reader_a = factory.create_lock("catalog", capability::shared);
        auto reader_b = factory.create_lock("catalog", capability::shared);
        std::shared_lock a(reader_a);
        std::shared_lock b(reader_b);
        auto writer = factory.create_lock("catalog", capability::exclusive);
        std::cout << "writer while two readers hold: "
                  << (writer.try_lock_for(50ms) ? "got it (wrong!)" : "waits") << "\n";
        a.unlock();
        b.unlock();
        {
            std::unique_lock w(writer);  // the standard guard, on a named lock
            std::cout << "writer after the readers left: holds it\n";
        }
        return 0;
    } catch (const locksmith::error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
