// SPDX-License-Identifier: MIT
#include "support/hostile_http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "support/child_process.hpp"
#include "support/loopback_listener.hpp"

namespace locksmith::test {
namespace {

// Waits until `fd` has `events` or the stop pipe is readable; false on stop, error or hang-up.
bool wait_for(int fd, short events, int wake) {
    for (;;) {
        pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
        const int n = ::poll(p, 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[1].revents != 0) return false;
        if (p[0].revents & events) return true;
        if (p[0].revents != 0) return false;
    }
}

bool send_all(int fd, std::string_view data, int wake) {
    while (!data.empty()) {
        const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            data.remove_prefix(std::size_t(n));
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(fd, POLLOUT, wake)) return false;
        } else {
            return false;  // the client went away
        }
    }
    return true;
}

// Appends what `fd` has to `in`; false when the client closed, on error, or on stop.
bool read_more(int fd, std::string& in, int wake) {
    if (!wait_for(fd, POLLIN, wake)) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);
    in.append(buf, std::size_t(n));
    return true;
}

}  // namespace

hostile_http_server::hostile_http_server(answer_function answer) : answer_(std::move(answer)) {
    const auto l = listen_on_loopback("hostile_http_server", 64);
    listener_ = l.fd;
    port_ = l.port;
    wake_[0] = l.wake[0];
    wake_[1] = l.wake[1];
    // A process, not a thread: the tests fork their clients (support/child_process.hpp), and a
    // thread beside the fork could leave a lock held in the child. Ended by the destructor; the
    // limit only keeps a server whose test crashed from staying.
    pid_ = fork_child(
        [this] {
            accept_loop();
            for (auto& t : connections_) t.join();
            return 0;
        },
        std::chrono::seconds(900));
}

hostile_http_server::~hostile_http_server() {
    const char stop = 's';
    (void)!::write(wake_[1], &stop, 1);  // never read: every poll on wake_[0] sees it from now on
    wait_child(pid_, std::chrono::seconds(10));
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
}

std::string hostile_http_server::url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
}

bool hostile_http_server::stopping(std::chrono::milliseconds timeout) const {
    pollfd p{wake_[0], POLLIN, 0};
    for (;;) {
        const int n = ::poll(&p, 1, int(timeout.count()));
        if (n < 0 && errno == EINTR) continue;
        return n != 0;
    }
}

void hostile_http_server::accept_loop() {
    for (;;) {
        if (!wait_for(listener_, POLLIN, wake_[0])) return;
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        std::lock_guard guard(mutex_);
        connections_.emplace_back([this, fd] {
            serve(fd);
            ::close(fd);
        });
    }
}

void hostile_http_server::serve(int fd) {
    const int wake = wake_[0];
    std::string in;
    for (;;) {
        std::size_t head_end;
        while ((head_end = in.find("\r\n\r\n")) == std::string::npos)
            if (!read_more(fd, in, wake)) return;
        const std::string head = in.substr(0, head_end);
        http_request r;
        const auto space = head.find(' ');
        const auto space2 = head.find(' ', space + 1);
        r.method = head.substr(0, space);
        r.path = head.substr(space + 1, space2 - space - 1);
        std::size_t length = 0;
        for (const char* name : {"\r\nContent-Length:", "\r\ncontent-length:"})
            if (const auto at = head.find(name); at != std::string::npos)
                length = std::strtoul(head.c_str() + at + std::strlen(name), nullptr, 10);
        while (in.size() < head_end + 4 + length)
            if (!read_more(fd, in, wake)) return;
        r.body = in.substr(head_end + 4, length);
        in.erase(0, head_end + 4 + length);

        const http_answer a = answer_(r);
        if (!send_all(fd, a.bytes, wake)) return;
        for (const char c : a.trickle)
            if (stopping(a.per_byte) || !send_all(fd, std::string_view(&c, 1), wake)) return;
        if (a.then_silent) {
            (void)stopping(std::chrono::hours(24));
            return;
        }
    }
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

}  // namespace locksmith::test
