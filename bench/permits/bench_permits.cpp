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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
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

}  // namespace

int main(int argc, char** argv) {
    using namespace locksmith::strategies;
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
