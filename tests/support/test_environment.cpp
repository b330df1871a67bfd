#include "support/test_environment.hpp"

#include <cstdlib>

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

}  // namespace locksmith::test
