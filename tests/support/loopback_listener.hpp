// SPDX-License-Identifier: MIT
// What every test server here starts from (hostile_server, tcp_fault_proxy): a listening TCP
// socket on 127.0.0.1, on a port of the kernel's choice, and the pipe whose write end stops the
// server's thread.
#pragma once

namespace locksmith::test {

struct loopback_listener {
    int fd = -1;
    int port = 0;
    int wake[2] = {-1, -1};  // [0] for the server's poll, [1] for its destructor
};

// Throws std::system_error naming `who` when it cannot listen.
loopback_listener listen_on_loopback(const char* who, int backlog);

}  // namespace locksmith::test
