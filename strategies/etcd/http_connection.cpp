// SPDX-License-Identifier: MIT
#include "http_connection.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies::etcd_detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Status lines and headers are short; anything longer is not an etcd gateway talking.
constexpr std::size_t max_line = 16384;

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

std::string max_reply_text() {
    return std::to_string(max_reply_bytes >> 20) + " MiB";
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

endpoint parse_endpoint(std::string_view url) {
    const auto shown = redact_url(url);
    endpoint e;
    e.tls = url.starts_with("https://");
    if (!e.tls && !url.starts_with("http://"))
        throw invalid_argument_error(
            "etcd endpoint '" + shown +
            "' is not an http:// or https:// URL (expected https://host:port)");
    std::string_view rest = url.substr(e.tls ? 8 : 7);
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    if (rest.find_first_of("@/?#") != std::string_view::npos)
        throw invalid_argument_error(
            "etcd endpoint '" + shown +
            "' must be http[s]://host:port only (no user, path or query; give user and "
            "password as options)");
    std::string_view port;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string_view::npos)
            throw invalid_argument_error("etcd endpoint '" + shown + "': unterminated [");
        e.host = std::string(rest.substr(1, close - 1));
        if (close + 1 < rest.size()) {
            if (rest[close + 1] != ':')
                throw invalid_argument_error("etcd endpoint '" + shown + "': text after ]");
            port = rest.substr(close + 2);
        }
    } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
        e.host = std::string(rest.substr(0, colon));
        port = rest.substr(colon + 1);
        if (port.empty()) throw invalid_argument_error("etcd endpoint '" + shown + "': empty port");
        // http://::1 would be host ":" on port 1.
        if (e.host.find(':') != std::string::npos)
            throw invalid_argument_error("etcd endpoint '" + shown +
                                         "': an IPv6 address goes in brackets (http://[::1]:2379)");
    } else {
        e.host = std::string(rest);
    }
    if (e.host.empty()) throw invalid_argument_error("etcd endpoint '" + shown + "': no host");
    // No host has them; [[::1] would be host "[::1", shown as a URL that does not parse.
    if (e.host.find_first_of("[]") != std::string::npos)
        throw invalid_argument_error("etcd endpoint '" + shown + "': '[' or ']' inside the host");
    if (!port.empty()) {
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
        if (ec != std::errc() || end != port.data() + port.size() || e.port < 1 || e.port > 65535)
            throw invalid_argument_error("etcd endpoint '" + shown +
                                         "': the port is not a number in [1, 65535]");
    }
    e.text = std::string(e.tls ? "https://" : "http://") +
             (e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) + ":" +
             std::to_string(e.port);
    return e;
}

namespace {

std::string host_of(const std::string& address) {
    const auto scheme = address.find("://");
    return scheme == std::string::npos ? address : address.substr(scheme + 3);
}

}  // namespace

http_connection::http_connection(const endpoint& to, milliseconds dial_timeout,
                                 std::shared_ptr<const tls::tls_context> tls)
    : address_(to.text), host_(host_of(to.text)), generation_(fork_generation()), in_(8192) {
    if (to.tls && !tls)
        throw invalid_argument_error("etcd endpoint '" + to.text + "': https needs TLS settings");
    connect(to, dial_timeout, to.tls ? std::move(tls) : nullptr);
}

http_connection::http_connection(int fd, std::string address)
    : address_(std::move(address)),
      host_(host_of(address_)),
      stream_(std::make_unique<tls::tls_stream>(fd, nullptr, std::string(), deadline())),
      generation_(fork_generation()),
      in_(8192) {}

http_connection::~http_connection() = default;

void http_connection::connect(const endpoint& to, milliseconds dial_timeout,
                              std::shared_ptr<const tls::tls_context> tls) {
    const std::string_view what = "connecting";
    const deadline until = bounded_by_refresh_deadline(steady_clock::now() + dial_timeout);
    const auto c = connect_tcp(to.host, to.port, until);
    if (!c.resolve_failure.empty()) fail(what, "resolve", c.resolve_failure, c.resolve_kind);
    if (c.fd >= 0) {
        // The handshake shares the dial deadline: a server that accepts and then says nothing
        // costs dial_timeout, as one that never accepts does.
        try {
            stream_ = std::make_unique<tls::tls_stream>(c.fd, std::move(tls), to.host, until);
        } catch (const tls::stream_error& e) {
            fail(what, e.code(),
                 e.code() == "timeout" ? std::string(e.what()) + " (within dial_timeout_s, " +
                                             std::to_string(dial_timeout.count()) + " ms)"
                                       : std::string(e.what()),
                 e.kind());
        }
        return;
    }
    if (c.connect_errno == ETIMEDOUT)
        fail(what, "timeout",
             "no connection within " + std::to_string(dial_timeout.count()) + " ms",
             error_kind::transient);
    if (c.connect_errno == 0)
        fail(what, "resolve", "'" + to.host + "' has no address", error_kind::permanent);
    fail_errno(what, c.connect_errno);
}

http_response http_connection::post(std::string_view path, std::string_view body,
                                    std::string_view headers, deadline until,
                                    std::string_view what) {
    if (broken_) fail(what, "broken", "the connection failed before", error_kind::transient);
    send_request(path, body, headers, until, what);
    http_response r;
    r.status = read_head(until, what);
    read_body(until, what, r.body);
    if (close_after_) broken_ = true;  // the server closes it: not reusable
    return r;
}

int http_connection::open_stream(std::string_view path, std::string_view body,
                                 std::string_view headers, deadline until, std::string_view what,
                                 std::string& error_body) {
    send_request(path, body, headers, until, what);
    broken_ = true;  // a stream is never handed back to a pool
    const int status = read_head(until, what);
    if (status != 200) read_body(until, what, error_body);
    if (status == 200 && !chunked_)
        fail(what, "protocol", "the stream's reply is not chunked", error_kind::permanent);
    return status;
}

std::optional<std::string> http_connection::next_message(deadline until, std::string_view what) {
    for (;;) {
        if (const auto newline = messages_.find('\n'); newline != std::string::npos) {
            std::string message = messages_.substr(0, newline);
            messages_.erase(0, newline + 1);
            if (!trim(message).empty()) return message;
            continue;
        }
        // Waits softly for the first bytes only, so that `until` passing means "nothing yet". A
        // chunk's header and data come together in practice; one still incomplete at `until`
        // (a server that trickles) fails the stream, so no wait outlasts its deadline.
        if (head_ == tail_ && !fill(until, what, true)) return std::nullopt;
        if (!read_chunk(until, what, messages_))
            fail(what, "eof", "the server ended the stream", error_kind::transient);
    }
}

void http_connection::send_request(std::string_view path, std::string_view body,
                                   std::string_view headers, deadline until,
                                   std::string_view what) {
    // Replies come only to requests: bytes waiting now would be read as the next reply.
    if (head_ != tail_)
        fail(what, "protocol", "the server sent data nobody asked for", error_kind::permanent);
    out_.clear();
    out_ += "POST ";
    out_ += path;
    out_ += " HTTP/1.1\r\nHost: ";
    out_ += host_;
    out_ += "\r\nContent-Type: application/json\r\nContent-Length: ";
    out_ += std::to_string(body.size());
    out_ += "\r\n";
    out_ += headers;
    out_ += "\r\n";
    out_ += body;
    bool sent = false;
    try {
        sent = stream_->write_all(out_, until);
    } catch (const tls::stream_error& e) {
        fail(what, e.code(), e.what(), e.kind());
    }
    if (!sent) fail(what, "timeout", "could not send the request in time", error_kind::transient);
}

int http_connection::read_head(deadline until, std::string_view what) {
    const std::string status_line(read_line(until, what));
    int status = 0;
    if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.") ||
        std::from_chars(status_line.data() + 9, status_line.data() + 12, status).ec != std::errc())
        fail(what, "protocol",
             "not an HTTP reply (is this an etcd client URL?): '" + status_line.substr(0, 60) + "'",
             error_kind::permanent);
    chunked_ = false;
    content_length_.reset();
    close_after_ = status_line.starts_with("HTTP/1.0");
    for (;;) {
        const std::string_view line = read_line(until, what);
        if (line.empty()) break;
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        const auto name = line.substr(0, colon);
        const auto value = trim(line.substr(colon + 1));
        if (iequals(name, "Content-Length")) {
            std::size_t n = 0;
            auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (ec != std::errc() || end != value.data() + value.size())
                fail(what, "protocol", "bad Content-Length", error_kind::permanent);
            if (n > max_reply_bytes)
                fail(what, "protocol",
                     "a reply of " + std::to_string(n) + " bytes (more than " + max_reply_text() +
                         ")",
                     error_kind::permanent);
            content_length_ = n;
        } else if (iequals(name, "Transfer-Encoding")) {
            chunked_ = value.find("chunked") != std::string_view::npos;
        } else if (iequals(name, "Connection")) {
            if (iequals(value, "close")) close_after_ = true;
        }
    }
    return status;
}

void http_connection::read_body(deadline until, std::string_view what, std::string& out) {
    out.clear();
    if (chunked_) {
        while (read_chunk(until, what, out)) {
        }
        return;
    }
    if (!content_length_) {
        // Neither length nor chunks: the body ends with the connection.
        close_after_ = true;
        for (;;) {
            out.append(in_.data() + head_, tail_ - head_);
            head_ = tail_ = 0;
            if (out.size() > max_reply_bytes)
                fail(what, "protocol", "a reply longer than " + max_reply_text(),
                     error_kind::permanent);
            const auto n = read_some(in_.data(), in_.size(), until, what);
            if (!n) fail(what, "timeout", "the reply did not end in time", error_kind::transient);
            if (*n == 0) return;
            tail_ = *n;
        }
    }
    while (tail_ - head_ < *content_length_) fill(until, what);
    out.assign(in_.data() + head_, *content_length_);
    head_ += *content_length_;
}

bool http_connection::read_chunk(deadline until, std::string_view what, std::string& out) {
    const std::string_view size_line = read_line(until, what);
    std::size_t size = 0;
    const auto digits = size_line.substr(0, size_line.find(';'));
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
    if (ec != std::errc()) fail(what, "protocol", "bad chunk size", error_kind::permanent);
    if (size > max_reply_bytes - std::min(out.size(), max_reply_bytes))
        fail(what, "protocol", "a reply or watch message longer than " + max_reply_text(),
             error_kind::permanent);
    if (size == 0) {
        while (!read_line(until, what).empty()) {
        }  // trailers, then the empty line
        return false;
    }
    while (tail_ - head_ < size + 2) fill(until, what);
    out.append(in_.data() + head_, size);
    if (in_[head_ + size] != '\r' || in_[head_ + size + 1] != '\n')
        fail(what, "protocol", "a chunk not ended by \\r\\n", error_kind::permanent);
    head_ += size + 2;
    return true;
}

std::string_view http_connection::read_line(deadline until, std::string_view what) {
    std::size_t scanned = 0;
    for (;;) {
        const char* begin = in_.data() + head_;
        const auto* newline =
            static_cast<const char*>(std::memchr(begin + scanned, '\n', tail_ - head_ - scanned));
        if (newline != nullptr) {
            std::size_t length = std::size_t(newline - begin);
            head_ += length + 1;
            if (length > 0 && begin[length - 1] == '\r') --length;
            return std::string_view(begin, length);
        }
        scanned = tail_ - head_;
        if (scanned > max_line)
            fail(what, "protocol", "a header line longer than 16 KiB", error_kind::permanent);
        fill(until, what);
    }
}

bool http_connection::fill(deadline until, std::string_view what, bool soft) {
    if (head_ == tail_) head_ = tail_ = 0;
    if (tail_ == in_.size()) {
        if (head_ > 0) {
            std::memmove(in_.data(), in_.data() + head_, tail_ - head_);
            tail_ -= head_;
            head_ = 0;
        }
        if (tail_ == in_.size()) in_.resize(in_.size() * 2);
    }
    const auto got = read_some(in_.data() + tail_, in_.size() - tail_, until, what);
    if (!got) {
        if (soft) return false;
        fail(what, "timeout", "no reply in time (request_timeout_s)", error_kind::transient);
    }
    if (*got == 0)
        fail(what, "eof", "the server closed the connection (stopped or restarting?)",
             error_kind::transient);
    tail_ += *got;
    return true;
}

std::optional<std::size_t> http_connection::read_some(char* data, std::size_t size, deadline until,
                                                      std::string_view what) {
    try {
        return stream_->read_some(data, size, until);
    } catch (const tls::stream_error& e) {
        fail(what, e.code(), e.what(), e.kind());
    }
}

bool http_connection::stale() const noexcept {
    if (broken_ || !stream_ || head_ != tail_) return true;
    // An idle connection never has anything to read: data means EOF, an error or garbage.
    return stream_->idle_has_input();
}

void http_connection::fail(std::string_view what, const std::string& native_code,
                           const std::string& detail, error_kind kind) {
    broken_ = failed_ = true;
    throw backend_error("etcd", native_code,
                        "etcd: " + std::string(what) + " at " + address_ + " failed: " + detail,
                        kind);
}

void http_connection::fail_errno(std::string_view what, int err) {
    fail(what, "errno " + std::to_string(err),
         std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")", errno_kind(err));
}

}  // namespace locksmith::strategies::etcd_detail
