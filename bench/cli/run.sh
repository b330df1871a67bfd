#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Measures `locksmith run -n NAME true` beside `flock -n FILE true`, in the same run, and what
# the dynamic loader does at start-up for each (LD_DEBUG=statistics).
#
#   bench/cli/run.sh [BUILD_DIR] [RUNS]       (defaults: build, 1000)
#   EXTRA="label=/path/to/locksmith ..." bench/cli/run.sh ...   also times other locksmith builds
#
# Needs the build's cli/locksmith and bench/cli/cli_spawn_bench. Both commands run the same
# child (/bin/true, found through PATH) on a lock file in the same private directory; the runs
# are interleaved so that load changes hit both alike. Prints a Markdown-ready block.
set -euo pipefail

build=${1:-build}
runs=${2:-1000}
locksmith=$build/cli/locksmith
bench=$build/bench/cli/cli_spawn_bench
for f in "$locksmith" "$bench"; do
  [[ -x $f ]] || { echo "run.sh: $f not found; build first (cmake --build $build)" >&2; exit 66; }
done
command -v flock >/dev/null || { echo "run.sh: flock(1) not found (apt-get install util-linux)" >&2; exit 69; }

work=$(mktemp -d "${TMPDIR:-/tmp}/locksmith-cli-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -m 700 "$work/locks"
printf '{"strategies":{"file":{"options":{"lock_dir":"%s"}}}}\n' "$work/locks" > "$work/config.json"
# Not in the timed loop: LOCKSMITH_CONFIG is how a deployment would point at its config.
export LOCKSMITH_CONFIG=$work/config.json

extra=()
for item in ${EXTRA:-}; do
  extra+=(--- "${item%%=*}" "${item#*=}" run -n bench.name -- true)
done

echo "## locksmith run vs flock ($(date -u +%Y-%m-%dT%H:%MZ))"
echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)"
echo "locksmith: $("$locksmith" --version), $(ldd "$locksmith" | grep -c '=>') shared libraries"
echo "command: bench/cli/run.sh $build $runs"
echo
echo '```'
"$bench" --runs "$runs" --warmup 50 -- \
  "flock -n FILE true" flock -n "$work/flock.lock" true --- \
  "locksmith run -n NAME true" "$locksmith" run -n bench.name -- true --- \
  "true (spawn floor)" true "${extra[@]}"
echo '```'
echo
echo "Dynamic loader at start-up (LD_DEBUG=statistics, the locksmith/flock process only):"
echo
echo '```'
for label in flock locksmith; do
  if [[ $label == flock ]]; then cmd=(flock -n "$work/flock.lock" true); else cmd=("$locksmith" run -n bench.name -- true); fi
  # The first pid in the output is the program itself; the child (true) comes after it.
  LD_DEBUG=statistics "${cmd[@]}" 2>&1 >/dev/null |
    awk -v l="$label" '
      NR == 1 { sub(":", "", $1); pid = $1 }
      $1 == pid":" && /total startup time/ { printf "%-10s startup %s cycles", l, $(NF-1) }
      $1 == pid":" && /final number of relocations:/ { printf ", relocations %s", $NF }
      $1 == pid":" && /number of relative relocations/ { printf ", relative %s", $NF }
      END { print "" }'
done
echo '```'
echo
echo "Shared libraries locksmith loads:"
echo
echo '```'
ldd "$locksmith" | awk '{print $1}' | tr '\n' ' '
echo
echo '```'
