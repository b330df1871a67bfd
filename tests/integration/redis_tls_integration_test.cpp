// SPDX-License-Identifier: MIT
// The redis strategy over TLS (rediss://) against services.sh's redis-tls: TLS only, client
// certificates required (tls-auth-clients yes), a password (LOCKSMITH_TEST_REDIS_TLS_URL,
// certificates in LOCKSMITH_TEST_TLS_DIR). Locking and waiting across processes over TLS;
// refusals (no client certificate, a wrong CA, a wrong host name) that name the endpoint and
// never the password or a key; plain text and TLS mixed up; a private TLS redis-server that
// drops idle connections; and servers of the test's own that complete the handshake and then
// say nothing, trickle, answer nonsense, hang up or answer twice.
#define BOOST_TEST_MODULE redis_tls_integration
#include <boost/test/unit_test.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/redis.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/loopback_listener.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"
#include "support/thread_signals.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using locksmith::test::read_file;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* url_variable = "LOCKSMITH_TEST_REDIS_TLS_URL";
const std::string test_prefix = "locksmith-tls-it:" + std::to_string(::getpid()) + ":";

std::string tls_dir() {
    return test::env("LOCKSMITH_TEST_TLS_DIR").value_or("/nonexistent");
}

// Options for `url` with the rig's CA and client certificate.
strategies::redis_options tls_options(const std::string& url) {
    strategies::redis_options o;
    o.endpoint = strategies::parse_redis_url(url);
    o.key_prefix = test_prefix;
    o.connect_timeout = 500ms;
    o.command_timeout = 1000ms;
    o.ca_file = tls_dir() + "/ca.pem";
    o.cert_file = tls_dir() + "/client.pem";
    o.key_file = tls_dir() + "/client.key";
    return o;
}

strategies::redis_options rig_options() {
    return tls_options(endpoint(url_variable));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name,
                     std::chrono::milliseconds ttl = 30s) {
    lock_options o;
    o.ttl = ttl;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

// Neither the password nor a line of the client key's body is in `text`.
void expect_no_secret(const std::string& text, const strategies::redis_options& o) {
    if (!o.endpoint.password.empty())
        BOOST_TEST(text.find(o.endpoint.password) == std::string::npos, text);
    std::stringstream key(read_file(tls_dir() + "/client.key"));
    for (std::string line; std::getline(key, line);)
        if (!line.starts_with("-----") && line.size() > 8)
            BOOST_TEST(text.find(line) == std::string::npos, text);
    BOOST_TEST(text.find("PRIVATE KEY") == std::string::npos, text);
}

// Building a store with `o` fails within `bound` with a backend_error whose native code is
// `code` (or one of its alternatives: "eof|errno 104"), that names the redacted endpoint and says
// `expected`, and that shows no secret.
backend_error expect_failure(const strategies::redis_options& o, const std::string& code,
                             const std::string& expected,
                             std::chrono::milliseconds bound = 5000ms) {
    const auto started = clock_type::now();
    try {
        strategies::make_redis_store(o);
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST_MESSAGE(what);
        BOOST_TEST(("|" + code + "|").find("|" + e.native_code() + "|") != std::string::npos, what);
        BOOST_TEST(what.find(o.endpoint.redacted()) != std::string::npos, what);
        BOOST_TEST(what.find(expected) != std::string::npos, what);
        expect_no_secret(what, o);
        BOOST_TEST((clock_type::now() - started < bound), what);
        return e;
    }
    BOOST_FAIL("connected to " << o.endpoint.redacted() << ", expected '" << expected << "'");
    throw std::logic_error("unreachable");
}

// --- a server of the test's own: TLS (the rig's server certificate) or plain, then scripted ---

enum class after_handshake {
    silent,         // reads, never answers
    trickle,        // answers each command with one byte per 100 ms of a reply that never ends
    nonsense,       // answers each command with 4 KiB of pseudo-random bytes
    hang_up,        // closes the connection at once
    answers_twice,  // a Redis stand-in that answers SET twice (a surplus reply)
    endless_bulk    // answers each command with a 1 GiB bulk string, as fast as it can
};

// One complete RESP command (an array of bulk strings) from the front of `in`, or nullopt.
std::optional<std::vector<std::string>> take_command(std::string& in) {
    std::size_t pos = 0;
    auto line = [&]() -> std::optional<std::string> {
        auto end = in.find("\r\n", pos);
        if (end == std::string::npos) return std::nullopt;
        auto text = in.substr(pos, end - pos);
        pos = end + 2;
        return text;
    };
    auto count = line();
    if (!count || count->size() < 2 || (*count)[0] != '*') return std::nullopt;
    std::vector<std::string> args;
    for (int i = 0, n = std::stoi(count->substr(1)); i < n; ++i) {
        auto length = line();
        if (!length || length->size() < 2) return std::nullopt;
        const std::size_t size = std::stoul(length->substr(1));
        if (in.size() < pos + size + 2) return std::nullopt;
        args.push_back(in.substr(pos, size));
        pos += size + 2;
    }
    in.erase(0, pos);
    return args;
}

class scripted_server {
  public:
    scripted_server(bool tls, after_handshake behaviour) : tls_(tls), behaviour_(behaviour) {
        listener_ = test::listen_on_loopback("scripted_server", 16);
        if (tls_) {
            ctx_ = SSL_CTX_new(TLS_server_method());
            BOOST_REQUIRE(ctx_ != nullptr);
            BOOST_REQUIRE(
                SSL_CTX_use_certificate_chain_file(ctx_, (tls_dir() + "/server.pem").c_str()) == 1);
            BOOST_REQUIRE(SSL_CTX_use_PrivateKey_file(ctx_, (tls_dir() + "/server.key").c_str(),
                                                      SSL_FILETYPE_PEM) == 1);
        }
        thread_ = std::thread([this] { accept_loop(); });
    }
    ~scripted_server() {
        stop_ = true;
        thread_.join();
        ::close(listener_.fd);
        ::close(listener_.wake[0]);
        ::close(listener_.wake[1]);
        if (ctx_) SSL_CTX_free(ctx_);
    }
    std::string url(const std::string& userinfo = "") const {
        return std::string(tls_ ? "rediss://" : "redis://") + userinfo +
               "127.0.0.1:" + std::to_string(listener_.port);
    }
    int connections() const { return connections_; }
    // Connections whose TLS handshake completed.
    int handshakes() const { return handshakes_; }

  private:
    // Waits up to 50 ms for `fd`; false when the test is over.
    bool ready(int fd) const {
        pollfd p{fd, POLLIN, 0};
        while (!stop_)
            if (::poll(&p, 1, 50) > 0) return true;
        return false;
    }

    void accept_loop() {
        test::block_sigpipe_in_this_thread();  // the clients' threads inherit it
        std::vector<std::thread> clients;
        while (ready(listener_.fd)) {
            const int fd = ::accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            ++connections_;
            clients.emplace_back([this, fd] {
                serve(fd);
                ::close(fd);
            });
        }
        for (auto& t : clients) t.join();
    }

    void serve(int fd) {
        SSL* ssl = nullptr;
        if (tls_) {
            ssl = SSL_new(ctx_);
            SSL_set_fd(ssl, fd);
            // Blocking: the client either completes the handshake or gives up and closes.
            if (SSL_accept(ssl) != 1) {
                SSL_free(ssl);
                return;
            }
            ++handshakes_;
        }
        auto send = [&](const std::string& bytes) {
            return ssl ? SSL_write(ssl, bytes.data(), int(bytes.size())) > 0
                       : ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0;
        };
        std::string in;
        std::minstd_rand random(42);
        while (behaviour_ != after_handshake::hang_up && !stop_) {
            if (!(ssl && SSL_pending(ssl) > 0) && !ready(fd)) break;
            char buffer[4096];
            const int n = ssl ? SSL_read(ssl, buffer, sizeof buffer)
                              : int(::recv(fd, buffer, sizeof buffer, 0));
            if (n <= 0) break;
            in.append(buffer, std::size_t(n));
            bool open = true;
            while (open) {
                auto args = take_command(in);
                if (!args) break;
                if (behaviour_ == after_handshake::silent) continue;
                if (behaviour_ == after_handshake::nonsense) {
                    std::string noise(4096, '\0');
                    for (auto& c : noise) c = char(random());
                    open = send(noise);
                } else if (behaviour_ == after_handshake::endless_bulk) {
                    open = send("$1073741824\r\n");
                    const std::string mib(1 << 20, 'x');
                    for (int i = 0; i < 1024 && open && !stop_; ++i) open = send(mib);
                } else if (behaviour_ == after_handshake::trickle) {
                    for (int i = 0; i < 600 && !stop_ && open; ++i) {
                        open = send(i == 0 ? "$" : "9");
                        ::poll(nullptr, 0, 100);
                    }
                } else {  // answers_twice
                    const std::string& c = args->at(0);
                    if (c == "SCRIPT")
                        open = send("$40\r\n" + std::string(40, 'a') + "\r\n");
                    else if (c == "SET")
                        open = send("+OK\r\n+OK\r\n");
                    else if (c == "EVALSHA")
                        open = send(":0\r\n");  // released; not held
                    else
                        open = send("+OK\r\n");
                }
            }
            if (!open) break;
        }
        if (ssl) SSL_free(ssl);  // no close_notify: a connection cut, as a crash leaves it
    }

    bool tls_;
    after_handshake behaviour_;
    test::loopback_listener listener_;
    SSL_CTX* ctx_ = nullptr;
    std::atomic<bool> stop_{false};
    std::atomic<int> connections_{0};
    std::atomic<int> handshakes_{0};
    std::thread thread_;
};

std::vector<std::string> private_tls_redis_argv(int port, const std::string& password) {
    const std::string tls = tls_dir();
    auto argv = test::private_redis_argv(0, password);
    // --port 0: TLS only, as the rig's redis-tls.
    argv.insert(argv.end(), {"--tls-port", std::to_string(port), "--tls-cert-file",
                             tls + "/server.pem", "--tls-key-file", tls + "/server.key",
                             "--tls-ca-cert-file", tls + "/ca.pem", "--tls-auth-clients", "yes"});
    return argv;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(redis_tls,
                      *boost::unit_test::precondition(test::server_precondition{url_variable}))

BOOST_AUTO_TEST_CASE(
    a_client_with_the_right_certificates_locks_and_a_waiter_in_another_process_is_served) {
    const auto name = test::unique_resource("tls");
    test::byte_pipe ready;
    // The waiter is forked while this process runs no other thread; it waits up to 10 s and
    // exits 0 when it got the lock with a fencing token greater than the holder's.
    auto holder_store = strategies::make_redis_store(rig_options());
    auto holder = make_lock(holder_store, name);
    BOOST_REQUIRE(holder.try_lock());
    const auto holder_token = holder.fencing_token();
    BOOST_REQUIRE(holder_token.has_value());
    const pid_t waiter = test::fork_child(
        [&] {
            auto s = strategies::make_redis_store(rig_options());
            auto w = make_lock(s, name);
            ready.put('r');
            if (!w.try_lock_for(10s)) return 1;
            const auto token = w.fencing_token();
            if (!token || *token <= *holder_token) return 2;
            w.unlock();
            return 0;
        },
        30s);
    BOOST_REQUIRE(ready.get(10s).has_value());
    {
        // Meanwhile a second object for the name in this process is refused.
        auto other = make_lock(strategies::make_redis_store(rig_options()), name);
        BOOST_TEST(!other.try_lock());
    }
    std::this_thread::sleep_for(200ms);  // let the waiter queue and sleep on its channel
    const auto released = clock_type::now();
    holder.unlock();
    BOOST_TEST(test::wait_child(waiter, 20s) == 0);
    // The hand-over went by the release message, not by a retry at the 30 s TTL.
    BOOST_TEST((clock_type::now() - released < 10s));
    auto again = make_lock(holder_store, name);
    BOOST_TEST(again.try_lock());
    again.unlock();
}

BOOST_AUTO_TEST_CASE(a_reader_waiting_over_tls_wakes_on_the_writers_release) {
    const auto name = test::unique_resource("tls-reader");
    auto s = strategies::make_redis_store(rig_options());
    auto writer = make_lock(s, name);
    auto reader = make_lock(strategies::make_redis_store(rig_options()), name);
    BOOST_REQUIRE(writer.try_lock());
    auto got = std::async(std::launch::async, [&] { return reader.try_lock_shared_for(10s); });
    std::this_thread::sleep_for(200ms);
    writer.unlock();
    BOOST_REQUIRE(got.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(got.get());
    reader.unlock_shared();
}

BOOST_AUTO_TEST_CASE(a_client_without_certificate_or_trust_is_refused_clearly) {
    const auto o = rig_options();
    {
        // TLS 1.3: the handshake completes; the server's refusal comes after it, and then its
        // reset (it closes with our AUTH unread), which fails our first read, or our first write
        // when it comes first (a third of the attempts here): both must report the refusal.
        auto no_cert = o;
        no_cert.cert_file.clear();
        no_cert.key_file.clear();
        for (int i = 0; i < 20; ++i)
            BOOST_TEST((expect_failure(no_cert, "tls", "client certificate").kind() ==
                        error_kind::permanent));
    }
    {
        auto wrong_ca = o;
        wrong_ca.ca_file = tls_dir() + "/other-ca.pem";
        expect_failure(wrong_ca, "tls", "unknown CA");
    }
    {
        auto wrong_name = o;
        wrong_name.server_name = "redis.example.org";
        expect_failure(wrong_name, "tls", "not for 'redis.example.org'");
    }
    {
        // An address is checked against the certificate's IP entries (127.0.0.1 only).
        auto wrong_address = o;
        wrong_address.server_name = "127.0.0.2";
        expect_failure(wrong_address, "tls", "not for '127.0.0.2'");
    }
    {
        // A name the certificate has (its DNS entry) passes where the URL holds the address.
        auto right_name = o;
        right_name.server_name = "localhost";
        BOOST_CHECK_NO_THROW(strategies::make_redis_store(right_name));
    }
    {
        // Every refusal is permanent: retrying would fail alike.
        auto wrong_ca = o;
        wrong_ca.ca_file = tls_dir() + "/other-ca.pem";
        BOOST_TEST(
            (expect_failure(wrong_ca, "tls", "certificate").kind() == error_kind::permanent));
    }
    {
        // A key that is not the certificate's: refused before any connection, naming both files.
        auto mismatched = o;
        mismatched.key_file = tls_dir() + "/server.key";
        try {
            strategies::make_redis_store(mismatched);
            BOOST_FAIL("a key that does not match its certificate was accepted");
        } catch (const invalid_argument_error& e) {
            BOOST_TEST(
                std::string(e.what()).find("is not the key of cert_file") != std::string::npos,
                e.what());
            expect_no_secret(e.what(), o);
        }
    }
}

BOOST_AUTO_TEST_CASE(a_wrong_password_over_tls_is_refused_without_printing_it) {
    auto o = rig_options();
    const std::string wrong = "Tr0ub4dor-wrong-tls";
    o.endpoint.password = wrong;
    const auto e = expect_failure(o, "WRONGPASS", "***");
    BOOST_TEST((e.kind() == error_kind::permanent));
    o.endpoint.password.clear();
    expect_failure(o, "NOAUTH", "rediss://127.0.0.1");
}

BOOST_AUTO_TEST_CASE(plain_text_and_tls_mixed_up_fail_in_time) {
    // redis:// to the TLS port: the server takes our command for a broken handshake.
    auto plain_to_tls = rig_options();
    plain_to_tls.endpoint.tls = false;
    plain_to_tls.ca_file = plain_to_tls.cert_file = plain_to_tls.key_file = "";
    const auto started = clock_type::now();
    BOOST_CHECK_THROW(strategies::make_redis_store(plain_to_tls), backend_error);
    BOOST_TEST((clock_type::now() - started < 5s));
    // rediss:// to a plain-text server, which waits for a command: the handshake's deadline.
    scripted_server plain(false, after_handshake::answers_twice);
    auto tls_to_plain = tls_options("rediss" + plain.url().substr(5));
    const auto e = expect_failure(tls_to_plain, "timeout", "is this a TLS port?");
    BOOST_TEST(e.transient());
}

BOOST_AUTO_TEST_CASE(a_server_that_never_completes_the_handshake_costs_the_connect_timeout) {
    const auto silent = test::listen_on_loopback("silent", 16);
    auto o = tls_options("rediss://:pw-not-shown@127.0.0.1:" + std::to_string(silent.port));
    o.connect_timeout = 300ms;
    o.command_timeout = 10s;
    const auto started = clock_type::now();
    const auto e = expect_failure(o, "timeout", "handshake did not complete", 2000ms);
    BOOST_TEST(e.transient());
    BOOST_TEST((clock_type::now() - started >= 250ms));
    ::close(silent.fd);
    ::close(silent.wake[0]);
    ::close(silent.wake[1]);
}

// After a completed handshake, each behaviour costs at most the command timeout, never grants,
// and is an error naming the endpoint and not the password.
BOOST_AUTO_TEST_CASE(a_hostile_server_after_the_handshake_gets_a_clear_error_in_time) {
    struct expectation {
        after_handshake behaviour;
        const char* code;
        const char* says;
        std::chrono::milliseconds command_timeout = 300ms;
    };
    for (const auto& [behaviour, code, says, command_timeout] :
         {expectation{after_handshake::silent, "timeout", "no complete reply within 300 ms"},
          expectation{after_handshake::trickle, "timeout", "no complete reply within 300 ms"},
          expectation{after_handshake::nonsense, "protocol", "not a Redis reply"},
          // Refused at 16 MiB, not buffered until the deadline: a deadline far beyond the time
          // 16 MiB take, which on a loaded machine may exceed 300 ms (CI saw a timeout).
          expectation{after_handshake::endless_bulk, "protocol", "a reply longer than 16 MiB",
                      5000ms},
          // Closed with our command unread: a reset, when it comes before our read.
          expectation{after_handshake::hang_up, "eof|errno 104", "failed: reading failed: "}}) {
        scripted_server server(true, behaviour);
        auto o = tls_options(server.url(":pw-not-shown@"));
        o.command_timeout = command_timeout;
        const auto started = clock_type::now();
        expect_failure(o, code, says, command_timeout + 1700ms);
        BOOST_TEST(server.handshakes() >= 1);
        BOOST_TEST_MESSAGE("took " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                          clock_type::now() - started)
                                          .count()
                                   << " ms");
    }
}

BOOST_AUTO_TEST_CASE(a_surplus_reply_is_never_read_as_the_next_commands_reply) {
    // The server answers SET twice. The lock's release (EVALSHA, answered :0) must get its own
    // reply, not the surplus +OK (which integer_of would refuse): the connection that got two
    // replies is dropped, and the release goes over a new one.
    for (const bool tls : {false, true}) {
        scripted_server server(tls, after_handshake::answers_twice);
        auto o = tls_options(server.url());
        if (!tls) o.ca_file = o.cert_file = o.key_file = "";
        auto s = strategies::make_redis_store(o);
        BOOST_TEST(server.connections() == 1);
        auto lock = make_lock(s, "surplus");
        BOOST_REQUIRE(lock.try_lock());
        try {
            lock.release();
        } catch (const error& e) {
            BOOST_ERROR((tls ? "TLS: " : "plain: ") << e.what());
        }
        BOOST_TEST(server.connections() == 2, (tls ? "TLS" : "plain"));
    }
}

BOOST_AUTO_TEST_CASE(an_idle_tls_connection_the_server_closed_is_replaced_without_an_error) {
    const int port = test::free_port();
    const std::string password = "private-tls-pw";
    const auto argv = private_tls_redis_argv(port, password);
    test::private_server server(argv, port);
    auto o = tls_options("rediss://:" + password + "@127.0.0.1:" + std::to_string(port) + "/0");
    auto s = strategies::make_redis_store(o);
    auto lock = make_lock(s, test::unique_resource("idle"));
    BOOST_REQUIRE(lock.try_lock());
    lock.unlock();
    // The server ends every client connection (ours idle in the pool): TLS close_notify, FIN.
    const std::string tls = tls_dir();
    const std::string kill = "redis-cli -h 127.0.0.1 -p " + std::to_string(port) +
                             " --tls --cacert " + tls + "/ca.pem --cert " + tls +
                             "/client.pem --key " + tls + "/client.key --no-auth-warning -a " +
                             password + " CLIENT KILL TYPE normal >/dev/null 2>&1";
    BOOST_REQUIRE(std::system(kill.c_str()) == 0);
    std::this_thread::sleep_for(50ms);
    // The pooled connection is seen closed before use: no failed command, a fresh connection.
    BOOST_CHECK_NO_THROW(BOOST_TEST(lock.try_lock()));
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(a_forked_child_never_uses_its_parents_tls_connections) {
    // Two processes on one TLS session would each send records with the same sequence numbers:
    // the server refuses the second (bad record MAC) and the parent's connection is lost.
    auto s = strategies::make_redis_store(rig_options());
    const auto name = test::unique_resource("fork");
    auto lock = make_lock(s, name);
    BOOST_REQUIRE(lock.try_lock());
    lock.unlock();
    std::this_thread::sleep_for(20ms);  // past the pool's grace: idle connections are checked
    const pid_t child = test::fork_child(
        [&] {
            auto l = make_lock(s, name + "-child");
            if (!l.try_lock()) return 1;
            l.unlock();
            return 0;
        },
        30s);
    BOOST_TEST(test::wait_child(child, 20s) == 0);
    std::this_thread::sleep_for(20ms);
    try {
        BOOST_TEST(lock.try_lock());
        lock.unlock();
    } catch (const error& e) {
        BOOST_ERROR("the parent's connection broke after the child's use: " << e.what());
    }
    // Forked right after the release: the pool hands out a connection back for less than its
    // grace without checking it, so the connection itself refuses (code "fork"), and a retry
    // opens the child's own.
    for (int round = 0; round < 10; ++round) {
        lock.lock();
        lock.unlock();
        const pid_t quick = test::fork_child(
            [&] {
                auto l = make_lock(s, name + "-quick");
                for (int attempt = 0; attempt < 2; ++attempt) {
                    try {
                        if (!l.try_lock()) return 1;
                        l.unlock();
                        return 0;
                    } catch (const backend_error& e) {
                        if (e.native_code() != "fork" || !e.transient()) return 2;
                    }
                }
                return 3;
            },
            30s);
        BOOST_TEST(test::wait_child(quick, 20s) == 0);
        try {
            BOOST_TEST(lock.try_lock());
            lock.unlock();
        } catch (const error& e) {
            BOOST_ERROR("round " << round << ": the parent's connection broke: " << e.what());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(rediss_urls_and_tls_options) {
    auto e = strategies::parse_redis_url("rediss://alice:p%40ss@example.org:6380/2");
    BOOST_TEST(e.tls);
    BOOST_TEST(e.host == "example.org");
    BOOST_TEST(e.port == 6380);
    BOOST_TEST(e.redacted() == "rediss://alice:***@example.org:6380/2");
    BOOST_TEST(!strategies::parse_redis_url("redis://example.org").tls);
    BOOST_TEST(strategies::parse_redis_url("rediss://[::1]").port == 6379);

    const auto o = strategies::redis_options::from_json({{"url", "rediss://:s3cret@h:6380/0"},
                                                         {"ca_file", "/etc/ca.pem"},
                                                         {"cert_file", "/etc/client.pem"},
                                                         {"key_file", "/etc/client.key"},
                                                         {"server_name", "redis.internal"}});
    BOOST_TEST(o.endpoint.tls);
    BOOST_TEST(o.ca_file == "/etc/ca.pem");
    BOOST_TEST(o.cert_file == "/etc/client.pem");
    BOOST_TEST(o.key_file == "/etc/client.key");
    BOOST_TEST(o.server_name == "redis.internal");

    auto refused = [](const nlohmann::json& j, const std::string& pointer,
                      const std::string& says) {
        try {
            strategies::redis_options::from_json(j);
            BOOST_FAIL("accepted " << j.dump());
        } catch (const config_error& e) {
            BOOST_TEST(e.pointer() == pointer, e.what());
            BOOST_TEST(std::string(e.what()).find(says) != std::string::npos, e.what());
            BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
        }
    };
    // TLS options where there is no TLS: they would be ignored and everything sent in clear.
    refused({{"url", "redis://:s3cret@h"}, {"ca_file", "/etc/ca.pem"}}, "/url", "rediss://");
    refused({{"url", "unix:///run/redis.sock"}, {"server_name", "h"}}, "/url", "rediss://");
    refused({{"url", "rediss://:s3cret@h"}, {"cert_file", "/etc/c.pem"}}, "/key_file",
            "go together");
    refused({{"url", "rediss://:s3cret@h"}, {"key_file", "/etc/c.key"}}, "/cert_file",
            "go together");
    refused({{"url", "rediss://:s3cret@h?ssl_cert_reqs=none"}}, "/url", "ca_file");
    // The same checks for options built in code.
    strategies::redis_options plain;
    plain.endpoint = strategies::parse_redis_url("redis://:s3cret@127.0.0.1:1");
    plain.ca_file = "/etc/ca.pem";
    BOOST_CHECK_THROW(strategies::make_redis_store(plain), invalid_argument_error);
    strategies::redis_options missing;
    missing.endpoint = strategies::parse_redis_url("rediss://:s3cret@127.0.0.1:1");
    missing.ca_file = "/nonexistent/ca.pem";
    try {
        strategies::make_redis_store(missing);
        BOOST_FAIL("a missing ca_file was accepted");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(std::string(e.what()).find("ca_file '/nonexistent/ca.pem'") != std::string::npos,
                   e.what());
    }
}

// The transport's other path: unix:// (a socket of our own, no hiredis context since the stream
// carries plain text too). A redis-server of the test's own that also listens on a Unix socket.
BOOST_AUTO_TEST_CASE(a_unix_socket_url_connects_and_locks) {
    const int port = test::free_port();
    const std::string socket = std::filesystem::temp_directory_path().string() +
                               "/locksmith-redis-" + std::to_string(::getpid()) + ".sock";
    auto argv = test::private_redis_argv(port);
    argv.insert(argv.end(), {"--unixsocket", socket, "--unixsocketperm", "700"});
    test::private_server server(argv, port);
    strategies::redis_options o;
    o.endpoint = strategies::parse_redis_url("unix://" + socket + "?db=2");
    o.key_prefix = test_prefix;
    auto s = strategies::make_redis_store(o);
    auto a = make_lock(s, "unix");
    auto b = make_lock(strategies::make_redis_store(o), "unix");
    BOOST_REQUIRE(a.try_lock());
    BOOST_TEST(!b.try_lock());
    a.unlock();
    BOOST_TEST(b.try_lock());
    b.unlock();
    // No socket there: a permanent error naming the path.
    o.endpoint.socket_path += ".missing";
    try {
        strategies::make_redis_store(o);
        BOOST_FAIL("a missing socket was connected to");
    } catch (const backend_error& e) {
        BOOST_TEST(e.native_code() == "errno " + std::to_string(ENOENT), e.what());
        BOOST_TEST(std::string(e.what()).find(o.endpoint.socket_path) != std::string::npos,
                   e.what());
        BOOST_TEST((e.kind() == error_kind::permanent), e.what());
    }
}
