// The zookeeper strategy against a real ZooKeeper: the shared server of scripts/services.sh
// (LOCKSMITH_TEST_ZOOKEEPER) and, for the fault case, a private server this test starts, stops
// and restarts with the same script (its own state folder and port).
#define BOOST_TEST_MODULE zookeeper_integration
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <regex>
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

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* hosts_variable = "LOCKSMITH_TEST_ZOOKEEPER";
// The safety net of cases that wait for something that must happen; never a speed check.
constexpr auto must_happen = 30s;
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

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// A session of the test's own, to look at the server from outside the strategy.
class admin {
  public:
    explicit admin(const std::string& hosts) {
        zoo_set_debug_level(ZooLogLevel(0));  // quiet
        zh_ = zookeeper_init(hosts.c_str(), nullptr, 10000, nullptr, nullptr, 0);
        BOOST_REQUIRE(zh_);
        const auto until = clock_type::now() + must_happen;
        while (zoo_state(zh_) != ZOO_CONNECTED_STATE && clock_type::now() < until)
            std::this_thread::sleep_for(10ms);
    }
    ~admin() { zookeeper_close(zh_); }
    admin(const admin&) = delete;
    admin& operator=(const admin&) = delete;
    // How many requests queue for `name` (holders and waiters).
    int requests(const std::string& name) {
        String_vector children{};
        const auto parent = strategies::zookeeper_lock_parent(test_root, name);
        if (zoo_get_children(zh_, parent.c_str(), 0, &children) != ZOK) return 0;
        const int n = children.count;
        deallocate_String_vector(&children);
        return n;
    }
    // The paths of the requests for `name`, in queue order (by their sequence number, the
    // last 10 characters).
    std::vector<std::string> request_paths(const std::string& name) {
        const auto parent = strategies::zookeeper_lock_parent(test_root, name);
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
        const auto parent = strategies::zookeeper_lock_parent(test_root, name);
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
    zhandle_t* zh_ = nullptr;
};

// Whether the bytes a client sent hold a whole create request: ZooKeeper frames each request as
// a big-endian int32 length, then the xid and the op code (int32 each); 1 is create, 15 create2.
bool holds_create_request(std::string_view sent) {
    const auto int32_at = [&](std::size_t at) {
        return std::int32_t(std::uint32_t(std::uint8_t(sent[at])) << 24 |
                            std::uint32_t(std::uint8_t(sent[at + 1])) << 16 |
                            std::uint32_t(std::uint8_t(sent[at + 2])) << 8 |
                            std::uint32_t(std::uint8_t(sent[at + 3])));
    };
    for (std::size_t at = 0; sent.size() - at >= 12;) {
        const auto length = std::size_t(int32_at(at));
        if (sent.size() - at - 4 < length) return false;
        const auto op = int32_at(at + 8);
        if (op == 1 || op == 15) return true;
        at += 4 + length;
    }
    return false;
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

// Faults: a private ZooKeeper, started and stopped with scripts/services.sh in a state folder
// and on a port of this test's own.

namespace {

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
    // The server's answer to a four-letter word (services.sh allows those the tests use).
    std::string ask(const char* word) const {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(std::uint16_t(port_));
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
            " '" LOCKSMITH_SERVICES_SCRIPT "' " + what + " >/dev/null 2>&1";
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
