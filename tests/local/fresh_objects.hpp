// The counter test in the pattern of `locksmith run`: every increment goes through a fresh
// lock_factory and named_lock, so each acquisition opens (and, for `file`, recreates) the lock
// from scratch. Shared by the tests of the strategies that span processes.
#pragma once

#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/lock_factory.hpp>

#include "local/local_helpers.hpp"

namespace locksmith::test {

// Forks `processes` children that each increment `counter` `iterations` times under the lock
// `name` on `strategy`, building a new factory (from `config_json`) and lock for every increment.
// Returns the number of children that failed.
inline int increment_with_fresh_objects(const std::string& config_json,
                                        const std::string& strategy, const std::string& name,
                                        const counter_file& counter, int processes,
                                        int iterations) {
    byte_pipe gate;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p)
        children.push_back(fork_child(
            [&] {
                gate.close_write();
                const config cfg = config::parse(config_json);
                (void)gate.get(std::chrono::seconds(30));  // EOF: go
                for (int i = 0; i < iterations; ++i) {
                    lock_factory factory(cfg);
                    lock_request request;
                    request.strategy = strategy;
                    auto lock = factory.create_lock(name, request);
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
