#!/usr/bin/env bash
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
#   scripts/mutants.sh [-l LIST] [NAME...]     NAME: only these entries (default: all)
#
# Environment: BUILD_DIR (default build-mutants, its own Ninja build), JOBS (default 2),
# the LOCKSMITH_TEST_* endpoints of scripts/services.sh env (when LOCKSMITH_TEST_REDIS_URL is
# unset, the script starts every test server of its own on free ports in a temporary directory
# and stops them at the end).
# The changed file is always restored, also on Ctrl-C or an error (trap).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-mutants}
jobs=${JOBS:-2}
list=$root/tests/mutants/faults.txt
if [ "${1:-}" = "-l" ]; then
  list=$(realpath "$2")
  shift 2
fi
only=("$@")

work=$(mktemp -d "${TMPDIR:-/tmp}/locksmith-mutants.XXXXXX")
backup=""   # the file currently changed, when one is
target=""
cleanup() {
  if [ -n "$backup" ] && [ -f "$backup" ]; then
    cp "$backup" "$target"  # a new mtime, so that the next build recompiles it
    echo "mutants: restored $target" >&2
  fi
  [ -z "${services_env+x}" ] ||
    env "${services_env[@]}" "$root/scripts/services.sh" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the entries: one file per field per entry, written by a small parser ----------------------
python3 - "$list" "$work/entries" "${only[@]}" <<'EOF'
import os, sys
path, out, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
entries, cur = [], None
for n, raw in enumerate(open(path, encoding="utf-8"), 1):
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
os.makedirs(out)
for i, e in enumerate(selected):
    d = os.path.join(out, f"{i:03d}")
    os.makedirs(d)
    for f in ("name", "file", "find", "replace", "bug"):
        open(os.path.join(d, f), "w", encoding="utf-8").write(e[f])
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
if [ -z "${LOCKSMITH_TEST_REDIS_URL:-}" ]; then
  chmod 711 "$work"  # the databases run as their own users and must reach their folders
  services_env=(LOCKSMITH_SERVICES_DIR="$work/services"
                LOCKSMITH_REDIS_PORT="$(free_ports 1)" LOCKSMITH_MEMCACHED_PORT="$(free_ports 1)"
                LOCKSMITH_POSTGRES_PORT="$(free_ports 1)" LOCKSMITH_MARIADB_PORT="$(free_ports 1)"
                LOCKSMITH_ZOOKEEPER_PORT="$(free_ports 1)" LOCKSMITH_ETCD_PORT="$(free_ports 2)"
                LOCKSMITH_REDIS_QUORUM_PORT="$(free_ports 3)")
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

start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_LINK_DEPENDS_NO_SHARED=ON >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "mutants: configure failed" >&2; exit 2; }
build_targets || { tail -40 "$work/build.log"; echo "mutants: the unchanged code does not build" >&2; exit 2; }

echo "mutants: baseline (every named test passes on the unchanged code)"
baseline_ok=1
while read -r cmd; do
  rc=0
  run_test "$cmd" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "  FAILS UNCHANGED (exit $rc): $cmd"
    tail -20 "$work/test.log" | sed 's/^/    /'
    baseline_ok=0
  fi
done < <(cat "$work"/entries/*/tests | sort -u)
[ "$baseline_ok" = 1 ] || { echo "mutants: fix the baseline first" >&2; exit 2; }

# --- the faults ------------------------------------------------------------------------------
declare -A count=()
results=()
for dir in "$work"/entries/*/; do
  name=$(cat "$dir/name")
  target="$root/$(cat "$dir/file")"
  t0=$(date +%s)
  status=""
  detail=""
  if [ ! -f "$target" ]; then
    status="NOT APPLIED"
    detail="no file $(cat "$dir/file")"
  else
    backup="$work/backup"
    cp -p "$target" "$backup"
    if ! python3 - "$target" "$dir/find" "$dir/replace" <<'EOF'
import sys
target, find, replace = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
text = open(target, encoding="utf-8").read()
n = text.count(find)
if n != 1:
    print(f"found {n} times", file=sys.stderr)
    sys.exit(1)
open(target, "w", encoding="utf-8").write(text.replace(find, replace, 1))
EOF
    then
      status="NOT APPLIED"
      detail="find: text not found exactly once in $(cat "$dir/file")"
    elif ! build_targets "$dir/tests"; then
      status="DOES NOT COMPILE"
      detail=$(grep -m1 -E "error" "$work/build.log" || true)
    else
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
  count[$status]=$(( ${count[$status]:-0} + 1 ))
  line=$(printf '%-16s %-40s %4ss  %s' "$status" "$name" "$(( $(date +%s) - t0 ))" "$detail")
  echo "$line"
  results+=("$line")
done
# Leave the build matching the restored sources.
build_targets || true

total=$(ls -d "$work"/entries/*/ | wc -l)
echo
echo "mutants: $total faults in $(( $(date +%s) - start )) s:" \
  "${count[caught]:-0} caught, ${count[SURVIVED]:-0} survived," \
  "${count[DOES NOT COMPILE]:-0} do not compile, ${count[NOT APPLIED]:-0} not applied," \
  "${count[SKIPPED]:-0} skipped"
[ "${count[caught]:-0}" = "$total" ]
