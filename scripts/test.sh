#!/usr/bin/env bash
# The whole test suite, as README.md gives it and as CI runs it:
# installs what is missing (Debian 12), builds everything, starts the test servers, runs every
# CTest suite, and stops the servers again, also on failure.
#
#   scripts/test.sh [extra ctest arguments]      e.g. scripts/test.sh -L unit
#
# Environment: BUILD_DIR (default build, the README's quick-start directory: the library and
# the command it built are reused, the tests are added), JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-2}

"$root/scripts/install-deps.sh" "$root/scripts/packages.txt" "$root/scripts/packages-servers.txt"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSMITH_BUILD_TESTS=ON \
  -DLOCKSMITH_BUILD_EXAMPLES=ON -DLOCKSMITH_BUILD_BENCH=OFF
cmake --build "$build" -j "$jobs"

if [ -x "$root/scripts/services.sh" ]; then
  trap '"$root/scripts/services.sh" stop' EXIT
  "$root/scripts/services.sh" start
  # The endpoints of the servers just started, for the integration tests.
  eval "$("$root/scripts/services.sh" env)"
fi

rc=0
ctest --test-dir "$build" --output-on-failure --timeout 600 "$@" || rc=$?
# CTest's summary says "Skipped" but not why: the reasons, one line each.
grep -h '^SKIPPED ' "$build/Testing/Temporary/LastTest.log" || true
exit "$rc"
