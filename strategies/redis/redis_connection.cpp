#include "redis_connection.hpp"

#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <locksmith/errors.hpp>

namespace locksmith::strategies::redis_detail {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(d.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
    return tv;
}

// Error texts from the server can echo what the client sent; make sure the password is not
// among them.
std::string scrub(std::string text, const std::string& password) {
    if (password.empty()) return text;
    for (auto pos = text.find(password); pos != std::string::npos; pos = text.find(password, pos))
        text.replace(pos, password.size(), "***");
    return text;
}

// Whether retrying may help after a failure with `native_code` (fail's codes and the server's
// error prefixes).
error_kind kind_of(const std::string& native_code) {
    if (native_code.rfind("errno ", 0) == 0) return errno_kind(std::atoi(native_code.c_str() + 6));
    // Lost or slow connections, and a server that is starting, failing over or out of memory
    // for the moment: the next attempt (on a new connection) may succeed.
    for (const char* code : {"timeout", "eof", "null", "oom", "LOADING", "BUSY", "TRYAGAIN",
                             "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS", "OOM"})
        if (native_code == code) return error_kind::transient;
    // hiredis's other errors (e.g. a host name that does not resolve) may be either.
    if (native_code == "other") return error_kind::unknown;
    // WRONGPASS, NOAUTH, NOPERM, ERR (a script or argument error), WRONGTYPE, protocol: a wrong
    // setting, or not a Redis server of the version needed.
    return error_kind::permanent;
}

}  // namespace

std::string reply_error_code(const redisReply& reply) {
    std::string text(reply.str ? reply.str : "", reply.str ? reply.len : 0);
    return text.substr(0, text.find(' '));
}

connection::connection(const redis_options& options, redis_endpoint endpoint)
    : options_(options), endpoint_(std::move(endpoint)) {
    const auto& e = endpoint_;
    const timeval tv = to_timeval(options.connect_timeout);
    context_ = e.socket_path.empty() ? redisConnectWithTimeout(e.host.c_str(), e.port, tv)
                                     : redisConnectUnixWithTimeout(e.socket_path.c_str(), tv);
    if (context_ == nullptr) fail("connecting", "oom", "cannot allocate a hiredis context");
    try {
        set_up();
    } catch (...) {
        redisFree(context_);
        throw;
    }
}

void connection::set_up() {
    const auto& e = endpoint_;
    if (context_->err) fail_io("connecting");
    if (redisSetTimeout(context_, to_timeval(options_.command_timeout)) != REDIS_OK)
        fail_io("setting the command timeout");
    if (e.socket_path.empty()) redisEnableKeepAlive(context_);
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

connection::~connection() {
    if (context_) redisFree(context_);
}

void connection::fail(const std::string& what, const std::string& native_code,
                      const std::string& detail) const {
    throw backend_error("redis", native_code,
                        "redis: " + what + " at " + endpoint_.redacted() +
                            " failed: " + scrub(detail, endpoint_.password),
                        kind_of(native_code));
}

void connection::fail_io(const std::string& what) {
    broken_ = true;
    const int err = context_->err;
    const int saved_errno = errno;
    std::string detail = context_->errstr;
    std::string code;
    if (err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
        code = "timeout";
        detail = "no reply within " + std::to_string(options_.command_timeout.count()) + " ms";
    } else if (err == REDIS_ERR_IO) {
        code = "errno " + std::to_string(saved_errno);
    } else if (err == REDIS_ERR_EOF) {
        code = "eof";
    } else if (err == REDIS_ERR_PROTOCOL) {
        code = "protocol";
    } else {
        code = "other";
    }
    fail(what, code, detail);
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
    // One deadline for the whole command: the socket timeouts bound each read and write only,
    // so a server trickling its reply byte by byte would never trip them.
    const auto until = std::chrono::steady_clock::now() + options_.command_timeout;
    const std::string what = "command " + std::string(args.empty() ? "" : args.front());
    append(args);
    for (int done = 0; !done;) {
        if (!wait_until(POLLOUT, until)) timed_out(what);
        if (redisBufferWrite(context_, &done) != REDIS_OK) fail_io(what);
    }
    auto reply = read_until(until);
    if (!reply) timed_out(what);
    return reply;
}

void connection::timed_out(const std::string& what) {
    // Part of the reply may have arrived: the stream is out of step, never use it again.
    broken_ = true;
    fail(what, "timeout",
         "no complete reply within " + std::to_string(options_.command_timeout.count()) +
             " ms (command_timeout_s)");
}

bool connection::wait_until(short events, std::chrono::steady_clock::time_point until) {
    for (;;) {
        auto left =
            std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        if (left <= left.zero()) return false;
        pollfd p{context_->fd, events, 0};
        int n = ::poll(&p, 1, int(std::min<long long>(left.count(), 1'000'000'000)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            broken_ = true;
            fail("waiting for the server", "errno " + std::to_string(errno), std::strerror(errno));
        }
        if (n > 0) return true;
    }
}

// Formats a command into the context's output buffer; redisGetReply or send() writes it.
void connection::append(const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (auto a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(context_, int(argv.size()), argv.data(), lens.data()) != REDIS_OK)
        fail_io("sending " + std::string(args.empty() ? "" : args.front()));
}

void connection::send(const std::vector<std::string_view>& args) {
    append(args);
    int done = 0;
    while (!done)
        if (redisBufferWrite(context_, &done) != REDIS_OK)
            fail_io("sending " + std::string(args.empty() ? "" : args.front()));
}

reply_ptr connection::read(std::chrono::milliseconds timeout) {
    if (timeout < timeout.zero()) timeout = options_.command_timeout;
    return read_until(std::chrono::steady_clock::now() + timeout);
}

reply_ptr connection::read_until(std::chrono::steady_clock::time_point until) {
    for (;;) {
        void* reply = nullptr;
        if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) fail_io("reading a reply");
        if (reply) return reply_ptr(static_cast<redisReply*>(reply));
        if (!wait_until(POLLIN, until)) return nullptr;
        if (redisBufferRead(context_) != REDIS_OK) fail_io("reading a reply");
    }
}

bool connection::stale() const noexcept {
    if (broken_ || context_ == nullptr || context_->err) return true;
    pollfd p{context_->fd, POLLIN, 0};
    // An idle connection never has anything to read: data means EOF or an error.
    return ::poll(&p, 1, 0) != 0;
}

connection_pool::settings pool_settings(const redis_options& options) {
    connection_pool::settings s;
    s.size = options.pool_size;
    s.max_wait = options.connect_timeout + options.command_timeout;
    s.open = [&options] { return std::make_unique<connection>(options); };
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
