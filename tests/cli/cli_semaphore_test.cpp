// SPDX-License-Identifier: MIT
// `locksmith run --limit N` (issue 27): at most N runs at once, LOCKSMITH_PERMIT, a second limit
// refused, a lock rule's limit, `status` and `explain` of a counting semaphore. The semaphore
// strategy runs on an IPC key of the test's own, whose sets are removed at its end.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sysexits.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <locksmith/strategies/semaphore.hpp>

#include "cli/cli_sandbox.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"

using namespace std::chrono_literals;
using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using locksmith::test::wait_for_file;
using nlohmann::json;

namespace {

// A semaphore key for one test, and the sets of the names it used removed at its end.
struct semaphore_key {
    int key = [] {
        static std::atomic<int> counter{0};
        return int((0x51000000u + unsigned(::getpid()) * 64u + unsigned(++counter)) & 0x7fffffffu);
    }();
    std::vector<std::string> names;
    ~semaphore_key() {
        for (const auto& n : names) {
            const int id = ::semget(locksmith::strategies::semaphore_permit_key(key, n), 0, 0);
            if (id >= 0) ::semctl(id, 0, IPC_RMID);
        }
        const int id = ::semget(key, 0, 0);
        if (id >= 0) ::semctl(id, 0, IPC_RMID);
    }
    const std::string& name(const std::string& n) {
        names.push_back(n);
        return names.back();
    }
    json config(json locks = json::object()) const {
        // The other strategies that count (and rank above semaphore) are off: these cases are
        // about semaphore's sets. local_strategies_count_too runs the others (multi_process
        // `run --limit` on every entry).
        json c = {{"strategies",
                   {{"semaphore", {{"options", {{"key", key}}}}},
                    {"shm", {{"enabled", false}}},
                    {"file", {{"enabled", false}}},
                    {"simple", {{"enabled", false}}}}}};
        if (!locks.empty()) c["locks"] = locks;
        return c;
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(run_with_a_limit)

// Six runs of 0.4 s with --limit 3, started together: each counts the marker files of the runs
// inside with it. Never more than three, and three at some point (they overlap).
BOOST_AUTO_TEST_CASE(at_most_n_runs_hold_a_permit_at_once) {
    semaphore_key sem;
    cli_sandbox box(sem.config());
    const auto& name = sem.name("pool");
    const std::string inside = box.path("inside");
    std::filesystem::create_directory(inside);
    const std::string script = "touch " + inside + "/$$; ls " + inside + " | wc -l >> " +
                               box.path("counts") + "; sleep 0.4; rm " + inside + "/$$";
    std::vector<locksmith::test::cli_process> runs;
    for (int i = 0; i < 6; ++i)
        runs.push_back(box.start(box.with_config("run", {"--limit", "3", name, "-c", script})));
    for (auto& p : runs) {
        auto r = box.wait(p);
        BOOST_TEST(r.exit_code == 0, describe(r));
    }
    std::istringstream counts(box.read_file("counts"));
    int most = 0, lines = 0;
    for (int n; counts >> n; ++lines) most = std::max(most, n);
    BOOST_TEST(lines == 6);
    BOOST_TEST(most <= 3);
    BOOST_TEST(most == 3);
}

// The torture (8 processes × 100 runs of `run --limit 3`) is multi_process's
// run_limit_3_eight_loops_of_a_hundred, on every strategy entry that counts.

BOOST_AUTO_TEST_CASE(the_command_learns_its_permit_and_a_lock_has_none) {
    semaphore_key sem;
    cli_sandbox box(sem.config());
    const auto& name = sem.name("env");
    box.set_env("LOCKSMITH_PERMIT", "from-an-enclosing-run");
    auto r = box.run(box.with_config("run", {"--limit", "2", name, "--", "sh", "-c",
                                             "echo \"$LOCKSMITH_STRATEGY|$LOCKSMITH_PERMIT\""}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.rfind("semaphore|", 0) == 0, r.out);
    BOOST_TEST(r.out.size() > std::string("semaphore|\n").size(), r.out);
    BOOST_TEST(r.out.find("from-an-enclosing-run") == std::string::npos, r.out);
    r = box.run(
        box.with_config("run", {"plain", "--", "sh", "-c", "echo ${LOCKSMITH_PERMIT-unset}"}));
    BOOST_TEST(r.out == "unset\n", describe(r));
}

BOOST_AUTO_TEST_CASE(no_permit_left_gives_the_conflict_code_and_status_counts_them) {
    semaphore_key sem;
    cli_sandbox box(sem.config());
    const auto& name = sem.name("busy");
    auto holder = box.start(box.with_config(
        "run", {"--limit", "1", name, "-c", "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto r = box.run(box.with_config("run", {"-n", "--limit", "1", name, "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    r = box.run(
        box.with_config("run", {"-w", "0.3", "-E", "9", "-v", "--limit", "1", name, "--", "true"}));
    BOOST_TEST(r.exit_code == 9, describe(r));
    BOOST_TEST(r.seconds >= 0.28, r.seconds);
    BOOST_TEST(r.err.find("waiting for one of its 1 permits") != std::string::npos, r.err);

    r = box.run(box.with_config("status", {"--require", "counting", name}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    BOOST_TEST(r.out.find("1 of 1 permits held (strategy semaphore)") != std::string::npos, r.out);
    r = box.run(box.with_config("status", {"--require", "counting", name, "--json"}));
    const auto j = json::parse(r.out);
    BOOST_TEST(j["limit"] == 1);
    BOOST_TEST(j["permits_held"] == 1);

    ::kill(holder.pid, SIGTERM);
    box.wait(holder);
    r = box.run(box.with_config("status", {"--require", "counting", name}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("0 of 1 permits held") != std::string::npos, r.out);
}

BOOST_AUTO_TEST_CASE(a_second_limit_for_a_name_is_an_error_not_more_holders) {
    semaphore_key sem;
    cli_sandbox box(sem.config());
    const auto& name = sem.name("one-limit");
    auto holder = box.start(box.with_config(
        "run", {"--limit", "2", name, "-c", "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto r = box.run(box.with_config("run", {"--limit", "3", name, "--", "echo", "ran"}));
    BOOST_TEST(r.exit_code != 0, describe(r));
    BOOST_TEST(r.out.empty(), describe(r));  // the command never ran
    BOOST_TEST(r.err.find("limit of 2") != std::string::npos, r.err);
    r = box.run(box.with_config("run", {"--limit", "2", name, "--", "echo", "ran"}));
    BOOST_TEST(r.out == "ran\n", describe(r));
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);
}

BOOST_AUTO_TEST_CASE(a_lock_rules_limit_makes_a_run_take_a_permit) {
    semaphore_key sem;
    const auto& name = sem.name("backup.db");
    cli_sandbox box(sem.config({{"backup.*", {{"limit", 2}}}}));
    auto r =
        box.run(box.with_config("run", {name, "--", "sh", "-c", "echo \"$LOCKSMITH_STRATEGY\""}));
    BOOST_TEST(r.out == "semaphore\n", describe(r));
    r = box.run(box.with_config("status", {name}));
    BOOST_TEST(r.out.find("0 of 2 permits held") != std::string::npos, describe(r));
    r = box.run(box.with_config("run", {"-s", name, "--", "true"}));
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    // explain NAME asks what run asks: counting, with the rule's limit.
    r = box.run(box.with_config("explain", {name, "--json"}));
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    const auto doc = json::parse(r.out);
    BOOST_TEST(doc["chosen"] == "semaphore", r.out);
    BOOST_TEST(doc["limit"] == 2, r.out);
    BOOST_TEST(doc["requested"].dump().find("counting") != std::string::npos, r.out);
}

BOOST_AUTO_TEST_CASE(bad_limits_and_shared_permits_are_usage_errors) {
    cli_sandbox box;
    for (const char* bad : {"0", "-1", "x", "1000001"}) {
        auto r = box.run(box.with_config("run", {"--limit", bad, "n", "--", "true"}));
        BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    }
    auto r = box.run(box.with_config("run", {"-s", "--limit", "2", "n", "--", "true"}));
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(r.err.find("no shared mode") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(explain_counting_names_the_strategies_that_count) {
    semaphore_key sem;
    cli_sandbox box(sem.config());
    auto r = box.run(box.with_config("explain", {"--require", "counting", "--json"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out)["chosen"] == "semaphore", r.out);
    // No strategy configured here counts across hosts (redis would, given a url): a clear
    // refusal naming the bit.
    r = box.run(
        box.with_config("run", {"--require", "distributed", "--limit", "2", "n", "--", "true"}));
    BOOST_TEST(r.exit_code == EX_UNAVAILABLE, describe(r));
    BOOST_TEST(r.err.find("counting") != std::string::npos, r.err);
}

// `run --limit 3` on a server's strategy: six runs of 0.4 s, never more than three inside at
// once and three at some point; the command's permit is its owner's token, or with `numbered`
// the permit's number 1..3; `status` counts the permits while one is held; a second limit is
// refused.
static void run_with_a_limit_on(const std::string& strategy, const json& options,
                                bool numbered = false) {
    cli_sandbox box(json{{"strategies", {{strategy, {{"options", options}}}}}});
    const std::string inside = box.path("inside");
    std::filesystem::create_directory(inside);
    const std::string script = "touch " + inside + "/$$; ls " + inside + " | wc -l >> " +
                               box.path("counts") + "; echo $LOCKSMITH_PERMIT >> " +
                               box.path("permits") + "; sleep 0.4; rm " + inside + "/$$";
    std::vector<locksmith::test::cli_process> runs;
    for (int i = 0; i < 6; ++i)
        runs.push_back(box.start(box.with_config(
            "run", {"--strategy", strategy, "--ttl", "10", "--limit", "3", "pool", "-c", script})));
    for (auto& p : runs) {
        auto r = box.wait(p, std::chrono::seconds(60));
        BOOST_TEST(r.exit_code == 0, describe(r));
    }
    std::istringstream counts(box.read_file("counts"));
    int most = 0, lines = 0;
    for (int n; counts >> n; ++lines) most = std::max(most, n);
    BOOST_TEST(lines == 6);
    BOOST_TEST(most <= 3);
    BOOST_TEST(most == 3);
    std::istringstream permits(box.read_file("permits"));
    std::set<std::string> distinct;
    int permits_read = 0;
    for (std::string p; permits >> p; ++permits_read) {
        if (numbered)
            BOOST_TEST((p == "1" || p == "2" || p == "3"), p);
        else
            BOOST_TEST(p.size() == 32u, p);  // the owner's token
        distinct.insert(p);
    }
    BOOST_TEST(permits_read == 6);
    if (numbered)
        BOOST_TEST(distinct.size() == 3u);  // three at once: each number in use
    else
        BOOST_TEST(distinct.size() == 6u);

    auto holder =
        box.start(box.with_config("run", {"--strategy", strategy, "--limit", "3", "held", "-c",
                                          "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    // A name with permits held is a semaphore to the strategy's status, asked by strategy.
    auto r = box.run(box.with_config("status", {"--strategy", strategy, "held"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("1 of 3 permits held (strategy " + strategy + ")") != std::string::npos,
               r.out);
    r = box.run(box.with_config(
        "run", {"--strategy", strategy, "--limit", "2", "held", "--", "echo", "ran"}));
    BOOST_TEST(r.out.empty(), describe(r));
    BOOST_TEST(r.err.find("limit of 3") != std::string::npos, r.err);
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);
}

BOOST_AUTO_TEST_CASE(run_with_a_limit_on_redis) {
    const auto url = locksmith::test::env("LOCKSMITH_TEST_REDIS_URL");
    if (!url) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_REDIS_URL is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    const std::string prefix = "locksmith-cli-sem:" + std::to_string(::getpid()) + ":";
    run_with_a_limit_on("redis", {{"url", *url}, {"key_prefix", prefix}});
}

BOOST_AUTO_TEST_CASE(run_with_a_limit_on_etcd) {
    const auto endpoints = locksmith::test::env("LOCKSMITH_TEST_ETCD");
    if (!endpoints) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_ETCD is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    const std::string prefix = "locksmith-cli-sem/" + std::to_string(::getpid()) + "/";
    run_with_a_limit_on("etcd", {{"endpoints", *endpoints}, {"prefix", prefix}});
}

BOOST_AUTO_TEST_CASE(run_with_a_limit_on_zookeeper) {
    const auto hosts = locksmith::test::env("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_ZOOKEEPER is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    const std::string root = "/locksmith-cli-sem-" + std::to_string(::getpid());
    run_with_a_limit_on("zookeeper", {{"hosts", *hosts}, {"root", root}});
}

BOOST_AUTO_TEST_CASE(run_with_a_limit_on_memcached) {
    const auto servers = locksmith::test::env("LOCKSMITH_TEST_MEMCACHED");
    if (!servers) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_MEMCACHED is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    const std::string prefix = "locksmith-cli-sem:" + std::to_string(::getpid()) + ":";
    run_with_a_limit_on("memcached", {{"servers", *servers}, {"key_prefix", prefix}}, true);
}

// sql and pg_advisory on the tests' PostgreSQL: numbered permits.
BOOST_AUTO_TEST_CASE(run_with_a_limit_on_postgresql) {
    const auto dsn = locksmith::test::env("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_POSTGRES_DSN is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    BOOST_TEST_CONTEXT("sql") {
        run_with_a_limit_on("sql", {{"dsn", *dsn}, {"table", "locksmith_cli_permits"}}, true);
    }
    BOOST_TEST_CONTEXT("pg_advisory") {
        run_with_a_limit_on("pg_advisory", {{"dsn", *dsn}}, true);
    }
}

// mysql_get_lock on the tests' MariaDB: numbered permits, a user lock each.
BOOST_AUTO_TEST_CASE(run_with_a_limit_on_mysql_get_lock) {
    const auto dsn = locksmith::test::env("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_MARIADB_DSN is unset (scripts/services.sh start; eval "
            "\"$(scripts/services.sh env)\")");
        return;
    }
    run_with_a_limit_on("mysql_get_lock", {{"dsn", *dsn}}, true);
}

// shm and file count too: at most 3 of 6 runs at once, LOCKSMITH_PERMIT their permit's number,
// a second limit refused, status counting the permits. Each strategy pinned by the config.
BOOST_AUTO_TEST_CASE(local_strategies_count_too) {
    static std::atomic<int> counter{0};
    const std::string segment =
        "locksmith-cli-permits-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    for (const std::string strategy : {"shm", "file"}) {
        BOOST_TEST_CONTEXT("strategy " << strategy) {
            json config = {{"strategies",
                            {{"semaphore", {{"enabled", false}}},
                             {"shm", {{"options", {{"segment", segment}}}}}}}};
            config["strategies"][strategy == "file" ? "shm" : "file"] = {{"enabled", false}};
            cli_sandbox box(config);
            const std::string inside = box.path("inside");
            std::filesystem::create_directory(inside);
            const std::string script = "touch " + inside + "/$$; ls " + inside + " | wc -l >> " +
                                       box.path("counts") + "; sleep 0.4; rm " + inside + "/$$";
            std::vector<locksmith::test::cli_process> runs;
            for (int i = 0; i < 6; ++i)
                runs.push_back(
                    box.start(box.with_config("run", {"--limit", "3", "pool", "-c", script})));
            for (auto& p : runs) {
                auto r = box.wait(p);
                BOOST_TEST(r.exit_code == 0, describe(r));
            }
            std::istringstream counts(box.read_file("counts"));
            int most = 0, lines = 0;
            for (int n; counts >> n; ++lines) most = std::max(most, n);
            BOOST_TEST(lines == 6);
            BOOST_TEST(most <= 3);
            BOOST_TEST(most == 3);

            auto holder = box.start(box.with_config(
                "run", {"--limit", "2", "one", "-c", "touch " + box.path("ready") + "; sleep 60"}));
            BOOST_REQUIRE(wait_for_file(box.path("ready")));
            auto r =
                box.run(box.with_config("run", {"--limit", "2", "one", "--", "sh", "-c",
                                                "echo \"$LOCKSMITH_STRATEGY|$LOCKSMITH_PERMIT\""}));
            BOOST_TEST(r.out == strategy + "|2\n", describe(r));
            r = box.run(box.with_config("run", {"--limit", "3", "one", "--", "echo", "ran"}));
            BOOST_TEST(r.exit_code != 0, describe(r));
            BOOST_TEST(r.out.empty(), describe(r));
            BOOST_TEST(r.err.find("limit of 2") != std::string::npos, r.err);
            r = box.run(box.with_config("status", {"--require", "counting", "one"}));
            BOOST_TEST(r.exit_code == 0, describe(r));
            BOOST_TEST(
                r.out.find("1 of 2 permits held (strategy " + strategy + ")") != std::string::npos,
                r.out);
            ::kill(holder.pid, SIGKILL);  // its permit comes back with it
            box.wait(holder);
            r = box.run(box.with_config(
                "run", {"-n", "--limit", "2", "one", "--", "sh", "-c", "echo $LOCKSMITH_PERMIT"}));
            BOOST_TEST(r.out == "1\n", describe(r));
        }
    }
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
        if (e.path().filename().string().rfind(segment, 0) == 0) std::filesystem::remove(e.path());
}

BOOST_AUTO_TEST_SUITE_END()
