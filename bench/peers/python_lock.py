#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Python peers (Debian packages, so run with /usr/bin/python3): N uncontended acquire+release
pairs on one lock object, as each library documents it. Prints one JSON line.

  /usr/bin/python3 bench/peers/python_lock.py redis-py PAIRS          python3-redis Redis.lock()
  /usr/bin/python3 bench/peers/python_lock.py tooz-redis|tooz-memcached|tooz-file PAIRS
  /usr/bin/python3 bench/peers/python_lock.py tooz-zookeeper|tooz-etcd3gw|tooz-etcd3|tooz-mysql PAIRS
  /usr/bin/python3 bench/peers/python_lock.py kazoo PAIRS           python3-kazoo KazooClient.Lock()
  /usr/bin/python3 bench/peers/python_lock.py kazoo-semaphore-N PAIRS   KazooClient.Semaphore(max_leases=N)
  /usr/bin/python3 bench/peers/python_lock.py etcd3 PAIRS           python3-etcd3 Etcd3Client.lock()

  /usr/bin/python3 bench/peers/python_lock.py kazoo|kazoo-semaphore-N --contended NAME START SECONDS HOLD_MS
    One of several processes on the node /NAME: from the wall-clock time START (seconds since
    the epoch) for SECONDS, a blocking acquire, HOLD_MS of sleep, release. Prints the grants this
    process made. The nodes under /NAME stay (ZooKeeper of the tests: remove with zkCli).
"""
import json, os, sys, tempfile, time
from urllib.parse import urlparse

kind = sys.argv[1] if len(sys.argv) > 1 else "redis-py"
contended = len(sys.argv) > 2 and sys.argv[2] == "--contended"
pairs = 0 if contended else max(1, min(10_000_000, int(sys.argv[2]) if len(sys.argv) > 2 else 5000))
redis_url = urlparse(os.environ.get("LOCKSMITH_TEST_REDIS_URL", "redis://127.0.0.1:16379"))
mc = os.environ.get("LOCKSMITH_TEST_MEMCACHED", "127.0.0.1:21211")
zk = os.environ.get("LOCKSMITH_TEST_ZOOKEEPER", "127.0.0.1:12181")
etcd_url = urlparse(os.environ.get("LOCKSMITH_TEST_ETCD", "http://127.0.0.1:12379").split(",")[0])
name = f"locksmith-bench-python-{os.getpid()}"
cleanup = None

if kind == "redis-py":
    import redis
    db = int(redis_url.path[1:]) if redis_url.path and len(redis_url.path) > 1 else 0
    client = redis.Redis(host=redis_url.hostname, port=redis_url.port or 6379, db=db)
    lock = client.lock(name, timeout=30)
    acquire, release = lock.acquire, lock.release
elif kind.startswith("tooz-"):
    from tooz import coordination
    backend = kind[5:]
    if backend == "redis":
        url = f"redis://{redis_url.hostname}:{redis_url.port or 6379}"
    elif backend == "memcached":
        url = f"memcached://{mc}"
    elif backend == "zookeeper":
        url = f"zookeeper://{zk}"
    elif backend in ("etcd3gw", "etcd3"):  # the gateway driver; the gRPC one (python3-etcd3)
        scheme = "etcd3+http" if backend == "etcd3gw" else "etcd3"
        url = f"{scheme}://{etcd_url.hostname}:{etcd_url.port or 2379}"
    elif backend == "mysql":  # GET_LOCK(name, timeout) + RELEASE_LOCK through pymysql
        my = urlparse(os.environ["LOCKSMITH_TEST_MARIADB_DSN"])
        url = (f"mysql://{my.username}:{my.password}@{my.hostname}:{my.port or 3306}"
               f"{my.path}")
    elif backend == "file":
        d = tempfile.mkdtemp(prefix="locksmith-bench-tooz-")
        url = f"file://{d}"
        cleanup = d
    else:
        sys.exit(f"python_lock.py: unknown tooz backend {backend}")
    try:
        coord = coordination.get_coordinator(url, name.encode())
    except TypeError as e:
        if backend != "etcd3gw" or "api_path" not in str(e):
            raise
        sys.exit("tooz's etcd3gw driver passes api_path= to etcd3gw.client(), which this "
                 "python3-etcd3gw does not take (Debian's tooz 3.1 and etcd3gw 2.0 do not match); "
                 "tooz-etcd3 (its gRPC driver) runs instead")
    coord.start()
    lock = coord.get_lock(name.encode())
    acquire, release = lock.acquire, lock.release
elif kind == "kazoo" or kind.startswith("kazoo-semaphore-"):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=zk)
    client.start(timeout=10)
    path = f"/{sys.argv[3]}" if contended else f"/locksmith-bench-python-{os.getpid()}"
    if kind == "kazoo":
        lock = client.Lock(path + "/lock")
    else:  # Curator's InterProcessSemaphoreV2 shape: a lock node, then a lease node
        lock = client.Semaphore(path + "/semaphore", max_leases=int(kind.rsplit("-", 1)[1]))
    acquire, release = lock.acquire, lock.release
    def cleanup_kazoo():
        client.delete(path, recursive=True)
        client.stop()
    cleanup = cleanup_kazoo
elif kind == "etcd3":
    import etcd3
    client = etcd3.client(host=etcd_url.hostname, port=etcd_url.port or 2379)
    lock = client.lock(name, ttl=30)
    acquire, release = lock.acquire, lock.release
else:
    sys.exit(f"python_lock.py: unknown peer {kind}")

if contended:
    start, seconds, hold = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]) / 1000
    time.sleep(max(0.001, start - time.time()))
    made, end = 0, start + seconds
    while time.time() < end:
        acquire()
        time.sleep(hold)
        release()
        made += 1
    print(json.dumps({"peer": kind, "pairs": made, "seconds": time.time() - start}))
    if kind.startswith("kazoo"):
        client.stop()
    sys.exit(0)

for _ in range(50):  # warm-up, not timed
    acquire(); release()
t0 = time.perf_counter()
for _ in range(pairs):
    if not acquire():
        sys.exit("acquire failed")
    release()
s = time.perf_counter() - t0
if kind == "tooz-zookeeper":  # its lock node stays behind: remove it (and /tooz when empty)
    coord._coord.delete(f"/tooz/locks/{name}", recursive=True)
    for path in ("/tooz/locks", "/tooz"):
        if not coord._coord.get_children(path):
            coord._coord.delete(path)
if kind.startswith("tooz-"):
    coord.stop()
if callable(cleanup):
    cleanup()
elif cleanup:
    import shutil
    shutil.rmtree(cleanup, ignore_errors=True)
print(json.dumps({"peer": kind, "pairs": pairs, "seconds": s, "pairs_per_s": pairs / s}))
