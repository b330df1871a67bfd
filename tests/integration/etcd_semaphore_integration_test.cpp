// SPDX-License-Identifier: MIT
// Counting semaphores on the etcd strategy (issue 27) against the etcd of scripts/services.sh
// (LOCKSMITH_TEST_ETCD) and, for the outage, a private etcd this test stops and starts: permits
// are keys under their holders' leases, the first `limit` by create revision hold; each case
// names the path it guards (tests/mutants/faults.txt). Another client's keys are written and
// deleted with etcdctl.
#define BOOST_TEST_MODULE etcd_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/etcd.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using locksmith::test::ms_since;
using locksmith::test::ready;
using locksmith::test::wait_in_thread;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* endpoint_variable = "LOCKSMITH_TEST_ETCD";
const auto must_happen = test::patience(60s);  // safety net only

// Fixed at start-up, so that forked children share it.
const std::string test_prefix = "locksmith-sem-it/" + std::to_string(::getpid()) + "/";

std::shared_ptr<store> store_for(const std::string& endpoints) {
    strategies::etcd_options o;
    o.endpoints = {endpoints};
    o.prefix = test_prefix;
    o.dial_timeout = 500ms;
    o.request_timeout = 2s;
    return strategies::make_etcd_store(o);
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(endpoint_variable));
}

named_semaphore make_permit(std::shared_ptr<store> s, const std::string& name, std::uint32_t limit,
                            std::chrono::milliseconds ttl = 30s) {
    auto k = std::make_shared<key>(name);
    k->set_limit(limit);
    lock_options o;
    o.ttl = ttl;
    o.auto_refresh = false;
    return named_semaphore(std::move(s), std::move(k), o);
}

// etcdctl against `endpoints`; its exit status.
int etcdctl(const std::string& endpoints, const std::string& arguments) {
    return std::system(
        ("etcdctl --endpoints=" + endpoints + " " + arguments + " >/dev/null 2>&1").c_str());
}

// The permit keys of `name`, oldest first, as etcdctl sees them.
std::vector<std::string> permit_keys(const std::string& endpoints, const std::string& name) {
    const auto dir = strategies::etcd_permit_queue(test_prefix, name);
    const std::string command = "etcdctl --endpoints=" + endpoints + " get --prefix --keys-only " +
                                "--sort-by=CREATE --order=ASCEND '" + dir + "' 2>/dev/null";
    std::vector<std::string> keys;
    FILE* p = ::popen(command.c_str(), "r");
    if (p == nullptr) return keys;
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
        std::string k(line);
        while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
        if (!k.empty()) keys.push_back(k);
    }
    ::pclose(p);
    return keys;
}

bool eventually_keys(const std::string& endpoints, const std::string& name, std::size_t n) {
    const auto until = clock_type::now() + must_happen;
    while (clock_type::now() < until) {
        if (permit_keys(endpoints, name).size() == n) return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(etcd_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          endpoint_variable}))

// Guards: the first `limit` keys hold (grant beyond the limit); the kept limit; status.
BOOST_AUTO_TEST_CASE(the_limit_is_kept_with_the_name) {
    const std::string name = test::unique_resource("three");
    const auto url = endpoint(endpoint_variable);
    auto s = shared_store();
    BOOST_TEST(has(s->capabilities(), capability::counting));
    auto a = make_permit(s, name, 3), b = make_permit(s, name, 3), c = make_permit(s, name, 3),
         d = make_permit(s, name, 3);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(c.try_acquire());
    BOOST_TEST(!d.try_acquire());
    BOOST_TEST(a.try_acquire());                      // held already
    BOOST_TEST(permit_keys(url, name).size() == 3u);  // the refused try left nothing
    auto st = s->status(name);
    BOOST_TEST(st.limit.value_or(0) == 3u);
    BOOST_TEST(st.permits_held.value_or(0) == 3u);
    BOOST_TEST(st.held == lock_status::state::held_exclusive);
    // Fencing tokens: create revisions, ordered.
    BOOST_TEST(a.fencing_token().value_or(0) < b.fencing_token().value_or(0));
    // Another limit is refused, naming both; nothing of it is left.
    // A limit beyond what a waiter reads (or watches) at once: refused, naming it.
    auto huge = make_permit(shared_store(), name, 1001);
    BOOST_CHECK_THROW((void)huge.try_acquire(), invalid_argument_error);
    auto other = make_permit(shared_store(), name, 4);
    try {
        (void)other.try_acquire();
        BOOST_FAIL("a second limit was accepted");
    } catch (const invalid_argument_error& e) {
        const std::string text = e.what();
        BOOST_TEST(text.find("limit of 3") != std::string::npos, text);
        BOOST_TEST(text.find("asks for 4") != std::string::npos, text);
    }
    BOOST_TEST(permit_keys(url, name).size() == 3u);
    b.release();
    BOOST_TEST(!b.is_acquired());
    BOOST_TEST(s->status(name).held == lock_status::state::free);
    BOOST_TEST(d.try_acquire());
    // A lock of the same name is another object.
    named_lock lock(s, std::make_shared<key>(name));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    a.release();
    c.release();
    d.release();
    BOOST_TEST(permit_keys(url, name).empty());
    // The limit stays with the name (Curator's rule): a later owner with another limit is refused
    // until an administrator deletes the key.
    BOOST_CHECK_THROW((void)other.try_acquire(), invalid_argument_error);
    BOOST_TEST(etcdctl(url, "del '" + strategies::etcd_permit_limit_key(test_prefix, name) + "'") ==
               0);
    BOOST_TEST(other.try_acquire());
    other.release();
}

// Guards: the first waiter's wake-up on any holder's release, and the grant's announcement to
// the waiter behind it (which watches only the key before its own). Waiters are served in order.
// Beside the kit's counting_waiters_are_served_in_turn (order, and none starved within 20 s):
// each waiter's key is seen queued before the next starts, and a release wakes the waiter
// within 2 s: a missed wake-up still ends at the waiter's next keep-alive, within the kit's 20 s.
BOOST_AUTO_TEST_CASE(waiters_are_served_in_order_whichever_holder_releases) {
    const std::string name = test::unique_resource("order");
    const auto url = endpoint(endpoint_variable);
    auto h1 = make_permit(shared_store(), name, 2), h2 = make_permit(shared_store(), name, 2);
    BOOST_REQUIRE(h1.try_acquire());
    BOOST_REQUIRE(h2.try_acquire());
    auto w1 = make_permit(shared_store(), name, 2), w2 = make_permit(shared_store(), name, 2),
         w3 = make_permit(shared_store(), name, 2);
    auto f1 = wait_in_thread(w1, must_happen);
    BOOST_REQUIRE(eventually_keys(url, name, 3));
    auto f2 = wait_in_thread(w2, must_happen);
    BOOST_REQUIRE(eventually_keys(url, name, 4));
    auto f3 = wait_in_thread(w3, must_happen);
    BOOST_REQUIRE(eventually_keys(url, name, 5));
    // A waiter behind them that gives up: its key goes, which lets nobody in.
    auto late = make_permit(shared_store(), name, 2);
    BOOST_TEST(!late.try_acquire_for(300ms));
    BOOST_REQUIRE(eventually_keys(url, name, 5));
    std::this_thread::sleep_for(200ms);  // every waiter watches by now (not a check)
    BOOST_TEST(!ready(f1, 0ms));
    // The first holder (not the key just before the waiter's) releases: the first waiter comes
    // in.
    auto start = clock_type::now();
    h1.release();
    BOOST_REQUIRE(ready(f1, 5s));
    BOOST_TEST(f1.get() == "granted");
    BOOST_TEST(ms_since(start) < 2000, "granted " << ms_since(start) << " ms after the release");
    BOOST_TEST(!ready(f2, 200ms));
    // The other holder releases while w1 holds: w2, which watched w1, is the first waiter now.
    start = clock_type::now();
    h2.release();
    BOOST_REQUIRE(ready(f2, 5s));
    BOOST_TEST(f2.get() == "granted");
    BOOST_TEST(ms_since(start) < 2000, "granted " << ms_since(start) << " ms after the release");
    BOOST_TEST(!ready(f3, 200ms));
    BOOST_TEST(w1.is_acquired());
    w2.release();
    BOOST_REQUIRE(ready(f3, 5s));
    BOOST_TEST(f3.get() == "granted");
    w1.release();
    w3.release();
}

// Guards: crash safety (the permit dies with its lease). A holder process killed with SIGKILL:
// its permit comes back after its lease, to a waiter in another process that waited meanwhile.
BOOST_AUTO_TEST_CASE(a_killed_holders_permit_comes_back_after_its_lease) {
    const std::string name = test::unique_resource("killed");
    const auto url = endpoint(endpoint_variable);
    test::byte_pipe ready_pipe;
    pid_t holder = test::fork_child([&]() -> int {
        auto permit = make_permit(store_for(url), name, 1, 2s);
        if (!permit.try_acquire()) return 1;
        ready_pipe.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready_pipe.close_write();
    BOOST_REQUIRE_MESSAGE(ready_pipe.get(30s).has_value(), "the holder did not take its permit");
    auto mine = make_permit(shared_store(), name, 1);
    auto f = wait_in_thread(mine, must_happen);
    BOOST_REQUIRE(eventually_keys(url, name, 2));
    const auto killed = clock_type::now();
    ::kill(holder, SIGKILL);
    test::wait_child(holder, 30s);
    BOOST_REQUIRE(ready(f, must_happen));
    BOOST_TEST(f.get() == "granted");
    const auto after = ms_since(killed);
    BOOST_TEST_MESSAGE("granted " << after << " ms after the kill (lease 2 s)");
    BOOST_TEST(after < 10000);
    BOOST_TEST(mine.is_acquired());
    mine.release();
}

// Guards: the refresh's check of the key, and holds(). Another client deletes a holder's key
// (its lease lives on): a waiter takes its place, and the victim learns at its next refresh or
// is_acquired that it lost the permit, so never more than `limit` holders believe they hold once
// they look. Keys another client creates in the queue take places (fewer holders, never more).
BOOST_AUTO_TEST_CASE(another_clients_keys_never_make_more_than_limit_holders) {
    const std::string name = test::unique_resource("hostile");
    const auto url = endpoint(endpoint_variable);
    auto a = make_permit(shared_store(), name, 2), b = make_permit(shared_store(), name, 2);
    BOOST_REQUIRE(a.try_acquire());
    BOOST_REQUIRE(b.try_acquire());
    auto w = make_permit(shared_store(), name, 2);
    auto f = wait_in_thread(w, must_happen);
    BOOST_REQUIRE(eventually_keys(url, name, 3));
    const auto keys = permit_keys(url, name);
    BOOST_REQUIRE(etcdctl(url, "del '" + keys[0] + "'") == 0);  // a's key
    BOOST_REQUIRE(ready(f, 5s));
    BOOST_TEST(f.get() == "granted");
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(b.is_acquired());
    BOOST_TEST(w.is_acquired());
    // The victim's refresh says it lost the permit too (keep-alive alone would say yes).
    auto victim = make_permit(shared_store(), name, 2);
    auto third = make_permit(shared_store(), name, 2);
    b.release();
    BOOST_REQUIRE(victim.try_acquire());
    BOOST_REQUIRE(etcdctl(url, "del '" + permit_keys(url, name)[1] + "'") == 0);  // victim's
    BOOST_TEST(third.try_acquire());
    BOOST_CHECK_THROW(victim.refresh(), error);
    int believe = 0;
    for (auto* p : {&w, &victim, &third}) believe += p->held() && p->is_acquired();
    BOOST_TEST(believe <= 2);
    third.release();
    w.release();
    // A key created by another client (no lease) takes a place: one permit of two is left.
    const auto dir = strategies::etcd_permit_queue(test_prefix, name);
    BOOST_REQUIRE(etcdctl(url, "put '" + dir + "planted' x") == 0);
    auto p1 = make_permit(shared_store(), name, 2), p2 = make_permit(shared_store(), name, 2);
    BOOST_TEST(p1.try_acquire());
    BOOST_TEST(!p2.try_acquire());
    p1.release();
    BOOST_REQUIRE(etcdctl(url, "del '" + dir + "planted'") == 0);
    // A limit key that is not a limit: refused as another program's key, never overwritten.
    const auto limit_key = strategies::etcd_permit_limit_key(test_prefix, name);
    BOOST_REQUIRE(etcdctl(url, "put '" + limit_key + "' 'not a number'") == 0);
    try {
        (void)p1.try_acquire();
        BOOST_FAIL("a foreign limit key was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "foreign");
    }
    // Its own limit in another form: refused the same way, never a loop.
    BOOST_REQUIRE(etcdctl(url, "put '" + limit_key + "' 02") == 0);
    try {
        (void)p1.try_acquire();
        BOOST_FAIL("a foreign limit key was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "foreign");
    }
    BOOST_TEST(permit_keys(url, name).empty());
    BOOST_REQUIRE(etcdctl(url, "del '" + limit_key + "'") == 0);
}

// Guards: a forked child's copy of a permit releases nothing (the lease is the parent's).
BOOST_AUTO_TEST_CASE(a_forked_childs_release_leaves_the_parents_permit) {
    const std::string name = test::unique_resource("fork");
    auto s = shared_store();
    auto holder = make_permit(s, name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    pid_t child = test::fork_child([&]() -> int {
        holder.set_auto_release(false);
        holder.release();
        return 0;
    });
    BOOST_TEST(test::wait_child(child) == 0);
    BOOST_TEST(holder.is_acquired());
    auto probe = make_permit(shared_store(), name, 1);
    BOOST_TEST(!probe.try_acquire());
    holder.release();
}

BOOST_AUTO_TEST_SUITE_END()

// A private etcd, stopped and started again while a permit is held and another owner waits:
// etcd keeps leases across a restart, so the holder still holds after it, and the waiter (which
// rides the outage out) gets the permit at the holder's release.
BOOST_AUTO_TEST_CASE(server_restarted_while_a_permit_is_held_and_a_waiter_waits) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    const int port = test::free_port();
    const int peer = test::free_port();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("locksmith-etcd-sem-it-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const std::string client = "http://127.0.0.1:" + std::to_string(port);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    test::private_server server(
        {"etcd", "--name", "semit", "--data-dir", dir.string(), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer_url,
         "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "semit=" + peer_url,
         "--log-level", "error"},
        port, SIGTERM);
    std::shared_ptr<store> s;
    for (int i = 0; i < 100 && !s; ++i) {  // etcd listens a moment before it serves
        try {
            s = store_for(client);
        } catch (const backend_error&) {
            std::this_thread::sleep_for(100ms);
        }
    }
    BOOST_REQUIRE(s);
    const auto name = test::unique_resource("outage");
    auto holder = make_permit(s, name, 1);
    auto waiter = make_permit(store_for(client), name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    auto waited = wait_in_thread(waiter, must_happen);
    BOOST_REQUIRE(eventually_keys(client, name, 2));
    server.stop();
    server.start();
    bool held_after = false;
    for (int i = 0; i < 100; ++i) {
        try {
            held_after = holder.is_acquired();
            break;
        } catch (const backend_error&) {
            std::this_thread::sleep_for(100ms);  // still starting
        }
    }
    BOOST_TEST(held_after);
    BOOST_TEST(!ready(waited, 500ms));  // one permit: the waiter still waits
    holder.release();
    BOOST_REQUIRE(ready(waited, must_happen));
    BOOST_TEST(waited.get() == "granted");
    waiter.release();
    server.stop();
    std::filesystem::remove_all(dir);
}
