#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Contention against CPU placement (issue 15): scenario 2 (one name, 1 / 2 / 4 / 8 processes) of
# the given strategies with the processes and the server placed three ways on a 2-CPU machine:
#
#   free    as the scheduler likes (what bench/run.sh measures)
#   split   the server on CPU 1, every client process on CPU 0: client and server never share a
#           core (for a local strategy: the processes spread over both CPUs, as free)
#   same    server and clients all on CPU 0 (for a local strategy: every process on one CPU)
#
#   bench/placement.sh [--rounds N] [--seconds S] STRATEGY...
#
# Rounds alternate the placements, so load from elsewhere hits each alike. Needs the Release build
# of bench/run.sh (LOCKSMITH_BENCH_BUILD, default build-bench-harness) and, for a remote strategy,
# its server started by scripts/services.sh (pinned through its PID file; the pinning is undone
# at the end; a strategy whose server it did not start is skipped, with a line on stderr). Prints
# one tab-separated line per run: placement, strategy, processes, pairs/s (ours, and the raw loop
# where scenario 2 has one).
set -euo pipefail

rounds=3
seconds=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "usage: bench/placement.sh [--rounds N] [--seconds S] STRATEGY..." >&2; exit 64; }
if [[ $(nproc) -lt 2 ]]; then
  for strategy in "$@"; do echo "placement: $strategy skipped: one CPU, nothing to place" >&2; done
  exit 0
fi

root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOCKSMITH_BENCH_BUILD:-build-bench-harness}
[[ $build == /* ]] || build=$root/$build
bench=$build/bench/harness/locksmith_bench
[[ -x $bench ]] || { echo "placement: build first (bench/run.sh builds $bench)" >&2; exit 1; }
state_dir=${LOCKSMITH_SERVICES_DIR:-/tmp/locksmith-services}
eval "$("$root/scripts/services.sh" env)"

# The PID file of the server a strategy talks to (none for the local strategies).
server_of() {
  case $1 in
    redis) echo redis ;;
    memcached) echo memcached ;;
    pg_advisory|sql-postgresql) echo postgres ;;
    sql-mariadb) echo mariadb ;;
    zookeeper) echo zookeeper ;;
    etcd) echo etcd ;;
    *) echo "" ;;
  esac
}

# Child PIDs of $1, from /proc (procps may be missing).
children_of() {
  local parent=$1 stat line fields
  for stat in /proc/[0-9]*/stat; do
    read -r line <"$stat" 2>/dev/null || continue
    read -r -a fields <<<"${line##*) }"  # state, ppid, ... (the name before ") " may hold spaces)
    [[ ${fields[1]} == "$parent" ]] && { stat=${stat#/proc/}; echo "${stat%/stat}"; }
  done
  return 0
}

# Pins every thread of the server and of its children (PostgreSQL forks a backend per
# connection: pinning the postmaster covers the connections opened afterwards).
pin_server() {
  local pid=$1 cpus=$2 child
  taskset -a -pc "$cpus" "$pid" >/dev/null
  for child in $(children_of "$pid"); do taskset -a -pc "$cpus" "$child" >/dev/null 2>&1 || true; done
}

all_cpus=0-$(($(nproc) - 1))
pinned=()
unpin_all() { local pid; for pid in "${pinned[@]}"; do pin_server "$pid" "$all_cpus" 2>/dev/null || true; done; }
dir=$(mktemp -d)
trap 'unpin_all; rm -rf "$dir"' EXIT
for ((round = 1; round <= rounds; round++)); do
  for strategy in "$@"; do
    server=$(server_of "$strategy")
    pid=""
    if [[ -n $server ]]; then
      pid=$(cat "$state_dir/$server.pid" 2>/dev/null || true)
      if [[ -z $pid || ! -d /proc/$pid ]]; then
        echo "placement: $strategy skipped: its server was not started by scripts/services.sh, so it cannot be pinned" >&2
        continue
      fi
      pinned+=("$pid")
    fi
    for placement in free split same; do
      clients=()
      case $placement in
        free) [[ -z $pid ]] || pin_server "$pid" "$all_cpus" ;;
        split) [[ -z $pid ]] && continue; pin_server "$pid" 1; clients=(taskset -c 0) ;;
        same) [[ -z $pid ]] || pin_server "$pid" 0; clients=(taskset -c 0) ;;
      esac
      for procs in 1 2 4 8; do
        out=$("${clients[@]}" "$bench" --strategy "$strategy" --scenario 2 --procs "$procs" \
          --seconds "$seconds" --dir "$dir" --id "placement$round")
        ours=$(grep -o "\"one_name_p$procs\":[0-9.]*" <<<"$out" | cut -d: -f2)
        raw=$(grep -o "\"raw_one_name_p$procs\":[0-9.]*" <<<"$out" | cut -d: -f2 || true)
        printf '%s\t%s\t%s\t%.0f\t%s\n' "$placement" "$strategy" "$procs" "$ours" \
          "${raw:+$(printf '%.0f' "$raw")}"
      done
    done
    [[ -z $pid ]] || pin_server "$pid" "$all_cpus"
  done
done
