// SPDX-License-Identifier: MIT
// The conformance cases for strategy authors: what every strategy must do, checked through the
// public API against any strategy a config can reach (built in, or from a plugin).
//
//   subject  the strategy under test: its name, its options, the plugins that provide it
//   outcome  one case: passed, failed (with what was seen) or skipped (with why)
//   run      runs every case that applies to the strategy's capabilities
//   case_names / run_case   the cases one by one, for a test framework that reports each on its
//            own (locksmith's own tests/conformance runs every built-in strategy so)
//
// Installed as the library locksmith::conformance (CMake) and the program
// locksmith-conformance:  locksmith-conformance --plugin /path/libmine.so --strategy mine
//                          --options '{"directory": "/tmp/x"}'
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/capability.hpp>

namespace locksmith::conformance {

struct subject {
    std::string strategy;
    nlohmann::json options;            // the strategy's options in the config (null = none)
    std::vector<std::string> plugins;  // the config's "plugins"
    // For a strategy of a remote kind (`distributed`), the case hostile_server_grants_nothing
    // points it at servers of the kit's own that misbehave: accept and never answer, trickle,
    // answer nonsense, hang up. These options reach such a server: each "{server}" in their
    // strings becomes its address ("127.0.0.1:PORT"). Null: each 127.0.0.1:PORT or
    // localhost:PORT in `options` becomes the address of a server of its own; the case skips
    // when `options` name none.
    nlohmann::json hostile_options;
};

struct outcome {
    std::string name;
    enum class verdict { passed, failed, skipped } result = verdict::passed;
    std::string detail;  // what failed, or why skipped
};

// The names of the cases that apply to a strategy offering `caps` whose locks span processes or
// not (strategy_descriptor::spans_processes), in the order run() runs them.
std::vector<std::string> case_names(capability caps, bool spans_processes);

// Runs the cases, writing one line per case to `log` when it is not null. Throws only when the
// strategy cannot be set up at all (config_error: a plugin refused, options rejected).
std::vector<outcome> run(const subject& s, std::ostream* log = nullptr);

// Runs the case `name` alone (a case that does not apply is skipped, with why; an unknown name
// fails). Throws as run() does.
outcome run_case(const subject& s, const std::string& name, std::ostream* log = nullptr);

// True when no case failed.
bool all_passed(const std::vector<outcome>& outcomes);

}  // namespace locksmith::conformance
