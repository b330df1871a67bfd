// SPDX-License-Identifier: MIT
// A TCP proxy for fault tests, run in a thread of the test: it listens on 127.0.0.1 (a port of
// the kernel's choice), forwards every connection it accepts to a real server, and on command
// cuts one connection at the worst moment for a request/response protocol: after the client's
// request reached the server and the server answered, before the answer reaches the client (a
// request applied whose reply was lost). Other connections, and new ones, go on as before.
// It can also cut the client off from the server (the faults run's partition and stall
// nemeses): set_mode(drop) blackholes every connection, set_mode(stall) holds every byte, and
// cut_all() closes every connection at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace locksmith::test {

class tcp_fault_proxy {
  public:
    // Whether the bytes a client sent on one connection since the cut was armed end with a
    // whole request to cut after (the caller knows the protocol's framing).
    using request_filter = std::function<bool(std::string_view sent)>;

    // Requires: target_host:target_port accepts connections (each accepted client gets one).
    // Throws std::system_error when the proxy cannot listen.
    tcp_fault_proxy(const std::string& target_host, int target_port);
    // Stops the thread and closes every connection.
    ~tcp_fault_proxy();
    tcp_fault_proxy(const tcp_fault_proxy&) = delete;
    tcp_fault_proxy& operator=(const tcp_fault_proxy&) = delete;

    // "127.0.0.1:<port>": what the client connects to instead of the server.
    std::string address() const;
    int port() const noexcept { return port_; }

    // Arms one cut. Client bytes still go to the server at once; when the bytes a connection
    // sent since now satisfy `matches`, the proxy waits for the server's reply (up to 10 s;
    // every connection waits meanwhile), drops it and closes both sides of that connection.
    // `matches` must see a whole request: bytes arrive in pieces under load.
    void cut_after_next_request(request_filter matches);
    // Waits up to `timeout` for the armed cut; true when it happened (or none was armed).
    bool wait_cut(std::chrono::milliseconds timeout);
    // Connections accepted so far: a client that reconnected after a cut counts twice.
    int connections() const;

    enum class mode {
        pass,   // forward both ways (the start)
        drop,   // a partition: every byte either way is read and thrown away, and connections
                // made meanwhile reach nothing; back in pass, the connections that lost bytes
                // are closed (their streams have a hole), as a client would find them after
                // its timeouts
        stall,  // a network that holds every byte (nothing is read either way, connections
                // made meanwhile wait) and delivers it, in order, back in pass: requests the
                // client gave up on reach the server late
    };
    void set_mode(mode m);
    // Closes every connection now (the server and the client each see theirs end); new ones are
    // accepted as the mode says.
    void cut_all();

  private:
    struct link {
        int client = -1;           // -1: hung up during a partition
        int server = -1;           // -1: accepted in drop or stall, not yet connected (or, as
                                   // the client, hung up during a partition)
        std::string sent;          // the client's bytes since the cut was armed
        std::uint64_t arming = 0;  // the arming `sent` belongs to
        bool damaged = false;      // bytes were dropped: closed when the partition ends
    };
    void run();
    void accept_one(mode now);
    void resume();
    static void close_link(link& l);
    static void drop_from(int& fd, link& l);
    // Forwards what is readable on one side of `l`; false when `l` is to be closed.
    bool forward_from_client(link& l);
    static bool forward_from_server(link& l);

    int listener_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};  // the destructor's stop signal to run()
    std::string target_host_;
    int target_port_;
    std::vector<link> links_;  // run()'s own

    mutable std::mutex mutex_;
    std::condition_variable cut_done_;
    mode mode_ = mode::pass;
    bool cut_all_ = false;  // until run() closed every connection
    bool armed_ = false;    // until the armed cut happened
    request_filter matches_;
    std::uint64_t arming_ = 0;  // counts cut_after_next_request() calls
    int connections_ = 0;
    std::thread thread_;
};

}  // namespace locksmith::test
