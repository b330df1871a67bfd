// SPDX-License-Identifier: MIT
// The strategies the conformance and multi-process suites run against, with the options each
// needs: the entries of the strategies' locksmith_add_strategy(TESTS ...), each made by
// entry_<id> in support/entries/<strategy>.cpp (support/entries/entries.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace locksmith::test {

struct strategy_under_test {
    std::string name;
    // Options for the store, or nullopt when what it needs (a server endpoint) is not available
    // here; `missing` then says what is missing. Tests skip with that reason, and fail under CI.
    std::optional<nlohmann::json> options;
    std::string missing;
    // The strategy's locks exist only inside one process (`memory`): the multi-process suites
    // skip it, and cross-process cases of the conformance suite use threads instead.
    bool in_process_only = false;
    // For strategies with `expiring`: the shortest TTL the backend honours precisely (Symfony's
    // getClockDelay()). The expiring cases use TTLs of a few times this.
    std::chrono::milliseconds clock_delay{100};
    // Names the entry in test names and CTest entries when one strategy has several (`sql`
    // with each driver: "sql.sqlite"); empty = the strategy's name.
    std::string label;
    // For a strategy whose server can end a grant (a session or connection it closes): ends the
    // session through which process `holder` holds a lock of this entry, as the server or an
    // admin would (pg_terminate_backend, a session left to expire). Empty for the others. The
    // hostile suite then checks that the holder is told at once (named_lock::loss_fd).
    std::function<void(pid_t holder)> end_session;

    const std::string& id() const { return label.empty() ? name : label; }
};

// The entries of every strategy this build has, in CMake's order.
std::vector<strategy_under_test> strategies_under_test();

// A name used as a counting semaphore in this process tree: the kernel objects the local entries
// keep for it (semaphore's permit set, shm's permits segment) are removed when the process that
// noted it exits. Call it in the process that made the test's first store.
void note_permit_name(const std::string& resource);

}  // namespace locksmith::test
