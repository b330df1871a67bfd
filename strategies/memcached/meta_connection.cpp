// SPDX-License-Identifier: MIT
#include "meta_connection.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>

namespace locksmith::strategies::memcached_detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The meta protocol as this client uses it was settled in memcached 1.6.10 (positional data
// length in ms, HD instead of OK); 1.6.0-1.6.9 answer `mn` but speak an older dialect.
constexpr int needed_version[3] = {1, 6, 10};
constexpr const char* needs_text = "locksmith needs memcached >= 1.6.10 (the meta protocol)";

// A reply line is a code and a few flags; anything longer is not memcached talking.
constexpr std::size_t max_line = 8192;
// Far above any lock value (a 32-byte token); guards against a garbage length.
constexpr std::size_t max_value = 128u << 20;

void append_number(std::string& out, unsigned long long n) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    out.append(digits, end);
}

void append_number(std::string& out, long long n) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    out.append(digits, end);
}

template <class Integer>
bool parse_whole(std::string_view text, Integer& out) {
    if (text.empty()) return false;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
}

// A server's line for an error message: printable, short, quoted.
std::string quoted(std::string_view line) {
    std::string out = "'";
    for (unsigned char c : line.substr(0, 80)) {
        if (c >= 0x20 && c < 0x7f) {
            out += char(c);
        } else {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out + (line.size() > 80 ? "...'" : "'");
}

// Splits off the next space-separated word of `rest`.
std::string_view next_word(std::string_view& rest) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    auto space = rest.find(' ');
    auto word = rest.substr(0, space);
    rest.remove_prefix(space == std::string_view::npos ? rest.size() : space);
    return word;
}

bool older_than_needed(std::string_view version) {
    int parts[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
        auto [end, ec] = std::from_chars(version.data(), version.data() + version.size(), parts[i]);
        if (ec != std::errc()) return false;  // not a number: trust `mn`, which did answer
        version.remove_prefix(std::size_t(end - version.data()));
        if (i < 2) {
            if (version.empty() || version.front() != '.') return false;
            version.remove_prefix(1);
        }
    }
    return std::lexicographical_compare(parts, parts + 3, needed_version, needed_version + 3);
}

// For servers whose stats do not say which process they are: never equal to a hashed value
// (top bit clear) nor to another connection's.
std::uint64_t connection_unique_incarnation() {
    static std::atomic<std::uint64_t> counter{0};
    return (std::uint64_t(1) << 63) | ++counter;
}

}  // namespace

meta_connection::meta_connection(std::string host, int port, milliseconds connect_timeout,
                                 milliseconds command_timeout)
    : host_(std::move(host)),
      port_(port),
      address_((host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
               std::to_string(port)),
      command_timeout_(command_timeout),
      in_(4096) {
    try {
        connect(connect_timeout);
        handshake();
    } catch (...) {
        close_socket();
        throw;
    }
}

meta_connection::meta_connection(int fd, std::string address, milliseconds command_timeout)
    : port_(0),
      address_(std::move(address)),
      command_timeout_(command_timeout),
      fd_(fd),
      in_(4096) {
    try {
        handshake();
    } catch (...) {
        close_socket();
        throw;
    }
}

meta_connection::~meta_connection() {
    close_socket();
}

void meta_connection::close_socket() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void meta_connection::connect(milliseconds connect_timeout) {
    const std::string_view what = "connecting";
    const deadline until = bounded_by_refresh_deadline(steady_clock::now() + connect_timeout);
    const auto c = connect_tcp(host_, port_, until);
    if (!c.resolve_failure.empty()) fail(what, "resolve", c.resolve_failure, c.resolve_kind);
    if (c.fd >= 0) {
        fd_ = c.fd;
        return;
    }
    if (c.connect_errno == ETIMEDOUT)
        fail(what, "timeout",
             "no connection within " + std::to_string(connect_timeout.count()) + " ms");
    if (c.connect_errno == 0) fail(what, "resolve", "'" + host_ + "' has no address");
    fail_errno(what, c.connect_errno);
}

void meta_connection::handshake() {
    const std::string_view what = "connecting";
    const deadline until = bounded_by_refresh_deadline(steady_clock::now() + command_timeout_);
    // Three requests in one round trip: does it speak meta, which process and version is it,
    // are CAS ids on (with -C every item has CAS 0, and `md <key> C0` would delete any item).
    out_ = "mn\r\nstats\r\nstats settings\r\n";
    send_all(until, what);
    std::string_view line = read_line(until, what);
    if (line != "MN") {
        if (line == "ERROR")
            fail(what, "no_meta",
                 std::string("the server does not know the meta protocol (it answered 'mn' "
                             "with ERROR): ") +
                     needs_text);
        fail(what, "no_meta",
             "the server answered 'mn' with " + quoted(line) + ", not MN: " + needs_text);
    }
    long long pid = -1, time = -1, uptime = -1;
    std::string version, cas_enabled;
    for (int section = 0; section < 2; ++section) {
        for (;;) {
            line = read_line(until, what);
            if (line == "END") break;
            std::string_view rest = line;
            if (next_word(rest) != "STAT")
                fail(what, "protocol",
                     "unexpected line " + quoted(line) + " in the answer to 'stats'");
            const auto name = next_word(rest);
            const auto value = next_word(rest);
            if (section == 0) {
                if (name == "pid") parse_whole(value, pid);
                if (name == "time") parse_whole(value, time);
                if (name == "uptime") parse_whole(value, uptime);
                if (name == "version") version = value;
            } else if (name == "cas_enabled") {
                cas_enabled = value;
            }
        }
    }
    if (!version.empty() && older_than_needed(version))
        fail(what, "version", "the server runs memcached " + version + ": " + needs_text);
    if (cas_enabled == "no")
        fail(what, "cas_disabled",
             "the server runs with CAS disabled (-C): locks need CAS ids to release only their "
             "own items");
    // `time - uptime` is the server's start time, constant for the life of the process.
    incarnation_ =
        pid >= 0 && time >= 0 && uptime >= 0
            ? stable_name_hash(std::to_string(pid) + "@" + std::to_string(time - uptime)).low >> 1
            : connection_unique_incarnation();
}

meta_reply meta_connection::set(std::string_view key, std::string_view data, long long exptime,
                                bool add_only, std::uint64_t compare_cas, std::string_view what) {
    out_.clear();
    out_ += "ms ";
    out_ += key;
    out_ += ' ';
    append_number(out_, static_cast<unsigned long long>(data.size()));
    out_ += " T";
    append_number(out_, exptime);
    if (add_only) out_ += " ME";
    if (compare_cas != 0) {
        out_ += " C";
        append_number(out_, static_cast<unsigned long long>(compare_cas));
    }
    out_ += " c";
    const auto opaque = name_the_reply();
    out_ += "\r\n";
    out_ += data;
    out_ += "\r\n";
    return call(what, key, opaque,
                {meta_status::stored, meta_status::not_stored, meta_status::exists,
                 meta_status::not_found});
}

meta_reply meta_connection::get(std::string_view key, std::string_view flags,
                                std::string_view what) {
    out_.clear();
    out_ += "mg ";
    out_ += key;
    if (!flags.empty()) {
        out_ += ' ';
        out_ += flags;
    }
    const auto opaque = name_the_reply();
    out_ += "\r\n";
    return call(what, key, opaque, {meta_status::value, meta_status::stored, meta_status::miss});
}

meta_reply meta_connection::remove(std::string_view key, std::uint64_t compare_cas,
                                   std::string_view what) {
    out_.clear();
    out_ += "md ";
    out_ += key;
    if (compare_cas != 0) {
        out_ += " C";
        append_number(out_, static_cast<unsigned long long>(compare_cas));
    }
    const auto opaque = name_the_reply();
    out_ += "\r\n";
    return call(what, key, opaque,
                {meta_status::stored, meta_status::exists, meta_status::not_found});
}

std::uint64_t meta_connection::name_the_reply() {
    out_ += " k O";
    append_number(out_, static_cast<unsigned long long>(++requests_));
    return requests_;
}

meta_reply meta_connection::call(std::string_view what, std::string_view key, std::uint64_t opaque,
                                 std::initializer_list<meta_status> expected) {
    if (broken_) fail(what, "broken", "the connection failed before");
    // Replies come only to requests: bytes waiting now would be read as the next reply.
    if (head_ != tail_) fail(what, "protocol", "the server sent data nobody asked for");
    // Within a refresh, no longer than its lease lasts (caller_deadline.hpp).
    const deadline until = bounded_by_refresh_deadline(steady_clock::now() + command_timeout_);
    send_all(until, what);
    const std::string_view line = read_line(until, what);

    // Error replies are whole lines of text, not codes with flags.
    if (line == "ERROR") fail(what, "ERROR", "the server does not know the command (ERROR)");
    if (line.starts_with("CLIENT_ERROR")) fail(what, "CLIENT_ERROR", std::string(line));
    if (line.starts_with("SERVER_ERROR")) fail(what, "SERVER_ERROR", std::string(line));

    meta_reply reply;
    std::string_view rest = line;
    const auto code = next_word(rest);
    static constexpr std::pair<std::string_view, meta_status> codes[] = {
        {"HD", meta_status::stored}, {"VA", meta_status::value},
        {"EN", meta_status::miss},   {"NS", meta_status::not_stored},
        {"EX", meta_status::exists}, {"NF", meta_status::not_found},
        {"MN", meta_status::noop}};
    const auto known = std::find_if(std::begin(codes), std::end(codes),
                                    [&](const auto& c) { return c.first == code; });
    if (known == std::end(codes) ||
        std::find(expected.begin(), expected.end(), known->second) == expected.end())
        fail(what, "protocol", "unexpected reply " + quoted(line));
    reply.status = known->second;

    std::size_t length = 0;
    if (reply.status == meta_status::value && !parse_whole(next_word(rest), length))
        fail(what, "protocol", "no value length in " + quoted(line));
    if (length > max_value)
        fail(what, "protocol", "value of " + std::to_string(length) + " bytes in " + quoted(line));
    std::optional<std::string_view> reply_key;
    std::optional<std::uint64_t> reply_opaque;
    for (auto flag = next_word(rest); !flag.empty(); flag = next_word(rest)) {
        bool ok = true;
        if (flag.front() == 'k') {
            reply_key = flag.substr(1);
        } else if (flag.front() == 'O') {
            std::uint64_t n = 0;
            ok = parse_whole(flag.substr(1), n);
            reply_opaque = n;
        } else if (flag.front() == 'c') {
            ok = parse_whole(flag.substr(1), reply.cas);
        } else if (flag.front() == 't') {
            std::int64_t ttl = 0;
            ok = parse_whole(flag.substr(1), ttl);
            reply.ttl = ttl;
        }
        if (!ok) fail(what, "protocol", "malformed flag in " + quoted(line));
    }
    // Taken for this request's answer only when it names this request: a reply meant for another
    // key or an earlier request (a server or a proxy out of step, or a hostile one) could say
    // "stored" to an add that never happened.
    if (reply_key != key)
        fail(what, "protocol",
             "a reply for another key: " + quoted(line) + " does not name " + quoted(key) +
                 " (memcached >= 1.6.10 returns the k flag)");
    if (reply_opaque != opaque)
        fail(what, "protocol",
             "a reply to another request: " + quoted(line) + " does not carry O" +
                 std::to_string(opaque));
    // `line` points into the input buffer, which reading the data block may move.
    if (reply.status == meta_status::value) read_exact(length, until, what, reply.value);
    if (head_ == tail_ && in_.size() > (64u << 10)) {
        in_.assign(4096, 0);  // a huge value passed: do not keep its buffer in the pool
        head_ = tail_ = 0;
    }
    return reply;
}

void meta_connection::send_all(deadline until, std::string_view what) {
    // Sending first and polling only when the socket buffer is full saves a system call per
    // command: a lock command is far smaller than the buffer.
    std::size_t sent = 0;
    while (sent < out_.size()) {
        const ssize_t n = ::send(fd_, out_.data() + sent, out_.size() - sent, MSG_NOSIGNAL);
        if (n >= 0) {
            sent += std::size_t(n);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            wait_for(POLLOUT, until, what);
        } else if (errno != EINTR) {
            fail_errno(what, errno);
        }
    }
}

std::string_view meta_connection::read_line(deadline until, std::string_view what) {
    std::size_t scanned = 0;  // bytes after head_ known to hold no '\n'
    for (;;) {
        const char* begin = in_.data() + head_;
        const auto* newline =
            static_cast<const char*>(std::memchr(begin + scanned, '\n', tail_ - head_ - scanned));
        if (newline != nullptr) {
            const std::size_t length = std::size_t(newline - begin);
            if (length == 0 || begin[length - 1] != '\r')
                fail(
                    what, "protocol",
                    "a reply line not ended by \\r\\n: " + quoted(std::string_view(begin, length)));
            head_ += length + 1;
            return std::string_view(begin, length - 1);
        }
        scanned = tail_ - head_;
        if (scanned > max_line)
            fail(what, "protocol",
                 "a reply line longer than " + std::to_string(max_line) +
                     " bytes: " + quoted(std::string_view(begin, scanned)));
        fill(until, what);
    }
}

void meta_connection::read_exact(std::size_t length, deadline until, std::string_view what,
                                 std::string& out) {
    while (tail_ - head_ < length + 2) fill(until, what);
    const char* begin = in_.data() + head_;
    if (begin[length] != '\r' || begin[length + 1] != '\n')
        fail(what, "protocol", "a data block not ended by \\r\\n");
    out.assign(begin, length);
    head_ += length + 2;
}

void meta_connection::fill(deadline until, std::string_view what) {
    if (head_ == tail_) head_ = tail_ = 0;
    if (tail_ == in_.size()) {
        if (head_ > 0) {
            std::memmove(in_.data(), in_.data() + head_, tail_ - head_);
            tail_ -= head_;
            head_ = 0;
        }
        if (tail_ == in_.size()) in_.resize(in_.size() * 2);
    }
    // Wait first: right after a request the reply is not there yet, and a read would only say so.
    wait_for(POLLIN, until, what);
    for (;;) {
        const ssize_t n = ::recv(fd_, in_.data() + tail_, in_.size() - tail_, 0);
        if (n > 0) {
            tail_ += std::size_t(n);
            return;
        }
        if (n == 0)
            fail(what, "eof",
                 head_ == tail_ ? "the server closed the connection"
                                : "the server closed the connection in the middle of a reply");
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno != EINTR) fail_errno(what, errno);
    }
}

void meta_connection::wait_for(short events, deadline until, std::string_view what) {
    for (;;) {
        const auto left = std::chrono::ceil<milliseconds>(until - steady_clock::now());
        if (left <= milliseconds(0))
            fail(what, "timeout",
                 std::string(events == POLLIN ? "no reply" : "could not send") + " within " +
                     std::to_string(command_timeout_.count()) + " ms");
        pollfd p{fd_, events, 0};
        const int n = ::poll(&p, 1, int(std::min<long long>(left.count(), INT_MAX)));
        if (n > 0) return;  // ready, or hung up / failed: the read or write says which
        if (n < 0 && errno != EINTR) fail_errno(what, errno);
    }
}

bool meta_connection::stale() const noexcept {
    if (broken_ || fd_ < 0 || head_ != tail_) return true;
    pollfd p{fd_, POLLIN, 0};
    // An idle connection never has anything to read: data means EOF, an error or garbage.
    return ::poll(&p, 1, 0) != 0;
}

void meta_connection::fail(std::string_view what, const std::string& native_code,
                           const std::string& detail) {
    // A lost or slow connection, or a server short of memory for the moment, may do better on
    // the next attempt; every other code is a server of the wrong kind, version or settings
    // (no_meta, version, cas_disabled, protocol) or a request it refuses (ERROR, CLIENT_ERROR).
    const bool transient = native_code == "timeout" || native_code == "eof" ||
                           native_code == "broken" || native_code == "SERVER_ERROR";
    fail(what, native_code, detail, transient ? error_kind::transient : error_kind::permanent);
}

void meta_connection::fail(std::string_view what, const std::string& native_code,
                           const std::string& detail, error_kind kind) {
    broken_ = true;
    throw backend_error(
        "memcached", native_code,
        "memcached: " + std::string(what) + " at " + address_ + " failed: " + detail, kind);
}

void meta_connection::fail_errno(std::string_view what, int err) {
    fail(what, "errno " + std::to_string(err),
         std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")", errno_kind(err));
}

}  // namespace locksmith::strategies::memcached_detail
