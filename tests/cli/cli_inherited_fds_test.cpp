// SPDX-License-Identifier: MIT
// What `locksmith run`'s command inherits: exactly the descriptors locksmith was given (0, 1, 2
// and what the caller passed, here a file as fd 3), and none locksmith opened for the lock — its
// lock file, a server's socket, a client library's pipes. A command that kept a session's socket
// would keep the session, and the lock, after locksmith was killed, and could write into it. Run
// on every strategy (the servers of scripts/services.sh), and for the session strategies with
// locksmith SIGKILLed while a command that ignores SIGTERM runs on: the lock is free at once.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <csignal>
#include <map>
#include <sstream>

#include "cli/cli_sandbox.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"
#include "support/test_paths.hpp"

using namespace std::chrono_literals;
using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using locksmith::test::wait_for_file;
using nlohmann::json;

namespace {

// The endpoint in `variable`; nullopt after skip_case() (a failure under CI) when it is unset.
std::optional<std::string> server(const char* variable) {
    auto value = locksmith::test::env(variable);
    if (!value)
        locksmith::test::skip_case(std::string(variable) +
                                   " is unset (scripts/services.sh start; eval "
                                   "\"$(scripts/services.sh env)\")");
    return value;
}

// Splits "a,b,c".
json list_of(const std::string& text) {
    json list = json::array();
    std::istringstream in(text);
    for (std::string s; std::getline(in, s, ',');) list.push_back(s);
    return list;
}

std::string prefix() {
    return "locksmith-cli-fds:" + std::to_string(::getpid()) + ":";
}

// The command: a shell that lists its own descriptors (through ls, a child: a glob in the shell
// would open the folder as a descriptor of its own).
const std::string list_fds = "ls -l /proc/$$/fd";

// fd -> target, from ls -l's "... <fd> -> <target>" lines.
std::map<int, std::string> parse_fds(const std::string& out) {
    std::map<int, std::string> fds;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        const auto arrow = line.find(" -> ");
        if (arrow == std::string::npos) continue;
        const auto space = line.rfind(' ', arrow - 1);
        fds[std::stoi(line.substr(space + 1, arrow - space - 1))] = line.substr(arrow + 4);
    }
    return fds;
}

// Whether this build of the command has `strategy` (else the case is skipped, saying so).
bool built(const std::string& strategy) {
    cli_sandbox box;
    const auto r = box.run({"--version"});
    std::istringstream words(r.out);
    for (std::string word; words >> word;)
        if (word == strategy) return true;
    locksmith::test::skip_case(strategy + " is not built here");
    return false;
}

// Runs the listing under `strategy` with `options` (and more `config`), fd 3 passed by the
// caller.
void command_gets_only_what_was_passed(const std::string& strategy, const json& options,
                                       json config = json::object()) {
    if (config.empty() && !built(strategy)) return;
    if (!options.empty()) config["strategies"][strategy]["options"] = options;
    cli_sandbox box(config);
    const auto passed = box.write_file("passed", "");
    box.pass_fd(3, passed);
    const auto r = box.run_with_config("run", {"--strategy", strategy, "fds", "-c", list_fds});
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, strategy << ": " << describe(r));
    const auto fds = parse_fds(r.out);
    std::string listed;
    for (const auto& [fd, what] : fds) listed += " " + std::to_string(fd) + "=" + what;
    BOOST_TEST(fds.size() == 4u, strategy << ": the command got" << listed);
    BOOST_TEST((fds.count(0) && fds.count(1) && fds.count(2)), strategy << ":" << listed);
    BOOST_TEST(fds.count(3) == 1u, strategy << ": the caller's fd 3 did not pass:" << listed);
    if (fds.count(3)) BOOST_TEST(fds.at(3) == passed, strategy << ":" << listed);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(inherited_fds)

BOOST_AUTO_TEST_CASE(file_passes_only_the_callers_descriptors) {
    command_gets_only_what_was_passed("file", json::object());
}

BOOST_AUTO_TEST_CASE(simple_passes_only_the_callers_descriptors) {
    cli_sandbox dir;
    command_gets_only_what_was_passed("simple", {{"lock_dir", dir.path("simple")}});
}

BOOST_AUTO_TEST_CASE(semaphore_passes_only_the_callers_descriptors) {
    command_gets_only_what_was_passed("semaphore", json::object());
}

BOOST_AUTO_TEST_CASE(shm_passes_only_the_callers_descriptors) {
    command_gets_only_what_was_passed(
        "shm", {{"segment", "locksmith-cli-fds-" + std::to_string(::getpid())}});
}

BOOST_AUTO_TEST_CASE(sql_on_sqlite_passes_only_the_callers_descriptors) {
    cli_sandbox dir;
    command_gets_only_what_was_passed("sql", {{"dsn", "sqlite://" + dir.path("locks.db")}});
}

BOOST_AUTO_TEST_CASE(redis_passes_only_the_callers_descriptors) {
    auto url = server("LOCKSMITH_TEST_REDIS_URL");
    if (!url) return;
    command_gets_only_what_was_passed("redis", {{"url", *url}, {"key_prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(redis_sentinel_passes_only_the_callers_descriptors) {
    auto sentinels = server("LOCKSMITH_TEST_REDIS_SENTINELS");
    if (!sentinels) return;
    const auto master = locksmith::test::env("LOCKSMITH_TEST_REDIS_SENTINEL_MASTER");
    const auto password = locksmith::test::env("LOCKSMITH_TEST_REDIS_SENTINEL_PASSWORD");
    command_gets_only_what_was_passed("redis", {{"sentinels", list_of(*sentinels)},
                                                {"master_name", master.value_or("")},
                                                {"sentinel_password", password.value_or("")},
                                                {"password", password.value_or("")},
                                                {"key_prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(redis_cluster_passes_only_the_callers_descriptors) {
    auto nodes = server("LOCKSMITH_TEST_REDIS_CLUSTER");
    if (!nodes) return;
    const auto password = locksmith::test::env("LOCKSMITH_TEST_REDIS_CLUSTER_PASSWORD");
    command_gets_only_what_was_passed("redis", {{"cluster", list_of(*nodes)},
                                                {"password", password.value_or("")},
                                                {"key_prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(memcached_passes_only_the_callers_descriptors) {
    auto servers = server("LOCKSMITH_TEST_MEMCACHED");
    if (!servers) return;
    command_gets_only_what_was_passed("memcached",
                                      {{"servers", *servers}, {"key_prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(pg_advisory_passes_only_the_callers_descriptors) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return;
    command_gets_only_what_was_passed("pg_advisory", {{"dsn", *dsn}});
}

BOOST_AUTO_TEST_CASE(mysql_get_lock_passes_only_the_callers_descriptors) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    command_gets_only_what_was_passed("mysql_get_lock", {{"dsn", *dsn}});
}

BOOST_AUTO_TEST_CASE(sql_on_postgresql_and_mariadb_passes_only_the_callers_descriptors) {
    auto pg = server("LOCKSMITH_TEST_POSTGRES_DSN");
    auto maria = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!pg || !maria) return;
    command_gets_only_what_was_passed("sql", {{"dsn", *pg}, {"table", "locksmith_cli_fds_keys"}});
    command_gets_only_what_was_passed("sql",
                                      {{"dsn", *maria}, {"table", "locksmith_cli_fds_keys"}});
}

BOOST_AUTO_TEST_CASE(etcd_passes_only_the_callers_descriptors) {
    auto endpoints = server("LOCKSMITH_TEST_ETCD");
    if (!endpoints) return;
    command_gets_only_what_was_passed("etcd", {{"endpoints", *endpoints}, {"prefix", prefix()}});
}

BOOST_AUTO_TEST_CASE(zookeeper_passes_only_the_callers_descriptors) {
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) return;
    command_gets_only_what_was_passed("zookeeper", {{"hosts", *hosts}, {"root", "/" + prefix()}});
}

BOOST_AUTO_TEST_CASE(combined_passes_only_the_callers_descriptors) {
    auto pg = server("LOCKSMITH_TEST_POSTGRES_DSN");
    auto maria = server("LOCKSMITH_TEST_MARIADB_DSN");
    auto hosts = server("LOCKSMITH_TEST_ZOOKEEPER");
    if (!pg || !maria || !hosts) return;
    const json members = json::array(
        {{{"strategy", "pg_advisory"}, {"options", {{"dsn", *pg}}}},
         {{"strategy", "mysql_get_lock"}, {"options", {{"dsn", *maria}}}},
         {{"strategy", "zookeeper"}, {"options", {{"hosts", *hosts}, {"root", "/" + prefix()}}}}});
    command_gets_only_what_was_passed("combined", {{"quorum", "consensus"}, {"members", members}});
}

// OpenSSL and libpq open certificates, keys, CA bundles, ~/.pgpass and service files without
// O_CLOEXEC while they connect (strace: openat(..., O_RDONLY)), on whichever thread connects,
// and give no way to mark them. A command that `run` forks meanwhile must not get them: the
// child closes every descriptor locksmith was not given, whatever its flags. Here a plugin's
// thread keeps a file open through OpenSSL and loads a CA file again and again, from before the
// lock is taken until locksmith exits; each run's command lists what it got.
BOOST_AUTO_TEST_CASE(files_openssl_opens_in_another_thread_do_not_pass) {
    const auto plugin =
        locksmith::test::build_path("tests/cli/plugins/libopenssl_in_another_thread_plugin.so");
    const std::string bundle = "/etc/ssl/certs/ca-certificates.crt";
    const std::string file = ::access(bundle.c_str(), R_OK) == 0 ? bundle : plugin;
    for (int i = 0; i < 10; ++i) {
        cli_sandbox box;
        command_gets_only_what_was_passed("openssl_in_another_thread",
                                          {{"lock_dir", box.lock_dir().string()}, {"file", file}},
                                          {{"plugins", {plugin}}});
    }
}

// Found with the case above: a thread that does not block signals (a plugin's, or a client
// library's) is where the kernel sends SIGCHLD, since locksmith's own threads block it; ignored
// there by default, it never reached run's signalfd, and run waited forever for a command that
// had ended — holding the lock.
BOOST_AUTO_TEST_CASE(a_thread_that_blocks_no_signal_does_not_keep_run_waiting) {
    const auto plugin =
        locksmith::test::build_path("tests/cli/plugins/libopenssl_in_another_thread_plugin.so");
    cli_sandbox box;
    const json config{
        {"plugins", {plugin}},
        {"strategies",
         {{"openssl_in_another_thread",
           {{"options", {{"lock_dir", box.lock_dir().string()}, {"file", plugin}}}}}}}};
    const auto path = box.write_file("plugin.json", config.dump());
    // The signal goes to the plugin's thread about one time in three (the other times the
    // signalfd's reader dequeues it first): 20 runs hung at least once in every try.
    for (int i = 0; i < 20; ++i) {
        const auto r = box.run({"run", "--config", path, "--strategy", "openssl_in_another_thread",
                                "waited", "-c", "sleep 0.05; exit 7"},
                               5s);
        BOOST_REQUIRE_MESSAGE(r.exit_code == 7, describe(r));
    }
}

// A standard descriptor the caller closed stays closed for the command: the socket locksmith
// opens does not take its number (and locksmith's own messages do not go to the server through
// it). The inner run is started with its stdin closed by the outer run's shell.
BOOST_AUTO_TEST_CASE(a_closed_standard_descriptor_stays_closed) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn || !built("pg_advisory")) return;
    cli_sandbox box(json{{"strategies", {{"pg_advisory", {{"options", {{"dsn", *dsn}}}}}}}});
    const auto inner = locksmith::test::cli_binary() + " run --config " +
                       box.config_path().string() + " --strategy pg_advisory inner -c '" +
                       list_fds + "'";
    const auto r = box.run_with_config("run", {"outer", "-c", "exec " + inner + " 0<&-"});
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    const auto fds = parse_fds(r.out);
    std::string listed;
    for (const auto& [fd, what] : fds) listed += " " + std::to_string(fd) + "=" + what;
    BOOST_TEST(fds.size() == 2u, "the command got" << listed);
    BOOST_TEST(fds.count(0) == 0u, "the command got" << listed);
}

// locksmith SIGKILLed while its command runs on (the command ignores the SIGTERM the kernel
// sends it then): the server sees locksmith's socket close and ends the session, so another run
// gets the name at once, while the first command still runs. A command that had inherited the
// socket would keep the session, and the lock, until it ended.
void a_killed_run_frees_a_session_lock(const std::string& strategy, const json& options) {
    if (!built(strategy)) return;
    cli_sandbox box(json{{"strategies", {{strategy, {{"options", options}}}}}});
    const auto command = "trap '' TERM; echo $$ > " + box.path("pid") + "; touch " +
                         box.path("holding") + "; while [ ! -e " + box.path("done") +
                         " ]; do sleep 0.02; done";
    auto first =
        box.start(box.with_config("run", {"--strategy", strategy, "killed", "-c", command}));
    BOOST_REQUIRE_MESSAGE(wait_for_file(box.path("holding")), strategy << ": the run never held");
    ::kill(first.pid, SIGKILL);
    box.wait(first);
    const auto second = box.run_with_config(
        "run", {"-w", "10", "--strategy", strategy, "killed", "-c",
                "kill -0 $(cat " + box.path("pid") + ") && touch " + box.path("alongside")});
    box.write_file("done", "");
    BOOST_TEST(second.exit_code == 0, strategy << ": " << describe(second));
    BOOST_TEST(wait_for_file(box.path("alongside"), 1s),
               strategy << ": the first command had ended before the second run held");
    BOOST_TEST_MESSAGE(strategy << ": the second run held and ended " << second.seconds
                                << " s after the first was killed");
}

BOOST_AUTO_TEST_CASE(a_killed_run_frees_a_pg_advisory_lock_while_its_command_runs_on) {
    auto dsn = server("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return;
    a_killed_run_frees_a_session_lock("pg_advisory", {{"dsn", *dsn}});
}

BOOST_AUTO_TEST_CASE(a_killed_run_frees_a_mysql_get_lock_lock_while_its_command_runs_on) {
    auto dsn = server("LOCKSMITH_TEST_MARIADB_DSN");
    if (!dsn) return;
    a_killed_run_frees_a_session_lock("mysql_get_lock", {{"dsn", *dsn}});
}

BOOST_AUTO_TEST_SUITE_END()
