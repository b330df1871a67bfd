// SPDX-License-Identifier: MIT
// Skipped cases made visible. Boost.Test counts a skipped case as passed and exits 0, so CTest
// would say "Passed" for a suite that never reached its server. Every test executable's main()
// is run_tests(): it collects what was skipped (a precondition that failed, or skip_case()),
// prints each with its reason, and exits with skip_exit_code when nothing failed but something
// was skipped, which CTest shows as "Skipped" (SKIP_RETURN_CODE, tests/CMakeLists.txt). A
// failure keeps its own exit code. Under CI=true a skip is a failure: CI provides the servers
// and root, so a skip there means something it should test did not run.
#pragma once

#include <optional>
#include <string>

#include "support/child_process.hpp"

namespace locksmith::test {

// CTest's SKIP_RETURN_CODE for every test executable (the automake convention).
inline constexpr int skip_exit_code = 77;

// The running case cannot do its checks here (`why`: what is missing and how to provide it).
// Records the skip and returns, so the caller returns too; under CI=true it fails the case.
void skip_case(const std::string& why);

// `nobody` (another_local_user), or nullopt after skip_case() with the reason (not root, no
// such user); callers return on nullopt.
std::optional<local_user> another_local_user_or_skip();

// main() of every test executable: Boost.Test's unit_test_main with the skip report.
int run_tests(bool (*init)(), int argc, char* argv[]);

}  // namespace locksmith::test
