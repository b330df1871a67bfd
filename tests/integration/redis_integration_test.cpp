// SPDX-License-Identifier: MIT
// The redis strategy against a real redis-server: the shared one from scripts/services.sh
// (LOCKSMITH_TEST_REDIS_URL) and, for fault and authentication tests, private instances this
// test starts and stops itself.
#define BOOST_TEST_MODULE redis_integration
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/redis.hpp>

#include <hiredis/hiredis.h>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/hostile_server.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/tcp_fault_proxy.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* url_variable = "LOCKSMITH_TEST_REDIS_URL";

// Fixed at start-up, so that forked children use the parent's prefix.
const std::string test_prefix_value = "locksmith-it:" + std::to_string(::getpid()) + ":";
std::string test_prefix() {
    return test_prefix_value;
}

strategies::redis_options options_for(const std::string& url) {
    strategies::redis_options o;
    o.endpoint = strategies::parse_redis_url(url);
    o.key_prefix = test_prefix();
    o.connect_timeout = 500ms;
    o.command_timeout = 1000ms;
    return o;
}

std::shared_ptr<store> shared_store() {
    return strategies::make_redis_store(options_for(endpoint(url_variable)));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name,
                     std::chrono::milliseconds ttl = 30s) {
    lock_options o;
    o.ttl = ttl;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

// The safety net of the cases that check that a call returns (with an error) instead of hanging:
// generous, so a busy machine never trips it. How fast they return is not checked here.
constexpr double hang_limit_ms = 30000.0;

using test::ms_since;

const auto must_happen = test::patience(60s);  // safety net only

// How many writers wait in the queue of `name` (the store's P queue:N sorted set).
long queue_length(const std::string& name) {
    const auto o = options_for(endpoint(url_variable));
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    if (c == nullptr || c->err) {
        if (c) redisFree(c);
        return -1;
    }
    const std::string queue = test_prefix() + "queue:" + name;
    auto* r = static_cast<redisReply*>(redisCommand(c, "ZCARD %s", queue.c_str()));
    const long n = r && r->type == REDIS_REPLY_INTEGER ? long(r->integer) : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return n;
}

// Whether readers have marked `name` as awaited (the store's P readers:N key).
bool readers_wait(const std::string& name) {
    const auto o = options_for(endpoint(url_variable));
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    if (c == nullptr || c->err) {
        if (c) redisFree(c);
        return false;
    }
    const std::string mark = test_prefix() + "readers:" + name;
    auto* r = static_cast<redisReply*>(redisCommand(c, "EXISTS %s", mark.c_str()));
    const bool there = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return there;
}

// The last fencing token drawn for `name` (the store's P fence:N counter), 0 when none.
unsigned long long last_fence(const std::string& name) {
    const auto o = options_for(endpoint(url_variable));
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    if (c == nullptr || c->err) {
        if (c) redisFree(c);
        return 0;
    }
    const std::string fence = test_prefix() + "fence:" + name;
    auto* r = static_cast<redisReply*>(redisCommand(c, "GET %s", fence.c_str()));
    const unsigned long long n =
        r && r->type == REDIS_REPLY_STRING ? std::strtoull(r->str, nullptr, 10) : 0;
    if (r) freeReplyObject(r);
    redisFree(c);
    return n;
}

bool eventually_queue_length(const std::string& name, long n) {
    const auto until = clock_type::now() + must_happen;
    while (clock_type::now() < until) {
        if (queue_length(name) == n) return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(redis_server,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          url_variable}))

BOOST_AUTO_TEST_CASE(registry_builds_the_store_from_json_options) {
    auto d = default_registry().find("redis");
    BOOST_REQUIRE(d);
    BOOST_TEST(d->needs_configuration);
    auto s =
        d->create(nlohmann::json{{"url", endpoint(url_variable)}, {"key_prefix", test_prefix()}});
    auto lock = make_lock(s, test::unique_resource("registry"));
    BOOST_TEST(lock.try_lock());
    BOOST_TEST(lock.fencing_token().has_value());
    lock.unlock();
    BOOST_CHECK_THROW(d->validate_options(nlohmann::json{{"url", "redis://h"}, {"pool_size", 0}}),
                      config_error);
}

BOOST_AUTO_TEST_CASE(factory_selects_redis_for_distributed_fenced_locks) {
    const nlohmann::json doc = {
        {"strategies",
         {{"redis",
           {{"options", {{"url", endpoint(url_variable)}, {"key_prefix", test_prefix()}}}}}}}};
    strategy_registry registry;
    register_builtin_strategies(registry);
    lock_factory factory(config::parse(doc.dump()), registry);
    lock_request request;
    request.require = capability::exclusive | capability::distributed | capability::fencing |
                      capability::native_wait;
    auto lock = factory.create_lock(test::unique_resource("factory"), request);
    BOOST_TEST(lock.strategy() == "redis");
    BOOST_TEST(lock.try_lock());
    BOOST_TEST(lock.fencing_token().has_value());
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(waiter_wakes_on_release_without_waiting_for_the_ttl) {
    // With a 30 s TTL, only the release message can wake the waiter early: polling bounded by
    // the TTL would take 30 s. The measured hand-over is printed, not asserted tightly.
    const std::string name = test::unique_resource("wakeup");
    auto holder_store = shared_store();
    auto waiter_store = shared_store();
    std::vector<double> latencies;
    for (int round = 0; round < 20; ++round) {
        auto holder = make_lock(holder_store, name);
        auto waiter = make_lock(waiter_store, name);
        BOOST_REQUIRE(holder.try_lock());
        std::atomic<bool> started{false};
        clock_type::time_point acquired_at{};
        bool acquired = false;
        std::thread t([&] {
            started = true;
            acquired = waiter.try_lock_for(10s);
            acquired_at = clock_type::now();
        });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(30ms);  // let the waiter subscribe and sleep
        const auto released_at = clock_type::now();
        holder.unlock();
        t.join();
        BOOST_REQUIRE(acquired);
        latencies.push_back(
            std::chrono::duration<double, std::milli>(acquired_at - released_at).count());
        waiter.unlock();
    }
    std::sort(latencies.begin(), latencies.end());
    BOOST_TEST_MESSAGE("hand-over latency ms: p50 " << latencies[latencies.size() / 2] << ", max "
                                                    << latencies.back());
    BOOST_TEST(latencies.back() < 1000.0);
}

BOOST_AUTO_TEST_CASE(waiter_acquires_after_the_ttl_when_the_holder_dies) {
    const std::string name = test::unique_resource("holder-dies");
    const std::string url = endpoint(url_variable);
    test::byte_pipe ready;
    pid_t child = test::fork_child([&] {
        auto s = strategies::make_redis_store(options_for(url));
        auto lock = make_lock(s, name, 1500ms);
        if (!lock.try_lock()) return 2;
        ready.put('1');
        ::pause();  // killed while holding; never releases
        return 0;
    });
    BOOST_REQUIRE(ready.get(5s) == '1');
    auto waiter = make_lock(shared_store(), name);
    BOOST_TEST(!waiter.try_lock());
    ::kill(child, SIGKILL);
    const auto killed_at = clock_type::now();
    test::wait_child(child, 5s);
    BOOST_TEST(waiter.try_lock_for(10s));
    const double waited = ms_since(killed_at);
    BOOST_TEST_MESSAGE("acquired " << waited << " ms after the holder died (ttl 1500 ms)");
}

// Waiting writers are served first come, first served: each of 8 waiters is in the queue before
// the next arrives, and the grants follow that order. The TTLs are long, so that a wake-up other
// than the hand-over (a retry when the holder's TTL would end) cannot be what grants.
BOOST_AUTO_TEST_CASE(waiters_are_granted_in_arrival_order) {
    const std::string name = test::unique_resource("fifo");
    const std::string url = endpoint(url_variable);
    auto holder = make_lock(shared_store(), name, 300s);
    BOOST_REQUIRE(holder.try_lock());
    char path[] = "/tmp/locksmith-redis-fifo-XXXXXX";
    const int fd = ::mkstemp(path);
    BOOST_REQUIRE(fd >= 0);
    ::close(fd);
    std::vector<pid_t> children;
    for (int i = 0; i < 8; ++i) {
        children.push_back(test::fork_child(
            [&, i] {
                auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 300s);
                if (!mine.try_lock_for(must_happen)) return 2;
                std::ofstream(path, std::ios::app) << i << "\n";
                mine.unlock();
                return 0;
            },
            120s));
        // The next waiter arrives only once this one is in the queue.
        BOOST_REQUIRE(eventually_queue_length(name, i + 1));
    }
    holder.unlock();
    for (auto pid : children) BOOST_TEST(test::wait_child(pid, 120s) == 0);
    std::ifstream in(path);
    std::vector<int> order;
    for (int v; in >> v;) order.push_back(v);
    ::unlink(path);
    const std::vector<int> arrival = {0, 1, 2, 3, 4, 5, 6, 7};
    BOOST_TEST(order == arrival, boost::test_tools::per_element());
}

// A reader waiting behind a writer is woken by the writer's release: the release announces
// itself only while readers have marked the name, so the mark must be there. The writer's TTL is
// long, so that only the announcement can end the wait in time.
BOOST_AUTO_TEST_CASE(a_waiting_reader_wakes_on_the_writers_release) {
    const std::string name = test::unique_resource("reader_wakes");
    const std::string url = endpoint(url_variable);
    auto writer = make_lock(shared_store(), name, 300s);
    BOOST_REQUIRE(writer.try_lock());
    // lock_shared(), not a timed wait: the deadline's last attempt would hide a missed wake-up.
    const pid_t reader = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 30s);
            mine.lock_shared();
            mine.unlock_shared();
            return 0;
        },
        120s);
    const auto until = clock_type::now() + must_happen;
    while (!readers_wait(name) && clock_type::now() < until) std::this_thread::sleep_for(20ms);
    BOOST_REQUIRE(readers_wait(name));
    writer.unlock();
    BOOST_TEST(test::wait_child(reader, must_happen) == 0);
}

// A waiter killed while queued keeps its place only until its registration lapses (the holder's
// TTL plus 2 s at most): the holder here dies too (its 1 s TTL runs out), and the waiter behind
// the dead one gets the lock instead of waiting behind it for ever.
BOOST_AUTO_TEST_CASE(a_waiter_killed_while_queued_does_not_hold_up_the_next) {
    const std::string name = test::unique_resource("dead_waiter");
    const std::string url = endpoint(url_variable);
    auto holder = make_lock(shared_store(), name, 1s);
    BOOST_REQUIRE(holder.try_lock());
    const pid_t victim = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 300s);
            mine.try_lock_for(must_happen);
            return 0;
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(name, 1));
    ::kill(victim, SIGKILL);
    BOOST_TEST(test::wait_child(victim, 10s) == 128 + SIGKILL);
    // lock(), not try_lock_for(): a timed wait ends with one last plain attempt, which would
    // take the free lock past the queue and hide a dead waiter that blocks it.
    const pid_t waiter = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 30s);
            mine.lock();
            mine.unlock();
            return 0;
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(name, 2));  // behind the dead one
    BOOST_TEST(test::wait_child(waiter, must_happen) == 0);
}

// A release hands the lock to the first live waiter even when it has just died (its
// registration has not lapsed yet); that grant ends with the dead waiter's TTL, as any grant of
// a holder that died, and then the next waiter gets the lock.
BOOST_AUTO_TEST_CASE(a_lock_handed_to_a_waiter_that_died_is_reclaimed_after_its_ttl) {
    const std::string name = test::unique_resource("handed_to_dead");
    const std::string url = endpoint(url_variable);
    auto holder = make_lock(shared_store(), name, 30s);
    BOOST_REQUIRE(holder.try_lock());
    const pid_t victim = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 2s);
            mine.try_lock_for(must_happen);
            return 0;
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(name, 1));
    ::kill(victim, SIGKILL);
    BOOST_TEST(test::wait_child(victim, 10s) == 128 + SIGKILL);
    auto waiter = make_lock(shared_store(), name, 30s);
    auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    BOOST_REQUIRE(eventually_queue_length(name, 2));
    holder.unlock();
    // Handed to the dead waiter: it left the queue, the live one is still in it.
    BOOST_TEST(queue_length(name) == 1);
    auto probe = make_lock(shared_store(), name);
    BOOST_TEST(!probe.try_lock());
    BOOST_TEST(waited.get());
    BOOST_TEST(waiter.is_acquired());
    waiter.unlock();
}

// A waiter killed while queued loses its place within 3 s of its death, whatever the holder's
// TTL: a release later than that goes to the live waiter behind it at once. (The place used to
// last the holder's TTL plus 2 s, about 32 s here, and the release handed the lock to the dead
// waiter for its own 60 s TTL.) The live waiter, asleep for longer than 3 s behind the held
// lock, keeps its own place by renewing it: the release wakes it instead of freeing the lock
// while it sleeps up to a third of its TTL.
BOOST_AUTO_TEST_CASE(a_release_after_a_queued_waiter_died_goes_to_the_live_one) {
    const std::string name = test::unique_resource("dead_waiter_place");
    const std::string url = endpoint(url_variable);
    auto holder = make_lock(shared_store(), name, 30s);
    BOOST_REQUIRE(holder.try_lock());
    const pid_t victim = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 60s);
            mine.try_lock_for(must_happen);
            return 0;
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(name, 1));
    ::kill(victim, SIGKILL);
    BOOST_TEST(test::wait_child(victim, 10s) == 128 + SIGKILL);
    const pid_t waiter = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_redis_store(options_for(url)), name, 90s);
            mine.lock();  // no last plain attempt (see above): only the queue serves it
            mine.unlock();
            return 0;
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(name, 2));
    std::this_thread::sleep_for(4500ms);  // past the dead waiter's place, and the live one's 3 s
    holder.unlock();
    // A bound far below the dead waiter's 60 s TTL and the live one's 30 s sleep, not a speed.
    BOOST_TEST(test::wait_child(waiter, 10s) == 0);
}

BOOST_AUTO_TEST_CASE(fencing_tokens_increase_across_processes) {
    // 4 processes x 250 grants; each appends its token while holding the lock, so the file is in
    // grant order and must be strictly increasing.
    const std::string name = test::unique_resource("fencing");
    const std::string url = endpoint(url_variable);
    char path[] = "/tmp/locksmith-fences-XXXXXX";
    int fd = ::mkstemp(path);
    BOOST_REQUIRE(fd >= 0);
    ::close(fd);
    std::vector<pid_t> children;
    for (int p = 0; p < 4; ++p)
        children.push_back(test::fork_child(
            [&] {
                auto s = strategies::make_redis_store(options_for(url));
                auto lock = make_lock(s, name);
                for (int i = 0; i < 250; ++i) {
                    if (!lock.try_lock_for(20s)) return 2;
                    auto token = lock.fencing_token();
                    if (!token) return 3;
                    std::ofstream(path, std::ios::app) << *token << "\n";
                    lock.unlock();
                }
                return 0;
            },
            120s));
    for (auto pid : children) BOOST_TEST(test::wait_child(pid, 120s) == 0);
    std::ifstream in(path);
    std::vector<unsigned long long> tokens;
    for (unsigned long long t; in >> t;) tokens.push_back(t);
    ::unlink(path);
    BOOST_TEST(tokens.size() == 1000u);
    const bool increasing = std::adjacent_find(tokens.begin(), tokens.end(), [](auto a, auto b) {
                                return b <= a;
                            }) == tokens.end();
    BOOST_TEST(increasing);
}

BOOST_AUTO_TEST_CASE(serialized_key_continues_in_another_process) {
    const std::string name = test::unique_resource("serialized");
    const std::string url = endpoint(url_variable);
    auto s = shared_store();
    auto lock = make_lock(s, name);
    BOOST_REQUIRE(lock.try_lock());
    lock.set_auto_release(false);
    const std::string json = lock.serialize_key().dump();
    pid_t child = test::fork_child([&] {
        auto cs = strategies::make_redis_store(options_for(url));
        lock_options o;
        o.ttl = 30s;
        named_lock continued(cs, std::make_shared<key>(key::from_json(nlohmann::json::parse(json))),
                             o);
        if (!continued.is_acquired()) return 2;
        continued.release();
        return 0;
    });
    BOOST_TEST(test::wait_child(child, 10s) == 0);
    BOOST_TEST(!s->holds(*lock.owner()));
}

BOOST_AUTO_TEST_CASE(shared_locks_favour_a_waiting_writer) {
    const std::string name = test::unique_resource("rw");
    auto s = shared_store();
    auto reader1 = make_lock(s, name);
    auto reader2 = make_lock(s, name);
    auto writer = make_lock(s, name);
    BOOST_REQUIRE(reader1.try_lock_shared());
    BOOST_REQUIRE(reader2.try_lock_shared());
    BOOST_TEST(!writer.try_lock());
    reader2.unlock_shared();

    // A writer starts waiting: from then on new readers are held back.
    bool granted = false;
    std::thread t([&] { granted = writer.try_lock_for(10s); });
    std::this_thread::sleep_for(100ms);
    BOOST_TEST(!reader2.try_lock_shared());
    BOOST_TEST(reader1.try_lock_shared());  // a reader already holding may renew
    reader1.unlock_shared();
    t.join();
    BOOST_TEST(granted);  // how soon: bench/README.md §3 (hand-over latency)
    writer.unlock();
    BOOST_TEST(reader2.try_lock_shared());
    reader2.unlock_shared();
}

// The uncontended grant (plain SET NX) gets its token on first request: it must still be larger
// than the token of every earlier grant, never a leftover of the key's previous grant, and a
// holder that lost the lock must not get one.
BOOST_AUTO_TEST_CASE(fencing_token_on_request) {
    const std::string name = test::unique_resource("fence-on-request");
    auto s = shared_store();
    auto a = make_lock(s, name);
    auto b = make_lock(s, name);
    BOOST_REQUIRE(a.try_lock());
    const auto first = a.fencing_token();
    BOOST_REQUIRE(first.has_value());
    BOOST_TEST(*a.fencing_token() == *first);  // asked twice: the same grant, the same token
    a.unlock();
    BOOST_REQUIRE(b.try_lock());  // a grant that never asks for its token
    b.unlock();
    BOOST_REQUIRE(a.try_lock());  // the same key again: a new grant needs a new token
    const auto again = a.fencing_token();
    BOOST_REQUIRE(again.has_value());
    BOOST_TEST(*again > *first);
    a.unlock();

    auto lost = make_lock(s, name, 200ms);
    BOOST_REQUIRE(lost.try_lock());
    std::this_thread::sleep_for(400ms);  // expired, not refreshed
    BOOST_REQUIRE(b.try_lock());
    BOOST_CHECK_THROW(lost.fencing_token(), expired_error);
    BOOST_TEST(*b.fencing_token() > *again);
    b.unlock();
}

// A waiter whose wake-up message comes late (a network that held its bytes) learns of the
// hand-over from its next retry, which finds its own token in the lock. That is a new grant:
// its fencing token is drawn for it, above the last holder's, not the one the waiter's key kept
// from its grant before. (It was that old one: in the faults run's stall cell, a holder's write
// was refused as stale, and it was never told why: issue 25.)
BOOST_AUTO_TEST_CASE(a_hand_over_learned_from_a_retry_carries_a_new_fencing_token) {
    const std::string name = test::unique_resource("late_hand_over");
    const std::string url = endpoint(url_variable);
    test::byte_pipe go, held, release;
    const pid_t holder = test::fork_child(
        [&] {
            auto lock = make_lock(strategies::make_redis_store(options_for(url)), name);
            if (go.get(must_happen) != 'g' || !lock.try_lock() || !lock.fencing_token()) return 2;
            held.put('h');
            if (release.get(must_happen) != 'r') return 3;
            lock.unlock();
            return 0;
        },
        120s);
    // The waiter reaches the server through a proxy that can hold its bytes (after the fork:
    // the proxy is a thread). Its commands outlast the stall below.
    auto o = options_for(url);
    test::tcp_fault_proxy proxy(o.endpoint.host, o.endpoint.port);
    o.endpoint.port = proxy.port();
    o.command_timeout = 10s;
    auto waiter = make_lock(strategies::make_redis_store(o), name);
    BOOST_REQUIRE(waiter.try_lock());
    const auto first = waiter.fencing_token();
    BOOST_REQUIRE(first.has_value());
    waiter.unlock();

    go.put('g');
    BOOST_REQUIRE(held.get(must_happen) == 'h');
    const auto holders = last_fence(name);
    BOOST_REQUIRE(holders > *first);
    auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    BOOST_REQUIRE(eventually_queue_length(name, 1));
    // The release hands the lock over while the waiter's bytes are held: the message on its wake
    // channel waits in the proxy, and so does the retry it sends after its sleep (a second at
    // most, waiter_renewal), which the server answers with "you hold it" once the stall ends.
    proxy.set_mode(test::tcp_fault_proxy::mode::stall);
    release.put('r');
    BOOST_TEST(test::wait_child(holder, must_happen) == 0);
    BOOST_TEST(queue_length(name) == 0);  // handed over
    std::this_thread::sleep_for(1500ms);
    proxy.set_mode(test::tcp_fault_proxy::mode::pass);
    BOOST_REQUIRE(waited.get());
    const auto token = waiter.fencing_token();
    BOOST_REQUIRE(token.has_value());
    BOOST_TEST(*token > holders);
    // Asked again while held, "you hold it" is the same grant, with the same token.
    BOOST_TEST(waiter.try_lock());
    BOOST_TEST(waiter.fencing_token().value_or(0) == *token);
    waiter.unlock();
}

// The next owner's side of a holder whose renewal is stuck on a dead network: `hold` runs in a
// child with options that reach the server through a proxy; it takes `name` with a lease it
// renews, stalls the proxy, says 'h' on `held`, writes `marker` when it hears of the loss, and
// waits for 'g' on `granted` (the grant to the next owner). `marker` must exist by that grant,
// and the child exit with 0.
void the_stuck_holder_hears_of_the_loss_before_the_next_grant(
    const std::string& name, const std::filesystem::path& marker,
    const std::function<int(strategies::redis_options&, test::tcp_fault_proxy&, test::byte_pipe&,
                            test::byte_pipe&)>& hold) {
    const std::string url = endpoint(url_variable);
    std::filesystem::remove(marker);
    test::byte_pipe held, granted;
    const pid_t holder = test::fork_child(
        [&] {
            auto o = options_for(url);
            test::tcp_fault_proxy proxy(o.endpoint.host, o.endpoint.port);
            o.endpoint.port = proxy.port();
            return hold(o, proxy, held, granted);
        },
        120s);
    BOOST_REQUIRE(held.get(must_happen) == 'h');
    auto waiter = make_lock(shared_store(), name);
    BOOST_REQUIRE(waiter.try_lock_for(must_happen));
    const bool heard_before_the_grant = std::filesystem::exists(marker);
    BOOST_TEST(heard_before_the_grant);
    granted.put('g');
    waiter.unlock();
    BOOST_TEST(test::wait_child(holder, must_happen) == 0);
    std::filesystem::remove(marker);
}

// A holder whose renewal is stuck on a dead network (a proxy that holds every byte; its command
// timeout far longer than its lease) is told that it lost the lock by its lease's end, not when
// the renewal gives up: before the server lets the key expire and grants the next owner (issue
// 25: holders were told up to 1.3 s after that grant). The holder marks the moment it is told in
// a file, which must exist when the next owner is granted.
BOOST_AUTO_TEST_CASE(a_holder_whose_renewal_is_stuck_is_told_before_the_next_grant) {
    const std::string name = test::unique_resource("stuck_renewal");
    const auto marker = std::filesystem::temp_directory_path() / (name + ".told");
    the_stuck_holder_hears_of_the_loss_before_the_next_grant(
        name, marker, [&](auto& o, auto& proxy, auto& held, auto& granted) {
            o.command_timeout = 10s;
            lock_options lo;
            lo.ttl = 1500ms;
            lo.auto_refresh = true;
            std::atomic<int> told{0};
            lo.on_lost = [&](const error&) {
                std::ofstream{marker};
                ++told;
            };
            named_lock lock(strategies::make_redis_store(o), std::make_shared<key>(name), lo);
            if (!lock.try_lock()) return 2;
            proxy.set_mode(test::tcp_fault_proxy::mode::stall);
            held.put('h');
            if (granted.get(must_happen) != 'g') return 6;
            // Answered from the lease's clock, not after the stuck renewal.
            const auto asked = clock_type::now();
            if (lock.is_acquired()) return 3;
            if (clock_type::now() - asked > 2s) return 4;
            return told == 1 ? 0 : 5;
        });
}

// A holder that waits on loss_fd() rather than on on_lost (an event loop, `locksmith run`) hears
// of the loss as the one above does: while its renewal is stuck on a dead network (and holds the
// lock's mutex), loss_fd() answers at once, and its descriptor turns readable at the lease's end,
// before the next owner is granted (issue 25: loss_fd() waited for the stuck renewal).
BOOST_AUTO_TEST_CASE(loss_fd_turns_readable_at_the_lease_end_while_the_renewal_is_stuck) {
    const std::string name = test::unique_resource("stuck_renewal_fd");
    const auto marker = std::filesystem::temp_directory_path() / (name + ".readable");
    the_stuck_holder_hears_of_the_loss_before_the_next_grant(
        name, marker, [&](auto& o, auto& proxy, auto& held, auto& granted) {
            o.command_timeout = 30s;
            lock_options lo;
            lo.ttl = 3s;
            lo.auto_refresh = true;
            lo.on_lost = [](const error&) {};  // the descriptor must say it by itself
            named_lock lock(strategies::make_redis_store(o), std::make_shared<key>(name), lo);
            if (!lock.try_lock()) return 2;
            proxy.set_mode(test::tcp_fault_proxy::mode::stall);
            held.put('h');
            // The renewal (at a third of the TTL) is stuck in its store call by now.
            std::this_thread::sleep_for(1500ms);
            const auto asked = clock_type::now();
            const auto fd = lock.loss_fd();
            if (clock_type::now() - asked > 1s) return 3;
            if (!fd) return 4;
            if (*fd >= 0) {
                pollfd p{*fd, POLLIN, 0};
                if (::poll(&p, 1, 20'000) != 1) return 5;
            }
            std::ofstream{marker};
            if (granted.get(must_happen) != 'g') return 6;
            lock.set_auto_release(false);  // its release would wait for the stalled proxy
            return lock.is_acquired() ? 7 : 0;
        });
}

// A refresh on a dead network gives up at the lease's end, not at the store's command timeout:
// a reply after it would be of no use (issue 25).
BOOST_AUTO_TEST_CASE(a_refresh_on_a_dead_network_gives_up_at_the_lease_end) {
    const auto o = options_for(endpoint(url_variable));
    test::stuck_refresh_gives_up_at_the_lease_end(o.endpoint.host, o.endpoint.port,
                                                  [&](const test::tcp_fault_proxy& proxy) {
                                                      auto proxied = o;
                                                      proxied.endpoint.port = proxy.port();
                                                      proxied.command_timeout = 30s;
                                                      return strategies::make_redis_store(proxied);
                                                  });
}

// Renewals of different locks do not wait for each other: a renewal stuck on a dead network
// (up to its lease's end, 6 s) does not hold back the renewal of a lock on a live server, whose
// lease (1.2 s) would run out meanwhile (issue 25: one renewal thread renewed every lock).
BOOST_AUTO_TEST_CASE(a_stuck_renewal_does_not_hold_back_the_renewals_of_other_locks) {
    const std::string name = test::unique_resource("stuck_beside");
    const std::string url = endpoint(url_variable);
    // In a child: the renewal threads stay, and later cases fork.
    const pid_t holder = test::fork_child(
        [&] {
            auto o = options_for(url);
            test::tcp_fault_proxy proxy(o.endpoint.host, o.endpoint.port);
            o.endpoint.port = proxy.port();
            o.command_timeout = 30s;
            std::atomic<int> live_told{0};
            lock_options stuck_options;
            stuck_options.ttl = 6s;
            stuck_options.auto_refresh = true;
            stuck_options.on_lost = [](const error&) {};
            stuck_options.auto_release = false;
            named_lock stuck(strategies::make_redis_store(o),
                             std::make_shared<key>(name + "-stuck"), stuck_options);
            lock_options live_options;
            live_options.ttl = 1200ms;
            live_options.auto_refresh = true;
            live_options.on_lost = [&](const error&) { ++live_told; };
            named_lock live(strategies::make_redis_store(options_for(url)),
                            std::make_shared<key>(name + "-live"), live_options);
            if (!stuck.try_lock() || !live.try_lock()) return 2;
            proxy.set_mode(test::tcp_fault_proxy::mode::stall);
            // Past the stuck lock's first renewal (2 s) and most of its lease: the live lock
            // renews every 400 ms meanwhile.
            std::this_thread::sleep_for(5s);
            if (live_told != 0) return 3;
            if (!live.is_acquired()) return 4;
            auto other = make_lock(strategies::make_redis_store(options_for(url)), name + "-live");
            if (other.try_lock()) return 5;
            live.unlock();
            return 0;
        },
        120s);
    BOOST_TEST(test::wait_child(holder, must_happen) == 0);
}

BOOST_AUTO_TEST_CASE(promote_and_demote) {
    const std::string name = test::unique_resource("promote");
    auto s = shared_store();
    auto a = make_lock(s, name);
    auto b = make_lock(s, name);
    BOOST_REQUIRE(a.try_lock_shared());
    BOOST_REQUIRE(b.try_lock_shared());
    BOOST_TEST(!a.try_lock());  // another reader: the promotion fails, the read lock stays
    BOOST_TEST(a.is_acquired());
    b.unlock_shared();
    BOOST_TEST(a.try_lock());  // sole reader: promoted
    const auto writer_token = a.fencing_token();
    BOOST_TEST(!b.try_lock_shared());
    BOOST_TEST(a.try_lock_shared());  // demoted
    BOOST_TEST(b.try_lock_shared());
    BOOST_TEST(*a.fencing_token() > *writer_token);
    a.unlock_shared();
    b.unlock_shared();
}

BOOST_AUTO_TEST_CASE(refresh_extends_and_expiry_frees) {
    const std::string name = test::unique_resource("expiry");
    auto s = shared_store();
    auto a = make_lock(s, name, 300ms);
    auto b = make_lock(s, name, 300ms);
    BOOST_REQUIRE(a.try_lock());
    std::this_thread::sleep_for(200ms);
    a.refresh(1000ms);
    std::this_thread::sleep_for(200ms);
    BOOST_TEST(a.is_acquired());
    BOOST_TEST(!b.try_lock());
    std::this_thread::sleep_for(1000ms);
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(b.try_lock());
    BOOST_CHECK_THROW(a.refresh(), acquire_error);
    b.unlock();
}

BOOST_AUTO_TEST_CASE(watchdog_keeps_a_short_lock_and_reports_its_loss) {
    // In a process of its own: the renewal thread it starts here lives as long as its process,
    // and the cases after it fork (beside it, a child could hang on a lock it held).
    if (!test::running_alone()) {
        BOOST_TEST(test::run_alone_in_a_fresh_process() == 0);
        return;
    }
    const std::string name = test::unique_resource("watchdog");
    const std::string url = endpoint(url_variable);

    // The forked half runs first: the renewal thread does not survive fork(), and a child of a
    // process that already started it would never renew (core gap, see the issue note).
    // The holder is paused past its TTL: another process takes the lock, and the holder, once
    // resumed, learns that it lost it.
    test::byte_pipe ready;
    test::byte_pipe lost;
    pid_t child = test::fork_child([&] {
        auto s = strategies::make_redis_store(options_for(url));
        std::atomic<bool> was_lost{false};
        lock_options o;
        o.ttl = 1s;
        o.auto_refresh = true;
        o.on_lost = [&](const error&) { was_lost = true; };
        named_lock held(s, std::make_shared<key>(name), o);
        if (!held.try_lock()) return 2;
        ready.put('1');
        for (int i = 0; i < 200 && !was_lost; ++i) std::this_thread::sleep_for(50ms);
        if (!was_lost) return 3;
        if (held.is_acquired()) return 4;
        lost.put('L');
        return 0;
    });
    BOOST_REQUIRE(ready.get(5s) == '1');
    auto taker = make_lock(shared_store(), name);
    BOOST_TEST(!taker.try_lock_for(1500ms));  // renewed: still held after its TTL
    ::kill(child, SIGSTOP);
    BOOST_TEST(taker.try_lock_for(5s));
    ::kill(child, SIGCONT);
    BOOST_TEST((lost.get(10s) == 'L'));
    BOOST_TEST(test::wait_child(child, 10s) == 0);
    BOOST_TEST(taker.is_acquired());
    taker.unlock();

    // A 1 s lock held for 5 s stays held while the process's renewal thread refreshes it.
    {
        auto s = shared_store();
        lock_options o;
        o.ttl = 1s;
        o.auto_refresh = true;
        named_lock held(s, std::make_shared<key>(name), o);
        BOOST_REQUIRE(held.try_lock());
        auto other = make_lock(s, name);
        for (int i = 0; i < 10; ++i) {
            std::this_thread::sleep_for(500ms);
            BOOST_TEST(!other.try_lock());
        }
        BOOST_TEST(held.is_acquired());
        held.unlock();
        BOOST_TEST(other.try_lock());
        other.unlock();
    }
}

BOOST_AUTO_TEST_CASE(odd_names) {
    auto s = shared_store();
    std::string binary("a\0b\xff\x01 \n", 7);
    const std::vector<std::string> names = {
        "with spaces " + test::unique_resource(""), "new\nlines\r\n" + test::unique_resource(""),
        binary + test::unique_resource(""), std::string(max_name_length, 'x')};
    for (const auto& name : names) {
        auto a = make_lock(s, name);
        auto b = make_lock(s, name);
        BOOST_TEST(a.try_lock());
        BOOST_TEST(!b.try_lock());
        BOOST_TEST(s->status(name).held == lock_status::state::held_exclusive);
        a.unlock();
        BOOST_TEST(b.try_lock());
        b.unlock();
    }
    BOOST_CHECK_THROW(make_lock(s, std::string(max_name_length + 1, 'x')), invalid_argument_error);
    BOOST_CHECK_THROW(make_lock(s, ""), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(bad_ttls) {
    auto s = shared_store();
    const std::string name = test::unique_resource("ttl");
    BOOST_CHECK_THROW(make_lock(s, name, 0ms), invalid_argument_error);
    BOOST_CHECK_THROW(make_lock(s, name, -5ms), invalid_argument_error);
    BOOST_CHECK_THROW(make_lock(s, name, std::chrono::hours(24 * 365 * 100)),
                      invalid_argument_error);
    // The store itself refuses non-positive TTLs and takes a very long one as given.
    key k(name);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, 0ms), invalid_argument_error);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, -1ms), invalid_argument_error);
    BOOST_TEST(s->try_acquire(k, lock_mode::exclusive, std::chrono::hours(24 * 365 * 100)));
    auto st = s->status(name);
    BOOST_REQUIRE(st.remaining.has_value());
    BOOST_TEST(st.remaining->count() > 99LL * 365 * 24 * 3600 * 1000);
    s->release(k);
}

BOOST_AUTO_TEST_CASE(threads_share_one_store) {
    const std::string name = test::unique_resource("threads");
    auto s = shared_store();
    test::shared_counter counter;
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            auto lock = make_lock(s, name);
            for (int i = 0; i < 50; ++i) {
                if (!lock.try_lock_for(20s)) {
                    ++failures;
                    return;
                }
                counter.increment();
                lock.unlock();
            }
        });
    for (auto& t : threads) t.join();
    BOOST_TEST(failures == 0);
    BOOST_TEST(counter.read() == 400);
}

BOOST_AUTO_TEST_CASE(script_cache_flush_is_survived) {
    // NOSCRIPT (after SCRIPT FLUSH or a restart) makes the store reload its scripts.
    auto s = shared_store();
    auto o = options_for(endpoint(url_variable));
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    BOOST_REQUIRE(c && !c->err);
    freeReplyObject(redisCommand(c, "SCRIPT FLUSH"));
    redisFree(c);
    auto lock = make_lock(s, test::unique_resource("noscript"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
}

BOOST_AUTO_TEST_SUITE_END()

// Fault tests use private servers, so they need only redis-server installed; they run with the
// same precondition so that a machine without the servers skips them.
BOOST_AUTO_TEST_SUITE(redis_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          url_variable}))

BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_restarted) {
    const int port = test::free_port();
    test::private_server server(test::private_redis_argv(port), port);
    const std::string url = "redis://127.0.0.1:" + std::to_string(port) + "/0";
    auto s = strategies::make_redis_store(options_for(url));
    const std::string name = test::unique_resource("fault");
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());

    // A waiter is blocked (the holder's TTL is 30 s) when the server goes away.
    std::atomic<bool> waiter_failed{false};
    std::string waiter_message;
    std::thread t([&] {
        try {
            waiter.try_lock_for(20s);
        } catch (const backend_error& e) {
            waiter_failed = true;
            waiter_message = e.what();
        }
    });
    std::this_thread::sleep_for(200ms);
    const auto stopped_at = clock_type::now();
    server.stop();
    t.join();
    BOOST_TEST(waiter_failed);
    BOOST_TEST(ms_since(stopped_at) < hang_limit_ms);
    BOOST_TEST_MESSAGE("waiter: " << waiter_message);

    // The holder: refresh and release report the failure, quickly, without hanging.
    auto started = clock_type::now();
    BOOST_CHECK_THROW(holder.refresh(), backend_error);
    BOOST_CHECK_THROW(holder.release(), backend_error);
    BOOST_TEST(ms_since(started) < hang_limit_ms);

    // Back again (empty: this instance keeps no data): the same store works at once.
    server.start();
    auto fresh = make_lock(s, name);
    BOOST_TEST(fresh.try_lock());
    BOOST_TEST(fresh.fencing_token().has_value());
    fresh.unlock();
}

// A fencing token stays above every earlier one when the server loses its data, or a holder
// cut off by the loss would beat every later holder at the resource. A private server is killed
// (kill -9) while another process holds the lock: once after a snapshot (it comes back with
// that older state), once with no snapshot (it comes back empty); a grant in a third process
// must then get a larger token. A shared grant draws its token in the acquire script, an
// exclusive one in the fence script: one of each comes first after a loss.
BOOST_AUTO_TEST_CASE(fencing_tokens_keep_increasing_when_the_server_loses_its_data) {
    const int port = test::free_port();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("locksmith-redis-fence-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    auto argv = test::private_redis_argv(port);
    *(std::find(argv.begin(), argv.end(), "--dir") + 1) = dir.string();  // a snapshot of its own
    test::private_server server(argv, port);                             // stop(): kill -9
    const std::string url = "redis://127.0.0.1:" + std::to_string(port) + "/0";
    const std::string name = test::unique_resource("lost_data");
    const auto tokens_file = dir / "tokens";
    test::byte_pipe end;  // EOF ends the processes that keep their last grant
    std::vector<pid_t> keeping;

    // `grants` grants in a process of its own, exclusive and shared in turn from `shared_first`;
    // it keeps the last one when `keep` (a holder the loss cuts off). Returns the tokens.
    auto grants_in_another_process = [&](int grants, bool shared_first, bool keep) {
        std::filesystem::remove(tokens_file);
        test::byte_pipe done;
        const pid_t pid = test::fork_child(
            [&] {
                end.close_write();
                auto s = strategies::make_redis_store(options_for(url));
                std::ofstream out(tokens_file);
                for (int i = 0; i < grants; ++i) {
                    auto lock = make_lock(s, name);
                    const bool shared = (i % 2 == 1) != shared_first;
                    if (!(shared ? lock.try_lock_shared() : lock.try_lock())) return 2;
                    const auto token = lock.fencing_token();
                    if (!token) return 3;
                    out << *token << std::endl;
                    if (keep && i + 1 == grants) {
                        done.put('d');
                        (void)end.get(must_happen);
                        return 0;  // the loss took the grant: nothing to release
                    }
                    shared ? lock.unlock_shared() : lock.unlock();
                }
                done.put('d');
                return 0;
            },
            120s);
        BOOST_REQUIRE(done.get(must_happen));
        if (keep)
            keeping.push_back(pid);
        else
            BOOST_REQUIRE(test::wait_child(pid, must_happen) == 0);
        std::ifstream in(tokens_file);
        std::vector<unsigned long long> tokens;
        for (unsigned long long t; in >> t;) tokens.push_back(t);
        BOOST_REQUIRE(tokens.size() == std::size_t(grants));
        return tokens;
    };

    const auto before_snapshot = grants_in_another_process(3, false, false);
    redisContext* c = redisConnect("127.0.0.1", port);
    BOOST_REQUIRE((c != nullptr && c->err == 0));
    auto* saved = static_cast<redisReply*>(redisCommand(c, "SAVE"));
    BOOST_REQUIRE((saved != nullptr && saved->type == REDIS_REPLY_STATUS));
    freeReplyObject(saved);
    redisFree(c);
    const auto cut_off = grants_in_another_process(26, false, true);
    BOOST_REQUIRE(cut_off.front() > before_snapshot.back());

    server.stop();
    server.start();  // with the snapshot of the first three grants
    const auto after_snapshot = grants_in_another_process(1, true, false);
    BOOST_TEST(after_snapshot[0] > cut_off.back(),
               "a shared grant after a restart from an older "
               "snapshot got token "
                   << after_snapshot[0] << ", an earlier "
                   << "holder has " << cut_off.back());

    server.stop();
    std::filesystem::remove(dir / "dump.rdb");
    server.start();  // empty
    const auto after_loss = grants_in_another_process(1, false, false);
    BOOST_TEST(after_loss[0] > after_snapshot[0],
               "an exclusive grant after a restart without data "
               "got token "
                   << after_loss[0] << ", an earlier holder has " << after_snapshot[0]);
    end.close_write();
    for (const pid_t pid : keeping) BOOST_TEST(test::wait_child(pid, must_happen) == 0);
    server.stop();
    std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(hung_server_gives_timeouts_then_recovers) {
    const int port = test::free_port();
    test::private_server server(test::private_redis_argv(port), port);
    auto s = strategies::make_redis_store(
        options_for("redis://127.0.0.1:" + std::to_string(port) + "/0"));  // 1 s timeout
    const std::string name = test::unique_resource("hung");
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    server.pause();
    const auto started = clock_type::now();
    try {
        holder.refresh();
        BOOST_FAIL("a refresh against a frozen server succeeded");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "timeout");
        BOOST_TEST_MESSAGE("frozen server: " << e.what());
    }
    const double waited = ms_since(started);
    BOOST_TEST(waited >= 900.0);  // it waited for its command timeout (1 s)
    BOOST_TEST(waited < hang_limit_ms);
    server.resume();
    BOOST_TEST(holder.is_acquired());  // the grant itself survived
    holder.unlock();
    auto next = make_lock(s, name);
    BOOST_TEST(next.try_lock());
    next.unlock();
}

BOOST_AUTO_TEST_CASE(server_killed_under_load_raises_errors_not_sigpipe) {
    // Writes to a connection the server has just closed must not kill the process with SIGPIPE
    // (the application may not ignore it); they are backend_errors like any other I/O failure.
    const int port = test::free_port();
    test::private_server server(test::private_redis_argv(port), port);
    auto s = strategies::make_redis_store(
        options_for("redis://127.0.0.1:" + std::to_string(port) + "/0"));
    std::atomic<bool> stop{false};
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            auto lock = make_lock(s, test::unique_resource("sigpipe") + std::to_string(t));
            while (!stop) {
                try {
                    if (lock.try_lock()) lock.release();
                } catch (const backend_error&) {
                    ++errors;
                }
            }
        });
    std::this_thread::sleep_for(300ms);
    server.stop();
    std::this_thread::sleep_for(300ms);
    stop = true;
    for (auto& t : threads) t.join();
    BOOST_TEST(errors > 0);
}

BOOST_AUTO_TEST_CASE(wrong_password_wrong_port_unknown_host) {
    const int port = test::free_port();
    const std::string password = "correct-horse-battery";
    test::private_server server(test::private_redis_argv(port, password), port);
    const std::string host = "127.0.0.1:" + std::to_string(port);

    const std::string wrong = "Tr0ub4dor-wrong";
    try {
        strategies::make_redis_store(options_for("redis://:" + wrong + "@" + host + "/0"));
        BOOST_FAIL("a wrong password was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE("wrong password: " << e.what());
        BOOST_TEST(std::string(e.what()).find(wrong) == std::string::npos);
        BOOST_TEST(std::string(e.what()).find("***") != std::string::npos);
        BOOST_TEST(e.native_code() == "WRONGPASS");
    }
    try {
        strategies::make_redis_store(options_for("redis://" + host + "/0"));
        BOOST_FAIL("a missing password was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "NOAUTH");
    }
    auto ok = strategies::make_redis_store(options_for("redis://:" + password + "@" + host + "/3"));
    auto lock = make_lock(ok, test::unique_resource("auth"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();

    const auto started = clock_type::now();
    BOOST_CHECK_THROW(strategies::make_redis_store(options_for(
                          "redis://:" + wrong + "@127.0.0.1:" + std::to_string(test::free_port()))),
                      backend_error);
    BOOST_CHECK_THROW(
        strategies::make_redis_store(options_for("redis://no-such-host.invalid:6379")),
        backend_error);
    BOOST_TEST(ms_since(started) < hang_limit_ms);

    // Config errors about the URL never show the password either.
    try {
        strategies::redis_options::from_json({{"url", "redis://u:" + wrong + "@h:notaport/0"}});
        BOOST_FAIL("a bad port was accepted");
    } catch (const config_error& e) {
        BOOST_TEST(std::string(e.what()).find(wrong) == std::string::npos);
        BOOST_TEST(e.pointer() == "/url");
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(url_parsing) {
    auto e = strategies::parse_redis_url("redis://alice:p%40ss@example.org:6380/2");
    BOOST_TEST(e.user == "alice");
    BOOST_TEST(e.password == "p@ss");
    BOOST_TEST(e.host == "example.org");
    BOOST_TEST(e.port == 6380);
    BOOST_TEST(e.db == 2);
    BOOST_TEST(e.redacted() == "redis://alice:***@example.org:6380/2");
    // A user that is not plain is not shown: %3F read as '?' made redacted() another URL (found
    // by fuzz_redis_url).
    e = strategies::parse_redis_url("redis://a%3Fb%0A:pw@example.org");
    BOOST_TEST(e.user == "a?b\n");
    BOOST_TEST(e.redacted() == "redis://***:***@example.org:6379/0");
    BOOST_TEST(strategies::parse_redis_url(e.redacted()).host == "example.org");
    e = strategies::parse_redis_url("redis://:secret@[::1]");
    BOOST_TEST(e.host == "::1");
    BOOST_TEST(e.port == 6379);
    BOOST_TEST(e.user.empty());
    BOOST_TEST(e.password == "secret");
    e = strategies::parse_redis_url("redis://localhost");
    BOOST_TEST(e.password.empty());
    BOOST_TEST(e.db == 0);
    e = strategies::parse_redis_url("unix:///run/redis.sock?db=4");
    BOOST_TEST(e.socket_path == "/run/redis.sock");
    BOOST_TEST(e.db == 4);
    for (const char* bad : {"http://x", "redis://", "redis://h:0", "redis://h:70000", "redis://h/x",
                            "unix://relative", "rediss:/h", "redis://u:%zz@h",
                            // An IPv6 address without brackets (found by fuzz_redis_url: read as
                            // host "fe80:" on port 1, and redacted() named another endpoint).
                            "redis://fe80::1", "redis://::1:6379/0",
                            // Brackets inside the host: [[::1] was host "[::1".
                            "redis://[[::1]:6379", "redis://a]b"})
        BOOST_CHECK_THROW(strategies::parse_redis_url(bad), invalid_argument_error);
}

// --- a fake server on 127.0.0.1 for the command timeout: no redis-server needed ---

using test::fake_redis;
using test::fake_sha;

BOOST_AUTO_TEST_CASE(command_timeout_bounds_a_trickled_reply) {
    // Every reply trickles: 45 bytes, one per 200 ms, about 9 s; each byte comes well within
    // the 300 ms timeout, so only a bound on the whole command stops it. Before: the call
    // lasted the whole trickle and succeeded.
    fake_redis server([](const auto&) { return std::nullopt; }, fake_sha);
    auto options = options_for(server.url());
    options.command_timeout = 300ms;
    auto result = std::async(std::launch::async, [&] {
        try {
            strategies::make_redis_store(options);
            return std::string("no error");
        } catch (const backend_error& e) {
            return e.native_code() + ": " + e.what();
        }
    });
    // A safety net, not a speed check: well under the trickle's 9 s.
    BOOST_REQUIRE(result.wait_for(5s) == std::future_status::ready);
    const std::string outcome = result.get();
    BOOST_TEST(outcome.rfind("timeout: ", 0) == 0u, outcome);
    BOOST_TEST(!server.trickle_ended(), "the call ended only with the trickle: " << outcome);
}

BOOST_AUTO_TEST_CASE(connect_timeout_bounds_authentication) {
    // The server accepts and trickles its answer to AUTH: setting the connection up is bounded.
    fake_redis server([](const auto&) { return std::nullopt; },
                      "+" + std::string(40, 'O') + "\r\n");
    auto options = options_for(server.url(":secret-pw@"));
    options.command_timeout = 300ms;
    auto result = std::async(std::launch::async, [&] {
        try {
            strategies::make_redis_store(options);
            return std::string("no error");
        } catch (const backend_error& e) {
            return e.native_code() + ": " + e.what();
        }
    });
    BOOST_REQUIRE(result.wait_for(5s) == std::future_status::ready);
    const std::string outcome = result.get();
    BOOST_TEST(outcome.rfind("timeout: ", 0) == 0u, outcome);
    BOOST_TEST(outcome.find("secret-pw") == std::string::npos, outcome);
    BOOST_TEST(!server.trickle_ended());
}

// Whether retrying may help (backend_error::kind), with the native code kept for display:
// nobody listening is transient; a wrong password and a script the server rejects are not.
BOOST_AUTO_TEST_CASE(errors_say_whether_retrying_may_help) {
    auto error_of = [](const std::string& url) -> std::optional<backend_error> {
        try {
            strategies::make_redis_store(options_for(url));
        } catch (const backend_error& e) {
            return e;
        }
        return std::nullopt;
    };
    const auto refused = error_of("redis://127.0.0.1:" + std::to_string(test::free_port()));
    BOOST_REQUIRE(refused.has_value());
    BOOST_TEST(refused->native_code() == "errno " + std::to_string(ECONNREFUSED));
    BOOST_TEST(refused->transient(), refused->what());

    // A server that answers `command` with `reply` (an error) and anything else with a script SHA.
    auto error_on = [&](const std::string& command, const std::string& reply,
                        const std::string& userinfo = "") {
        fake_redis server(
            [&](const std::vector<std::string>& args) -> std::optional<std::string> {
                return args.at(0) == command ? reply : fake_sha;
            },
            "");
        auto e = error_of(server.url(userinfo));
        BOOST_REQUIRE(e.has_value());
        return *e;
    };
    const auto auth =
        error_on("AUTH", "-WRONGPASS invalid username-password pair\r\n", ":not-the-password@");
    BOOST_TEST(auth.native_code() == "WRONGPASS");
    BOOST_TEST((auth.kind() == error_kind::permanent), auth.what());
    const auto script =
        error_on("SCRIPT", "-ERR Error compiling script (new function): user_script:1\r\n");
    BOOST_TEST(script.native_code() == "ERR");
    BOOST_TEST((script.kind() == error_kind::permanent), script.what());
    const auto loading = error_on("SCRIPT", "-LOADING Redis is loading the dataset in memory\r\n");
    BOOST_TEST(loading.transient(), loading.what());
}

BOOST_AUTO_TEST_CASE(a_connection_that_timed_out_mid_reply_is_not_reused) {
    // SCRIPT LOAD is answered at once; the first SET gets half a reply and then trickles, the
    // next SET (on a new connection) gets +OK. Reusing the first connection would read the rest
    // of the old reply as the answer to the new command.
    std::atomic<int> sets{0};
    fake_redis server(
        [&](const std::vector<std::string>& args) -> std::optional<std::string> {
            if (args.at(0) == "SCRIPT") return fake_sha;
            if (args.at(0) == "SET" && sets++ == 0) return std::nullopt;
            if (args.at(0) == "SET") return std::string("+OK\r\n");
            return std::string(":1\r\n");  // the release script, at the end
        },
        "$20\r\n" + std::string(20, 'x') + "\r\n");
    auto options = options_for(server.url());
    options.command_timeout = 300ms;
    auto s = strategies::make_redis_store(options);
    BOOST_TEST(server.connections() == 1);
    auto first = make_lock(s, "timeout-reuse");
    BOOST_CHECK_THROW(first.try_lock(), error);
    auto second = make_lock(s, "timeout-reuse-2");
    BOOST_TEST(second.try_lock());
    BOOST_TEST(server.connections() == 2);
    BOOST_TEST(!server.trickle_ended());
}
