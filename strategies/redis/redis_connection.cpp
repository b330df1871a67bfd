// SPDX-License-Identifier: MIT
#include "redis_connection.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>

namespace locksmith::strategies::redis_detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::size_t max_reply_bytes = std::size_t(16) << 20;

// Whether retrying may help after a failure with `native_code` (fail's codes and the server's
// error prefixes).
error_kind kind_of(const std::string& native_code) {
    if (native_code.rfind("errno ", 0) == 0) return errno_kind(std::atoi(native_code.c_str() + 6));
    // Lost or slow connections, and a server that is starting, failing over or out of memory
    // for the moment: the next attempt (on a new connection) may succeed.
    // (MOVED and ASK reach here only where nothing follows them, a subscription: the next
    // attempt goes where the slot map, read again, says.)
    for (const char* code :
         {"timeout", "eof", "null", "oom", "fork", "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN",
          "CLUSTERDOWN", "READONLY", "NOREPLICAS", "OOM", "MOVED", "ASK"})
        if (native_code == code) return error_kind::transient;
    // WRONGPASS, NOAUTH, NOPERM, ERR (a script or argument error), WRONGTYPE, protocol, tls: a
    // wrong setting, or not a Redis server of the version needed.
    return error_kind::permanent;
}

// A connected Unix socket (non-blocking, close-on-exec), or -1 with errno: ETIMEDOUT when
// `until` passed first.
int connect_unix(const std::string& path, steady_clock::time_point until) {
    sockaddr_un address{};
    if (path.size() >= sizeof address.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    for (;;) {
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0)
            return fd;
        const int err = errno;
        // EAGAIN: the server's backlog is full. A Unix socket's connect cannot be polled for;
        // it is tried again, briefly, until the deadline.
        if (err != EAGAIN && err != EINTR) {
            ::close(fd);
            errno = err;
            return -1;
        }
        const auto left = std::chrono::ceil<milliseconds>(until - steady_clock::now());
        if (left <= milliseconds(0)) {
            ::close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        ::poll(nullptr, 0, int(std::min<long long>(left.count(), 10)));
    }
}

// TCP keep-alive as hiredis's redisEnableKeepAlive set it: an idle connection to a server that
// vanished (host down, network cut) is found dead after about 15 + 3 × 5 s, so that a waiter
// subscribed to a channel is not left listening to nobody until its deadline.
void keep_alive(int fd) noexcept {
    const int on = 1, idle = 15, interval = 5, count = 3;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

std::string first_word(const std::vector<std::string_view>& args) {
    return std::string(args.empty() ? std::string_view() : args.front());
}

}  // namespace

std::string reply_error_code(const redisReply& reply) {
    std::string text(reply.str ? reply.str : "", reply.str ? reply.len : 0);
    return text.substr(0, text.find(' '));
}

std::shared_ptr<const tls::tls_context> make_tls_context(const redis_options& options) {
    if (!options.endpoint.tls) {
        if (!(options.ca_file + options.cert_file + options.key_file + options.server_name).empty())
            throw invalid_argument_error(
                "redis: TLS options (ca_file, cert_file, key_file, server_name) need a rediss:// "
                "url, not " +
                options.endpoint.redacted() +
                "; without TLS they would be ignored and everything sent in clear text");
        return nullptr;
    }
    return std::make_shared<const tls::tls_context>(
        tls::tls_options{options.ca_file, options.cert_file, options.key_file, options.server_name},
        "redis");
}

connection::connection(const redis_options& options, redis_endpoint endpoint,
                       std::shared_ptr<const tls::tls_context> tls)
    : options_(options),
      endpoint_(std::move(endpoint)),
      reader_(redisReaderCreate()),
      generation_(fork_generation()) {
    if (!reader_) fail("connecting", "oom", "cannot allocate a reply reader");
    open(std::move(tls));
    set_up();
}

void connection::open(std::shared_ptr<const tls::tls_context> tls) {
    const auto& e = endpoint_;
    const std::string what = "connecting";
    // Within a refresh, no longer than its lease lasts (caller_deadline.hpp).
    const auto until = bounded_by_refresh_deadline(steady_clock::now() + options_.connect_timeout);
    if (e.tls && !tls) throw invalid_argument_error("redis: a rediss:// url needs TLS settings");
    const std::string in_time =
        " (within connect_timeout_s, " + std::to_string(options_.connect_timeout.count()) + " ms)";
    int fd = -1, err = 0;
    if (!e.socket_path.empty()) {
        fd = connect_unix(e.socket_path, until);
        err = errno;
    } else {
        const auto c = connect_tcp(e.host, e.port, until);
        if (!c.resolve_failure.empty()) fail_as(what, "resolve", c.resolve_failure, c.resolve_kind);
        if (c.fd < 0 && c.connect_errno == 0)
            fail_as(what, "resolve", "'" + e.host + "' has no address", error_kind::permanent);
        fd = c.fd;
        err = c.connect_errno;
        if (fd >= 0) keep_alive(fd);
    }
    if (fd < 0) {
        if (err == ETIMEDOUT)
            fail_as(what, "timeout", "no connection" + in_time, error_kind::transient);
        fail_as(what, "errno " + std::to_string(err), std::strerror(err), errno_kind(err));
    }
    // The handshake shares the connect deadline: a server that accepts and then says nothing
    // costs connect_timeout, as one that never accepts does.
    try {
        stream_ =
            std::make_unique<tls::tls_stream>(fd, e.tls ? std::move(tls) : nullptr, e.host, until);
    } catch (const tls::stream_error& x) {
        fail_as(what, x.code(), x.code() == "timeout" ? x.what() + in_time : std::string(x.what()),
                x.kind());
    }
}

void connection::set_up() {
    const auto& e = endpoint_;
    if (!e.password.empty()) {
        std::vector<std::string_view> auth{"AUTH"};
        if (!e.user.empty()) auth.push_back(e.user);
        auth.push_back(e.password);
        auto reply = command(auth);
        check(reply.get(), "authenticating" + (e.user.empty() ? "" : " as user '" + e.user + "'"));
    }
    if (e.db != 0) {
        auto db = std::to_string(e.db);
        auto reply = command({"SELECT", db});
        check(reply.get(), "selecting database " + db);
    }
}

connection::~connection() = default;

void connection::fail(const std::string& what, const std::string& native_code,
                      const std::string& detail) const {
    fail_as(what, native_code, detail, kind_of(native_code));
}

void connection::fail_as(const std::string& what, const std::string& native_code,
                         const std::string& detail, error_kind kind) const {
    throw backend_error("redis", native_code,
                        "redis: " + what + " at " + endpoint_.redacted() +
                            " failed: " + scrub_secret(detail, endpoint_.password),
                        kind);
}

void connection::fail_stream(const std::string& what, const tls::stream_error& e) {
    broken_ = true;
    fail_as(what, e.code(), e.what(), e.kind());
}

void connection::check(const redisReply* reply, const std::string& what) {
    if (reply == nullptr) fail(what, "null", "no reply");
    if (reply->type == REDIS_REPLY_ERROR) {
        auto code = reply_error_code(*reply);
        // A replica: behind Sentinel, a demoted master. Drop it, so that the next connection
        // asks the Sentinels again.
        if (code == "READONLY") broken_ = true;
        fail(what, code, std::string(reply->str, reply->len));
    }
}

reply_ptr connection::command(const std::vector<std::string_view>& args) {
    // One deadline for the whole command, not per read: a server trickling its reply byte by
    // byte must not stretch it.
    // Within a refresh, no longer than its lease lasts (caller_deadline.hpp).
    const auto until = bounded_by_refresh_deadline(steady_clock::now() + options_.command_timeout);
    write(args, until);
    auto reply = read_until(until, args.empty() ? std::string_view() : args.front());
    if (!reply) timed_out("command " + first_word(args));
    // More than the one reply asked for: the stream is out of step with our commands, and the
    // next command on it would take the surplus for its own reply.
    if (reader_->pos < reader_->len) broken_ = true;
    return reply;
}

void connection::not_ours(const std::string& what) {
    // A connection of the parent that stale() did not get to see (the pool checks one only
    // after it sat idle a moment): never a byte written or read on it here.
    broken_ = true;
    fail(what, "fork", "the connection belongs to the parent process (a retry opens one of ours)");
}

void connection::timed_out(const std::string& what) {
    // Part of the reply may have arrived: the stream is out of step, never use it again.
    broken_ = true;
    const auto lease_end = refresh_deadline();
    if (lease_end && *lease_end <= steady_clock::now())
        fail(what, "timeout", "no complete reply before the end of the lease being renewed");
    fail(what, "timeout",
         "no complete reply within " + std::to_string(options_.command_timeout.count()) +
             " ms (command_timeout_s)");
}

void connection::write(const std::vector<std::string_view>& args, time_point until) {
    if (generation_ != fork_generation()) not_ours("sending " + first_word(args));
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (auto a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    char* encoded = nullptr;
    const int size = redisFormatCommandArgv(&encoded, int(argv.size()), argv.data(), lens.data());
    if (size < 0) fail("sending " + first_word(args), "oom", "cannot encode the command");
    const std::unique_ptr<char, void (*)(char*)> owned(encoded, redisFreeCommand);
    bool sent = false;
    try {
        sent = stream_->write_all(std::string_view(encoded, std::size_t(size)), until);
    } catch (const tls::stream_error& e) {
        fail_stream("sending " + first_word(args), e);
    }
    if (!sent) timed_out("sending " + first_word(args));
}

void connection::send(const std::vector<std::string_view>& args) {
    write(args, bounded_by_refresh_deadline(steady_clock::now() + options_.command_timeout));
}

reply_ptr connection::read(std::chrono::milliseconds timeout) {
    if (timeout < timeout.zero()) timeout = options_.command_timeout;
    return read_until(bounded_by_refresh_deadline(steady_clock::now() + timeout), {});
}

reply_ptr connection::read_until(time_point until, std::string_view command) {
    // What failed, for messages only: made when something fails, not for every reply.
    auto what = [command] {
        return command.empty() ? std::string("reading a reply") : "command " + std::string(command);
    };
    if (generation_ != fork_generation()) not_ours(what());
    for (;;) {
        void* reply = nullptr;
        if (redisReaderGetReply(reader_.get(), &reply) != REDIS_OK) {
            broken_ = true;
            fail(what(), "protocol", std::string("not a Redis reply: ") + reader_->errstr);
        }
        if (reply) {
            mid_reply_ = false;
            return reply_ptr(static_cast<redisReply*>(reply));
        }
        // A whole TLS record (at most 16 KiB of data) at a time: OpenSSL then never keeps
        // decrypted bytes that poll(2) cannot see.
        char buffer[16384];
        std::optional<std::size_t> n;
        try {
            n = stream_->read_some(buffer, sizeof buffer, until);
        } catch (const tls::stream_error& e) {
            fail_stream(what(), e);
        }
        if (!n) return nullptr;
        if (*n == 0) {
            broken_ = true;
            fail(what(), "eof", "the server closed the connection");
        }
        // A lock server's replies are small (the largest, a status of many readers, some KiB);
        // a server that sends more than this for one reply is broken or hostile, and hiredis
        // would buffer all it sends (an announced 1 GiB bulk, or an array of millions of
        // elements at some 50 bytes of memory for each 4 received) until the deadline.
        in_reply_ = mid_reply_ ? in_reply_ + *n : *n;
        mid_reply_ = true;
        if (in_reply_ > max_reply_bytes) {
            broken_ = true;
            fail(what(), "protocol",
                 "a reply longer than " + std::to_string(max_reply_bytes >> 20) +
                     " MiB: not a Redis server speaking to a lock client");
        }
        if (redisReaderFeed(reader_.get(), buffer, *n) != REDIS_OK) {
            broken_ = true;
            fail(what(), "oom", "cannot buffer the reply");
        }
    }
}

bool connection::stale() const noexcept {
    if (broken_ || !stream_ || mid_reply_ || reader_->pos < reader_->len) return true;
    // In a fork()ed child the socket, and a TLS session's keys and sequence numbers, are the
    // parent's: used from two processes, their commands would interleave and the TLS records
    // fail. The child opens its own; dropping this copy writes nothing (tls_stream).
    if (generation_ != fork_generation()) return true;
    // An idle connection never has anything to read: data means EOF, an error, or a message
    // nobody waits for. Decrypted bytes that OpenSSL holds count too (idle_has_input).
    return stream_->idle_has_input();
}

connection_pool::settings pool_settings(const redis_options& options,
                                        std::shared_ptr<const tls::tls_context> tls) {
    connection_pool::settings s;
    s.size = options.pool_size;
    s.max_wait = options.connect_timeout + options.command_timeout;
    s.open = [&options, tls] {
        return std::make_unique<connection>(options, options.endpoint, tls);
    };
    s.reusable = [](const connection& c) { return !c.broken(); };
    // A connection the server closed while it sat idle (a restart): open another.
    s.still_open = [](const connection& c) { return !c.stale(); };
    s.exhausted = [&options] {
        throw backend_error("redis", "pool",
                            "redis: all " + std::to_string(options.pool_size) + " connections to " +
                                options.endpoint.redacted() + " stayed busy; raise pool_size",
                            error_kind::transient);
    };
    return s;
}

}  // namespace locksmith::strategies::redis_detail
