// SPDX-License-Identifier: MIT
#include "support/strategies_under_test.hpp"

#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <locksmith/registry.hpp>
#ifdef LOCKSMITH_TEST_HAVE_SEMAPHORE
#include <locksmith/strategies/semaphore.hpp>
#endif
#ifdef LOCKSMITH_TEST_HAVE_SHM
#include <locksmith/strategies/shm.hpp>
#endif

#include "support/test_environment.hpp"

namespace locksmith::test {
namespace {

// A private lock directory per test process, so parallel test runs do not share files.
std::string private_lock_dir() {
    static const std::string dir = [] {
        auto path =
            std::filesystem::temp_directory_path() /
            ("locksmith-test-" + std::to_string(::getuid()) + "-" + std::to_string(::getpid()));
        std::filesystem::create_directories(path);
        std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::replace);
        return path.string();
    }();
    return dir;
}

// Keys on a shared server get a prefix per test run, so that parallel runs and leftovers of
// earlier runs never meet. Set once per process tree: children that re-read it agree.
std::string remote_test_prefix() {
    static const std::string prefix = [] {
        if (auto p = env("LOCKSMITH_TEST_KEY_PREFIX")) return *p;
        auto fresh = "locksmith-test:" + std::to_string(::getpid()) + ":";
        ::setenv("LOCKSMITH_TEST_KEY_PREFIX", fresh.c_str(), 0);
        return fresh;
    }();
    return prefix;
}

int local_semaphore_key();

// Names noted by note_permit_name (never destroyed: the exit handler reads them).
std::vector<std::string>& permit_names() {
    static auto* names = new std::vector<std::string>;
    return *names;
}

// shm and semaphore: one segment and one semaphore set per test process tree (children that
// re-read the variable agree), removed when the process that made them exits. The id is never
// destroyed, because the exit handler that needs it runs after static destructors.
const std::string& local_ipc_id() {
    static const std::string* id = [] {
        if (auto v = env("LOCKSMITH_TEST_IPC_ID")) return new std::string(*v);
        auto* fresh = new std::string(std::to_string(::getpid()));
        ::setenv("LOCKSMITH_TEST_IPC_ID", fresh->c_str(), 0);
        std::atexit([] {
            ::shm_unlink(("/locksmith-test-" + local_ipc_id()).c_str());
            int set = ::semget(local_semaphore_key(), 0, 0);
            if (set >= 0) ::semctl(set, 0, IPC_RMID);
            for ([[maybe_unused]] const auto& name : permit_names()) {
#ifdef LOCKSMITH_TEST_HAVE_SEMAPHORE
                set = ::semget(strategies::semaphore_permit_key(local_semaphore_key(), name), 0, 0);
                if (set >= 0) ::semctl(set, 0, IPC_RMID);
#endif
#ifdef LOCKSMITH_TEST_HAVE_SHM
                ::shm_unlink(("/" + strategies::shm_permits_segment(
                                        "locksmith-test-" + local_ipc_id(), name))
                                 .c_str());
#endif
            }
        });
        return fresh;
    }();
    return *id;
}

int local_semaphore_key() {
    // FNV-1a of the id, kept positive and away from IPC_PRIVATE.
    std::uint32_t h = 2166136261u;
    for (unsigned char c : "locksmith-test-" + local_ipc_id()) h = (h ^ c) * 16777619u;
    return int(h & 0x7fffffffu) | 1;
}

// The name the pg_advisory entries' sessions carry (application_name), so that a test ends only
// the holding sessions of this process tree.
std::string pg_application() {
    return "locksmith-test-" + local_ipc_id();
}

std::string with_pg_application(const std::string& dsn) {
    return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") +
           "application_name=" + pg_application();
}

// Ends, through the superuser DSN `admin_dsn` (psql), every session of this process tree that
// holds an advisory lock: the waiting ones are left alone.
std::function<void(pid_t)> pg_terminate_holders(const std::string& admin_dsn) {
    return [admin_dsn](pid_t) {
        const auto sql =
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON "
            "a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND a.application_name "
            "= '" +
            pg_application() + "'";
        const auto command = "psql '" + admin_dsn + "' -Atc \"" + sql + "\" >/dev/null 2>&1";
        if (std::system(command.c_str()) != 0)
            throw std::runtime_error("psql could not end the holding sessions");
    };
}

// A ZooKeeper session ends when the server hears nothing for its timeout: the holder stopped
// that long (the server expires it), then resumed.
std::function<void(pid_t)> pause_past(std::chrono::milliseconds session_timeout) {
    return [session_timeout](pid_t holder) {
        ::kill(holder, SIGSTOP);
        std::this_thread::sleep_for(session_timeout + std::chrono::seconds(2));
        ::kill(holder, SIGCONT);
    };
}

}  // namespace

std::vector<strategy_under_test> strategies_under_test() {
    std::vector<strategy_under_test> all = {
        {"file", nlohmann::json{{"lock_dir", private_lock_dir()}}, ""},
        {"memory", nlohmann::json::object(), "", true},
        {"simple", nlohmann::json{{"lock_dir", private_lock_dir()}}, ""},
        {"semaphore", nlohmann::json{{"key", local_semaphore_key()}, {"semaphores", 64}}, ""},
        {"shm", nlohmann::json{{"segment", "locksmith-test-" + local_ipc_id()}, {"slots", 1024}},
         ""},
    };
    // Remote strategies: endpoints come from the environment (see scripts/services.sh env).
    if (auto url = env("LOCKSMITH_TEST_REDIS_URL"))
        all.push_back(
            {"redis", nlohmann::json{{"url", *url}, {"key_prefix", remote_test_prefix()}}, ""});
    else
        all.push_back({"redis", std::nullopt,
                       "LOCKSMITH_TEST_REDIS_URL is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    // The same over TLS (rediss://), to services.sh's redis-tls: client certificate, password.
    {
        const auto url = env("LOCKSMITH_TEST_REDIS_TLS_URL");
        const auto tls = env("LOCKSMITH_TEST_TLS_DIR");
        if (url && tls)
            all.push_back({"redis",
                           nlohmann::json{{"url", *url},
                                          {"key_prefix", remote_test_prefix()},
                                          {"ca_file", *tls + "/ca.pem"},
                                          {"cert_file", *tls + "/client.pem"},
                                          {"key_file", *tls + "/client.key"}},
                           "", false, std::chrono::milliseconds(100), "redis.tls"});
        else
            all.push_back({"redis", std::nullopt,
                           "LOCKSMITH_TEST_REDIS_TLS_URL or LOCKSMITH_TEST_TLS_DIR is unset (run "
                           "scripts/services.sh start, then eval \"$(scripts/services.sh env)\")",
                           false, std::chrono::milliseconds(100), "redis.tls"});
    }
    // The same behind Sentinel (services.sh's redis-sentinel: a master, its replica, three
    // Sentinels, every one with a password): every grant waits for the replica (WAIT 1).
    {
        const auto sentinels = env("LOCKSMITH_TEST_REDIS_SENTINELS");
        const auto master = env("LOCKSMITH_TEST_REDIS_SENTINEL_MASTER");
        const auto password = env("LOCKSMITH_TEST_REDIS_SENTINEL_PASSWORD");
        if (sentinels && master && password) {
            auto list = nlohmann::json::array();
            for (std::size_t from = 0; from <= sentinels->size();) {
                auto to = std::min(sentinels->find(',', from), sentinels->size());
                list.push_back(sentinels->substr(from, to - from));
                from = to + 1;
            }
            all.push_back({"redis",
                           nlohmann::json{{"sentinels", list},
                                          {"master_name", *master},
                                          {"sentinel_password", *password},
                                          {"password", *password},
                                          {"key_prefix", remote_test_prefix()}},
                           "", false, std::chrono::milliseconds(100), "redis.sentinel"});
        } else {
            all.push_back({"redis", std::nullopt,
                           "LOCKSMITH_TEST_REDIS_SENTINELS, _SENTINEL_MASTER or "
                           "_SENTINEL_PASSWORD is unset (run scripts/services.sh start, then "
                           "eval \"$(scripts/services.sh env)\")",
                           false, std::chrono::milliseconds(100), "redis.sentinel"});
        }
    }
    // The same on a Redis Cluster (services.sh's redis-cluster: three masters, a replica of
    // each, a password): names spread over the masters, every grant waits for the replica. Three
    // of the six nodes are named, as a config would: each one that is dead or silent costs the
    // first map its connect and command timeouts (the hostile suite's bound is 9 s).
    {
        const auto nodes = env("LOCKSMITH_TEST_REDIS_CLUSTER");
        const auto password = env("LOCKSMITH_TEST_REDIS_CLUSTER_PASSWORD");
        if (nodes && password) {
            auto list = nlohmann::json::array();
            for (std::size_t from = 0; from <= nodes->size() && list.size() < 3;) {
                auto to = std::min(nodes->find(',', from), nodes->size());
                list.push_back(nodes->substr(from, to - from));
                from = to + 1;
            }
            all.push_back({"redis",
                           nlohmann::json{{"cluster", list},
                                          {"password", *password},
                                          {"key_prefix", remote_test_prefix()}},
                           "", false, std::chrono::milliseconds(100), "redis.cluster"});
        } else {
            all.push_back({"redis", std::nullopt,
                           "LOCKSMITH_TEST_REDIS_CLUSTER or _CLUSTER_PASSWORD is unset (run "
                           "scripts/services.sh start, then eval \"$(scripts/services.sh env)\")",
                           false, std::chrono::milliseconds(100), "redis.cluster"});
        }
    }
    if (auto servers = env("LOCKSMITH_TEST_MEMCACHED"))
        // Memcached keeps whole seconds and the store adds one (its clock ticks once a second),
        // so a 1 s TTL lives 2-3 s: expiry cases need TTLs of several seconds.
        all.push_back({"memcached",
                       nlohmann::json{{"servers", *servers}, {"key_prefix", remote_test_prefix()}},
                       "", false, std::chrono::milliseconds(2000)});
    else
        all.push_back({"memcached", std::nullopt,
                       "LOCKSMITH_TEST_MEMCACHED is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    if (auto dsn = env("LOCKSMITH_TEST_POSTGRES_DSN"))
        all.push_back({"pg_advisory", nlohmann::json{{"dsn", with_pg_application(*dsn)}}, "", false,
                       std::chrono::milliseconds(100), "", pg_terminate_holders(*dsn)});
    else
        all.push_back({"pg_advisory", std::nullopt,
                       "LOCKSMITH_TEST_POSTGRES_DSN is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    // Over TLS, as a role that may connect only so (scripts/services.sh: sslmode=verify-full
    // against the rig's CA).
    if (auto dsn = env("LOCKSMITH_TEST_POSTGRES_TLS_DSN")) {
        const auto admin = env("LOCKSMITH_TEST_POSTGRES_DSN");
        all.push_back({"pg_advisory", nlohmann::json{{"dsn", with_pg_application(*dsn)}}, "", false,
                       std::chrono::milliseconds(100), "pg_advisory.tls",
                       admin ? pg_terminate_holders(*admin) : nullptr});
    } else
        all.push_back({"pg_advisory", std::nullopt,
                       "LOCKSMITH_TEST_POSTGRES_TLS_DSN is unset (run scripts/services.sh start, "
                       "then eval \"$(scripts/services.sh env)\")",
                       false, std::chrono::milliseconds(100), "pg_advisory.tls"});
    if (auto dsn = env("LOCKSMITH_TEST_MARIADB_DSN"))
        all.push_back({"mysql_get_lock", nlohmann::json{{"dsn", *dsn}}, ""});
    else
        all.push_back({"mysql_get_lock", std::nullopt,
                       "LOCKSMITH_TEST_MARIADB_DSN is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    // Over TLS, as a user that may connect only so (scripts/services.sh: REQUIRE SSL,
    // sslmode=verify-full against the rig's CA).
    if (auto dsn = env("LOCKSMITH_TEST_MARIADB_TLS_DSN"))
        all.push_back({"mysql_get_lock", nlohmann::json{{"dsn", *dsn}}, "", false,
                       std::chrono::milliseconds(100), "mysql_get_lock.tls"});
    else
        all.push_back({"mysql_get_lock", std::nullopt,
                       "LOCKSMITH_TEST_MARIADB_TLS_DSN is unset (run scripts/services.sh start, "
                       "then eval \"$(scripts/services.sh env)\")",
                       false, std::chrono::milliseconds(100), "mysql_get_lock.tls"});
    if (auto endpoints = env("LOCKSMITH_TEST_ETCD"))
        // Lease TTLs are whole seconds at etcd (rounded up), at least etcd's minimum (1.5 s with
        // the default 100 ms heartbeat, so 2 s), and its expiry sweep runs twice a second: a
        // TTL of 1 s lives 2-2.5 s, so expiry cases need TTLs of several seconds.
        all.push_back({"etcd",
                       nlohmann::json{{"endpoints", *endpoints}, {"prefix", remote_test_prefix()}},
                       "", false, std::chrono::milliseconds(2000)});
    else
        all.push_back({"etcd", std::nullopt,
                       "LOCKSMITH_TEST_ETCD is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    // The same over the 3-member cluster with TLS and client certificates (services.sh's
    // etcd-cluster, the certificates of its `certs`).
    {
        const auto endpoints = env("LOCKSMITH_TEST_ETCD_CLUSTER");
        const auto tls = env("LOCKSMITH_TEST_TLS_DIR");
        if (endpoints && tls)
            all.push_back({"etcd",
                           nlohmann::json{{"endpoints", *endpoints},
                                          {"prefix", remote_test_prefix()},
                                          {"ca_file", *tls + "/ca.pem"},
                                          {"cert_file", *tls + "/client.pem"},
                                          {"key_file", *tls + "/client.key"}},
                           "", false, std::chrono::milliseconds(2000), "etcd.tls_cluster"});
        else
            all.push_back({"etcd", std::nullopt,
                           "LOCKSMITH_TEST_ETCD_CLUSTER or LOCKSMITH_TEST_TLS_DIR is unset (run "
                           "scripts/services.sh start, then eval \"$(scripts/services.sh env)\")",
                           false, std::chrono::milliseconds(2000), "etcd.tls_cluster"});
    }
    if (auto hosts = env("LOCKSMITH_TEST_ZOOKEEPER"))
        // A short session timeout, so that a killed holder frees its locks within seconds.
        all.push_back({"zookeeper",
                       nlohmann::json{{"hosts", *hosts},
                                      {"session_timeout_ms", 2000},
                                      {"root", "/" + remote_test_prefix()}},
                       "", false, std::chrono::milliseconds(100), "",
                       pause_past(std::chrono::milliseconds(2000))});
    else
        all.push_back({"zookeeper", std::nullopt,
                       "LOCKSMITH_TEST_ZOOKEEPER is unset (run scripts/services.sh start, then "
                       "eval \"$(scripts/services.sh env)\")"});
    // zookeeper on the three-server ensemble, with auth (the production form: issue 24).
    if (auto hosts = env("LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE"))
        all.push_back({"zookeeper",
                       nlohmann::json{{"hosts", *hosts},
                                      {"session_timeout_ms", 2000},
                                      {"root", "/" + remote_test_prefix() + "-ensemble"},
                                      {"auth", "digest:locksmith-test:" + remote_test_prefix()}},
                       "", false, std::chrono::milliseconds(100), "zookeeper.ensemble"});
    else
        all.push_back({"zookeeper", std::nullopt,
                       "LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE is unset (run scripts/services.sh "
                       "start, then eval \"$(scripts/services.sh env)\")",
                       false, std::chrono::milliseconds(100), "zookeeper.ensemble"});
    // sql, once per driver: SQLite in the private lock directory, the servers from the
    // environment, each in a table of its own so that a test run never meets a user's table.
    const std::string run_hint =
        " is unset (run scripts/services.sh start, then eval \"$(scripts/services.sh env)\")";
    auto sql = [&](const char* label, std::optional<std::string> dsn, const char* variable) {
        if (dsn)
            all.push_back({"sql", nlohmann::json{{"dsn", *dsn}, {"table", "locksmith_test_keys"}},
                           "", false, std::chrono::milliseconds(100), label});
        else
            all.push_back({"sql", std::nullopt, variable + run_hint, false,
                           std::chrono::milliseconds(100), label});
    };
    sql("sql.sqlite", "sqlite://" + private_lock_dir() + "/sql-test.db", "");
    sql("sql.postgresql", env("LOCKSMITH_TEST_POSTGRES_DSN"), "LOCKSMITH_TEST_POSTGRES_DSN");
    sql("sql.mariadb", env("LOCKSMITH_TEST_MARIADB_DSN"), "LOCKSMITH_TEST_MARIADB_DSN");
    sql("sql.postgresql.tls", env("LOCKSMITH_TEST_POSTGRES_TLS_DSN"),
        "LOCKSMITH_TEST_POSTGRES_TLS_DSN");
    sql("sql.mariadb.tls", env("LOCKSMITH_TEST_MARIADB_TLS_DSN"), "LOCKSMITH_TEST_MARIADB_TLS_DSN");
    // combined: a consensus of three independent redis servers, each with the run's prefix.
    if (auto urls = env("LOCKSMITH_TEST_REDIS_QUORUM")) {
        auto members = nlohmann::json::array();
        for (std::size_t from = 0; from <= urls->size();) {
            auto to = std::min(urls->find(',', from), urls->size());
            members.push_back(
                {{"strategy", "redis"},
                 {"options",
                  {{"url", urls->substr(from, to - from)}, {"key_prefix", remote_test_prefix()}}}});
            from = to + 1;
        }
        all.push_back(
            {"combined", nlohmann::json{{"quorum", "consensus"}, {"members", members}}, ""});
    } else {
        all.push_back({"combined", std::nullopt, "LOCKSMITH_TEST_REDIS_QUORUM" + run_hint});
    }
    // Keep only the strategies this build has.
    std::vector<strategy_under_test> built;
    for (auto& s : all)
        if (default_registry().contains(s.name)) built.push_back(std::move(s));
    return built;
}

void note_permit_name(const std::string& resource) {
    (void)local_ipc_id();  // registers the exit handler
    permit_names().push_back(resource);
}

}  // namespace locksmith::test
