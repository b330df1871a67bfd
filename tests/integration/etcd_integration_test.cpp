// SPDX-License-Identifier: MIT
// The etcd strategy against a real etcd: the shared one from scripts/services.sh
// (LOCKSMITH_TEST_ETCD) and, for the fault case, a private instance this test stops and restarts.
#define BOOST_TEST_MODULE etcd_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/etcd.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/hostile_server.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;

namespace {

constexpr const char* endpoint_variable = "LOCKSMITH_TEST_ETCD";
const auto must_happen = test::patience(60s);  // safety net only

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

// A TCP relay in front of the etcd gateway that sees what a store sends: it numbers every request
// and every watch event it passes on in one sequence, can hold the next watch request back until
// the test lets it through, can keep watch events from the store, or pass the first two watch
// events (of any of its connections) in the opposite order. HTTP/1.1 as the store
// speaks it: requests start with "POST /v3/"; a watch reply is chunked, one message per chunk.
class gateway_relay {
  public:
    explicit gateway_relay(const std::string& upstream_url) {
        const auto colon = upstream_url.rfind(':');
        upstream_host_ = upstream_url.substr(7, colon - 7);
        upstream_port_ = std::stoi(upstream_url.substr(colon + 1));
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
            ::listen(listen_fd_, 16) != 0 ||
            ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            BOOST_FAIL("relay: cannot listen on 127.0.0.1");
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }

    ~gateway_relay() {
        {
            std::lock_guard g(mutex_);
            stopping_ = true;
            for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
        }
        changed_.notify_all();
        ::shutdown(listen_fd_, SHUT_RDWR);
        acceptor_.join();  // then no pump is added any more
        for (auto& t : pumps_) t.join();
        for (int fd : fds_) ::close(fd);
        ::close(listen_fd_);
    }

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

    void hold_watch_requests() {
        std::lock_guard g(mutex_);
        hold_ = true;
    }
    void drop_watch_events() {
        std::lock_guard g(mutex_);
        drop_events_ = true;
    }
    void swap_first_two_watch_events() {
        std::lock_guard g(mutex_);
        swap_events_ = true;
    }

    // True once a watch request is being held back (false: none came within `within`).
    bool wait_watch_request_held(std::chrono::milliseconds within) {
        std::unique_lock g(mutex_);
        return changed_.wait_for(g, within, [&] { return held_; });
    }

    void release_watch_requests() {
        {
            std::lock_guard g(mutex_);
            hold_ = false;
        }
        changed_.notify_all();
    }

    // True once the server confirmed `n` watchers (false: not within `within`).
    bool wait_watchers_confirmed(int n, std::chrono::milliseconds within) {
        std::unique_lock g(mutex_);
        return changed_.wait_for(g, within, [&] { return confirmed_ >= n; });
    }

    // How many requests the store sent after the first watch event reached it.
    int requests_after_first_event() {
        std::lock_guard g(mutex_);
        if (first_event_ == 0) return 0;
        return int(std::count_if(requests_.begin(), requests_.end(),
                                 [&](long seq) { return seq > first_event_; }));
    }

  private:
    void accept_loop() {
        for (;;) {
            const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) return;
            const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(std::uint16_t(upstream_port_));
            ::inet_pton(AF_INET, upstream_host_.c_str(), &a.sin_addr);
            const bool connected =
                ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
            std::lock_guard g(mutex_);
            fds_.push_back(client);
            fds_.push_back(server);
            if (stopping_ || !connected) {
                ::shutdown(client, SHUT_RDWR);
                continue;
            }
            auto watch = std::make_shared<std::atomic<bool>>(false);
            pumps_.emplace_back([=, this] { requests(client, server, *watch); });
            pumps_.emplace_back([=, this] { replies(server, client, *watch); });
        }
    }

    static bool send_all(int fd, const char* data, std::size_t n) {
        while (n > 0) {
            const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
            if (sent <= 0) return false;
            data += sent;
            n -= std::size_t(sent);
        }
        return true;
    }

    // Client to server: numbers the requests; holds a watch request back when asked to.
    void requests(int from, int to, std::atomic<bool>& watch) {
        std::string seen;
        std::size_t scanned = 0;
        char buffer[16384];
        for (ssize_t n; (n = ::recv(from, buffer, sizeof buffer, 0)) > 0;) {
            seen.append(buffer, std::size_t(n));
            for (std::size_t at; (at = seen.find("POST /v3/", scanned)) != std::string::npos;) {
                scanned = at + 1;
                const bool is_watch = seen.compare(at, 14, "POST /v3/watch") == 0;
                std::unique_lock g(mutex_);
                requests_.push_back(++sequence_);
                if (is_watch) {
                    watch = true;
                    if (hold_) {
                        held_ = true;
                        changed_.notify_all();
                        changed_.wait(g, [&] { return !hold_ || stopping_; });
                    }
                }
            }
            if (!send_all(to, buffer, std::size_t(n))) break;
        }
        ::shutdown(to, SHUT_WR);
    }

    // Server to client: on a watch connection, passes the reply chunk by chunk, noting watcher
    // confirmations and events (and keeping events back when asked to).
    void replies(int from, int to, std::atomic<bool>& watch) {
        std::string pending;
        bool head_done = false;
        char buffer[16384];
        for (ssize_t n; (n = ::recv(from, buffer, sizeof buffer, 0)) > 0;) {
            if (!watch) {
                if (!send_all(to, buffer, std::size_t(n))) break;
                continue;
            }
            pending.append(buffer, std::size_t(n));
            if (!head_done) {
                const auto end = pending.find("\r\n\r\n");
                if (end == std::string::npos) continue;
                if (!send_all(to, pending.data(), end + 4)) break;
                pending.erase(0, end + 4);
                head_done = true;
            }
            for (;;) {
                const auto line_end = pending.find("\r\n");
                if (line_end == std::string::npos) break;
                const std::size_t size = std::stoul(pending.substr(0, line_end), nullptr, 16);
                const std::size_t total = line_end + 2 + size + 2;
                if (pending.size() < total) break;
                const std::string chunk = pending.substr(0, total);
                pending.erase(0, total);
                bool pass = true;
                std::string after;  // the held first event, passed on after the second
                int after_to = -1;
                {
                    std::lock_guard g(mutex_);
                    if (chunk.find("\"created\":true") != std::string::npos) ++confirmed_;
                    if (chunk.find("\"events\"") != std::string::npos) {
                        ++sequence_;
                        if (first_event_ == 0) first_event_ = sequence_;
                        pass = !drop_events_;
                        if (swap_events_ && sequence_ == first_event_) {
                            swapped_ = chunk;
                            swapped_to_ = to;
                            pass = false;
                        } else if (swap_events_ && !swapped_.empty()) {
                            after = std::exchange(swapped_, {});
                            after_to = swapped_to_;
                        }
                    }
                }
                changed_.notify_all();
                if (pass && !send_all(to, chunk.data(), chunk.size())) return;
                if (!after.empty()) send_all(after_to, after.data(), after.size());
            }
        }
        ::shutdown(to, SHUT_WR);
    }

    std::string upstream_host_;
    int upstream_port_ = 0;
    int listen_fd_ = -1;
    int port_ = 0;
    std::thread acceptor_;
    std::mutex mutex_;
    std::condition_variable changed_;
    bool stopping_ = false;
    bool hold_ = false;
    bool drop_events_ = false;
    bool swap_events_ = false;
    std::string swapped_;  // the first watch event, held back until another has passed
    int swapped_to_ = -1;
    bool held_ = false;
    int confirmed_ = 0;
    long sequence_ = 0;
    long first_event_ = 0;
    std::vector<long> requests_;
    std::vector<int> fds_;
    std::vector<std::thread> pumps_;  // started by the acceptor, under the mutex
};

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
         {"https://u:pw@127.0.0.1:2379", "127.0.0.1:2379", "http://u:pw@h:1", "http://h:99999",
          // Mixed schemes; TLS options on a clear-text endpoint.
          "https://127.0.0.1:1,http://127.0.0.1:2",
          // An IPv6 address without brackets (found by fuzz_etcd_endpoint: "http://fe80::1" was
          // host "fe80:" on port 1, and the endpoint's text named another endpoint).
          "http://fe80::1", "http://::1:2379",
          // Brackets inside the host: [[::1] was host "[::1".
          "http://[[::1]:2379", "http://a]b"}) {
        try {
            strategies::etcd_options::from_json({{"endpoints", bad}});
            BOOST_FAIL(std::string("accepted ") + bad);
        } catch (const config_error& e) {
            BOOST_TEST(std::string(e.what()).find("pw") == std::string::npos, e.what());
        }
    }
    try {
        strategies::etcd_options::from_json(
            {{"endpoints", "http://127.0.0.1:2379"}, {"ca_file", "/etc/ssl/ca.pem"}});
        BOOST_FAIL("TLS options accepted on an http:// endpoint");
    } catch (const config_error& e) {
        BOOST_TEST(std::string(e.what()).find("https://") != std::string::npos, e.what());
    }
}

// --- a broken or hostile endpoint -----------------------------------------------------------
// An endpoint that speaks etcd's gateway as far as a wait needs (status, lease, the enqueuing
// transaction, which finds another owner's key first, keep-alives, revoke, the watch of that
// key), except for one answer that is broken: to the transaction (a normal reply) or to the
// watch (the stream). The client must return, with a clear error or (a wait) false, within its
// deadline, and never crash: each attempt runs in a child process, so that a crash is this
// case's failure (its signal), not the test program's end.

enum class broken_at { reply, stream };
enum class breakage { deep, huge, bad_chunks, silent, trickle };

const char* to_string(breakage b) {
    switch (b) {
        case breakage::deep:
            return "nested 200,000 deep";
        case breakage::huge:
            return "2 MiB";
        case breakage::bad_chunks:
            return "bad chunked encoding";
        case breakage::silent:
            return "never answers";
        case breakage::trickle:
            return "one byte a second";
    }
    return "?";
}

// The transaction's reply: our key (revision 10) behind another owner's (5), whom we watch.
const std::string enqueued =
    R"({"header":{"revision":"10"},"succeeded":true,"responses":[{"response_put":{}},)"
    R"({"response_range":{"kvs":[{"key":"b3RoZXI=","create_revision":"5"}]}},)"
    R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"},)"
    R"({"key":"b3RoZXI=","create_revision":"5"}]}}]})";
// A later read of the queue: the same place.
const std::string queue_read =
    R"({"header":{"revision":"12"},"succeeded":true,"responses":[)"
    R"({"response_range":{"kvs":[{"key":"b3RoZXI=","create_revision":"5"}]}},)"
    R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"}]}},)"
    R"({"response_range":{"kvs":[{"key":"b3RoZXI=","create_revision":"5"}]}}]})";
const std::string watch_created = R"({"result":{"header":{"revision":"10"},"created":true}})"
                                  "\n";

test::http_answer broken_answer(broken_at where, breakage b) {
    const std::string deep = test::deeply_nested_json(200000);
    test::http_answer a;
    if (where == broken_at::reply) {
        switch (b) {
            case breakage::deep:  // where the reply's keys are (copied when the place is read)
                a.bytes = test::json_reply(
                    R"({"header":{"revision":"10"},"succeeded":true,"responses":[{},)"
                    R"({"response_range":{"kvs":[]}},)"
                    R"({"response_range":{"kvs":[{"create_revision":"10"},)" +
                    deep + "]}}]}");
                break;
            case breakage::huge:
                a.bytes = test::json_reply(enqueued + std::string(2 << 20, ' '));
                break;
            case breakage::bad_chunks:
                a.bytes = test::chunked_head() + "zz\r\n" + enqueued + "\r\n0\r\n\r\n";
                break;
            case breakage::silent:
                a.then_silent = true;
                break;
            case breakage::trickle:
                a.trickle = test::json_reply(enqueued);
                break;
        }
        return a;
    }
    a.then_silent = true;  // a stream that stays open after what it sends
    switch (b) {
        case breakage::deep:
            a.bytes =
                test::chunked_head() + test::chunk(watch_created) +
                test::chunk(R"({"result":{"header":{"revision":"11"},"events":)" + deep + "}}\n");
            break;
        case breakage::huge:
            a.bytes = test::chunked_head() + test::chunk(watch_created) +
                      test::chunk(std::string(2 << 20, ' '));
            break;
        case breakage::bad_chunks:
            a.bytes = test::chunked_head() + test::chunk(watch_created) + "5\r\nabcdefgh";
            break;
        case breakage::silent:
            break;
        case breakage::trickle:
            a.bytes = test::chunked_head() + test::chunk(watch_created);
            a.trickle = test::chunk(R"({"result":{"header":{"revision":"11"},"events":[]}})"
                                    "\n");
            break;
    }
    return a;
}

// A permit of a semaphore of 1 (issue 27), the same way: its key created (revision 10) behind
// another holder's (5), whose deletion it watches; a later read finds the same place.
const std::string permit_enqueued =
    R"({"header":{"revision":"10"},"succeeded":true,"responses":[{"response_put":{}},)"
    R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"},)"
    R"({"key":"b3RoZXI=","create_revision":"5"}]}}]})";
const std::string permit_read =
    R"({"header":{"revision":"12"},"succeeded":true,"responses":[)"
    R"({"response_range":{"kvs":[{"key":"b3RoZXI=","create_revision":"5"}]}},)"
    R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"}]}}]})";

test::http_answer fake_etcd(const test::http_request& r, broken_at where, breakage b,
                            bool permit = false) {
    if (r.path == "/v3/kv/txn" && where == broken_at::reply) return broken_answer(where, b);
    if (r.path == "/v3/watch") return broken_answer(where, b);
    test::http_answer a;
    if (permit && r.path == "/v3/kv/txn")
        a.bytes = test::json_reply(r.body.find("compare") != std::string::npos ? permit_enqueued
                                                                               : permit_read);
    else if (r.path == "/v3/lease/grant")
        a.bytes = test::json_reply(R"({"header":{"revision":"1"},"ID":"7","TTL":"30"})");
    else if (r.path == "/v3/kv/txn" && r.body.find("compare") != std::string::npos)
        a.bytes = test::json_reply(enqueued);
    else if (r.path == "/v3/kv/txn")
        a.bytes = test::json_reply(queue_read);
    else if (r.path == "/v3/lease/keepalive")
        a.bytes = test::json_reply(R"({"result":{"ID":"7","TTL":"30"}})");
    else
        a.bytes = test::json_reply(R"({"header":{"revision":"10"}})");  // status, revoke
    return a;
}

BOOST_AUTO_TEST_CASE(a_broken_or_hostile_endpoint_gets_a_clear_error_in_time_and_no_crash) {
    constexpr auto request_timeout = 2s;
    constexpr auto wait = 3s;  // the caller's deadline, for the watch
    constexpr auto slack = 1s;
    // A lock, and a permit of a semaphore of 1 (its own requests and watch).
    for (const bool permit : {false, true})
        for (const auto where : {broken_at::reply, broken_at::stream})
            for (const auto b : {breakage::deep, breakage::huge, breakage::bad_chunks,
                                 breakage::silent, breakage::trickle}) {
                const std::string what =
                    std::string(permit ? "a permit: " : "a lock: ") +
                    (where == broken_at::reply ? "a reply " : "a watch stream ") + to_string(b);
                test::hostile_server server(test::http_script(
                    [=](const test::http_request& r) { return fake_etcd(r, where, b, permit); }));
                char path[] = "/tmp/locksmith-etcd-hostile-XXXXXX";
                const int fd = ::mkstemp(path);
                BOOST_REQUIRE(fd >= 0);
                ::close(fd);
                const pid_t child = test::fork_child(
                    [&] {
                        auto o = options_for(server.url("http"));
                        o.request_timeout = request_timeout;
                        std::string result;
                        const auto started = std::chrono::steady_clock::now();
                        try {
                            auto k = std::make_shared<key>("hostile");
                            if (permit) k->set_limit(1);
                            lock_options lo;
                            lo.ttl = 30s;
                            named_lock lock(strategies::make_etcd_store(o), k, lo);
                            // A reply fails the try; a stream fails (or times out) the wait.
                            const bool granted = where == broken_at::reply
                                                     ? lock.try_lock()
                                                     : lock.try_lock_for(wait);
                            result = granted ? "granted" : "not granted";
                        } catch (const error& e) {
                            result = std::string("error: ") + e.what();
                        }
                        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - started)
                                            .count();
                        std::ofstream(path) << ms << "\n" << result;
                        return 0;
                    },
                    must_happen);
                const int status = test::wait_child(child, must_happen);
                std::ifstream in(path);
                long long ms = -1;
                std::string result;
                in >> ms;
                std::getline(in >> std::ws, result);
                ::unlink(path);
                BOOST_TEST_CONTEXT(what << ": " << result << " after " << ms << " ms") {
                    BOOST_TEST(status == 0, "the client died (status " << status << ")");
                    const std::chrono::milliseconds bound =
                        (where == broken_at::reply ? request_timeout : wait) + slack;
                    BOOST_TEST(ms >= 0);
                    BOOST_TEST(ms < bound.count());
                    switch (b) {
                        case breakage::deep:
                            BOOST_TEST(result.find("nests deeper than") != std::string::npos);
                            break;
                        case breakage::huge:
                            BOOST_TEST(result.find("than 1 MiB") != std::string::npos);
                            break;
                        case breakage::bad_chunks:
                            BOOST_TEST(result.find("chunk") != std::string::npos);
                            break;
                        case breakage::silent:
                        case breakage::trickle:
                            // A request times out; a wait ends at its deadline, lock not granted.
                            if (where == broken_at::reply)
                                BOOST_TEST(result.find("no reply in time") != std::string::npos);
                            else
                                BOOST_TEST((result == "not granted" ||
                                            result.find("in time") != std::string::npos));
                            break;
                    }
                }
            }
}

// Found by tests/fuzz/fuzz_etcd_replies: a server's error text went into messages as sent, so a
// broken or hostile server that echoes the password showed it. A stand-in on 127.0.0.1 (no etcd
// needed) grants a token, then answers the status request with the password in its error.
// A fake etcd that grants lease 7 and its key at once; keep-alives are answered by `keep_alive`.
test::http_answer granting_etcd(const test::http_request& r,
                                const std::function<test::http_answer()>& keep_alive) {
    test::http_answer a;
    if (r.path == "/v3/lease/keepalive") return keep_alive();
    if (r.path == "/v3/lease/grant")
        a.bytes = test::json_reply(R"({"header":{"revision":"1"},"ID":"7","TTL":"30"})");
    else if (r.path == "/v3/kv/txn")
        a.bytes = test::json_reply(
            R"({"header":{"revision":"10"},"succeeded":true,"responses":[{},)"
            R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"}]}},)"
            R"({"response_range":{"kvs":[{"key":"bWluZQ==","create_revision":"10"}]}}]})");
    else
        a.bytes = test::json_reply(R"({"header":{"revision":"10"}})");  // status, revoke
    return a;
}

test::http_answer keep_alive_ok() {
    test::http_answer a;
    a.bytes = test::json_reply(R"({"result":{"ID":"7","TTL":"30"}})");
    return a;
}

// Keep-alive is a stream at etcd, and the gateway reports a failed one (no leader, a leader
// change) as HTTP 200 with {"error": ...}: a failed refresh, not a lost lock.
BOOST_AUTO_TEST_CASE(a_keep_alive_the_server_failed_is_an_error_not_a_lost_lock) {
    test::hostile_server fake(test::http_script([](const test::http_request& r) {
        return granting_etcd(r, [] {
            test::http_answer a;
            a.bytes = test::json_reply(
                R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader",)"
                R"("http_status":"Service Unavailable"}})");
            return a;
        });
    }));
    auto lock = make_lock(strategies::make_etcd_store(options_for(fake.url("http"))), "ka");
    BOOST_REQUIRE(lock.try_lock());
    try {
        lock.refresh();
        BOOST_FAIL("a failed keep-alive renewed the lock");
    } catch (const acquire_error& e) {
        BOOST_FAIL(std::string("a failed keep-alive was taken for a lost lock: ") + e.what());
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("no leader") != std::string::npos, e.what());
        BOOST_TEST((e.kind() == error_kind::transient));
    }
}

// A member that hangs (accepts, never answers the keep-alive) is left after one timeout: the
// next refresh goes to the next endpoint instead of waiting on the same member again.
BOOST_AUTO_TEST_CASE(a_member_that_timed_out_is_left_for_the_next_endpoint) {
    test::hostile_server hung(test::http_script([](const test::http_request& r) {
        return granting_etcd(r, [] {
            test::http_answer a;
            a.then_silent = true;
            return a;
        });
    }));
    test::hostile_server good(test::http_script(
        [](const test::http_request& r) { return granting_etcd(r, keep_alive_ok); }));
    auto o = options_for(hung.url("http"));
    o.endpoints.push_back(good.url("http"));
    o.request_timeout = 500ms;
    auto lock = make_lock(strategies::make_etcd_store(o), "hung");
    BOOST_REQUIRE(lock.try_lock());
    BOOST_CHECK_THROW(lock.refresh(), backend_error);  // the hung member's timeout
    const auto started = std::chrono::steady_clock::now();
    BOOST_CHECK_NO_THROW(lock.refresh());  // at the next member
    BOOST_TEST((std::chrono::steady_clock::now() - started < 400ms));
}

BOOST_AUTO_TEST_CASE(a_server_that_echoes_the_password_does_not_get_it_shown) {
    const std::string password = "Echoed-Pw-4711";
    for (const std::string& error_body :
         {R"({"code": 2, "message": "bad request from root:)" + password + R"("})",
          std::string(150, 'x') + " not JSON: " + password}) {
        const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        BOOST_REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), len) == 0 &&
                      ::listen(listener, 4) == 0 &&
                      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        // Two connections, each answered by what it asks: the status request's (opened first,
        // sent after the token came) and the authentication's.
        auto answer = [&](int c) {
            char request[4096];
            const ssize_t n = ::recv(c, request, sizeof request, 0);
            const bool auth =
                n > 0 && std::string(request, std::size_t(n)).find("/v3/auth/authenticate") !=
                             std::string::npos;
            const std::string body = auth ? R"({"token": "t"})" : error_body;
            const std::string reply = std::string("HTTP/1.1 ") + (auth ? "200" : "500") +
                                      " X\r\nContent-Length: " + std::to_string(body.size()) +
                                      "\r\n\r\n" + body;
            (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
            ::close(c);
        };
        std::thread server([&] {
            std::vector<std::thread> handlers;
            for (int i = 0; i < 2; ++i) {
                const int c = ::accept(listener, nullptr, nullptr);
                if (c >= 0) handlers.emplace_back(answer, c);
            }
            for (auto& h : handlers) h.join();
        });
        auto o = options_for("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
        o.user = "root";
        o.password = password;
        try {
            strategies::make_etcd_store(o);
            BOOST_ERROR("the store started against a server that failed its status request");
        } catch (const backend_error& e) {
            BOOST_TEST(std::string(e.what()).find("Echoed") == std::string::npos, e.what());
            const std::string shown = e.what();
            BOOST_TEST((shown.find("bad request") != std::string::npos ||
                        shown.find("not JSON") != std::string::npos),
                       shown);
        }
        server.join();
        ::close(listener);
    }
}

BOOST_AUTO_TEST_SUITE(etcd_server,
                      *boost::unit_test::precondition(test::server_precondition{endpoint_variable}))

// Issue 25: a refresh (a lease keep-alive) whose server stalls gives up at the lease's end.
BOOST_AUTO_TEST_CASE(a_refresh_on_a_dead_network_gives_up_at_the_lease_end) {
    const auto url = endpoint(endpoint_variable);  // http://HOST:PORT
    const auto host = url.find("://") + 3;
    const auto colon = url.rfind(':');
    test::stuck_refresh_gives_up_at_the_lease_end(
        url.substr(host, colon - host), std::stoi(url.substr(colon + 1)),
        [&](const test::tcp_fault_proxy& proxy) {
            auto o = options_for(url.substr(0, host) + proxy.address());
            o.request_timeout = 30s;
            return strategies::make_etcd_store(o);
        });
}

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

// A waiter watches the keys before its own from the server's current revision on, never from the
// revision of its read: etcd serves a watch that starts in the past only from its resync loop
// (every 100 ms), which made contended hand-overs wait that long. So a key deleted between the
// read and the watch is found by looking again, not by an event. Here the relay holds the watch
// back until the holder is gone, and keeps every watch event from the waiter.
BOOST_AUTO_TEST_CASE(a_waiter_whose_predecessor_left_before_its_watch_began_needs_no_event) {
    const auto name = test::unique_resource("left_before_watch");
    auto holder = make_lock(shared_store(), name);
    BOOST_REQUIRE(holder.try_lock());
    gateway_relay relay(endpoint(endpoint_variable));
    relay.hold_watch_requests();
    relay.drop_watch_events();
    // A long TTL: its keep-alive (a third of it) must not be what ends the wait.
    auto waiter = make_lock(strategies::make_etcd_store(options_for(relay.url())), name, 300s);
    auto waited = std::async(std::launch::async, [&]() -> std::string {
        try {
            return waiter.try_lock_for(must_happen) ? "granted" : "timed out";
        } catch (const error& e) {
            return std::string("error: ") + e.what();
        }
    });
    BOOST_REQUIRE(relay.wait_watch_request_held(must_happen));
    holder.unlock();
    relay.release_watch_requests();
    BOOST_TEST(waited.get() == "granted");
    waiter.unlock();
}

// A waiter two places behind the holder follows both keys before its own, on its one watch of
// the queue; either order of their deletions is its turn (here the relay swaps the first two
// events: two watchers, as waiters had before issue 24, could see them so, since etcd serves a
// watcher created while a write was being applied from its resync loop, later than another).
BOOST_AUTO_TEST_CASE(a_waiter_takes_its_turn_whatever_order_the_deletions_are_reported_in) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("swapped_events");
    auto holder = make_lock(shared_store(), name);
    BOOST_REQUIRE(holder.try_lock());
    auto first = make_lock(shared_store(), name);
    auto first_done = std::async(std::launch::async, [&] {
        const bool granted = first.try_lock_for(must_happen);
        if (granted) first.unlock();
        return granted;
    });
    BOOST_REQUIRE(eventually_queue_length(endpoints, name, 2));
    gateway_relay relay(endpoints);
    relay.swap_first_two_watch_events();
    // A long TTL: its keep-alive (a third of it), which looks at the queue again, must not be
    // what ends the wait.
    auto second = make_lock(strategies::make_etcd_store(options_for(relay.url())), name, 300s);
    auto second_granted = std::async(std::launch::async, [&] {
        const bool granted = second.try_lock_for(must_happen);
        if (granted) second.unlock();
        return granted;
    });
    BOOST_REQUIRE(eventually_queue_length(endpoints, name, 3));
    BOOST_REQUIRE(relay.wait_watchers_confirmed(1, must_happen));
    holder.unlock();
    BOOST_TEST(first_done.get());
    BOOST_TEST(second_granted.get());
}

// The holder's release is the whole hand-over: the waiters' watch events alone grant them, with
// no request after the event, also for a waiter two places behind the holder (it watches both
// keys before its own, so it knows when the one just before it holds).
BOOST_AUTO_TEST_CASE(a_release_hands_over_without_a_request_after_the_event) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("handover");
    auto holder = make_lock(shared_store(), name);
    BOOST_REQUIRE(holder.try_lock());
    auto first = make_lock(shared_store(), name);
    auto first_done = std::async(std::launch::async, [&] {
        const bool granted = first.try_lock_for(must_happen);
        if (granted) first.unlock();
        return granted;
    });
    BOOST_REQUIRE(eventually_queue_length(endpoints, name, 2));
    gateway_relay relay(endpoints);
    auto second = make_lock(strategies::make_etcd_store(options_for(relay.url())), name);
    auto second_granted = std::async(std::launch::async, [&] {
        const bool granted = second.try_lock_for(must_happen);
        return std::pair(granted, relay.requests_after_first_event());
    });
    BOOST_REQUIRE(eventually_queue_length(endpoints, name, 3));
    BOOST_REQUIRE(relay.wait_watchers_confirmed(1, must_happen));
    holder.unlock();
    BOOST_TEST(first_done.get());
    const auto [granted, late_requests] = second_granted.get();
    BOOST_TEST(granted);
    BOOST_TEST(late_requests == 0);
    second.unlock();
}

// --- leases kept between acquisitions (issue 24) ---
// A store that acquires more than once deletes a released key and keeps its lease for its next
// acquisition (one round trip fewer); each lease still carries one key at a time.

// The lease (hex, as etcdctl writes it) of the name's holder, from the store's status; empty
// when the name is free.
std::string holder_lease(store& s, const std::string& name) {
    const auto st = s.status(name);
    if (st.holders.empty() || !st.holders[0].starts_with("lease ")) return {};
    const auto& h = st.holders[0];
    return h.substr(6, h.find(',') - 6);
}

bool revoke_lease(const std::string& endpoints, const std::string& lease) {
    return std::system(
               ("etcdctl --endpoints=" + endpoints + " lease revoke " + lease + " >/dev/null 2>&1")
                   .c_str()) == 0;
}

// Whether another process, with a store of its own, gets the lock at once.
bool another_process_gets(const std::string& endpoints, const std::string& name) {
    const pid_t child = test::fork_child(
        [&] {
            auto other = make_lock(strategies::make_etcd_store(options_for(endpoints)), name);
            return other.try_lock() ? 0 : 1;
        },
        60s);
    return test::wait_child(child, 60s) == 0;
}

BOOST_AUTO_TEST_CASE(a_store_that_locks_again_reuses_the_released_lease_and_leaves_no_key) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("kept_lease");
    auto s = shared_store();
    auto lock = make_lock(s, name);
    std::vector<std::uint64_t> tokens;
    std::vector<std::string> leases;
    for (int i = 0; i < 3; ++i) {
        BOOST_REQUIRE(lock.try_lock());
        tokens.push_back(*lock.fencing_token());
        leases.push_back(holder_lease(*s, name));
        lock.unlock();
        // Released: no key left, and another process takes the name at once.
        BOOST_TEST(queue_length(endpoints, name) == 0);
        BOOST_TEST(another_process_gets(endpoints, name));
    }
    BOOST_TEST(tokens[0] < tokens[1]);
    BOOST_TEST(tokens[1] < tokens[2]);
    // The first release revoked its lease (a store that locks once leaves nothing); the second
    // kept its lease, and the third grant used it.
    BOOST_TEST(leases[0] != leases[1]);
    BOOST_TEST(leases[1] == leases[2]);
}

BOOST_AUTO_TEST_CASE(a_lease_revoked_by_another_client_held_or_kept_is_a_loss_or_replaced) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("revoked_lease");
    auto s = shared_store();
    auto lock = make_lock(s, name);
    BOOST_REQUIRE(lock.try_lock());
    lock.unlock();
    // Held on a kept lease, which another client revokes: the holder learns it lost the lock.
    BOOST_REQUIRE(lock.try_lock());
    lock.unlock();
    BOOST_REQUIRE(lock.try_lock());
    const auto held = holder_lease(*s, name);
    BOOST_REQUIRE(!held.empty());
    BOOST_REQUIRE(revoke_lease(endpoints, held));
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(another_process_gets(endpoints, name));
    try {
        lock.unlock();
    } catch (const error&) {
        // What a release of a lost lock says is not this test's concern.
    }
    // Kept after a release, then revoked: the next grant takes a new lease, and holds.
    BOOST_REQUIRE(lock.try_lock());
    lock.unlock();
    BOOST_REQUIRE(lock.try_lock());
    const auto kept = holder_lease(*s, name);
    lock.unlock();
    BOOST_REQUIRE(revoke_lease(endpoints, kept));
    BOOST_REQUIRE(lock.try_lock());
    BOOST_TEST(holder_lease(*s, name) != kept);
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(!another_process_gets(endpoints, name));
    lock.unlock();
}

// A grant lives its TTL from its lease's last renewal: a kept lease that waited longer than a
// moment is renewed before it carries a key.
BOOST_AUTO_TEST_CASE(a_kept_lease_that_waited_is_renewed_before_it_serves) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("stale_lease");
    auto s = shared_store();
    auto lock = make_lock(s, name, 2s);
    for (int i = 0; i < 2; ++i) {
        BOOST_REQUIRE(lock.try_lock());
        lock.unlock();
    }
    std::this_thread::sleep_for(1500ms);  // most of the kept lease's 2 s
    BOOST_REQUIRE(lock.try_lock());
    std::this_thread::sleep_for(1200ms);  // past the kept lease's end, within the grant's TTL
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(!another_process_gets(endpoints, name));
    lock.unlock();
}

// A holder killed while its key is on a kept lease: the name is free once that lease's TTL
// ends, as with a lease of its own.
BOOST_AUTO_TEST_CASE(a_killed_holder_on_a_kept_lease_blocks_the_name_for_its_ttl_only) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("killed_kept");
    test::byte_pipe held;
    const pid_t child = test::fork_child(
        [&] {
            auto s = strategies::make_etcd_store(options_for(endpoints));
            auto lock = make_lock(s, name, 2s);
            for (int i = 0; i < 2; ++i) {
                if (!lock.try_lock()) return 2;
                lock.unlock();
            }
            if (!lock.try_lock()) return 3;
            held.put('h');
            ::pause();
            return 0;
        },
        60s);
    BOOST_REQUIRE(held.get(must_happen));
    ::kill(child, SIGKILL);
    test::wait_child(child, 60s);
    const auto killed = std::chrono::steady_clock::now();
    auto other = make_lock(shared_store(), name);
    BOOST_REQUIRE(other.try_lock_for(must_happen));
    // Its TTL (2 s), plus etcd's expiry sweep; never the kept lease's age on top.
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - killed);
    BOOST_TEST(took.count() < 4000);
    other.unlock();
}

// A fork()ed child does not use its parent's kept leases: its keys would be the parent's.
BOOST_AUTO_TEST_CASE(a_forked_child_takes_no_lease_its_parent_kept) {
    const auto endpoints = endpoint(endpoint_variable);
    const auto name = test::unique_resource("fork_kept");
    auto s = shared_store();
    auto lock = make_lock(s, name);
    for (int i = 0; i < 2; ++i) {
        BOOST_REQUIRE(lock.try_lock());
        lock.unlock();
    }
    test::byte_pipe held, done;
    const pid_t child = test::fork_child(
        [&] {
            auto mine = make_lock(s, name);  // the parent's store, copied by fork()
            if (!mine.try_lock()) return 2;
            held.put('h');
            done.get(must_happen);
            mine.unlock();
            return 0;
        },
        60s);
    BOOST_REQUIRE(held.get(must_happen));
    BOOST_TEST(!lock.try_lock());  // the child holds it
    done.put('d');
    BOOST_TEST(test::wait_child(child, 60s) == 0);
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

// A private etcd for a fault case, which the case stops (SIGKILL, a crash) and starts again.
struct private_etcd {
    explicit private_etcd(const std::string& name)
        : port(test::free_port()),
          peer(test::free_port()),
          dir(std::filesystem::temp_directory_path() /
              ("locksmith-etcd-" + name + "-" + std::to_string(::getpid()))),
          client("http://127.0.0.1:" + std::to_string(port)),
          server(argv(name), port, SIGKILL) {}
    ~private_etcd() {
        server.stop();
        std::filesystem::remove_all(dir);
    }
    // True once it serves (elected itself): what etcdctl's health check says.
    bool serving() const {
        for (int i = 0; i < 200; ++i) {
            if (std::system(("etcdctl --endpoints=" + client + " endpoint health >/dev/null 2>&1")
                                .c_str()) == 0)
                return true;
            std::this_thread::sleep_for(100ms);
        }
        return false;
    }
    std::vector<std::string> argv(const std::string& name) {
        std::filesystem::remove_all(dir);
        const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
        return {"etcd",
                "--name",
                name,
                "--data-dir",
                dir.string(),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                name + "=" + peer_url,
                "--log-level",
                "error"};
    }
    const int port;
    const int peer;
    const std::filesystem::path dir;
    const std::string client;
    test::private_server server;
};

// What a holder's release and a waiter's giving up leave while the server is down is revoked by
// their processes' next acquisition once it is back (issue 25). etcd keeps leases across a
// restart and renews each to its full TTL when it starts: before, the stopped-in-release
// holder's key and the waiter's key stood in the queue for their 30 s after the restart, and
// nobody was granted the name meanwhile (the faults run, etcd under `restart`).
BOOST_AUTO_TEST_CASE(a_release_and_a_give_up_that_failed_in_an_outage_are_revoked_once_it_is_back) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    if (!test::running_alone()) {  // forks: no thread of an earlier case may run
        BOOST_TEST(test::run_alone_in_a_fresh_process(120s) == 0);
        return;
    }
    private_etcd etcd("orphans");
    auto& server = etcd.server;
    const auto& client = etcd.client;
    const auto serving = [&] { return etcd.serving(); };
    BOOST_REQUIRE(serving());
    const auto o = options_for(client);
    const auto name = test::unique_resource("orphans");
    // The next acquisition of a child once the server is back (another name, a store of its
    // own: the leases it left are the process's, not the lock object's).
    const auto next_acquisition = [&](const std::string& other) {
        for (int i = 0; i < 50; ++i) {
            try {
                auto next = make_lock(strategies::make_etcd_store(o), other);
                if (!next.try_lock()) return 10;
                next.unlock();
                return 0;
            } catch (const backend_error&) {
                std::this_thread::sleep_for(100ms);  // still electing itself
            }
        }
        return 11;
    };
    test::byte_pipe held, down, released, waiter_gave_up, holder_back, waiter_back;
    const pid_t holder = test::fork_child(
        [&] {
            {
                auto lock = make_lock(strategies::make_etcd_store(o), name);
                if (!lock.try_lock()) return 2;
                held.put('h');
                if (!down.get(must_happen)) return 3;
                lock.unlock();  // fails: the server is down (noexcept: reported to on_error)
            }  // and the object is gone (a `locksmith run` that ended, a lock per acquisition)
            released.put('r');
            if (!holder_back.get(must_happen)) return 4;
            return next_acquisition(name + "-holder");
        },
        120s);
    BOOST_REQUIRE(held.get(must_happen));
    const pid_t waiter = test::fork_child(
        [&] {
            auto lock = make_lock(strategies::make_etcd_store(o), name);
            // Queued behind the holder; gives up at its deadline while the server is down.
            if (lock.try_lock_for(6s)) return 2;
            waiter_gave_up.put('g');
            if (!waiter_back.get(must_happen)) return 4;
            return next_acquisition(name + "-waiter");
        },
        120s);
    BOOST_REQUIRE(eventually_queue_length(client, name, 2));
    server.stop();
    down.put('d');
    BOOST_REQUIRE(released.get(must_happen));
    BOOST_REQUIRE(waiter_gave_up.get(must_happen));
    server.start();
    BOOST_REQUIRE(serving());
    holder_back.put('b');
    waiter_back.put('b');
    BOOST_TEST(test::wait_child(holder, 60s) == 0);
    BOOST_TEST(test::wait_child(waiter, 60s) == 0);
    // Nothing left in the queue: the name is free now, not after the leases' 30 s.
    BOOST_TEST(queue_length(client, name) == 0);
    auto after = make_lock(strategies::make_etcd_store(o), name);
    BOOST_TEST(after.try_lock());
    after.unlock();
}

// `locksmith run` whose command ends while the server is down tries the release again (for up to
// 10 s) instead of exiting at once: etcd renews every lease to its full TTL when it starts, and
// nobody would be left to revoke the key, which blocked the name for TTL + 1 s after the
// server's return (the faults run, etcd under `restart` through `run`: 3.3 s, goal TTL + 1 s).
BOOST_AUTO_TEST_CASE(run_whose_command_ends_in_an_outage_releases_once_the_server_is_back) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    const auto cli = test::cli_path();
    if (cli.empty()) return;       // a build without the CLI
    if (!test::running_alone()) {  // forks: no thread of an earlier case may run
        BOOST_TEST(test::run_alone_in_a_fresh_process(120s) == 0);
        return;
    }
    private_etcd etcd("runexit");
    BOOST_REQUIRE(etcd.serving());
    const auto name = test::unique_resource("runexit");
    // A folder of our own: a config file straight in /tmp (writable by others) is refused.
    const auto files = etcd.dir.string() + "-run";
    std::filesystem::create_directories(files);
    const auto config = files + "/locksmith.json";
    const auto held = files + "/held", go = files + "/go";
    std::ofstream(config)
        << nlohmann::json{{"strategies",
                           {{"etcd",
                             {{"options",
                               {{"endpoints", etcd.client}, {"prefix", test_prefix}}}}}}}}
               .dump();
    const pid_t run = test::fork_child(
        [&] {
            const std::string script =
                "touch '" + held + "'; while [ ! -e '" + go + "' ]; do sleep 0.05; done";
            ::execl(cli.c_str(), cli.c_str(), "run", name.c_str(), "--strategy", "etcd", "--config",
                    config.c_str(), "--ttl", "5", "-c", script.c_str(),
                    static_cast<char*>(nullptr));
            return 127;
        },
        120s);
    const auto until = std::chrono::steady_clock::now() + must_happen;
    while (!std::filesystem::exists(held) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(20ms);
    BOOST_REQUIRE(std::filesystem::exists(held));
    BOOST_REQUIRE(queue_length(etcd.client, name) == 1);
    etcd.server.stop();
    std::ofstream(go) << "go\n";  // the command ends; its release cannot reach the server
    std::this_thread::sleep_for(1500ms);
    etcd.server.start();
    BOOST_REQUIRE(etcd.serving());
    // The end could not be confirmed (the server was down): the lost-lock code, as before.
    BOOST_TEST(test::wait_child(run, 60s) == 75);
    // Released by run itself: the name is free now, not 5 s (+ 1 s) after the restart.
    BOOST_TEST(queue_length(etcd.client, name) == 0);
    std::filesystem::remove_all(files);
}

// A lock whose release failed in a short outage is not kept alive by its renewal once the server
// is back (the renewal thread still counts it held: the release threw): its key goes with its
// lease, without another acquisition of the process. Before, the renewals went on and the name
// stayed taken by a lock its holder had released.
BOOST_AUTO_TEST_CASE(a_lock_whose_release_failed_is_not_renewed_when_the_server_is_back) {
    if (!test::env(endpoint_variable) && !test::running_in_ci()) return;  // no etcd here
    if (!test::running_alone()) {  // forks: no thread of an earlier case may run
        BOOST_TEST(test::run_alone_in_a_fresh_process(120s) == 0);
        return;
    }
    private_etcd etcd("renewed");
    BOOST_REQUIRE(etcd.serving());
    const auto o = options_for(etcd.client);
    const auto name = test::unique_resource("renewed");
    test::byte_pipe held, down, released, done;
    const pid_t holder = test::fork_child(
        [&] {
            // A TTL longer than the outage: its renewals would succeed once the server is back.
            auto lock = make_lock(strategies::make_etcd_store(o), name, 4s, true);
            if (!lock.try_lock()) return 2;
            held.put('h');
            if (!down.get(must_happen)) return 3;
            lock.unlock();  // fails: the server is down
            released.put('r');
            if (!done.get(must_happen)) return 4;  // the renewal thread runs meanwhile
            return 0;
        },
        120s);
    BOOST_REQUIRE(held.get(must_happen));
    etcd.server.stop();
    down.put('d');
    BOOST_REQUIRE(released.get(must_happen));
    etcd.server.start();
    BOOST_REQUIRE(etcd.serving());
    // The lease's 4 s (plus etcd's election timeout and its expiry sweep) after the restart.
    BOOST_TEST(eventually_queue_length(etcd.client, name, 0));
    done.put('x');
    BOOST_TEST(test::wait_child(holder, 60s) == 0);
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
    // The password from the environment, named in the JSON options, instead of the config.
    ::setenv("LOCKSMITH_TEST_ETCD_PASSWORD", "app-secret-pw", 1);
    const auto from_env =
        strategies::etcd_options::from_json({{"endpoints", client},
                                             {"user", "app"},
                                             {"password_env", "LOCKSMITH_TEST_ETCD_PASSWORD"},
                                             {"prefix", o.prefix}});
    auto d = make_lock(strategies::make_etcd_store(from_env), name);
    BOOST_TEST(d.try_lock());
    d.unlock();
    ::unsetenv("LOCKSMITH_TEST_ETCD_PASSWORD");
    server.stop();
    std::filesystem::remove_all(dir);
}
