#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Loops the benchmark driver and the peers, aggregates min/median/max, writes the JSON result,
the charts and bench/README.md. Called by bench/run.sh (which builds and starts the servers).

  run_bench.py --mode quick|full --build DIR --command "bench/run.sh --quick"

Standard library only. Fails (exit 1) on errors of the programs it runs, never on figures.
"""
import argparse, atexit, datetime, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time
import re, urllib.parse, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)

LOCAL = ["file", "simple", "semaphore", "shm", "memory", "sql-sqlite"]
REMOTE = ["redis", "memcached", "pg_advisory", "mysql_get_lock", "sql-postgresql", "sql-mariadb",
          "zookeeper", "etcd", "combined"]
MULTI_PROCESS = LOCAL[:4] + ["sql-sqlite"] + REMOTE  # not memory
# combined (over three redis) is measured in scenarios 1 and 3 only, beside the redis row.
ONLY_SCENARIOS = {"combined": {1, 3}}
# Bench ids that are a variant of a strategy (one of its option sets, chosen in locksmith_bench):
# each is its own row everywhere, and is skipped with the reason when its strategy is not built.
VARIANTS = {"sql-sqlite": "sql", "sql-postgresql": "sql", "sql-mariadb": "sql"}
# The server each bench id needs: the variable that names it (scripts/services.sh env).
ENDPOINTS = {"redis": "LOCKSMITH_TEST_REDIS_URL", "memcached": "LOCKSMITH_TEST_MEMCACHED",
             "pg_advisory": "LOCKSMITH_TEST_POSTGRES_DSN",
             "mysql_get_lock": "LOCKSMITH_TEST_MARIADB_DSN",
             "sql-postgresql": "LOCKSMITH_TEST_POSTGRES_DSN",
             "sql-mariadb": "LOCKSMITH_TEST_MARIADB_DSN",
             "zookeeper": "LOCKSMITH_TEST_ZOOKEEPER", "etcd": "LOCKSMITH_TEST_ETCD",
             "combined": "LOCKSMITH_TEST_REDIS_QUORUM"}
# Rows whose loops are slow or that hold a server connection per lock: fewer runs of scenarios
# 2-5 in quick mode, and at most this many locks in scenario 5 (a held pg_advisory lock is one
# server session, so 50; the sql tables grow by one row per name).
# zookeeper and etcd are slow too (every grant is a consensus write: etcd makes ≈ 350 pairs/s,
# three raft writes each), and hold few locks in scenario 5.
DATABASE = ["pg_advisory", "mysql_get_lock", "sql-sqlite", "sql-postgresql", "sql-mariadb", "zookeeper", "etcd"]
MAX_LOCKS = {"pg_advisory": 50, "mysql_get_lock": 50, "sql-sqlite": 1000, "sql-postgresql": 1000, "sql-mariadb": 1000,
             "zookeeper": 200, "etcd": 100}
# Scenario 6's TTL where the mode's is not what decides: etcd's leases are whole seconds with a
# minimum near 2 s; zookeeper ignores it (the bench's session_timeout_ms, 2000, decides).
TTL_MS = {"etcd": 2000, "zookeeper": 2000}

MODES = {
    # runs: repetitions of every figure; seconds: per driver call of that scenario
    # hold_us: scenario 2 again with that critical section (busy) inside each pair, hold_runs
    # times, as "2-hold<us>" (issue 15; full mode only: quick keeps its time budget)
    # database_runs: runs of scenarios 2-5 for the DATABASE rows; database_peer_pairs: pairs of
    # the Symfony peers beside them (PostgreSqlStore makes ≈ 600 pairs/s); sqlite_pairs: fewer
    # still for PdoStore on SQLite, which syncs its journal at each commit (20-500 pairs/s here).
    "quick": dict(runs=5, s1=0.25, s2=0.48, s3=0.4, s4=0.3, locks=1000, ttl_ms=1000, trials=5,
                  s6_runs=1, peer_pairs_remote=700, peer_pairs_local=4000, tooz_pairs=300,
                  cli_runs=100, database_runs=3, sqlite_pairs=20, database_peer_pairs=200,
                  consensus_peer_pairs=150, etcd_s1=0.3, etcd_runs=3, hold_us=[], hold_runs=0,
                  placement_rounds=1, placement_seconds=0.8, placement=["redis", "shm"]),
    # CI's check that every scenario, strategy and peer still runs (bench/run.sh --smoke): each
    # figure once, over the shortest spans the driver measures at all; figures mean nothing here.
    "smoke": dict(runs=1, s1=0.05, s2=0.05, s3=0.05, s4=0.05, locks=100, ttl_ms=1000, trials=1,
                  s6_runs=1, peer_pairs_remote=50, peer_pairs_local=200, tooz_pairs=30,
                  cli_runs=5, database_runs=1, sqlite_pairs=5, database_peer_pairs=20,
                  consensus_peer_pairs=20, etcd_s1=0.05, etcd_runs=1, hold_us=[], hold_runs=0,
                  placement_rounds=1, placement_seconds=0.2, placement=["redis", "shm"]),
    "full": dict(runs=7, s1=1.0, s2=4.0, s3=2.0, s4=2.0, locks=10000, ttl_ms=2000, trials=5,
                 s6_runs=2, peer_pairs_remote=5000, peer_pairs_local=50000, tooz_pairs=2000,
                 cli_runs=1000, database_runs=7, sqlite_pairs=200, database_peer_pairs=2000,
                 consensus_peer_pairs=2000, etcd_s1=2.0, etcd_runs=7, hold_us=[10, 1000],
                 hold_runs=3, placement_rounds=2, placement_seconds=8,
                 placement=["redis", "memcached", "etcd", "file", "semaphore", "shm"]),
}

# Symfony stores measured under contention too (scenario 2's hold runs): processes on one name.
CONTENDED_PEERS = {"redis", "memcached", "flock", "semaphore"}
CONTENDED_PROCS = 4

# peer name -> (command builder, which of our strategies it is compared with)
PEERS = {
    "symfony-redis": ("php", "redis", "redis"),
    "symfony-memcached": ("php", "memcached", "memcached"),
    "symfony-flock": ("php", "flock", "file"),
    "symfony-semaphore": ("php", "semaphore", "semaphore"),
    "symfony-memory": ("php", "memory", "memory"),
    "redis-py": ("py", "redis-py", "redis"),
    "tooz-redis": ("py", "tooz-redis", "redis"),
    "tooz-memcached": ("py", "tooz-memcached", "memcached"),
    "tooz-file": ("py", "tooz-file", "file"),
    "symfony-postgresql": ("php", "postgresql", "pg_advisory"),
    "symfony-pdo-pgsql": ("php", "pdo-pgsql", "sql-postgresql"),
    "symfony-pdo-mysql": ("php", "pdo-mysql", "sql-mariadb"),
    # Symfony's MysqlStore (GET_LOCK) came with 8.2; Debian 12's php-symfony-lock is 5.4, without
    # it: tooz's mysql driver (GET_LOCK through pymysql) is the peer.
    "tooz-mysql": ("py", "tooz-mysql", "mysql_get_lock"),
    "symfony-pdo-sqlite": ("php", "pdo-sqlite", "sql-sqlite"),
    "kazoo": ("py", "kazoo", "zookeeper"),
    "tooz-zookeeper": ("py", "tooz-zookeeper", "zookeeper"),
    "etcd3": ("py", "etcd3", "etcd"),
    "tooz-etcd3gw": ("py", "tooz-etcd3gw", "etcd"),
    "tooz-etcd3": ("py", "tooz-etcd3", "etcd"),
}
# Peers of the consensus stores: fewer pairs (each is two or three consensus writes).
CONSENSUS_PEERS = {"kazoo", "tooz-zookeeper", "etcd3", "tooz-etcd3gw", "tooz-etcd3"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run_json(cmd, timeout=120, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def agg(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def aggregate_runs(runs):
    """runs: list of figure dicts -> {key: {min, median, max, n}} for numeric keys."""
    out, texts = {}, {}
    keys = sorted({k for r in runs for k in r})
    for k in keys:
        vals = [r.get(k) for r in runs]
        if all(isinstance(v, (int, float)) or v is None for v in vals):
            a = agg(vals)
            if a:
                out[k] = a
        elif all(isinstance(v, list) for v in vals if v is not None):
            flat = [x for v in vals if v for x in v if isinstance(x, (int, float))]
            if flat:
                out[k] = agg(flat)
        else:
            texts[k] = next(v for v in vals if v is not None)
    out.update(texts)
    return out


def machine():
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with open("/proc/meminfo") as f:
        mem = f.readline().split(":", 1)[1].strip()
    return {"nproc": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
            "memory": mem, "load_average_at_start": list(os.getloadavg()),
            "os": subprocess.run(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"],
                                 capture_output=True, text=True).stdout.strip()}


def git_commit():
    def g(*a):
        return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    dirty = g("status", "--porcelain")
    return {"commit": g("rev-parse", "HEAD"), "dirty": bool(dirty),
            "dirty_files": len(dirty.splitlines()) if dirty else 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=MODES, default="quick")
    ap.add_argument("--build", required=True)
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--results", default=os.path.join(BENCH, "results"))
    ap.add_argument("--report", default=os.path.join(BENCH, "README.md"))
    args = ap.parse_args()
    m = MODES[args.mode]
    t_start = time.time()
    driver = os.path.join(args.build, "bench", "harness", "locksmith_bench")
    work = tempfile.mkdtemp(prefix="locksmith-bench-")
    bench_id = f"{os.getpid()}"
    env = dict(os.environ)

    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "mode": args.mode, "command": args.command, "machine": machine(),
              "git": git_commit(), "settings": m, "strategies": {}, "peers": {}, "peers_contended": {}, "skipped": {},
              "servers": {}}

    def drive(strategy, scenario, **kw):
        cmd = [driver, "--strategy", strategy, "--scenario", str(scenario), "--dir", work,
               "--id", bench_id]
        for k, v in kw.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        return run_json(cmd, timeout=120, env=env)["figures"]

    # Which strategies (and variants) are built and reachable.
    strategies = []

    # What a run leaves on the servers (redis keys, the sql tables) and in its folder goes at the
    # end, and also when a program fails midway.
    def cleanup():
        for s in strategies:
            subprocess.run([driver, "--strategy", s, "--scenario", "cleanup", "--dir", work,
                            "--id", bench_id], capture_output=True)
        strategies.clear()
        shutil.rmtree(work, ignore_errors=True)
    atexit.register(cleanup)
    for s in LOCAL + REMOTE:
        if s in ENDPOINTS and not env.get(ENDPOINTS[s]):
            result["skipped"][s] = f"{ENDPOINTS[s]} unset (no server)"
            continue
        try:
            drive(s, 1, seconds=0.02)
            strategies.append(s)
        except RuntimeError as e:
            if "not built" in str(e):
                result["skipped"][s] = (f"strategy {VARIANTS[s]} not built in this configuration"
                                        if s in VARIANTS else "not built in this configuration")
            elif "this build has no" in str(e):  # the strategy is built, this driver is not
                result["skipped"][s] = str(e).split(": ", 1)[-1].strip()[:300]
            else:
                raise
    log(f"strategies: {strategies}; skipped: {result['skipped']}")

    # Peers that can run here.
    peers = []
    have_php = shutil.which("php") and os.path.exists(
        "/usr/share/php/Symfony/Component/Lock/autoload.php")
    for name, (kind, arg, ours) in PEERS.items():
        if ours not in strategies:
            continue
        if kind == "php" and not have_php:
            result["skipped"][name] = "php-cli / php-symfony-lock not installed"
            continue
        if kind == "py" and not os.path.exists("/usr/bin/python3"):
            result["skipped"][name] = "/usr/bin/python3 missing"
            continue
        peers.append(name)

    def run_peer(name, pairs_remote, pairs_local, warmup=50):
        kind, arg, ours = PEERS[name]
        remote = ours in REMOTE
        if kind == "php":
            pairs = pairs_remote if remote else pairs_local
            if ours in DATABASE:
                pairs = min(pairs, m["database_peer_pairs"])
            if arg == "pdo-sqlite":
                pairs, warmup = min(pairs, m["sqlite_pairs"]), min(warmup, 2)
            return run_json(["php", os.path.join(BENCH, "peers", "symfony_lock.php"), arg,
                             str(pairs), str(warmup)], env=env)
        pairs = m["tooz_pairs"] if name.startswith("tooz") else (
            pairs_remote if remote else pairs_local)
        if name in CONSENSUS_PEERS:
            pairs = min(pairs, m["consensus_peer_pairs"])
        return run_json(["/usr/bin/python3", os.path.join(BENCH, "peers", "python_lock.py"), arg,
                         str(pairs)], env=env)

    def run_contended_peer(arg, hold):
        """CONTENDED_PROCS Symfony processes on one name, started together: total pairs/s and
        the fairness (fewest / most pairs of one process)."""
        start = time.time() + 1.0  # past every process's start-up
        seconds = m["s2"] / 2
        procs = [subprocess.Popen(["php", os.path.join(BENCH, "peers", "symfony_lock.php"), arg,
                                   "--contended", f"bench.contended.{os.getpid()}", f"{start:.3f}",
                                   str(seconds), str(hold)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(CONTENDED_PROCS)]
        made = []
        for proc in procs:
            out, err = proc.communicate(timeout=seconds + 60)
            if proc.returncode != 0:
                raise RuntimeError(f"symfony_lock.php {arg} --contended failed: {err[-500:]}")
            made.append(json.loads(out.strip().splitlines()[-1])["pairs"])
        shutil.rmtree(os.path.join(tempfile.gettempdir(), "locksmith-bench-symfony-contended"),
                      ignore_errors=True)
        return {"pairs_per_s": sum(made) / seconds, "min_over_max": min(made) / max(1, max(made))}

    # Peers that fail to start (missing module) are skipped with the reason, once.
    for name in list(peers):
        try:
            run_peer(name, 5, 5, warmup=2)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            result["skipped"][name] = str(e)[-300:]
            peers.remove(name)
    log(f"peers: {peers}")

    # Scenario 1 and the peers, interleaved run by run so that load changes hit all alike.
    s1 = {s: [] for s in strategies}
    pr = {p: [] for p in peers}
    for r in range(m["runs"]):
        for s in strategies:
            if s == "etcd" and r >= m["etcd_runs"]:
                continue
            s1[s].append(drive(s, 1, seconds=m["etcd_s1"] if s == "etcd" else m["s1"]))
        for p in peers:
            if PEERS[p][2] == "etcd" and r >= m["etcd_runs"]:
                continue
            pr[p].append(run_peer(p, m["peer_pairs_remote"], m["peer_pairs_local"]))
        log(f"scenario 1 + peers: run {r + 1}/{m['runs']} done ({time.time() - t_start:.0f} s)")
    for s in strategies:
        result["strategies"][s] = {"1": aggregate_runs(s1[s])}
    for p in peers:
        ours = PEERS[p][2]
        # Paired by round: our figure and the peer's from the same round of the loop above.
        paired = [{"pairs_per_s": x["pairs_per_s"], "ours_over_peer": o["ours"] / x["pairs_per_s"]}
                  for o, x in zip(s1[ours], pr[p])]
        result["peers"][p] = {"compared_with": ours, **aggregate_runs(paired),
                              "per_run": [x["pairs_per_s"] for x in pr[p]]}
    for s in strategies:
        result["strategies"][s]["1"]["per_run"] = [
            {k: v for k, v in x.items() if isinstance(v, (int, float))} for x in s1[s]]

    # Scenarios 2-5 (5 for memory too), 6.
    for sc, kw in [(2, dict(seconds=m["s2"])), (3, dict(seconds=m["s3"])),
                   (4, dict(seconds=m["s4"])), (5, dict(locks=m["locks"]))]:
        for s in strategies:
            if s not in MULTI_PROCESS and sc != 5:
                result["strategies"][s][str(sc)] = {"skipped": "in-process strategy"}
                continue
            if sc not in ONLY_SCENARIOS.get(s, {sc}):
                result["strategies"][s][str(sc)] = {"skipped": "not measured (scenarios 1 and 3 only)"}
                continue
            k = dict(kw)
            if sc == 5 and s in MAX_LOCKS:
                k["locks"] = min(k["locks"], MAX_LOCKS[s])
            runs = [drive(s, sc, **k)
                    for _ in range(m["database_runs"] if s in DATABASE else m["runs"])]
            result["strategies"][s][str(sc)] = aggregate_runs(runs)
        log(f"scenario {sc} done ({time.time() - t_start:.0f} s)")
        if sc != 2:
            continue
        for hold in m["hold_us"]:
            for s in strategies:
                if s in MULTI_PROCESS and 2 in ONLY_SCENARIOS.get(s, {2}):
                    result["strategies"][s][f"2-hold{hold}"] = aggregate_runs(
                        [drive(s, 2, seconds=m["s2"], hold_us=hold) for _ in range(m["hold_runs"])])
            log(f"scenario 2 with {hold} us holds done ({time.time() - t_start:.0f} s)")
            for p in peers:
                kind, arg, ours = PEERS[p]
                if kind == "php" and arg in CONTENDED_PEERS and f"2-hold{hold}" in result["strategies"].get(ours, {}):
                    result["peers_contended"][f"{p}-hold{hold}"] = dict(
                        compared_with=ours, hold_us=hold, processes=CONTENDED_PROCS,
                        **aggregate_runs([run_contended_peer(arg, hold) for _ in range(m["hold_runs"])]))
            log(f"contended peers with {hold} us holds done ({time.time() - t_start:.0f} s)")
    for s in strategies:
        if s not in MULTI_PROCESS:
            result["strategies"][s]["6"] = {"skipped": "in-process strategy"}
            continue
        if 6 not in ONLY_SCENARIOS.get(s, {6}):
            result["strategies"][s]["6"] = {"skipped": "not measured (scenarios 1 and 3 only)"}
            continue
        runs = [drive(s, 6, ttl_ms=TTL_MS.get(s, m["ttl_ms"]), trials=m["trials"])
                for _ in range(m["s6_runs"])]
        result["strategies"][s]["6"] = aggregate_runs(runs)
    log(f"scenario 6 done ({time.time() - t_start:.0f} s)")

    # Scenario 2 again with the processes and the server pinned (bench/placement.sh): does a
    # contended figure fall because of the library, or because clients, server and waiters share
    # two CPUs? (Quick mode: two strategies, briefly, so that the script keeps working.)
    placed = [s for s in m["placement"] if s in strategies]
    if placed:
        p = subprocess.run([os.path.join(BENCH, "placement.sh"), "--rounds",
                            str(m["placement_rounds"]), "--seconds", str(m["placement_seconds"])]
                           + placed, capture_output=True, text=True, timeout=3600,
                           env=dict(env, LOCKSMITH_BENCH_BUILD=args.build))
        if p.returncode != 0:
            raise RuntimeError(f"bench/placement.sh failed: {p.stderr[-800:]}")
        for line in p.stderr.splitlines():
            if skip := re.match(r"placement: (\S+) skipped: (.*)", line):
                result["skipped"][f"placement-{skip[1]}"] = skip[2]
        runs = {}
        for line in p.stdout.splitlines():
            placement, strategy, procs, ours, raw = (line.split("\t") + [""])[:5]
            cell = runs.setdefault(strategy, {}).setdefault(placement, {})
            cell.setdefault(f"one_name_p{procs}", []).append(float(ours))
            if raw:
                cell.setdefault(f"raw_one_name_p{procs}", []).append(float(raw))
        result["placement"] = {s: {pl: {k: agg(v) for k, v in cells.items()}
                                   for pl, cells in by.items()} for s, by in runs.items()}
        log(f"placement done ({time.time() - t_start:.0f} s)")

    # CLI: `locksmith run -n` beside flock(1), through bench/cli's spawn_bench.
    spawn = os.path.join(args.build, "bench", "cli", "cli_spawn_bench")
    cli = os.path.join(args.build, "cli", "locksmith")
    if os.path.exists(spawn) and os.path.exists(cli) and shutil.which("flock"):
        os.makedirs(os.path.join(work, "cli-locks"), exist_ok=True)
        conf = os.path.join(work, "cli.json")
        with open(conf, "w") as f:
            json.dump({"strategies": {"file": {"options": {"lock_dir": os.path.join(work, "cli-locks")}}}}, f)
        cenv = dict(env, LOCKSMITH_CONFIG=conf)
        med = {"flock": [], "locksmith": []}
        for _ in range(m["runs"]):
            p = subprocess.run([spawn, "--runs", str(m["cli_runs"]), "--warmup", "10", "--",
                                "flock", "flock", "-n", os.path.join(work, "f.lock"), "true", "---",
                                "locksmith", cli, "run", "-n", "bench.name", "--", "true"],
                               capture_output=True, text=True, timeout=300, env=cenv)
            if p.returncode != 0:
                raise RuntimeError(f"cli_spawn_bench failed: {p.stderr[-500:]}")
            for line in p.stdout.splitlines():
                parts = line.split()
                if parts and parts[0] in med:
                    med[parts[0]].append(float(parts[2]) / 1000.0)  # median_us -> ms
        result["cli"] = {"flock_ms_per_run": agg(med["flock"]),
                         "locksmith_ms_per_run": agg(med["locksmith"]),
                         "ratio_runs_per_s": agg([f / l for f, l in zip(med["flock"], med["locksmith"])])}
        log(f"cli done ({time.time() - t_start:.0f} s)")
    else:
        result["skipped"]["cli"] = "cli/locksmith, cli_spawn_bench or flock(1) missing"

    cleanup()

    for what, cmd in [("redis", ["redis-cli", "-u", env.get("LOCKSMITH_TEST_REDIS_URL", ""), "info", "server"])]:
        if env.get("LOCKSMITH_TEST_REDIS_URL") and shutil.which("redis-cli"):
            out = subprocess.run(cmd, capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith("redis_version:"):
                    result["servers"]["redis"] = line.split(":", 1)[1].strip()
    if env.get("LOCKSMITH_TEST_MEMCACHED"):
        result["servers"]["memcached"] = subprocess.run(
            ["sh", "-c", "memcached -V 2>/dev/null"], capture_output=True, text=True).stdout.strip()
    # PostgreSQL, MariaDB, SQLite: the version the raw loop's connection reported.
    for s, server in [("pg_advisory", "postgresql"), ("sql-postgresql", "postgresql"),
                      ("sql-mariadb", "mariadb"), ("sql-sqlite", "sqlite")]:
        version = result["strategies"].get(s, {}).get("1", {}).get("server_version")
        if isinstance(version, str):
            result["servers"].setdefault(server, version)
    # Servers that no row asked (sql not built): ask them with their own clients.
    pg, my = env.get("LOCKSMITH_TEST_POSTGRES_DSN"), env.get("LOCKSMITH_TEST_MARIADB_DSN")
    asks = []
    if pg and "postgresql" not in result["servers"]:
        asks.append(("postgresql", ["psql", pg, "-XAtc", "SHOW server_version"], {}))
    if my and "mariadb" not in result["servers"]:
        u = urllib.parse.urlparse(my)
        asks.append(("mariadb", ["mariadb", "--no-defaults", "--protocol=tcp", "-h", u.hostname,
                                 "-P", str(u.port or 3306), "-u", u.username or "", "-N", "-e",
                                 "SELECT VERSION()"], {"MYSQL_PWD": u.password or ""}))
    for server, argv, extra in asks:
        if shutil.which(argv[0]):
            p = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                               env=dict(env, **extra))
            if p.returncode == 0 and p.stdout.strip():
                result["servers"][server] = p.stdout.strip().splitlines()[0]
    # ZooKeeper: its `srvr` four-letter word (allowed by default); etcd: GET /version.
    if env.get("LOCKSMITH_TEST_ZOOKEEPER"):
        import socket
        host, _, port = env["LOCKSMITH_TEST_ZOOKEEPER"].split(",")[0].split("/")[0].rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=5) as c:
                c.sendall(b"srvr")
                text = b""
                while chunk := c.recv(4096):
                    text += chunk
            for line in text.decode(errors="replace").splitlines():
                if line.startswith("Zookeeper version:"):
                    # "3.8.0-${mvngit.commit.id}, built on ..." (Debian): the release
                    version = line.split(":", 1)[1].split(",")[0].strip()
                    result["servers"]["zookeeper"] = version.split("-")[0]
        except (OSError, ValueError):
            pass
    if env.get("LOCKSMITH_TEST_ETCD"):
        try:
            url = env["LOCKSMITH_TEST_ETCD"].split(",")[0].rstrip("/") + "/version"
            with urllib.request.urlopen(url, timeout=5) as f:
                result["servers"]["etcd"] = json.load(f).get("etcdserver", "")
        except (OSError, ValueError):
            pass
    result["seconds_total"] = round(time.time() - t_start, 1)

    os.makedirs(args.results, exist_ok=True)
    stamp = result["date"][:10]
    path = os.path.join(args.results, f"{stamp}-{args.mode}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    log(f"wrote {path}")
    sys.path.insert(0, HERE)
    import report
    report.write(result, path, args.report)
    log(f"wrote {args.report} ({time.time() - t_start:.0f} s in all)")


if __name__ == "__main__":
    main()
