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
# LOCKSMITH_TEST_REDIS_URL / LOCKSMITH_TEST_MEMCACHED / LOCKSMITH_TEST_POSTGRES_DSN /
# LOCKSMITH_TEST_ZOOKEEPER (when unset and redis-server / memcached / postgres / zookeeper are
# installed, the script starts its own on free ports in a temporary directory and stops them at
# the end).
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
server_pids=()
cleanup() {
  if [ -n "$backup" ] && [ -f "$backup" ]; then
    cp "$backup" "$target"  # a new mtime, so that the next build recompiles it
    echo "mutants: restored $target" >&2
  fi
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -z "${pg_env+x}" ] || env "${pg_env[@]}" "$root/scripts/services.sh" stop >/dev/null 2>&1 || true
  [ -z "${zk_env+x}" ] || env "${zk_env[@]}" "$root/scripts/services.sh" stop >/dev/null 2>&1 || true
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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
if [ -z "${LOCKSMITH_TEST_REDIS_URL:-}" ] && command -v redis-server >/dev/null; then
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
  server_pids+=($!)
  wait_port "$port" && export LOCKSMITH_TEST_REDIS_URL=redis://127.0.0.1:$port/0
fi
if [ -z "${LOCKSMITH_TEST_MEMCACHED:-}" ] && command -v memcached >/dev/null; then
  port=$(free_port)
  user_opt=()
  [ "$(id -u)" = 0 ] && user_opt=(-u root)
  memcached -l 127.0.0.1 -p "$port" -U 0 "${user_opt[@]}" >"$work/memcached.log" 2>&1 &
  server_pids+=($!)
  wait_port "$port" && export LOCKSMITH_TEST_MEMCACHED=127.0.0.1:$port
fi

if [ -z "${LOCKSMITH_TEST_POSTGRES_DSN:-}" ] && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  chmod 711 "$work"  # postgres runs as its own user and must reach its folder
  pg_env=(LOCKSMITH_SERVICES_DIR="$work/services" LOCKSMITH_SERVICES=postgres
          LOCKSMITH_POSTGRES_PORT="$(free_port)")
  env "${pg_env[@]}" "$root/scripts/services.sh" start >"$work/postgres-start.log" 2>&1 &&
    eval "$(env "${pg_env[@]}" "$root/scripts/services.sh" env)"
fi

if [ -z "${LOCKSMITH_TEST_ZOOKEEPER:-}" ] && [ -r /usr/share/java/zookeeper.jar ]; then
  zk_env=(LOCKSMITH_SERVICES_DIR="$work/services-zk" LOCKSMITH_SERVICES=zookeeper
          LOCKSMITH_ZOOKEEPER_PORT="$(free_port)")
  env "${zk_env[@]}" "$root/scripts/services.sh" start >"$work/zookeeper-start.log" 2>&1 &&
    eval "$(env "${zk_env[@]}" "$root/scripts/services.sh" env)"
fi

# --- build and baseline ----------------------------------------------------------------------
# The targets are the test executables the entries name (their file names), the strategy
# modules the library loads at run time (redis, memcached), and the CLI for its tests.
targets() {
  cat "$work"/entries/*/tests | awk '{print $1}' | xargs -n1 basename | sort -u
  ninja -C "$build" -t targets all | grep -o 'locksmith-modules/liblocksmith_[a-z_0-9]*\.so' |
    sed 's|.*/lib||; s|\.so$||' | sort -u
  grep -qh '^tests/cli/' "$work"/entries/*/tests && echo locksmith_cli
  return 0
}
build_targets() {
  # shellcheck disable=SC2046
  cmake --build "$build" -j "$jobs" --target $(targets) >"$work/build.log" 2>&1
}
run_test() {  # run_test "<command relative to the build dir>" -> its exit status
  local cmd=$1 rc=0
  (cd "$build" && timeout 900 $cmd >"$work/test.log" 2>&1) || rc=$?
  return $rc
}

start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" 2>&1 ||
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
    elif ! build_targets; then
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
