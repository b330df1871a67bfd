// SPDX-License-Identifier: MIT
// The one test server that misbehaves on purpose, for every test of what a client does when its
// server is broken or hostile: the hostile-surroundings suite (tests/hostile), etcd's broken
// endpoints, fake Redis masters, Sentinels and cluster nodes. It listens on 127.0.0.1 (a port of
// the kernel's choice), optionally behind a TLS handshake with a certificate the client trusts,
// cuts what each connection sends into requests (its framing: raw, HTTP or RESP) and does what
// the test's script says for each: answer any bytes at all (valid, misframed, nested deep,
// huge), trickle them, fall silent with the connection open, or hang up.
//
//   hostile_behaviour   ready-made scripts, whatever protocol the client speaks
//   hostile_answer      what the server does about one request
//   hostile_server      the server; ::setup says how it behaves and where it runs
//   http_script, resp_script   scripts over HTTP/1.1 and Redis's RESP framing
//   fake_redis          a RESP server in a thread of the test
//   hostile_memcached, memcached_script   a memcached that passes the connection check, then
//                       misbehaves on the meta protocol's lock commands
//   json_reply, chunked_head, chunk, deeply_nested_json, fake_sha   answers' pieces
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
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

struct hostile_answer {
    // Sent as they are: `bytes` at once, then `trickle` one byte per `per_byte` (again and again
    // when `endless`). A connection's answers go out in order: the next waits for this trickle.
    std::string bytes;
    std::string trickle;
    std::chrono::milliseconds per_byte{1000};
    bool endless = false;
    // After the bytes: `then_silent` reads nothing more and sends nothing more, keeping the
    // connection open until the server is destroyed (a server that never answers, a stream that
    // stalls); `hang_up` closes the connection (no TLS close_notify: a cut, as a crash leaves it).
    bool then_silent = false;
    bool hang_up = false;
};

class hostile_server {
  public:
    // Takes one whole request off the front of `in`, what the client sent so far; nullopt until
    // one is complete.
    using framing = std::function<std::optional<std::string>(std::string& in)>;
    using script = std::function<hostile_answer(const std::string& request)>;

    struct setup {
        script answer;
        framing frame;  // empty: whatever arrived is a request
        // What happens on each connection before any request (hang_up: closed at once).
        std::optional<hostile_answer> on_accept;
        // scripts/services.sh's certificates (server.pem and server.key, for 127.0.0.1 and
        // localhost): each connection first completes a TLS handshake, and the script comes
        // after it. Empty: plain TCP.
        std::string tls_dir;
        // Where the server runs. Its own process (the default): tests that fork their clients
        // (support/child_process.hpp) must have no thread beside the fork, which could leave a
        // lock held in the child (the allocator's). A thread of the test: for scripts that share
        // the test's state (counters, what a fake node should say next).
        bool in_a_thread = false;
    };

    // Throws std::system_error when it cannot listen.
    explicit hostile_server(setup how);
    // `behaviour`, optionally after a TLS handshake (see setup::tls_dir), in its own process.
    explicit hostile_server(hostile_behaviour behaviour, std::string tls_dir = std::string());
    // Stops every connection (a trickle or a silence at once) and the server.
    ~hostile_server();
    hostile_server(const hostile_server&) = delete;
    hostile_server& operator=(const hostile_server&) = delete;

    // "127.0.0.1:<port>": what the client connects to instead of a real server.
    std::string address() const;
    // "<scheme>://<userinfo>127.0.0.1:<port>", e.g. url("redis", ":pw@").
    std::string url(std::string_view scheme, std::string_view userinfo = {}) const;
    int port() const noexcept { return port_; }
    // Connections accepted so far.
    int connections() const noexcept;
    // Trickles sent to their end so far.
    int trickles_ended() const noexcept;

  private:
    struct counters;
    void run();

    setup how_;
    int listener_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};     // the destructor's stop signal to run()
    counters* count_ = nullptr;  // in memory shared with the server's process
    pid_t pid_ = -1;             // the server's process, or
    std::thread thread_;         // its thread
};

// HTTP/1.1: each request's head and Content-Length body.
struct http_request {
    std::string method;
    std::string path;
    std::string body;
};
using http_answer = hostile_answer;
hostile_server::setup http_script(std::function<http_answer(const http_request&)> answer);

// Redis's RESP: each command (an array of bulk strings) is answered with what `reply` returns
// for it, sent at once, or, when it returns nullopt, with `trickled` one byte per 200 ms. In a
// thread of the test (the fakes' replies read the test's state).
using resp_reply = std::function<std::optional<std::string>(const std::vector<std::string>&)>;
hostile_server::setup resp_script(resp_reply reply, std::string trickled = std::string());
// A fake Redis server (a master, a Sentinel, a cluster node): resp_script's server.
class fake_redis : public hostile_server {
  public:
    fake_redis(resp_reply reply, std::string trickled)
        : hostile_server(resp_script(std::move(reply), std::move(trickled))) {}
    // "redis://<userinfo>127.0.0.1:<port>".
    std::string url(std::string_view userinfo = {}) const {
        return hostile_server::url("redis", userinfo);
    }
    // True once a whole trickled reply was sent.
    bool trickle_ended() const { return trickles_ended() > 0; }
};
// memcached's meta protocol: each request is a command line (with its data line, for `ms`);
// `answer` gets the command line. The connection check the memcached strategy makes on every
// new connection (`mn`, `stats`, `stats settings`) is answered as memcached 1.6.18 does.
hostile_server::setup memcached_script(std::function<hostile_answer(const std::string&)> answer);
// " k<key> O<opaque>": the flags with which memcached names its reply to `command` (a meta
// command line), the opaque only when the command has one.
std::string meta_names(const std::string& command);

// What a memcached that passed the connection check does to every lock command after it.
enum class hostile_memcached {
    silent,           // never answers
    trickle,          // answers one byte every 100 ms of a reply line that never ends
    nonsense,         // answers with replies the command does not have, or malformed ones
    huge_value,       // says the item is taken; read, the item has a 100 MB value that stops
                      // after 4 MiB (and an add of the semaphore's limit: 2^40 bytes)
    another_key,      // says "stored" (a grant) and "not found", naming another key
    another_request,  // the same, naming the key but another request (an earlier opaque)
    hang_up_holding,  // grants the first add, then closes every connection at its next command
};
const char* to_string(hostile_memcached b);
// Every behaviour that grants nothing (all but hang_up_holding), in declaration order.
const std::vector<hostile_memcached>& every_hostile_memcached();
// The server, in its own process.
hostile_server::setup memcached_setup(hostile_memcached b);

// A 40-character SHA, the answer a fake gives to SCRIPT LOAD.
inline const std::string fake_sha = "$40\r\n" + std::string(40, 'a') + "\r\n";

// "HTTP/1.1 200 OK" with a JSON body of `body` (Content-Length).
std::string json_reply(std::string_view body);
// The head of a 200 reply with Transfer-Encoding: chunked; chunk() frames each piece after it.
std::string chunked_head();
std::string chunk(std::string_view data);
// `depth` nested arrays: "[[[...]]]".
std::string deeply_nested_json(std::size_t depth);

}  // namespace locksmith::test
