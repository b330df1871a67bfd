#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long checks, for a scheduled run (nightly) rather than for every change: each would add more
# to .ci/run than its 15-minute budget allows. From a clone, like .ci/run:
#   tsan   the unit, conformance, multi-process and hostile suites under ThreadSanitizer
#          (scripts/sanitize.sh tsan: a build of its own, build-tsan/, with only the targets those
#          suites run), against every test server: the library's threads (renewal, combined's
#          member requests, ZooKeeper's client) with the strategies' real servers and clusters
#          (without a server its entries were skipped, unseen: Redis over TLS, Sentinel and
#          cluster, etcd's TLS cluster and the ZooKeeper ensemble were). The tests start after
#          the build, so the ensemble's JVMs do not answer late as beside CI's ASan build.
#   mutants  the whole mutation check (scripts/mutants.sh: every entry of tests/mutants/faults.txt;
#          .ci/run checks only those that one stop's commits concern and a rotating share of
#          the others), in its own build (build-mutants/) with test servers of its own
# Prints the time each check took; fails when one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export JOBS=${JOBS:-2} CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-2}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1  # as in .ci/run: a clone elsewhere reuses objects

rc=0
check() {  # check NAME COMMAND...: runs one check, prints its time; a failure fails the run
  local name=$1 t0=$SECONDS result=0
  shift
  echo "== nightly: $name"
  "$@" || result=$?
  echo "== nightly: $name took $((SECONDS - t0)) s$([ $result = 0 ] || echo "  FAILED (exit $result)")"
  [ $result = 0 ] || rc=$result
}
check tsan env -u LOCKSMITH_SERVICES SANITIZE_BUILD_DIR="$root/build-tsan" bash scripts/sanitize.sh tsan
check mutants env BUILD_DIR="$root/build-mutants" bash scripts/mutants.sh
exit $rc
