// The strategies the conformance and multi-process suites run against, with the options each
// needs. Adding a strategy adds one entry in strategies_under_test.cpp.
#pragma once

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
};

// Every built-in strategy of this build that the suites should cover.
std::vector<strategy_under_test> strategies_under_test();

}  // namespace locksmith::test
