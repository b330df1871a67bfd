// SPDX-License-Identifier: MIT
// The counter test in the pattern of `locksmith run`: every increment goes through a fresh
// lock_factory and named_lock, so each acquisition opens (and, for `file`, recreates) the lock
// from scratch. Shared by the tests of the strategies that span processes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/lock_factory.hpp>

#include "local/local_helpers.hpp"

namespace locksmith::test {

// Forks `processes` children that each increment `counter` `iterations` times under the lock
// `name` on `strategy`, building a new factory (from `config_json`) and lock for every increment.
// The first `long_lived` children instead keep one factory and lock for all their increments:
// beside fresh objects that remove and recreate a lock file, they must notice that the file
// they keep open was retired. Returns the number of children that failed.
inline int increment_with_fresh_objects(const std::string& config_json, const std::string& strategy,
                                        const std::string& name, const counter_file& counter,
                                        int processes, int iterations, int long_lived = 0) {
    byte_pipe gate;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p)
        children.push_back(fork_child(
            [&, p] {
                gate.close_write();
                const config cfg = config::parse(config_json);
                lock_request request;
                request.strategy = strategy;
                std::optional<lock_factory> kept_factory;
                std::optional<named_lock> kept;
                if (p < long_lived) {
                    kept_factory.emplace(cfg);
                    kept.emplace(kept_factory->create_lock(name, request));
                }
                (void)gate.get(std::chrono::seconds(30));  // EOF: go
                for (int i = 0; i < iterations; ++i) {
                    std::optional<lock_factory> factory;
                    std::optional<named_lock> fresh;
                    if (!kept) {
                        factory.emplace(cfg);
                        fresh.emplace(factory->create_lock(name, request));
                    }
                    named_lock& lock = kept ? *kept : *fresh;
                    lock.lock();
                    if (!counter.increment()) return 3;
                    lock.release();
                }
                return 0;
            },
            std::chrono::seconds(240)));
    gate.close_write();
    int failures = 0;
    for (pid_t pid : children) failures += wait_child(pid, std::chrono::seconds(240)) != 0;
    return failures;
}

}  // namespace locksmith::test
