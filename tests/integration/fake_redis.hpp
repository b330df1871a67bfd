// SPDX-License-Identifier: MIT
// A fake Redis server on 127.0.0.1, in a thread of the test, for what a real one will not do:
// answer late, trickle, or play a Sentinel or master that says what the test needs.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace locksmith::test {

// Listens on an ephemeral port and answers each RESP command with what `reply` returns for it
// (sent at once), or, when `reply` returns nullopt, trickles `trickled` one byte per 200 ms.
// Counts connections. The thread ends when the test ends (destructor) or the client goes.
class fake_redis {
  public:
    using reply_fn = std::function<std::optional<std::string>(const std::vector<std::string>&)>;

    fake_redis(reply_fn reply, std::string trickled)
        : reply_(std::move(reply)), trickled_(std::move(trickled)) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        BOOST_REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        BOOST_REQUIRE(::listen(listen_fd_, 8) == 0);
        socklen_t length = sizeof a;
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &length);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~fake_redis() {
        stop_ = true;
        thread_.join();
        ::close(listen_fd_);
    }
    std::string url(const std::string& userinfo = "") const {
        return "redis://" + userinfo + "127.0.0.1:" + std::to_string(port_);
    }
    int connections() const { return connections_; }
    // True once the whole trickled reply was sent.
    bool trickle_ended() const { return trickle_ended_; }

  private:
    // One complete RESP array of bulk strings from the front of `in`, or nullopt.
    static std::optional<std::vector<std::string>> take_command(std::string& in) {
        std::size_t pos = 0;
        auto line = [&]() -> std::optional<std::string> {
            auto end = in.find("\r\n", pos);
            if (end == std::string::npos) return std::nullopt;
            auto text = in.substr(pos, end - pos);
            pos = end + 2;
            return text;
        };
        auto count = line();
        if (!count || count->empty() || (*count)[0] != '*') return std::nullopt;
        std::vector<std::string> args;
        for (int i = 0, n = std::stoi(count->substr(1)); i < n; ++i) {
            auto length = line();
            if (!length) return std::nullopt;
            const std::size_t size = std::stoul(length->substr(1));
            if (in.size() < pos + size + 2) return std::nullopt;
            args.push_back(in.substr(pos, size));
            pos += size + 2;
        }
        in.erase(0, pos);
        return args;
    }

    // Waits up to 50 ms for `fd`; false when the test is over.
    bool ready(int fd, short events) const {
        pollfd p{fd, events, 0};
        while (!stop_)
            if (::poll(&p, 1, 50) > 0) return true;
        return false;
    }

    // One thread per connection, so that a trickle on one does not hold up another.
    void serve() {
        std::vector<std::thread> clients;
        while (ready(listen_fd_, POLLIN)) {
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            ++connections_;
            clients.emplace_back([this, fd] {
                std::string in;
                while (ready(fd, POLLIN) && serve_one(fd, in)) {
                }
                ::close(fd);
            });
        }
        for (auto& t : clients) t.join();
    }

    // Reads what arrived and answers every complete command; false when the client is gone.
    bool serve_one(int fd, std::string& in) {
        char buffer[65536];
        const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
        if (n > 0) in.append(buffer, std::size_t(n));
        while (auto args = take_command(in)) {
            if (auto reply = reply_(*args)) {
                ::send(fd, reply->data(), reply->size(), MSG_NOSIGNAL);
                continue;
            }
            for (char c : trickled_) {
                if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) return false;  // the client gave up
                for (int i = 0; i < 4 && !stop_; ++i) ::poll(nullptr, 0, 50);
                if (stop_) return false;
            }
            trickle_ended_ = true;
        }
        return true;
    }

    reply_fn reply_;
    std::string trickled_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<int> connections_{0};
    std::atomic<bool> trickle_ended_{false};
    std::thread thread_;
};

// A 40-character SHA, the answer a fake gives to SCRIPT LOAD.
inline const std::string fake_sha = "$40\r\n" + std::string(40, 'a') + "\r\n";

}  // namespace locksmith::test
