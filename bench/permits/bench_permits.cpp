// SPDX-License-Identifier: MIT
// Uncontended acquire+release pairs per second of a counting semaphore's permit (issue 27) on
// each local strategy with `counting`, beside the same strategy's lock, in one run: the loops
// alternate round by round (7 rounds), one object each, in one process. Then etcd, zookeeper
// and memcached, by name through the registry, when their servers are given as the tests take
// them (LOCKSMITH_TEST_ETCD, LOCKSMITH_TEST_ZOOKEEPER, LOCKSMITH_TEST_MEMCACHED:
// scripts/services.sh env), and sql (a SQLite file; PostgreSQL and MariaDB at
// LOCKSMITH_TEST_POSTGRES_DSN, LOCKSMITH_TEST_MARIADB_DSN), with fewer pairs.
//
//   bench_permits [iterations per round] [remote iterations]     (default 100000, 300)
//
// Prints, per strategy, the lock and permits with N = 1, 4 and 8: min/median/max pairs/s and
// the median's ratio to the lock's. Uncontended: every acquire finds a permit free (the first).
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/file.hpp>
#include <locksmith/strategies/semaphore.hpp>
#include <locksmith/strategies/shm.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double pairs_per_second(long iterations, F&& body) {
    const auto start = clock_type::now();
    for (long i = 0; i < iterations; ++i) body();
    const std::chrono::duration<double> took = clock_type::now() - start;
    return double(iterations) / took.count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void report(const char* strategy, const std::vector<std::string>& labels,
            const std::vector<std::vector<double>>& samples) {
    const double lock = median(samples[0]);
    for (std::size_t i = 0; i < labels.size(); ++i) {
        auto v = samples[i];
        std::sort(v.begin(), v.end());
        std::printf("| `%s` | %s | %.0f | %.0f | %.0f | %.2f |\n", strategy, labels[i].c_str(),
                    v.front(), v[v.size() / 2], v.back(), v[v.size() / 2] / lock);
    }
}

void run(const char* strategy, const std::shared_ptr<locksmith::store>& store, long iterations) {
    using namespace locksmith;
    const int rounds = 7;
    named_lock lock(store, std::make_shared<key>("bench-lock"));
    std::vector<std::unique_ptr<named_semaphore>> permits;
    std::vector<std::string> labels{"lock"};
    for (std::uint32_t n : {1u, 4u, 8u}) {
        auto k = std::make_shared<key>("bench-permits-" + std::to_string(n));
        k->set_limit(n);
        permits.push_back(std::make_unique<named_semaphore>(store, k));
        labels.push_back("permit, N = " + std::to_string(n));
    }
    std::vector<std::vector<double>> samples(labels.size());
    for (int r = 0; r < rounds; ++r) {
        samples[0].push_back(pairs_per_second(iterations, [&] {
            lock.lock();
            lock.unlock();
        }));
        for (std::size_t i = 0; i < permits.size(); ++i)
            samples[i + 1].push_back(pairs_per_second(iterations, [&] {
                permits[i]->acquire();
                permits[i]->release();
            }));
    }
    report(strategy, labels, samples);
}

// A strategy for the contended runs: made by name through the registry in each process.
struct subject {
    std::string label;
    std::string strategy;
    nlohmann::json options;
};

// Every strategy of the uncontended runs, local ones in `dir` / keys of this run's own.
std::vector<subject> subjects(const std::string& id, const std::filesystem::path& dir) {
    std::vector<subject> all{{"file", "file", {{"lock_dir", (dir / "file").string()}}},
                             {"simple", "simple", {{"lock_dir", (dir / "simple").string()}}},
                             {"shm", "shm", {{"segment", "locksmith-bench-contended-" + id}}},
                             {"semaphore",
                              "semaphore",
                              {{"key", int((0x5c000000u + unsigned(::getpid())) & 0x7fffffffu)}}}};
    const std::string where = "locksmith-bench-contended-" + id;
    auto env = [](const char* v) { return std::getenv(v); };
    if (const char* url = env("LOCKSMITH_TEST_REDIS_URL"))
        all.push_back({"redis", "redis", {{"url", url}, {"key_prefix", where + ":"}}});
    if (const char* servers = env("LOCKSMITH_TEST_MEMCACHED"))
        all.push_back(
            {"memcached", "memcached", {{"servers", servers}, {"key_prefix", where + ":"}}});
    if (const char* dsn = env("LOCKSMITH_TEST_POSTGRES_DSN")) {
        all.push_back({"pg_advisory", "pg_advisory", {{"dsn", dsn}}});
        all.push_back(
            {"sql (PostgreSQL)", "sql", {{"dsn", dsn}, {"table", "locksmith_bench_permits"}}});
    }
    if (const char* dsn = env("LOCKSMITH_TEST_MARIADB_DSN")) {
        all.push_back({"mysql_get_lock", "mysql_get_lock", {{"dsn", dsn}}});
        all.push_back(
            {"sql (MariaDB)", "sql", {{"dsn", dsn}, {"table", "locksmith_bench_permits"}}});
    }
    if (const char* endpoints = env("LOCKSMITH_TEST_ETCD"))
        all.push_back({"etcd", "etcd", {{"endpoints", endpoints}, {"prefix", where + "/"}}});
    if (const char* hosts = env("LOCKSMITH_TEST_ZOOKEEPER"))
        all.push_back({"zookeeper", "zookeeper", {{"hosts", hosts}, {"root", "/" + where}}});
    return all;
}

// PROCESSES forked processes on `name` (limit 0: the lock) for `seconds`; grants per second.
double contended_rate(const subject& s, const std::string& name, std::uint32_t limit, int processes,
                      double seconds, std::chrono::milliseconds hold) {
    using namespace locksmith;
    int counts[2];
    if (::pipe(counts) != 0) return -1;
    const auto start = std::chrono::system_clock::now() + std::chrono::milliseconds(1500);
    const auto end = start + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                 std::chrono::duration<double>(seconds));
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p) {
        const pid_t pid = ::fork();
        if (pid != 0) {
            children.push_back(pid);
            continue;
        }
        ::close(counts[0]);
        long made = 0;
        try {
            auto d = default_registry().find(s.strategy);
            auto store = d->create(s.options);
            auto k = std::make_shared<key>(name);
            lock_options o;
            std::unique_ptr<named_lock> lock;
            std::unique_ptr<named_semaphore> permit;
            if (limit == 0) {
                lock = std::make_unique<named_lock>(store, k, o);
            } else {
                k->set_limit(limit);
                permit = std::make_unique<named_semaphore>(store, k, o);
            }
            std::this_thread::sleep_until(start);
            while (std::chrono::system_clock::now() < end) {
                if (lock)
                    lock->lock();
                else
                    permit->acquire();
                std::this_thread::sleep_for(hold);
                if (lock)
                    lock->unlock();
                else
                    permit->release();
                ++made;
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: %s\n", s.label.c_str(), e.what());
            made = -1;
        }
        (void)!::write(counts[1], &made, sizeof made);
        ::_exit(0);
    }
    ::close(counts[1]);
    long total = 0;
    bool failed = false;
    for (long made; ::read(counts[0], &made, sizeof made) == ssize_t(sizeof made);) {
        if (made < 0) failed = true;
        total += made;
    }
    ::close(counts[0]);
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
    return failed ? -1 : double(total) / seconds;
}

int run_contended(int argc, char** argv) {
    const double seconds = argc > 2 ? std::atof(argv[2]) : 3;
    const int processes = argc > 3 ? std::atoi(argv[3]) : 8;
    const auto hold = std::chrono::milliseconds(argc > 4 ? std::atol(argv[4]) : 1);
    const std::string id = std::to_string(::getpid());
    const auto dir = std::filesystem::temp_directory_path() / ("locksmith-bench-contended-" + id);
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
    std::printf(
        "| strategy | object | grants/s, %d processes | at most (limit / hold) | share of "
        "that |\n|---|---|---:|---:|---:|\n",
        processes);
    for (const auto& s : subjects(id, dir)) {
        bool wanted = argc <= 5;
        for (int i = 5; i < argc; ++i) wanted = wanted || s.label == argv[i];
        if (!wanted) continue;
        for (std::uint32_t limit : {0u, 1u, 4u, 8u}) {
            const std::string name = "bench-contended-" + std::to_string(limit);
            const double rate = contended_rate(s, name, limit, processes, seconds, hold);
            const double most = double(std::min<int>(std::max<int>(1, int(limit)), processes)) *
                                1000.0 / double(hold.count());
            const std::string object = limit == 0 ? "lock" : "permit, N = " + std::to_string(limit);
            std::printf("| `%s` | %s | %.0f | %.0f | %.2f |\n", s.label.c_str(), object.c_str(),
                        rate, most, rate / most);
            std::fflush(stdout);
            if (s.strategy == "shm")
                locksmith::strategies::remove_shm_segment(
                    limit == 0 ? s.options["segment"].get<std::string>()
                               : locksmith::strategies::shm_permits_segment(
                                     s.options["segment"].get<std::string>(), name));
            if (s.strategy == "semaphore") {
                const int key = s.options["key"].get<int>();
                const int set = ::semget(
                    limit == 0 ? key : locksmith::strategies::semaphore_permit_key(key, name), 0,
                    0);
                if (set >= 0) ::semctl(set, 0, IPC_RMID);
            }
        }
    }
    std::filesystem::remove_all(dir);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace locksmith::strategies;
    if (argc > 1 && std::string(argv[1]) == "--contended") return run_contended(argc, argv);
    const long iterations = argc > 1 ? std::atol(argv[1]) : 100000;
    const std::string id = std::to_string(::getpid());
    std::printf(
        "| strategy | object | min pairs/s | median pairs/s | max pairs/s | median / lock |\n"
        "|---|---|---:|---:|---:|---:|\n");

    const auto dir = std::filesystem::temp_directory_path() / ("locksmith-bench-permits-" + id);
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
    {
        file_options o;
        o.lock_dir = dir;
        run("file", make_file_store(o), iterations);
        if (auto d = locksmith::default_registry().find("simple"))
            run("simple", d->create({{"lock_dir", (dir / "simple").string()}}), iterations / 10);
    }
    std::filesystem::remove_all(dir);

    shm_options so;
    so.segment = "locksmith-bench-permits-" + id;
    run("shm", make_shm_store(so), iterations);
    for (const char* n : {"bench-permits-1", "bench-permits-4", "bench-permits-8"})
        remove_shm_segment(shm_permits_segment(so.segment, n));
    remove_shm_segment(so.segment);

    semaphore_options sem;
    sem.key = int((0x5b000000u + unsigned(::getpid())) & 0x7fffffffu);
    run("semaphore", make_semaphore_store(sem), iterations);
    for (const char* n : {"bench-permits-1", "bench-permits-4", "bench-permits-8"}) {
        const int set = ::semget(semaphore_permit_key(sem.key, n), 0, 0);
        if (set >= 0) ::semctl(set, 0, IPC_RMID);
    }
    const int set = ::semget(sem.key, 0, 0);
    if (set >= 0) ::semctl(set, 0, IPC_RMID);

    // Keys and nodes under a prefix of this run's own (the limit keys stay: one per N).
    const long remote = argc > 2 ? std::atol(argv[2]) : 300;
    const std::string where = "locksmith-bench-permits-" + id;
    if (const char* endpoints = std::getenv("LOCKSMITH_TEST_ETCD"))
        if (auto d = locksmith::default_registry().find("etcd"))
            run("etcd", d->create({{"endpoints", endpoints}, {"prefix", where + "/"}}), remote);
    if (const char* hosts = std::getenv("LOCKSMITH_TEST_ZOOKEEPER"))
        if (auto d = locksmith::default_registry().find("zookeeper"))
            run("zookeeper", d->create({{"hosts", hosts}, {"root", "/" + where}}), remote);
    if (const char* url = std::getenv("LOCKSMITH_TEST_REDIS_URL"))
        if (auto d = locksmith::default_registry().find("redis"))
            run("redis", d->create({{"url", url}, {"key_prefix", where + ":"}}), remote);
    if (const char* dsn = std::getenv("LOCKSMITH_TEST_POSTGRES_DSN"))
        if (auto d = locksmith::default_registry().find("pg_advisory"))
            run("pg_advisory", d->create({{"dsn", dsn}}), remote);
    if (const char* servers = std::getenv("LOCKSMITH_TEST_MEMCACHED"))
        if (auto d = locksmith::default_registry().find("memcached"))
            run("memcached", d->create({{"servers", servers}, {"key_prefix", where + ":"}}),
                remote);
    // mysql_get_lock on the tests' MariaDB (user locks are server-wide and the bench's names are
    // fixed: one bench per server at a time).
    if (const char* dsn = std::getenv("LOCKSMITH_TEST_MARIADB_DSN"))
        if (auto d = locksmith::default_registry().find("mysql_get_lock"))
            run("mysql_get_lock", d->create({{"dsn", dsn}}), remote);
    // sql: a SQLite file of this run's own, and the servers of the tests when given
    // (LOCKSMITH_TEST_POSTGRES_DSN, LOCKSMITH_TEST_MARIADB_DSN), in a table of the bench's own.
    if (auto d = locksmith::default_registry().find("sql")) {
        const auto sqlite_dir = std::filesystem::temp_directory_path() / (where + "-sql");
        run("sql (SQLite)", d->create({{"dsn", "sqlite://" + (sqlite_dir / "bench.db").string()}}),
            remote);
        std::filesystem::remove_all(sqlite_dir);
        for (const char* variable : {"LOCKSMITH_TEST_POSTGRES_DSN", "LOCKSMITH_TEST_MARIADB_DSN"})
            if (const char* dsn = std::getenv(variable))
                run(variable[15] == 'P' ? "sql (PostgreSQL)" : "sql (MariaDB)",
                    d->create({{"dsn", dsn}, {"table", "locksmith_bench_permits"}}), remote);
    }
    return 0;
}
