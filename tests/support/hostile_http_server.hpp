// SPDX-License-Identifier: MIT
// An HTTP/1.1 server for tests of what a client does when its server is broken or hostile. It
// runs in a process of its own (a thread per connection there), listens on 127.0.0.1 (a port of the
// kernel's choice), reads each request (head and Content-Length body) and does what the test's
// function says for it: answer with any bytes at all (valid, misframed, nested deep, huge),
// trickle them one at a time, or say nothing and keep the connection open.
//
//   http_request        what the client sent
//   http_answer         what the server does about it
//   hostile_http_server the server
//   json_reply, chunked_head, chunk, deeply_nested_json   answers' pieces
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace locksmith::test {

struct http_request {
    std::string method;
    std::string path;
    std::string body;
};

struct http_answer {
    // Sent as they are (status line, headers, body, framed by the test): `bytes` at once, then
    // `trickle` one byte per `per_byte`.
    std::string bytes;
    std::string trickle;
    std::chrono::milliseconds per_byte{1000};
    // After the bytes: false reads the connection's next request; true sends nothing more and
    // reads nothing more, keeping the connection open until the server is destroyed (a server
    // that never answers, or a stream that stalls).
    bool then_silent = false;
};

class hostile_http_server {
  public:
    using answer_function = std::function<http_answer(const http_request&)>;

    // Throws std::system_error when it cannot listen.
    explicit hostile_http_server(answer_function answer);
    // Stops every connection (a trickle or a silence at once) and the server's process.
    ~hostile_http_server();
    hostile_http_server(const hostile_http_server&) = delete;
    hostile_http_server& operator=(const hostile_http_server&) = delete;

    // "http://127.0.0.1:<port>".
    std::string url() const;

  private:
    void accept_loop();
    void serve(int fd);
    // Waits up to `timeout` for the stop signal; true when it came.
    bool stopping(std::chrono::milliseconds timeout) const;

    answer_function answer_;
    int listener_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};  // the destructor's stop signal, seen by every thread
    std::mutex mutex_;
    std::vector<std::thread> connections_;
    std::vector<int> fds_;
    pid_t pid_ = -1;  // the server's process
};

// "HTTP/1.1 200 OK" with a JSON body of `body` (Content-Length).
std::string json_reply(std::string_view body);
// The head of a 200 reply with Transfer-Encoding: chunked; chunk() frames each piece after it.
std::string chunked_head();
std::string chunk(std::string_view data);
// `depth` nested arrays: "[[[...]]]".
std::string deeply_nested_json(std::size_t depth);

}  // namespace locksmith::test
