#!/usr/bin/python3
"""Python peers (Debian packages, so run with /usr/bin/python3): N uncontended acquire+release
pairs on one lock object, as each library documents it. Prints one JSON line.

  /usr/bin/python3 bench/peers/python_lock.py redis-py PAIRS          python3-redis Redis.lock()
  /usr/bin/python3 bench/peers/python_lock.py tooz-redis|tooz-memcached|tooz-file PAIRS
"""
import json, os, sys, tempfile, time
from urllib.parse import urlparse

kind = sys.argv[1] if len(sys.argv) > 1 else "redis-py"
pairs = max(1, min(10_000_000, int(sys.argv[2]) if len(sys.argv) > 2 else 5000))
redis_url = urlparse(os.environ.get("LOCKSMITH_TEST_REDIS_URL", "redis://127.0.0.1:16379"))
mc = os.environ.get("LOCKSMITH_TEST_MEMCACHED", "127.0.0.1:21211")
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
    elif backend == "file":
        d = tempfile.mkdtemp(prefix="locksmith-bench-tooz-")
        url = f"file://{d}"
        cleanup = d
    else:
        sys.exit(f"python_lock.py: unknown tooz backend {backend}")
    coord = coordination.get_coordinator(url, name.encode())
    coord.start()
    lock = coord.get_lock(name.encode())
    acquire, release = lock.acquire, lock.release
else:
    sys.exit(f"python_lock.py: unknown peer {kind}")

for _ in range(50):  # warm-up, not timed
    acquire(); release()
t0 = time.perf_counter()
for _ in range(pairs):
    if not acquire():
        sys.exit("acquire failed")
    release()
s = time.perf_counter() - t0
if kind.startswith("tooz-"):
    coord.stop()
if cleanup:
    import shutil
    shutil.rmtree(cleanup, ignore_errors=True)
print(json.dumps({"peer": kind, "pairs": pairs, "seconds": s, "pairs_per_s": pairs / s}))
