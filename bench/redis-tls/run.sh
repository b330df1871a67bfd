#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What TLS costs the redis strategy, and what its transport costs beside hiredis' own (issue 24):
# on one private redis-server that listens on a plain port and on a TLS port (client certificates
# required there), so that the two differ only by TLS:
#   1. uncontended lock+unlock pairs/s, one connection (locksmith_bench scenario 1: rows redis,
#      with the raw baseline beside it, a hiredis redisContext loop sending the same commands, and
#      redis-tls), taking turns run by run;
#   2. hand-over latency, holder's unlock() to a waiter's return (scenario 3, p50), both rows;
#   3. time to first grant: a whole `locksmith run -n NAME -- true` (start, connect, handshake,
#      script loads, grant, release, exit), median of N runs.
# Prints a Markdown report on stdout (bench/redis-tls/RESULTS.md holds the last one).
#
#   bench/redis-tls/run.sh [N]    N runs per figure of 3 (default 30); needs a build with the
#                                 bench (BUILD_DIR, default build) and services.sh's certificates
#                                 (LOCKSMITH_TEST_TLS_DIR: `scripts/services.sh start` with certs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
runs=${1:-30}
tls=${LOCKSMITH_TEST_TLS_DIR:?run scripts/services.sh start and eval its env (certs)}
port=${LOCKSMITH_BENCH_REDIS_TLS_PORT:-16597}
bench=$build/bench/harness/locksmith_bench
cli=$build/cli/locksmith
[ -x "$bench" ] && [ -x "$cli" ] || { echo "build locksmith_bench and locksmith_cli in $build" >&2; exit 1; }

work=$(mktemp -d)
redis_pid=""
cleanup() {
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

redis-server --bind 127.0.0.1 --port "$port" --tls-port "$((port + 1))" --protected-mode yes \
  --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key" \
  --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients yes \
  --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
plain=redis://127.0.0.1:$port/0
secure=rediss://127.0.0.1:$((port + 1))/0

. "$root/bench/tls-lib.sh"
# figure NAME DIGITS: a figure of the driver's JSON on stdin, rounded.
figure() { /usr/bin/python3 -c "import json,sys; f=json.load(sys.stdin)[\"figures\"]; v=f.get(\"$1\", 0); print(round(v, $2) if $2 else round(v))"; }

echo "## Run"
echo
echo "- date: $(date -u +%FT%TZ), command: \`bench/redis-tls/run.sh $runs\`, commit $(git -C "$root" rev-parse --short=12 HEAD)"
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(redis-server --version | awk '{print $1, $2, $3}'), one server on 127.0.0.1 (client and server share the CPUs); $(openssl version | cut -d' ' -f1-2); build: $(grep -m1 CMAKE_BUILD_TYPE "$build/CMakeCache.txt" | cut -d= -f2)"
echo

export LOCKSMITH_TEST_REDIS_URL=$plain LOCKSMITH_TEST_REDIS_TLS_URL=$secure
drive() {  # id scenario seconds [args]: the driver's JSON
  local id=$1 scenario=$2 seconds=$3
  shift 3
  "$bench" --strategy "$id" --scenario "$scenario" --seconds "$seconds" --dir "$work/b" --id "b$$" "$@"
}
ours_plain=() raw_plain=() ratio_plain=() ours_tls=() handover_plain=() handover_tls=()
for _ in 1 2 3 4 5; do
  out=$(drive redis 1 2)
  ours_plain+=("$(figure ours 0 <<<"$out")") raw_plain+=("$(figure raw 0 <<<"$out")")
  ratio_plain+=("$(figure ratio 3 <<<"$out")")
  ours_tls+=("$(drive redis-tls 1 2 --only ours | figure ours 0)")
  handover_plain+=("$(drive redis 3 1 | figure p50_ms 3)")
  handover_tls+=("$(drive redis-tls 3 1 | figure p50_ms 3)")
done
m() { printf '%s\n' "$@" | median; }

echo "## 1. Uncontended lock+unlock pairs/s (one connection, kept; median of 5 runs of 2 s)"
echo
echo "| row | endpoint | pairs/s |"
echo "|---|---|---:|"
echo "| raw hiredis (redisContext), the strategy's commands | $plain | $(m "${raw_plain[@]}") |"
echo "| redis (the strategy: hiredis' reader over the common stream) | $plain | $(m "${ours_plain[@]}") |"
echo "| redis-tls | $secure (client certificate) | $(m "${ours_tls[@]}") |"
echo
echo "redis / raw hiredis, median of the per-run ratios: $(m "${ratio_plain[@]}")"
echo

echo "## 2. Hand-over latency, p50 ms (scenario 3: 5 processes, median of 5 runs)"
echo
echo "| row | p50 ms |"
echo "|---|---:|"
echo "| redis | $(m "${handover_plain[@]}") |"
echo "| redis-tls | $(m "${handover_tls[@]}") |"
echo

echo "## 3. Time to first grant: \`locksmith run -n NAME -- true\`, whole process (ms, median of $runs)"
echo
cat >"$work/plain.json" <<JSON
{"strategies": {"redis": {"options": {"url": "$plain", "key_prefix": "bench-tls:"}}}}
JSON
cat >"$work/tls.json" <<JSON
{"strategies": {"redis": {"options": {"url": "$secure", "key_prefix": "bench-tls:",
  "ca_file": "$tls/ca.pem", "cert_file": "$tls/client.pem", "key_file": "$tls/client.key"}}}}
JSON
echo "| endpoint | ms |"
echo "|---|---:|"
echo "| redis:// | $(first_grant "$cli" "$work/plain.json" redis "$runs") |"
echo "| rediss://, client certificate | $(first_grant "$cli" "$work/tls.json" redis "$runs") |"
