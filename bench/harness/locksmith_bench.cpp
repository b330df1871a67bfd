// SPDX-License-Identifier: MIT
// locksmith_bench: one benchmark run of one scenario for one strategy; prints one JSON object.
// bench/run.sh (through bench/harness/run_bench.py) calls it repeatedly and aggregates.
//
//   locksmith_bench --strategy ID --scenario N [--seconds S] [--dir DIR] [--id ID]
//                   [--locks N] [--ttl-ms MS] [--trials K] [--only ours|raw] [--hold-us N]
//                   [--procs 1|2|4|8]
//   locksmith_bench --strategy ID --scenario cleanup --dir DIR --id ID
//
// ID is a strategy's name, or a variant: one strategy with one of its option sets, named
// <strategy>-<variant> (sql-sqlite, sql-postgresql, sql-mariadb: the sql strategy on each driver).
// `combined` is the combined strategy over the three redis servers of LOCKSMITH_TEST_REDIS_QUORUM
// (consensus quorum).
//
// Scenarios (each child process builds its own store with the same options):
//   1  uncontended lock()+unlock() pairs/s, one thread, and the raw baseline for the backend,
//      taking turns in 8 slices
//   2  pairs/s with 1, 2, 4, 8 processes, on one name and on distinct names, each pair holding
//      the lock for --hold-us microseconds of busy work (default 0); for file, semaphore and shm
//      also the raw loop of scenario 1 in as many processes on one shared primitive; --procs N
//      measures only N processes (for profiling: each cell lasts --seconds / 8 all the same)
//   3  hand-over latency (holder's unlock() -> another process's acquire), 5 processes: at each
//      release 4 others wait
//   4  fairness: acquisitions per process, 4 processes, one name, no hold
//   5  RSS and fds per held lock, N (10,000) locks held at once
//   6  recovery: K holders killed with SIGKILL (their TTL: --ttl-ms), time until a waiting
//      process (default TTL) holds each lock
// Endpoints: LOCKSMITH_TEST_REDIS_URL, LOCKSMITH_TEST_MEMCACHED, LOCKSMITH_TEST_POSTGRES_DSN,
// LOCKSMITH_TEST_MARIADB_DSN, LOCKSMITH_TEST_ZOOKEEPER, LOCKSMITH_TEST_ETCD,
// LOCKSMITH_TEST_REDIS_QUORUM (scripts/services.sh env); the TLS variants redis-tls
// (LOCKSMITH_TEST_REDIS_TLS_URL), etcd-tls and etcd-cluster, with LOCKSMITH_TEST_TLS_DIR.
// Every loop is bounded by time or count. Nothing here judges a figure.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/locksmith.hpp>

#ifdef LOCKSMITH_BENCH_HIREDIS
#include <hiredis/hiredis.h>

#include "redis_scripts.hpp"  // locksmith_redis_scripts (strategies/redis/CMakeLists.txt)
#endif
#ifdef LOCKSMITH_BENCH_LIBMEMCACHED
#include <libmemcached/memcached.h>
#include <netinet/tcp.h>
#endif
#ifdef LOCKSMITH_BENCH_LIBPQ
#include <libpq-fe.h>
#endif
#ifdef LOCKSMITH_BENCH_LIBMARIADB
#include <mysql.h>
#endif
#ifdef LOCKSMITH_BENCH_SQLITE3
#include <sqlite3.h>
#endif
#ifdef LOCKSMITH_BENCH_ZOOKEEPER
#include <zookeeper.h>
#endif
#ifdef LOCKSMITH_BENCH_ETCD
#include "http_connection.hpp"  // strategies/etcd: the strategy's own HTTP/1.1 transport
#endif
#include <locksmith/author/strategy_support.hpp>

using namespace locksmith;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct settings {
    std::string strategy;
    std::string scenario;
    double seconds = 0.5;
    std::string dir = "/tmp/locksmith-bench";
    std::string id = "0";
    int locks = 10000;
    int ttl_ms = 1000;
    int trials = 5;
    std::string only;  // scenario 1: "ours" or "raw" alone, for profiling
    int hold_us = 0;   // scenario 2: the critical section, busy, between lock() and unlock()
    int procs = 0;     // scenario 2: only this process count (for profiling); 0: 1, 2, 4, 8
};
settings cfg;

std::int64_t now_ns() {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "locksmith_bench (%s, scenario %s): %s\n", cfg.strategy.c_str(),
                 cfg.scenario.c_str(), what.c_str());
    std::exit(1);
}

std::uint32_t fnv(const std::string& s) {
    std::uint32_t h = 2166136261u;
    for (unsigned char c : s) h = (h ^ c) * 16777619u;
    return h;
}

int semaphore_key() {
    return int(fnv("locksmith-bench-" + cfg.id) & 0x7fffffffu) | 1;
}
std::string shm_segment() {
    return "locksmith-bench-" + cfg.id;
}
std::string remote_prefix() {
    return "locksmith-bench:" + cfg.id + ":";
}

// The strategy of a bench id: "sql-mariadb" is the sql strategy with the options of its variant.
std::string strategy_name() {
    return cfg.strategy.substr(0, cfg.strategy.find('-'));
}

// The sql variants' table: one per run, so that a run starts from an empty table and the cleanup
// can drop it.
std::string sql_table() {
    return "locksmith_bench_" + cfg.id;
}
std::string sqlite_path() {
    return cfg.dir + "/sql/locks.db";
}

const char* endpoint(const char* variable) {
    const char* value = std::getenv(variable);
    if (!value || !*value) die(std::string(variable) + " is unset");
    return value;
}

// One root per run, so that runs never share a lock; the cleanup removes it.
std::string zookeeper_root() {
    return "/locksmith-bench-" + cfg.id;
}

// LOCKSMITH_TEST_REDIS_QUORUM: three comma-separated redis URLs.
std::vector<std::string> quorum_urls() {
    std::vector<std::string> urls;
    std::string all = endpoint("LOCKSMITH_TEST_REDIS_QUORUM");
    for (std::size_t at = 0; at <= all.size();) {
        auto comma = all.find(',', at);
        if (comma == std::string::npos) comma = all.size();
        if (comma > at) urls.push_back(all.substr(at, comma - at));
        at = comma + 1;
    }
    return urls;
}

// Advisory locks are per database and user-level locks per server, not per prefix: the bench's
// names carry the run's id so that two runs (or tests) on one server never share a lock.
std::string lock_name(const std::string& base) {
    const auto s = strategy_name();
    return s == "pg_advisory" || s == "mysql_get_lock" ? remote_prefix() + base : base;
}
std::shared_ptr<key> make_key(const std::string& base) {
    return std::make_shared<key>(lock_name(base));
}

json strategy_options() {
    const auto& s = cfg.strategy;
    if (s == "pg_advisory") return {{"dsn", endpoint("LOCKSMITH_TEST_POSTGRES_DSN")}};
    if (s == "mysql_get_lock") return {{"dsn", endpoint("LOCKSMITH_TEST_MARIADB_DSN")}};
    if (s == "sql-sqlite") return {{"dsn", "sqlite://" + sqlite_path()}, {"table", sql_table()}};
    if (s == "sql-postgresql")
        return {{"dsn", endpoint("LOCKSMITH_TEST_POSTGRES_DSN")}, {"table", sql_table()}};
    if (s == "sql-mariadb")
        return {{"dsn", endpoint("LOCKSMITH_TEST_MARIADB_DSN")}, {"table", sql_table()}};
    if (s == "file" || s == "simple") return {{"lock_dir", cfg.dir + "/locks"}};
    if (s == "semaphore") return {{"key", semaphore_key()}, {"semaphores", 32000}};
    if (s == "shm") return {{"segment", shm_segment()}, {"slots", 32768}};
    if (s == "memory") return json::object();
    if (s == "redis") {
        const char* url = std::getenv("LOCKSMITH_TEST_REDIS_URL");
        if (!url) die("LOCKSMITH_TEST_REDIS_URL is unset");
        return {{"url", url}, {"key_prefix", remote_prefix()}};
    }
    // redis over TLS with a client certificate (services.sh's certificates; bench/redis-tls).
    if (s == "redis-tls") {
        const std::string tls = endpoint("LOCKSMITH_TEST_TLS_DIR");
        return {{"url", endpoint("LOCKSMITH_TEST_REDIS_TLS_URL")},
                {"key_prefix", remote_prefix()},
                {"ca_file", tls + "/ca.pem"},
                {"cert_file", tls + "/client.pem"},
                {"key_file", tls + "/client.key"}};
    }
    // session_timeout_ms 2000: a killed holder's nodes go when its session expires, so this
    // decides scenario 6 (the server clamps it to [2, 20] ticks).
    if (s == "zookeeper")
        return {{"hosts", endpoint("LOCKSMITH_TEST_ZOOKEEPER")},
                {"session_timeout_ms", 2000},
                {"root", zookeeper_root()}};
    if (s == "etcd")
        return {{"endpoints", endpoint("LOCKSMITH_TEST_ETCD")}, {"prefix", remote_prefix()}};
    // TLS with a client certificate (services.sh's certificates): etcd-tls on one https
    // endpoint (LOCKSMITH_TEST_ETCD_TLS, else the cluster's first member), etcd-cluster on the
    // whole TLS cluster (LOCKSMITH_TEST_ETCD_CLUSTER).
    if (s == "etcd-tls" || s == "etcd-cluster") {
        std::string endpoints = endpoint("LOCKSMITH_TEST_ETCD_CLUSTER");
        if (s == "etcd-tls")
            endpoints = std::getenv("LOCKSMITH_TEST_ETCD_TLS")
                            ? std::string(std::getenv("LOCKSMITH_TEST_ETCD_TLS"))
                            : endpoints.substr(0, endpoints.find(','));
        const std::string tls = endpoint("LOCKSMITH_TEST_TLS_DIR");
        return {{"endpoints", endpoints},
                {"prefix", remote_prefix()},
                {"ca_file", tls + "/ca.pem"},
                {"cert_file", tls + "/client.pem"},
                {"key_file", tls + "/client.key"}};
    }
    if (s == "combined") {
        json members = json::array();
        for (const auto& url : quorum_urls())
            members.push_back({{"strategy", "redis"},
                               {"options", {{"url", url}, {"key_prefix", remote_prefix()}}}});
        return {{"quorum", "consensus"}, {"members", members}};
    }
    if (s == "memcached") {
        const char* servers = std::getenv("LOCKSMITH_TEST_MEMCACHED");
        if (!servers) die("LOCKSMITH_TEST_MEMCACHED is unset");
        return {{"servers", servers}, {"key_prefix", remote_prefix()}};
    }
    die("no bench options for strategy " + s);
}

std::shared_ptr<store> make_store() {
    auto d = default_registry().find(strategy_name());
    if (!d) die("strategy not built: " + strategy_name());
    return d->create(strategy_options());
}

lock_options options(std::chrono::milliseconds ttl = 30s) {
    lock_options o;
    o.ttl = ttl;
    return o;
}

// Runs `body` for `seconds` (checked every 64 calls, or every call when one takes more than
// 10 us: etcd makes some 300 pairs/s); returns calls per second.
template <class F>
double rate(double seconds, F&& body) {
    // Warm-up: 200 calls, or 20 ms of them for the slow backends.
    const std::int64_t warm = now_ns();
    int warmed = 0;
    while (warmed < 200 && (warmed < 2 || now_ns() - warm < 20'000'000)) body(), ++warmed;
    const int batch = (now_ns() - warm) / warmed > 10'000 ? 1 : 64;
    const std::int64_t start = now_ns(), end = start + std::int64_t(seconds * 1e9);
    std::int64_t n = 0, t = start;
    while (t < end) {
        for (int i = 0; i < batch; ++i) body();
        n += batch;
        t = now_ns();
    }
    return double(n) * 1e9 / double(t - start);
}

// ---------------------------------------------------------------- raw baselines (scenario 1)

json raw_file(double seconds) {
    std::filesystem::create_directories(cfg.dir + "/raw");
    int fd = ::open((cfg.dir + "/raw/raw.flock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) die("open raw flock file");
    double r = rate(seconds, [&] {
        ::flock(fd, LOCK_EX);
        ::flock(fd, LOCK_UN);
    });
    ::close(fd);
    return {{"raw", r}, {"raw_what", "flock(LOCK_EX) + flock(LOCK_UN) on a file opened once"}};
}

json raw_simple(double seconds) {
    std::filesystem::create_directories(cfg.dir + "/raw");
    const std::string path = cfg.dir + "/raw/raw.excl";
    double r = rate(seconds, [&] {
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) die("O_EXCL create failed");
        ::close(fd);
        ::unlink(path.c_str());
    });
    return {{"raw", r}, {"raw_what", "open(O_CREAT|O_EXCL) + close + unlink"}};
}

json raw_semaphore(double seconds) {
    int set = ::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
    if (set < 0) die("semget");
    ::semctl(set, 0, SETVAL, 1);
    sembuf down{0, -1, SEM_UNDO}, up{0, 1, SEM_UNDO};
    double r = rate(seconds, [&] {
        ::semop(set, &down, 1);
        ::semop(set, &up, 1);
    });
    ::semctl(set, 0, IPC_RMID);
    return {{"raw", r}, {"raw_what", "semop(-1, SEM_UNDO) + semop(+1, SEM_UNDO)"}};
}

// The shm strategy's mutex as its raw baseline: robust, process-shared, error-checking.
void init_raw_mutex(pthread_mutex_t* m) {
    pthread_mutexattr_t a;
    ::pthread_mutexattr_init(&a);
    ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    ::pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    ::pthread_mutex_init(m, &a);
}

json raw_shm(double seconds) {
    const std::string name = "/locksmith-bench-raw-" + std::to_string(::getpid());
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) die("shm_open");
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    ::shm_unlink(name.c_str());
    auto* m = static_cast<pthread_mutex_t*>(p);
    init_raw_mutex(m);
    double r = rate(seconds, [&] {
        ::pthread_mutex_lock(m);
        ::pthread_mutex_unlock(m);
    });
    ::munmap(p, 4096);
    return {
        {"raw", r},
        {"raw_what", "pthread_mutex_lock/unlock, robust + process-shared + errorcheck, in shm"}};
}

json raw_memory(double seconds) {
    std::mutex m;
    double r = rate(seconds, [&] {
        m.lock();
        m.unlock();
    });
    return {{"raw", r}, {"raw_what", "std::mutex lock + unlock"}};
}

#ifdef LOCKSMITH_BENCH_HIREDIS
redisReply* must(redisContext* c, void* r) {
    if (!r) die(std::string("hiredis: ") + c->errstr);
    auto* reply = static_cast<redisReply*>(r);
    if (reply->type == REDIS_REPLY_ERROR) die(std::string("redis: ") + reply->str);
    return reply;
}

std::string script_sha(redisContext* c, const char* script) {
    auto* r = must(c, redisCommand(c, "SCRIPT LOAD %s", script));
    std::string sha(r->str, r->len);
    freeReplyObject(r);
    return sha;
}

// redis://host[:port][/db], the form scripts/services.sh gives (no auth, no socket).
std::tuple<std::string, int, int> parse_redis_url(std::string url) {
    if (url.rfind("redis://", 0) != 0) die("raw baseline understands redis://host:port/db only");
    url = url.substr(8);
    int db = 0;
    if (auto slash = url.find('/'); slash != std::string::npos) {
        if (slash + 1 < url.size()) db = std::stoi(url.substr(slash + 1));
        url.resize(slash);
    }
    int port = 6379;
    if (auto colon = url.rfind(':'); colon != std::string::npos) {
        port = std::stoi(url.substr(colon + 1));
        url.resize(colon);
    }
    return {url, port, db};
}

json raw_redis(double seconds) {
    auto [host, port, db] = parse_redis_url(std::getenv("LOCKSMITH_TEST_REDIS_URL"));
    redisContext* c = redisConnect(host.c_str(), port);
    if (!c || c->err) die("redisConnect");
    if (db != 0) freeReplyObject(must(c, redisCommand(c, "SELECT %d", db)));
    const std::string token = random_token(), p = remote_prefix() + "raw:";
    // The same commands the strategy sends, with the same keys and arguments layout: SET NX PX
    // for the grant, the release script by EVALSHA.
    const std::string rel = script_sha(c, strategies::redis_detail::release_script);
    const std::string lock = p + "lock", wait = p + "wait", queue = p + "queue",
                      readers = p + "readers", chan = p + "chan";
    double same = rate(seconds / 2, [&] {
        freeReplyObject(
            must(c, redisCommand(c, "SET %s %s NX PX 30000", lock.c_str(), token.c_str())));
        freeReplyObject(must(c, redisCommand(c, "EVALSHA %s 4 %s %s %s %s %s %s", rel.c_str(),
                                             lock.c_str(), wait.c_str(), queue.c_str(),
                                             readers.c_str(), token.c_str(), chan.c_str())));
    });
    // The textbook pair: SET NX PX, then compare-and-delete.
    const std::string cad = script_sha(
        c,
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0");
    const std::string tkey = p + "textbook";
    double textbook = rate(seconds / 2, [&] {
        freeReplyObject(
            must(c, redisCommand(c, "SET %s %s NX PX 30000", tkey.c_str(), token.c_str())));
        freeReplyObject(must(
            c, redisCommand(c, "EVALSHA %s 1 %s %s", cad.c_str(), tkey.c_str(), token.c_str())));
    });
    redisFree(c);
    return {{"raw", same},
            {"raw_what",
             "hiredis, one connection: the strategy's commands (SET NX PX; "
             "EVALSHA of its release script)"},
            {"raw_textbook", textbook},
            {"raw_textbook_what", "hiredis: SET NX PX + EVALSHA compare-and-delete"}};
}
#endif

#ifdef LOCKSMITH_BENCH_LIBMEMCACHED
// The first server of LOCKSMITH_TEST_MEMCACHED ("host:port[,host:port...]", the form
// scripts/services.sh gives) as a connected, blocking TCP socket with TCP_NODELAY.
int memcached_socket() {
    std::string list = std::getenv("LOCKSMITH_TEST_MEMCACHED");
    std::string first = list.substr(0, list.find(','));
    auto colon = first.rfind(':');
    std::string host = first.substr(0, colon);
    std::string port = colon == std::string::npos ? "11211" : first.substr(colon + 1);
    if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) die("resolve " + first);
    int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) die("connect " + first);
    ::freeaddrinfo(found);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Sends `request` and reads the reply line (through "\r\n") into `reply`.
void memcached_round_trip(int fd, const std::string& request, std::string& reply) {
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size()))
        die("memcached send");
    reply.clear();
    char buffer[256];
    while (reply.size() < 2 || reply.compare(reply.size() - 2, 2, "\r\n") != 0) {
        ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) die("memcached recv");
        reply.append(buffer, std::size_t(n));
    }
}

json raw_memcached(double seconds) {
    const std::string token = random_token(), item = remote_prefix() + "raw";
    // The strategy's two meta commands, on one plain socket: `ms ... ME c` (add, returns the
    // CAS id), then `md ... C<cas>` (delete if the CAS is still ours).
    int fd = memcached_socket();
    const std::string add = "ms " + item + " 32 T31 ME c\r\n" + token + "\r\n";
    std::string reply, remove;
    double same = rate(seconds / 2, [&] {
        memcached_round_trip(fd, add, reply);  // "HD c<cas>\r\n"
        if (reply.compare(0, 4, "HD c") != 0) die("memcached ms: " + reply);
        remove.assign("md ").append(item).append(" C").append(reply, 4, reply.size() - 6);
        remove.append("\r\n");
        memcached_round_trip(fd, remove, reply);
        if (reply != "HD\r\n") die("memcached md: " + reply);
    });
    ::close(fd);

    // The textbook pair with libmemcached (classic protocol): add, then a blind delete.
    memcached_st* m = memcached_create(nullptr);
    std::string list = std::getenv("LOCKSMITH_TEST_MEMCACHED");
    for (std::size_t pos = 0; pos < list.size();) {
        auto comma = list.find(',', pos);
        std::string one =
            list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        auto colon = one.rfind(':');
        int port = colon == std::string::npos ? 11211 : std::stoi(one.substr(colon + 1));
        memcached_server_add(m, one.substr(0, colon).c_str(), in_port_t(port));
        pos = comma == std::string::npos ? list.size() : comma + 1;
    }
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_NO_BLOCK, 1);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    auto ok = [](memcached_return_t rc) {
        return rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED || rc == MEMCACHED_DELETED ||
               rc == MEMCACHED_END;
    };
    double textbook = rate(seconds / 2, [&] {
        if (!ok(memcached_add(m, item.data(), item.size(), token.data(), token.size(), 31, 0)))
            die("memcached add");
        memcached_delete(m, item.data(), item.size(), 0);
    });
    memcached_free(m);
    return {{"raw", same},
            {"raw_what", "one socket, the strategy's meta commands: ms ME c + md C<cas>"},
            {"raw_textbook", textbook},
            {"raw_textbook_what", "libmemcached: add + delete (blind delete)"}};
}
#endif

// ------------------------------------------------ raw SQL loops (pg_advisory and sql variants)
//
// The statements each store sends, copied here because they are private to the strategies: ONE
// place per driver below, to keep in step when a store's statements change. The loops run them
// on one connection, the way the store does (prepared or not, same parameters), without the pool,
// the timeouts or the error handling around them.
//   pg_advisory:     strategies/pg_advisory/pg_advisory_store.cpp (`statements`, do_release)
//   sql, per driver: strategies/sql/{postgresql,mariadb,sqlite}_driver.cpp (the constructor's
//                    sql_[acquire_id] and sql_[release_id], create_table()), as of the merge
//                    of `sql` (36503b0). {T} stands for the quoted table name.
namespace raw_statements {

// pg_advisory: simple-protocol queries (PQsendQuery, not prepared), the key spliced in as an
// integer; the release drops every advisory lock of the session.
std::string pg_advisory_try(std::int64_t k) {
    return "SELECT pg_try_advisory_lock(" + std::to_string(k) + ")";
}
constexpr const char* pg_advisory_release = "SELECT pg_advisory_unlock_all()";

#define LS_PG_NOW "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"
struct postgresql {  // prepared; $1 key_id, $2 token, $3 ttl in ms (text)
    static constexpr const char* create =
        "CREATE TABLE IF NOT EXISTS {T} (key_id VARCHAR(32) NOT NULL PRIMARY KEY, token "
        "VARCHAR(32) NOT NULL, expires_ms BIGINT NOT NULL, fence BIGINT NOT NULL)";
    static constexpr const char* acquire =
        "INSERT INTO {T} AS l (key_id, token, expires_ms, fence) VALUES ($1, $2, " LS_PG_NOW
        " + $3::bigint, 1) ON CONFLICT (key_id) DO UPDATE SET token = EXCLUDED.token, expires_ms "
        "= EXCLUDED.expires_ms, fence = CASE WHEN l.token = EXCLUDED.token THEN l.fence ELSE "
        "l.fence + 1 END WHERE l.token = EXCLUDED.token OR l.expires_ms <= " LS_PG_NOW
        " RETURNING l.fence";
    static constexpr const char* release =
        "UPDATE {T} SET token = '', expires_ms = 0 WHERE key_id = $1 AND token = $2";
    static std::string table(const std::string& t) { return "\"" + t + "\""; }
};
#undef LS_PG_NOW

#define LS_MY_NOW "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
struct mariadb {  // prepared (mysql_stmt); acquire (key_id, token, ttl), release (key_id, token)
    static constexpr const char* create =
        "CREATE TABLE IF NOT EXISTS {T} (key_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin "
        "NOT NULL PRIMARY KEY, token VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
        "expires_ms BIGINT NOT NULL, fence BIGINT NOT NULL) ENGINE = InnoDB";
    static constexpr const char* acquire =
        "INSERT INTO {T} (key_id, token, expires_ms, fence) VALUES (?, ?, " LS_MY_NOW
        " + ?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE fence = IF(token = VALUES(token), "
        "LAST_INSERT_ID(fence), IF(expires_ms <= " LS_MY_NOW
        ", LAST_INSERT_ID(fence + 1), fence + LAST_INSERT_ID(0))), token = IF(token = "
        "VALUES(token) OR expires_ms <= " LS_MY_NOW
        ", VALUES(token), token), expires_ms = IF(token = VALUES(token), VALUES(expires_ms), "
        "expires_ms)";
    static constexpr const char* release =
        "UPDATE {T} SET token = '', expires_ms = 0 WHERE key_id = ? AND token = ?";
    static std::string table(const std::string& t) { return "`" + t + "`"; }
    // Set on the connection as the driver does (mysql_options, mysql_real_connect flags).
    static constexpr const char* init_command = "SET time_zone = '+00:00'";
    static constexpr const char* charset = "utf8mb4";
};
#undef LS_MY_NOW

#define LS_SQLITE_NOW "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
struct sqlite {  // sqlite3_prepare_v3(PERSISTENT); ?1 key_id, ?2 token, ?3 ttl in ms
    static constexpr const char* create =
        "CREATE TABLE IF NOT EXISTS {T} (key_id TEXT NOT NULL PRIMARY KEY, token TEXT NOT NULL, "
        "expires_ms INTEGER NOT NULL, fence INTEGER NOT NULL) WITHOUT ROWID";
    static constexpr const char* acquire =
        "INSERT INTO {T} (key_id, token, expires_ms, fence) VALUES (?1, ?2, " LS_SQLITE_NOW
        " + ?3, 1) ON CONFLICT (key_id) DO UPDATE SET token = excluded.token, expires_ms = "
        "excluded.expires_ms, fence = CASE WHEN token = excluded.token THEN fence ELSE fence + 1 "
        "END WHERE token = excluded.token OR expires_ms <= " LS_SQLITE_NOW " RETURNING fence";
    static constexpr const char* release =
        "UPDATE {T} SET token = '', expires_ms = 0 WHERE key_id = ?1 AND token = ?2";
    static std::string table(const std::string& t) { return "\"" + t + "\""; }
    // The file's set-up (prepare_sqlite_file) and each connection's (the driver's constructor).
    static constexpr const char* file_setup = "PRAGMA journal_mode = WAL";
    static constexpr const char* connection_setup = "PRAGMA synchronous = NORMAL";
    static constexpr int busy_timeout_ms = 5000;
};
#undef LS_SQLITE_NOW

template <class Driver>
std::string with_table(const char* sql) {
    std::string out = sql;
    const std::string table = Driver::table(sql_table());
    for (auto at = out.find("{T}"); at != std::string::npos; at = out.find("{T}", at))
        out.replace(at, 3, table);
    return out;
}

}  // namespace raw_statements

// What the sql store binds: the name's key id (32 hex digits), the owner's token, the TTL.
struct raw_sql_row {
    std::string id = stable_name_hash(lock_name("raw")).hex();
    std::string token = random_token();
    std::string ttl = "30000";
};

#ifdef LOCKSMITH_BENCH_LIBPQ
PGconn* pg_connect() {
    PGconn* c = PQconnectdb(endpoint("LOCKSMITH_TEST_POSTGRES_DSN"));
    if (PQstatus(c) != CONNECTION_OK) die(std::string("PQconnectdb: ") + PQerrorMessage(c));
    PQsetNoticeProcessor(
        c, [](void*, const char*) {}, nullptr);  // "table exists, skipping"
    return c;
}

// `r`, the result of a statement that must succeed: dies on an error.
PGresult* pg_ok(PGconn* c, PGresult* r) {
    const auto st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        die(std::string("libpq: ") + PQerrorMessage(c));
    return r;
}

json raw_pg_advisory(double seconds) {
    PGconn* c = pg_connect();
    const auto k = std::int64_t(stable_name_hash(lock_name("raw")).high);
    const std::string grant = raw_statements::pg_advisory_try(k);
    double same = rate(seconds / 2, [&] {
        PGresult* r = pg_ok(c, PQexec(c, grant.c_str()));
        if (std::strcmp(PQgetvalue(r, 0, 0), "t") != 0) die("pg_try_advisory_lock refused");
        PQclear(r);
        PQclear(pg_ok(c, PQexec(c, raw_statements::pg_advisory_release)));
    });
    // The textbook pair: prepared, the key as a parameter, unlock of that key only.
    PQclear(pg_ok(c, PQprepare(c, "try", "SELECT pg_try_advisory_lock($1)", 1, nullptr)));
    PQclear(pg_ok(c, PQprepare(c, "unlock", "SELECT pg_advisory_unlock($1)", 1, nullptr)));
    const std::string key_text = std::to_string(k);
    const char* params[] = {key_text.c_str()};
    double textbook = rate(seconds / 2, [&] {
        PGresult* r = pg_ok(c, PQexecPrepared(c, "try", 1, params, nullptr, nullptr, 0));
        if (std::strcmp(PQgetvalue(r, 0, 0), "t") != 0) die("pg_try_advisory_lock refused");
        PQclear(r);
        PQclear(pg_ok(c, PQexecPrepared(c, "unlock", 1, params, nullptr, nullptr, 0)));
    });
    const std::string version = PQparameterStatus(c, "server_version");
    PQfinish(c);
    return {{"raw", same},
            {"raw_what",
             "libpq, one connection: the strategy's statements (SELECT "
             "pg_try_advisory_lock(k); SELECT pg_advisory_unlock_all()), not prepared"},
            {"raw_textbook", textbook},
            {"raw_textbook_what",
             "libpq, prepared: pg_try_advisory_lock($1) + "
             "pg_advisory_unlock($1)"},
            {"server_version", version}};
}

json raw_sql_postgresql(double seconds) {
    using D = raw_statements::postgresql;
    PGconn* c = pg_connect();
    PQclear(pg_ok(c, PQexec(c, raw_statements::with_table<D>(D::create).c_str())));
    const std::string acquire = raw_statements::with_table<D>(D::acquire);
    const std::string release = raw_statements::with_table<D>(D::release);
    PQclear(pg_ok(c, PQprepare(c, "acquire", acquire.c_str(), 3, nullptr)));
    PQclear(pg_ok(c, PQprepare(c, "release", release.c_str(), 2, nullptr)));
    raw_sql_row row;
    const char* params[] = {row.id.c_str(), row.token.c_str(), row.ttl.c_str()};
    double r = rate(seconds, [&] {
        PGresult* a = pg_ok(c, PQexecPrepared(c, "acquire", 3, params, nullptr, nullptr, 0));
        if (PQntuples(a) != 1) die("raw acquire refused");
        PQclear(a);
        PQclear(pg_ok(c, PQexecPrepared(c, "release", 2, params, nullptr, nullptr, 0)));
    });
    const std::string version = PQparameterStatus(c, "server_version");
    PQfinish(c);
    return {{"raw", r},
            {"raw_what",
             "libpq, one connection: the sql store's acquire (INSERT .. ON CONFLICT DO "
             "UPDATE .. RETURNING) and release (UPDATE), prepared"},
            {"server_version", version}};
}
#endif

#ifdef LOCKSMITH_BENCH_LIBMARIADB
// mysql://user[:password]@host[:port]/database, the form scripts/services.sh gives (no
// percent-encoding, no query).
MYSQL* open_mariadb() {
    std::string url = endpoint("LOCKSMITH_TEST_MARIADB_DSN");
    if (url.rfind("mysql://", 0) != 0)
        die("raw baseline understands mysql://user:pass@host:port/db only");
    url = url.substr(8);
    std::string user, password, host, database;
    unsigned port = 3306;
    if (auto at = url.rfind('@'); at != std::string::npos) {
        user = url.substr(0, at);
        url = url.substr(at + 1);
        if (auto colon = user.find(':'); colon != std::string::npos) {
            password = user.substr(colon + 1);
            user.resize(colon);
        }
    }
    if (auto slash = url.find('/'); slash != std::string::npos) {
        database = url.substr(slash + 1);
        url.resize(slash);
    }
    if (auto colon = url.rfind(':'); colon != std::string::npos) {
        port = unsigned(std::stoul(url.substr(colon + 1)));
        url.resize(colon);
    }
    host = url;
    MYSQL* db = mysql_init(nullptr);
    mysql_options(db, MYSQL_INIT_COMMAND, raw_statements::mariadb::init_command);
    mysql_options(db, MYSQL_SET_CHARSET_NAME, raw_statements::mariadb::charset);
    if (!mysql_real_connect(db, host.c_str(), user.c_str(), password.c_str(), database.c_str(),
                            port, nullptr, CLIENT_FOUND_ROWS))
        die(std::string("mysql_real_connect: ") + mysql_error(db));  // names no password
    return db;
}

// A string parameter that points at `v`.
MYSQL_BIND text(std::string& v) {
    MYSQL_BIND b;
    std::memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_STRING;
    b.buffer = v.data();
    b.buffer_length = v.size();
    return b;
}

MYSQL_STMT* mariadb_prepare(MYSQL* db, const std::string& sql) {
    MYSQL_STMT* s = mysql_stmt_init(db);
    if (!s || mysql_stmt_prepare(s, sql.c_str(), sql.size()) != 0)
        die(std::string("mysql_stmt_prepare: ") + (s ? mysql_stmt_error(s) : mysql_error(db)));
    return s;
}

json raw_sql_mariadb(double seconds) {
    using D = raw_statements::mariadb;
    MYSQL* db = open_mariadb();
    const std::string create = raw_statements::with_table<D>(D::create);
    if (mysql_real_query(db, create.c_str(), create.size()) != 0)
        die(std::string("create table: ") + mysql_error(db));
    MYSQL_STMT* acquire = mariadb_prepare(db, raw_statements::with_table<D>(D::acquire));
    MYSQL_STMT* release = mariadb_prepare(db, raw_statements::with_table<D>(D::release));
    raw_sql_row row;
    long long ttl_ms = std::stoll(row.ttl);
    MYSQL_BIND number;
    std::memset(&number, 0, sizeof number);
    number.buffer_type = MYSQL_TYPE_LONGLONG;
    number.buffer = &ttl_ms;
    // Bound at every execution, as the driver does.
    MYSQL_BIND acquire_params[] = {text(row.id), text(row.token), number};
    MYSQL_BIND release_params[] = {text(row.id), text(row.token)};
    double r = rate(seconds, [&] {
        if (mysql_stmt_bind_param(acquire, acquire_params) != 0 || mysql_stmt_execute(acquire) != 0)
            die(std::string("raw acquire: ") + mysql_stmt_error(acquire));
        if (mysql_stmt_insert_id(acquire) <= 0) die("raw acquire refused");
        if (mysql_stmt_bind_param(release, release_params) != 0 || mysql_stmt_execute(release) != 0)
            die(std::string("raw release: ") + mysql_stmt_error(release));
    });
    const std::string version = mysql_get_server_info(db);
    mysql_stmt_close(acquire);
    mysql_stmt_close(release);
    mysql_close(db);
    return {{"raw", r},
            {"raw_what",
             "MariaDB Connector/C, one connection: the sql store's acquire (INSERT .. ON "
             "DUPLICATE KEY UPDATE, fence by LAST_INSERT_ID) and release (UPDATE), "
             "prepared"},
            {"server_version", version}};
}

// mysql_get_lock's raw baselines, prepared on one connection: the store's statements
// (strategies/mysql_get_lock/mysql_get_lock_store.cpp: try_sql, release_sql), and the textbook
// pair a user writes by hand (GET_LOCK(name, 0) + RELEASE_LOCK(name)).
json raw_get_lock(double seconds) {
    MYSQL* db = open_mariadb();
    std::string name = "locksmith:" + remote_prefix() + "raw";
    // Runs `s` with `params` and checks that its one value is 1.
    auto one = [](MYSQL_STMT* s, MYSQL_BIND* params, const char* what) {
        long long value = 0;
        MYSQL_BIND out;
        std::memset(&out, 0, sizeof out);
        out.buffer_type = MYSQL_TYPE_LONGLONG;
        out.buffer = &value;
        if ((params && mysql_stmt_bind_param(s, params) != 0) || mysql_stmt_execute(s) != 0 ||
            mysql_stmt_bind_result(s, &out) != 0 || mysql_stmt_store_result(s) != 0 ||
            mysql_stmt_fetch(s) != 0)
            die(std::string(what) + ": " + mysql_stmt_error(s));
        mysql_stmt_free_result(s);
        if (value != 1) die(std::string(what) + " did not return 1");
    };
    // The grant takes the name once or twice (extra parameters are ignored); the release
    // takes it when `release_param`.
    auto loop = [&](const char* grant_sql, const char* release_sql, bool release_param) {
        MYSQL_STMT* grant = mariadb_prepare(db, grant_sql);
        MYSQL_STMT* release = mariadb_prepare(db, release_sql);
        MYSQL_BIND params[] = {text(name), text(name)};
        const double r = rate(seconds / 2, [&] {
            one(grant, params, "raw grant");
            one(release, release_param ? params : nullptr, "raw release");
        });
        mysql_stmt_close(grant);
        mysql_stmt_close(release);
        return r;
    };
    const double same = loop("SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, 0))",
                             "SELECT RELEASE_ALL_LOCKS()", false);
    const double textbook = loop("SELECT GET_LOCK(?, 0)", "SELECT RELEASE_LOCK(?)", true);
    mysql_close(db);
    return {{"raw", same},
            {"raw_what",
             "MariaDB Connector/C, one connection: the store's statements (SELECT "
             "IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, 0)); SELECT "
             "RELEASE_ALL_LOCKS()), prepared"},
            {"raw_textbook", textbook},
            {"raw_textbook_what", "GET_LOCK(?, 0) + RELEASE_LOCK(?), prepared"}};
}
#endif

#ifdef LOCKSMITH_BENCH_SQLITE3
json raw_sql_sqlite(double seconds) {
    using D = raw_statements::sqlite;
    // A file of its own beside the store's, set up as the driver sets up its file and connection.
    std::filesystem::create_directories(cfg.dir + "/sql");
    const std::string path = cfg.dir + "/sql/raw.db";
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK)
        die("sqlite3_open_v2 " + path);
    sqlite3_busy_timeout(db, D::busy_timeout_ms);
    for (const std::string& sql : {std::string(D::file_setup), std::string(D::connection_setup),
                                   raw_statements::with_table<D>(D::create)})
        if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
            die(std::string("sqlite: ") + sqlite3_errmsg(db));
    auto prepare = [&](const std::string& sql) {
        sqlite3_stmt* s = nullptr;
        if (sqlite3_prepare_v3(db, sql.c_str(), int(sql.size()), SQLITE_PREPARE_PERSISTENT, &s,
                               nullptr) != SQLITE_OK)
            die(std::string("sqlite prepare: ") + sqlite3_errmsg(db));
        return s;
    };
    sqlite3_stmt* acquire = prepare(raw_statements::with_table<D>(D::acquire));
    sqlite3_stmt* release = prepare(raw_statements::with_table<D>(D::release));
    raw_sql_row row;
    const long long ttl_ms = std::stoll(row.ttl);
    double r = rate(seconds, [&] {
        sqlite3_bind_text(acquire, 1, row.id.data(), int(row.id.size()), SQLITE_STATIC);
        sqlite3_bind_text(acquire, 2, row.token.data(), int(row.token.size()), SQLITE_STATIC);
        sqlite3_bind_int64(acquire, 3, ttl_ms);
        bool granted = false;
        int rc;
        while ((rc = sqlite3_step(acquire)) == SQLITE_ROW) granted = true;
        if (rc != SQLITE_DONE || !granted) die(std::string("raw acquire: ") + sqlite3_errmsg(db));
        sqlite3_reset(acquire);
        sqlite3_bind_text(release, 1, row.id.data(), int(row.id.size()), SQLITE_STATIC);
        sqlite3_bind_text(release, 2, row.token.data(), int(row.token.size()), SQLITE_STATIC);
        if (sqlite3_step(release) != SQLITE_DONE)
            die(std::string("raw release: ") + sqlite3_errmsg(db));
        sqlite3_reset(release);
    });
    sqlite3_finalize(acquire);
    sqlite3_finalize(release);
    sqlite3_close_v2(db);
    return {{"raw", r},
            {"raw_what",
             "sqlite3, one connection (WAL, synchronous NORMAL): the sql store's "
             "acquire (INSERT .. ON CONFLICT DO UPDATE .. RETURNING) and release "
             "(UPDATE), prepared"},
            {"server_version", std::string("SQLite ") + sqlite3_libversion()}};
}
#endif

#ifdef LOCKSMITH_BENCH_ZOOKEEPER
// A session of the C client (threaded), connected; dies after 10 s without a connection.
zhandle_t* zookeeper_connect() {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t* zh =
        zookeeper_init(endpoint("LOCKSMITH_TEST_ZOOKEEPER"), nullptr, 10000, nullptr, nullptr, 0);
    if (!zh) die("zookeeper_init");
    const std::int64_t give_up = now_ns() + 10'000'000'000;
    while (zoo_state(zh) != ZOO_CONNECTED_STATE) {
        if (now_ns() > give_up) die("no ZooKeeper session within 10 s");
        std::this_thread::sleep_for(1ms);
    }
    return zh;
}

void zookeeper_ok(int rc, const char* what) {
    if (rc != ZOK && rc != ZNODEEXISTS) die(std::string("zookeeper ") + what + ": " + zerror(rc));
}

json raw_zookeeper(double seconds) {
    zhandle_t* zh = zookeeper_connect();
    const std::string root = zookeeper_root(), parent = root + "/raw";
    for (const auto& path : {root, parent})
        zookeeper_ok(zoo_create(zh, path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
                                nullptr, 0),
                     "create");
    // The store's requests for an uncontended grant and its release: create2 of an ephemeral
    // sequential node named "<guid>-write-", the listing of the parent (is it the first?), delete.
    const std::string prefix = parent + "/" + random_token() + "-write-";
    char path[512];
    struct Stat stat;
    double same = rate(seconds / 2, [&] {
        zookeeper_ok(zoo_create2(zh, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                                 ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path, &stat),
                     "create2");
        String_vector children{};
        zookeeper_ok(zoo_get_children(zh, parent.c_str(), 0, &children), "get_children");
        deallocate_String_vector(&children);
        zookeeper_ok(zoo_delete(zh, path, -1), "delete");
    });
    // The textbook pair: create the ephemeral sequential node, delete it.
    double textbook = rate(seconds / 2, [&] {
        zookeeper_ok(zoo_create(zh, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                                ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path),
                     "create");
        zookeeper_ok(zoo_delete(zh, path, -1), "delete");
    });
    zookeeper_close(zh);
    return {{"raw", same},
            {"raw_what",
             "ZooKeeper C client, one session: the store's requests (create2 ephemeral "
             "sequential; get_children of the parent; delete)"},
            {"raw_textbook", textbook},
            {"raw_textbook_what", "C client: create ephemeral sequential + delete"}};
}
#endif
#ifdef LOCKSMITH_BENCH_ETCD
json raw_etcd(double seconds) {
    namespace e = strategies::etcd_detail;
    std::string url = endpoint("LOCKSMITH_TEST_ETCD");
    e::http_connection c(e::parse_endpoint(url.substr(0, url.find(','))), 2s);
    auto post = [&](std::string_view path, const json& body) {
        auto r = c.post(path, body.dump(), "", std::chrono::steady_clock::now() + 5s, path);
        if (r.status != 200) die("etcd " + std::string(path) + ": " + r.body);
        return json::parse(r.body);
    };
    const std::string dir = remote_prefix() + "raw/";
    auto b64 = [](const std::string& text) {
        static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        std::string out;
        for (std::size_t i = 0; i < text.size(); i += 3) {
            std::uint32_t v = std::uint32_t(std::uint8_t(text[i])) << 16;
            if (i + 1 < text.size()) v |= std::uint32_t(std::uint8_t(text[i + 1])) << 8;
            if (i + 2 < text.size()) v |= std::uint8_t(text[i + 2]);
            out += a[v >> 18 & 63];
            out += a[v >> 12 & 63];
            out += i + 1 < text.size() ? a[v >> 6 & 63] : '=';
            out += i + 2 < text.size() ? a[v & 63] : '=';
        }
        return out;
    };
    std::string end = dir;
    end.back() = char(end.back() + 1);
    const json first = {{"key", b64(dir)},
                        {"range_end", b64(end)},
                        {"sort_target", "CREATE"},
                        {"sort_order", "ASCEND"},
                        {"limit", 1},
                        {"keys_only", true}};
    const std::string token = b64(random_token());
    // The store's requests for an uncontended grant and its release on a store that acquires
    // again, on one keep-alive connection: the txn that creates the key with the lease kept from
    // the last release if absent and reads the queue's first key; the key's delete. The lease is
    // granted once and kept alive once a second (the store renews a kept lease older than a
    // twentieth of its TTL, at most 1 s, before it serves).
    const json granted = post("/v3/lease/grant", {{"TTL", "30"}}).at("ID");
    const std::string id = granted.is_string() ? granted.get<std::string>() : granted.dump();
    char name[32];
    std::snprintf(name, sizeof name, "%llx", static_cast<unsigned long long>(std::stoull(id)));
    const std::string key = b64(dir + name);
    auto renewed = std::chrono::steady_clock::now();
    double r = rate(seconds, [&] {
        if (std::chrono::steady_clock::now() - renewed >= 1s) {
            renewed = std::chrono::steady_clock::now();
            post("/v3/lease/keepalive", {{"ID", id}});
        }
        const json txn =
            post("/v3/kv/txn",
                 {{"compare", {{{"target", "CREATE"}, {"key", key}, {"create_revision", "0"}}}},
                  {"success",
                   {{{"request_put", {{"key", key}, {"value", token}, {"lease", id}}}},
                    {{"request_range", first}}}},
                  {"failure", {{{"request_range", {{"key", key}}}}, {{"request_range", first}}}}});
        if (!txn.value("succeeded", false)) die("etcd txn did not create the key");
        post("/v3/kv/deleterange", {{"key", key}});
    });
    post("/v3/lease/revoke", {{"ID", id}});
    return {{"raw", r},
            {"raw_what",
             "the store's HTTP/1.1 transport, one keep-alive connection: its gateway requests "
             "(txn put-if-absent with a kept lease + range of the first key; delete; the lease "
             "kept alive once a second)"}};
}
#endif
// The raw baseline of the strategy, run for `half` seconds (twice that when it has a textbook
// pair too); empty when it has none.
json raw_baseline(double half) {
    const auto& n = cfg.strategy;
    if (n == "file") return raw_file(half);
    if (n == "simple") return raw_simple(half);
    if (n == "semaphore") return raw_semaphore(half);
    if (n == "shm") return raw_shm(half);
    if (n == "memory") return raw_memory(half);
#ifdef LOCKSMITH_BENCH_HIREDIS
    if (n == "redis") return raw_redis(2 * half);
#endif
#ifdef LOCKSMITH_BENCH_LIBMEMCACHED
    if (n == "memcached") return raw_memcached(2 * half);
#endif
#ifdef LOCKSMITH_BENCH_LIBPQ
    if (n == "pg_advisory") return raw_pg_advisory(2 * half);
    if (n == "sql-postgresql") return raw_sql_postgresql(half);
#endif
#ifdef LOCKSMITH_BENCH_LIBMARIADB
    if (n == "sql-mariadb") return raw_sql_mariadb(half);
    if (n == "mysql_get_lock") return raw_get_lock(2 * half);
#endif
#ifdef LOCKSMITH_BENCH_SQLITE3
    if (n == "sql-sqlite") return raw_sql_sqlite(half);
#endif
#ifdef LOCKSMITH_BENCH_ZOOKEEPER
    if (n == "zookeeper") return raw_zookeeper(2 * half);
#endif
#ifdef LOCKSMITH_BENCH_ETCD
    if (n == "etcd") return raw_etcd(half);
#endif
    return json::object();
}

// Ours and the raw baseline take turns, `slices` times each, and each figure is the mean over
// its slices (equal durations: total pairs over total time). On this 2-CPU guest a round trip to
// a local server is either fast or about three times slower for seconds at a time (whether the
// server's process wakes on the client's CPU, as the load of other programs has it); one half
// each would let that land on one side only and make the ratio swing from 0.3 to 3.
json scenario_uncontended() {
    constexpr int slices = 8;
    const double slice = cfg.seconds / 2 / slices;
    std::shared_ptr<store> s;
    std::unique_ptr<named_lock> l;
    if (cfg.only != "raw") {
        s = make_store();
        l = std::make_unique<named_lock>(s, make_key("uncontended"), options());
    }
    double ours = 0;
    json raw = json::object();
    for (int i = 0; i < slices; ++i) {
        if (l)
            ours += rate(slice,
                         [&] {
                             l->lock();
                             l->unlock();
                         }) /
                    slices;
        if (cfg.only == "ours") continue;
        const json part = raw_baseline(slice);
        for (auto& [k, v] : part.items()) {
            if (!v.is_number())
                raw[k] = v;
            else
                raw[k] = raw.value(k, 0.0) + v.get<double>() / slices;
        }
    }
    json out = raw;
    if (l) out["ours"] = ours;
    if (out.contains("raw") && out.contains("ours")) out["ratio"] = ours / out["raw"].get<double>();
    if (out.contains("raw_textbook") && out.contains("ours"))
        out["ratio_textbook"] = ours / out["raw_textbook"].get<double>();
    return out;
}

// ------------------------------------------------------------- multi-process helpers

struct shared_area {
    std::atomic<int> ready;
    std::atomic<int> failed;
    std::atomic<std::int64_t> start_ns;
    std::atomic<std::int64_t> end_ns;
    std::atomic<std::int64_t> release_ns;  // scenario 3: last release
    std::atomic<int> releaser;             // scenario 3: who released
    std::atomic<std::int64_t> counts[16];
    std::atomic<std::int64_t> stamp[16];  // scenario 6: acquired at
    std::atomic<int> n_samples[16];
    static constexpr int max_samples = 4096;
    std::int64_t samples[16][max_samples];
};

shared_area* map_area() {
    void* p = ::mmap(nullptr, sizeof(shared_area), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    return new (p) shared_area{};
}

// Forks `n` children running body(index, area); waits for them (bounded) and reports failures.
template <class F>
void run_children(int n, shared_area* a, F body, double max_seconds) {
    std::vector<pid_t> pids;
    for (int i = 0; i < n; ++i) {
        pid_t pid = ::fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            ::alarm(unsigned(max_seconds) + 20);  // a bound on any child, whatever happens
            try {
                body(i, a);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "child %d: %s\n", i, e.what());
                a->failed.fetch_add(1);
                ::_exit(1);
            }
            ::_exit(0);
        }
        pids.push_back(pid);
    }
    for (pid_t p : pids) {
        int st = 0;
        ::waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) a->failed.fetch_add(1);
    }
    if (a->failed.load() != 0) die(std::to_string(a->failed.load()) + " child(ren) failed");
}

// Children call this after setting up: waits until the parent's start time.
void wait_start(shared_area* a, int n) {
    if (a->ready.fetch_add(1) + 1 == n) a->start_ns.store(now_ns() + 2000000);
    const std::int64_t give_up = now_ns() + 20'000'000'000;
    while (a->start_ns.load() == 0 && now_ns() < give_up) std::this_thread::sleep_for(100us);
    while (now_ns() < a->start_ns.load()) std::this_thread::sleep_for(50us);
}

// The critical section of scenario 2 (--hold-us): busy work on the CPU for that long, as a
// caller's work under the lock would be (a sleep would leave the CPU to the waiters).
void hold() {
    if (cfg.hold_us <= 0) return;
    const std::int64_t until = now_ns() + std::int64_t(cfg.hold_us) * 1000;
    while (now_ns() < until) {
    }
}

// `procs` processes each running `pair` (made in the child by make_pair(index)) until the common
// end; returns each process's count.
template <class MakePair>
std::vector<std::int64_t> contend_with(int procs, double seconds, MakePair make_pair) {
    auto* a = map_area();
    run_children(
        procs, a,
        [&](int i, shared_area* a) {
            auto pair = make_pair(i);
            wait_start(a, procs);
            const std::int64_t end = a->start_ns.load() + std::int64_t(seconds * 1e9);
            // The clock is read after each batch of pairs; batches grow while they take under
            // 10 us. A clock read costs as much as a whole shm pair, and reading it per pair made
            // half of scenario 2's profile for shm (ours and raw alike).
            std::int64_t n = 0, batch = 1, t = now_ns();
            while (t < end) {
                for (std::int64_t k = 0; k < batch; ++k) pair();
                n += batch;
                const std::int64_t now = now_ns();
                if (now - t < 10'000 && batch < 64) batch *= 2;
                t = now;
            }
            a->counts[i].store(n);
        },
        seconds);
    std::vector<std::int64_t> c;
    for (int i = 0; i < procs; ++i) c.push_back(a->counts[i].load());
    ::munmap(a, sizeof(shared_area));
    return c;
}

// `procs` processes doing lock()+unlock() until the end; one name or one name each.
std::vector<std::int64_t> contend(int procs, bool one_name, double seconds) {
    return contend_with(procs, seconds, [one_name](int i) {
        auto s = make_store();
        auto l = std::make_shared<named_lock>(
            s, make_key(one_name ? "contended" : "distinct." + std::to_string(i)), options());
        // Plain lock(): try_lock_until() would poll on strategies whose kernel wait has no
        // timeout (file). Bounded: every holder unlocks at once, and alarm() is the backstop.
        return [l] {
            l->lock();
            hold();
            l->unlock();
        };
    });
}

// The raw baseline of scenario 2: the loop of scenario 1's raw baseline in `procs` processes on
// one shared primitive (the same hold inside), so that ours / raw at the same process count is
// what the library adds to the backend's own contention. For file, semaphore and shm (see
// scenario_throughput).
std::vector<std::int64_t> contend_raw(int procs, double seconds) {
    const auto& n = cfg.strategy;
    if (n == "file") {
        // Every process opens the file itself: one open file description each, as the store has.
        std::filesystem::create_directories(cfg.dir + "/raw");
        const std::string path = cfg.dir + "/raw/contended.flock";
        return contend_with(procs, seconds, [path](int) {
            const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
            if (fd < 0) die("open raw flock file");
            return [fd] {
                ::flock(fd, LOCK_EX);
                hold();
                ::flock(fd, LOCK_UN);
            };
        });
    }
    if (n == "semaphore") {
        const int set = ::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
        if (set < 0) die("semget");
        ::semctl(set, 0, SETVAL, 1);
        auto c = contend_with(procs, seconds, [set](int) {
            return [set] {
                sembuf down{0, -1, SEM_UNDO}, up{0, 1, SEM_UNDO};
                ::semop(set, &down, 1);
                hold();
                ::semop(set, &up, 1);
            };
        });
        ::semctl(set, 0, IPC_RMID);
        return c;
    }
    if (n == "shm") {
        // Anonymous shared memory, inherited through fork: the same futex as a named segment's.
        void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        auto* m = static_cast<pthread_mutex_t*>(p);
        init_raw_mutex(m);
        auto c = contend_with(procs, seconds, [m](int) {
            return [m] {
                ::pthread_mutex_lock(m);
                hold();
                ::pthread_mutex_unlock(m);
            };
        });
        ::munmap(p, 4096);
        return c;
    }
    die("no contended raw loop for " + n);
}

std::int64_t total(const std::vector<std::int64_t>& c) {
    std::int64_t t = 0;
    for (auto x : c) t += x;
    return t;
}

// Per process count: one name, distinct names, and (local backends) the raw loop on one shared
// primitive with ratio_one_name_pN = ours / raw.
json scenario_throughput() {
    json out{{"hold_us", cfg.hold_us}};
    const bool raw = cfg.strategy == "file" || cfg.strategy == "semaphore" || cfg.strategy == "shm";
    // Each cell as long as before the raw rows came (seconds / 8): figures stay comparable.
    const double per = cfg.seconds / 8;
    for (int procs : {1, 2, 4, 8}) {
        if (cfg.procs != 0 && procs != cfg.procs) continue;
        const std::string p = "_p" + std::to_string(procs);
        const double one = double(total(contend(procs, true, per))) / per;
        out["one_name" + p] = one;
        out["distinct" + p] = double(total(contend(procs, false, per))) / per;
        if (raw) {
            const double r = double(total(contend_raw(procs, per))) / per;
            out["raw_one_name" + p] = r;
            if (r > 0) out["ratio_one_name" + p] = one / r;
        }
    }
    return out;
}

json scenario_fairness() {
    auto c = contend(4, true, cfg.seconds);
    auto [mn, mx] = std::minmax_element(c.begin(), c.end());
    double sum = 0, sq = 0;
    for (auto x : c) sum += double(x), sq += double(x) * double(x);
    return {{"min_per_process", double(*mn)},
            {"max_per_process", double(*mx)},
            {"min_over_max", *mx > 0 ? double(*mn) / double(*mx) : 0.0},
            {"jain_index", sq > 0 ? sum * sum / (4 * sq) : 0.0},
            {"counts", c}};
}

double percentile(std::vector<double>& v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, std::size_t(p * double(v.size() - 1) + 0.5))];
}

json scenario_handover() {
    constexpr int procs = 5;  // one holder, four waiting at each release
    auto* a = map_area();
    a->releaser.store(-1);
    const double seconds = cfg.seconds;
    run_children(
        procs, a,
        [&](int i, shared_area* a) {
            auto s = make_store();
            named_lock l(s, make_key("handover"), options());
            wait_start(a, procs);
            const std::int64_t end = a->start_ns.load() + std::int64_t(seconds * 1e9);
            while (now_ns() < end) {
                l.lock();
                const std::int64_t got = now_ns();
                const std::int64_t rel = a->release_ns.load();
                const int who = a->releaser.load();
                if (rel != 0 && who != i) {
                    int k = a->n_samples[i].load();
                    if (k < shared_area::max_samples) {
                        a->samples[i][k] = got - rel;
                        a->n_samples[i].store(k + 1);
                    }
                }
                std::this_thread::sleep_for(1ms);  // hold, so that the others are waiting
                a->releaser.store(i);
                a->release_ns.store(now_ns());
                l.unlock();
                std::this_thread::sleep_for(200us);  // let a waiter take it, then wait again
            }
        },
        seconds);
    std::vector<double> ms;
    for (int i = 0; i < procs; ++i)
        for (int k = 0; k < a->n_samples[i].load(); ++k)
            ms.push_back(double(a->samples[i][k]) / 1e6);
    ::munmap(a, sizeof(shared_area));
    json out{{"handovers", double(ms.size())}};
    out["p50_ms"] = percentile(ms, 0.50);
    out["p99_ms"] = percentile(ms, 0.99);
    out["max_ms"] = ms.empty() ? 0.0 : ms.back();
    return out;
}

// ------------------------------------------------------------- scenario 5

long rss_bytes() {
    long pages = 0, resident = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * ::sysconf(_SC_PAGESIZE);
}

int open_fds() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') ++n;
        ::closedir(d);
    }
    return n - 1;  // the directory's own fd
}

json scenario_memory() {
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;  // what a program holding many flocks would do
    ::setrlimit(RLIMIT_NOFILE, &rl);
    auto s = make_store();
    {
        named_lock warm(s, make_key("memory.warm"), options());
        warm.lock();
        warm.unlock();
    }
    std::vector<named_lock> held;
    held.reserve(std::size_t(cfg.locks));
    const long rss0 = rss_bytes();
    const int fd0 = open_fds();
    const std::int64_t t0 = now_ns();
    int failed = 0;
    for (int i = 0; i < cfg.locks; ++i) {
        held.emplace_back(s, make_key("memory." + std::to_string(i)), options());
        if (!held.back().try_lock()) ++failed;
    }
    const std::int64_t t1 = now_ns();
    const long rss1 = rss_bytes();
    const int fd1 = open_fds();
    for (auto& l : held) l.unlock();
    const std::int64_t t2 = now_ns();
    held.clear();
    return {{"locks", cfg.locks},
            {"not_acquired", failed},
            {"rss_bytes_per_lock", double(rss1 - rss0) / cfg.locks},
            {"fds_per_lock", double(fd1 - fd0) / cfg.locks},
            {"acquire_all_s", double(t1 - t0) / 1e9},
            {"release_all_s", double(t2 - t1) / 1e9},
            {"nofile_limit", double(rl.rlim_cur)}};
}

// ------------------------------------------------------------- scenario 6

json scenario_recovery() {
    const int k = std::clamp(cfg.trials, 1, 16);
    const auto ttl = std::chrono::milliseconds(cfg.ttl_ms);
    const double limit_s = cfg.ttl_ms / 1000.0 + 5.0;
    auto* a = map_area();
    // Holders: take the lock, say so, and sleep until killed (bounded by alarm()).
    std::vector<pid_t> holders;
    int ready_pipe[2];
    if (::pipe(ready_pipe) != 0) die("pipe");
    for (int i = 0; i < k; ++i) {
        pid_t pid = ::fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            ::alarm(unsigned(limit_s) + 20);
            try {
                auto s = make_store();
                named_lock l(s, make_key("recovery." + std::to_string(i)), options(ttl));
                l.lock();
                char c = 'x';
                if (::write(ready_pipe[1], &c, 1) != 1) ::_exit(1);
                for (;;) ::pause();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "holder %d: %s\n", i, e.what());
                ::_exit(1);
            }
        }
        holders.push_back(pid);
    }
    for (int i = 0; i < k; ++i) {
        char c;
        if (::read(ready_pipe[0], &c, 1) != 1) die("holder did not start");
    }
    ::close(ready_pipe[0]);
    ::close(ready_pipe[1]);
    // Waiters: each waits (bounded) for one holder's lock.
    std::vector<pid_t> waiters;
    for (int i = 0; i < k; ++i) {
        pid_t pid = ::fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            try {
                auto s = make_store();
                // The default TTL, not the holders': etcd's waiter fails when its own TTL runs
                // out before the grant, and the waiters wait about the holders' TTL.
                named_lock l(s, make_key("recovery." + std::to_string(i)), options());
                if (l.try_lock()) ::_exit(3);  // the holder must still hold it
                a->ready.fetch_add(1);
                ::alarm(unsigned(limit_s) + 1);  // not recovered by then: SIGALRM ends the wait
                l.lock();
                a->stamp[i].store(now_ns());
                l.unlock();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "waiter %d: %s\n", i, e.what());
                ::_exit(1);
            }
            ::_exit(0);
        }
        waiters.push_back(pid);
    }
    const std::int64_t give_up = now_ns() + 20'000'000'000;
    while (a->ready.load() < k && now_ns() < give_up) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);  // the waiters are in their wait now
    const std::int64_t killed = now_ns();
    for (pid_t p : holders) ::kill(p, SIGKILL);
    for (pid_t p : holders) ::waitpid(p, nullptr, 0);  // reap at once: no zombie pid lingers
    int bad = 0;
    for (pid_t p : waiters) {
        int st = 0;
        ::waitpid(p, &st, 0);
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) continue;  // not recovered in time
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad;
    }
    if (bad) die(std::to_string(bad) + " waiter(s) failed");
    json samples = json::array();
    int never = 0;
    for (int i = 0; i < k; ++i) {
        auto t = a->stamp[i].load();
        if (t == 0)
            ++never;
        else
            samples.push_back(double(t - killed) / 1e6);
    }
    ::munmap(a, sizeof(shared_area));
    return {{"recovery_ms_samples", samples},
            {"not_recovered_within_s", never ? json(limit_s) : json(nullptr)},
            {"not_recovered", never},
            {"ttl_ms", cfg.ttl_ms}};
}

#ifdef LOCKSMITH_BENCH_HIREDIS
void remove_redis_keys(const char* url) {
    auto [host, port, db] = parse_redis_url(url);
    redisContext* c = redisConnect(host.c_str(), port);
    if (!c || c->err) die("redisConnect");
    if (db != 0) freeReplyObject(must(c, redisCommand(c, "SELECT %d", db)));
    const std::string pattern = remote_prefix() + "*";
    std::string cursor = "0";
    for (int round = 0; round < 100000; ++round) {  // bounded
        auto* r = must(
            c, redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor.c_str(), pattern.c_str()));
        cursor.assign(r->element[0]->str, r->element[0]->len);
        for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
            auto* k = r->element[1]->element[i];
            freeReplyObject(must(c, redisCommand(c, "UNLINK %b", k->str, k->len)));
        }
        freeReplyObject(r);
        if (cursor == "0") break;
    }
    redisFree(c);
}
#endif

void cleanup() {
#ifdef LOCKSMITH_BENCH_HIREDIS
    // The redis strategy keeps a fencing counter per name with no TTL (tokens must never repeat),
    // so a run leaves one key per name it used: remove this run's keys (on each member for
    // combined).
    if (cfg.strategy == "redis" && std::getenv("LOCKSMITH_TEST_REDIS_URL"))
        remove_redis_keys(std::getenv("LOCKSMITH_TEST_REDIS_URL"));
    if (cfg.strategy == "combined" && std::getenv("LOCKSMITH_TEST_REDIS_QUORUM"))
        for (const auto& url : quorum_urls()) remove_redis_keys(url.c_str());
#endif
#ifdef LOCKSMITH_BENCH_ZOOKEEPER
    // The run's root and its parents (the request nodes are gone with their sessions).
    if (cfg.strategy == "zookeeper" && std::getenv("LOCKSMITH_TEST_ZOOKEEPER")) {
        zhandle_t* zh = zookeeper_connect();
        const std::string root = zookeeper_root();
        String_vector children{};
        if (zoo_get_children(zh, root.c_str(), 0, &children) == ZOK) {
            for (int i = 0; i < children.count; ++i) {
                const std::string parent = root + "/" + children.data[i];
                String_vector nodes{};
                if (zoo_get_children(zh, parent.c_str(), 0, &nodes) == ZOK) {
                    for (int j = 0; j < nodes.count; ++j)
                        zoo_delete(zh, (parent + "/" + nodes.data[j]).c_str(), -1);
                    deallocate_String_vector(&nodes);
                }
                zoo_delete(zh, parent.c_str(), -1);
            }
            deallocate_String_vector(&children);
        }
        zoo_delete(zh, root.c_str(), -1);
        zookeeper_close(zh);
    }
#endif
    // The sql variants' table of this run (the SQLite file goes with the work folder).
#ifdef LOCKSMITH_BENCH_LIBPQ
    if (cfg.strategy == "sql-postgresql" && std::getenv("LOCKSMITH_TEST_POSTGRES_DSN")) {
        PGconn* c = pg_connect();
        const std::string drop =
            "DROP TABLE IF EXISTS " + raw_statements::postgresql::table(sql_table());
        PQclear(pg_ok(c, PQexec(c, drop.c_str())));
        PQfinish(c);
    }
#endif
#ifdef LOCKSMITH_BENCH_LIBMARIADB
    if (cfg.strategy == "sql-mariadb" && std::getenv("LOCKSMITH_TEST_MARIADB_DSN")) {
        MYSQL* db = open_mariadb();
        const std::string drop =
            "DROP TABLE IF EXISTS " + raw_statements::mariadb::table(sql_table());
        if (mysql_real_query(db, drop.c_str(), drop.size()) != 0)
            die(std::string("drop table: ") + mysql_error(db));
        mysql_close(db);
    }
#endif
    if (cfg.strategy == "shm") {
        ::shm_unlink(("/" + shm_segment()).c_str());  // Boost.Interprocess's name on Linux
    } else if (cfg.strategy == "semaphore") {
        int set = ::semget(semaphore_key(), 0, 0);
        if (set >= 0) ::semctl(set, 0, IPC_RMID);
    }
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + a);
            return argv[++i];
        };
        if (a == "--strategy")
            cfg.strategy = next();
        else if (a == "--scenario")
            cfg.scenario = next();
        else if (a == "--seconds")
            cfg.seconds = std::clamp(std::stod(next()), 0.01, 60.0);
        else if (a == "--dir")
            cfg.dir = next();
        else if (a == "--id")
            cfg.id = next();
        else if (a == "--locks")
            cfg.locks = std::clamp(std::stoi(next()), 1, 1000000);
        else if (a == "--ttl-ms")
            cfg.ttl_ms = std::clamp(std::stoi(next()), 1, 600000);
        else if (a == "--trials")
            cfg.trials = std::stoi(next());
        else if (a == "--only")
            cfg.only = next();
        else if (a == "--hold-us")
            cfg.hold_us = std::clamp(std::stoi(next()), 0, 1000000);
        else if (a == "--procs")
            cfg.procs = std::stoi(next());
        else
            die("unknown argument " + a);
    }
    if (cfg.strategy.empty() || cfg.scenario.empty()) die("--strategy and --scenario are required");
    std::filesystem::create_directories(cfg.dir + "/locks");
    try {
        if (cfg.scenario == "cleanup") {
            cleanup();
            return 0;
        }
        json figures;
        const int sc = std::stoi(cfg.scenario);
        switch (sc) {
            case 1:
                figures = scenario_uncontended();
                break;
            case 2:
                figures = scenario_throughput();
                break;
            case 3:
                figures = scenario_handover();
                break;
            case 4:
                figures = scenario_fairness();
                break;
            case 5:
                figures = scenario_memory();
                break;
            case 6:
                figures = scenario_recovery();
                break;
            default:
                die("scenario must be 1..6 or cleanup");
        }
        json out{{"strategy", cfg.strategy}, {"scenario", sc}, {"figures", figures}};
        std::printf("%s\n", out.dump().c_str());
    } catch (const std::exception& e) {
        die(e.what());
    }
    return 0;
}
