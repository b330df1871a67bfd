// SPDX-License-Identifier: MIT
// libpq for locksmith's strategies (pg_advisory, and the sql strategy's PostgreSQL driver): one
// PostgreSQL session, and the one place where libpq errors become backend_errors (with the
// SQLSTATE, whether retrying may help, and never the password). libpq is opened with dlopen on
// first use (libpq.so.5, load_client_api), not linked: only the header is needed at build time.
// Built as the static library locksmith_pq (strategies/common/pq/CMakeLists.txt), with hidden
// symbols, so that each module that links it has its own copy and two such modules loaded in one
// program never bind to each other's.
//
//   pg_target         where and how to connect: the DSN (a postgresql:// URL), its printable form,
//                     the password to scrub, the timeouts
//   pg_result         an owned PGresult
//   pg_session        one connection: connect with a timeout, run a query (simple or prepared)
//                     with a deadline, liveness check without a round trip, fork-safe close
//   statement_error   what pg_session throws for an error the server sent
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <libpq-fe.h>

#include <locksmith/errors.hpp>

// Hidden in every module that includes it (see the top), templates instantiated on these types
// included: each module binds to its own copy.
#pragma GCC visibility push(hidden)

namespace locksmith::pg {

using clock = std::chrono::steady_clock;

struct pg_target {
    // Which strategy speaks (the backend of the backend_errors, the prefix of messages).
    std::string strategy;
    // The URL as given, for libpq only.
    std::string dsn;
    // The URL fit to print (redact_url).
    std::string redacted;
    // The password ("" when none), scrubbed from every message, as is whatever the URL has
    // after "user:" (libpq may quote it as typed).
    std::string password;
    // "verify-full" when the DSN names a certificate (sslrootcert, sslcert or sslkey) but no
    // sslmode: asking for TLS means verifying the server's certificate and host name, where
    // libpq's default (prefer) would verify neither. "" otherwise (libpq's own default).
    std::string default_sslmode;
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
    // The servers the DSN names (strategy_descriptor::backends): "host:port", or "unix:DIR:port"
    // for a socket directory ("unix:default:port" when the DSN names no host).
    std::vector<std::string> servers;
};

// Checks `dsn` (postgresql:// or postgres://, which libpq parses) and fills a target; `password`
// (from the options: file, environment) goes beside a DSN that has none. A DSN that leaves to
// the environment (PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGDATABASE, PGSERVICE set) where the lock
// lives is refused: another process's environment would send it elsewhere.
// Throws invalid_argument_error naming the redacted URL and what is wrong; backend_error
// ("dlopen") when libpq cannot be loaded.
pg_target make_pg_target(std::string strategy, std::string_view dsn, std::string password = {});

struct pg_result_deleter {
    void operator()(PGresult* r) const noexcept;
};
using pg_result = std::unique_ptr<PGresult, pg_result_deleter>;

// The number of rows of a result (0 for none).
int pg_rows(const PGresult* result);
// The text of one field; "" for NULL or a row or column the result does not have.
std::string_view pg_value(const PGresult* result, int row, int column);
// The number of rows an INSERT, UPDATE or DELETE touched.
long pg_affected_rows(const PGresult* result);

// Whether a statement that failed with `sqlstate` may succeed when tried again: transient for
// connection exceptions (class 08), an administrator's shutdown or a server starting up
// (57P01-57P03), too many connections (53300), serialization failures and deadlocks (40001,
// 40P01), a lock or statement timeout (55P03, 57014); unknown for system and internal errors
// (classes 58, XX); permanent for the rest: authentication (28), unknown database (3D000),
// syntax or a missing table or column (42), bad data (22, 23).
error_kind sqlstate_kind(std::string_view sqlstate) noexcept;

// An error the server sent for a statement. native_code() is "SQLSTATE xxxxx".
class statement_error : public backend_error {
  public:
    statement_error(std::string backend, std::string sqlstate, std::string detail,
                    const std::string& message);
    const std::string& sqlstate() const noexcept { return sqlstate_; }
    // The server's one-line message, scrubbed ("relation \"t\" does not exist").
    const std::string& detail() const noexcept { return detail_; }

  private:
    std::string sqlstate_;
    std::string detail_;
};

class pg_session {
  public:
    // Connects within target.connect_timeout; `target` must outlive the session.
    // Throws backend_error naming the redacted DSN and the server's reason: "SQLSTATE xxxxx"
    // when the server refused (unknown role or database, a pg_hba.conf reject such as a
    // TLS-only role over plain TCP: permanent; too many connections, starting up: transient),
    // "tls" when TLS cannot be set up as asked (a certificate that does not verify against the
    // CA or the host name, a missing or unreadable certificate or key file, a server without
    // TLS: permanent), "connect" when it could not be reached and "timeout" (both transient),
    // "dlopen" when libpq cannot be loaded.
    explicit pg_session(const pg_target& target);
    // Closes the connection (the server then ends the session and frees its session locks),
    // except in a fork()ed child, where the connection is the parent's: left alone there.
    ~pg_session();
    pg_session(const pg_session&) = delete;
    pg_session& operator=(const pg_session&) = delete;

    // Sends `sql` (simple protocol: it may hold several statements, which then run as one
    // transaction) and returns the last statement's result, waiting at most until `until` for
    // the reply (clock::time_point::max(): without bound). `what` names the step in messages
    // ("acquiring a lock").
    // Throws statement_error for an error the server sent (the session stays usable unless the
    // server ended it); backend_error for a broken connection ("connection") or for `until`
    // passing ("timeout"), both transient, after which the session is broken().
    pg_result query(const std::string& sql, clock::time_point until,
                    std::string_view what = "running a statement");
    // query() with the command timeout as the deadline.
    pg_result query(const std::string& sql, std::string_view what = "running a statement");

    // Prepares `sql` (placeholders $1..$n, `params` of them) as the statement `name` of this
    // session. Waits and throws as query().
    void prepare(const char* name, const std::string& sql, int params, clock::time_point until,
                 std::string_view what);
    // Runs the prepared statement `name` with text parameters. Waits and throws as query().
    pg_result run_prepared(const char* name, std::initializer_list<const char*> params,
                           clock::time_point until, std::string_view what);

    // True after an I/O error or a timeout (the session is closed then), or when the server
    // ended the session.
    bool broken() const noexcept;
    // True when the server ended an idle session (restart, pg_terminate_backend, idle timeout)
    // and its goodbye has arrived: a FATAL error, the socket's end of stream, or a read that
    // fails. Whatever
    // else waits on the socket (a parameter's new value, a notice) is taken in, so that the
    // socket is quiet again. No round trip: a poll(2), and a read when there is news.
    bool hung_up() const noexcept;
    // The connection's socket, for poll(2) (readable: news, see hung_up()); -1 once broken().
    int socket() const noexcept;
    // Opened by this process (false in a fork()ed child, which must not use it).
    bool ours() const noexcept;

    const pg_target& target() const noexcept { return target_; }

    // "<strategy>: <what> on <redacted dsn> failed: <reason>", as a backend_error.
    [[noreturn]] void fail(std::string_view what, const std::string& native_code,
                           const std::string& reason, error_kind kind) const;

  private:
    // Ends the session (see the destructor); broken() from then on.
    void close() noexcept;
    bool wait_socket(bool for_write, clock::time_point until) const;
    // Waits for the reply to what was sent last; see query().
    pg_result finish(std::string_view what, clock::time_point until);
    // The connection's last error, one line, scrubbed.
    std::string connection_message() const;
    PGconn* conn_ = nullptr;
    const pg_target& target_;
    std::uint64_t generation_;
    bool broken_ = false;
    bool goodbye_ = false;  // the server sent a FATAL error: it is ending the session
};

}  // namespace locksmith::pg

#pragma GCC visibility pop
