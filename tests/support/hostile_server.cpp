#include "support/hostile_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

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
    bool asked = false;  // the client sent something
    std::string out;     // what is still to send
};

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

hostile_server::hostile_server(hostile_behaviour behaviour) : behaviour_(behaviour) {
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
                if (behaviour_ == hostile_behaviour::hang_up)
                    ::close(fd);
                else
                    conns.push_back({fd});
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
                const ssize_t got = ::read(c.fd, buf, sizeof buf);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) gone = true;
                if (got > 0) {
                    c.asked = true;
                    c.out += answer(behaviour_, seed);
                }
            }
            if (!gone && behaviour_ == hostile_behaviour::trickle && c.asked && c.out.empty())
                c.out = "a";  // one byte a tick: a line that never ends
            if (!gone && !c.out.empty()) {
                const ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
                if (sent > 0) c.out.erase(0, std::size_t(sent));
                if (sent < 0 && errno != EAGAIN && errno != EINTR) gone = true;
            }
            if (gone)
                ::close(c.fd);
            else
                kept.push_back(std::move(c));
        }
        conns = std::move(kept);
    }
    for (const auto& c : conns) ::close(c.fd);
}

}  // namespace locksmith::test
