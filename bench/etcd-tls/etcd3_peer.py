#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""python3-etcd3's Etcd3Client.lock() (gRPC) as the baseline of bench/etcd-tls/run.sh: PROCS
processes, each with its own client, take and release one lock name (or, with PROCS 1, a name of
its own) for SECONDS; prints the total pairs/s. Debian 12's python3-etcd3 (0.12) cannot wait:
its acquire() retries through a tenacity `wait` callback of the old signature, which tenacity 8
calls with another one (TypeError as soon as the lock is held). So a waiter here does what that
callback does, in a loop: acquire(timeout=0) (the library's lease + put-if-absent transaction;
a failed try leaks its lease, as the library's own retry does), then watch_once on the key, for
50 ms at most (the library watches without a start revision: a release between its transaction
and its watch is missed until the watch times out). ENDPOINT is http://host:port or
https://host:port (then with the certificates of LOCKSMITH_TEST_TLS_DIR).

  /usr/bin/python3 bench/etcd-tls/etcd3_peer.py ENDPOINT PROCS SECONDS
"""
import multiprocessing, os, sys, time
from urllib.parse import urlparse


def client(endpoint):
    import etcd3
    u = urlparse(endpoint)
    if u.scheme == "https":
        tls = os.environ["LOCKSMITH_TEST_TLS_DIR"]
        return etcd3.client(host=u.hostname, port=u.port, ca_cert=f"{tls}/ca.pem",
                            cert_cert=f"{tls}/client.pem", cert_key=f"{tls}/client.key")
    return etcd3.client(host=u.hostname, port=u.port)


def worker(endpoint, name, start, seconds, counts, i):
    import etcd3.exceptions
    c = client(endpoint)
    lock = c.lock(name, ttl=30)

    def acquire():
        while not lock.acquire(timeout=0):
            try:
                c.watch_once(lock.key, 0.05)
            except etcd3.exceptions.WatchTimedOut:
                pass
        return True

    acquire(); lock.release()  # connected and warm before the start
    while time.time() < start:
        time.sleep(0.001)
    n, end = 0, start + seconds
    while time.time() < end:
        acquire()
        lock.release()
        n += 1
    counts[i] = n


if __name__ == "__main__":
    endpoint, procs, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    counts = multiprocessing.Array("l", procs)
    start = time.time() + 1.0 + 0.2 * procs
    name = f"locksmith-bench-etcd3-{os.getpid()}"
    ps = [multiprocessing.Process(target=worker, args=(endpoint, name, start, seconds, counts, i))
          for i in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    if any(p.exitcode != 0 for p in ps):
        sys.exit("a worker failed")
    print(round(sum(counts) / seconds))
