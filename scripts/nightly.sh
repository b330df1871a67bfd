#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long checks, for a scheduled run (nightly) rather than for every change: each would add more
# to .ci/run than its 15-minute budget allows. From a clone, like .ci/run:
#   tsan   the unit, conformance, multi-process and hostile suites under ThreadSanitizer
#          (scripts/sanitize.sh tsan: a build of its own, build-tsan/, with only the targets those
#          suites run), against the single test servers it starts: the library's threads
#          (renewal, combined's member requests, ZooKeeper's client) with the strategies' real
#          servers. Not the clusters' entries (zookeeper.ensemble, etcd.tls_cluster): beside a
#          sanitizer build, three JVMs on two CPUs answer too late (CI's asan step leaves the
#          ensemble out for that), and the strategies' code they run is the same.
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
check tsan env LOCKSMITH_SERVICES="certs redis memcached postgres mariadb zookeeper etcd redis-quorum" \
  SANITIZE_BUILD_DIR="$root/build-tsan" \
  bash scripts/sanitize.sh tsan -E 'zookeeper[.]ensemble|etcd[.]tls_cluster'
check mutants env BUILD_DIR="$root/build-mutants" bash scripts/mutants.sh
exit $rc
