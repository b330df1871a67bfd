// Private to the redis strategy: hiredis connections, their pool, and the one place where
// hiredis errors become backend_errors.
//
//   reply_ptr        an owned redisReply
//   connection       one synchronous hiredis context: connect, AUTH, SELECT, binary-safe commands
//   connection_pool  up to pool_size idle connections, shared by threads; drops broken ones
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
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
    // Connects, authenticates and selects the database.
    // Throws backend_error naming the redacted endpoint; never the password.
    explicit connection(const redis_options& options);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // Sends one command and reads its reply. An error *reply* is returned, not thrown (callers
    // decide: NOSCRIPT is expected). Throws backend_error for I/O errors and timeouts, after
    // which the connection is broken().
    reply_ptr command(const std::vector<std::string_view>& args);

    // Sends a command without reading its reply (used to SUBSCRIBE and UNSUBSCRIBE).
    void send(const std::vector<std::string_view>& args);

    // Reads the next reply, waiting at most `timeout` (negative: the command timeout).
    // Returns null when nothing arrived in time; the connection stays usable then.
    // Throws backend_error for I/O errors and a closed connection.
    reply_ptr read(std::chrono::milliseconds timeout);

    // True after an I/O error: the connection must be thrown away.
    bool broken() const noexcept { return broken_; }
    // True when an idle connection has data or a hang-up pending, i.e. the server closed it
    // (restart, idle timeout). Checked before reuse, so that a restart costs no failed command.
    bool stale() const noexcept;

    // Throws backend_error for `reply` when it is an error reply; `what` says what was tried.
    void check(const redisReply* reply, const std::string& what) const;
    [[noreturn]] void fail(const std::string& what, const std::string& native_code,
                           const std::string& detail) const;

  private:
    void set_up();
    [[noreturn]] void fail_io(const std::string& what);
    redisContext* context_ = nullptr;
    const redis_options& options_;
    bool broken_ = false;
};

class connection_pool {
  public:
    explicit connection_pool(const redis_options& options);

    // A connection on loan; returns to the pool when destroyed unless it broke.
    class lease {
      public:
        lease(connection_pool& pool, std::unique_ptr<connection> c)
            : pool_(&pool), connection_(std::move(c)) {}
        lease(lease&&) noexcept = default;
        lease& operator=(lease&&) = delete;
        ~lease();
        connection* operator->() const noexcept { return connection_.get(); }
        connection& operator*() const noexcept { return *connection_; }

      private:
        connection_pool* pool_;
        std::unique_ptr<connection> connection_;
    };

    // An idle connection, or a new one while fewer than pool_size are out; otherwise waits for
    // one to come back, at most connect_timeout + command_timeout.
    // Throws backend_error when no connection can be had.
    lease take();

    // A connection outside the pool (for a subscriber, which cannot run other commands).
    std::unique_ptr<connection> open() const { return std::make_unique<connection>(options_); }

    const redis_options& options() const noexcept { return options_; }

  private:
    void give_back(std::unique_ptr<connection> c) noexcept;
    const redis_options& options_;
    std::mutex mutex_;
    std::condition_variable returned_;
    std::vector<std::unique_ptr<connection>> idle_;
    std::size_t out_ = 0;  // connections on loan
};

}  // namespace locksmith::strategies::redis_detail
