// SPDX-License-Identifier: MIT
// The etcd strategy's reading of the gateway's JSON replies and watch messages, through the
// whole store (make_etcd_store: status, authentication, lease grant, the enqueuing transaction,
// the queue, watches, keep-alive, refresh, status, release) against a scripted server on
// 127.0.0.1. The HTTP framing is the target's, so that the input is what etcd would say: an
// exchange (fuzz_support.hpp) whose replies are the JSON bodies of successive requests, each
// after a "%<HTTP status>" line (200 when empty or for the first); a watch request gets its body
// as one chunk of a stream. Properties:
//  - the store throws nothing but locksmith's errors (no JSON type_error, out_of_range...),
//    whatever the replies' shape;
//  - no message gives away the etcd password.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/strategies/etcd.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::fuzz::check;
using std::chrono::milliseconds;

namespace {

constexpr const char* password = "pw-Zq9-secret";

// Answers each HTTP request on any connection with the script's next reply; closes every
// connection once the script is used up, and when the next input begins.
class scripted_server {
  public:
    scripted_server() {
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listener_, 64) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
            ::pipe2(wake_, O_CLOEXEC) != 0)
            fuzz::fail("scripted server", std::strerror(errno));
        port_ = ntohs(a.sin_port);
        std::thread([this] { run(); }).detach();  // lives as long as the fuzzer
    }

    int port() const { return port_; }

    // Starts a conversation: drops the last one's connections, then serves `script`.
    void serve(std::vector<fuzz::exchange::step> script) {
        std::unique_lock lock(mutex_);
        script_ = std::move(script);
        next_ = 0;
        reset_ = true;
        const char c = 0;
        (void)!::write(wake_[1], &c, 1);
        done_.wait(lock, [&] { return !reset_; });
    }

  private:
    struct connection {
        int fd;
        std::string in;
    };

    void run() {
        std::vector<connection> connections;
        for (;;) {
            std::vector<pollfd> fds{{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
            for (const auto& c : connections) fds.push_back({c.fd, POLLIN, 0});
            if (::poll(fds.data(), fds.size(), -1) <= 0) continue;
            if (fds[1].revents != 0) {
                char c;
                (void)!::read(wake_[0], &c, 1);
                for (const auto& k : connections) ::close(k.fd);
                connections.clear();
                std::lock_guard lock(mutex_);
                reset_ = false;
                done_.notify_all();
                continue;
            }
            for (std::size_t i = connections.size(); i-- > 0;)
                if (fds[i + 2].revents != 0 && !serve_one(connections[i])) {
                    ::close(connections[i].fd);
                    connections.erase(connections.begin() + long(i));
                }
            if (fds[0].revents != 0) {
                const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
                if (fd >= 0) connections.push_back({fd, {}});
            }
        }
    }

    // Reads from `c` and answers every request it completed; false when it is to be closed.
    bool serve_one(connection& c) {
        char buffer[8192];
        const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (n <= 0) return false;
        c.in.append(buffer, std::size_t(n));
        for (;;) {
            const auto head_end = c.in.find("\r\n\r\n");
            if (head_end == std::string::npos) return true;
            std::size_t length = 0;
            if (const auto at = c.in.find("Content-Length: "); at < head_end)
                length = std::strtoul(c.in.c_str() + at + 16, nullptr, 10);
            if (c.in.size() < head_end + 4 + length) return true;
            const bool watch = c.in.starts_with("POST /v3/watch ");
            c.in.erase(0, head_end + 4 + length);
            fuzz::exchange::step step;
            {
                std::lock_guard lock(mutex_);
                if (next_ == script_.size()) return false;
                step = script_[next_++];
            }
            const int status = step.request.empty() ? 200 : std::atoi(step.request.c_str());
            std::string reply = "HTTP/1.1 " + std::to_string(status) + " Fuzz\r\n";
            if (watch && status == 200) {
                char size[32];
                std::snprintf(size, sizeof size, "%zx", step.reply.size() + 1);
                reply += "Transfer-Encoding: chunked\r\n\r\n" + std::string(size) + "\r\n" +
                         step.reply + "\n\r\n";
            } else {
                reply += "Content-Length: " + std::to_string(step.reply.size()) + "\r\n\r\n" +
                         step.reply;
            }
            if (::send(c.fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size()))
                return false;
        }
    }

    int listener_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};
    std::mutex mutex_;
    std::condition_variable done_;
    std::vector<fuzz::exchange::step> script_;
    std::size_t next_ = 0;
    bool reset_ = false;
};

// Runs one operation; a locksmith error is an answer, as long as it keeps the password.
template <class Operation>
void attempt(Operation operation) {
    try {
        operation();
    } catch (const error& e) {
        check(std::strstr(e.what(), password) == nullptr, "a message shows the etcd password",
              e.what());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static scripted_server server;
    auto script = fuzz::exchange::parse(fuzz::as_text(data, size));
    server.serve(std::move(script.steps));

    etcd_options o;
    o.endpoints = {"http://127.0.0.1:" + std::to_string(server.port())};
    o.dial_timeout = milliseconds(200);
    o.request_timeout = milliseconds(50);
    o.user = "fuzz";
    o.password = password;
    std::shared_ptr<store> s;
    attempt([&] { s = make_etcd_store(o); });
    if (!s) return 0;
    key holder("resource"), waiter("resource");
    const auto soon = [] { return std::chrono::steady_clock::now() + milliseconds(20); };
    attempt([&] { s->try_acquire(holder, lock_mode::exclusive, milliseconds(5000)); });
    attempt([&] { s->holds(holder); });
    attempt([&] { s->refresh(holder, milliseconds(5000)); });
    attempt([&] { s->refresh(holder, milliseconds(9000)); });
    attempt([&] { s->status("resource"); });
    attempt([&] { s->wait_acquire(waiter, lock_mode::exclusive, milliseconds(5000), soon()); });
    attempt([&] { s->fencing_token(waiter); });
    attempt([&] { s->release(holder); });
    attempt([&] { s->release(waiter); });
    return 0;
}
