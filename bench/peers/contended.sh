#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs PROCESSES copies of a peer's --contended mode on one name, started together, and prints
# their grants per second together as one JSON line (the peers of bench/permits/RESULTS.md).
#
#   bench/peers/contended.sh PROCESSES SECONDS HOLD_MS -- PEER COMMAND BEFORE --contended...
#   e.g. bench/peers/contended.sh 8 3 1 -- php bench/peers/symfony_semaphore.php 4
#        bench/peers/contended.sh 8 3 1 -- /usr/bin/python3 bench/peers/python_lock.py kazoo-semaphore-4
set -euo pipefail
processes=$1 seconds=$2 hold=$3
shift 4
name="locksmith-bench-contended-$$"
start=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$processes"); do
  "$@" --contended "$name" "$start" "$seconds" "$hold" >>"$out" &
done
wait
python3 -c '
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
total = sum(r["pairs"] for r in runs)
print(json.dumps({"peer": runs[0]["peer"], "processes": len(runs),
                  "grants_per_s": total / float(sys.argv[2])}))' "$out" "$seconds"
