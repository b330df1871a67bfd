// SPDX-License-Identifier: MIT
// Where the tests find the tree's files and the build's programs (scripts/services.sh, doc/, the
// locksmith command, the probe plugins). One small .cpp that CMake generates defines them
// (tests/CMakeLists.txt: generated/test_paths.cpp), not compile definitions: an absolute path on
// a compile command makes every file of that target miss ccache in a clone at another path
// (CCACHE_BASEDIR rewrites only the paths that are arguments of their own), so CI's fresh clone
// recompiled each such test; now that one file is all that differs.
#pragma once

#include <string>

namespace locksmith::test {

// <source tree>/relative, e.g. source_path("scripts/services.sh").
std::string source_path(const std::string& relative);
// <build tree>/relative, e.g. build_path("doc/locksmith.1").
std::string build_path(const std::string& relative);
// The locksmith command of this build; "" in a build without it.
std::string cli_path();

}  // namespace locksmith::test
