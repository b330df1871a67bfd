// SPDX-License-Identifier: MIT
#include "support/loopback_listener.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

namespace locksmith::test {

loopback_listener listen_on_loopback(const char* who, int backlog) {
    auto fail = [who](const char* what) {
        throw std::system_error(errno, std::generic_category(), std::string(who) + ": " + what);
    };
    loopback_listener l;
    l.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l.fd < 0) fail("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(l.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(l.fd, backlog) != 0 ||
        ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        const int e = errno;
        ::close(l.fd);
        errno = e;
        fail("listen on 127.0.0.1");
    }
    l.port = ntohs(a.sin_port);
    if (::pipe2(l.wake, O_CLOEXEC) != 0) {
        const int e = errno;
        ::close(l.fd);
        errno = e;
        fail("pipe2");
    }
    return l;
}

}  // namespace locksmith::test
