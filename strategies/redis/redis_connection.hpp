// Private to the redis strategy: hiredis connections, their pool, and the one place where
// hiredis errors become backend_errors.
//
//   reply_ptr        an owned redisReply
//   connection       one synchronous hiredis context: connect, AUTH, SELECT, binary-safe commands
//   connection_pool  up to pool_size idle connections, shared by threads; drops broken ones
#pragma once

#include <locksmith/author/connection_pool.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <hiredis/hiredis.h>

#include <locksmith/strategies/redis.hpp>

namespace locksmith::strategies::redis_detail {

struct reply_deleter {
    void operator()(redisReply* r) const noexcept {
        if (r) freeReplyObject(r);
    }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// The first word of an error reply ("WRONGPASS", "NOSCRIPT"), which Redis uses as its code.
std::string reply_error_code(const redisReply& reply);

class connection {
  public:
    // Connects to `endpoint` (options.endpoint, a master or a Sentinel that sentinel.hpp
    // found), authenticates and selects the database; timeouts come from `options`, which must
    // outlive the connection.
    // Throws backend_error naming the redacted endpoint; never the password.
    connection(const redis_options& options, redis_endpoint endpoint);
    explicit connection(const redis_options& options) : connection(options, options.endpoint) {}
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // Sends one command and reads its reply, all within the command timeout (not per read).
    // An error *reply* is returned, not thrown (callers decide: NOSCRIPT is expected). Throws
    // backend_error for I/O errors and timeouts ("timeout"), after which the connection is
    // broken() and never reused.
    reply_ptr command(const std::vector<std::string_view>& args);

    // Sends a command without reading its reply (used to SUBSCRIBE and UNSUBSCRIBE).
    void send(const std::vector<std::string_view>& args);

    // Reads the next reply, waiting at most `timeout` (negative: the command timeout).
    // Returns null when nothing arrived in time; the connection stays usable then.
    // Throws backend_error for I/O errors and a closed connection.
    reply_ptr read(std::chrono::milliseconds timeout);

    // True after an I/O error or a READONLY reply (a replica, e.g. a demoted master): the
    // connection must be thrown away.
    bool broken() const noexcept { return broken_; }
    // Marks the connection broken (e.g. it could not confirm a write: maybe a demoted master).
    void discard() noexcept { broken_ = true; }
    const redis_endpoint& endpoint() const noexcept { return endpoint_; }
    // Which master this is behind Sentinel (master_locator's generation; 0 otherwise).
    std::uint64_t generation() const noexcept { return generation_; }
    void set_generation(std::uint64_t g) noexcept { generation_ = g; }
    // True when an idle connection has data or a hang-up pending, i.e. the server closed it
    // (restart, idle timeout). Checked before reuse, so that a restart costs no failed command.
    bool stale() const noexcept;

    // Throws backend_error for `reply` when it is an error reply; `what` says what was tried.
    // READONLY (the server is a replica now) also marks the connection broken.
    void check(const redisReply* reply, const std::string& what);
    [[noreturn]] void fail(const std::string& what, const std::string& native_code,
                           const std::string& detail) const;

  private:
    void set_up();
    void append(const std::vector<std::string_view>& args);
    // The next reply, or null when `until` passed first.
    reply_ptr read_until(std::chrono::steady_clock::time_point until);
    // Polls for `events` until `until`; false when it passed. Throws backend_error.
    bool wait_until(short events, std::chrono::steady_clock::time_point until);
    [[noreturn]] void timed_out(const std::string& what);
    [[noreturn]] void fail_io(const std::string& what);
    redisContext* context_ = nullptr;
    const redis_options& options_;
    redis_endpoint endpoint_;
    bool broken_ = false;
    std::uint64_t generation_ = 0;
};

using connection_pool = locksmith::connection_pool<connection>;

// The store's pool: up to pool_size connections; take() waits at most connect_timeout +
// command_timeout for one to come back, then throws backend_error.
connection_pool::settings pool_settings(const redis_options& options);

}  // namespace locksmith::strategies::redis_detail
