// SPDX-License-Identifier: MIT
// The conformance cases for strategy authors: what every strategy must do, checked through the
// public API against any strategy a config can reach (built in, or from a plugin).
//
//   subject  the strategy under test: its name, its options, the plugins that provide it
//   outcome  one case: passed, failed (with what was seen) or skipped (with why)
//   run      runs every case that applies to the strategy's capabilities
//
// Installed as the library locksmith::conformance (CMake) and the program
// locksmith-conformance:  locksmith-conformance --plugin /path/libmine.so --strategy mine
//                          --options '{"directory": "/tmp/x"}'
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace locksmith::conformance {

struct subject {
    std::string strategy;
    nlohmann::json options;            // the strategy's options in the config (null = none)
    std::vector<std::string> plugins;  // the config's "plugins"
};

struct outcome {
    std::string name;
    enum class verdict { passed, failed, skipped } result = verdict::passed;
    std::string detail;  // what failed, or why skipped
};

// Runs the cases, writing one line per case to `log` when it is not null. Throws only when the
// strategy cannot be set up at all (config_error: a plugin refused, options rejected).
std::vector<outcome> run(const subject& s, std::ostream* log = nullptr);

// True when no case failed.
bool all_passed(const std::vector<outcome>& outcomes);

}  // namespace locksmith::conformance
