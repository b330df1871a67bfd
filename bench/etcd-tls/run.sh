#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What TLS costs the etcd strategy, and what OpenSSL costs beside libcurl (issue 24): on one
# private etcd member that listens on both http:// and https:// (client certificates required on
# the https one), so that the two differ only by TLS:
#   1. uncontended lock+unlock pairs/s, one keep-alive connection (locksmith_bench scenario 1:
#      rows etcd and etcd-tls; etcd-cluster too, on services.sh's 3-member TLS cluster, when
#      LOCKSMITH_TEST_ETCD_CLUSTER is set), beside python3-etcd3's lock (etcd3_peer.py, gRPC);
#   1b. contended: one name, 4 processes (locksmith_bench scenario 2 --procs 4), beside the same
#      with python3-etcd3 (etcd3_peer.py);
#   2. time to first grant: a whole `locksmith run -n NAME -- true` (start, connect, handshake,
#      status request, grant, release, exit), median of N runs, beside a whole `etcdctl lock NAME
#      true` (Go, gRPC); idle, and while 4 processes contend another name on the same member;
#   3. the cost of loading the TLS library in a process: dlopen of libssl.so.3 vs libcurl.so.4
#      (what "libcurl opened on first use" would pay), median of N fresh processes.
# Prints a Markdown report on stdout (bench/etcd-tls/RESULTS.md holds the last one).
#
#   bench/etcd-tls/run.sh [N]     N runs per figure (default 30); needs a build with the bench
#                                 (BUILD_DIR, default build) and services.sh's certificates
#                                 (LOCKSMITH_TEST_TLS_DIR: `scripts/services.sh start` with certs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
runs=${1:-30}
tls=${LOCKSMITH_TEST_TLS_DIR:?run scripts/services.sh start and eval its env (certs)}
port=${LOCKSMITH_BENCH_ETCD_TLS_PORT:-32579}
bench=$build/bench/harness/locksmith_bench
cli=$build/cli/locksmith
[ -x "$bench" ] && [ -x "$cli" ] || { echo "build locksmith_bench and locksmith_cli in $build" >&2; exit 1; }

work=$(mktemp -d)
etcd_pid=""
cleanup() {
  [ -z "$etcd_pid" ] || kill "$etcd_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

plain=http://127.0.0.1:$port
secure=https://127.0.0.1:$((port + 1))
etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls "$plain,$secure" --advertise-client-urls "$plain" \
  --listen-peer-urls "http://127.0.0.1:$((port + 2))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((port + 2))" \
  --initial-cluster "bench=http://127.0.0.1:$((port + 2))" \
  --cert-file "$tls/server.pem" --key-file "$tls/server.key" \
  --client-cert-auth --trusted-ca-file "$tls/ca.pem" --log-level error >"$work/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 1 100); do
  etcdctl --endpoints="$plain" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done

. "$root/bench/tls-lib.sh"

echo "## Run"
echo
echo "- date: $(date -u +%FT%TZ), command: \`bench/etcd-tls/run.sh $runs\`, commit $(git -C "$root" rev-parse --short=12 HEAD)"
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- etcd $(etcd --version | head -1 | awk '{print $3}'), one member on 127.0.0.1 (client and server share the CPUs); $(openssl version | cut -d' ' -f1-2); build: $(grep -m1 CMAKE_BUILD_TYPE "$build/CMakeCache.txt" | cut -d= -f2)"
echo

peer=$root/bench/etcd-tls/etcd3_peer.py
peer_row() {  # peer_row ENDPOINT PROCS SHOWN: python3-etcd3, median of 5 runs of 2 s
  local out=()
  for _ in 1 2 3 4 5; do out+=("$(/usr/bin/python3 "$peer" "$1" "$2" 2)"); done
  echo "| python3-etcd3 | $3 | $(printf '%s\n' "${out[@]}" | median) |"
}

echo "## 1. Uncontended lock+unlock pairs/s (one connection, kept alive)"
echo
echo "| row | endpoint | pairs/s (median of 5 runs of 2 s) |"
echo "|---|---|---:|"
row() {
  local id=$1 shown=$2 out=()
  for _ in 1 2 3 4 5; do
    out+=("$("$bench" --strategy "$id" --scenario 1 --seconds 2 --only ours --dir "$work/b" --id "b$$" |
      /usr/bin/python3 -c 'import json,sys; f=json.load(sys.stdin)["figures"]; print(round(f.get("ours", f.get("pairs_per_s", 0))))')")
  done
  echo "| $id | $shown | $(printf '%s\n' "${out[@]}" | median) |"
}
LOCKSMITH_TEST_ETCD=$plain row etcd "$plain"
LOCKSMITH_TEST_ETCD_TLS=$secure row etcd-tls "$secure (client certificate)"
if [ -n "${LOCKSMITH_TEST_ETCD_CLUSTER:-}" ]; then
  row etcd-cluster "services.sh etcd-cluster: 3 members, TLS"
fi
peer_row "$plain" 1 "$plain"
peer_row "$secure" 1 "$secure (client certificate)"
echo

echo "## 1b. Contended: one name, 4 processes, lock+unlock pairs/s in all"
echo
echo "| row | endpoint | pairs/s (median of 5 runs of 1 s) |"
echo "|---|---|---:|"
contended() {
  local id=$1 shown=$2 out=()
  for _ in 1 2 3 4 5; do
    out+=("$("$bench" --strategy "$id" --scenario 2 --procs 4 --seconds 8 --dir "$work/b" --id "b$$" |
      /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["figures"]["one_name_p4"]))')")
  done
  echo "| $id | $shown | $(printf '%s\n' "${out[@]}" | median) |"
}
LOCKSMITH_TEST_ETCD=$plain contended etcd "$plain"
LOCKSMITH_TEST_ETCD_TLS=$secure contended etcd-tls "$secure (client certificate)"
peer_row "$plain" 4 "$plain"
peer_row "$secure" 4 "$secure (client certificate)"
echo

echo "## 2. Time to first grant: \`locksmith run -n NAME -- true\`, whole process (ms, median of $runs)"
echo
cat >"$work/plain.json" <<JSON
{"strategies": {"etcd": {"options": {"endpoints": "$plain", "prefix": "bench-tls/"}}}}
JSON
cat >"$work/tls.json" <<JSON
{"strategies": {"etcd": {"options": {"endpoints": "$secure", "prefix": "bench-tls/",
  "ca_file": "$tls/ca.pem", "cert_file": "$tls/client.pem", "key_file": "$tls/client.key"}}}}
JSON
# etcdctl_lock ENDPOINT RUNS [etcdctl options]: the median ms of a whole `etcdctl lock NAME true`.
etcdctl_lock() {
  local endpoint=$1 n=$2 i t0 t1
  shift 2
  for i in $(seq 1 "$n"); do
    t0=$(date +%s%N)
    ETCDCTL_API=3 etcdctl --endpoints="$endpoint" "$@" lock "bench-etcdctl-$i" true >/dev/null
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
  done | median | awk '{printf "%.2f", $1 / 1000}'
}
first_grants() {  # one row per endpoint and tool
  echo "| http | $(first_grant "$cli" "$work/plain.json" etcd "$runs") | $(etcdctl_lock "$plain" "$runs") |"
  echo "| https, client certificate | $(first_grant "$cli" "$work/tls.json" etcd "$runs") | $(etcdctl_lock "$secure" "$runs" --cacert "$tls/ca.pem" --cert "$tls/client.pem" --key "$tls/client.key") |"
}
echo "Idle member:"
echo
echo "| endpoint | locksmith run, ms | etcdctl lock, ms |"
echo "|---|---:|---:|"
first_grants
echo
echo "While 4 processes contend one other name over TLS (locksmith_bench scenario 2, etcd-tls):"
echo
LOCKSMITH_TEST_ETCD_TLS=$secure "$bench" --strategy etcd-tls --scenario 2 --procs 4 --seconds 3600 \
  --dir "$work/busy" --id "busy$$" >/dev/null 2>&1 &
load_pid=$!
sleep 2
echo "| endpoint | locksmith run, ms | etcdctl lock, ms |"
echo "|---|---:|---:|"
first_grants
pkill -P "$load_pid" 2>/dev/null || true  # its contending children first, then itself
kill -- "$load_pid" 2>/dev/null || true
wait "$load_pid" 2>/dev/null || true
echo

echo "## 3. Loading the TLS library in a fresh process (dlopen, ms, median of $runs)"
echo
cat >"$work/load.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
int main(int argc, char** argv) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (!h) return 1;
    printf("%ld\n", (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000);
    return argc > 2;
}
C
cc -O2 -o "$work/load" "$work/load.c" -ldl
echo "| library | shared libraries it loads | ms |"
echo "|---|---:|---:|"
for lib in libssl.so.3 libcurl.so.4; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  count=$(ldd "$path" | grep -c '=>')
  ms=$(for _ in $(seq 1 "$runs"); do "$work/load" "$lib"; done | median | awk '{printf "%.2f", $1 / 1000}')
  echo "| $lib | $((count + 1)) | $ms |"
done
