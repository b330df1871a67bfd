// SPDX-License-Identifier: MIT
// The zookeeper strategy against a real ZooKeeper: the shared server of scripts/services.sh
// (LOCKSMITH_TEST_ZOOKEEPER) and, for the fault case, a private server this test starts, stops
// and restarts with the same script (its own state folder and port).
#define BOOST_TEST_MODULE zookeeper_integration
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <zookeeper.h>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/zookeeper.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
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

constexpr const char* hosts_variable = "LOCKSMITH_TEST_ZOOKEEPER";
// The safety net of cases that wait for something that must happen; never a speed check.
const auto must_happen = test::patience(30s);
const std::string test_root = "/locksmith-it-" + std::to_string(::getpid());

strategies::zookeeper_options options_for(const std::string& hosts) {
    strategies::zookeeper_options o;
    o.hosts = hosts;
    o.session_timeout = 4s;
    o.connect_timeout = 2s;
    o.root = test_root;
    return o;
}

std::shared_ptr<store> store_for(const std::string& hosts) {
    return strategies::make_zookeeper_store(options_for(hosts));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name, lock_options o = {}) {
    return named_lock(std::move(s), std::make_shared<key>(name), std::move(o));
}

using test::ms_since;

// A session of the test's own, to look at the server from outside the strategy; with `auth`
// (digest:USER:PASSWORD), of that identity, else of none (an attacker on a shared ensemble).
class admin {
  public:
    explicit admin(const std::string& hosts, const std::string& auth = "",
                   std::string root = test_root)
        : root_(std::move(root)) {
        zoo_set_debug_level(ZooLogLevel(0));  // quiet
        zh_ = zookeeper_init(hosts.c_str(), nullptr, 10000, nullptr, nullptr, 0);
        BOOST_REQUIRE(zh_);
        const auto until = clock_type::now() + must_happen;
        while (zoo_state(zh_) != ZOO_CONNECTED_STATE && clock_type::now() < until)
            std::this_thread::sleep_for(10ms);
        if (auth.empty()) return;
        const auto credentials = auth.substr(auth.find(':') + 1);
        std::promise<int> added;
        BOOST_REQUIRE_EQUAL(zoo_add_auth(zh_, "digest", credentials.data(), int(credentials.size()),
                                         &admin::on_auth, &added),
                            ZOK);
        auto answer = added.get_future();
        BOOST_REQUIRE(answer.wait_for(must_happen) == std::future_status::ready);
        BOOST_REQUIRE_EQUAL(answer.get(), ZOK);
    }
    zhandle_t* handle() const noexcept { return zh_; }
    // The ACL of `path` as "scheme:id:perms" entries (perms as a number), or the error code.
    std::vector<std::string> acl_of(const std::string& path) {
        ACL_vector acl{};
        struct Stat stat;
        const int rc = zoo_get_acl(zh_, path.c_str(), &acl, &stat);
        if (rc != ZOK) return {"error " + std::to_string(rc)};
        std::vector<std::string> out;
        for (int i = 0; i < acl.count; ++i)
            out.push_back(std::string(acl.data[i].id.scheme) + ":" + acl.data[i].id.id + ":" +
                          std::to_string(acl.data[i].perms));
        deallocate_ACL_vector(&acl);
        return out;
    }
    ~admin() { zookeeper_close(zh_); }
    admin(const admin&) = delete;
    admin& operator=(const admin&) = delete;
    // How many requests queue for `name` (holders and waiters).
    int requests(const std::string& name) {
        String_vector children{};
        const auto parent = strategies::zookeeper_lock_parent(root_, name);
        if (zoo_get_children(zh_, parent.c_str(), 0, &children) != ZOK) return 0;
        const int n = children.count;
        deallocate_String_vector(&children);
        return n;
    }
    // The paths of the requests for `name`, in queue order (by their sequence number, the
    // last 10 characters).
    std::vector<std::string> request_paths(const std::string& name) {
        const auto parent = strategies::zookeeper_lock_parent(root_, name);
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
    // The czxid of each request for `name`.
    std::vector<std::int64_t> request_czxids(const std::string& name) {
        std::vector<std::int64_t> czxids;
        for (const auto& path : request_paths(name)) {
            struct Stat stat;
            if (zoo_exists(zh_, path.c_str(), 0, &stat) == ZOK) czxids.push_back(stat.czxid);
        }
        return czxids;
    }
    // Creates the parent node of `name`'s requests (a container, as the store would).
    void create_parent(const std::string& name) {
        const auto parent = strategies::zookeeper_lock_parent(root_, name);
        BOOST_REQUIRE_EQUAL(zoo_create(zh_, parent.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                                       ZOO_CONTAINER, nullptr, 0),
                            ZOK);
    }
    // Polls until `name` has `n` requests: orders steps on what the server shows.
    bool eventually_requests(const std::string& name, int n) {
        const auto until = clock_type::now() + must_happen;
        while (clock_type::now() < until) {
            if (requests(name) == n) return true;
            std::this_thread::sleep_for(2ms);
        }
        return false;
    }

  private:
    static void on_auth(int rc, const void* promise) {
        static_cast<std::promise<int>*>(const_cast<void*>(promise))->set_value(rc);
    }
    std::string root_;
    zhandle_t* zh_ = nullptr;
};

// The op codes of the whole requests among the bytes a client sent: ZooKeeper frames each
// request as a big-endian int32 length, then the xid and the op code (int32 each). A cut must
// wait for a whole request: cut after a part of one, the proxy would wait for a reply the server
// cannot give, and hold every other connection up meanwhile.
std::vector<std::int32_t> whole_request_ops(std::string_view sent) {
    const auto int32_at = [&](std::size_t at) {
        return std::int32_t(std::uint32_t(std::uint8_t(sent[at])) << 24 |
                            std::uint32_t(std::uint8_t(sent[at + 1])) << 16 |
                            std::uint32_t(std::uint8_t(sent[at + 2])) << 8 |
                            std::uint32_t(std::uint8_t(sent[at + 3])));
    };
    std::vector<std::int32_t> ops;
    for (std::size_t at = 0; sent.size() - at >= 12;) {
        const auto length = std::size_t(int32_at(at));
        if (sent.size() - at - 4 < length) break;
        ops.push_back(int32_at(at + 8));
        at += 4 + length;
    }
    return ops;
}

bool holds_a_request(std::string_view sent) {
    return !whole_request_ops(sent).empty();
}

// 1 is create, 15 create2.
bool holds_create_request(std::string_view sent) {
    const auto ops = whole_request_ops(sent);
    return std::any_of(ops.begin(), ops.end(), [](std::int32_t op) { return op == 1 || op == 15; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zk_server,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

BOOST_AUTO_TEST_CASE(waiters_are_served_in_arrival_order) {
    // Eight waiters queue one after the other (each seen on the server before the next comes);
    // the order of grants is the order of arrival.
    const auto hosts = endpoint(hosts_variable);
    admin a(hosts);
    auto s = store_for(hosts);
    const auto name = test::unique_resource("fifo");
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    std::mutex m;
    std::vector<int> granted;
    std::vector<std::thread> waiters;
    for (int i = 0; i < 8; ++i) {
        waiters.emplace_back([&, i] {
            auto lock = make_lock(s, name);
            if (!lock.try_lock_for(must_happen)) return;
            {
                std::lock_guard guard(m);
                granted.push_back(i);
            }
            lock.unlock();
        });
        BOOST_REQUIRE(a.eventually_requests(name, i + 2));
    }
    holder.unlock();
    for (auto& t : waiters) t.join();
    BOOST_TEST(granted == (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(readers_wait_only_for_earlier_writers) {
    const auto hosts = endpoint(hosts_variable);
    admin a(hosts);
    auto s = store_for(hosts);
    const auto name = test::unique_resource("rw");
    auto reader1 = make_lock(s, name);
    BOOST_REQUIRE(reader1.try_lock_shared());
    auto writer = make_lock(s, name);
    auto wrote = std::async(std::launch::async, [&] {
        const bool ok = writer.try_lock_for(must_happen);
        if (ok) writer.unlock();
        return ok;
    });
    BOOST_REQUIRE(a.eventually_requests(name, 2));
    // A reader that comes after the queued writer waits for it (no writer starvation).
    auto reader2 = make_lock(s, name);
    BOOST_TEST(!reader2.try_lock_shared());
    reader1.unlock();
    BOOST_TEST(wrote.get());
    BOOST_TEST(reader2.try_lock_shared());
    reader2.unlock();
}

BOOST_AUTO_TEST_CASE(fencing_tokens_increase_over_grants) {
    const auto hosts = endpoint(hosts_variable);
    auto s = store_for(hosts);
    const auto name = test::unique_resource("fence");
    std::uint64_t last = 0;
    for (int i = 0; i < 200; ++i) {
        auto lock = make_lock(s, name);
        BOOST_REQUIRE(lock.try_lock());
        const auto token = lock.fencing_token();
        BOOST_REQUIRE(token);
        BOOST_TEST(*token > last);
        last = *token;
        lock.unlock();
    }
}

BOOST_AUTO_TEST_CASE(a_holder_paused_past_its_session_timeout_loses_the_lock_and_learns_it) {
    const auto hosts = endpoint(hosts_variable);
    const auto name = test::unique_resource("sigstop");
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto o = options_for(hosts);
        o.session_timeout = 1s;  // the server's minimum here (services.sh: 2 ticks of 500 ms)
        std::atomic<bool> told{false};
        lock_options lo;
        lo.on_lost = [&](const error&) { told = true; };
        auto lock = make_lock(strategies::make_zookeeper_store(o), name, lo);
        if (!lock.try_lock()) return 2;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'C') return 3;
        const bool held = lock.is_acquired();
        to_parent.put(held ? 'S' : (told ? 'L' : 'N'));
        return 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    ::kill(child, SIGSTOP);
    const auto stopped = clock_type::now();
    // The session expires while the holder sleeps: the lock goes to the next owner.
    auto waiter = make_lock(store_for(hosts), name);
    BOOST_TEST(waiter.try_lock_for(must_happen));
    BOOST_TEST_MESSAGE("granted " << ms_since(stopped) << " ms after SIGSTOP of the holder");
    ::kill(child, SIGCONT);
    to_child.put('C');
    // 'L': is_acquired() false and on_lost called; 'S' would be a second holder.
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'L');
    BOOST_TEST(test::wait_child(child) == 0);
    BOOST_TEST(waiter.is_acquired());
    waiter.unlock();
}

// Issue 23, point 17: the paused holder does not ask is_acquired() but acquires again: it hears
// of the loss first (on_lost), and does not believe it holds while another owner does.
BOOST_AUTO_TEST_CASE(a_holder_paused_past_its_session_timeout_hears_of_the_loss_when_it_acquires) {
    const auto hosts = endpoint(hosts_variable);
    const auto name = test::unique_resource("sigstop-reacquire");
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto o = options_for(hosts);
        o.session_timeout = 1s;
        std::atomic<int> told{0};
        lock_options lo;
        lo.on_lost = [&](const error&) { ++told; };
        auto lock = make_lock(strategies::make_zookeeper_store(o), name, lo);
        if (!lock.try_lock()) return 2;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'C') return 3;
        bool again = false;
        try {
            again = lock.try_lock();
        } catch (const error&) {
            // A fresh request on a session the client finds expired only now may fail; what
            // matters is that the loss was told and nothing is believed held.
        }
        to_parent.put(again ? 'T' : told == 1 && !lock.held_mode() ? 'L' : 'N');
        return 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    ::kill(child, SIGSTOP);
    auto waiter = make_lock(store_for(hosts), name);
    BOOST_TEST(waiter.try_lock_for(must_happen));
    ::kill(child, SIGCONT);
    to_child.put('C');
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'L');
    BOOST_TEST(test::wait_child(child) == 0);
    BOOST_TEST(waiter.is_acquired());
    waiter.unlock();
}

// The store's side of point 17: an acquire for a key whose session expired is refused loudly
// until the key is released, never granted afresh in its place (nor said to be held).
BOOST_AUTO_TEST_CASE(the_store_never_grants_afresh_in_place_of_an_expired_session) {
    const auto hosts = endpoint(hosts_variable);
    const auto name = test::unique_resource("store-regrant");
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto o = options_for(hosts);
        o.session_timeout = 1s;
        auto s = strategies::make_zookeeper_store(o);
        key k(name);
        if (!s->try_acquire(k, lock_mode::exclusive, 0ms)) return 2;
        const auto fd = s->loss_fd(k);
        if (!fd || *fd < 0) return 4;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'C') return 3;
        // Until the client has heard that the session expired.
        const auto until = clock_type::now() + must_happen;
        while (s->loss_fd(k).value_or(0) >= 0 && clock_type::now() < until)
            std::this_thread::sleep_for(5ms);
        char outcome = 'N';
        try {
            outcome = s->try_acquire(k, lock_mode::exclusive, 0ms) ? 'T' : 'F';
        } catch (const acquire_error&) {
            outcome = 'E';
        }
        s->release(k);  // drops the expired grant, without an error
        to_parent.put(outcome);
        return s->holds(k) ? 5 : 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    ::kill(child, SIGSTOP);
    auto waiter = make_lock(store_for(hosts), name);
    BOOST_TEST(waiter.try_lock_for(must_happen));
    ::kill(child, SIGCONT);
    to_child.put('C');
    // 'E': refused loudly; 'T' would be a second holder, 'F' a loss nobody was told of.
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'E');
    BOOST_TEST(test::wait_child(child) == 0);
    waiter.unlock();
}

// Issue 23, point 2: the session's events wake the holder (loss_fd) when its session expires,
// without it asking.
BOOST_AUTO_TEST_CASE(loss_fd_wakes_a_holder_whose_session_expired) {
    const auto hosts = endpoint(hosts_variable);
    const auto name = test::unique_resource("loss-fd");
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto o = options_for(hosts);
        o.session_timeout = 1s;
        auto lock = make_lock(strategies::make_zookeeper_store(o), name);
        if (!lock.try_lock()) return 2;
        const auto fd = lock.loss_fd();
        if (!fd || *fd < 0) return 4;
        pollfd p{*fd, POLLIN, 0};
        if (::poll(&p, 1, 0) != 0 || !lock.is_acquired() || ::poll(&p, 1, 0) != 0) return 5;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'C') return 3;
        const auto resumed = clock_type::now();
        if (::poll(&p, 1, int(std::chrono::milliseconds(must_happen).count())) != 1) return 6;
        const auto woken_ms = ms_since(resumed);
        const bool held = lock.is_acquired();
        std::printf("loss_fd readable %.1f ms after SIGCONT; is_acquired %s after %.1f ms\n",
                    woken_ms, held ? "true" : "false", ms_since(resumed));
        std::fflush(stdout);
        to_parent.put(held ? 'S' : 'L');
        return 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    ::kill(child, SIGSTOP);
    auto waiter = make_lock(store_for(hosts), name);
    BOOST_TEST(waiter.try_lock_for(must_happen));
    ::kill(child, SIGCONT);
    to_child.put('C');
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'L');
    BOOST_TEST(test::wait_child(child) == 0);
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(a_create_whose_reply_was_lost_is_found_again_not_orphaned) {
    // The connection drops after the server made the request's node and before its reply
    // arrived; the client reconnects within the session timeout (through the proxy again).
    const auto hosts = endpoint(hosts_variable);
    const auto colon = hosts.rfind(':');
    test::tcp_fault_proxy proxy(hosts.substr(0, colon), std::stoi(hosts.substr(colon + 1)));
    admin a(hosts);
    auto s = store_for(proxy.address());
    const auto name = test::unique_resource("lost-reply");
    // The parent is there already: the create cut off is the one that makes the node, not one
    // that fails for want of a parent.
    a.create_parent(name);
    proxy.cut_after_next_request(holds_create_request);
    auto lock = make_lock(s, name);
    const bool got = lock.try_lock();
    BOOST_TEST(got);
    BOOST_TEST(proxy.wait_cut(0ms));
    BOOST_TEST(proxy.connections() == 2);
    // One request for the name, and it is ours (its czxid is our fencing token): the node whose
    // reply was lost was taken up, not left behind beside a second one.
    const auto czxids = a.request_czxids(name);
    BOOST_TEST(czxids.size() == 1u);
    if (got && czxids.size() == 1)
        BOOST_TEST(lock.fencing_token().value_or(0) == std::uint64_t(czxids[0]));
    if (got) lock.unlock();
    BOOST_TEST(a.requests(name) == 0);
    auto other = make_lock(store_for(hosts), name);
    BOOST_TEST(other.try_lock());
    other.unlock();
}

// The descriptors of this process an exec would pass on (no FD_CLOEXEC), as "fd -> target".
std::set<std::string> inheritable_fds() {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(e.path().filename().string());
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
        std::error_code ec;
        out.insert(std::to_string(fd) + " -> " +
                   std::filesystem::read_symlink(e.path(), ec).string());
    }
    return out;
}

// The C client opens its wake-up pipe and a new socket at each connection (on its own thread)
// without close-on-exec; the store marks them, the socket again after a reconnection, so that a
// command the process exec()s does not keep the session's socket.
BOOST_AUTO_TEST_CASE(the_clients_descriptors_stay_close_on_exec_across_a_reconnection) {
    const auto hosts = endpoint(hosts_variable);
    const auto colon = hosts.rfind(':');
    test::tcp_fault_proxy proxy(hosts.substr(0, colon), std::stoi(hosts.substr(colon + 1)));
    const auto before = inheritable_fds();
    auto lock = make_lock(store_for(proxy.address()), test::unique_resource("cloexec"));
    BOOST_REQUIRE(lock.try_lock());
    auto added = [&] {
        std::string text;
        for (const auto& fd : inheritable_fds())
            if (!before.count(fd)) text += " " + fd;
        return text;
    };
    BOOST_TEST(added().empty(), "not close-on-exec after the grant:" << added());
    // The connection is cut after the next request (is_acquired's, or a ping) was answered; the
    // client connects again within the session timeout and asks again.
    proxy.cut_after_next_request(holds_a_request);
    BOOST_TEST(lock.is_acquired());
    BOOST_REQUIRE(proxy.wait_cut(must_happen));
    BOOST_TEST(lock.is_acquired());
    BOOST_REQUIRE(proxy.connections() == 2);
    // The connected event, which marks the socket, may reach the watcher just after the answer.
    const auto settle = clock_type::now() + 5s;
    while (!added().empty() && clock_type::now() < settle) std::this_thread::sleep_for(10ms);
    BOOST_TEST(added().empty(), "not close-on-exec after the reconnection:" << added());
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(status_names_each_holders_pid_host_and_request_time) {
    const auto hosts = endpoint(hosts_variable);
    const auto name = test::unique_resource("status");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const auto holder_of = [&](pid_t pid) {
        return std::regex("pid " + std::to_string(pid) + " on host " + host +
                          " since \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC \\(node "
                          "[0-9a-f]+-(write|read)-\\d{10}\\)");
    };
    // Another process holds. Forked before this process opens a session: a session's client
    // threads must not be beside the fork.
    test::byte_pipe to_parent, to_child;
    const pid_t child = test::fork_child([&] {
        if (to_child.get(must_happen) != 'G') return 4;
        auto lock = make_lock(store_for(hosts), name);
        if (!lock.try_lock()) return 2;
        to_parent.put('H');
        return to_child.get(must_happen) == 'C' ? 0 : 3;
    });
    auto s = store_for(hosts);
    BOOST_TEST((s->status(name).held == lock_status::state::free));
    to_child.put('G');
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    auto st = s->status(name);
    BOOST_TEST((st.held == lock_status::state::held_exclusive));
    BOOST_TEST_REQUIRE(st.holders.size() == 1u);
    BOOST_TEST(std::regex_match(st.holders[0], holder_of(child)), st.holders[0]);
    to_child.put('C');
    BOOST_TEST(test::wait_child(child) == 0);
    // Two readers, each named.
    auto reader1 = make_lock(s, name);
    auto reader2 = make_lock(store_for(hosts), name);
    BOOST_REQUIRE(reader1.try_lock_shared());
    BOOST_REQUIRE(reader2.try_lock_shared());
    st = s->status(name);
    BOOST_TEST((st.held == lock_status::state::held_shared));
    BOOST_TEST_REQUIRE(st.holders.size() == 2u);
    for (const auto& h : st.holders) BOOST_TEST(std::regex_match(h, holder_of(::getpid())), h);
    reader1.unlock();
    reader2.unlock();
    BOOST_TEST((s->status(name).held == lock_status::state::free));
}

BOOST_AUTO_TEST_CASE(any_name_maps_to_its_own_lock) {
    const auto hosts = endpoint(hosts_variable);
    auto s = store_for(hosts);
    const std::string big((1 << 20) - 1, 'x');  // and big + "y": the longest name
    const std::vector<std::string> names = {"/",
                                            "..",
                                            "a/../b",
                                            "a/b",
                                            "a_b",
                                            std::string("nul\0one", 7),
                                            std::string("nul\0two", 7),
                                            big,
                                            big + "y",
                                            "zookeeper/quota"};
    std::vector<named_lock> held;
    for (const auto& n : names) {
        held.push_back(make_lock(s, n));
        BOOST_TEST(held.back().try_lock(), "lock " << n.substr(0, 20));
    }
    // Each name is held by its own lock: a second owner of any of them is refused.
    for (const auto& n : names) BOOST_TEST(!make_lock(s, n).try_lock(), n.substr(0, 20));
    for (auto& l : held) l.unlock();
}

BOOST_AUTO_TEST_CASE(a_chroot_that_does_not_exist_is_named) {
    auto o = options_for(endpoint(hosts_variable) + "/no/such/chroot");
    try {
        strategies::make_zookeeper_store(o);
        BOOST_FAIL("a store on a missing chroot");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST(std::string(e.what()).find("chroot") != std::string::npos);
        BOOST_TEST(std::string(e.what()).find("/no/such/chroot") != std::string::npos);
        BOOST_TEST(!e.transient());
    }
}

BOOST_AUTO_TEST_CASE(unreachable_hosts_fail_within_the_connect_timeout) {
    auto o = options_for("127.0.0.1:" + std::to_string(test::free_port()));
    o.connect_timeout = 500ms;
    try {
        strategies::make_zookeeper_store(o);
        BOOST_FAIL("a store without a server");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST(std::string(e.what()).find(o.hosts) != std::string::npos);
        BOOST_TEST(e.transient());
    }
    BOOST_CHECK_THROW(strategies::zookeeper_options::from_json({{"hosts", "a b:1"}}), config_error);
    BOOST_CHECK_THROW(
        strategies::zookeeper_options::from_json({{"hosts", "127.0.0.1:1"}, {"root", "x/.."}}),
        config_error);
    BOOST_CHECK_THROW(strategies::zookeeper_options::from_json({{"host", "127.0.0.1:1"}}),
                      config_error);
}

BOOST_AUTO_TEST_SUITE_END()

// Access control on a shared ensemble (issue 24): with auth, a client of another identity (or
// of none) can read the lock nodes but not delete or change them, nor their parents'
// children; without auth it can, and a second process then gets the lock.

namespace {

const std::string acl_password = "Pw-" + std::to_string(::getpid()) + "-Secret";
const std::string acl_auth = "digest:locksmith-it:" + acl_password;

strategies::zookeeper_options acl_options(const std::string& hosts, const std::string& root) {
    auto o = options_for(hosts);
    o.root = root;
    o.auth = acl_auth;
    return o;
}

// What a client without our identity manages to do to the lock `name` held under `root`:
// each call's return code, by what it tried.
std::map<std::string, int> attack(admin& attacker, const std::string& root,
                                  const std::string& name) {
    std::map<std::string, int> rc;
    const auto paths = attacker.request_paths(name);
    BOOST_REQUIRE_EQUAL(paths.size(), 1u);
    const auto node = paths.front();
    const auto parent = strategies::zookeeper_lock_parent(root, name);
    zhandle_t* zh = attacker.handle();
    rc["set data"] = zoo_set(zh, node.c_str(), "x", 1, -1);
    rc["set acl"] = zoo_set_acl(zh, node.c_str(), -1, &ZOO_OPEN_ACL_UNSAFE);
    // A request of sequence 0 would queue before every other (and stay: it is persistent).
    const auto planted = parent + "/x-write-0000000000";
    rc["create under the parent"] =
        zoo_create(zh, planted.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc["create under the parent"] == ZOK) zoo_delete(zh, planted.c_str(), -1);
    rc["set the parent's acl"] = zoo_set_acl(zh, parent.c_str(), -1, &ZOO_OPEN_ACL_UNSAFE);
    rc["delete the node"] = zoo_delete(zh, node.c_str(), -1);
    return rc;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zk_acl, *boost::unit_test::precondition(locksmith::test::server_precondition{
                                  hosts_variable}))

BOOST_AUTO_TEST_CASE(without_auth_any_client_deletes_a_holders_node_and_a_second_gets_the_lock) {
    // What auth is for: the same attack as below, on the open nodes of a store without auth.
    const auto hosts = endpoint(hosts_variable);
    const auto root = test_root + "-open";
    auto o = options_for(hosts);
    o.root = root;
    const auto name = test::unique_resource("acl-open");
    auto holder = make_lock(strategies::make_zookeeper_store(o), name);
    BOOST_REQUIRE(holder.try_lock());
    admin attacker(hosts, "", root);
    const auto rc = attack(attacker, root, name);
    BOOST_TEST(rc.at("set data") == ZOK);
    BOOST_TEST(rc.at("delete the node") == ZOK);
    auto second = make_lock(strategies::make_zookeeper_store(o), name);
    BOOST_TEST(second.try_lock());  // two holders: what the open ACL allows
    second.unlock();
    BOOST_TEST(!holder.is_acquired());
}

BOOST_AUTO_TEST_CASE(with_auth_another_identity_can_read_but_not_delete_or_change_a_lock) {
    const auto hosts = endpoint(hosts_variable);
    const auto root = test_root + "-acl";
    const auto name = test::unique_resource("acl");
    auto holder = make_lock(strategies::make_zookeeper_store(acl_options(hosts, root)), name);
    BOOST_REQUIRE(holder.try_lock());
    for (const std::string identity : {"", "digest:mallory:guess"}) {
        BOOST_TEST_CONTEXT("attacker of identity '" << identity << "'") {
            admin attacker(hosts, identity, root);
            for (const auto& [what, rc] : attack(attacker, root, name))
                BOOST_TEST(rc == ZNOAUTH, what << ": " << rc);
            // Deleting the parent or the root needs the delete permission of their parents.
            const auto parent = strategies::zookeeper_lock_parent(root, name);
            BOOST_TEST(zoo_delete(attacker.handle(), parent.c_str(), -1) == ZNOAUTH);
            BOOST_TEST(zoo_create(attacker.handle(), (root + "/planted").c_str(), nullptr, -1,
                                  &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0) == ZNOAUTH);
            // Reading stays open: status and monitoring of other identities.
            char data[512];
            int len = sizeof data;
            BOOST_TEST(zoo_get(attacker.handle(), attacker.request_paths(name).front().c_str(), 0,
                               data, &len, nullptr) == ZOK);
        }
    }
    BOOST_TEST(holder.is_acquired());
    // The lock is still the holder's: a second process of our identity queues behind it.
    auto second = make_lock(strategies::make_zookeeper_store(acl_options(hosts, root)), name);
    BOOST_TEST(!second.try_lock());
    // A store without auth reads the holder (status), and cannot queue: a clear refusal.
    auto o = options_for(hosts);
    o.root = root;
    auto open_store = strategies::make_zookeeper_store(o);
    BOOST_TEST(open_store->status(name).held == lock_status::state::held_exclusive);
    try {
        (void)make_lock(open_store, name).try_lock();
        BOOST_FAIL("a store without auth queued under a protected parent");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("ACL") != std::string::npos, e.what());
    }
    holder.unlock();
    BOOST_TEST(second.try_lock());
    second.unlock();
    // Every node the store made has the ACL: ours all, anyone read.
    admin ours(hosts, acl_auth, root);
    for (const auto& path : {root, strategies::zookeeper_lock_parent(root, name)}) {
        const auto acl = ours.acl_of(path);
        BOOST_TEST_CONTEXT(path) {
            BOOST_TEST(acl.size() == 2u);
            BOOST_TEST((std::count(acl.begin(), acl.end(), "world:anyone:1") == 1));
            BOOST_TEST((std::count_if(acl.begin(), acl.end(), [](const std::string& e) {
                            return e.rfind("digest:locksmith-it:", 0) == 0 &&
                                   e.substr(e.size() - 3) == ":31";
                        }) == 1));
        }
    }
}

BOOST_AUTO_TEST_CASE(an_open_root_or_parent_is_refused_and_the_message_says_how_to_fix_it) {
    const auto hosts = endpoint(hosts_variable);
    // A root made without auth (an older locksmith, another client): refused at the start.
    const auto root = test_root + "-openroot";
    admin old(hosts, "", root);
    BOOST_REQUIRE_EQUAL(
        zoo_create(old.handle(), root.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0),
        ZOK);
    try {
        (void)strategies::make_zookeeper_store(acl_options(hosts, root));
        BOOST_FAIL("a store with auth started on an open root");
    } catch (const backend_error& e) {
        const std::string m = e.what();
        BOOST_TEST(m.find("world:anyone:cdrwa") != std::string::npos, m);
        BOOST_TEST(m.find("setAcl -R " + root) != std::string::npos, m);
        BOOST_TEST(m.find(acl_password) == std::string::npos, m);
        BOOST_TEST((e.kind() == error_kind::permanent));
    }
    // The root fixed, a parent left open from before: the first request under it is refused
    // and leaves no node behind.
    const auto fixed = test_root + "-openparent";
    auto s = strategies::make_zookeeper_store(acl_options(hosts, fixed));
    const auto name = test::unique_resource("acl-legacy");
    admin ours(hosts, acl_auth, fixed);
    ours.create_parent(name);  // with the open ACL, as a locksmith without auth made it
    try {
        (void)make_lock(s, name).try_lock();
        BOOST_FAIL("a request went under an open parent");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("world:anyone:cdrwa") != std::string::npos, e.what());
    }
    BOOST_TEST(ours.requests(name) == 0);
}

BOOST_AUTO_TEST_CASE(a_new_session_adds_the_identity_again) {
    // The holder's session expires (SIGSTOP past its timeout); its store's next session must add
    // the identity before its first request, else its nodes could not be made (or be open).
    const auto hosts = endpoint(hosts_variable);
    const auto root = test_root + "-acl";
    const auto name = test::unique_resource("acl-new-session");
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto o = acl_options(hosts, root);
        o.session_timeout = 1s;
        auto s = strategies::make_zookeeper_store(o);
        key k(name);
        if (!s->try_acquire(k, lock_mode::exclusive, 0ms)) return 2;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'C') return 3;
        const auto until = clock_type::now() + must_happen;
        while (s->loss_fd(k).value_or(0) >= 0 && clock_type::now() < until)
            std::this_thread::sleep_for(5ms);
        s->release(k);
        char outcome = 'F';
        try {
            if (s->try_acquire(k, lock_mode::exclusive, 0ms)) outcome = 'T';
        } catch (const std::exception& e) {
            std::fprintf(stderr, "child: %s\n", e.what());
            outcome = 'E';
        }
        to_parent.put(outcome);
        if (to_child.get(must_happen) != 'D') return 4;
        s->release(k);
        return 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    ::kill(child, SIGSTOP);
    admin attacker(hosts, "", root);
    BOOST_REQUIRE(attacker.eventually_requests(name, 0));  // the session expired
    ::kill(child, SIGCONT);
    to_child.put('C');
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'T');
    if (attacker.requests(name) == 1)
        for (const auto& [what, rc] : attack(attacker, root, name))
            BOOST_TEST(rc == ZNOAUTH, what << ": " << rc);
    to_child.put('D');
    BOOST_TEST(test::wait_child(child) == 0);
}

BOOST_AUTO_TEST_CASE(auth_from_a_file_of_its_owners_alone) {
    const auto hosts = endpoint(hosts_variable);
    const auto root = test_root + "-acl";
    // In a folder of its own: a secret file's own folder may not be writable by others (/tmp).
    const std::string dir = "/tmp/locksmith-zk-auth-" + std::to_string(::getpid());
    const std::string file = dir + "/auth";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    {
        std::FILE* f = std::fopen(file.c_str(), "w");
        BOOST_REQUIRE(f);
        std::fputs((acl_auth + "\n").c_str(), f);
        std::fclose(f);
    }
    auto o = options_for(hosts);
    o.root = root;
    o.auth_from.file = file;
    ::chmod(file.c_str(), 0640);
    try {
        (void)strategies::make_zookeeper_store(o);
        BOOST_FAIL("a secret file readable by its group was used");
    } catch (const invalid_argument_error& e) {
        const std::string m = e.what();
        BOOST_TEST(m.find("0640") != std::string::npos, m);
        BOOST_TEST(m.find(file) != std::string::npos, m);
        BOOST_TEST(m.find(acl_password) == std::string::npos, m);
    }
    ::chmod(file.c_str(), 0600);
    const auto name = test::unique_resource("acl-file");
    auto holder = make_lock(strategies::make_zookeeper_store(o), name);
    BOOST_REQUIRE(holder.try_lock());
    admin attacker(hosts, "", root);
    BOOST_TEST(attack(attacker, root, name).at("delete the node") == ZNOAUTH);
    holder.unlock();
    // A file whose content is not digest:USER:PASSWORD: named, its content not quoted.
    {
        std::FILE* f = std::fopen(file.c_str(), "w");
        std::fputs(acl_password.c_str(), f);
        std::fclose(f);
    }
    try {
        (void)strategies::make_zookeeper_store(o);
        BOOST_FAIL("a secret file of the wrong form was used");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(std::string(e.what()).find(acl_password) == std::string::npos, e.what());
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
    BOOST_CHECK_THROW((void)strategies::zookeeper_options::from_json(
                          {{"hosts", hosts}, {"auth", acl_auth}, {"auth_file", file}}),
                      config_error);
}

BOOST_AUTO_TEST_SUITE_END()

// Faults: a private ZooKeeper, started and stopped with scripts/services.sh in a state folder
// and on a port of this test's own.

namespace {

// The answer of the server on `port` to a four-letter word (services.sh allows those the tests
// use); empty when it does not answer.
std::string four_letter_word(int port, const char* word) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(std::uint16_t(port));
    std::string reply;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::write(fd, word, 4) == 4) {
        char buf[4096];
        for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, n);
    }
    ::close(fd);
    BOOST_REQUIRE_MESSAGE(reply.find("not in the whitelist") == std::string::npos,
                          "zookeeper refuses '" << word
                                                << "': add it to 4lw.commands.whitelist in "
                                                   "scripts/services.sh");
    return reply;
}

class private_zookeeper {
  public:
    private_zookeeper()
        : dir_("/tmp/locksmith-zk-faults-" + std::to_string(::getpid())), port_(test::free_port()) {
        start();
    }
    ~private_zookeeper() {
        run("stop");
        std::system(("rm -rf '" + dir_ + "'").c_str());
    }
    std::string hosts() const { return "127.0.0.1:" + std::to_string(port_); }
    std::string ask(const char* word) const { return four_letter_word(port_, word); }
    // A number of `mntr`'s answer (0 when absent).
    long long metric(const std::string& name) const {
        const auto reply = ask("mntr");
        const auto at = reply.find("\n" + name + "\t");
        return at == std::string::npos ? 0 : std::stoll(reply.substr(at + name.size() + 2));
    }
    // `wchp`: the data watches by path, each path with the sessions that watch it.
    std::map<std::string, std::vector<std::string>> watches_by_path() const {
        std::map<std::string, std::vector<std::string>> by_path;
        std::istringstream reply(ask("wchp"));
        std::string path;
        for (std::string line; std::getline(reply, line);) {
            if (line.empty()) continue;
            if (line[0] == '\t')
                by_path[path].push_back(line.substr(1));
            else
                by_path[path = line];
        }
        return by_path;
    }
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

BOOST_AUTO_TEST_SUITE(zk_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

BOOST_AUTO_TEST_CASE(server_restarted_within_the_session_timeout_keeps_holder_and_waiter) {
    // The server keeps its sessions across a restart (they are in its log); a client that comes
    // back within the session timeout keeps its nodes and watches.
    private_zookeeper server;
    auto o = options_for(server.hosts());
    o.session_timeout = 30s;
    auto s = strategies::make_zookeeper_store(o);
    const auto name = test::unique_resource("restart");
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(60s); });
    {
        admin a(server.hosts());
        BOOST_REQUIRE(a.eventually_requests(name, 2));
    }
    server.stop();
    server.start();
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST((waited.wait_for(0s) == std::future_status::timeout));
    holder.unlock();
    BOOST_TEST(waited.get());
    BOOST_TEST(waiter.is_acquired());
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(server_down_past_the_session_timeout_loses_the_lock) {
    private_zookeeper server;
    auto o = options_for(server.hosts());
    o.session_timeout = 2s;
    auto s = strategies::make_zookeeper_store(o);
    const auto name = test::unique_resource("down");
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    server.stop();
    // Down longer than the session timeout: is_acquired() waits it out and says lost.
    const auto asked = clock_type::now();
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST_MESSAGE("is_acquired() answered after " << ms_since(asked) << " ms");
    // New requests fail with a clear error while the server is down.
    auto fresh = make_lock(s, name);
    BOOST_CHECK_THROW((void)fresh.try_lock(), backend_error);
    server.start();
    // Back: the store starts a new session; the old one's lock is gone.
    BOOST_TEST(fresh.try_lock_for(must_happen));
    fresh.unlock();
}

// A holder in another process releases while the server is down: the release fails, and the
// process lives on with its store. Its session must not come back with the restarted server
// (which keeps sessions in its log) and keep the node: the next holder is granted within a few
// session timeouts of the server's return, not when that process ends. (Found by the faults run:
// locksmith_faults run --strategy zookeeper --nemesis restart, no grant for the 7.6 s left.)
BOOST_AUTO_TEST_CASE(a_release_that_fails_in_an_outage_leaves_no_node_behind_after_it) {
    private_zookeeper server;
    auto o = options_for(server.hosts());
    o.session_timeout = 2s;
    const std::string name = test::unique_resource("release_in_outage");
    const std::string dir = "/tmp/locksmith-zk-outage-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    auto eventually = [&](const std::string& file) {
        const auto until = clock_type::now() + must_happen;
        while (!std::filesystem::exists(dir + "/" + file) && clock_type::now() < until)
            std::this_thread::sleep_for(20ms);
        return std::filesystem::exists(dir + "/" + file);
    };
    const pid_t holder = test::fork_child(
        [&] {
            auto mine = make_lock(strategies::make_zookeeper_store(o), name);
            if (!mine.try_lock()) return 1;
            std::ofstream(dir + "/held");
            if (!eventually("stopped")) return 2;
            mine.unlock();  // fails: the server is down (reported to the error handler)
            std::ofstream(dir + "/released");
            std::this_thread::sleep_for(120s);  // lives on with its store until killed
            return 0;
        },
        180s);
    BOOST_REQUIRE(eventually("held"));
    server.stop();
    std::ofstream(dir + "/stopped");
    BOOST_REQUIRE(eventually("released"));
    server.start();
    auto next = make_lock(strategies::make_zookeeper_store(o), name);
    // A bound far above the session timeout, far below the holder's life.
    BOOST_TEST(next.try_lock_for(20s));
    ::kill(holder, SIGKILL);
    (void)test::wait_child(holder, 10s);
    std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

// Failover: a private ensemble of three servers (scripts/services.sh zookeeper-ensemble, in a
// state folder and on ports of this test's own, so that killing its members disturbs no other
// test), with auth as in production. A member is killed (SIGKILL) by the PID services.sh keeps
// in zookeeper-ensemble-N.pid, and started again before the case ends.

namespace {

class private_ensemble {
  public:
    private_ensemble() : dir_("/tmp/locksmith-zk-ensemble-" + std::to_string(::getpid())) {
        // Nine ports from the base (services.sh): retried when one of them is taken.
        for (int attempt = 0; attempt < 5; ++attempt) {
            base_ = test::free_ports(9);
            if (run("start") == 0) return;
            run("stop");
        }
        BOOST_FAIL("could not start a zookeeper ensemble (see " << dir_ << ")");
    }
    ~private_ensemble() {
        run("stop");
        std::system(("rm -rf '" + dir_ + "' '" + dir_ + ".log'").c_str());
    }
    private_ensemble(const private_ensemble&) = delete;
    private_ensemble& operator=(const private_ensemble&) = delete;
    std::string hosts() const {
        std::string out;
        for (int i = 0; i < 3; ++i)
            out += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(base_ + i);
        return out;
    }
    // The member (1..3) that is the leader, or 0.
    int leader() const {
        for (int m = 1; m <= 3; ++m)
            if (four_letter_word(base_ + m - 1, "srvr").find("Mode: leader") != std::string::npos)
                return m;
        return 0;
    }
    // True once a leader serves two synced followers: killing one member then leaves a quorum.
    bool whole() const {
        const int m = leader();
        return m != 0 && four_letter_word(base_ + m - 1, "mntr").find("zk_synced_followers\t2") !=
                             std::string::npos;
    }
    // The member (1..3) that session `id` is connected to (`cons` lists each connection's
    // sid), or 0.
    int member_of_session(std::int64_t id) const {
        char sid[32];
        std::snprintf(sid, sizeof sid, "sid=0x%llx", static_cast<unsigned long long>(id));
        for (int m = 1; m <= 3; ++m) {
            const auto cons = four_letter_word(base_ + m - 1, "cons");
            // "sid=0x1234," or "sid=0x1234)": not a prefix of a longer id.
            for (auto at = cons.find(sid); at != std::string::npos; at = cons.find(sid, at + 1)) {
                const char next = cons[at + std::strlen(sid)];
                if (next == ',' || next == ')') return m;
            }
        }
        return 0;
    }
    void kill_member(int m) {
        std::FILE* f =
            std::fopen((dir_ + "/zookeeper-ensemble-" + std::to_string(m) + ".pid").c_str(), "r");
        BOOST_REQUIRE(f);
        long pid = 0;
        BOOST_REQUIRE(std::fscanf(f, "%ld", &pid) == 1);
        std::fclose(f);
        BOOST_REQUIRE(::kill(pid_t(pid), SIGKILL) == 0);
    }
    // Starts the members that are not running (and waits until they serve).
    void heal() { BOOST_REQUIRE_MESSAGE(run("start") == 0, "could not restart the members"); }

  private:
    int run(const char* what) const {
        const std::string cmd =
            "LOCKSMITH_SERVICES_DIR='" + dir_ +
            "' LOCKSMITH_SERVICES=zookeeper-ensemble LOCKSMITH_ZOOKEEPER_ENSEMBLE_PORT=" +
            std::to_string(base_) + " '" + test::services_script() + "' " + what + " >>'" + dir_ +
            ".log' 2>&1";
        return std::system(cmd.c_str());
    }
    std::string dir_;
    int base_ = 0;
};

private_ensemble& ensemble() {
    static private_ensemble e;
    return e;
}

// The session that holds the single request for `name` under `root` (its node's ephemeral
// owner).
std::int64_t holder_session(admin& a, const std::string& name) {
    const auto paths = a.request_paths(name);
    BOOST_REQUIRE_EQUAL(paths.size(), 1u);
    struct Stat stat;
    BOOST_REQUIRE_EQUAL(zoo_exists(a.handle(), paths.front().c_str(), 0, &stat), ZOK);
    return stat.ephemeralOwner;
}

// Holds `name` while `kill` takes a member down: the holder keeps the lock and hears of no loss,
// a second session cannot take it, a waiter is served after the release, with a larger token.
template <class Choose>
void hold_through_the_loss_of_a_member(const std::string& label, Choose choose_member) {
    auto& e = ensemble();
    const auto root = test_root + "-ensemble";
    auto o = acl_options(e.hosts(), root);
    o.session_timeout = 10s;  // the members' reconnection happens well within it
    o.connect_timeout = 10s;  // a store made during the election waits for its end
    const auto name = test::unique_resource(label);
    std::atomic<int> losses{0};
    lock_options lo;
    lo.on_lost = [&](const error&) { ++losses; };
    auto holder = make_lock(strategies::make_zookeeper_store(o), name, lo);
    BOOST_REQUIRE(holder.try_lock());
    const auto first_token = holder.fencing_token();
    BOOST_REQUIRE(first_token);
    admin a(e.hosts(), acl_auth, root);
    e.heal();  // in case an earlier case failed before it healed
    const auto until = clock_type::now() + must_happen;
    while (!e.whole() && clock_type::now() < until) std::this_thread::sleep_for(20ms);
    BOOST_REQUIRE_MESSAGE(e.whole(), "the ensemble has no leader with two synced followers");
    const int victim = choose_member(e, holder_session(a, name));
    BOOST_REQUIRE(victim != 0);
    BOOST_TEST_MESSAGE(label << ": killing member " << victim << " (leader: " << e.leader() << ")");
    auto other = strategies::make_zookeeper_store(o);
    auto waiter = make_lock(other, name);
    e.kill_member(victim);
    const auto killed = clock_type::now();
    BOOST_TEST(holder.is_acquired());
    auto second = make_lock(strategies::make_zookeeper_store(o), name);
    BOOST_TEST(!second.try_lock());
    auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    BOOST_REQUIRE(a.eventually_requests(name, 2));
    BOOST_TEST((waited.wait_for(500ms) == std::future_status::timeout));
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST_MESSAGE(label << ": the holder confirmed its lock " << ms_since(killed)
                             << " ms after the kill");
    holder.unlock();
    BOOST_TEST(waited.get());
    BOOST_TEST(waiter.fencing_token().value_or(0) > *first_token);
    waiter.unlock();
    BOOST_TEST(losses.load() == 0);
    e.heal();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zk_failover,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

BOOST_AUTO_TEST_CASE(the_server_of_the_holders_session_killed_keeps_the_lock) {
    hold_through_the_loss_of_a_member("failover-own", [](private_ensemble& e, std::int64_t id) {
        int m = 0;
        const auto until = clock_type::now() + must_happen;
        while ((m = e.member_of_session(id)) == 0 && clock_type::now() < until)
            std::this_thread::sleep_for(20ms);
        return m;
    });
}

BOOST_AUTO_TEST_CASE(the_leader_killed_keeps_the_lock_and_tokens_increase) {
    hold_through_the_loss_of_a_member("failover-leader", [](private_ensemble& e, std::int64_t) {
        int m = 0;
        const auto until = clock_type::now() + must_happen;
        while ((m = e.leader()) == 0 && clock_type::now() < until)
            std::this_thread::sleep_for(20ms);
        return m;
    });
}

BOOST_AUTO_TEST_SUITE_END()

// Watches, counted by a private server (server-wide numbers: no other test's watches there).

BOOST_AUTO_TEST_SUITE(zk_watches,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          hosts_variable}))

BOOST_AUTO_TEST_CASE(each_waiter_watches_only_its_predecessor_and_a_release_wakes_one) {
    constexpr int waiters = 6;
    private_zookeeper server;
    admin a(server.hosts());
    const auto name = test::unique_resource("herd");
    auto holder = make_lock(store_for(server.hosts()), name);
    BOOST_REQUIRE(holder.try_lock());
    // Each waiter has a session of its own, as processes would: a watch shared by several shows
    // as one node with several sessions.
    std::vector<std::future<bool>> granted;
    std::promise<void> first_holds, release_first;
    auto first_may_release = release_first.get_future().share();
    for (int i = 0; i < waiters; ++i) {
        granted.push_back(std::async(std::launch::async, [&, i] {
            auto lock = make_lock(store_for(server.hosts()), name);
            if (!lock.try_lock_for(must_happen)) return false;
            if (i == 0) {
                first_holds.set_value();
                first_may_release.wait();
            }
            lock.unlock();
            return true;
        }));
        BOOST_REQUIRE(a.eventually_requests(name, i + 2));
    }
    const auto until = clock_type::now() + must_happen;
    while (server.metric("zk_watch_count") < waiters && clock_type::now() < until)
        std::this_thread::sleep_for(5ms);
    // zk_watch_count counts data and children watches; wchp shows the data watches only.
    BOOST_TEST(server.metric("zk_watch_count") == waiters);
    // The watched nodes are every request but the last (each waiter's predecessor), each by
    // one session.
    auto predecessors = a.request_paths(name);
    predecessors.pop_back();
    std::sort(predecessors.begin(), predecessors.end());  // as wchp's paths
    std::vector<std::string> watched;
    for (const auto& [path, sessions] : server.watches_by_path()) {
        watched.push_back(path);
        BOOST_TEST(sessions.size() == 1u, path << " is watched by " << sessions.size());
    }
    BOOST_TEST(watched == predecessors, boost::test_tools::per_element());
    const auto deleted_before = server.metric("zk_sum_node_deleted_watch_count");
    const auto children_before = server.metric("zk_sum_node_children_watch_count");
    holder.unlock();
    // The holder's node is gone: its one watcher, the first waiter, holds now; nobody else woke.
    BOOST_TEST((first_holds.get_future().wait_for(must_happen) == std::future_status::ready));
    BOOST_TEST(server.metric("zk_sum_node_deleted_watch_count") - deleted_before == 1);
    BOOST_TEST(server.metric("zk_sum_node_children_watch_count") - children_before == 0);
    BOOST_TEST(server.watches_by_path().size() == std::size_t(waiters - 1));
    release_first.set_value();
    for (auto& g : granted) BOOST_TEST(g.get());
}

BOOST_AUTO_TEST_SUITE_END()
