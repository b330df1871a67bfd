// SPDX-License-Identifier: MIT
#include "support/tcp_fault_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <locksmith/author/strategy_support.hpp>

#include "support/loopback_listener.hpp"

namespace locksmith::test {
namespace {

constexpr int reply_timeout_ms = 10000;

bool send_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        size -= std::size_t(n);
    }
    return true;
}

ssize_t read_some(int fd, char* buf, std::size_t size) {
    for (;;) {
        const ssize_t n = ::read(fd, buf, size);
        if (n >= 0 || errno != EINTR) return n;
    }
}

}  // namespace

tcp_fault_proxy::tcp_fault_proxy(const std::string& target_host, int target_port)
    : target_host_(target_host), target_port_(target_port) {
    const auto l = listen_on_loopback("tcp_fault_proxy", 16);
    listener_ = l.fd;
    port_ = l.port;
    wake_[0] = l.wake[0];
    wake_[1] = l.wake[1];
    thread_ = std::thread([this] { run(); });
}

tcp_fault_proxy::~tcp_fault_proxy() {
    const char stop = 's';
    (void)!::write(wake_[1], &stop, 1);
    thread_.join();
    for (auto& l : links_) close_link(l);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
}

std::string tcp_fault_proxy::address() const {
    return "127.0.0.1:" + std::to_string(port_);
}

void tcp_fault_proxy::cut_after_next_request(request_filter matches) {
    std::lock_guard guard(mutex_);
    armed_ = true;
    matches_ = std::move(matches);
    // The request to cut after is one the client sends from now on. links_ is run()'s: it
    // clears the bytes it kept when it sees the new arming.
    ++arming_;
}

bool tcp_fault_proxy::wait_cut(std::chrono::milliseconds timeout) {
    std::unique_lock guard(mutex_);
    return cut_done_.wait_for(guard, timeout, [&] { return !armed_; });
}

int tcp_fault_proxy::connections() const {
    std::lock_guard guard(mutex_);
    return connections_;
}

void tcp_fault_proxy::set_mode(mode m) {
    {
        std::lock_guard guard(mutex_);
        mode_ = m;
    }
    const char again = 'm';  // run() polls again under the new mode
    (void)!::write(wake_[1], &again, 1);
}

void tcp_fault_proxy::cut_all() {
    {
        std::lock_guard guard(mutex_);
        cut_all_ = true;
    }
    const char again = 'm';
    (void)!::write(wake_[1], &again, 1);
}

void tcp_fault_proxy::close_link(link& l) {
    if (l.client >= 0) ::close(l.client);
    if (l.server >= 0) ::close(l.server);
    l.client = l.server = -1;
}

// Back in pass: the connections that lost bytes are closed, those accepted meanwhile connect.
void tcp_fault_proxy::resume() {
    for (auto& l : links_) {
        if (l.damaged) {
            close_link(l);
        } else if (l.server < 0) {
            const auto attempt =
                connect_tcp(target_host_, target_port_,
                            std::chrono::steady_clock::now() + std::chrono::seconds(10));
            if (attempt.fd < 0) {
                close_link(l);
                continue;
            }
            ::fcntl(attempt.fd, F_SETFL, ::fcntl(attempt.fd, F_GETFL) & ~O_NONBLOCK);
            l.server = attempt.fd;
        }
    }
    std::erase_if(links_, [](const link& l) { return l.client < 0; });
}

void tcp_fault_proxy::run() {
    mode now = mode::pass;
    for (;;) {
        {
            std::lock_guard guard(mutex_);
            if (cut_all_) {
                for (auto& l : links_) close_link(l);
                links_.clear();
                cut_all_ = false;
            }
            if (mode_ == mode::pass && now != mode::pass) resume();
            now = mode_;
        }
        // A stalled link is not polled at all (a negative descriptor): its bytes wait in the
        // kernel's buffers, and a hang-up is noticed once the stall ends.
        const bool stalled = now == mode::stall;
        std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
        for (const auto& l : links_) {
            fds.push_back({stalled ? -1 : l.client, POLLIN, 0});
            fds.push_back({stalled || l.server < 0 ? -1 : l.server, POLLIN, 0});
        }
        if (::poll(fds.data(), fds.size(), -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[0].revents) {
            char command = 0;
            if (read_some(wake_[0], &command, 1) != 1 || command == 's') return;
            continue;  // a new mode or cut: the links polled may have changed
        }
        // The links polled are the first ones; accept_one() appends.
        std::vector<bool> open(links_.size(), true);
        for (std::size_t i = 0; i < open.size(); ++i) {
            const auto from_client = fds[2 + 2 * i].revents;
            const auto from_server = fds[3 + 2 * i].revents;
            if (now == mode::drop) {
                if (from_client) drop_from(links_[i].client, links_[i]);
                if (from_server) drop_from(links_[i].server, links_[i]);
                open[i] = links_[i].client >= 0 || links_[i].server >= 0;
                continue;
            }
            if (from_client && !forward_from_client(links_[i])) open[i] = false;
            if (open[i] && from_server && !forward_from_server(links_[i])) open[i] = false;
        }
        for (std::size_t i = open.size(); i-- > 0;)
            if (!open[i]) {
                close_link(links_[i]);
                links_.erase(links_.begin() + std::ptrdiff_t(i));
            }
        if (fds[1].revents & POLLIN) accept_one(now);
    }
}

// A partition: what one side sent is lost. A side that hung up is closed alone: the other side
// hears of it only when the partition ends (resume), as in a real partition.
void tcp_fault_proxy::drop_from(int& fd, link& l) {
    char buf[65536];
    l.damaged = true;
    if (read_some(fd, buf, sizeof buf) > 0) return;
    ::close(fd);
    fd = -1;
}

void tcp_fault_proxy::accept_one(mode now) {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    if (now != mode::pass) {
        links_.push_back({client, -1, {}});  // connected when the partition or stall ends
        std::lock_guard guard(mutex_);
        ++connections_;
        return;
    }
    const auto attempt = connect_tcp(target_host_, target_port_,
                                     std::chrono::steady_clock::now() + std::chrono::seconds(10));
    if (attempt.fd < 0) {
        ::close(client);  // the client sees the server as down
        return;
    }
    // connect_tcp's socket is non-blocking; the forwarding here writes whole buffers.
    ::fcntl(attempt.fd, F_SETFL, ::fcntl(attempt.fd, F_GETFL) & ~O_NONBLOCK);
    links_.push_back({client, attempt.fd, {}});
    std::lock_guard guard(mutex_);
    ++connections_;
}

bool tcp_fault_proxy::forward_from_client(link& l) {
    char buf[65536];
    const ssize_t n = read_some(l.client, buf, sizeof buf);
    if (n <= 0) return false;
    bool cut = false;
    {
        std::lock_guard guard(mutex_);
        if (l.arming != arming_) {
            l.arming = arming_;
            l.sent.clear();
        }
        if (armed_) {
            l.sent.append(buf, std::size_t(n));
            cut = matches_(l.sent);
        }
    }
    if (!send_all(l.server, buf, std::size_t(n))) return false;
    if (!cut) return true;
    // The server's answer is read (it applied the request) and dropped with the connection.
    pollfd p{l.server, POLLIN, 0};
    if (::poll(&p, 1, reply_timeout_ms) > 0) (void)read_some(l.server, buf, sizeof buf);
    std::lock_guard guard(mutex_);
    armed_ = false;
    cut_done_.notify_all();
    return false;
}

bool tcp_fault_proxy::forward_from_server(link& l) {
    char buf[65536];
    const ssize_t n = read_some(l.server, buf, sizeof buf);
    return n > 0 && send_all(l.client, buf, std::size_t(n));
}

}  // namespace locksmith::test
