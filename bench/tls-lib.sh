# SPDX-License-Identifier: MIT
# Sourced by the TLS cost benchmarks (bench/etcd-tls/run.sh, bench/redis-tls/run.sh): what they
# measure alike.

# median: the median of the numbers on stdin, one a line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# first_grant CLI CONFIG STRATEGY RUNS: the median time (ms, 2 decimals) of a whole
# `locksmith run -n NAME -- true` with CONFIG: start, connect (and handshake), grant, release, exit.
first_grant() {
  local cli=$1 config=$2 strategy=$3 runs=$4 i t0 t1
  for i in $(seq 1 "$runs"); do
    t0=$(date +%s%N)
    "$cli" --config "$config" run --strategy "$strategy" -n "bench-$i" -- true
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
  done | median | awk '{printf "%.2f", $1 / 1000}'
}
