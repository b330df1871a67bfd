// SPDX-License-Identifier: MIT
// Counting semaphores on the redis strategy (issue 27) against a real redis-server: the shared
// one from scripts/services.sh (LOCKSMITH_TEST_REDIS_URL) and, for a server that dies, one this
// test starts itself. Each case names the path of the permit scripts it guards
// (tests/mutants/faults.txt).
#define BOOST_TEST_MODULE redis_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/redis.hpp>

#include <hiredis/hiredis.h>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/hostile_server.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::endpoint;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* url_variable = "LOCKSMITH_TEST_REDIS_URL";

// Fixed at start-up, so that forked children use the parent's prefix.
const std::string test_prefix = "locksmith-sem-it:" + std::to_string(::getpid()) + ":";

const auto must_happen = test::patience(60s);  // safety net only

strategies::redis_options options_for(const std::string& url) {
    strategies::redis_options o;
    o.endpoint = strategies::parse_redis_url(url);
    o.key_prefix = test_prefix;
    o.connect_timeout = 500ms;
    o.command_timeout = 1000ms;
    return o;
}

std::shared_ptr<store> shared_store() {
    return strategies::make_redis_store(options_for(endpoint(url_variable)));
}

named_semaphore make_permit(std::shared_ptr<store> s, const std::string& name, std::uint32_t limit,
                            std::chrono::milliseconds ttl = 30s) {
    auto k = std::make_shared<key>(name);
    k->set_limit(limit);
    lock_options o;
    o.ttl = ttl;
    return named_semaphore(std::move(s), std::move(k), o);
}

std::shared_ptr<key> permit_key(const std::string& name, std::uint32_t limit) {
    auto k = std::make_shared<key>(name);
    k->set_limit(limit);
    return k;
}

// One command to the shared server, outside the store (to plant keys and look at them).
// Returns the reply's integer, or -1 for another reply.
long long redis_command(const std::vector<std::string>& args) {
    const auto o = options_for(endpoint(url_variable));
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    if (c == nullptr || c->err) {
        if (c) redisFree(c);
        return -1;
    }
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, int(argv.size()), argv.data(), lengths.data()));
    const long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return n;
}

std::string permits_key(const std::string& name) {
    return test_prefix + "permits:" + name;
}
std::string limit_key(const std::string& name) {
    return test_prefix + "limit:" + name;
}

template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(redis_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          url_variable}))

BOOST_AUTO_TEST_CASE(redis_declares_counting) {
    auto d = default_registry().find("redis");
    BOOST_REQUIRE(d);
    BOOST_TEST(has(d->capabilities, capability::counting));
    BOOST_TEST(has(shared_store()->capabilities(), capability::counting));
}

// Guards: grant beyond the limit.
BOOST_AUTO_TEST_CASE(the_limit_is_kept_and_a_release_frees_one) {
    const std::string name = test::unique_resource("three");
    auto s = shared_store();
    auto a = make_permit(s, name, 3), b = make_permit(s, name, 3), c = make_permit(s, name, 3),
         d = make_permit(s, name, 3);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(c.try_acquire());
    BOOST_TEST(!d.try_acquire());
    BOOST_TEST(a.try_acquire());  // held already: renewed, not counted again
    BOOST_TEST(!d.try_acquire());
    BOOST_TEST(a.permit() == a.owner()->token());  // LOCKSMITH_PERMIT: the owner's token
    const auto st = s->status(name);
    BOOST_TEST(st.limit.value_or(0) == 3u);
    BOOST_TEST(st.permits_held.value_or(0) == 3u);
    BOOST_TEST(st.held == lock_status::state::held_exclusive);  // none left
    b.release();
    BOOST_TEST(!b.is_acquired());
    BOOST_TEST(s->status(name).held == lock_status::state::free);
    BOOST_TEST(d.try_acquire());
    a.release();
    c.release();
    d.release();
    BOOST_TEST(redis_command({"EXISTS", permits_key(name), limit_key(name)}) == 0);
}

// Guards: expired holders not dropped. A holder killed with SIGKILL gives its permit back when
// its TTL runs out (nothing else can: no session tells Redis that it died).
BOOST_AUTO_TEST_CASE(a_killed_holders_permit_returns_after_its_ttl) {
    const std::string name = test::unique_resource("killed");
    const std::string url = endpoint(url_variable);
    test::byte_pipe ready;
    const pid_t child = test::fork_child([&] {
        auto permit = make_permit(strategies::make_redis_store(options_for(url)), name, 2, 1500ms);
        permit.set_auto_release(false);
        if (!permit.try_acquire()) return 2;
        ready.put('1');
        ::pause();  // killed while holding; never releases nor refreshes
        return 0;
    });
    BOOST_REQUIRE(ready.get(5s) == '1');
    auto s = shared_store();
    auto other = make_permit(s, name, 2);
    BOOST_REQUIRE(other.try_acquire());
    auto waiter = make_permit(s, name, 2);
    BOOST_TEST(!waiter.try_acquire());
    const auto killed_at = clock_type::now();
    ::kill(child, SIGKILL);
    test::wait_child(child, 5s);
    BOOST_TEST(!waiter.try_acquire());  // not before its TTL
    BOOST_TEST(waiter.try_acquire_for(10s));
    const double waited = test::ms_since(killed_at);
    BOOST_TEST_MESSAGE("permit back " << waited << " ms after its holder died (ttl 1500 ms)");
    BOOST_TEST(waited >= 1000.0);  // the TTL, not the kill, gave it back
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 2u);
}

// Guards: limit mismatch ignored.
BOOST_AUTO_TEST_CASE(a_second_limit_for_a_name_is_refused_naming_both) {
    const std::string name = test::unique_resource("mismatch");
    auto s = shared_store();
    auto three = make_permit(s, name, 3);
    BOOST_REQUIRE(three.try_acquire());
    auto five = make_permit(s, name, 5);
    const auto what = message_of([&] { five.try_acquire(); });
    BOOST_TEST(contains(what, "limit of 3"), what);
    BOOST_TEST(contains(what, "asks for 5"), what);
    BOOST_CHECK_THROW(five.try_acquire_for(200ms), invalid_argument_error);
    BOOST_TEST(!five.held());
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 1u);  // no second semaphore
    // The limit goes with the last holder: then the name may have another.
    three.release();
    BOOST_TEST(five.try_acquire());
    five.release();
}

// Guards: announcement missing. The holder's TTL is 30 s: only the release's announcement can
// wake the waiter within its 10 s.
BOOST_AUTO_TEST_CASE(a_waiter_is_woken_by_the_release) {
    const std::string name = test::unique_resource("wake");
    auto holder_store = shared_store();
    auto waiter_store = shared_store();
    std::vector<double> latencies;
    for (int round = 0; round < 20; ++round) {
        auto holder = make_permit(holder_store, name, 1);
        auto waiter = make_permit(waiter_store, name, 1);
        BOOST_REQUIRE(holder.try_acquire());
        std::atomic<bool> started{false};
        clock_type::time_point acquired_at{};
        bool acquired = false;
        std::thread t([&] {
            started = true;
            acquired = waiter.try_acquire_for(10s);
            acquired_at = clock_type::now();
        });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(30ms);  // let the waiter subscribe and sleep
        const auto released_at = clock_type::now();
        holder.release();
        t.join();
        BOOST_REQUIRE(acquired);
        latencies.push_back(
            std::chrono::duration<double, std::milli>(acquired_at - released_at).count());
        // Woken, not granted by the last attempt at the end of its 10 s: stop at the first.
        BOOST_REQUIRE_LT(latencies.back(), 5000.0);
        waiter.release();
    }
    std::sort(latencies.begin(), latencies.end());
    BOOST_TEST_MESSAGE("permit wake-up latency ms: p50 " << latencies[latencies.size() / 2]
                                                         << ", max " << latencies.back());
}

// Guards: release and refresh of another's entry.
BOOST_AUTO_TEST_CASE(a_non_owner_can_neither_release_nor_refresh_a_permit) {
    const std::string name = test::unique_resource("owner");
    auto s = shared_store();
    auto mine = permit_key(name, 1);
    BOOST_REQUIRE(s->try_acquire(*mine, lock_mode::exclusive, 1500ms));
    auto stranger = permit_key(name, 1);
    s->release(*stranger);
    BOOST_TEST(s->holds(*mine));
    BOOST_TEST(!s->holds(*stranger));
    BOOST_TEST(!s->refresh(*stranger, 60s));
    BOOST_TEST(redis_command({"ZCARD", permits_key(name)}) == 1);  // no entry made either
    BOOST_TEST(s->refresh(*mine, 60s));                            // the owner's refresh works...
    std::this_thread::sleep_for(1600ms);
    BOOST_TEST(s->holds(*mine));  // ...and outlives the first TTL
    BOOST_TEST(!s->try_acquire(*stranger, lock_mode::exclusive, 1s));
    s->release(*mine);
    BOOST_TEST(!s->holds(*mine));
    BOOST_TEST(s->try_acquire(*stranger, lock_mode::exclusive, 1s));
    s->release(*stranger);
}

// Fencing: one counter for the name's lock and its permits, strictly increasing.
BOOST_AUTO_TEST_CASE(fencing_tokens_increase_across_permits_and_the_lock) {
    const std::string name = test::unique_resource("fence");
    auto s = shared_store();
    lock_options o;
    o.ttl = 30s;
    named_lock lock(s, std::make_shared<key>(name), o);
    BOOST_REQUIRE(lock.try_lock());
    const auto first = lock.fencing_token().value();
    lock.unlock();
    auto a = make_permit(s, name, 2), b = make_permit(s, name, 2);
    BOOST_REQUIRE(a.try_acquire());
    BOOST_REQUIRE(b.try_acquire());
    BOOST_TEST(a.fencing_token().value() > first);
    BOOST_TEST(b.fencing_token().value() > a.fencing_token().value());
    const auto b_token = b.fencing_token().value();
    BOOST_REQUIRE(lock.try_lock());  // a lock and a semaphore of one name are separate objects
    BOOST_TEST(lock.fencing_token().value() > b_token);
    lock.unlock();
    a.release();
    b.release();
}

// Planted keys: a clear error naming the key, never a crash, a grant or an overwrite.
BOOST_AUTO_TEST_CASE(a_planted_key_is_a_clear_error) {
    auto s = shared_store();
    const auto refused = [&](const std::string& name, const std::string& part) {
        auto p = make_permit(s, name, 3);
        try {
            p.try_acquire();
            BOOST_ERROR("no error for " + part);
        } catch (const backend_error& e) {
            BOOST_TEST(e.native_code() == "foreign");
            BOOST_TEST(contains(e.what(), part), e.what());
        }
        BOOST_TEST(!p.held());
    };
    const std::string wrong_type = test::unique_resource("wrong-type");
    redis_command({"SET", permits_key(wrong_type), "x"});
    refused(wrong_type, "'" + permits_key(wrong_type) + "' is a string");
    BOOST_TEST(redis_command({"STRLEN", permits_key(wrong_type)}) == 1);  // left alone

    for (const std::string value : {"99999999999", "0", "-3", "abc", "3.5", "1000001"}) {
        const std::string huge = test::unique_resource("bad-limit");
        redis_command({"SET", limit_key(huge), value});
        refused(huge, "'" + limit_key(huge) + "' holds a value that is not a semaphore limit");
        BOOST_TEST(redis_command({"DEL", limit_key(huge)}) == 1);  // left as it was
    }
    const std::string hash = test::unique_resource("limit-hash");
    redis_command({"HSET", limit_key(hash), "a", "b"});
    refused(hash, "'" + limit_key(hash) + "' is a hash");
    BOOST_TEST(s->status(hash).held == lock_status::state::unknown);

    // Scores in the past (negative: long before 1970) are expired holders: dropped, not counted.
    const std::string negative = test::unique_resource("negative");
    redis_command({"ZADD", permits_key(negative), "-5", "x", "-1e300", "y"});
    auto p = make_permit(s, negative, 1);
    BOOST_TEST(p.try_acquire());
    BOOST_TEST(redis_command({"ZCARD", permits_key(negative)}) == 1);
    p.release();
    for (const auto& n : {wrong_type, hash}) redis_command({"DEL", permits_key(n), limit_key(n)});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(redis_permit_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          url_variable}))

// The server dies while a permit is held and another owner waits: both learn it as a
// backend_error, soon; the server back (empty), the same store grants again.
BOOST_AUTO_TEST_CASE(a_server_that_dies_while_a_permit_is_held) {
    const int port = test::free_port();
    test::private_server server(test::private_redis_argv(port), port);
    const std::string url = "redis://127.0.0.1:" + std::to_string(port) + "/0";
    auto s = strategies::make_redis_store(options_for(url));
    const std::string name = test::unique_resource("dies");
    auto holder = make_permit(s, name, 1);
    auto waiter = make_permit(s, name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    // The waiter rides the outage out until its deadline (named_lock's wait), then reports the
    // server's error.
    std::atomic<bool> waiter_failed{false};
    std::thread t([&] {
        try {
            waiter.try_acquire_for(3s);
        } catch (const backend_error& e) {
            waiter_failed = e.transient();
        }
    });
    std::this_thread::sleep_for(200ms);
    const auto stopped_at = clock_type::now();
    server.stop();
    t.join();
    BOOST_TEST(waiter_failed);
    BOOST_TEST(test::ms_since(stopped_at) > 1500.0);   // it tried again
    BOOST_TEST(test::ms_since(stopped_at) < 15000.0);  // and ended by its deadline
    BOOST_CHECK_THROW(holder.refresh(), backend_error);
    BOOST_CHECK_THROW(holder.release(), backend_error);
    server.start();
    auto fresh = make_permit(s, name, 1);
    BOOST_TEST(fresh.try_acquire());
    BOOST_TEST(fresh.fencing_token().has_value());
    fresh.release();
}

BOOST_AUTO_TEST_SUITE_END()

// --- a hostile server (support/hostile_server.hpp, no redis-server needed) that trickles or
// garbles the permit script's replies: a clear error or a bounded wait, never a hang, a spin or a
// permit left counted against the limit ---

namespace {

using test::fake_redis;
using test::fake_sha;

// Answers the permit script (EVALSHA with 3 keys, the first "permits:") with `permit_reply`
// (nullopt: trickles `trickled`), counts it and the release script (2 keys), and answers the
// rest as a server would enough for a waiter (SCRIPT LOAD, SUBSCRIBE).
struct hostile_permits {
    explicit hostile_permits(std::optional<std::string> permit_reply, std::string trickled = "")
        : reply(std::move(permit_reply)),
          server([this](const std::vector<std::string>& a) { return answer(a); },
                 std::move(trickled)) {}
    std::optional<std::string> answer(const std::vector<std::string>& a) {
        if (a.at(0) == "SCRIPT") return fake_sha;
        if (a.at(0) == "SUBSCRIBE" || a.at(0) == "UNSUBSCRIBE") {
            const std::string kind = a.at(0) == "SUBSCRIBE" ? "subscribe" : "unsubscribe";
            const std::string chan = a.size() > 1 ? a[1] : std::string();
            return "*3\r\n$" + std::to_string(kind.size()) + "\r\n" + kind + "\r\n$" +
                   std::to_string(chan.size()) + "\r\n" + chan +
                   "\r\n:" + (kind == "subscribe" ? "1" : "0") + "\r\n";
        }
        if (a.at(0) == "EVALSHA" && a.size() > 3 && contains(a[3], "permits:")) {
            if (a[2] == "3") {
                ++acquires;
                return reply;
            }
            if (a[2] == "2") ++releases;
            return std::string(":1\r\n");
        }
        return std::string("+OK\r\n");
    }
    std::shared_ptr<store> make_store() {
        auto o = options_for(server.url());
        o.command_timeout = 300ms;
        return strategies::make_redis_store(o);
    }
    std::optional<std::string> reply;
    std::atomic<int> acquires{0}, releases{0};
    fake_redis server;
};

// What a call ends with, and when: the native code and message of its backend_error.
template <class F>
std::pair<std::string, double> outcome_of(F&& f) {
    const auto started = clock_type::now();
    std::string what = "(no error)";
    try {
        what += f() ? " granted" : " refused";
    } catch (const backend_error& e) {
        what = e.native_code() + ": " + e.what();
    }
    return {what, test::ms_since(started)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(redis_permit_hostile)

// The permit reply trickles, each byte in time, the whole far beyond the command timeout: the
// command timeout ends an attempt, and a wait ends at its deadline, with the timeout.
BOOST_AUTO_TEST_CASE(a_trickled_permit_reply_ends_at_the_command_timeout) {
    hostile_permits fake(std::nullopt, "*2\r\n:1\r\n:5\r\n");  // 14 bytes, about 2.8 s
    auto s = fake.make_store();
    auto once = make_permit(s, "trickled", 2);
    const auto [tried, tried_ms] = outcome_of([&] { return once.try_acquire(); });
    BOOST_TEST(tried.rfind("timeout: ", 0) == 0u, tried);
    BOOST_TEST(tried_ms < 2000.0);
    auto waiter = make_permit(s, "trickled", 2);
    const auto [waited, waited_ms] = outcome_of([&] { return waiter.try_acquire_for(700ms); });
    BOOST_TEST(waited.rfind("timeout: ", 0) == 0u, waited);
    BOOST_TEST(waited_ms < 2500.0);
    BOOST_TEST(!fake.server.trickle_ended());
    BOOST_TEST(!once.held());
    BOOST_TEST(!waiter.held());
}

// Replies no script of ours gives: a protocol error, never a refusal that a waiter would wait
// on; when the reply may have granted a permit, it is given back first.
BOOST_AUTO_TEST_CASE(a_garbled_permit_reply_is_a_protocol_error_and_gives_back_the_grant) {
    struct variant {
        std::string reply;
        bool may_have_granted;
    };
    for (const auto& [reply, may_have_granted] :
         {variant{"*2\r\n:7\r\n:5\r\n", true}, variant{"*2\r\n:1\r\n$1\r\nx\r\n", true},
          variant{"*2\r\n:0\r\n$1\r\nx\r\n", false}, variant{"$3\r\nabc\r\n", false},
          variant{"*1\r\n:1\r\n", true}}) {
        hostile_permits fake(reply);
        auto s = fake.make_store();
        auto p = make_permit(s, "garbled", 2);
        const auto [what, ms] = outcome_of([&] { return p.try_acquire_for(5s); });
        BOOST_TEST(what.rfind("protocol: ", 0) == 0u, reply << " gave " << what);
        BOOST_TEST(ms < 2000.0, reply << " took " << ms << " ms");
        BOOST_TEST(!p.held());
        if (may_have_granted) BOOST_TEST(fake.releases.load() == 1, reply);
    }
}

// A refusal whose "first holder's remaining ms" is no duration (0, negative): the waiter sleeps
// on the channel as for an obstacle without a known end, instead of retrying every millisecond.
BOOST_AUTO_TEST_CASE(a_refusal_without_a_duration_does_not_make_the_waiter_spin) {
    hostile_permits fake(std::string("*2\r\n:0\r\n:-5\r\n"));
    auto s = fake.make_store();
    auto p = make_permit(s, "no-duration", 2);
    const auto [what, ms] = outcome_of([&] { return p.try_acquire_for(500ms); });
    BOOST_TEST(what == "(no error) refused");
    BOOST_TEST(ms >= 490.0);
    BOOST_TEST(fake.acquires.load() <= 5, fake.acquires.load() << " attempts in 500 ms");
}

BOOST_AUTO_TEST_SUITE_END()
