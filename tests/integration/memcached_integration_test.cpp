// The memcached strategy against a real memcached: the shared one from scripts/services.sh
// (LOCKSMITH_TEST_MEMCACHED) and, for fault tests, a private instance this test stops.
#define BOOST_TEST_MODULE memcached_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/memcached.hpp>

#include "integration/integration_support.hpp"
#include "strategies/memcached/sha256.hpp"
#include "support/child_process.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* servers_variable = "LOCKSMITH_TEST_MEMCACHED";

// Fixed at start-up, so that forked children (which compute nothing anew) share it.
const std::string test_prefix = "locksmith-it:" + std::to_string(::getpid()) + ":";

strategies::memcached_options options_for(const std::string& servers) {
    strategies::memcached_options o;
    o.servers = strategies::parse_memcached_servers(servers);
    o.key_prefix = test_prefix;
    o.connect_timeout = 500ms;
    o.command_timeout = 1000ms;
    return o;
}

std::shared_ptr<store> shared_store() {
    return strategies::make_memcached_store(options_for(endpoint(servers_variable)));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name,
                     std::chrono::milliseconds ttl = 30s) {
    lock_options o;
    o.ttl = ttl;
    o.retry.initial = std::chrono::microseconds(200);
    o.retry.max = std::chrono::microseconds(5000);
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memcached_server,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          servers_variable}))

BOOST_AUTO_TEST_CASE(registry_builds_the_store_from_json_options) {
    auto d = default_registry().find("memcached");
    BOOST_REQUIRE(d);
    BOOST_TEST(d->needs_configuration);
    auto s = d->create(nlohmann::json{{"servers", endpoint(servers_variable)}});
    auto lock = make_lock(s, test::unique_resource("registry"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    BOOST_CHECK_THROW(d->validate_options(nlohmann::json{{"servers", "h:0"}}), config_error);
    BOOST_CHECK_THROW(d->validate_options(nlohmann::json{{"servers", "h"}, {"key_prefix", "a b"}}),
                      config_error);
}

BOOST_AUTO_TEST_CASE(mutual_exclusion_across_processes) {
    const std::string name = test::unique_resource("mutex");
    const std::string servers = endpoint(servers_variable);
    test::shared_counter counter;
    std::vector<pid_t> children;
    for (int p = 0; p < 4; ++p)
        children.push_back(test::fork_child(
            [&] {
                auto s = strategies::make_memcached_store(options_for(servers));
                auto lock = make_lock(s, name);
                for (int i = 0; i < 200; ++i) {
                    if (!lock.try_lock_for(20s)) return 2;
                    counter.increment();
                    lock.unlock();
                }
                return 0;
            },
            120s));
    for (auto pid : children) BOOST_TEST(test::wait_child(pid, 120s) == 0);
    BOOST_TEST(counter.read() == 800);
}

BOOST_AUTO_TEST_CASE(waiter_acquires_after_the_ttl_when_the_holder_dies) {
    const std::string name = test::unique_resource("holder-dies");
    const std::string servers = endpoint(servers_variable);
    test::byte_pipe ready;
    pid_t child = test::fork_child([&] {
        auto s = strategies::make_memcached_store(options_for(servers));
        auto lock = make_lock(s, name, 1000ms);
        if (!lock.try_lock()) return 2;
        ready.put('1');
        ::pause();
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
    BOOST_TEST_MESSAGE("acquired " << waited << " ms after the holder died (ttl 1 s, kept 2-3 s)");
    // The store asks for ceil(ttl) + 1 s because memcached's clock ticks in whole seconds.
    BOOST_TEST(waited < 3500.0);
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(refresh_and_release_act_only_on_our_token) {
    const std::string name = test::unique_resource("token");
    auto s = shared_store();
    auto a = make_lock(s, name, 2s);
    auto b = make_lock(s, name, 2s);
    BOOST_REQUIRE(a.try_lock());
    BOOST_TEST(!b.try_lock());
    b.unlock();  // not ours: no effect
    BOOST_TEST(a.is_acquired());
    BOOST_CHECK_THROW(b.refresh(), acquire_error);
    a.refresh(5s);
    BOOST_TEST(a.is_acquired());
    a.release();
    BOOST_TEST(b.try_lock());
    b.unlock();
}

BOOST_AUTO_TEST_CASE(serialized_key_continues_in_another_process) {
    const std::string name = test::unique_resource("serialized");
    const std::string servers = endpoint(servers_variable);
    auto s = shared_store();
    auto lock = make_lock(s, name);
    BOOST_REQUIRE(lock.try_lock());
    lock.set_auto_release(false);
    const std::string json = lock.serialize_key().dump();
    pid_t child = test::fork_child([&] {
        auto cs = strategies::make_memcached_store(options_for(servers));
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

BOOST_AUTO_TEST_CASE(watchdog_keeps_a_short_lock_and_reports_its_loss) {
    const std::string name = test::unique_resource("watchdog");
    const std::string servers = endpoint(servers_variable);
    // The forked half runs first: the renewal thread does not survive fork(), and a child of a
    // process that already started it would never renew (core gap, see the issue note).
    test::byte_pipe ready;
    test::byte_pipe lost;
    pid_t child = test::fork_child([&] {
        auto s = strategies::make_memcached_store(options_for(servers));
        std::atomic<bool> was_lost{false};
        lock_options o;
        o.ttl = 1s;
        o.auto_refresh = true;
        o.on_lost = [&](const error&) { was_lost = true; };
        named_lock held(s, std::make_shared<key>(name), o);
        if (!held.try_lock()) return 2;
        ready.put('1');
        for (int i = 0; i < 300 && !was_lost; ++i) std::this_thread::sleep_for(50ms);
        if (!was_lost) return 3;
        if (held.is_acquired()) return 4;
        lost.put('L');
        return 0;
    });
    BOOST_REQUIRE(ready.get(5s) == '1');
    auto taker = make_lock(shared_store(), name);
    BOOST_TEST(!taker.try_lock_for(4s));  // renewed: still held long after its TTL
    ::kill(child, SIGSTOP);
    BOOST_TEST(taker.try_lock_for(6s));  // the item lives 2-3 s after the last renewal
    ::kill(child, SIGCONT);
    BOOST_TEST((lost.get(10s) == 'L'));
    BOOST_TEST(test::wait_child(child, 10s) == 0);
    BOOST_TEST(taker.is_acquired());
    taker.unlock();

    // In this process: a 1 s lock held for 5 s stays held.
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

BOOST_AUTO_TEST_CASE(odd_names) {
    auto s = shared_store();
    std::string binary("a\0b\xff\x01 \n", 7);
    const std::vector<std::string> names = {
        "with spaces " + test::unique_resource(""), "new\nlines\r\n" + test::unique_resource(""),
        binary + test::unique_resource(""), "#looks-hashed" + test::unique_resource(""),
        std::string(max_name_length, 'x')};
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
}

BOOST_AUTO_TEST_CASE(bad_ttls) {
    auto s = shared_store();
    const std::string name = test::unique_resource("ttl");
    BOOST_CHECK_THROW(make_lock(s, name, 0ms), invalid_argument_error);
    BOOST_CHECK_THROW(make_lock(s, name, -5ms), invalid_argument_error);
    BOOST_CHECK_THROW(make_lock(s, name, std::chrono::hours(24 * 365 * 100)),
                      invalid_argument_error);
    auto short_lived = make_lock(s, name, 999ms);
    BOOST_CHECK_THROW(short_lived.try_lock(), invalid_argument_error);
    BOOST_TEST(!short_lived.held_mode().has_value());
    key k(name);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, std::chrono::hours(24 * 365 * 100)),
                      invalid_argument_error);
    // Above 30 days memcached reads expiries as Unix times; the store converts.
    auto long_lived = make_lock(s, name, std::chrono::hours(24 * 300));
    BOOST_TEST(long_lived.try_lock());
    BOOST_TEST(long_lived.is_acquired());
    long_lived.unlock();
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memcached_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          servers_variable}))

BOOST_AUTO_TEST_CASE(server_stopped_while_held_then_restarted) {
    const int port = test::free_port();
    test::private_server server(test::private_memcached_argv(port), port);
    auto s = strategies::make_memcached_store(options_for("127.0.0.1:" + std::to_string(port)));
    const std::string name = test::unique_resource("fault");
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());

    std::atomic<bool> waiter_failed{false};
    std::thread t([&] {
        try {
            waiter.try_lock_for(20s);
        } catch (const backend_error&) {
            waiter_failed = true;
        }
    });
    std::this_thread::sleep_for(200ms);
    const auto stopped_at = clock_type::now();
    server.stop();
    t.join();
    BOOST_TEST(waiter_failed);
    BOOST_TEST(ms_since(stopped_at) < 3000.0);

    const auto started = clock_type::now();
    BOOST_CHECK_THROW(holder.refresh(), backend_error);
    BOOST_CHECK_THROW(holder.release(), backend_error);
    BOOST_TEST(ms_since(started) < 3000.0);

    server.start();
    // A restart dropped every lock (documented): the name is free again.
    auto fresh = make_lock(s, name);
    BOOST_TEST(fresh.try_lock());
    fresh.unlock();
}

BOOST_AUTO_TEST_CASE(hung_server_gives_timeouts_then_recovers) {
    const int port = test::free_port();
    test::private_server server(test::private_memcached_argv(port), port);
    auto s = strategies::make_memcached_store(options_for("127.0.0.1:" + std::to_string(port)));
    const std::string name = test::unique_resource("hung");
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    server.pause();
    const auto started = clock_type::now();
    BOOST_CHECK_THROW(holder.refresh(), backend_error);
    const double waited = ms_since(started);
    BOOST_TEST_MESSAGE("frozen server: refresh failed after " << waited << " ms (timeout 1000)");
    BOOST_TEST(waited < 2500.0);
    server.resume();
    BOOST_TEST(holder.is_acquired());
    holder.unlock();
    auto next = make_lock(s, name);
    BOOST_TEST(next.try_lock());
    next.unlock();
}

BOOST_AUTO_TEST_CASE(wrong_port_and_unknown_host) {
    const auto started = clock_type::now();
    BOOST_CHECK_THROW(strategies::make_memcached_store(
                          options_for("127.0.0.1:" + std::to_string(test::free_port()))),
                      backend_error);
    BOOST_CHECK_THROW(strategies::make_memcached_store(options_for("no-such-host.invalid:11211")),
                      backend_error);
    BOOST_TEST(ms_since(started) < 5000.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(server_list_parsing) {
    auto s = strategies::parse_memcached_servers("a:1, b ,[::1]:3");
    BOOST_REQUIRE(s.size() == 3u);
    BOOST_TEST(s[0].first == "a");
    BOOST_TEST(s[0].second == 1);
    BOOST_TEST(s[1].second == 11211);
    BOOST_TEST(s[2].first == "::1");
    for (const char* bad : {"", "a:", "a:x", "a:70000", ",", "[::1"})
        BOOST_CHECK_THROW(strategies::parse_memcached_servers(bad), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(sha256_matches_the_standard_vectors) {
    using strategies::memcached_detail::sha256_hex;
    BOOST_TEST(sha256_hex("") ==
               "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    BOOST_TEST(sha256_hex("abc") ==
               "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    BOOST_TEST(sha256_hex(std::string(1000000, 'a')) ==
               "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
