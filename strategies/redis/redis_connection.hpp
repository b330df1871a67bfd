// SPDX-License-Identifier: MIT
// Private to the redis strategy: connections, their pool, and the one place where transport
// and protocol errors become backend_errors.
//
//   reply_ptr        an owned redisReply
//   connection       one synchronous connection: connect (TCP, Unix socket, TLS), AUTH, SELECT,
//                    binary-safe commands
//   connection_pool  up to pool_size idle connections, shared by threads; drops broken ones
//   make_tls_context the certificates of a rediss:// store, loaded once for its connections
//
// hiredis is the protocol only: redisFormatCommandArgv encodes a command, a redisReader parses
// the replies. The bytes go over the project's own stream (strategies/common/tls), plain or TLS,
// so that plain and TLS connections share one code path, every deadline included (hiredis 0.14
// has no TLS).
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

#include "tls_stream.hpp"

namespace locksmith::strategies::redis_detail {

struct reply_deleter {
    void operator()(redisReply* r) const noexcept {
        if (r) freeReplyObject(r);
    }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// The first word of an error reply ("WRONGPASS", "NOSCRIPT"), which Redis uses as its code.
std::string reply_error_code(const redisReply& reply);

struct reader_deleter {
    void operator()(redisReader* r) const noexcept {
        if (r) redisReaderFree(r);
    }
};

// The TLS settings of `options` loaded (certificates read now, so that a wrong file fails at
// configuration), or null for redis:// and unix://. Throws invalid_argument_error.
std::shared_ptr<const tls::tls_context> make_tls_context(const redis_options& options);

class connection {
  public:
    // Connects to `endpoint` (options.endpoint, or a master or a Sentinel that sentinel.hpp
    // found: TCP or Unix socket, then the TLS handshake when `tls` is given, all within
    // connect_timeout), authenticates and selects the database. `tls` is make_tls_context's;
    // `options` must outlive the connection.
    // Throws backend_error naming the redacted endpoint; never the password.
    connection(const redis_options& options, redis_endpoint endpoint,
               std::shared_ptr<const tls::tls_context> tls);
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
    std::uint64_t master_generation() const noexcept { return master_generation_; }
    void set_master_generation(std::uint64_t g) noexcept { master_generation_ = g; }
    // True when an idle connection has data or a hang-up pending, i.e. the server closed it
    // (restart, idle timeout) or sent what nobody asked for: bytes on the socket, decrypted
    // bytes OpenSSL holds, or the rest of a reply the reader holds; and in a fork()ed child, for
    // the parent's connections. Checked before reuse, so that a restart costs no failed command
    // and no command reads another's reply.
    bool stale() const noexcept;

    // Throws backend_error for `reply` when it is an error reply; `what` says what was tried.
    // READONLY (the server is a replica now) also marks the connection broken.
    void check(const redisReply* reply, const std::string& what);
    [[noreturn]] void fail(const std::string& what, const std::string& native_code,
                           const std::string& detail) const;

  private:
    using time_point = std::chrono::steady_clock::time_point;
    void open(std::shared_ptr<const tls::tls_context> tls);
    void set_up();
    // Encodes and sends one command before `until`. Throws backend_error.
    void write(const std::vector<std::string_view>& args, time_point until);
    // The next reply, or null when `until` passed first; `command` (empty for a read without
    // one) names what failed in errors.
    reply_ptr read_until(time_point until, std::string_view command);
    [[noreturn]] void timed_out(const std::string& what);
    [[noreturn]] void not_ours(const std::string& what);
    [[noreturn]] void fail_stream(const std::string& what, const tls::stream_error& e);
    [[noreturn]] void fail_as(const std::string& what, const std::string& native_code,
                              const std::string& detail, error_kind kind) const;
    const redis_options& options_;
    redis_endpoint endpoint_;
    std::uint64_t master_generation_ = 0;
    std::unique_ptr<redisReader, reader_deleter> reader_;
    std::unique_ptr<tls::tls_stream> stream_;
    bool broken_ = false;
    bool mid_reply_ = false;          // part of a reply was read, not the whole
    std::size_t in_reply_ = 0;        // bytes read since the last complete reply
    const std::uint64_t generation_;  // fork_generation() of the process that connected
};

using connection_pool = locksmith::connection_pool<connection>;

// The store's pool: up to pool_size connections (`tls` as for connection); take() waits at most
// connect_timeout + command_timeout for one to come back, then throws backend_error.
connection_pool::settings pool_settings(const redis_options& options,
                                        std::shared_ptr<const tls::tls_context> tls);

}  // namespace locksmith::strategies::redis_detail
