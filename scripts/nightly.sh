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
# Prints the time each check took; fails when one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export JOBS=${JOBS:-2} CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-2}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1  # as in .ci/run: a clone elsewhere reuses objects

t0=$SECONDS rc=0
echo "== nightly: tsan"
LOCKSMITH_SERVICES="certs redis memcached postgres mariadb zookeeper etcd redis-quorum" \
  SANITIZE_BUILD_DIR="$root/build-tsan" \
  bash scripts/sanitize.sh tsan -E 'zookeeper[.]ensemble|etcd[.]tls_cluster' || rc=$?
echo "== nightly: tsan took $((SECONDS - t0)) s$([ $rc = 0 ] || echo "  FAILED (exit $rc)")"
exit $rc
