// What the tests need from their environment: server endpoints and the CI switch.
#pragma once

#include <optional>
#include <string>

namespace locksmith::test {

// True when the CI environment variable is "true": a test that cannot reach what it needs
// must then fail instead of being skipped.
bool running_in_ci();

// The value of an environment variable, or nullopt when unset or empty.
std::optional<std::string> env(const char* name);

}  // namespace locksmith::test
