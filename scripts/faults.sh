#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The full faults run (issue 25): every strategy under every single-host nemesis, checked from
# the resource's history by tests/faults (locksmith_faults), written as JSON and a Markdown table.
#
#   scripts/faults.sh [-s SECONDS] [-e SEED] [-o DIR] [-n NEMESES] [-v VIA] [STRATEGY...]
#
#   -s  seconds per cell (default 60; the issue's goal for the committed table: 600, or 1,000
#       grants); -e  the seed of every cell's schedule (default: the date's seconds, printed);
#   -o  where to write (default bench/results): <date>-faults.json (one object per cell, with
#       its command) and <date>-faults.md (strategy × nemesis → (a)-(e));
#   -n  the nemeses, comma-separated (default none,pause,kill,restart,partition,stall,cut,clock);
#   -v  library (default: workers use the library), run (workers take the lock through
#       `locksmith run`, how admins use it), or both;
#   STRATEGY  ids of tests/support/strategies_under_test (default: file simple semaphore shm
#       redis memcached pg_advisory zookeeper etcd sql.sqlite sql.postgresql).
#
# Nemeses: none, pause (SIGSTOP a holder past its TTL / session / lease, then SIGCONT), kill
# (SIGKILL holders and waiters, respawned), restart (kill the strategy's server and start it
# again: a private server through scripts/services.sh, for the strategies that have one);
# through `locksmith run`, pause stops locksmith and its command, kill SIGKILLs locksmith.
# partition, stall and cut (the strategies with a TCP server): one worker in a long critical
# section is cut off from its server by a TCP proxy of its own (every byte dropped, every byte
# held, or its connections closed); through `locksmith run`, locksmith reaches the server through
# the worker's proxy and its command stops at locksmith's SIGTERM. clock (redis, through the library):
# a private redis-server's wall clock, the one its TTLs run on, jumps forward past the TTL while
# such a worker holds (tests/faults/clock_shift.cpp, preloaded into the server).
# Pause and kill use the servers of `scripts/services.sh env` (LOCKSMITH_TEST_*): start them
# first. Needs a build with tests (BUILD_DIR, default build). Fails when a cell breaks an
# invariant (the table says which), never on figures but one: after a restart, the next grant
# within one TTL (or session timeout) plus 1 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
seconds=60
seed=$(date +%s)
out=$root/bench/results
nemeses=none,pause,kill,restart,partition,stall,cut,clock
via=library
while getopts "s:e:o:n:v:h" opt; do
  case $opt in
    s) seconds=$OPTARG ;;
    e) seed=$OPTARG ;;
    o) out=$OPTARG ;;
    n) nemeses=$OPTARG ;;
    v) via=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 64 ;;
  esac
done
shift $((OPTIND - 1))
case $via in
  library|run) vias=("$via") ;;
  both) vias=(library run) ;;
  *) echo "faults: -v takes library, run or both, not '$via'" >&2; exit 64 ;;
esac
IFS=, read -r -a nemesis_list <<<"$nemeses"
strategies=("$@")
[ ${#strategies[@]} -gt 0 ] ||
  strategies=(file simple semaphore shm redis memcached pg_advisory zookeeper etcd sql.sqlite
              sql.postgresql)
program=$build/tests/faults/locksmith_faults
[ -x "$program" ] || { echo "faults: $program is not built (cmake --build $build --target locksmith_faults)" >&2; exit 1; }
mkdir -p "$out"
stem=$out/$(date -u +%Y-%m-%d)-faults
cells=$stem.jsonl
: >"$cells"
echo "faults: seed $seed, $seconds s per cell, into $stem.{json,md}" >&2
status=0
for s in "${strategies[@]}"; do
  for n in "${nemesis_list[@]}"; do
    case "$n:$s" in
      restart:redis|restart:memcached|restart:pg_advisory|restart:sql.postgresql|restart:zookeeper|restart:etcd) ;;
      clock:redis) ;;
      partition:*|stall:*|cut:*)
        case $s in redis|memcached|pg_advisory|sql.postgresql|sql.mariadb|zookeeper|etcd) ;; *) continue ;; esac ;;
      restart:*|clock:*) continue ;;
    esac
    for v in "${vias[@]}"; do
      case "$n:$v" in clock:run) continue ;; esac
      echo "faults: $s under $n (via $v)" >&2
      rc=0
      "$program" run --strategy "$s" --nemesis "$n" --seconds "$seconds" --seed "$seed" \
        --via "$v" --json "$cells" >/dev/null || rc=$?
      [ $rc = 0 ] || [ $rc = 77 ] || status=1
    done
  done
done

/usr/bin/python3 - "$cells" "$stem" "$seed" "$seconds" "-n $nemeses -v $via $*" "$(uname -srm; nproc)" <<'EOF'
import json, sys
cells_path, stem, seed, seconds, args, machine = sys.argv[1:]
cells = [json.loads(l) for l in open(cells_path) if l.strip()]
command = f"scripts/faults.sh -s {seconds} -e {seed} {args}".strip()
machine = machine.replace("\n", ", ") + " CPUs"
json.dump({"command": command, "seed": int(seed), "seconds_per_cell": float(seconds),
           "machine": machine, "cells": cells}, open(stem + ".json", "w"), indent=1)
def fmt(x):
    return f"{x:.0f}" if isinstance(x, float) else str(x)
lines = [f"Faults run: `{command}` (seed {seed}, {seconds} s per cell; {machine})."
         " Via: the workers' lock through the library or `locksmith run`."
         " (a) critical sections another process entered,"
         " (b) stale writes accepted / refused by the fenced resource, (c) lost increments,"
         " (d) lost locks / of them not told, (e) grants/s before / during / after the faults and"
         " the longest time from a fault's end to the next grant (ms). Broken: invariants that"
         " did not hold.", "",
         "| strategy | nemesis | via | grants | (a) overlaps | (b) stale acc./ref. | (c) lost incr. |"
         " (d) lost / untold | (e) grants/s | (e) recover ms | broken |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for c in cells:
    if "skipped" in c:
        lines.append(f"| {c.get('strategy','?')} | {c.get('nemesis','?')} | {c.get('via','?')} | skipped: {c['skipped']} |||||||")
        continue
    fencing = "" if c["fencing"] else " (no fencing)"
    lines.append(
        f"| {c['strategy']} | {c['nemesis']} | {c.get('via', 'library')} | {c['grants']} | {c['overlaps']} |"
        f" {c['stale_accepted']} / {c['stale_refused']}{fencing} | {c['lost_increments']} |"
        f" {c['lost_locks']} / {c['lost_untold']} |"
        f" {fmt(c['grants_per_s_before'])} / {fmt(c['grants_per_s_during'])} / {fmt(c['grants_per_s_after'])} |"
        f" {fmt(c['recover_ms_max']) if c['recover_ms_max'] >= 0 else '-'} |"
        f" {'; '.join(c['broken']) or '-'} |")
# Per strategy (README's *Which strategy for which guarantee* comes from this): counts summed
# over its cells; x / y: through the library / through `locksmith run`.
def summary(cells):
    order, by = [], {}
    for c in cells:
        if "skipped" in c or "strategy" not in c:
            continue
        if c["strategy"] not in by:
            order.append(c["strategy"])
        by.setdefault(c["strategy"], []).append(c)
    def pick(cs, nemesis, via):
        return [c for c in cs if c["nemesis"] == nemesis and c.get("via", "library") == via]
    def pair(cs, nemesis, f):
        out = []
        for via in ("library", "run"):
            got = pick(cs, nemesis, via)
            out.append(f(got) if got else "-")
        return " / ".join(out)
    def ms(got):
        worst = max(c["recover_ms_max"] for c in got)
        late = sum(c.get("late_recoveries", 0) for c in got if c["nemesis"] == "restart")
        return ("-" if worst < 0 else f"{worst:.0f}") + (f" ({late} late)" if late else "")
    lines = ["| strategy | fencing | (a) overlaps under pause | (b) stale writes accepted / refused |"
             " (c) lost increments under pause | (d) lost locks not told | recovery after kill, ms |"
             " recovery after restart, ms |",
             "|---|---|---|---|---|---|---|---|"]
    for s in order:
        cs = by[s]
        fencing = cs[0]["fencing"]
        stale = (f"{sum(c['stale_accepted'] for c in cs)} / {sum(c['stale_refused'] for c in cs)}"
                 if fencing else "no fencing")
        lines.append(
            f"| {s} | {'yes' if fencing else 'no'} |"
            f" {pair(cs, 'pause', lambda g: str(sum(c['overlaps'] for c in g)))} |"
            f" {stale} |"
            f" {pair(cs, 'pause', lambda g: str(sum(c['lost_increments'] for c in g)))} |"
            f" {sum(c['lost_untold'] for c in cs)} |"
            f" {pair(cs, 'kill', ms)} | {pair(cs, 'restart', ms)} |")
    return lines
# The network nemeses: per strategy, way (library or run) and nemesis, lost locks / told only
# after the next grant / acted on while untold, and stale writes accepted / refused.
def network(cells):
    got = [c for c in cells if "skipped" not in c and c.get("nemesis") in ("partition", "stall", "cut")]
    if not got:
        return []
    order = []
    for c in got:
        row = (c["strategy"], c.get("via", "library"))
        if row not in order:
            order.append(row)
    def cell(row, n):
        cs = [c for c in got if (c["strategy"], c.get("via", "library")) == row and c["nemesis"] == n]
        if not cs:
            return "-"
        t = lambda k: sum(c.get(k, 0) for c in cs)
        stale = f"; stale {t('stale_accepted')} / {t('stale_refused')}" if cs[0]["fencing"] else ""
        late = max(c.get("told_late_ms_max", 0) for c in cs)
        late = f" (by {late:.0f} ms at most)" if t("told_late") else ""
        return f"{t('faults')} faults: lost {t('lost_locks')}, told late {t('told_late')}{late}, acted untold {t('acted_untold')}{stale}"
    lines = ["", "Network faults (through the library, or through `locksmith run`, told by its SIGTERM):"
             " per fault window, lost locks (another process"
             " granted while the holder was cut off), of them told only after that grant, and acted on"
             " after it without being told; stale writes accepted / refused.", "",
             "| strategy | via | partition | stall | cut |", "|---|---|---|---|---|"]
    for row in order:
        lines.append(f"| {row[0]} | {row[1]} | {cell(row, 'partition')} | {cell(row, 'stall')} | {cell(row, 'cut')} |")
    return lines
lines += ["", "Per strategy: counts summed over its cells; x / y: through the library / through"
          " `locksmith run`; recovery: the longest time from a fault's end to the next grant, and"
          " after a restart how many missed the goal (next grant within one TTL or session"
          " timeout + 1 s).", ""] + summary(cells) + network(cells)
open(stem + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm -f "$cells"
exit $status
