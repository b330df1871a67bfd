// SPDX-License-Identifier: MIT
// What the tests need from their environment: server endpoints and the CI switch.
#pragma once

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

namespace locksmith::test {

// True when the CI environment variable is "true": a test that cannot reach what it needs
// must then fail instead of being skipped.
bool running_in_ci();

// The value of an environment variable, or nullopt when unset or empty.
std::optional<std::string> env(const char* name);

// How long a test waits for what must happen promptly (a wake-up after a release, a grant that is
// due, a child that should finish): `safety_net`, which is generous so that a loaded machine does
// not fail the test, or less when LOCKSMITH_TEST_PATIENCE (whole seconds) says so. The mutation
// check sets it: a fault that stops a wake-up then costs those seconds instead of a minute, and
// its baseline run shows that the shorter wait still passes on the unchanged code.
std::chrono::seconds patience(std::chrono::seconds safety_net);

// Sets (or, with nullopt, unsets) an environment variable for one scope.
struct scoped_env {
    std::string name;
    std::optional<std::string> old;
    scoped_env(std::string n, const std::optional<std::string>& value) : name(std::move(n)) {
        if (const char* v = std::getenv(name.c_str())) old = v;
        if (value)
            ::setenv(name.c_str(), value->c_str(), 1);
        else
            ::unsetenv(name.c_str());
    }
    ~scoped_env() {
        if (old)
            ::setenv(name.c_str(), old->c_str(), 1);
        else
            ::unsetenv(name.c_str());
    }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;
};

}  // namespace locksmith::test
