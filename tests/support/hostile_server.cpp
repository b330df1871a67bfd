// SPDX-License-Identifier: MIT
#include "support/hostile_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <new>
#include <system_error>

#include "support/child_process.hpp"
#include "support/loopback_listener.hpp"

namespace locksmith::test {
namespace {

constexpr int deep_json_levels = 200000;
constexpr std::size_t nonsense_bytes = 64 * 1024;
constexpr int trickle_interval_ms = 100;

// What the server sends when a request arrives (empty: nothing).
std::string answer(hostile_behaviour b, std::uint64_t& seed) {
    switch (b) {
        case hostile_behaviour::nonsense: {
            std::string bytes(nonsense_bytes, '\0');
            for (auto& c : bytes) {
                seed = seed * 6364136223846793005u + 1442695040888963407u;  // an LCG: reproducible
                c = char(seed >> 56);
            }
            return bytes;
        }
        case hostile_behaviour::deep_json: {
            const std::string body =
                std::string(deep_json_levels, '[') + std::string(deep_json_levels, ']');
            return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body;
        }
        case hostile_behaviour::huge_length:
            return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Length: 1099511627776\r\n\r\n{";
        default:
            return {};
    }
}

struct connection {
    int fd = -1;
    SSL* ssl = nullptr;  // with TLS
    bool asked = false;  // the client sent something
    std::string out;     // what is still to send
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
    : behaviour_(behaviour), tls_dir_(std::move(tls_dir)) {
    const auto l = listen_on_loopback("hostile_server", 64);
    listener_ = l.fd;
    port_ = l.port;
    wake_[0] = l.wake[0];
    wake_[1] = l.wake[1];
    void* shared = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
    connections_ = new (shared) std::atomic<int>(0);
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
    (void)!::write(wake_[1], &stop, 1);
    wait_child(pid_, std::chrono::seconds(10));
    ::munmap(connections_, sizeof(std::atomic<int>));
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
}

std::string hostile_server::address() const {
    return "127.0.0.1:" + std::to_string(port_);
}

void hostile_server::run() {
    std::vector<connection> conns;
    std::uint64_t seed = 42;
    SSL_CTX* tls = nullptr;
    if (!tls_dir_.empty() && (tls = server_context(tls_dir_)) == nullptr) return;
    for (;;) {
        std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
        for (const auto& c : conns)
            fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        const int n = ::poll(fds.data(), fds.size(), trickle_interval_ms);
        if (n < 0 && errno != EINTR) break;
        if (fds[0].revents) break;
        const std::size_t polled = conns.size();  // the ones fds has an entry for
        if (fds[1].revents & POLLIN) {
            const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                ++*connections_;
                connection c{fd};
                if (tls != nullptr) c.ssl = accept_tls(tls, fd);
                if (behaviour_ == hostile_behaviour::hang_up || (tls != nullptr && !c.ssl))
                    close_connection(c);
                else
                    conns.push_back(std::move(c));
            }
        }
        std::vector<connection> kept;
        for (std::size_t i = 0; i < conns.size(); ++i) {
            auto& c = conns[i];
            if (i >= polled) {
                kept.push_back(c);
                continue;
            }
            const short ev = fds[i + 2].revents;
            bool gone = (ev & (POLLERR | POLLNVAL)) != 0;
            if (ev & POLLIN) {
                char buf[4096];
                const ssize_t got = receive(c, buf, sizeof buf);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) gone = true;
                if (got > 0) {
                    c.asked = true;
                    c.out += answer(behaviour_, seed);
                }
            }
            if (!gone && behaviour_ == hostile_behaviour::trickle && c.asked && c.out.empty())
                c.out = "a";  // one byte a tick: a line that never ends
            if (!gone && !c.out.empty()) {
                const ssize_t sent = transmit(c);
                if (sent > 0) c.out.erase(0, std::size_t(sent));
                if (sent < 0 && errno != EAGAIN && errno != EINTR) gone = true;
            }
            if (gone)
                close_connection(c);
            else
                kept.push_back(std::move(c));
        }
        conns = std::move(kept);
    }
    for (auto& c : conns) close_connection(c);
    if (tls != nullptr) SSL_CTX_free(tls);
}

}  // namespace locksmith::test
