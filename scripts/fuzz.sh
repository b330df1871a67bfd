#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets (tests/fuzz: one per parser of outside input) with
# AddressSanitizer and UndefinedBehaviorSanitizer, every finding fatal, and runs each for
# SECONDS (default 30), one after the other. Fails when any target finds anything: a crash, a
# sanitizer report, a broken property, a leak, an input slower than 10 s; the input that did it
# is kept and named (run the target on it to reproduce: <build>/tests/fuzz/fuzz_<target> <file>).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 60 config key
#
# Each target starts from its seed corpus, tests/fuzz/corpus/<target>/ (which it runs first:
# regression inputs fail at once), and adds what it finds to <build>/fuzz-corpus/<target>/, kept
# between runs so that later runs start further. The build has its own directory (clang, the
# instrumentation); ccache is used as in every build.
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default 2), CXX (default clang++-14),
# FUZZ_ARGS (more libFuzzer flags for every target; CI's "-seed=1 -runs=N" makes a run repeat
# exactly, so that CI fails on a regression, not on the luck of a random walk).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${JOBS:-2}
seconds=${1:-30}
[ $# -gt 0 ] && shift
case $seconds in
  '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac

"$root/scripts/install-deps.sh" "$root/scripts/packages.txt" "$root/scripts/packages-fuzz.txt"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${CXX:-clang++-14}" -DLOCKSMITH_BUILD_FUZZ=ON \
  -DLOCKSMITH_BUILD_TESTS=OFF -DLOCKSMITH_BUILD_EXAMPLES=OFF -DLOCKSMITH_BUILD_BENCH=OFF \
  -DLOCKSMITH_BUILD_CLI=OFF -DLOCKSMITH_BUILD_CONFORMANCE=OFF >/dev/null
if [ $# -gt 0 ]; then
  targets=("$@")
  # Only the targets named (scripts/mutants.sh rebuilds one per fault).
  cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"
else
  cmake --build "$build" -j "$jobs" --target locksmith_fuzz
  mapfile -t targets < "$build/tests/fuzz/targets.txt"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
out="$build/fuzz-runs"
mkdir -p "$out"
failed=()
printf '%-18s %10s %8s %8s %8s  %s\n' target executions exec/s cov features result
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  seeds="$root/tests/fuzz/corpus/$t"
  [ -x "$exe" ] || { echo "fuzz.sh: no target fuzz_$t (not built here?)" >&2; failed+=("$t"); continue; }
  mkdir -p "$build/fuzz-corpus/$t" "$out/$t"
  # Only this run's findings: one reproducer per failed target, the one named below.
  rm -f "$out/$t"/crash-* "$out/$t"/leak-* "$out/$t"/timeout-* "$out/$t"/oom-* "$out/$t"/slow-unit-*
  log="$out/$t/log.txt"
  rc=0
  # -timeout: an input that takes 10 s is a finding (a hang); -rss_limit_mb: so is 2 GB.
  # shellcheck disable=SC2086
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${FUZZ_ARGS:-} \
    -artifact_prefix="$out/$t/" "$build/fuzz-corpus/$t" "$seeds" >"$log" 2>&1 || rc=$?
  # A target that fails on its first input prints no figures: '?'.
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -ao 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1 || true)
    result="FAILED: ${artifact:-no reproducer written} (log: $log)"
    failed+=("$t")
  fi
  printf '%-18s %10s %8s %8s %8s  %s\n' "$t" "${runs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" \
    "$result"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  for t in "${failed[@]}"; do
    [ -f "$out/$t/log.txt" ] || continue
    echo "--- $t: $(grep -a -m1 -E 'ERROR: |runtime error|FUZZ PROPERTY|terminate called|deadly signal' "$out/$t/log.txt" || true)" >&2
  done
  exit 1
fi
echo "fuzz.sh: no findings (${#targets[@]} targets, $seconds s each)"
