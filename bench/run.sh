#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The benchmark harness, in one command (issue 7):
#
#   bench/run.sh [--quick|--full|--smoke]   (default --quick; quick < 3.5 minutes once built)
#
# --smoke is CI's: every scenario, strategy and peer once over the shortest spans, to show they
# still run; it writes its result and report under the build directory, not bench/.
#
# Builds in Release into its own build directory (LOCKSMITH_BENCH_BUILD, default
# build-bench-harness; a directory given there that is configured already is used with its own
# settings, as CI does with its one build), starts redis, memcached, PostgreSQL, MariaDB, ZooKeeper, etcd and the three
# quorum redis-servers (for `combined`) with scripts/services.sh
# when they are not running (and stops afterwards only those it started; scripts/services.sh's
# variables LOCKSMITH_SERVICES_DIR and LOCKSMITH_*_PORT choose which servers: set them to use
# servers of your own), runs every scenario for every strategy that is built and reachable, plus
# the peers, and writes bench/results/<date>-<mode>.json, the charts beside it, and
# bench/README.md. Fails on errors only, never on figures.
set -euo pipefail

mode=quick
case "${1:-}" in
  ""|--quick) mode=quick ;;
  --full) mode=full ;;
  --smoke) mode=smoke ;;
  -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "usage: bench/run.sh [--quick|--full|--smoke]" >&2; exit 64 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${LOCKSMITH_BENCH_BUILD:-build-bench-harness}
py=/usr/bin/python3
[[ -x $py ]] || py=python3

mkdir -p "$build"
if [[ -n ${LOCKSMITH_BENCH_BUILD:-} && -f $build/CMakeCache.txt ]]; then
  echo "bench: building the harness in $build (its own settings)" >&2
  cmake -S . -B "$build" -DLOCKSMITH_BUILD_BENCH=ON -DLOCKSMITH_BUILD_CLI=ON \
    >"$build/bench-configure.log" 2>&1 || { cat "$build/bench-configure.log" >&2; exit 1; }
else
  echo "bench: building ($build, Release)" >&2
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOCKSMITH_BUILD_TESTS=OFF \
    -DLOCKSMITH_BUILD_EXAMPLES=OFF -DLOCKSMITH_BUILD_BENCH=ON -DLOCKSMITH_BUILD_CLI=ON \
    >"$build/bench-configure.log" 2>&1 || { cat "$build/bench-configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j2 >"$build/bench-build.log" 2>&1 ||
  { tail -40 "$build/bench-build.log" >&2; exit 1; }

# Servers: start what is not running; remember what we started, stop only that at the end.
started=()
if [[ -x scripts/services.sh ]]; then
  # Read the status into a variable first: `status | grep -q` can kill the writer with SIGPIPE,
  # which under pipefail would look like "not running" and make us stop a server we did not start.
  before=$(scripts/services.sh status 2>/dev/null || true)
  for svc in redis memcached postgres mariadb zookeeper etcd redis-quorum; do
    # redis-quorum is three servers (redis-quorum-0..2): all must run.
    if [[ $svc == redis-quorum ]]; then
      running=$(grep -c '^redis-quorum-[0-9]: running' <<<"$before" || true)
      [[ $running == 3 ]] && continue
    elif grep -q "^$svc: running" <<<"$before"; then
      continue
    fi
    if LOCKSMITH_SERVICES=$svc scripts/services.sh start >&2; then
      started+=("$svc")
    else
      echo "bench: $svc could not be started; its strategy is skipped" >&2
    fi
  done
  cleanup() {
    for svc in "${started[@]+"${started[@]}"}"; do LOCKSMITH_SERVICES=$svc scripts/services.sh stop >&2 || true; done
  }
  trap cleanup EXIT
  eval "$(scripts/services.sh env)"
  # A server that is not up must not be benchmarked: drop its endpoint.
  after=$(scripts/services.sh status 2>/dev/null || true)
  grep -q '^redis: running' <<<"$after" || unset LOCKSMITH_TEST_REDIS_URL
  grep -q '^memcached: running' <<<"$after" || unset LOCKSMITH_TEST_MEMCACHED
  grep -q '^postgres: running' <<<"$after" || unset LOCKSMITH_TEST_POSTGRES_DSN
  grep -q '^mariadb: running' <<<"$after" || unset LOCKSMITH_TEST_MARIADB_DSN
  grep -q '^zookeeper: running' <<<"$after" || unset LOCKSMITH_TEST_ZOOKEEPER
  grep -q '^etcd: running' <<<"$after" || unset LOCKSMITH_TEST_ETCD
  [[ $(grep -c '^redis-quorum-[0-9]: running' <<<"$after" || true) == 3 ]] ||
    unset LOCKSMITH_TEST_REDIS_QUORUM
fi

out=()
[[ $mode != smoke ]] || out=(--results "$build/bench-smoke" --report "$build/bench-smoke/README.md")
"$py" bench/harness/run_bench.py --mode "$mode" --build "$build" --command "bench/run.sh --$mode" "${out[@]}"
