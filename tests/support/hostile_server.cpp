// SPDX-License-Identifier: MIT
#include "support/hostile_server.hpp"

#include <fcntl.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <system_error>

#include "support/child_process.hpp"
#include "support/loopback_listener.hpp"
#include "support/thread_signals.hpp"

namespace locksmith::test {

struct hostile_server::counters {
    std::atomic<int> connections{0};
    std::atomic<int> trickles_ended{0};
};

namespace {

using clock = std::chrono::steady_clock;

constexpr int deep_json_levels = 200000;
constexpr std::size_t nonsense_bytes = 64 * 1024;
constexpr std::chrono::milliseconds behaviour_trickle{100};

hostile_server::setup setup_for(hostile_behaviour b, std::string tls_dir) {
    hostile_server::setup how;
    how.tls_dir = std::move(tls_dir);
    switch (b) {
        case hostile_behaviour::silent:
            how.answer = [](const std::string&) { return hostile_answer{}; };
            break;
        case hostile_behaviour::trickle:
            how.answer = [](const std::string&) {
                hostile_answer a;
                a.trickle = "a";  // one byte a tick: a line that never ends
                a.per_byte = behaviour_trickle;
                a.endless = true;
                return a;
            };
            break;
        case hostile_behaviour::nonsense:
            how.answer = [seed = std::uint64_t(42)](const std::string&) mutable {
                hostile_answer a;
                a.bytes.resize(nonsense_bytes);
                for (auto& c : a.bytes) {
                    seed = seed * 6364136223846793005u + 1442695040888963407u;  // reproducible
                    c = char(seed >> 56);
                }
                return a;
            };
            break;
        case hostile_behaviour::deep_json:
            how.answer = [](const std::string&) {
                return hostile_answer{json_reply(deeply_nested_json(deep_json_levels))};
            };
            break;
        case hostile_behaviour::huge_length:
            how.answer = [](const std::string&) {
                return hostile_answer{
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: 1099511627776\r\n\r\n{"};
            };
            break;
        case hostile_behaviour::hang_up:
            how.answer = [](const std::string&) { return hostile_answer{}; };
            how.on_accept = hostile_answer{};
            how.on_accept->hang_up = true;
            break;
    }
    return how;
}

struct connection {
    int fd = -1;
    SSL* ssl = nullptr;                 // with TLS
    std::string in;                     // received, not yet a whole request
    std::string out;                    // what is still to send
    std::deque<hostile_answer> queued;  // answers behind the current trickle
    hostile_answer current;             // its trickle and what comes after it
    std::size_t trickled = 0;           // bytes of current.trickle sent
    bool trickling = false;
    clock::time_point next_byte;
    bool silent = false;   // reads nothing more
    bool closing = false;  // closes once `out` is sent
};

// The server side of TLS with the rig's certificate; null (and the server ends) when the files
// cannot be loaded.
SSL_CTX* server_context(const std::string& dir) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) return nullptr;
    // The answers are written in pieces as the socket takes them, from a buffer that moves.
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, (dir + "/server.pem").c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, (dir + "/server.key").c_str(), SSL_FILETYPE_PEM) != 1) {
        SSL_CTX_free(ctx);
        return nullptr;
    }
    return ctx;
}

// Completes the handshake on the new connection `fd` (blocking, at most 2 s: the clients here
// are the strategies, which start it at once). Null when it failed.
SSL* accept_tls(SSL_CTX* ctx, int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    const timeval limit{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    SSL* ssl = SSL_new(ctx);
    if (ssl != nullptr && (SSL_set_fd(ssl, fd) != 1 || SSL_accept(ssl) != 1)) {
        SSL_free(ssl);
        ssl = nullptr;
    }
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    return ssl;
}

// read(2) or SSL_read: > 0 bytes, 0 at the end, -1 with errno EAGAIN when nothing is there yet,
// -1 with another errno on an error.
ssize_t receive(connection& c, char* buffer, std::size_t size) {
    if (c.ssl == nullptr) return ::read(c.fd, buffer, size);
    const int n = SSL_read(c.ssl, buffer, int(size));
    if (n > 0) return n;
    const int e = SSL_get_error(c.ssl, n);
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : ECONNRESET;
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

// send(2) or SSL_write, with receive's conventions.
ssize_t transmit(connection& c) {
    if (c.ssl == nullptr) return ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    const int n = SSL_write(c.ssl, c.out.data(), int(std::min<std::size_t>(c.out.size(), 16384)));
    if (n > 0) return n;
    const int e = SSL_get_error(c.ssl, n);
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPIPE;
    return -1;
}

void close_connection(connection& c) {
    if (c.ssl != nullptr) SSL_free(c.ssl);  // no close_notify: a cut, as a crash leaves it
    ::close(c.fd);
}

// What comes after an answer's bytes and trickle.
void finish(connection& c) {
    if (c.current.then_silent) {
        c.silent = true;
        c.queued.clear();
    }
    if (c.current.hang_up) c.closing = true;
}

// Moves the connection's answers on: starts the next queued answer when no trickle is under
// way, and queues a trickle's next byte when it is due.
void advance(connection& c, std::atomic<int>& trickles_ended) {
    const auto now = clock::now();
    while (!c.trickling && !c.closing && !c.queued.empty()) {
        c.current = std::move(c.queued.front());
        c.queued.pop_front();
        c.out += c.current.bytes;
        if (c.current.trickle.empty()) {
            finish(c);
        } else {
            c.trickling = true;
            c.trickled = 0;
            c.next_byte = now;
        }
    }
    if (c.trickling && c.out.empty() && now >= c.next_byte) {
        c.out += c.current.trickle[c.trickled++];
        c.next_byte = now + c.current.per_byte;
        if (c.trickled == c.current.trickle.size()) {
            if (c.current.endless) {
                c.trickled = 0;
            } else {
                c.trickling = false;
                ++trickles_ended;
                finish(c);
            }
        }
    }
}

}  // namespace

const char* to_string(hostile_behaviour b) {
    switch (b) {
        case hostile_behaviour::silent:
            return "silent";
        case hostile_behaviour::trickle:
            return "trickle";
        case hostile_behaviour::nonsense:
            return "nonsense";
        case hostile_behaviour::deep_json:
            return "deep_json";
        case hostile_behaviour::huge_length:
            return "huge_length";
        case hostile_behaviour::hang_up:
            return "hang_up";
    }
    return "?";
}

const std::vector<hostile_behaviour>& every_hostile_behaviour() {
    static const std::vector<hostile_behaviour> all = {
        hostile_behaviour::silent,    hostile_behaviour::trickle,     hostile_behaviour::nonsense,
        hostile_behaviour::deep_json, hostile_behaviour::huge_length, hostile_behaviour::hang_up};
    return all;
}

hostile_server::hostile_server(hostile_behaviour behaviour, std::string tls_dir)
    : hostile_server(setup_for(behaviour, std::move(tls_dir))) {}

hostile_server::hostile_server(setup how) : how_(std::move(how)) {
    const auto l = listen_on_loopback("hostile_server", 64);
    listener_ = l.fd;
    port_ = l.port;
    wake_[0] = l.wake[0];
    wake_[1] = l.wake[1];
    void* shared = ::mmap(nullptr, sizeof(counters), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
    count_ = new (shared) counters;
    if (how_.in_a_thread) {
        thread_ = std::thread([this] { run(); });
        return;
    }
    // Ended by the destructor; the limit only keeps a server whose test crashed from staying.
    pid_ = fork_child(
        [this] {
            run();
            return 0;
        },
        std::chrono::seconds(900));
}

hostile_server::~hostile_server() {
    const char stop = 's';
    (void)!::write(wake_[1], &stop, 1);  // never read: every poll on wake_[0] sees it from now on
    if (thread_.joinable())
        thread_.join();
    else
        wait_child(pid_, std::chrono::seconds(10));
    count_->~counters();
    ::munmap(count_, sizeof(counters));
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
}

std::string hostile_server::address() const {
    return "127.0.0.1:" + std::to_string(port_);
}

std::string hostile_server::url(std::string_view scheme, std::string_view userinfo) const {
    return std::string(scheme) + "://" + std::string(userinfo) + address();
}

int hostile_server::connections() const noexcept {
    return count_->connections.load();
}

int hostile_server::trickles_ended() const noexcept {
    return count_->trickles_ended.load();
}

void hostile_server::run() {
    block_sigpipe_in_this_thread();
    std::vector<connection> conns;
    SSL_CTX* tls = nullptr;
    if (!how_.tls_dir.empty() && (tls = server_context(how_.tls_dir)) == nullptr) return;
    for (;;) {
        for (auto& c : conns) advance(c, count_->trickles_ended);
        // Until the next trickled byte is due (at most 100 ms: a byte queued by advance() above
        // is sent when the socket takes it).
        int timeout_ms = 100;
        const auto now = clock::now();
        for (const auto& c : conns)
            if (c.trickling && c.out.empty())
                timeout_ms = std::min<int>(
                    timeout_ms,
                    int(std::max<long>(
                        0, std::chrono::duration_cast<std::chrono::milliseconds>(c.next_byte - now)
                               .count())));
        std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
        for (const auto& c : conns)
            fds.push_back(
                {c.fd, short((c.silent ? 0 : POLLIN) | (c.out.empty() ? 0 : POLLOUT)), 0});
        const int n = ::poll(fds.data(), fds.size(), timeout_ms);
        if (n < 0 && errno != EINTR) break;
        if (fds[0].revents) break;
        const std::size_t polled = conns.size();  // the ones fds has an entry for
        if (fds[1].revents & POLLIN) {
            const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                ++count_->connections;
                connection c;
                c.fd = fd;
                if (tls != nullptr) c.ssl = accept_tls(tls, fd);
                if (tls != nullptr && !c.ssl) {
                    close_connection(c);
                } else {
                    if (how_.on_accept) c.queued.push_back(*how_.on_accept);
                    conns.push_back(std::move(c));
                }
            }
        }
        std::vector<connection> kept;
        for (std::size_t i = 0; i < conns.size(); ++i) {
            auto& c = conns[i];
            bool gone = false;
            const short ev = i < polled ? fds[i + 2].revents : 0;
            if (ev & (POLLERR | POLLNVAL | POLLHUP)) gone = (ev & POLLIN) == 0 || c.silent;
            if (!gone && !c.silent && (ev & POLLIN)) {
                char buf[65536];
                const ssize_t got = receive(c, buf, sizeof buf);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) gone = true;
                if (got > 0) {
                    c.in.append(buf, std::size_t(got));
                    for (;;) {
                        std::optional<std::string> request;
                        if (how_.frame) {
                            request = how_.frame(c.in);
                        } else if (!c.in.empty()) {
                            request = std::move(c.in);
                            c.in.clear();
                        }
                        if (!request) break;
                        c.queued.push_back(how_.answer(*request));
                    }
                }
            }
            if (!gone) advance(c, count_->trickles_ended);
            if (!gone && !c.out.empty()) {
                const ssize_t sent = transmit(c);
                if (sent > 0) c.out.erase(0, std::size_t(sent));
                if (sent < 0 && errno != EAGAIN && errno != EINTR) gone = true;
            }
            if (gone || (c.closing && c.out.empty()))
                close_connection(c);
            else
                kept.push_back(std::move(c));
        }
        conns = std::move(kept);
    }
    for (auto& c : conns) close_connection(c);
    if (tls != nullptr) SSL_CTX_free(tls);
}

// ---------------------------------------------------------------------------------------- HTTP

namespace {

// The end of the request's head ("\r\n\r\n" included) and its Content-Length; nullopt while
// the head is incomplete.
std::optional<std::pair<std::size_t, std::size_t>> http_head(const std::string& in) {
    const auto end = in.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    const std::string head = in.substr(0, end);
    std::size_t length = 0;
    for (const char* name : {"\r\nContent-Length:", "\r\ncontent-length:"})
        if (const auto at = head.find(name); at != std::string::npos)
            length = std::strtoul(head.c_str() + at + std::strlen(name), nullptr, 10);
    return std::make_pair(end + 4, length);
}

}  // namespace

hostile_server::setup http_script(std::function<http_answer(const http_request&)> answer) {
    hostile_server::setup how;
    how.frame = [](std::string& in) -> std::optional<std::string> {
        const auto head = http_head(in);
        if (!head || in.size() < head->first + head->second) return std::nullopt;
        std::string request = in.substr(0, head->first + head->second);
        in.erase(0, request.size());
        return request;
    };
    how.answer = [answer = std::move(answer)](const std::string& text) {
        const auto head = http_head(text);
        http_request r;
        const auto space = text.find(' ');
        const auto space2 = text.find(' ', space + 1);
        r.method = text.substr(0, space);
        r.path = text.substr(space + 1, space2 - space - 1);
        r.body = text.substr(head->first);
        return answer(r);
    };
    return how;
}

std::string json_reply(std::string_view body) {
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

std::string chunked_head() {
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: "
           "chunked\r\n\r\n";
}

std::string chunk(std::string_view data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + std::string(data) + "\r\n";
}

std::string deeply_nested_json(std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

// ---------------------------------------------------------------------------------------- RESP

namespace {

// One complete RESP array of bulk strings from the front of `in` (taken off it), or nullopt.
std::optional<std::vector<std::string>> take_command(std::string& in) {
    std::size_t pos = 0;
    auto line = [&]() -> std::optional<std::string> {
        const auto end = in.find("\r\n", pos);
        if (end == std::string::npos) return std::nullopt;
        auto text = in.substr(pos, end - pos);
        pos = end + 2;
        return text;
    };
    const auto count = line();
    if (!count || count->size() < 2 || (*count)[0] != '*') return std::nullopt;
    std::vector<std::string> args;
    for (long i = 0, n = std::strtol(count->c_str() + 1, nullptr, 10); i < n; ++i) {
        const auto length = line();
        if (!length || length->size() < 2) return std::nullopt;
        const std::size_t size = std::strtoul(length->c_str() + 1, nullptr, 10);
        if (in.size() < pos + size + 2) return std::nullopt;
        args.push_back(in.substr(pos, size));
        pos += size + 2;
    }
    in.erase(0, pos);
    return args;
}

}  // namespace

hostile_server::setup resp_script(resp_reply reply, std::string trickled) {
    hostile_server::setup how;
    how.in_a_thread = true;
    how.frame = [](std::string& in) -> std::optional<std::string> {
        std::string copy = in;
        if (!take_command(copy)) return std::nullopt;
        std::string request = in.substr(0, in.size() - copy.size());
        in = std::move(copy);
        return request;
    };
    how.answer = [reply = std::move(reply), trickled = std::move(trickled)](const std::string& r) {
        std::string text = r;
        hostile_answer a;
        if (auto bytes = reply(*take_command(text))) {
            a.bytes = std::move(*bytes);
        } else {
            a.trickle = trickled;
            a.per_byte = std::chrono::milliseconds(200);
        }
        return a;
    };
    return how;
}

// ------------------------------------------------------------------------------ memcached meta

std::string meta_names(const std::string& command) {
    const auto key_begin = command.find(' ') + 1;
    const auto key_end = command.find(' ', key_begin);
    std::string names = " k" + command.substr(key_begin, key_end - key_begin);
    if (const auto at = command.find(" O"); at != std::string::npos)
        names += command.substr(at, command.find(' ', at + 1) - at);
    return names;
}

hostile_server::setup memcached_script(std::function<hostile_answer(const std::string&)> answer) {
    hostile_server::setup how;
    how.frame = [](std::string& in) -> std::optional<std::string> {
        const auto end = in.find("\r\n");
        if (end == std::string::npos) return std::nullopt;
        std::size_t used = end + 2;
        if (in.starts_with("ms ")) {  // its data line follows
            const auto data_end = in.find("\r\n", used);
            if (data_end == std::string::npos) return std::nullopt;
            used = data_end + 2;
        }
        std::string line = in.substr(0, end);
        in.erase(0, used);
        return line;
    };
    how.answer = [answer = std::move(answer)](const std::string& line) {
        if (line == "mn") return hostile_answer{"MN\r\n"};
        if (line == "stats")
            return hostile_answer{
                "STAT pid 4242\r\nSTAT uptime 10\r\nSTAT time 1700000010\r\n"
                "STAT version 1.6.18\r\nEND\r\n"};
        if (line == "stats settings")
            return hostile_answer{"STAT maxconns 1024\r\nSTAT cas_enabled yes\r\nEND\r\n"};
        return answer(line);
    };
    return how;
}

const char* to_string(hostile_memcached b) {
    switch (b) {
        case hostile_memcached::silent:
            return "silent";
        case hostile_memcached::trickle:
            return "trickle";
        case hostile_memcached::nonsense:
            return "nonsense";
        case hostile_memcached::huge_value:
            return "huge_value";
        case hostile_memcached::another_key:
            return "another_key";
        case hostile_memcached::another_request:
            return "another_request";
        case hostile_memcached::hang_up_holding:
            return "hang_up_holding";
    }
    return "?";
}

const std::vector<hostile_memcached>& every_hostile_memcached() {
    static const std::vector<hostile_memcached> all = {
        hostile_memcached::silent,      hostile_memcached::trickle,
        hostile_memcached::nonsense,    hostile_memcached::huge_value,
        hostile_memcached::another_key, hostile_memcached::another_request};
    return all;
}

hostile_server::setup memcached_setup(hostile_memcached b) {
    using answer = std::function<hostile_answer(const std::string&)>;
    answer script;
    switch (b) {
        case hostile_memcached::silent:
            script = [](const std::string&) { return hostile_answer{}; };
            break;
        case hostile_memcached::trickle:
            script = [](const std::string& line) {
                hostile_answer a;
                a.trickle = "HD c1" + meta_names(line);  // and never its \r\n
                a.per_byte = behaviour_trickle;
                a.endless = true;
                return a;
            };
            break;
        case hostile_memcached::nonsense:
            script = [n = 0](const std::string& line) mutable {
                // Each a reply memcached never sends to that command, named as it would be.
                static const char* const codes[] = {"EN",     "MN", "VA 3 c1", "HD cX",
                                                    "NS c-1", "ZZ", "HD t"};
                const std::string code = codes[n++ % std::size(codes)];
                std::string reply = code + meta_names(line) + "\r\n";
                if (code.starts_with("VA")) reply += "abc\r\n";
                return hostile_answer{reply};
            };
            break;
        case hostile_memcached::huge_value:
            script = [](const std::string& line) {
                if (line.starts_with("ms "))
                    return hostile_answer{"NS c0" + meta_names(line) + "\r\n"};
                if (line.find(".limit ") != std::string::npos)
                    return hostile_answer{"VA 1099511627776 c1" + meta_names(line) + "\r\n"};
                hostile_answer a{"VA 100000000 c1" + meta_names(line) + "\r\n" +
                                 std::string(4u << 20, 'x')};
                a.then_silent = true;
                return a;
            };
            break;
        case hostile_memcached::another_key:
            script = [](const std::string& line) {
                std::string names = meta_names(line);
                names.insert(2, "other-");  // " k<key>": " kother-<key>"
                return hostile_answer{(line.starts_with("mg ") ? "EN" : "HD c5") + names + "\r\n"};
            };
            break;
        case hostile_memcached::another_request:
            script = [](const std::string& line) {
                std::string names = meta_names(line);
                const auto o = names.find(" O");
                names = o == std::string::npos
                            ? names + " O0"
                            : names.substr(0, o) + " O" +
                                  std::to_string(std::strtoull(names.c_str() + o + 2, nullptr, 10) +
                                                 1000);
                return hostile_answer{(line.starts_with("mg ") ? "EN" : "HD c5") + names + "\r\n"};
            };
            break;
        case hostile_memcached::hang_up_holding:
            // A real grant (the first add of an item, answered as memcached does), then the
            // connection ends; every later command ends its connection too, so that the holder's
            // refresh and release meet a server that hangs up while the lock is held.
            script = [granted = false](const std::string& line) mutable {
                if (!granted && line.starts_with("ms ") && line.find(" ME") != std::string::npos) {
                    granted = true;
                    hostile_answer a{"HD c5" + meta_names(line) + "\r\n"};
                    a.hang_up = true;
                    return a;
                }
                if (!granted && line.starts_with("mg "))
                    return hostile_answer{"EN" + meta_names(line) + "\r\n"};
                hostile_answer a;
                a.hang_up = true;
                return a;
            };
            break;
    }
    return memcached_script(std::move(script));
}

}  // namespace locksmith::test
