// libpq for locksmith's strategies: one PostgreSQL session, and the one place where libpq errors
// become backend_errors (with the SQLSTATE, and never the password). Written for pg_advisory;
// meant to be shared with the sql strategy's libpq driver. libpq is opened with dlopen on first
// use (libpq.so.5), not linked: only the header is needed at build time.
//
//   pg_target         where and how to connect: the DSN (a postgresql:// URL), its printable form,
//                     the timeouts
//   pg_result         an owned PGresult
//   pg_session        one connection: connect with a timeout, run a query with a deadline,
//                     cancel, liveness check without a round trip
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <libpq-fe.h>

namespace locksmith::pg {

using clock = std::chrono::steady_clock;

struct pg_target {
    // Which strategy speaks (the backend of the backend_errors, the prefix of messages).
    std::string strategy;
    // The URL as given, for libpq only.
    std::string dsn;
    // The URL fit to print (redact_pg_dsn).
    std::string redacted;
    // The password as libpq reads it from the URL ("" when none), scrubbed from every message.
    std::string password;
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
};

// Checks `dsn` (postgresql:// or postgres://, which libpq parses) and fills a target.
// Throws invalid_argument_error naming the redacted URL and what is wrong; backend_error
// ("libpq") when libpq cannot be loaded. pg_session's constructor loads it too.
pg_target make_pg_target(std::string strategy, std::string_view dsn);

// `dsn` fit to print: the password (and every query value) becomes "***"; a user name without
// password stays (postgresql://user@host is a user, where redact_url would assume a password).
std::string redact_pg_dsn(std::string_view dsn);

struct pg_result_deleter {
    void operator()(PGresult* r) const noexcept;
};
using pg_result = std::unique_ptr<PGresult, pg_result_deleter>;

// The number of rows of a result (0 for none).
int pg_rows(const PGresult* result);
// The text of one field; "" for NULL or a row or column the result does not have.
std::string_view pg_value(const PGresult* result, int row, int column);

class pg_session {
  public:
    // Connects within target.connect_timeout.
    // Throws backend_error ("connect", or "timeout") naming the redacted DSN and the server's
    // reason (unknown role, unknown database...).
    explicit pg_session(const pg_target& target);
    // Closes the connection (the server then ends the session and frees its session locks),
    // except in a fork()ed child, where the connection is the parent's: left alone there.
    ~pg_session();
    pg_session(const pg_session&) = delete;
    pg_session& operator=(const pg_session&) = delete;

    // Sends `sql` (simple protocol: it may hold several statements, which then run as one
    // transaction) and returns the last statement's result, waiting at most until `until` for
    // the reply (clock::time_point::max(): without bound).
    // Throws backend_error: for an error the server sent (native code "SQLSTATE xxxxx"; the
    // session stays usable unless the server ended it), for a broken connection ("connection")
    // or for `until` passing ("timeout"); after the last two the session is broken() and must
    // be thrown away.
    pg_result query(const std::string& sql, clock::time_point until);
    // query() with the command timeout as the deadline.
    pg_result query(const std::string& sql);

    // True after an I/O error or a timeout (the session is closed then), or when the server
    // ended the session.
    bool broken() const noexcept;
    // True when an idle session has news: data or a hang-up waiting on its socket, which on an
    // idle session means the server ended it (restart, pg_terminate_backend, idle timeout). No
    // round trip: one poll(2).
    bool hung_up() const noexcept;
    // Opened by this process (false in a fork()ed child, which must not use it).
    bool ours() const noexcept;

    const pg_target& target() const noexcept { return target_; }

    // "<strategy>: <what> on <redacted dsn> failed: <reason>", as a backend_error.
    [[noreturn]] void fail(const std::string& what, const std::string& native_code,
                           const std::string& reason) const;

  private:
    // Ends the session (see the destructor); broken() from then on.
    void close() noexcept;
    bool wait_socket(bool for_write, clock::time_point until) const;
    PGconn* conn_ = nullptr;
    const pg_target& target_;
    std::uint64_t generation_;
    bool broken_ = false;
};

// The SQLSTATE of an error result ("" when there is none).
std::string sqlstate(const PGresult* result);

}  // namespace locksmith::pg
