#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test suite under the sanitizers, each in a build of its own:
#
#   scripts/sanitize.sh asan [extra ctest arguments]   AddressSanitizer + UndefinedBehaviorSanitizer
#                                                      (build-asan): every suite, against the real
#                                                      test servers
#   scripts/sanitize.sh tsan [extra ctest arguments]   ThreadSanitizer (build-tsan): the unit,
#                                                      conformance, multi-process and hostile suites
#
# SANITIZE_LABELS="unit conformance ..." runs those CTest labels only, and builds only the targets
# they run (tests_<label>); CI's asan step runs unit, conformance and hostile so.
#
# Any report fails the run: every sanitizer stops the process at its first finding
# (-fno-sanitize-recover=all, halt_on_error), which the test sees as a failure. Suppressions
# (tests/sanitizers/*.supp) name third-party code only, each with its reason.
# Environment: SANITIZE_BUILD_DIR (default build-asan / build-tsan), JOBS (default 2),
# SANITIZE_BUILD_ONLY=1 (build, run nothing: CI builds while other steps run), and the servers as
# for scripts/test.sh (started and stopped here unless LOCKSMITH_TEST_REDIS_URL is set).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-}
case $kind in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
    suites=${SANITIZE_LABELS-} ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    suites=${SANITIZE_LABELS-unit conformance stress hostile} ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [extra ctest arguments]" >&2; exit 64 ;;
esac
shift
# With labels, only what those suites run is built (tests/CMakeLists.txt: tests_<label>), not
# the whole tree: the sanitizer builds are the slowest to compile and link.
labels=() targets=()
if [ -n "$suites" ]; then
  labels=(-L "^($(tr -s ' ' '|' <<<"$suites"))\$")
  read -ra suite_list <<<"$suites"
  targets=(--target "${suite_list[@]/#/tests_}")
fi
build=${SANITIZE_BUILD_DIR:-$root/build-$kind}
jobs=${JOBS:-2}
supp=$root/tests/sanitizers

"$root/scripts/install-deps.sh" "$root/scripts/packages.txt" "$root/scripts/packages-servers.txt"
# -O1 keeps the stacks readable and the run near the speed of the ordinary build's tests.
# gcc, not clang: the tests know a sanitizer build by __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__
# (a child with a memory limit, fork_child's count of the runtime's threads), which gcc defines
# and Debian's clang-14 does not. (CXX rather than CMAKE_CXX_COMPILER: a build directory made
# with another compiler name, c++, keeps it; a changed CMAKE_CXX_COMPILER makes CMake delete the
# cache and drop the other -D settings of that run, the sanitizer flags with them.)
CXX=g++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  -DLOCKSMITH_BUILD_TESTS=ON -DLOCKSMITH_BUILD_EXAMPLES=ON -DLOCKSMITH_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" "${targets[@]}"
[ "${SANITIZE_BUILD_ONLY:-0}" = 0 ] || exit 0

# The sanitizers' run-time options: stop at the first report, with a stack; leaks too.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:hard_rss_limit_mb=2048"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:hard_rss_limit_mb=2048:suppressions=$supp/tsan.supp"

if [ -z "${LOCKSMITH_TEST_REDIS_URL:-}" ] && [ -x "$root/scripts/services.sh" ]; then
  trap '"$root/scripts/services.sh" stop' EXIT
  "$root/scripts/services.sh" start
  eval "$("$root/scripts/services.sh" env)"
fi

# ThreadSanitizer (gcc-12's, clang-14's) maps its shadow at fixed addresses and dies with
# "unexpected memory mapping" when the kernel randomises mmap with more than 28 bits (some
# distributions set vm.mmap_rnd_bits=32): then the tests run without address randomisation.
run=()
if [ "$kind" = tsan ] && [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ]; then
  run=(setarch "$(uname -m)" -R)
fi

# The tests' times of a CI run, longest first (scripts/test.sh says why): the order under a
# sanitizer is much the same.
costs=$build/Testing/Temporary/CTestCostData.txt
[ -f "$costs" ] || { mkdir -p "${costs%/*}" && grep -v '^#' "$root/tests/ctest-costs.txt" >"$costs"; }
rc=0
"${run[@]}" ctest --test-dir "$build" --output-on-failure --timeout 900 "${labels[@]}" "$@" || rc=$?
grep -h '^SKIPPED ' "$build/Testing/Temporary/LastTest.log" || true
exit "$rc"
