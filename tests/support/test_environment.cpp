// SPDX-License-Identifier: MIT
#include "support/test_environment.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace locksmith::test {

bool running_in_ci() {
    auto value = env("CI");
    return value && *value == "true";
}

std::optional<std::string> env(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
}

std::chrono::seconds patience(std::chrono::seconds safety_net) {
    const auto value = env("LOCKSMITH_TEST_PATIENCE");
    if (!value) return safety_net;
    std::size_t used = 0;
    long seconds = 0;
    try {
        seconds = std::stol(*value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != value->size() || seconds < 1)
        throw std::invalid_argument(
            "LOCKSMITH_TEST_PATIENCE must be a whole number of seconds >= 1, not '" + *value + "'");
    return std::min(safety_net, std::chrono::seconds(seconds));
}

}  // namespace locksmith::test
