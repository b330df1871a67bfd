#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What the etcd strategy's kept leases (issue 24: a released key's lease serves the store's next
# acquisition) change, beside the build before them, in one run on one private etcd member
# (plain http, pinned to the last CPU; the clients to the others):
#   1. uncontended lock+unlock pairs/s (locksmith_bench scenario 1), beside python3-etcd3's
#      Etcd3Client.lock() and tooz's etcd3 driver (bench/peers/python_lock.py);
#   2. one name, 1, 4 and 8 processes, pairs/s in all (locksmith_bench scenario 2).
# Rounds alternate the rows, so that the machine's load falls on all of them; medians.
# Prints a Markdown report on stdout (bench/etcd-lease/RESULTS.md holds the last one).
#
#   BASE_BENCH=/path/to/old/locksmith_bench bench/etcd-lease/run.sh [ROUNDS]   (default 5)
#   needs a build with the bench (BUILD_DIR, default build); etcd, /usr/bin/python3 with
#   python3-etcd3 and python3-tooz.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
bench=$build/bench/harness/locksmith_bench
base=${BASE_BENCH:?set BASE_BENCH to the locksmith_bench of the build to compare with}
port=${LOCKSMITH_BENCH_ETCD_LEASE_PORT:-32679}
[ -x "$bench" ] && [ -x "$base" ] || { echo "build locksmith_bench in $build" >&2; exit 1; }
cpus=$(nproc)
server_cpu=$((cpus - 1))
client_cpus=0-$((cpus > 1 ? cpus - 2 : 0))

work=$(mktemp -d)
etcd_pid=""
cleanup() {
  [ -z "$etcd_pid" ] || kill "$etcd_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

url=http://127.0.0.1:$port
taskset -c "$server_cpu" etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls "$url" --advertise-client-urls "$url" \
  --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
  --initial-cluster "bench=http://127.0.0.1:$((port + 1))" --log-level error >"$work/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 1 100); do
  etcdctl --endpoints="$url" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
export LOCKSMITH_TEST_ETCD=$url

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
figure() { /usr/bin/python3 -c 'import json,sys; f=json.load(sys.stdin); f=f.get("figures", f); print(round(f[sys.argv[1]]))' "$1"; }
on_clients() { taskset -c "$client_cpus" "$@"; }

declare -A runs
for r in $(seq 1 "$rounds"); do
  for b in base ours; do
    exe=$bench
    [ $b = base ] && exe=$base
    runs[$b-s1]+="$(on_clients "$exe" --strategy etcd --scenario 1 --seconds 2 --only ours --dir "$work/b" --id "b$$" | figure ours) "
    for p in 1 4 8; do
      runs[$b-p$p]+="$(on_clients "$exe" --strategy etcd --scenario 2 --procs $p --seconds 8 --dir "$work/b" --id "b$$" | figure one_name_p$p) "
    done
  done
  for peer in etcd3 tooz-etcd3; do
    runs[$peer]+="$(on_clients /usr/bin/python3 "$root/bench/peers/python_lock.py" "$peer" 600 | figure pairs_per_s) "
  done
done
m() { tr ' ' '\n' <<<"${runs[$1]}" | grep . | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

echo "## Run"
echo
echo "- date: $(date -u +%FT%TZ), command: \`BASE_BENCH=… bench/etcd-lease/run.sh $rounds\`, commit $(git -C "$root" rev-parse --short=12 HEAD) (base: the build before it)"
echo "- machine: $cpus CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- etcd $(etcd --version | head -1 | awk '{print $3}'), one member on CPU $server_cpu, clients on CPUs $client_cpus; build: $(grep -m1 CMAKE_BUILD_TYPE "$build/CMakeCache.txt" | cut -d= -f2); medians of $rounds rounds"
echo
echo "## 1. Uncontended lock+unlock pairs/s"
echo
echo "| row | pairs/s | ÷ python3-etcd3 | ÷ tooz etcd3 |"
echo "|---|---:|---:|---:|"
for row in base-s1 ours-s1 etcd3 tooz-etcd3; do
  echo "| $row | $(m $row) | $(ratio "$(m $row)" "$(m etcd3)") | $(ratio "$(m $row)" "$(m tooz-etcd3)") |"
done
echo
echo "## 2. One name, N processes, pairs/s in all"
echo
echo "| build | 1 | 4 | 8 | 4 ÷ 1 | 8 ÷ 1 |"
echo "|---|---:|---:|---:|---:|---:|"
for b in base ours; do
  echo "| $b | $(m $b-p1) | $(m $b-p4) | $(m $b-p8) | $(ratio "$(m $b-p4)" "$(m $b-p1)") | $(ratio "$(m $b-p8)" "$(m $b-p1)") |"
done
echo
echo "Raw runs: $(for k in "${!runs[@]}"; do printf '%s: %s; ' "$k" "${runs[$k]}"; done)"
