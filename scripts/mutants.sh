#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The mutation check: applies each one-line fault of tests/mutants/faults.txt in turn, rebuilds
# incrementally, runs the tests the entry names, restores the file, and reports each fault as
#   caught            a named test failed (what we want)
#   SURVIVED          every named test passed: the suite would let this bug through
#   DOES NOT COMPILE  the fault does not build (the entry is wrong)
#   NOT APPLIED       `find:` does not occur exactly once (the code moved: re-target the entry)
#   SKIPPED           a named test skipped (exit 77), e.g. no server: not a catch
# and exits non-zero unless every fault was caught. Before the faults, every named test must
# pass on the unchanged code (else a "catch" would mean nothing).
#
#   scripts/mutants.sh [-l LIST] [--per-change] [NAME...]   NAME: only these entries (default: all)
#
# --per-change (CI's mutants step; scripts/nightly.sh runs every entry) checks only
#   - the entries that are new or changed in the list since MUTANTS_SINCE (default HEAD~1: the
#     last commit on the first-parent line, so a merge's whole branch; uncommitted changes count),
#   - those whose `file:` changed since then,
#   - those whose tests' own sources changed (the sources of the test program's objects, from the
#     build's ninja graph; without a configured build, any file in the program's folder), and
#   - a rotating share of the others: an entry's share is a hash of its name modulo MUTANTS_SHARES
#     (default 8), the share run is the first-parent commit count modulo the same, so that any 8
#     consecutive commits on the first-parent line run every entry.
#   It prints each entry it runs and why. What it can miss until the share or the nightly run
#   comes: a fault that a change elsewhere lets through (a caller, a header, tests/support, a
#   test program that stops running a case), and, when several commits land at once, the shares
#   their counts skipped. When MUTANTS_SINCE is not in the clone (a shallow clone), every entry runs.
#   The entries run in that order: new or changed entries, those whose file changed, those whose
#   tests changed, the rotating share (within each, an order that turns with the commit count).
#   MUTANTS_BUDGET=SECONDS bounds the run: once that long has passed since it began (its build and
#   baselines included), a lane starts no more entries but new or changed ones, and reports the
#   rest as NOT RUN with the reason and their names at the end (not a failure: scripts/nightly.sh,
#   which has no budget, runs every entry). An entry started before the budget ends runs on.
#
# The faults run in lanes side by side (MUTANT_LANES; default: one per CPU as root, else 1):
# most of a fault's time is spent in tests that wait (for a TTL, a session, a wake-up), not on the
# CPU. Each further lane has its own copy of the source tree and of the build, mounted over the
# original paths in a mount namespace of its own (unshare -m), so that nothing is rebuilt for it
# and its tests find everything where they expect it. Entries that change one folder or run the
# same tests share a lane; the test servers are shared, as in a parallel ctest.
# A fault's time is almost all its compile (each result line gives "build N s"): 12-64 s for a
# faulty source that ccache has not seen (2 CPUs at load 9), 1-2 s when it has (the same fault
# again, while its file and the headers it includes are unchanged); its tests take 1-7 s.
#
# Environment: BUILD_DIR (default build-mutants, its own Ninja build), JOBS (default 2),
# the LOCKSMITH_TEST_* endpoints of scripts/services.sh env (when LOCKSMITH_TEST_REDIS_URL is
# unset, the script starts every test server of its own on free ports in a temporary directory
# and stops them at the end), LOCKSMITH_TEST_PATIENCE (default 10: the tests' safety nets, in s).
# The changed file is always restored, also on Ctrl-C or an error (trap).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-mutants}
jobs=${JOBS:-2}
list=$root/tests/mutants/faults.txt
# `--lane DIR ENTRY...` is this script run by itself inside a lane's mount namespace: it only
# applies, builds and tests the given entries, writing its result lines to DIR/results.
lane_dir=""
per_change=""
if [ "${1:-}" = "--lane" ]; then
  lane_dir=$2
  shift 2
else
  while [ $# -gt 0 ]; do
    case $1 in
      -l) list=$(realpath "$2"); shift 2 ;;
      --per-change) per_change=1; shift ;;
      *) break ;;
    esac
  done
fi
only=("$@")

if [ -n "$lane_dir" ]; then
  work=$lane_dir
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/locksmith-mutants.XXXXXX")
fi
backup=""   # the file currently changed, when one is
target=""
lane_pids=()
cleanup() {
  if [ -n "$backup" ] && [ -f "$backup" ]; then
    cp "$backup" "$target"  # a new mtime, so that the next build recompiles it
    echo "mutants: restored $target" >&2
  fi
  [ -n "$lane_dir" ] && return
  [ ${#lane_pids[@]} = 0 ] || { kill "${lane_pids[@]}" 2>/dev/null; wait; } || true
  [ -z "${services_env+x}" ] ||
    env "${services_env[@]}" "$root/scripts/services.sh" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the entries: one file per field per entry, written by a small parser ----------------------
[ -n "$lane_dir" ] || MUTANTS_PER_CHANGE=$per_change MUTANTS_ROOT=$root MUTANTS_BUILD=$build \
  python3 - "$list" "$work/entries" "${only[@]}" <<'EOF'
import os, subprocess, sys, zlib
path, out, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
def parse(lines, path):
    entries, cur = [], None
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        s = line.strip()
        if s.startswith("#"):
            continue
        if not s:
            cur = None
            continue
        if s.startswith("[") and s.endswith("]"):
            cur = {"name": s[1:-1], "test": [], "line": n}
            entries.append(cur)
            continue
        if cur is None or ":" not in s:
            sys.exit(f"{path}:{n}: not inside an entry or not 'field: value': {line}")
        field, value = s.split(":", 1)
        value = value.strip()
        if field == "test":
            cur["test"].append(value)
        elif field in ("file", "find", "replace", "bug"):
            cur[field] = value
        else:
            sys.exit(f"{path}:{n}: unknown field {field!r}")
    return entries
entries = parse(open(path, encoding="utf-8"), path)
names = [e["name"] for e in entries]
for e in entries:
    for f in ("file", "find", "replace", "bug"):
        if f not in e:
            sys.exit(f"{path}:{e['line']}: entry [{e['name']}] has no {f}:")
    if not e["test"]:
        sys.exit(f"{path}:{e['line']}: entry [{e['name']}] has no test:")
    if names.count(e["name"]) > 1:
        sys.exit(f"{path}: entry name [{e['name']}] is used twice")
unknown = only - set(names)
if unknown:
    sys.exit(f"unknown entries: {' '.join(sorted(unknown))}")
selected = [e for e in entries if not only or e["name"] in only]

# --per-change: the entries that the change since MUTANTS_SINCE concerns, and a rotating share of
# the others (see the header). Prints each chosen entry and why.
if os.environ.get("MUTANTS_PER_CHANGE"):
    root, build = os.environ["MUTANTS_ROOT"], os.environ["MUTANTS_BUILD"]
    def run(*args):
        r = subprocess.run(args, capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None
    since = os.environ.get("MUTANTS_SINCE") or "HEAD~1"
    shares = int(os.environ.get("MUTANTS_SHARES") or 8)
    base = (run("git", "-C", root, "rev-parse", "--verify", "-q", since + "^{commit}") or "").strip()
    key = lambda e: (e["file"], e["find"], e["replace"], tuple(e["test"]))
    reasons, rank, count = {}, {}, 0
    if not base:
        # A shallow clone or a short history: what changed cannot be told, so every entry runs.
        for e in selected:
            reasons[e["name"]] = f"{since} unknown: every entry"
            rank[e["name"]] = 1
    else:
        # Committed since BASE, and not committed yet (a run in a working tree).
        changed = set((run("git", "-C", root, "diff", "--name-only", base) or "").split())
        rel = os.path.relpath(path, root)
        old = run("git", "-C", root, "show", f"{base}:{rel}")
        try:
            old_entries = {e["name"]: key(e) for e in parse(old.splitlines(), rel)} if old else {}
        except SystemExit:  # a list the parser no longer reads: every entry counts as changed
            old_entries = {}
        # A test program's own sources: the sources of its objects (ninja's graph of the build
        # configured already, as in CI), or else every file in its folder.
        def query(targets):
            out = run("ninja", "-C", build, "-t", "query", *targets) if targets else None
            return out.split("\n") if out else []
        programs = sorted({t.split()[0] for e in selected for t in e["test"] if not t.startswith("fuzz ")})
        sources = {p: set() for p in programs}
        owner, current = {}, None
        for line in query(programs):
            if line and not line.startswith(" "):
                current = line.rstrip(":")
            elif current in sources and line.strip().endswith(".o") and \
                    f"/{os.path.basename(current)}.dir/" in line:
                owner[line.strip()] = current
        for line in query(sorted(owner)):
            if line and not line.startswith(" "):
                current = line.rstrip(":")
            elif current in owner and line.startswith("    ") and not line.strip().startswith("|"):
                src = os.path.relpath(os.path.join(build, line.strip()), root)
                if not src.startswith(".."):
                    sources[owner[current]].add(src)
        def test_sources(test):
            program = test.split()[0]
            if program == "fuzz":
                target = test.split()[1]
                return {f for f in changed if f.startswith("tests/fuzz/") and target in f}
            own = sources.get(program) or {f for f in changed if os.path.dirname(f) == os.path.dirname(program)}
            return own & changed
        for e in selected:
            why = []
            if old_entries.get(e["name"]) != key(e):
                why.append("new entry" if e["name"] not in old_entries else "entry changed")
            if e["file"] in changed:
                why.append("its file changed")
            hit = sorted(set().union(*(test_sources(t) for t in e["test"])))
            if hit:
                why.append("its tests changed: " + " ".join(hit))
            if why:
                reasons[e["name"]] = "; ".join(why)
                # What the change claims first (its new entries), then the faults in what it
                # changed, then those its tests' changes concern: the order a time budget cuts.
                rank[e["name"]] = 0 if why[0] in ("new entry", "entry changed") else \
                    1 if "its file changed" in why else 2
        count = int(run("git", "-C", root, "rev-list", "--count", "--first-parent", "HEAD") or "0")
        share = count % shares
        for e in selected:
            if e["name"] not in reasons and zlib.crc32(e["name"].encode()) % shares == share:
                reasons[e["name"]] = f"share {share} of {shares}"
                rank[e["name"]] = 3
        print(f"mutants: per change: {len(reasons)} of {len(selected)} entries (changed since"
              f" {since} = {base[:12]}: {len(changed)} files; rotating share {share} of {shares})")
    selected = [e for e in selected if e["name"] in reasons]
    # Within a rank, an order that turns with the commit count, so that when the time budget
    # (MUTANTS_BUDGET) cuts a run short, the next commit's run does not cut the same entries.
    turn = lambda e: (zlib.crc32(e["name"].encode()) + count * 0x9E3779B1) % 2**32
    selected.sort(key=lambda e: (rank[e["name"]], turn(e)))
    for e in selected:
        print(f"  {e['name']:<48} {reasons[e['name']]}")
    sys.stdout.flush()
# Lane groups: entries that run the same test command share a lane, so that no test runs twice
# at once; so do entries whose tests use the same integration test program: those talk to shared
# servers, and some stop or kill them (a cluster member), which must not happen beside another
# test of that server. (Each lane has its own copy of the tree: faults in one file may run side
# by side.)
parent = {}
def find(k):
    while parent.setdefault(k, k) != k:
        k = parent[k]
    return k
def test_key(command):
    program = command.split()[0]
    return f"program:{program}" if program.startswith("tests/integration/") else f"test:{command}"
for e in selected:
    keys = [test_key(t) for t in e["test"]]
    for k in keys[1:]:
        parent[find(k)] = find(keys[0])
os.makedirs(out)
for i, e in enumerate(selected):
    d = os.path.join(out, f"{i:03d}")
    os.makedirs(d)
    for f in ("name", "file", "find", "replace", "bug"):
        open(os.path.join(d, f), "w", encoding="utf-8").write(e[f])
    # What MUTANTS_BUDGET may leave out: with --per-change, every entry but a new or changed one.
    if os.environ.get("MUTANTS_PER_CHANGE"):
        open(os.path.join(d, "budgeted"), "w").write("%d\n" % (rank[e["name"]] > 0))
    open(os.path.join(d, "group"), "w", encoding="utf-8").write(find(test_key(e["test"][0])) + "\n")
    open(os.path.join(d, "tests"), "w", encoding="utf-8").write("\n".join(e["test"]) + "\n")
EOF

# --- servers for the remote strategies' tests -------------------------------------------------
# Without the endpoints of running servers (scripts/services.sh env), the script starts every
# test server of its own with scripts/services.sh, in its temporary folder, on free ports (a
# block of three for the services that use neighbouring ports), and stops them at the end.
free_ports() {  # free_ports N: the first of N consecutive free ports
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base, socks = random.randint(20000, 60000), []
    try:
        for p in range(base, base + n):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PY
}
if [ -z "$lane_dir" ] && [ -z "${LOCKSMITH_TEST_REDIS_URL:-}" ]; then
  chmod 711 "$work"  # the databases run as their own users and must reach their folders
  services_env=(LOCKSMITH_SERVICES_DIR="$work/services"
                LOCKSMITH_REDIS_PORT="$(free_ports 1)" LOCKSMITH_MEMCACHED_PORT="$(free_ports 1)"
                LOCKSMITH_POSTGRES_PORT="$(free_ports 1)" LOCKSMITH_MARIADB_PORT="$(free_ports 1)"
                LOCKSMITH_ZOOKEEPER_PORT="$(free_ports 1)" LOCKSMITH_ETCD_PORT="$(free_ports 2)"
                LOCKSMITH_REDIS_QUORUM_PORT="$(free_ports 3)" LOCKSMITH_REDIS_TLS_PORT="$(free_ports 1)")
  env "${services_env[@]}" "$root/scripts/services.sh" start >"$work/services-start.log" 2>&1 ||
    { echo "mutants: some test servers did not start:" >&2; cat "$work/services-start.log" >&2; }
  eval "$(env "${services_env[@]}" "$root/scripts/services.sh" env)"
fi

# --- build and baseline ----------------------------------------------------------------------
# The targets of a list of test commands (default: every entry's) are the test executables they
# name (their file names), the strategy modules the library loads at run time, and the CLI for
# its tests. A fault rebuilds only its own entry's targets: ninja keeps every other one out of date
# until an entry that needs it builds it, against the restored file (mtimes say so). Executables
# are not relinked when only a shared library they link changed (CMAKE_LINK_DEPENDS_NO_SHARED):
# the loader takes the new one at run time.
targets() {  # targets [TESTS_FILE...]
  local tests=("$@")
  [ ${#tests[@]} -gt 0 ] || tests=("$work"/entries/*/tests)
  cat "${tests[@]}" | grep -v '^fuzz ' | awk '{print $1}' | xargs -r -n1 basename | sort -u
  ninja -C "$build" -t targets all | grep -o 'locksmith-modules/liblocksmith_[a-z_0-9]*\.so' |
    sed 's|.*/lib||; s|\.so$||' | sort -u
  grep -qh '^tests/cli/' "${tests[@]}" && echo locksmith_cli
  return 0
}
build_targets() {  # build_targets [TESTS_FILE...]
  # shellcheck disable=SC2046
  cmake --build "$build" -j "$jobs" --target $(targets "$@") >"$work/build.log" 2>&1
}
# A fault that stops a wake-up makes its test wait for its safety net: a minute in some suites,
# meant for a loaded machine. Here the tests run one at a time, so the tests' patience is cut
# (tests/support/test_environment.hpp); the baseline below checks that it still suffices.
export LOCKSMITH_TEST_PATIENCE=${LOCKSMITH_TEST_PATIENCE:-10}
run_test() {  # run_test "<command relative to the build dir>" -> its exit status
  local cmd=$1 rc=0
  case $cmd in
    # A libFuzzer target over its seed corpus, once, built (only it, incrementally) and run by
    # scripts/fuzz.sh with ASan+UBSan in its own build (FUZZ_BUILD_DIR); a build failure counts
    # as a failure here, as the faults are checked to build in the test build first.
    "fuzz "*)
      FUZZ_ARGS="-runs=0" timeout 900 "$root/scripts/fuzz.sh" 0 ${cmd#fuzz } \
        >"$work/test.log" 2>&1 || rc=$? ;;
    *) (cd "$build" && timeout 900 $cmd >"$work/test.log" 2>&1) || rc=$? ;;
  esac
  return $rc
}

# The run's start, also in its lanes: MUTANTS_BUDGET counts from it.
start=${MUTANTS_START:-$(date +%s)}
export MUTANTS_START=$start
budget=${MUTANTS_BUDGET:-}
if [ -z "$lane_dir" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_LINK_DEPENDS_NO_SHARED=ON >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; echo "mutants: configure failed" >&2; exit 2; }
  build_targets || { tail -40 "$work/build.log"; echo "mutants: the unchanged code does not build" >&2; exit 2; }
fi

# --- the faults ------------------------------------------------------------------------------
apply_fault() {  # apply_fault FILE FIND_FILE REPLACE_FILE: fails unless FIND occurs exactly once
  python3 - "$@" <<'EOF'
import sys
target, find, replace = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
text = open(target, encoding="utf-8").read()
n = text.count(find)
if n != 1:
    print(f"found {n} times", file=sys.stderr)
    sys.exit(1)
open(target, "w", encoding="utf-8").write(text.replace(find, replace, 1))
EOF
}

run_faults() {  # run_faults ENTRY_DIR...: one result line per fault, on stdout and in $work/results
  local dir name status detail t0 built timing line cmd rc
  for dir in "$@"; do
    name=$(cat "$dir/name")
    target="$root/$(cat "$dir/file")"
    t0=$(date +%s)
    status=""
    detail=""
    if [ -n "$budget" ] && [ "$(cat "$dir/budgeted" 2>/dev/null)" = 1 ] &&
      [ $((t0 - start)) -ge "$budget" ]; then
      status="NOT RUN"
      detail="the time budget (MUTANTS_BUDGET=$budget s) is spent; scripts/nightly.sh runs it"
    elif [ ! -f "$target" ]; then
      status="NOT APPLIED"
      detail="no file $(cat "$dir/file")"
    else
      backup="$work/backup"
      cp -p "$target" "$backup"
      if ! apply_fault "$target" "$dir/find" "$dir/replace"; then
        status="NOT APPLIED"
        detail="find: text not found exactly once in $(cat "$dir/file")"
      elif ! build_targets "$dir/tests"; then
        status="DOES NOT COMPILE"
        detail=$(grep -m1 -E "error" "$work/build.log" || true)
      else
        built=$(date +%s)
        status="SURVIVED"
        while read -r cmd; do
          rc=0
          run_test "$cmd" || rc=$?
          if [ "$rc" = 77 ]; then
            [ "$status" = SURVIVED ] && status="SKIPPED" && detail="skipped: $cmd"
          elif [ "$rc" != 0 ]; then
            status="caught"
            detail="by $cmd (exit $rc)"
            break
          fi
        done <"$dir/tests"
      fi
      cp "$backup" "$target"  # not -p: a new mtime makes the next build recompile it
      backup=""
    fi
    # Time spent building the fault, then running its tests.
    timing=$(printf '%4ss' "$(( $(date +%s) - t0 ))")
    [ -z "${built:-}" ] || timing=$(printf '%4ss (build %ss)' "$(( $(date +%s) - t0 ))" "$((built - t0))")
    built=""
    line=$(printf '%-16s %-40s %s  %s' "$status" "$name" "$timing" "$detail")
    echo "$line"
    echo "$line" >>"$work/results"
  done
}

# run_lane ENTRY_DIR...: the entries in batches of 8, each first its baseline (every test these
# entries name passes on the unchanged code, else a "catch" would mean nothing; each test once a
# lane), then its faults. In batches so that a run the time budget cuts short has not spent it on
# the baseline of entries it will not run: a later batch rebuilds its targets from the restored
# sources first (ccache has them).
run_lane() {
  local dirs=("$@") cmd rc ok=1 i
  : >"$work/baselined"
  for ((i = 0; i < ${#dirs[@]}; i += 8)); do
    if [ -n "$budget" ] && [ $(($(date +%s) - start)) -ge "$budget" ] &&
      [ "$(cat "${dirs[i]}/budgeted" 2>/dev/null)" = 1 ]; then
      run_faults "${dirs[@]:i}"  # each reported as not run (the order puts the others first)
      return
    fi
    [ "$i" = 0 ] || build_targets $(printf '%s/tests ' "${dirs[@]:i:8}") ||
      { tail -40 "$work/build.log"; echo "mutants: the unchanged code does not build" >&2; return 2; }
    while read -r cmd; do
      ! grep -qxF "$cmd" "$work/baselined" || continue
      echo "$cmd" >>"$work/baselined"
      rc=0
      run_test "$cmd" || rc=$?
      if [ "$rc" != 0 ]; then
        { echo "  FAILS UNCHANGED (exit $rc): $cmd"; tail -20 "$work/test.log" | sed 's/^/    /'; } |
          tee -a "$work/baseline-failures"
        ok=0
      fi
    done < <(for dir in "${dirs[@]:i:8}"; do cat "$dir/tests"; done | sort -u)
    [ "$ok" = 1 ] || return 2
    run_faults "${dirs[@]:i:8}"
  done
}

if [ -n "$lane_dir" ]; then
  run_lane "${only[@]}"
  exit
fi

# Lanes: the groups (see the parser above), the largest first, each to the lane with the fewest
# entries so far.
lanes=${MUTANT_LANES:-}
if [ -z "$lanes" ]; then
  lanes=1
  [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null || lanes=$(nproc)
fi
declare -A lane_entries=()
while read -r group; do
  best=0
  for ((i = 1; i < lanes; i++)); do
    [ "$(wc -w <<<"${lane_entries[$i]:-}")" -ge "$(wc -w <<<"${lane_entries[$best]:-}")" ] || best=$i
  done
  lane_entries[$best]+=" $(grep -lxF "$group" "$work"/entries/*/group | xargs -n1 dirname | tr '\n' ' ')"
done < <(cat "$work"/entries/*/group | sort | uniq -c | sort -rn | sed 's/^ *[0-9]* //')

# A lane's entries in the list's order (the entry folders are numbered in it): with --per-change,
# the ones the change concerns first, the rotating share last.
in_order() { tr ' ' '\n' <<<"$1" | grep . | sort | tr '\n' ' '; }

: >"$work/results"
for ((i = 1; i < lanes; i++)); do
  [ -n "${lane_entries[$i]:-}" ] || continue
  # The lane's copies: the sources as they are now (tracked and new files), the build as it is,
  # both with their times kept so that ninja finds nothing to redo.
  lane=$work/lane-$i
  mkdir -p "$lane/src" "$lane/build"
  git -C "$root" ls-files -z --cached --others --exclude-standard |
    tar -C "$root" --null -T - -cf - | tar -C "$lane/src" -xpf -
  cp -a "$build/." "$lane/build/"
  case $build in "$root"/*) mkdir -p "$lane/src/${build#"$root"/}" ;; esac
  : >"$lane/results"
  # shellcheck disable=SC2086
  unshare -m -- bash -c 'mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4 &&
    exec bash "$0" --lane "$@"' "$root/scripts/mutants.sh" "$lane/src" "$root" "$lane/build" \
    "$build" "$lane" $(in_order "${lane_entries[$i]}") &
  lane_pids+=($!)
done
echo "mutants: $lanes lane(s), each in batches of 8 entries: their baseline, then their faults"
# shellcheck disable=SC2086
run_lane $(in_order "${lane_entries[0]:-}") || true
for pid in "${lane_pids[@]}"; do wait "$pid" || true; done
lane_pids=()
cat "$work"/lane-*/results >>"$work/results" 2>/dev/null || true
if [ -n "$(cat "$work"/baseline-failures "$work"/lane-*/baseline-failures 2>/dev/null)" ]; then
  echo "mutants: fix the baseline first" >&2
  exit 2
fi
# A fault that survived beside another lane runs once more, alone. Lanes share the test servers
# and ccache, and faults that their suites catch when run alone were seen to survive beside
# another lane (in two full runs, one of two entries on the same line of zookeeper_store.cpp,
# a different one each time, and a core/strategy_support.cpp fault; the cause is not found yet).
# One that still survives alone is a gap in the suite.
survivors=$(awk '$1 == "SURVIVED" {print $2}' "$work/results")
if [ "$lanes" -gt 1 ] && [ -n "$survivors" ]; then
  echo "mutants: again, alone: $survivors"
  again=()
  for name in $survivors; do again+=("$(dirname "$(grep -lxF "$name" "$work"/entries/*/name)")"); done
  grep -v '^SURVIVED ' "$work/results" >"$work/results.kept" || true
  mv "$work/results.kept" "$work/results"
  run_faults "${again[@]}"
fi

# Leave the build matching the restored sources.
build_targets || true

total=$(ls -d "$work"/entries/*/ | wc -l)
declare -A count=()
while read -r status; do
  count[$status]=$(( ${count[$status]:-0} + 1 ))
done < <(cut -c1-16 "$work/results" | sed 's/ *$//')
echo
over=$(awk '$1 == "NOT" && $2 == "RUN" {print $3}' "$work/results" | sort | tr '\n' ' ')
[ -z "$over" ] || echo "mutants: not run, the time budget of $budget s spent (scripts/nightly.sh" \
  "runs every entry): $over"
echo "mutants: $total faults in $(( $(date +%s) - start )) s ($lanes lane(s)):" \
  "${count[caught]:-0} caught, ${count[SURVIVED]:-0} survived," \
  "${count[DOES NOT COMPILE]:-0} do not compile, ${count[NOT APPLIED]:-0} not applied," \
  "${count[SKIPPED]:-0} skipped, ${count[NOT RUN]:-0} left to the nightly run (budget)," \
  "$((total - $(wc -l <"$work/results"))) not run"
[ $(( ${count[caught]:-0} + ${count[NOT RUN]:-0} )) = "$total" ]
