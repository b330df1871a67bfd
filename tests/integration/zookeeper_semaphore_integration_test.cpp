// SPDX-License-Identifier: MIT
// Counting semaphores on the zookeeper strategy (issue 27) against the ZooKeeper of
// scripts/services.sh (LOCKSMITH_TEST_ZOOKEEPER) and, for the outage, a private one this test
// stops and starts: permits are ephemeral sequential nodes, the first `limit` by sequence hold;
// each case names the path it guards (tests/mutants/faults.txt). Another client's nodes are
// made and deleted through a session of the test's own.
#define BOOST_TEST_MODULE zookeeper_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <zookeeper.h>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/zookeeper.hpp>

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
using locksmith::test::make_permit;
using locksmith::test::ms_since;
using locksmith::test::ready;
using locksmith::test::wait_in_thread;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* hosts_variable = "LOCKSMITH_TEST_ZOOKEEPER";
const auto must_happen = test::patience(60s);  // safety net only
const std::string test_root = "/locksmith-sem-it-" + std::to_string(::getpid());

std::shared_ptr<store> store_for(const std::string& hosts,
                                 std::chrono::milliseconds session_timeout = 4s) {
    strategies::zookeeper_options o;
    o.hosts = hosts;
    o.session_timeout = session_timeout;
    o.connect_timeout = 2s;
    o.root = test_root;
    return strategies::make_zookeeper_store(o);
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(hosts_variable));
}

// A session of the test's own: another client of the ensemble.
class admin {
  public:
    explicit admin(const std::string& hosts) {
        zoo_set_debug_level(ZooLogLevel(0));
        zh_ = zookeeper_init(hosts.c_str(), nullptr, 10000, nullptr, nullptr, 0);
        BOOST_REQUIRE(zh_);
        const auto until = clock_type::now() + must_happen;
        while (zoo_state(zh_) != ZOO_CONNECTED_STATE && clock_type::now() < until)
            std::this_thread::sleep_for(10ms);
    }
    ~admin() { zookeeper_close(zh_); }
    admin(const admin&) = delete;
    admin& operator=(const admin&) = delete;
    // The permit nodes of `name`, in queue order (by sequence, the last 10 characters).
    std::vector<std::string> permits(const std::string& name) {
        const auto parent = strategies::zookeeper_permit_parent(test_root, name);
        std::vector<std::string> paths;
        String_vector children{};
        if (zoo_get_children(zh_, parent.c_str(), 0, &children) != ZOK) return paths;
        for (int i = 0; i < children.count; ++i) paths.push_back(parent + "/" + children.data[i]);
        deallocate_String_vector(&children);
        std::sort(paths.begin(), paths.end(), [](const std::string& x, const std::string& y) {
            return x.substr(x.size() - 10) < y.substr(y.size() - 10);
        });
        return paths;
    }
    bool eventually_permits(const std::string& name, std::size_t n) {
        const auto until = clock_type::now() + must_happen;
        while (clock_type::now() < until) {
            if (permits(name).size() == n) return true;
            std::this_thread::sleep_for(5ms);
        }
        return false;
    }
    int remove(const std::string& path) { return zoo_delete(zh_, path.c_str(), -1); }
    int create(const std::string& path, const std::string& data) {
        return zoo_create(zh_, path.c_str(), data.data(), int(data.size()), &ZOO_OPEN_ACL_UNSAFE, 0,
                          nullptr, 0);
    }

  private:
    zhandle_t* zh_ = nullptr;
};

// A private ZooKeeper, started and stopped with scripts/services.sh in a folder and on a port of
// this test's own.
class private_zookeeper {
  public:
    private_zookeeper()
        : dir_("/tmp/locksmith-zk-sem-" + std::to_string(::getpid())), port_(test::free_port()) {
        start();
    }
    ~private_zookeeper() {
        run("stop");
        std::system(("rm -rf '" + dir_ + "'").c_str());
    }
    std::string hosts() const { return "127.0.0.1:" + std::to_string(port_); }
    void start() { BOOST_REQUIRE_MESSAGE(run("start") == 0, "could not start zookeeper"); }
    void stop() { BOOST_REQUIRE(run("stop") == 0); }

  private:
    int run(const char* what) const {
        const std::string cmd =
            "LOCKSMITH_SERVICES_DIR='" + dir_ +
            "' LOCKSMITH_SERVICES=zookeeper LOCKSMITH_ZOOKEEPER_PORT=" + std::to_string(port_) +
            " '" + test::services_script() + "' " + what + " >/dev/null 2>&1";
        return std::system(cmd.c_str());
    }
    std::string dir_;
    int port_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(zk_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

// Guards: the first `limit` nodes hold (grant beyond the limit); the kept limit; status.
BOOST_AUTO_TEST_CASE(the_limit_is_kept_with_the_name) {
    const std::string name = test::unique_resource("three");
    admin a(endpoint(hosts_variable));
    auto s = shared_store();
    BOOST_TEST(has(s->capabilities(), capability::counting));
    auto p1 = make_permit(s, name, 3), p2 = make_permit(s, name, 3), p3 = make_permit(s, name, 3),
         p4 = make_permit(s, name, 3);
    BOOST_TEST(p1.try_acquire());
    BOOST_TEST(p2.try_acquire());
    BOOST_TEST(p3.try_acquire());
    BOOST_TEST(!p4.try_acquire());
    BOOST_TEST(p1.try_acquire());              // held already
    BOOST_TEST(a.permits(name).size() == 3u);  // the refused try left nothing
    auto st = s->status(name);
    BOOST_TEST(st.limit.value_or(0) == 3u);
    BOOST_TEST(st.permits_held.value_or(0) == 3u);
    BOOST_TEST(st.held == lock_status::state::held_exclusive);
    BOOST_TEST(p1.fencing_token().value_or(0) < p2.fencing_token().value_or(0));
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
    BOOST_TEST(a.permits(name).size() == 3u);
    p2.release();
    BOOST_TEST(!p2.is_acquired());
    BOOST_TEST(s->status(name).held == lock_status::state::free);
    BOOST_TEST(p4.try_acquire());
    // A lock of the same name is another object.
    named_lock lock(s, std::make_shared<key>(name));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    p1.release();
    p3.release();
    p4.release();
    BOOST_TEST(a.permits(name).empty());
    // The limit stays with the name until an administrator deletes its node.
    BOOST_CHECK_THROW((void)other.try_acquire(), invalid_argument_error);
    const auto limit_node = strategies::zookeeper_permit_limit_node(test_root, name);
    BOOST_TEST(a.remove(limit_node) == ZOK);
    BOOST_TEST(other.try_acquire());
    other.release();
    // Data there that is not a limit: another program's node, refused, never overwritten.
    BOOST_TEST(a.remove(limit_node) == ZOK);
    BOOST_TEST(a.create(limit_node, "not a number") == ZOK);
    try {
        (void)other.try_acquire();
        BOOST_FAIL("a foreign limit node was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "foreign");
    }
    BOOST_TEST(a.remove(limit_node) == ZOK);
}

// Guards: the first waiter's wake-up on any holder's release, and the grant's announcement to
// the waiter behind it (which watches only the node before its own). Waiters are served in order.
// Beside the kit's counting_waiters_are_served_in_turn (order, and none starved within 20 s):
// each waiter's node is seen queued before the next starts, and a release wakes the waiter
// within 2 s (its watch, not a later look).
BOOST_AUTO_TEST_CASE(waiters_are_served_in_order_whichever_holder_releases) {
    const std::string name = test::unique_resource("order");
    admin a(endpoint(hosts_variable));
    auto h1 = make_permit(shared_store(), name, 2), h2 = make_permit(shared_store(), name, 2);
    BOOST_REQUIRE(h1.try_acquire());
    BOOST_REQUIRE(h2.try_acquire());
    auto w1 = make_permit(shared_store(), name, 2), w2 = make_permit(shared_store(), name, 2),
         w3 = make_permit(shared_store(), name, 2);
    auto f1 = wait_in_thread(w1, must_happen);
    BOOST_REQUIRE(a.eventually_permits(name, 3));
    auto f2 = wait_in_thread(w2, must_happen);
    BOOST_REQUIRE(a.eventually_permits(name, 4));
    auto f3 = wait_in_thread(w3, must_happen);
    BOOST_REQUIRE(a.eventually_permits(name, 5));
    // A waiter behind them that gives up: its node goes, which lets nobody in.
    auto late = make_permit(shared_store(), name, 2);
    BOOST_TEST(!late.try_acquire_for(300ms));
    BOOST_REQUIRE(a.eventually_permits(name, 5));
    std::this_thread::sleep_for(200ms);  // every waiter watches by now (not a check)
    BOOST_TEST(!ready(f1, 0ms));
    // The first holder (not the node just before the waiter's) releases: the first waiter comes
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

// Guards: crash safety (the permit goes with the session). A holder process killed with SIGKILL:
// its permit comes back when its session expires, to a waiter in another process.
BOOST_AUTO_TEST_CASE(a_killed_holders_permit_comes_back_with_its_session) {
    const std::string name = test::unique_resource("killed");
    const auto hosts = endpoint(hosts_variable);
    test::byte_pipe ready_pipe;
    // Forked before this process starts a session (and its client threads).
    pid_t holder = test::fork_child([&]() -> int {
        auto permit = make_permit(store_for(hosts, 2s), name, 1);
        if (!permit.try_acquire()) return 1;
        ready_pipe.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready_pipe.close_write();
    BOOST_REQUIRE_MESSAGE(ready_pipe.get(30s).has_value(), "the holder did not take its permit");
    admin a(hosts);
    auto mine = make_permit(shared_store(), name, 1);
    auto f = wait_in_thread(mine, must_happen);
    BOOST_REQUIRE(a.eventually_permits(name, 2));
    const auto killed = clock_type::now();
    ::kill(holder, SIGKILL);
    test::wait_child(holder, 30s);
    BOOST_REQUIRE(ready(f, must_happen));
    BOOST_TEST(f.get() == "granted");
    const auto after = ms_since(killed);
    BOOST_TEST_MESSAGE("granted " << after << " ms after the kill (session timeout 2 s)");
    BOOST_TEST(after < 15000);
    BOOST_TEST(mine.is_acquired());
    mine.release();
}

// Guards: holds() and the loss watch of a permit. Another client deletes a holder's node: a
// waiter takes its place and the victim learns it has lost its permit, so never more than
// `limit` owners believe they hold once they look. A node another client makes in the queue
// takes a place (fewer holders, never more).
BOOST_AUTO_TEST_CASE(another_clients_nodes_never_make_more_than_limit_holders) {
    const std::string name = test::unique_resource("hostile");
    admin a(endpoint(hosts_variable));
    auto p1 = make_permit(shared_store(), name, 2), p2 = make_permit(shared_store(), name, 2);
    BOOST_REQUIRE(p1.try_acquire());
    BOOST_REQUIRE(p2.try_acquire());
    auto w = make_permit(shared_store(), name, 2);
    auto f = wait_in_thread(w, must_happen);
    BOOST_REQUIRE(a.eventually_permits(name, 3));
    BOOST_REQUIRE(a.remove(a.permits(name)[0]) == ZOK);  // p1's node
    BOOST_REQUIRE(ready(f, 5s));
    BOOST_TEST(f.get() == "granted");
    int believe = 0;
    for (auto* p : {&p1, &p2, &w}) believe += p->held() && p->is_acquired();
    BOOST_TEST(believe == 2);
    BOOST_TEST(!p1.is_acquired());
    p2.release();
    w.release();
    // A node made by another client takes a place: one permit of two is left.
    const auto parent = strategies::zookeeper_permit_parent(test_root, name);
    BOOST_REQUIRE(a.create(parent + "/planted-permit-0000000000", "x") == ZOK);
    auto q1 = make_permit(shared_store(), name, 2), q2 = make_permit(shared_store(), name, 2);
    BOOST_TEST(q1.try_acquire());
    BOOST_TEST(!q2.try_acquire());
    q1.release();
    BOOST_REQUIRE(a.remove(parent + "/planted-permit-0000000000") == ZOK);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(zk_permit_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

// A private ZooKeeper restarted while a permit is held and another owner waits: sessions survive
// a restart within their timeout, so the holder still holds, and the waiter gets the permit at
// the holder's release.
BOOST_AUTO_TEST_CASE(server_restarted_while_a_permit_is_held_and_a_waiter_waits) {
    private_zookeeper server;
    auto s = store_for(server.hosts(), 30s);
    const auto name = test::unique_resource("outage");
    auto holder = make_permit(s, name, 1);
    auto waiter = make_permit(store_for(server.hosts(), 30s), name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    auto waited = wait_in_thread(waiter, must_happen);
    {
        admin a(server.hosts());
        BOOST_REQUIRE(a.eventually_permits(name, 2));
    }
    server.stop();
    server.start();
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(!ready(waited, 500ms));  // one permit: the waiter still waits
    holder.release();
    BOOST_REQUIRE(ready(waited, must_happen));
    BOOST_TEST(waited.get() == "granted");
    BOOST_TEST(waiter.is_acquired());
    waiter.release();
}

BOOST_AUTO_TEST_SUITE_END()
