// SPDX-License-Identifier: MIT
// `locksmith run` and `explain` against the selection rules of issue 11: one name, one mechanism
// (no silent fallback to another strategy), no in-process strategy for a command, `explain
// --start`; and the expiring-lock cases, on a real Redis server.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include <locksmith/strategies/sql.hpp>

#include "cli/cli_sandbox.hpp"
#include "support/skip_report.hpp"
#include "support/tcp_fault_proxy.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace std::chrono_literals;
using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::contains;
using locksmith::test::describe;
using locksmith::test::wait_for_file;
using nlohmann::json;

namespace {

// A port on 127.0.0.1 where nothing listens: connections are refused at once.
const char* const dead_redis = "redis://127.0.0.1:1/0";

// The test servers' endpoints (scripts/services.sh env). Unset: the case is skipped with the
// reason, or fails under CI=true, where the servers are part of the run.
std::optional<std::string> server(const char* variable) {
    auto value = locksmith::test::env(variable);
    if (!value) {
        locksmith::test::skip_case(std::string(variable) +
                                   " is unset (scripts/services.sh start; eval "
                                   "\"$(scripts/services.sh env)\")");
    }
    return value;
}

// A key prefix of this test process, so that parallel runs do not share names on a server.
std::string prefix() {
    return "locksmith-cli-test:" + std::to_string(::getpid()) + ":";
}

json redis_config(const std::string& url) {
    return json::parse(R"({"strategies": {"redis": {"options": {}}}})")
        .patch(
            json::array({{{"op", "add"}, {"path", "/strategies/redis/options/url"}, {"value", url}},
                         {{"op", "add"},
                          {"path", "/strategies/redis/options/key_prefix"},
                          {"value", prefix()}}}));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(selection)

// Point 6: `memory` excludes only inside one process; two runs would both hold the name.
BOOST_AUTO_TEST_CASE(run_refuses_an_in_process_strategy) {
    cli_sandbox box(json::parse(R"({"strategies": {"memory": {"enabled": true, "priority": 99}},
                                    "locks": {"pinned": {"strategy": "memory"}}})"));
    auto r = box.run(box.with_config("run", {"--strategy", "memory", "job", "--", "true"}));
    BOOST_TEST(r.exit_code == 64, describe(r));
    BOOST_TEST(contains(r.err, "inside one process"), r.err);
    r = box.run(box.with_config("run", {"pinned", "--", "true"}));  // a lock rule's pin
    BOOST_TEST(r.exit_code == 78, describe(r));
    r = box.run(box.with_config("run", {"chosen", "--", "true"}));  // selection (priority 99)
    BOOST_TEST(r.exit_code == 78, describe(r));
    BOOST_TEST(contains(r.err, "inside one process"), r.err);
}

// Point 6: a pin does not get past `enabled: false`.
BOOST_AUTO_TEST_CASE(run_refuses_a_pin_to_a_disabled_strategy) {
    cli_sandbox box(json::parse(R"({"strategies": {"simple": {"enabled": false}}})"));
    auto r = box.run(box.with_config("run", {"--strategy", "simple", "job", "--", "true"}));
    BOOST_TEST(r.exit_code == 69, describe(r));
    BOOST_TEST(contains(r.err, "disabled"), r.err);
}

// Point 1: explain no longer says "redis" while every run fails.
BOOST_AUTO_TEST_CASE(explain_start_says_the_winner_cannot_start) {
    cli_sandbox box(redis_config(dead_redis));
    auto r = box.run(box.with_config("explain", {"--require", "exclusive,distributed"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(contains(r.out, "'redis'"), r.out);
    r = box.run(box.with_config("explain", {"--require", "exclusive,distributed", "--start"}));
    BOOST_TEST(r.exit_code == 69, describe(r));
    BOOST_TEST(contains(r.out, "cannot start"), r.out);
    r = box.run(
        box.with_config("explain", {"--require", "exclusive,distributed", "--start", "--json"}));
    BOOST_TEST(r.exit_code == 69, describe(r));
    auto doc = json::parse(r.out);
    BOOST_TEST(doc.at("starts") == false);
    BOOST_TEST(doc.at("start_error").is_string());
}

// Point 1, as reproduced: A holds via redis; B cannot reach redis and used to fall back to
// memcached and hold the same name. Now B fails and says why and what to do, and runs nothing.
BOOST_AUTO_TEST_CASE(run_does_not_fall_back_to_another_remote_strategy) {
    auto memcached = server("LOCKSMITH_TEST_MEMCACHED");
    if (!memcached) return;
    json config = redis_config(dead_redis);
    config["strategies"]["memcached"]["options"] = {{"servers", *memcached},
                                                    {"key_prefix", prefix()}};
    cli_sandbox box(config);
    auto r = box.run(box.with_config("run", {"job", "--", "echo", "ran"}));
    BOOST_TEST(r.exit_code == 69, describe(r));
    BOOST_TEST(r.out.empty(), "the command ran without the lock: " + r.out);
    BOOST_TEST(contains(r.err, "'redis'"), r.err);
    BOOST_TEST(contains(r.err, "--strategy"), r.err);
    BOOST_TEST(contains(r.err, "fallback"), r.err);

    // Opted in: the fallback happens and is reported.
    config["defaults"]["fallback"] = true;
    cli_sandbox opted(config);
    r = opted.run(opted.with_config("run", {"job", "--", "echo", "ran"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out == "ran\n", describe(r));
    BOOST_TEST(contains(r.err, "falling back to strategy 'memcached'"), r.err);
}

// Expiring locks need a strategy that spans processes: a real Redis server.
BOOST_AUTO_TEST_CASE(expiring_lock_is_refreshed_while_the_child_runs) {
    auto url = server("LOCKSMITH_TEST_REDIS_URL");
    if (!url) return;
    cli_sandbox box(redis_config(*url));
    auto r = box.run(box.with_config(
        "run", {"-v", "--strategy", "redis", "--ttl", "0.3", "exp", "--", "sleep", "1"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(contains(r.err, "renewed lock 'exp' (redis)"), r.err);
}

BOOST_AUTO_TEST_CASE(lost_lock_terminates_the_child_with_a_distinct_code) {
    auto url = server("LOCKSMITH_TEST_REDIS_URL");
    if (!url) return;
    cli_sandbox box(redis_config(*url));
    std::string script = "trap 'echo term > " + box.path("got") + "; exit 0' TERM; touch " +
                         box.path("ready") + "; while :; do sleep 0.05; done";
    auto p = box.start(box.with_config(
        "run", {"--strategy", "redis", "--ttl", "0.3", "--kill-after", "1", "lost", "-c", script}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    // A stopped holder cannot refresh: when it resumes, its lease has run out on the server.
    ::kill(p.pid, SIGSTOP);
    std::this_thread::sleep_for(800ms);
    ::kill(p.pid, SIGCONT);
    auto r = box.wait(p, 10s);
    BOOST_TEST(r.exit_code == 75, describe(r));
    BOOST_TEST(box.read_file("got") == "term\n");
    BOOST_TEST(contains(r.err, "lost the lock lost"), r.err);
}

BOOST_AUTO_TEST_CASE(lost_lock_sigkills_a_child_that_ignores_sigterm) {
    auto url = server("LOCKSMITH_TEST_REDIS_URL");
    if (!url) return;
    cli_sandbox box(redis_config(*url));
    std::string script =
        "trap '' TERM; touch " + box.path("ready") + "; while :; do sleep 0.05; done";
    auto p = box.start(
        box.with_config("run", {"--strategy", "redis", "--ttl", "0.3", "--kill-after", "0.5",
                                "--lost-exit-code", "99", "stubborn", "-c", script}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    ::kill(p.pid, SIGSTOP);
    std::this_thread::sleep_for(800ms);
    ::kill(p.pid, SIGCONT);
    auto r = box.wait(p, 10s);
    BOOST_TEST(r.exit_code == 99, describe(r));
    BOOST_TEST(contains(r.err, "SIGKILL"), r.err);
}

// A fault proxy in front of the server of `address` (a URL, a DSN or HOST:PORT: its authority's
// last ":PORT"), and `address` with the proxy's port in its place.
struct proxied_server {
    explicit proxied_server(const std::string& address) {
        const auto scheme = address.find("://");
        const auto at = scheme == std::string::npos ? 0 : scheme + 3;
        const auto end = std::min(address.find('/', at), address.size());
        const auto user = address.rfind('@', end);
        const auto host = user == std::string::npos || user < at ? at : user + 1;
        const auto colon = address.rfind(':', end);
        BOOST_REQUIRE_MESSAGE(colon != std::string::npos && colon > host, "no port in " << address);
        proxy.emplace(address.substr(host, colon - host),
                      std::stoi(address.substr(colon + 1, end - colon - 1)));
        proxied =
            address.substr(0, colon + 1) + std::to_string(proxy->port()) + address.substr(end);
    }
    std::optional<locksmith::test::tcp_fault_proxy> proxy;
    std::string proxied;
};

// Issue 25: a run whose server connection stalls (a proxy that holds every byte, the command
// timeout far past the lease) stops its command at the lease's end and exits with the lost-lock
// code well before its command timeout (its lease, then at most release_retry, 10 s, of retried
// releases), before the server lets the name expire and grants it to
// a second run on the real server. The command marks its SIGTERM in a file (a shell builtin, no
// fork between the signal and the mark); the second run's command looks for that mark first
// thing. (The supervision refreshed the lock itself, stuck in that refresh for the command
// timeout while the second run's command ran.) `options(address)`: the strategy's options with
// the server at `address`; `timeout`: the option that bounds one request, in seconds.
void run_whose_server_stalls_stops_its_command_before_the_next_grant(
    const std::string& strategy, const std::string& address,
    const std::function<json(const std::string&)>& options, const std::string& timeout) {
    proxied_server stalled(address);
    json config, stalled_config;
    config["strategies"][strategy]["options"] = options(address);
    stalled_config["strategies"][strategy]["options"] = options(stalled.proxied);
    stalled_config["strategies"][strategy]["options"][timeout] = 40;
    cli_sandbox box(config);
    const auto stalled_file = box.write_file("stalled.json", stalled_config.dump());
    auto first =
        box.start({"run", "--config", stalled_file, "--strategy", strategy, "--ttl", "4",
                   "--kill-after", "30", "stuck", "-c",
                   "trap 'echo term > " + box.path("stopped") + "; kill $!; exit 0' TERM; touch " +
                       box.path("holding") + "; sleep 60 & wait"});
    BOOST_REQUIRE_MESSAGE(wait_for_file(box.path("holding")), strategy << ": the run never held");
    stalled.proxy->set_mode(locksmith::test::tcp_fault_proxy::mode::stall);
    const auto stalled_at = std::chrono::steady_clock::now();
    auto second = box.start(box.with_config(
        "run", {"-w", "60", "--strategy", strategy, "stuck", "-c",
                "if [ -e " + box.path("stopped") + " ]; then echo told > " + box.path("second") +
                    "; else echo untold > " + box.path("second") + "; fi"}));
    auto r = box.wait(first, 90s);
    const auto took = std::chrono::steady_clock::now() - stalled_at;
    BOOST_TEST_MESSAGE(
        strategy << ": the stalled run exited "
                 << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                 << " ms after the stall");
    BOOST_TEST(r.exit_code == 75, strategy << ": " << describe(r));
    BOOST_TEST(contains(r.err, "lost the lock stuck"), strategy << ": " << r.err);
    BOOST_TEST(box.read_file("stopped") == "term\n", strategy);
    // The lease (4 s), the release's retries (10 s) and a margin for a loaded machine; the command
    // timeout is 40 s.
    BOOST_TEST(took < 25s, strategy << ": the stalled run stayed past its lease");
    auto next = box.wait(second, 90s);
    BOOST_TEST(next.exit_code == 0, strategy << ": " << describe(next));
    BOOST_TEST(box.read_file("second") == "told\n", strategy);
}

BOOST_AUTO_TEST_CASE(run_whose_renewal_is_stuck_stops_its_command_before_the_next_grant) {
    auto url = server("LOCKSMITH_TEST_REDIS_URL");
    if (!url) return;
    run_whose_server_stalls_stops_its_command_before_the_next_grant(
        "redis", *url,
        [](const std::string& at) { return redis_config(at)["strategies"]["redis"]["options"]; },
        "command_timeout_s");
}

BOOST_AUTO_TEST_CASE(run_on_memcached_whose_server_stalls_stops_its_command_before_the_next_grant) {
    auto servers = server("LOCKSMITH_TEST_MEMCACHED");
    if (!servers) return;
    run_whose_server_stalls_stops_its_command_before_the_next_grant(
        "memcached", *servers,
        [](const std::string& at) {
            return json{{"servers", at}, {"key_prefix", prefix()}};
        },
        "command_timeout_s");
}

BOOST_AUTO_TEST_CASE(run_on_etcd_whose_server_stalls_stops_its_command_before_the_next_grant) {
    auto endpoints = server("LOCKSMITH_TEST_ETCD");
    if (!endpoints) return;
    run_whose_server_stalls_stops_its_command_before_the_next_grant(
        "etcd", *endpoints,
        [](const std::string& at) {
            return json{{"endpoints", at}, {"prefix", prefix()}};
        },
        "request_timeout_s");
}

BOOST_AUTO_TEST_CASE(
    run_on_sql_postgres_whose_server_stalls_stops_its_command_before_the_next_grant) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return;
    run_whose_server_stalls_stops_its_command_before_the_next_grant(
        "sql", *dsn,
        [](const std::string& at) {
            return json{{"dsn", at}, {"table", "locksmith_cli_stall"}};
        },
        "command_timeout_s");
}

BOOST_AUTO_TEST_CASE(
    run_on_sql_mariadb_whose_server_stalls_stops_its_command_before_the_next_grant) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    run_whose_server_stalls_stops_its_command_before_the_next_grant(
        "sql", *dsn,
        [](const std::string& at) {
            return json{{"dsn", at}, {"table", "locksmith_cli_stall"}};
        },
        "command_timeout_s");
}

// The remote strategies of issues 13 and 14 under the command: a run holds the name, a second
// run with -n is refused while it does, the command returns when its child exits (client
// threads must not take the SIGCHLD that `run` waits for), and the name is free afterwards.
void run_holds_and_excludes(const std::string& strategy, const json& options) {
    json config;
    config["strategies"][strategy]["options"] = options;
    cli_sandbox box(config);
    auto first =
        box.start(box.with_config("run", {"--strategy", strategy, "remote-job", "-c",
                                          "touch " + box.path("holding") + "; while [ ! -e " +
                                              box.path("done") + " ]; do sleep 0.02; done"}));
    BOOST_REQUIRE_MESSAGE(wait_for_file(box.path("holding")), strategy << ": the run never held");
    auto second =
        box.run(box.with_config("run", {"-n", "--strategy", strategy, "remote-job", "--", "true"}));
    BOOST_TEST(second.exit_code == 1, strategy << ": " << describe(second));
    box.write_file("done", "");
    auto r = box.wait(first, 20s);
    BOOST_TEST(r.exit_code == 0, strategy << ": " << describe(r));
    auto third =
        box.run(box.with_config("run", {"-n", "--strategy", strategy, "remote-job", "--", "true"}));
    BOOST_TEST(third.exit_code == 0, strategy << ": " << describe(third));
}

BOOST_AUTO_TEST_CASE(run_on_zookeeper_holds_excludes_and_returns) {
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) return;
    run_holds_and_excludes("zookeeper", {{"hosts", *hosts}, {"root", "/" + prefix()}});
}

BOOST_AUTO_TEST_CASE(status_on_zookeeper_names_the_holding_run) {
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) return;
    json config;
    config["strategies"]["zookeeper"]["options"] = {{"hosts", *hosts}, {"root", "/" + prefix()}};
    cli_sandbox box(config);
    auto holder =
        box.start(box.with_config("run", {"--strategy", "zookeeper", "status-job", "-c",
                                          "touch " + box.path("holding") + "; while [ ! -e " +
                                              box.path("done") + " ]; do sleep 0.02; done"}));
    BOOST_REQUIRE(wait_for_file(box.path("holding")));
    auto r = box.run(box.with_config("status", {"--strategy", "zookeeper", "status-job"}));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    BOOST_TEST(r.exit_code == 1, describe(r));
    BOOST_TEST(contains(r.out, "holder: pid " + std::to_string(holder.pid) + " on host " + host +
                                   " since "),
               r.out);
    box.write_file("done", "");
    BOOST_TEST(box.wait(holder, 20s).exit_code == 0);
}

BOOST_AUTO_TEST_CASE(run_on_etcd_holds_excludes_and_returns) {
    auto endpoints = server("LOCKSMITH_TEST_ETCD");
    if (!endpoints) return;
    run_holds_and_excludes("etcd", {{"endpoints", *endpoints}, {"prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(run_on_pg_advisory_holds_excludes_and_returns) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return;
    run_holds_and_excludes("pg_advisory", {{"dsn", *dsn}});
}

// Issue 23, point 2: a lock whose backend ends the grant while the command runs is acted on as
// an expired lease is, when the backend's notice arrives: SIGTERM to the command, the lost-lock
// code, and the command does not go on beside the next holder (a second run waits for the name
// meanwhile). `take_away` ends the first run's grant (given its pid) and returns an instant
// before the first run could know, in ns since the epoch. How fast the command was stopped is
// printed (the command's trap runs between its sleeps of 20 ms), and bounded only by the wait:
// the command would run 30 s.
void lost_while_held(const std::string& strategy, const json& options,
                     const std::function<std::int64_t(pid_t, cli_sandbox&)>& take_away,
                     const std::function<void()>& held_everywhere = {}) {
    json config;
    config["strategies"][strategy]["options"] = options;
    cli_sandbox box(config);
    const std::string command = "trap 'date +%s%N > " + box.path("stopped") +
                                "; exit 0' TERM; touch " + box.path("holding") +
                                "; i=0; while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; "
                                "touch " +
                                box.path("ran-to-its-end");
    auto first = box.start(box.with_config(
        "run", {"-v", "--strategy", strategy, "--kill-after", "2", "taken-away", "-c", command}));
    BOOST_REQUIRE_MESSAGE(wait_for_file(box.path("holding")), strategy << ": the run never held");
    if (held_everywhere) held_everywhere();
    auto second =
        box.start(box.with_config("run", {"-w", "60", "--strategy", strategy, "taken-away", "-c",
                                          "date +%s%N > " + box.path("second")}));
    const auto known_at = take_away(first.pid, box);
    auto r = box.wait(first, 10s);
    BOOST_TEST(r.exit_code == 75, strategy << ": " << describe(r));
    BOOST_TEST(contains(r.err, "lost the lock taken-away: "), r.err);
    BOOST_TEST(!std::filesystem::exists(box.path("ran-to-its-end")));
    auto next = box.wait(second, 30s);
    BOOST_TEST(next.exit_code == 0, strategy << ": " << describe(next));
    const auto stopped = std::stoll("0" + box.read_file("stopped"));
    const auto granted = std::stoll("0" + box.read_file("second"));
    BOOST_REQUIRE(stopped > 0);
    BOOST_TEST_MESSAGE(strategy << ": the command ended " << (stopped - known_at) / 1e6
                                << " ms after its grant was taken away, "
                                << (stopped - granted) / 1e6
                                << " ms after the second run's command started");
}

std::int64_t epoch_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// What `command` prints, stdout and stderr.
std::string shell_output(const std::string& command) {
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    BOOST_REQUIRE(p);
    std::string out;
    char buffer[256];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) out.append(buffer, n);
    ::pclose(p);
    return out;
}

std::string psql(const std::string& dsn, const std::string& sql) {
    return shell_output("psql '" + dsn + "' -Atc \"" + sql + "\"");
}

std::string mariadb(const locksmith::strategies::sql_dsn& d, const std::string& sql) {
    return shell_output("mariadb --no-defaults --protocol=tcp -h " + d.host + " -P " +
                        std::to_string(d.port) + " -u " + d.user + " -p'" + d.password +
                        "' -N -e \"" + sql + "\"");
}

// The granted advisory-lock sessions of `application` (its runs' sessions carry that name, so
// that only they are looked at; waiting sessions are not granted), as `what` of them.
std::string holding_sessions(const std::string& application, const std::string& what) {
    return "SELECT " + what +
           " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = "
           "'advisory' AND l.granted AND a.application_name = '" +
           application + "'";
}

// Ends the holding sessions of `application` from a third connection (psql, whose start counts
// in the time returned), and checks that `sessions` were ended.
std::int64_t end_holding_sessions(const std::string& dsn, const std::string& application,
                                  int sessions) {
    const auto at = epoch_ns();
    const auto out = psql(dsn, holding_sessions(application, "count(pg_terminate_backend(l.pid))"));
    BOOST_REQUIRE_MESSAGE(out == std::to_string(sessions) + "\n", "psql: " << out);
    return at;
}

// KILL CONNECTION of the MariaDB session that holds 'taken-away' (IS_USED_LOCK names it; a
// waiting session holds nothing), from the mariadb client, whose start counts in the time.
std::int64_t kill_holding_session(const locksmith::strategies::sql_dsn& d) {
    const auto at = epoch_ns();
    const auto out = mariadb(d,
                             "SELECT IS_USED_LOCK('locksmith:taken-away') INTO @id; KILL "
                             "CONNECTION @id; SELECT @id IS NOT NULL");
    BOOST_REQUIRE_MESSAGE(out == "1\n", "mariadb: " << out);
    return at;
}

// Waits (10 s at most) until `query` answers "1": a combined lock is granted as soon as a quorum
// of its members is, and the others grant a moment later.
void wait_for_one(const std::function<std::string()>& query, const std::string& what) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    std::string out;
    while ((out = query()) != "1\n" && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(20ms);
    BOOST_REQUIRE_MESSAGE(out == "1\n", what << " never held: " << out);
}

std::string with_application(const std::string& dsn, const std::string& application) {
    return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") +
           "application_name=" + application;
}

BOOST_AUTO_TEST_CASE(run_on_pg_advisory_stops_the_command_when_the_server_ends_the_session) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return;
    const auto application = "locksmith-cli-lost-" + std::to_string(::getpid());
    lost_while_held(
        "pg_advisory", {{"dsn", with_application(*dsn, application)}},
        [&](pid_t, cli_sandbox&) { return end_holding_sessions(*dsn, application, 1); });
}

// combined passes its members' notices on (issue 23): two of three members lose their sessions,
// the quorum is lost, and the command is stopped at once, not at its end: the server ends the
// PostgreSQL member's session and the MariaDB member's.
BOOST_AUTO_TEST_CASE(run_on_combined_stops_the_command_when_members_sessions_end) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    auto mariadb_dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!dsn || !mariadb_dsn || !hosts) return;
    const auto application = "locksmith-cli-combined-" + std::to_string(::getpid());
    const json members = json::array(
        {{{"strategy", "pg_advisory"}, {"options", {{"dsn", with_application(*dsn, application)}}}},
         {{"strategy", "mysql_get_lock"}, {"options", {{"dsn", *mariadb_dsn}}}},
         {{"strategy", "zookeeper"},
          {"options", {{"hosts", *hosts}, {"root", "/" + prefix() + "combined"}}}}});
    const auto d = locksmith::strategies::parse_sql_dsn(*mariadb_dsn);
    lost_while_held(
        "combined", {{"quorum", "consensus"}, {"members", members}},
        [&](pid_t, cli_sandbox&) {
            const auto at = end_holding_sessions(*dsn, application, 1);
            kill_holding_session(d);
            return at;
        },
        // Before the second run starts: else its member could take a session member's lock
        // that the first run's late request had not got yet, and the sessions ended would be
        // the wrong ones.
        [&] {
            wait_for_one([&] { return psql(*dsn, holding_sessions(application, "count(*)")); },
                         "the PostgreSQL member");
            wait_for_one(
                [&] {
                    return mariadb(d, "SELECT IS_USED_LOCK('locksmith:taken-away') IS NOT NULL");
                },
                "the MariaDB member");
        });
}

BOOST_AUTO_TEST_CASE(run_on_mysql_get_lock_holds_excludes_and_returns) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    run_holds_and_excludes("mysql_get_lock", {{"dsn", *dsn}});
}

// KILL CONNECTION of the holding session (the one IS_USED_LOCK names; the second run's session
// waits in GET_LOCK and holds nothing), from the mariadb client, whose start counts in the time
// printed.
BOOST_AUTO_TEST_CASE(run_on_mysql_get_lock_stops_the_command_when_the_server_kills_the_session) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    const auto d = locksmith::strategies::parse_sql_dsn(*dsn);
    lost_while_held("mysql_get_lock", {{"dsn", *dsn}},
                    [&](pid_t, cli_sandbox&) { return kill_holding_session(d); });
}

BOOST_AUTO_TEST_CASE(run_on_zookeeper_stops_the_command_when_its_session_expired) {
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) return;
    // 1 s: the server's minimum (services.sh: ticks of 500 ms).
    lost_while_held("zookeeper",
                    {{"hosts", *hosts}, {"root", "/" + prefix()}, {"session_timeout_ms", 1000}},
                    [&](pid_t holder, cli_sandbox& box) {
                        // A stopped holder's session expires, and the second run gets the name.
                        // Its command runs on meanwhile: nothing can stop it while locksmith
                        // sleeps. Once resumed, locksmith must act at once.
                        ::kill(holder, SIGSTOP);
                        BOOST_TEST(wait_for_file(box.path("second"), 30s));
                        const auto at = epoch_ns();
                        ::kill(holder, SIGCONT);
                        return at;
                    });
}

BOOST_AUTO_TEST_CASE(run_on_sql_holds_excludes_and_returns) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    run_holds_and_excludes("sql", {{"dsn", *dsn}, {"table", "locksmith_cli_test_keys"}});
}

BOOST_AUTO_TEST_SUITE_END()
