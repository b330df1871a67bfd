// The etcd strategy against a real etcd: the shared one from scripts/services.sh
// (LOCKSMITH_TEST_ETCD) and, for the fault case, a private instance this test stops and restarts.
#define BOOST_TEST_MODULE etcd_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/etcd.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;

namespace {

constexpr const char* endpoint_variable = "LOCKSMITH_TEST_ETCD";
constexpr auto must_happen = 60s;  // safety net only

// Fixed at start-up, so that forked children (which compute nothing anew) share it.
const std::string test_prefix = "locksmith-it/" + std::to_string(::getpid()) + "/";

strategies::etcd_options options_for(const std::string& endpoints) {
    strategies::etcd_options o;
    o.endpoints = {endpoints};
    o.prefix = test_prefix;
    o.dial_timeout = 500ms;
    o.request_timeout = 2s;
    return o;
}

std::shared_ptr<store> shared_store() {
    return strategies::make_etcd_store(options_for(endpoint(endpoint_variable)));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name,
                     std::chrono::milliseconds ttl = 30s, bool auto_refresh = false) {
    lock_options o;
    o.ttl = ttl;
    o.auto_refresh = auto_refresh;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

// How many keys (holder and waiters) the name's queue has, as etcdctl sees it.
long queue_length(const std::string& endpoints, const std::string& name) {
    const std::string dir = test_prefix + stable_name_hash(name).hex() + "/";
    const std::string command = "etcdctl --endpoints=" + endpoints + " get --prefix --keys-only '" +
                                dir + "' -w fields 2>/dev/null";
    FILE* p = ::popen(command.c_str(), "r");
    if (p == nullptr) return -1;
    char line[256];
    long count = -1;
    while (std::fgets(line, sizeof line, p))
        if (std::string(line).starts_with("\"Count\" : ")) count = std::atol(line + 10);
    ::pclose(p);
    return count;
}

bool eventually_queue_length(const std::string& endpoints, const std::string& name, long n) {
    const auto until = std::chrono::steady_clock::now() + must_happen;
    while (std::chrono::steady_clock::now() < until) {
        if (queue_length(endpoints, name) == n) return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(unreachable_and_bad_endpoints_fail_cleanly) {
    auto o = options_for("http://127.0.0.1:" + std::to_string(test::free_port()));
    try {
        strategies::make_etcd_store(o);
        BOOST_FAIL("no error for an endpoint nobody listens on");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find(o.endpoints[0]) != std::string::npos, e.what());
        BOOST_TEST((e.kind() == error_kind::transient));
    }
    for (const char* bad :
         {"https://127.0.0.1:2379", "127.0.0.1:2379", "http://u:pw@h:1", "http://h:99999"}) {
        try {
            strategies::etcd_options::from_json({{"endpoints", bad}});
            BOOST_FAIL(std::string("accepted ") + bad);
        } catch (const config_error& e) {
            BOOST_TEST(std::string(e.what()).find("pw") == std::string::npos, e.what());
            if (std::string(bad).starts_with("https"))
                BOOST_TEST(std::string(e.what()).find("TLS") != std::string::npos, e.what());
        }
    }
}

BOOST_AUTO_TEST_SUITE(etcd_server,
                      *boost::unit_test::precondition(test::server_precondition{endpoint_variable}))

BOOST_AUTO_TEST_CASE(registry_builds_the_store_and_the_factory_picks_it) {
    auto d = default_registry().find("etcd");
    BOOST_REQUIRE(d);
    BOOST_TEST(d->needs_configuration);
    auto s = d->create(
        nlohmann::json{{"endpoints", endpoint(endpoint_variable)}, {"prefix", test_prefix}});
    auto lock = make_lock(s, test::unique_resource("registry"));
    BOOST_REQUIRE(lock.try_lock());
    BOOST_TEST(lock.fencing_token().has_value());
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(any_name_is_a_lock_of_its_own) {
    auto s = shared_store();
    const std::string base = test::unique_resource("names");
    std::vector<std::string> names = {"/",
                                      "..",
                                      "../..",
                                      base + "/a",
                                      base,
                                      std::string("a\0b", 3),
                                      std::string("a\0c", 3),
                                      std::string(1 << 20, 'x')};
    std::vector<named_lock> held;
    for (const auto& n : names) {
        held.push_back(make_lock(s, n));
        BOOST_TEST(held.back().try_lock(), "name of " << n.size() << " bytes");
    }
    // Each is its own lock: all held at once, and each excludes a second owner.
    for (const auto& n : names) BOOST_TEST(!make_lock(s, n).try_lock());
    for (auto& l : held) l.unlock();
    for (const auto& n : names) {
        auto again = make_lock(s, n);
        BOOST_TEST(again.try_lock());
    }
}

BOOST_AUTO_TEST_CASE(waiters_are_granted_in_arrival_order) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("fifo");
    auto s = shared_store();
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    char path[] = "/tmp/locksmith-fifo-XXXXXX";
    const int fd = ::mkstemp(path);
    BOOST_REQUIRE(fd >= 0);
    ::close(fd);
    std::vector<pid_t> children;
    for (int i = 0; i < 8; ++i) {
        children.push_back(test::fork_child(
            [&, i] {
                auto mine = make_lock(strategies::make_etcd_store(options_for(endpoints)), name);
                if (!mine.try_lock_for(must_happen)) return 2;
                std::ofstream(path, std::ios::app) << i << "\n";
                mine.unlock();
                return 0;
            },
            120s));
        // The next waiter arrives only once this one is in the queue.
        BOOST_REQUIRE(eventually_queue_length(endpoints, name, i + 2));
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

// A waiter keeps its own lease alive while it waits: a wait longer than its TTL ends in a
// grant with the TTL counted from the last renewal, not in "expired before it was granted".
BOOST_AUTO_TEST_CASE(a_wait_longer_than_the_waiters_ttl_ends_in_a_grant) {
    const auto name = test::unique_resource("long_wait");
    auto holder = make_lock(shared_store(), name, 30s);
    BOOST_REQUIRE(holder.try_lock());
    auto waiter = make_lock(shared_store(), name, 2s);
    auto waited = std::async(std::launch::async, [&]() -> std::string {
        try {
            return waiter.try_lock_for(must_happen) ? "granted" : "timed out";
        } catch (const error& e) {
            return std::string("error: ") + e.what();
        }
    });
    BOOST_REQUIRE(eventually_queue_length(endpoint(endpoint_variable), name, 2));
    std::this_thread::sleep_for(3500ms);  // longer than the waiter's TTL, on purpose
    holder.unlock();
    BOOST_TEST(waited.get() == "granted");
    BOOST_TEST(waiter.is_acquired());
    BOOST_TEST(!waiter.is_expired());
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(a_holder_paused_past_its_lease_loses_the_lock_and_learns_it) {
    const std::string name = test::unique_resource("paused");
    const std::string endpoints = endpoint(endpoint_variable);
    test::byte_pipe held, resumed;
    const pid_t child = test::fork_child(
        [&] {
            std::atomic<bool> told{false};
            lock_options o;
            o.ttl = 2s;
            o.auto_refresh = true;  // renewed by the renewal thread, until the pause
            o.on_lost = [&](const error&) { told = true; };
            named_lock lock(strategies::make_etcd_store(options_for(endpoints)),
                            std::make_shared<key>(name), o);
            if (!lock.try_lock()) return 2;
            held.put('h');
            if (!resumed.get(must_happen)) return 3;
            if (lock.is_acquired()) return 4;  // another process holds it now
            // The renewal thread may be the one that noticed, and tell a moment later.
            for (int i = 0; i < 1000 && !told; ++i) std::this_thread::sleep_for(10ms);
            return told ? 0 : 5;
        },
        120s);
    BOOST_REQUIRE(held.get(must_happen));
    ::kill(child, SIGSTOP);
    auto other = make_lock(shared_store(), name);
    BOOST_TEST(other.try_lock_for(must_happen));  // once the paused holder's lease expired
    ::kill(child, SIGCONT);
    resumed.put('r');
    BOOST_TEST(test::wait_child(child, 60s) == 0);
    BOOST_TEST(other.is_acquired());
}

BOOST_AUTO_TEST_SUITE_END()

// A private etcd, stopped and started again while a lock is held and another waits.
BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_back) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    const int port = test::free_port();
    const int peer = test::free_port();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("locksmith-etcd-it-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const std::string client = "http://127.0.0.1:" + std::to_string(port);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    test::private_server server(
        {"etcd", "--name", "it", "--data-dir", dir.string(), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer_url,
         "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "it=" + peer_url,
         "--log-level", "error"},
        port, SIGTERM);
    auto o = options_for(client);
    std::shared_ptr<store> s;
    // etcd listens a moment before it serves.
    for (int i = 0; i < 100 && !s; ++i) {
        try {
            s = strategies::make_etcd_store(o);
        } catch (const backend_error&) {
            std::this_thread::sleep_for(100ms);
        }
    }
    BOOST_REQUIRE(s);
    const auto name = test::unique_resource("fault");
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    auto waited = std::async(std::launch::async, [&]() -> std::string {
        try {
            return waiter.try_lock_for(must_happen) ? "granted" : "timed out";
        } catch (const error& e) {
            return std::string("error: ") + e.what();
        }
    });
    BOOST_REQUIRE(eventually_queue_length(client, name, 2));
    server.stop();
    server.start();
    // The lease survived the restart (etcd keeps leases, and renews them at start).
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
    holder.unlock();
    BOOST_REQUIRE(waited.wait_for(must_happen) == std::future_status::ready);
    BOOST_TEST(waited.get() == "granted");
    waiter.unlock();
    server.stop();
    std::filesystem::remove_all(dir);
}

// A private etcd with authentication on: a user with a role on the strategy's prefix locks, a
// wrong password is a permanent error that names the user and not the password.
BOOST_AUTO_TEST_CASE(user_and_password_log_in_and_a_wrong_password_is_refused) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    const int port = test::free_port();
    const int peer = test::free_port();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("locksmith-etcd-auth-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const std::string client = "http://127.0.0.1:" + std::to_string(port);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    test::private_server server(
        {"etcd", "--name", "auth", "--data-dir", dir.string(), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer_url,
         "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "auth=" + peer_url,
         "--log-level", "error"},
        port, SIGTERM);
    const std::string ctl = "etcdctl --endpoints=" + client + " ";
    auto run = [](const std::string& command) {
        return std::system((command + " >/dev/null 2>&1").c_str());
    };
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
        up = run(ctl + "endpoint health") == 0;
        if (!up) std::this_thread::sleep_for(100ms);
    }
    BOOST_REQUIRE(up);
    BOOST_REQUIRE(run(ctl + "user add root --new-user-password=root-pw") == 0);
    BOOST_REQUIRE(run(ctl + "user add app --new-user-password=app-secret-pw") == 0);
    BOOST_REQUIRE(run(ctl + "role add locker") == 0);
    BOOST_REQUIRE(
        run(ctl + "role grant-permission locker --prefix=true readwrite " + test_prefix) == 0);
    BOOST_REQUIRE(run(ctl + "user grant-role app locker") == 0);
    BOOST_REQUIRE(run(ctl + "auth enable") == 0);

    auto o = options_for(client);
    o.user = "app";
    o.password = "app-secret-pw";
    const auto name = test::unique_resource("auth");
    auto a = make_lock(strategies::make_etcd_store(o), name);
    BOOST_TEST(a.try_lock());
    auto b = make_lock(strategies::make_etcd_store(o), name);
    BOOST_TEST(!b.try_lock());
    a.unlock();
    BOOST_TEST(b.try_lock());
    b.unlock();

    o.password = "not-the-password";
    try {
        auto c = make_lock(strategies::make_etcd_store(o), name);
        (void)c.try_lock();
        BOOST_ERROR("a wrong password was accepted");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("not-the-password") == std::string::npos, what);
        BOOST_TEST(what.find("app") != std::string::npos, what);
        BOOST_TEST((e.kind() == error_kind::permanent), what);
    }
    server.stop();
    std::filesystem::remove_all(dir);
}
