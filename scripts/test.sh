#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite, as README.md gives it and as CI runs it:
# installs what is missing (Debian 12), builds everything, starts the test servers, runs every
# CTest suite, and stops the servers again, also on failure.
#
#   scripts/test.sh [extra ctest arguments]      e.g. scripts/test.sh -L unit
#
# Environment: BUILD_DIR (default build, the README's quick-start directory: the library and
# the command it built are reused, the tests are added; a directory configured already keeps its
# generator and its benchmark setting), JOBS (default 2), and the LOCKSMITH_TEST_* endpoints of
# `scripts/services.sh env`: when LOCKSMITH_TEST_REDIS_URL is set, the servers are the caller's
# (as in .ci/run, which starts them once for every step) and are neither started nor stopped here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-2}

"$root/scripts/install-deps.sh" "$root/scripts/packages.txt" "$root/scripts/packages-servers.txt"

bench=(-DLOCKSMITH_BUILD_BENCH=OFF)
[ ! -f "$build/CMakeCache.txt" ] || bench=()
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSMITH_BUILD_TESTS=ON \
  -DLOCKSMITH_BUILD_EXAMPLES=ON "${bench[@]}"
cmake --build "$build" -j "$jobs"

if [ -z "${LOCKSMITH_TEST_REDIS_URL:-}" ] && [ -x "$root/scripts/services.sh" ]; then
  trap '"$root/scripts/services.sh" stop' EXIT
  "$root/scripts/services.sh" start
  # The endpoints of the servers just started, for the integration tests.
  eval "$("$root/scripts/services.sh" env)"
fi

# CTest starts the longest tests first when it knows their times from an earlier run (the build's
# Testing/Temporary/CTestCostData.txt, which every run updates); a fresh build knows none, and a
# 90 s suite that starts last holds the step up alone: the times of a CI run are checked in.
costs=$build/Testing/Temporary/CTestCostData.txt
[ -f "$costs" ] || { mkdir -p "${costs%/*}" && grep -v '^#' "$root/tests/ctest-costs.txt" >"$costs"; }
rc=0
ctest --test-dir "$build" --output-on-failure --timeout 600 "$@" || rc=$?
# CTest's summary says "Skipped" but not why: the reasons, one line each.
grep -h '^SKIPPED ' "$build/Testing/Temporary/LastTest.log" || true
exit "$rc"
