// SPDX-License-Identifier: MIT
// `locksmith run`: take a lock (or a permit of a counting semaphore), run a command while
// holding it, release it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "factory_setup.hpp"

namespace locksmith::cli {

struct run_options {
    std::string name;
    bool shared = false;    // -s
    bool nonblock = false;  // -n
    // Durations as typed, so that an error can quote them exactly (parse_seconds).
    std::optional<std::string> wait_s;  // -w SECONDS (0 = non-blocking)
    int conflict_exit_code = 1;         // -E
    std::optional<std::string> ttl_s;   // --ttl
    // --limit N: a permit of the counting semaphore NAME (at most N holders) instead of the
    // lock; unset = the matching lock rule's `limit`, else the lock.
    std::optional<std::uint32_t> limit;
    std::string kill_after_s = "5";     // --kill-after
    int lost_exit_code = 75;            // --lost-exit-code
    selection_flags selection;          // --strategy / --require
    std::optional<std::string> config;  // --config
    bool verbose = false;               // -v
    bool json = false;                  // --json: one JSON line on stderr at the end
    std::optional<std::string> shell;   // -c 'shell command'
    std::vector<std::string> command;   // -- COMMAND ARGS...
    // `locksmith hold`: no command; holds the lock until its standard input ends or it is
    // asked to stop (SIGTERM, SIGINT, SIGHUP), saying "held" on standard output once granted.
    bool hold = false;
};

// Returns the exit code: the child's, the conflict code, the lost-lock code, or
// exit_release_failed. `hold`: 0 once released, whether its input ended or it was asked to stop.
// Throws cli_error and locksmith::error for locksmith's own failures (main maps them).
int run_command(const run_options& options);

}  // namespace locksmith::cli
