// SPDX-License-Identifier: MIT
// A server that misbehaves on purpose, for the hostile-surroundings suite (tests/hostile): it
// listens on 127.0.0.1 (a port of the kernel's choice) in a process of its own and treats every
// connection it accepts alike, whatever protocol the client speaks; optionally after a TLS
// handshake as a server whose certificate the client trusts. A process, not a thread:
// the tests fork their clients (support/child_process.hpp), which a thread beside them would
// make unsafe (a lock it held at the fork, e.g. the allocator's, stays held in the child).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <vector>

namespace locksmith::test {

enum class hostile_behaviour {
    silent,       // accepts, reads, never answers
    trickle,      // answers one byte every 100 ms of a line that never ends
    nonsense,     // answers each request with 64 KiB of pseudo-random bytes
    deep_json,    // answers each request with HTTP 200 and JSON nested 200,000 levels deep
    huge_length,  // answers each request with HTTP 200 announcing a 1 TiB body, then 1 byte
    hang_up,      // accepts and closes at once
};

// The behaviour's name, for test names and messages ("silent", "deep_json", ...).
const char* to_string(hostile_behaviour b);
// Every behaviour, in declaration order.
const std::vector<hostile_behaviour>& every_hostile_behaviour();

class hostile_server {
  public:
    // Throws std::system_error when it cannot listen. With `tls_dir` (scripts/services.sh's
    // certificates: server.pem and server.key, for 127.0.0.1 and localhost), each connection
    // first completes a TLS handshake, and the behaviour comes after it (hang_up: right after
    // it): what a client sees of a server that passed its certificate checks.
    explicit hostile_server(hostile_behaviour behaviour, std::string tls_dir = std::string());
    // Stops the server's process, which closes every connection.
    ~hostile_server();
    hostile_server(const hostile_server&) = delete;
    hostile_server& operator=(const hostile_server&) = delete;

    // "127.0.0.1:<port>": what the client connects to instead of a real server.
    std::string address() const;
    int port() const noexcept { return port_; }
    // Connections accepted so far.
    int connections() const noexcept { return connections_->load(); }

  private:
    void run();

    hostile_behaviour behaviour_;
    std::string tls_dir_;
    int listener_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};                   // the destructor's stop signal to run()
    std::atomic<int>* connections_ = nullptr;  // in memory shared with the server's process
    pid_t pid_ = -1;
};

}  // namespace locksmith::test
