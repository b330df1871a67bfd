// SPDX-License-Identifier: MIT
// `combined` in the command (issue 23): members that do not exclude across processes are
// refused before two runs can both hold a name; a member that accepts connections and never
// answers holds up neither `run -n` nor `run -w`; a member that is down and never granted makes
// no release fail. Two members are the test redis servers (LOCKSMITH_TEST_REDIS_QUORUM); the
// silent one is a socket of the test that is listened on and never read.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "cli/cli_sandbox.hpp"
#include "support/skip_report.hpp"
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

// A server that accepts connections (the kernel completes them for the backlog) and never
// answers: nothing reads what the client sends.
class silent_server {
  public:
    silent_server() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        BOOST_REQUIRE(fd_ >= 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        BOOST_REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        BOOST_REQUIRE(::listen(fd_, 128) == 0);
        socklen_t len = sizeof a;
        BOOST_REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        port_ = ntohs(a.sin_port);
    }
    ~silent_server() { ::close(fd_); }
    silent_server(const silent_server&) = delete;
    silent_server& operator=(const silent_server&) = delete;
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }

  private:
    int fd_ = -1;
    int port_ = 0;
};

// The first two servers of LOCKSMITH_TEST_REDIS_QUORUM; skips (fails under CI) when unset.
std::optional<std::vector<std::string>> two_redis() {
    auto value = locksmith::test::env("LOCKSMITH_TEST_REDIS_QUORUM");
    std::vector<std::string> urls;
    if (value) {
        std::stringstream in(*value);
        for (std::string url; std::getline(in, url, ',');) urls.push_back(url);
    }
    if (urls.size() < 2) {
        locksmith::test::skip_case(
            "LOCKSMITH_TEST_REDIS_QUORUM does not name two servers (scripts/services.sh start; "
            "eval \"$(scripts/services.sh env)\")");
        return std::nullopt;
    }
    urls.resize(2);
    return urls;
}

json redis_member(const std::string& url) {
    return {{"strategy", "redis"},
            {"options",
             {{"url", url},
              {"key_prefix", "locksmith-cli-combined:" + std::to_string(::getpid()) + ":"}}}};
}

json combined_config(const json& members) {
    return {{"strategies",
             {{"combined", {{"options", {{"quorum", "consensus"}, {"members", members}}}}}}}};
}

std::string unique_name(const std::string& label) {
    return label + "-" + std::to_string(::getpid());
}

// A run that holds NAME until the file `done` exists, after creating `holding`.
std::vector<std::string> holding_run(cli_sandbox& box, const std::string& name,
                                     const std::string& holding, const std::string& done) {
    return box.with_config("run", {"--strategy", "combined", name, "-c",
                                   "touch '" + holding + "'; i=0; while [ ! -e '" + done +
                                       "' ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done"});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(combined_in_the_command)

// Members of `memory` (one process) or `null` (nothing) gave every run its vote: two runs both
// held the name, and with `null` members no warning said that locking was off.
BOOST_AUTO_TEST_CASE(members_that_do_not_exclude_across_processes_are_refused) {
    for (const char* local : {"memory", "null"}) {
        BOOST_TEST_CONTEXT("members of " << local) {
            json member = {{"strategy", local}};
            json cfg = combined_config({member, member, member});
            cfg["strategies"]["null"] = {{"enabled", true}};
            cfg["strategies"]["memory"] = {{"enabled", true}};
            cli_sandbox box(cfg);
            auto r = box.run({"config", "check", box.config_path().string()});
            BOOST_TEST(r.exit_code != 0, describe(r));
            BOOST_TEST(contains(r.out + r.err, "/strategies/combined/options/members/0/strategy"),
                       describe(r));
            BOOST_TEST(contains(r.out + r.err, "exclude"), describe(r));

            r = box.run(box.with_config("explain", {"--require", "exclusive,distributed"}));
            BOOST_TEST(r.exit_code == 78, describe(r));

            const std::string name = unique_name("local-members"), holding = box.path("holding"),
                              done = box.path("done"), second = box.path("second");
            auto first = box.start(holding_run(box, name, holding, done));
            const bool first_held = wait_for_file(holding, 3s);
            auto r2 = box.run(box.with_config(
                "run", {"-n", "--strategy", "combined", name, "--", "touch", second}));
            box.write_file("done", "");
            auto r1 = box.wait(first);
            BOOST_TEST(!(first_held && std::filesystem::exists(second)),
                       "two runs held the name: " << describe(r1) << " / " << describe(r2));
            BOOST_TEST(r1.exit_code == 78, describe(r1));
            BOOST_TEST(r2.exit_code == 78, describe(r2));
        }
    }
}

BOOST_AUTO_TEST_CASE(a_member_listed_twice_is_refused) {
    const std::string a = "redis://127.0.0.1:16999/0", b = "redis://127.0.0.1:16998/0";
    cli_sandbox box(combined_config({redis_member(a), redis_member(a), redis_member(b)}));
    auto r = box.run({"config", "check", box.config_path().string()});
    BOOST_TEST(r.exit_code != 0, describe(r));
    BOOST_TEST(contains(r.out + r.err, "/strategies/combined/options/members/1"), describe(r));
    BOOST_TEST(contains(r.out + r.err, "member 2 (redis) is member 1 (redis) again"), describe(r));
}

// Another database of one server is no second backend: `localhost` and 127.0.0.1 reach one
// redis-server, whose restart would take both votes.
BOOST_AUTO_TEST_CASE(two_members_on_one_server_are_refused) {
    cli_sandbox box(combined_config({redis_member("redis://localhost:16999/0"),
                                     redis_member("redis://127.0.0.1:16999/1"),
                                     redis_member("redis://127.0.0.1:16998/0")}));
    auto r = box.run({"config", "check", box.config_path().string()});
    BOOST_TEST(r.exit_code != 0, describe(r));
    BOOST_TEST(contains(r.out + r.err, "/strategies/combined/options/members/1"), describe(r));
    BOOST_TEST(
        contains(r.out + r.err, "member 2 (redis) and member 1 (redis) both use 127.0.0.1:16999"),
        describe(r));
}

// A member that accepts connections and never answers: the two others decide, at once, for
// `run -n`, for a second run that finds the name held, and for `run -w 1` (issue 23: 6 s and
// 10 s, and every run ended with exit 74).
BOOST_AUTO_TEST_CASE(a_member_that_never_answers_holds_up_no_run) {
    auto redis = two_redis();
    if (!redis) return;
    silent_server silent;
    cli_sandbox box(combined_config(
        {redis_member((*redis)[0]), redis_member((*redis)[1]), redis_member(silent.url())}));
    const std::string name = unique_name("silent-member");

    // Several runs: the silent member's request is still under way when each one ends its
    // command, and must not take the SIGCHLD that the run waits for.
    cli_result r;
    for (int i = 0; i < 5; ++i) {
        r = box.run(box.with_config("run", {"-n", "--strategy", "combined", name, "--", "true"}),
                    10s);
        BOOST_TEST(r.exit_code == 0, describe(r));
        BOOST_TEST(r.seconds < 1.5, describe(r));
    }

    const std::string holding = box.path("holding"), done = box.path("done");
    auto first = box.start(holding_run(box, name, holding, done));
    BOOST_REQUIRE(wait_for_file(holding, 5s));
    r = box.run(box.with_config("run", {"-n", "--strategy", "combined", name, "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    BOOST_TEST(r.seconds < 1.5, describe(r));
    r = box.run(box.with_config("run", {"-w", "1", "--strategy", "combined", name, "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    BOOST_TEST(r.seconds < 2.5, describe(r));
    box.write_file("done", "");
    r = box.wait(first);
    BOOST_TEST(r.exit_code == 0, describe(r));
}

// One member of three is down (nothing listens on its port): a majority grants and releases,
// and the run ends with the command's status, not with "the lock may still be held".
BOOST_AUTO_TEST_CASE(a_member_that_is_down_fails_no_release) {
    auto redis = two_redis();
    if (!redis) return;
    cli_sandbox box(combined_config({redis_member((*redis)[0]), redis_member((*redis)[1]),
                                     redis_member("redis://127.0.0.1:1/0")}));
    const std::string name = unique_name("down-member");
    for (int i = 0; i < 2; ++i) {
        auto r = box.run(box.with_config("run", {"--strategy", "combined", name, "--", "true"}));
        BOOST_TEST(r.exit_code == 0, describe(r));
        BOOST_TEST(!contains(r.err, "may still be held"), describe(r));
    }
    auto r = box.run(box.with_config("status", {"--strategy", "combined", name}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(contains(r.out, "free"), describe(r));
}

BOOST_AUTO_TEST_SUITE_END()
