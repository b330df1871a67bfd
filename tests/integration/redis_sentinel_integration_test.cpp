// SPDX-License-Identifier: MIT
// The redis strategy behind Redis Sentinel (issue 24): discovery, a dead or refusing Sentinel,
// WAIT, and locks held through `SENTINEL FAILOVER`. The failover cases run on a rig of this
// test's own (scripts/services.sh redis-sentinel on free ports: a master, a replica, three
// Sentinels), so that the shared rig other suites use never changes master under them; the
// cases about what a server says run against fakes (tests/support/hostile_server.hpp).
#define BOOST_TEST_MODULE redis_sentinel_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/redis.hpp>

#include <hiredis/hiredis.h>

#include "integration/integration_support.hpp"
#include "support/hostile_server.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using test::fake_redis;
using test::fake_sha;

namespace {

const std::string master_name = "locksmith-test";
const std::string password = "locktest-sentinel-pw";  // scripts/services.sh's, for the rig
const std::string prefix = "locksmith-sentinel-it:" + std::to_string(::getpid()) + ":";
const auto must_happen = test::patience(60s);  // safety net only
// How long a rig may take to settle: not cut by the mutation check's patience, since the
// Sentinels learn of a (re)started replica only at their next INFO, up to 10 s apart.
const auto rig_settles = 60s;

// One command on a server of the rig, as the test's own client: the reply as text (a status,
// string or integer; an array's elements joined by spaces; an error as "ERR ...").
std::string ask(int port, const std::vector<std::string>& args) {
    const timeval tv{2, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == nullptr || c->err) {
        if (c) redisFree(c);
        return "(no connection)";
    }
    redisSetTimeout(c, tv);
    std::string out = "(no reply)";
    auto* auth = static_cast<redisReply*>(redisCommand(c, "AUTH %s", password.c_str()));
    if (auth) freeReplyObject(auth);
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto* r =
        static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
    if (r) {
        auto text = [](const redisReply* e) -> std::string {
            if (e->type == REDIS_REPLY_INTEGER) return std::to_string(e->integer);
            if (e->str) return std::string(e->str, e->len);
            return "";
        };
        if (r->type == REDIS_REPLY_ARRAY) {
            out.clear();
            for (std::size_t i = 0; i < r->elements; ++i)
                out += (i ? " " : "") + text(r->element[i]);
        } else {
            out = text(r);
        }
        freeReplyObject(r);
    }
    redisFree(c);
    return out;
}

// A Sentinel rig of this test's own: ports base (master at start), base + 1 (replica),
// base + 2..4 (Sentinels). With `tls`, every one of them speaks only TLS and wants a client
// certificate (services.sh's LOCKSMITH_REDIS_SENTINEL_TLS); the rig is then asked through
// redis-cli, since hiredis 0.14 has no TLS.
class private_rig {
  public:
    explicit private_rig(bool tls = false)
        : dir_("/tmp/locksmith-sentinel-rig-" + std::string(tls ? "tls-" : "") +
               std::to_string(::getpid())),
          tls_(tls) {
        for (int attempt = 0; attempt < 5; ++attempt) {
            base_ = test::free_ports(5);
            if (run("start") == 0) return;
            run("stop");
        }
        BOOST_FAIL("could not start a Sentinel rig (see " << dir_ << ".log)");
    }
    ~private_rig() {
        run("stop");
        std::system(("rm -rf '" + dir_ + "' '" + dir_ + ".log'").c_str());
    }
    private_rig(const private_rig&) = delete;
    private_rig& operator=(const private_rig&) = delete;

    std::string tls_dir() const { return dir_ + "/tls"; }
    // ask() above, over TLS when the rig speaks it.
    std::string ask(int port, const std::vector<std::string>& args) const {
        if (!tls_) return ::ask(port, args);
        std::string cmd = "redis-cli --tls --cacert '" + tls_dir() + "/ca.pem' --cert '" +
                          tls_dir() + "/client.pem' --key '" + tls_dir() +
                          "/client.key' --no-auth-warning -a " + password + " -p " +
                          std::to_string(port);
        for (const auto& a : args) cmd += " '" + a + "'";
        std::string out;
        if (FILE* f = ::popen((cmd + " 2>/dev/null").c_str(), "r")) {
            char line[4096];
            while (std::fgets(line, sizeof line, f)) {
                std::string l(line);
                while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
                out += (out.empty() ? "" : " ") + l;
            }
            ::pclose(f);
        }
        return out;
    }
    int sentinel_port(int i) const { return base_ + 2 + i; }
    std::vector<std::string> sentinels() const {
        return {"127.0.0.1:" + std::to_string(sentinel_port(0)),
                "127.0.0.1:" + std::to_string(sentinel_port(1)),
                "127.0.0.1:" + std::to_string(sentinel_port(2))};
    }
    // The master's port as Sentinel `i` names it, or 0.
    int named_master(int i = 0) const {
        const auto reply =
            ask(sentinel_port(i), {"SENTINEL", "get-master-addr-by-name", master_name});
        const auto space = reply.find(' ');
        return space == std::string::npos ? 0 : std::atoi(reply.c_str() + space + 1);
    }
    int replica_of(int master) const { return master == base_ ? base_ + 1 : base_; }
    // True when every Sentinel names one master, whose ROLE says master, and which has the
    // other server as an online replica done with its sync: a failover may start from here, and
    // nothing of an earlier one is still under way. (Not "at the master's offset": while clients
    // write, the replica's acknowledged offset is always a little behind.)
    bool settled() const {
        const int m = named_master(0);
        if (m == 0 || named_master(1) != m || named_master(2) != m) return false;
        if (ask(m, {"ROLE"}).rfind("master ", 0) != 0) return false;
        const auto role = ask(replica_of(m), {"ROLE"});
        if (role.rfind("slave 127.0.0.1 " + std::to_string(m) + " connected", 0) != 0) return false;
        if (ask(m, {"INFO", "replication"}).find("state=online") == std::string::npos) return false;
        const auto replica = ask(replica_of(m), {"INFO", "replication"});
        return replica.find("master_link_status:up") != std::string::npos &&
               replica.find("master_sync_in_progress:0") != std::string::npos;
    }
    void wait_until_settled() const {
        const auto until = clock_type::now() + rig_settles;
        while (!settled() && clock_type::now() < until) std::this_thread::sleep_for(100ms);
        BOOST_REQUIRE_MESSAGE(settled(), "the Sentinel rig did not settle");
    }
    // SENTINEL FAILOVER, returning once the Sentinels name the other server. A Sentinel answers
    // NOGOODSLAVE for a while after the replica was stopped (an earlier case pauses it): until
    // its next INFO from the replica, up to 10 s, it still believes the replica's link is down.
    int fail_over() const {
        const int old = named_master(0);
        const auto until = clock_type::now() + rig_settles;
        std::string answer;
        while ((answer = ask(sentinel_port(0), {"SENTINEL", "FAILOVER", master_name})) != "OK" &&
               answer.rfind("NOGOODSLAVE", 0) == 0 && clock_type::now() < until)
            std::this_thread::sleep_for(200ms);
        BOOST_REQUIRE_EQUAL(answer, "OK");
        while (named_master(0) == old && clock_type::now() < until)
            std::this_thread::sleep_for(50ms);
        BOOST_REQUIRE_NE(named_master(0), old);
        return named_master(0);
    }
    // SIGSTOPs (true) or SIGCONTs (false) the server on `port`.
    void pause(int port, bool stop) const {
        const int i = port - base_;
        std::ifstream f(dir_ + "/redis-sentinel-server-" + std::to_string(i) + ".pid");
        long pid = 0;
        BOOST_REQUIRE(f >> pid);
        BOOST_REQUIRE(::kill(pid_t(pid), stop ? SIGSTOP : SIGCONT) == 0);
    }

  private:
    int run(const char* what) const {
        const std::string cmd =
            "LOCKSMITH_SERVICES_DIR='" + dir_ + "' " +
            (tls_ ? "LOCKSMITH_SERVICES='certs redis-sentinel' LOCKSMITH_REDIS_SENTINEL_TLS=1"
                  : "LOCKSMITH_SERVICES=redis-sentinel") +
            " LOCKSMITH_REDIS_SENTINEL_PORT=" + std::to_string(base_) + " '" +
            test::services_script() + "' " + what + " >>'" + dir_ + ".log' 2>&1";
        return std::system(cmd.c_str());
    }
    std::string dir_;
    bool tls_ = false;
    int base_ = 0;
};

private_rig& rig() {
    static private_rig r;
    return r;
}

strategies::redis_options options_for(const std::vector<std::string>& sentinels) {
    nlohmann::json j{{"sentinels", sentinels},        {"master_name", master_name},
                     {"sentinel_password", password}, {"password", password},
                     {"key_prefix", prefix},          {"connect_timeout_s", 0.5},
                     {"command_timeout_s", 2}};
    return strategies::redis_options::from_json(j);
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name, lock_options o = {}) {
    if (o.ttl <= 0ms) o.ttl = 30s;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(options_say_what_is_wrong) {
    using strategies::redis_options;
    auto refused = [](const nlohmann::json& j, const std::string& says) {
        try {
            redis_options::from_json(j);
            BOOST_ERROR("accepted " << j.dump());
        } catch (const config_error& e) {
            BOOST_CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos,
                                e.what() << " does not say " << says);
            BOOST_CHECK(std::string(e.what()).find("s3cret") == std::string::npos);
        }
    };
    const nlohmann::json s = {"127.0.0.1:26379"};
    refused({{"url", "redis://h"}, {"sentinels", s}, {"master_name", "m"}}, "not several");
    refused({{"sentinels", s}}, "master_name");
    refused({{"sentinels", nlohmann::json::array()}, {"master_name", "m"}}, "non-empty array");
    refused({{"sentinels", {"127.0.0.1"}}, {"master_name", "m"}}, "needs a port");
    refused({{"sentinels", {"u:s3cret@127.0.0.1:1"}}, {"master_name", "m"}}, "host:port only");
    refused({{"sentinels", s}, {"master_name", "m"}, {"wait_replicas", 0}}, "wait_replicas");
    // TLS options without TLS would be ignored, and everything sent in clear text.
    refused({{"sentinels", s}, {"master_name", "m"}, {"ca_file", "/etc/ca.pem"}}, "'tls': true");
    refused({{"sentinels", s},
             {"master_name", "m"},
             {"password", "s3cret"},
             {"password_file", "/etc/x"}},
            "not several");
    refused({{"sentinels", s}, {"master_name", "m"}, {"sentinel_password_file", "rel"}},
            "absolute path");
    refused({{"url", "redis://h"}, {"password", "s3cret"}}, "in the URL");
    const auto o = redis_options::from_json(
        {{"sentinels", {"127.0.0.1:26379", "[::1]:26380"}}, {"master_name", "m"}, {"db", 3}});
    BOOST_REQUIRE_EQUAL(o.sentinels.size(), 2u);
    BOOST_CHECK_EQUAL(o.sentinels[1].host, "::1");
    BOOST_CHECK_EQUAL(o.sentinels[1].port, 26380);
    BOOST_CHECK_EQUAL(o.endpoint.db, 3);
    BOOST_CHECK_EQUAL(o.wait_replicas, 1);
}

// --- against fakes: what a real Sentinel or master will not say on demand ---

namespace {

std::string bulk(const std::string& s) {
    return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

// A fake Sentinel naming 127.0.0.1:`port` as the master, counting the questions.
fake_redis fake_sentinel(int port, std::atomic<int>& questions) {
    return fake_redis(
        [port, &questions](const std::vector<std::string>& args) -> std::optional<std::string> {
            if (args.at(0) == "AUTH") return "+OK\r\n";
            ++questions;
            return "*2\r\n" + bulk("127.0.0.1") + bulk(std::to_string(port));
        },
        "");
}

int port_of(const fake_redis& f) {
    const auto url = f.url();
    return std::atoi(url.c_str() + url.rfind(':') + 1);
}

// A fake master: ROLE says `role`, SET grants, WAIT answers `waited`, a write answers `write`
// (when not empty). Counts EVALSHA calls (releases).
struct fake_master {
    std::string role = "master";
    std::string waited = ":1\r\n";
    std::string write;
    std::atomic<int> scripts{0};
    fake_redis server{[this](const std::vector<std::string>& args) -> std::optional<std::string> {
                          const auto& c = args.at(0);
                          if (c == "AUTH") return "+OK\r\n";
                          if (c == "ROLE") return "*3\r\n" + bulk(role) + ":0\r\n*0\r\n";
                          if (c == "SCRIPT") return fake_sha;
                          if (!write.empty() && (c == "SET" || c == "EVALSHA")) return write;
                          if (c == "SET") return "+OK\r\n";
                          if (c == "WAIT") return waited;
                          if (c == "EVALSHA") return ++scripts, ":1\r\n";
                          return "-ERR unexpected " + c + "\r\n";
                      },
                      ""};
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_master_whose_role_is_not_master_is_not_used) {
    // The Sentinels name a master that is being demoted for about a second: its ROLE decides.
    fake_master replica;
    replica.role = "slave";
    std::atomic<int> questions{0};
    auto sentinel = fake_sentinel(port_of(replica.server), questions);
    auto o = options_for({"127.0.0.1:" + std::to_string(port_of(sentinel))});
    try {
        strategies::make_redis_store(o);
        BOOST_ERROR("a store was made on a server whose ROLE is slave");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_CHECK(e.transient());
        BOOST_CHECK(std::string(e.what()).find("ROLE is 'slave'") != std::string::npos);
    }
    BOOST_CHECK_EQUAL(questions.load(), 2);  // asked again after the first answer failed
}

BOOST_AUTO_TEST_CASE(readonly_makes_the_next_connection_ask_the_sentinels_again) {
    fake_master demoted;
    demoted.write = "-READONLY You can't write against a read only replica.\r\n";
    std::atomic<int> questions{0};
    auto sentinel = fake_sentinel(port_of(demoted.server), questions);
    auto s = strategies::make_redis_store(
        options_for({"127.0.0.1:" + std::to_string(port_of(sentinel))}));
    BOOST_CHECK_EQUAL(questions.load(), 1);
    for (int i = 0; i < 2; ++i) {
        auto lock = make_lock(s, "readonly");
        try {
            lock.try_lock();
            BOOST_ERROR("a READONLY reply was taken for a grant");
        } catch (const backend_error& e) {
            BOOST_CHECK_EQUAL(e.native_code(), "READONLY");
        }
    }
    BOOST_CHECK_EQUAL(questions.load(), 2);  // the connection after the READONLY asked again
}

BOOST_AUTO_TEST_CASE(a_grant_no_replica_confirms_is_released_and_not_reported) {
    fake_master lonely;
    lonely.waited = ":0\r\n";
    std::atomic<int> questions{0};
    auto sentinel = fake_sentinel(port_of(lonely.server), questions);
    auto s = strategies::make_redis_store(
        options_for({"127.0.0.1:" + std::to_string(port_of(sentinel))}));
    for (int i = 0; i < 2; ++i) {
        auto lock = make_lock(s, "unconfirmed");
        try {
            lock.try_lock();
            BOOST_ERROR("a grant that no replica has was reported");
        } catch (const backend_error& e) {
            BOOST_TEST_MESSAGE(e.what());
            BOOST_CHECK_EQUAL(e.native_code(), "NOREPLICAS");
            BOOST_CHECK(e.transient());
        }
    }
    BOOST_CHECK_EQUAL(lonely.scripts.load(), 2);  // each grant released
    BOOST_CHECK_EQUAL(questions.load(), 2);       // a master that cannot confirm: asked again
}

// --- against a Sentinel rig of the test's own ---

BOOST_AUTO_TEST_CASE(a_dead_sentinel_is_skipped) {
    auto& r = rig();
    r.wait_until_settled();
    auto sentinels = r.sentinels();
    sentinels.insert(sentinels.begin(), "127.0.0.1:" + std::to_string(test::free_port()));
    auto s = strategies::make_redis_store(options_for(sentinels));
    auto lock = make_lock(s, test::unique_resource("dead-sentinel"));
    BOOST_REQUIRE(lock.try_lock());
    BOOST_CHECK(lock.fencing_token());
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(a_wrong_sentinel_password_is_refused_without_showing_it) {
    auto& r = rig();
    r.wait_until_settled();
    auto o = options_for(r.sentinels());
    for (auto& s : o.sentinels) s.password = "wrong-sentinel-secret";
    try {
        strategies::make_redis_store(o);
        BOOST_ERROR("a wrong Sentinel password was accepted");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST_MESSAGE(what);
        BOOST_CHECK(what.find("wrong-sentinel-secret") == std::string::npos);
        BOOST_CHECK(what.find("127.0.0.1:" + std::to_string(r.sentinel_port(0))) !=
                    std::string::npos);
        BOOST_CHECK(e.kind() == error_kind::permanent);
    }
}

BOOST_AUTO_TEST_CASE(passwords_come_from_files) {
    auto& r = rig();
    r.wait_until_settled();
    // In a folder of its own: a secret file's folder may not be writable by others (/tmp).
    const std::string dir = "/tmp/locksmith-sentinel-pw-" + std::to_string(::getpid());
    const std::string file = dir + "/password";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    {
        std::ofstream f(file);
        f << password << "\n";
    }
    ::chmod(file.c_str(), 0600);
    auto j = nlohmann::json{{"sentinels", r.sentinels()},
                            {"master_name", master_name},
                            {"sentinel_password_file", file},
                            {"password_file", file},
                            {"key_prefix", prefix}};
    auto s = strategies::make_redis_store(strategies::redis_options::from_json(j));
    auto lock = make_lock(s, test::unique_resource("password-file"));
    BOOST_CHECK(lock.try_lock());
    lock.unlock();
    ::chmod(file.c_str(), 0644);  // readable by others: refused
    BOOST_CHECK_THROW(strategies::make_redis_store(strategies::redis_options::from_json(j)),
                      invalid_argument_error);
    std::remove(file.c_str());
    ::rmdir(dir.c_str());
}

BOOST_AUTO_TEST_CASE(nothing_counts_that_the_replica_has_not_confirmed) {
    // The replica stopped (SIGSTOP): WAIT 1 times out, so a grant is released and refused, a
    // refresh fails without extending the lease, a fencing token is not handed out, and a
    // waiter that a release hands the lock to does not report it.
    auto& r = rig();
    r.wait_until_settled();
    auto o = options_for(r.sentinels());
    o.command_timeout = 600ms;  // WAIT waits 300 ms
    auto s = strategies::make_redis_store(o);
    const auto name = test::unique_resource("no-replica");
    auto held = make_lock(s, name + "-held");
    BOOST_REQUIRE(held.try_lock());
    auto handed = make_lock(s, name + "-handed");
    BOOST_REQUIRE(handed.try_lock());
    const int master = r.named_master();
    auto expect_no_replicas = [](const char* what, const std::function<void()>& f) {
        try {
            f();
            BOOST_ERROR(what << " succeeded without the replica");
        } catch (const backend_error& e) {
            BOOST_CHECK_MESSAGE(e.native_code() == "NOREPLICAS", what << ": " << e.what());
        }
    };
    auto lock = make_lock(s, name);
    std::future<bool> waited;
    {
        r.pause(r.replica_of(master), true);
        struct resume {
            const private_rig& r;
            int port;
            ~resume() { r.pause(port, false); }
        } resume_at_end{r, r.replica_of(master)};
        expect_no_replicas("a grant", [&] { (void)lock.try_lock(); });
        expect_no_replicas("a refresh", [&] { held.refresh(); });
        expect_no_replicas("a fencing token", [&] { (void)held.fencing_token(); });
        auto other = strategies::make_redis_store(o);
        waited = std::async(std::launch::async, [other, name] {
            auto w = make_lock(other, name + "-handed");
            try {
                return w.try_lock_for(2s);
            } catch (const backend_error& e) {
                BOOST_CHECK_EQUAL(e.native_code(), "NOREPLICAS");
                return false;
            }
        });
        std::this_thread::sleep_for(500ms);  // the waiter queues
        handed.unlock();                     // and is handed the lock
        BOOST_CHECK(!waited.get());
    }
    // Released, not left to its TTL: the name is free at the master.
    BOOST_CHECK_EQUAL(ask(master, {"EXISTS", prefix + "lock:" + name}), "0");
    r.wait_until_settled();
    BOOST_CHECK(lock.try_lock());
    BOOST_CHECK(held.fencing_token());
    lock.unlock();
    held.unlock();
}

// Counting semaphores behind Sentinel: a permit counts once WAIT confirmed it; with the replica
// stopped a grant is released (not left to its TTL) and reported as NOREPLICAS.
BOOST_AUTO_TEST_CASE(a_permit_counts_once_the_replica_has_it) {
    auto& r = rig();
    r.wait_until_settled();
    auto o = options_for(r.sentinels());
    o.command_timeout = 600ms;  // WAIT waits 300 ms
    auto s = strategies::make_redis_store(o);
    const auto name = test::unique_resource("permits");
    auto permit = [&] {
        auto k = std::make_shared<key>(name);
        k->set_limit(2);
        lock_options lo;
        lo.ttl = 30s;
        return named_semaphore(s, k, lo);
    };
    auto a = permit(), b = permit(), c = permit();
    BOOST_REQUIRE(a.try_acquire());
    BOOST_CHECK(a.fencing_token());
    const int master = r.named_master();
    {
        r.pause(r.replica_of(master), true);
        struct resume {
            const private_rig& r;
            int port;
            ~resume() { r.pause(port, false); }
        } resume_at_end{r, r.replica_of(master)};
        try {
            (void)b.try_acquire();
            BOOST_ERROR("a permit no replica has was reported");
        } catch (const backend_error& e) {
            BOOST_CHECK_EQUAL(e.native_code(), "NOREPLICAS");
        }
        BOOST_CHECK(!b.held());
    }
    // Released at the master, not left to its TTL: only the first permit is there.
    BOOST_CHECK_EQUAL(ask(master, {"ZCARD", prefix + "permits:" + name}), "1");
    r.wait_until_settled();
    BOOST_CHECK(b.try_acquire());
    BOOST_CHECK(!c.try_acquire());
    a.release();
    BOOST_CHECK(c.try_acquire());
    b.release();
    c.release();
}

BOOST_AUTO_TEST_CASE(a_holder_whose_refreshes_go_unconfirmed_past_its_ttl_is_told) {
    // The replica stopped for longer than the TTL: the watchdog's refreshes are not confirmed,
    // and when the last confirmed lease runs out the holder hears of the loss (on_lost) and
    // stops believing it holds the lock.
    auto& r = rig();
    r.wait_until_settled();
    auto o = options_for(r.sentinels());
    o.command_timeout = 400ms;  // WAIT waits 200 ms
    std::atomic<int> losses{0};
    lock_options lo;
    lo.ttl = 1500ms;
    lo.auto_refresh = true;
    lo.on_lost = [&](const error&) { ++losses; };
    auto holder = make_lock(strategies::make_redis_store(o), test::unique_resource("lost"), lo);
    BOOST_REQUIRE(holder.try_lock());
    const int replica = r.replica_of(r.named_master());
    {
        r.pause(replica, true);
        struct resume {
            const private_rig& r;
            int port;
            ~resume() { r.pause(port, false); }
        } resume_at_end{r, replica};
        const auto paused = clock_type::now();
        while (losses == 0 && clock_type::now() - paused < test::patience(10s))
            std::this_thread::sleep_for(50ms);
        const auto after = clock_type::now() - paused;
        BOOST_CHECK_EQUAL(losses.load(), 1);
        // Not before the lease confirmed last has run out (it began before the pause).
        BOOST_CHECK(after >= 1000ms);
        BOOST_TEST_MESSAGE("loss reported "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(after).count()
                           << " ms after the replica stopped");
    }
    BOOST_CHECK(!holder.is_acquired());
    r.wait_until_settled();
}

BOOST_AUTO_TEST_CASE(a_lock_is_held_through_a_failover) {
    // A holder (auto-refresh), a waiter and a rival that keeps trying, each on its own store,
    // through SENTINEL FAILOVER: the holder keeps the lock or is told it lost it; the rival never
    // gets it while the holder believes it holds it; the waiter is served after the holder's
    // release, with a larger token, and so is the next grant after it.
    auto& r = rig();
    r.wait_until_settled();
    const auto o = options_for(r.sentinels());
    const auto name = test::unique_resource("failover");
    std::atomic<int> losses{0};
    lock_options lo;
    lo.ttl = 20s;
    lo.auto_refresh = true;
    lo.on_lost = [&](const error& e) {
        BOOST_TEST_MESSAGE("holder lost the lock: " << e.what());
        ++losses;
    };
    // As if the old master's clock ran an hour ahead of the replica's: its last token is far
    // above what the new master's clock gives, so only the name's last token, replicated with
    // the grant, keeps the next tokens above it.
    const auto ahead =
        std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::system_clock::now().time_since_epoch() + std::chrono::hours(1))
            .count();
    BOOST_REQUIRE_EQUAL(
        ask(r.named_master(), {"SET", prefix + "fence:" + name, std::to_string(ahead)}), "OK");
    auto holder = make_lock(strategies::make_redis_store(o), name, lo);
    BOOST_REQUIRE(holder.try_lock());
    const auto first = holder.fencing_token();
    BOOST_REQUIRE(first);
    BOOST_REQUIRE_GT(*first, std::uint64_t(ahead));

    // A rival that keeps trying the name, and grants of another name one after another, all
    // through the failover: the rival never gets the name while the holder believes it holds
    // it, and every token handed out for the other name is larger than the one before.
    std::atomic<bool> stop{false};
    std::atomic<int> rival_grants_while_held{0};
    std::atomic<bool> holding{true};
    std::atomic<int> sequence_grants{0}, tokens_out_of_order{0};
    auto rival_store = strategies::make_redis_store(o);
    auto sequence_store = strategies::make_redis_store(o);
    std::vector<std::jthread> threads;  // joined however the case ends, once `stop` is set
    struct stopper {
        std::atomic<bool>& stop;
        ~stopper() { stop = true; }
    } stop_at_end{stop};
    threads.emplace_back([&] {
        auto rival_lock = make_lock(rival_store, name);
        while (!stop) {
            try {
                if (rival_lock.try_lock()) {
                    if (holding && losses == 0) ++rival_grants_while_held;
                    rival_lock.unlock();
                }
            } catch (const std::exception&) {
                // The failover: connections break, grants are not confirmed for a while.
            }
            std::this_thread::sleep_for(100ms);
        }
    });
    threads.emplace_back([&] {
        auto l = make_lock(sequence_store, name + "-sequence");
        std::uint64_t last = 0;
        while (!stop) {
            try {
                if (l.try_lock()) {
                    const auto token = l.fencing_token();
                    l.unlock();
                    if (token && *token <= last) ++tokens_out_of_order;
                    if (token) last = *token;
                    ++sequence_grants;
                }
            } catch (const std::exception&) {
                l.unlock();  // a grant or token not confirmed: not counted
            }
            std::this_thread::sleep_for(20ms);
        }
    });
    auto waiter_store = strategies::make_redis_store(o);
    auto waited = std::async(std::launch::async, [&]() -> std::uint64_t {
        auto w = make_lock(waiter_store, name);
        if (!w.try_lock_for(must_happen)) return 0;
        const auto token = w.fencing_token();
        w.unlock();
        return token.value_or(0);
    });

    const int old_master = r.named_master();
    const int new_master = r.fail_over();
    BOOST_TEST_MESSAGE("failed over from " << old_master << " to " << new_master);
    r.wait_until_settled();
    // A refresh confirmed by the new master's replica: the holder is still the holder there.
    if (losses == 0) BOOST_CHECK_NO_THROW(holder.refresh());
    BOOST_CHECK(holder.fencing_token() == first);
    const bool kept = losses == 0;
    BOOST_TEST_MESSAGE("the holder " << (kept ? "kept" : "lost") << " the lock");
    if (kept) BOOST_CHECK(holder.is_acquired());
    holding = false;
    holder.unlock();

    const auto waiter_token = waited.get();
    stop = true;
    threads.clear();
    BOOST_CHECK_EQUAL(rival_grants_while_held.load(), 0);
    BOOST_TEST_MESSAGE(sequence_grants.load() << " grants of another name during the failover");
    BOOST_CHECK_GT(sequence_grants.load(), 0);
    BOOST_CHECK_EQUAL(tokens_out_of_order.load(), 0);
    BOOST_REQUIRE_MESSAGE(waiter_token != 0, "the waiter was not served after the failover");
    BOOST_CHECK_GT(waiter_token, *first);
    auto next = make_lock(strategies::make_redis_store(o), name);
    BOOST_REQUIRE(next.try_lock_for(must_happen));
    const auto last = next.fencing_token();
    BOOST_REQUIRE(last);
    BOOST_CHECK_GT(*last, waiter_token);
    next.unlock();
}

BOOST_AUTO_TEST_CASE(sentinels_and_master_over_tls_through_a_failover) {
    // Every connection TLS with a client certificate — to the Sentinels, whose answers decide
    // where the commands go, and to the master: a grant, a failover followed with tokens still
    // increasing, and a wrong CA or a missing client certificate refused for good with an error
    // that names a Sentinel and not the password.
    private_rig r(true);
    r.wait_until_settled();
    auto j = nlohmann::json{{"sentinels", r.sentinels()},
                            {"master_name", master_name},
                            {"sentinel_password", password},
                            {"password", password},
                            {"key_prefix", prefix},
                            {"tls", true},
                            {"ca_file", r.tls_dir() + "/ca.pem"},
                            {"cert_file", r.tls_dir() + "/client.pem"},
                            {"key_file", r.tls_dir() + "/client.key"},
                            {"connect_timeout_s", 1},
                            {"command_timeout_s", 2}};
    const auto name = test::unique_resource("tls");
    auto s = strategies::make_redis_store(strategies::redis_options::from_json(j));
    auto l = make_lock(s, name);
    BOOST_REQUIRE(l.try_lock());
    const auto before = l.fencing_token();
    BOOST_REQUIRE(before);
    BOOST_CHECK(
        !make_lock(strategies::make_redis_store(strategies::redis_options::from_json(j)), name)
             .try_lock());
    l.unlock();
    const int old_master = r.named_master();
    BOOST_CHECK_NE(r.fail_over(), old_master);
    r.wait_until_settled();
    auto after = make_lock(s, name);
    BOOST_REQUIRE(after.try_lock_for(must_happen));
    BOOST_REQUIRE(after.fencing_token());
    BOOST_CHECK_GT(*after.fencing_token(), *before);
    after.unlock();

    auto refused = [&](nlohmann::json o, const std::string& says) {
        try {
            strategies::make_redis_store(strategies::redis_options::from_json(o));
            BOOST_ERROR("a store was made with " << says);
        } catch (const backend_error& e) {
            const std::string what = e.what();
            BOOST_TEST_MESSAGE(what);
            BOOST_CHECK(e.kind() == error_kind::permanent);
            BOOST_CHECK_EQUAL(e.native_code(), "tls");
            BOOST_CHECK(what.find("127.0.0.1:" + std::to_string(r.sentinel_port(0))) !=
                        std::string::npos);
            BOOST_CHECK(what.find(password) == std::string::npos);
        }
    };
    auto wrong_ca = j;
    wrong_ca["ca_file"] = r.tls_dir() + "/server.pem";  // not the CA that signed theirs
    refused(wrong_ca, "a wrong CA");
    auto no_certificate = j;
    no_certificate.erase("cert_file");
    no_certificate.erase("key_file");
    refused(no_certificate, "no client certificate");
}
