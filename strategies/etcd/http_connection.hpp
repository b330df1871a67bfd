// SPDX-License-Identifier: MIT
// Private to the etcd strategy: one blocking HTTP/1.1 connection to one etcd member's v3 JSON
// gateway, and the one place where transport failures become backend_errors.
//
//   endpoint         a parsed "http://host:port" or "https://host:port"
//   http_response    a status code and the whole body
//   http_connection  connect (getaddrinfo, non-blocking connect bounded by the dial timeout,
//                    TCP_NODELAY, close-on-exec; for https the TLS handshake, bounded by the
//                    same deadline: strategies/common/tls), then one POST at a time on a keep-alive
//                    connection (Content-Length request; Content-Length or chunked reply), or
//                    one streamed POST (watch) whose chunked reply is read message by message
//
// No HTTP library: the gateway needs a tenth of HTTP/1.1, and libcurl would make the statically
// linked locksmith command load shared libraries (see strategies/etcd/CMakeLists.txt).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/errors.hpp>

#include "../common/tls/tls_stream.hpp"

namespace locksmith::strategies::etcd_detail {

using deadline = std::chrono::steady_clock::time_point;

struct endpoint {
    std::string host;
    int port = 2379;
    bool tls = false;  // https://
    std::string text;  // "http[s]://host:port", as given (already free of userinfo)
};

// Parses "http://host[:port]" or "https://host[:port]" (IPv6 as [addr]). Throws
// invalid_argument_error.
endpoint parse_endpoint(std::string_view url);

// The most a reply, or one message of a watch stream, may be: far above any that locksmith asks
// for (a few keys, mostly keys only), and little to parse when a broken or hostile server sends
// it. A longer one fails with a protocol error.
inline constexpr std::size_t max_reply_bytes = std::size_t(1) << 20;

struct http_response {
    int status = 0;
    std::string body;
};

class http_connection {
  public:
    // Throws backend_error ("etcd: connecting at https://host:port failed: ..."). An https
    // endpoint needs `tls` (the store's certificates; null for http).
    http_connection(const endpoint& to, std::chrono::milliseconds dial_timeout,
                    std::shared_ptr<const tls::tls_context> tls = nullptr);
    // Takes over `fd`, a connected stream socket (a test's or the fuzz target's socketpair; the
    // destructor closes it), named `address` ("http://host:port") in messages and the Host
    // header. The reply parsing is the same code, without a server to reach.
    http_connection(int fd, std::string address);
    ~http_connection();
    http_connection(const http_connection&) = delete;
    http_connection& operator=(const http_connection&) = delete;

    // POSTs `body` (JSON) to `path` and reads the whole reply, all before `until`; `headers` are
    // extra header lines, each ending in \r\n. `what` names the step in error messages.
    // Throws backend_error for transport failures, timeouts, and replies that are not HTTP or
    // longer than max_reply_bytes; the connection is broken() afterwards.
    http_response post(std::string_view path, std::string_view body, std::string_view headers,
                       deadline until, std::string_view what);

    // POSTs a streaming request (watch) and reads the reply's status and headers; then
    // next_message() returns the stream's messages. The connection is never reused after.
    // Returns the HTTP status; for a status other than 200 the body is in `error_body`.
    int open_stream(std::string_view path, std::string_view body, std::string_view headers,
                    deadline until, std::string_view what, std::string& error_body);
    // The next newline-delimited message of the stream, or nullopt when `until` passed before
    // any of it came. Throws backend_error when the stream ends or fails, when a message is
    // longer than max_reply_bytes, and when `until` passes in the middle of one.
    std::optional<std::string> next_message(deadline until, std::string_view what);

    const std::string& address() const noexcept { return address_; }
    // True after any failure, or when the server asked to close: the connection must go.
    // (And for a stream: it is never a unary request's connection again.)
    bool broken() const noexcept { return broken_; }
    // True after a failure (a stream that failed must go too).
    bool failed() const noexcept { return failed_; }
    // True when an idle connection has something to read (a hang-up, a restart) or is broken.
    bool stale() const noexcept;
    // The fork generation it was opened in: a child must not share its parent's socket.
    std::uint64_t generation() const noexcept { return generation_; }

  private:
    void connect(const endpoint& to, std::chrono::milliseconds dial_timeout,
                 std::shared_ptr<const tls::tls_context> tls);
    // Bytes from the stream (see tls::tls_stream::read_some); its errors become backend_errors.
    std::optional<std::size_t> read_some(char* data, std::size_t size, deadline until,
                                         std::string_view what);
    void send_request(std::string_view path, std::string_view body, std::string_view headers,
                      deadline until, std::string_view what);
    // Reads the status line and headers; returns the status.
    int read_head(deadline until, std::string_view what);
    void read_body(deadline until, std::string_view what, std::string& out);
    // Appends the next chunk's data to `out`; false at the last (empty) chunk.
    bool read_chunk(deadline until, std::string_view what, std::string& out);
    std::string_view read_line(deadline until, std::string_view what);
    // Reads more bytes; false when `until` passed first (only when `soft`, else it throws).
    bool fill(deadline until, std::string_view what, bool soft = false);
    [[noreturn]] void fail(std::string_view what, const std::string& native_code,
                           const std::string& detail, error_kind kind);
    [[noreturn]] void fail_errno(std::string_view what, int err);

    std::string address_;
    std::string host_;  // the Host header: address_ without the scheme
    std::unique_ptr<tls::tls_stream> stream_;
    bool broken_ = false;
    bool failed_ = false;
    std::uint64_t generation_ = 0;
    // The current reply's framing.
    bool chunked_ = false;
    std::optional<std::size_t> content_length_;
    bool close_after_ = false;
    std::string out_;
    std::vector<char> in_;  // received bytes; [head_, tail_) not yet parsed
    std::size_t head_ = 0;
    std::size_t tail_ = 0;
    std::string messages_;  // decoded stream data not yet returned as a message
};

}  // namespace locksmith::strategies::etcd_detail
