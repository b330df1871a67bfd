// SPDX-License-Identifier: MIT
// MariaDB Connector/C for locksmith's strategies (mysql_get_lock, and the sql strategy's MariaDB
// driver): one connection to MariaDB or MySQL, and the one place where the client's and the
// server's error codes become backend_errors (whether retrying may help, never the password).
// libmariadb is opened with dlopen on first use (libmariadb.so.3, load_client_api), not linked:
// only the header is needed at build time. Built as the static library locksmith_mariadb
// (strategies/common/mariadb/CMakeLists.txt), with hidden symbols, so that each module that links
// it has its own copy and two such modules loaded in one program never bind to each other's.
//
//   mariadb_target   where and how to connect: the parsed mysql:// DSN (sql_dsn), the password,
//                    the timeouts, the strategy that speaks
//   mariadb_kind     whether an error code may go away on a retry
//   mariadb_error    what a session throws: a backend_error with the numeric code
//   mariadb_session  one connection: connect (TLS as the DSN asks), prepared statements with
//                    bound parameters, a liveness check without a round trip, fork-safe close
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <mysql.h>

#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>

// Hidden in every module that includes it (see the top).
#pragma GCC visibility push(hidden)

namespace locksmith::mariadb {

class socket_cutter;

struct mariadb_target {
    // Which strategy speaks (the backend of the backend_errors, the prefix of messages).
    std::string strategy;
    // A mysql:// DSN (parse_sql_dsn): server, user, database, TLS parameters.
    strategies::sql_dsn dsn;
    // The password: the DSN's, or one read from a password file. Never printed; scrubbed from
    // every message of the client or the server.
    std::string password;
    // Set-up (TCP, TLS, login) and each statement's reply. Connector/C counts both in whole
    // seconds, rounded up.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
    // Run once after every login ("" for none), e.g. "SET time_zone = '+00:00'".
    std::string init_command;
    // CLIENT_* flags for mysql_real_connect (CLIENT_FOUND_ROWS...).
    unsigned long client_flags = 0;
};

// Whether retrying may help after the client or server error `code` (with its `message`, which
// tells TLS failures apart): transient for a server that cannot be reached or went away (2002,
// 2003, 2006, 2013, which a read timeout gives too), too many connections (1040), a lock wait
// timeout (1205), a deadlock (1213), a killed connection or statement (1927, 1317), a server
// shutting down (1053); unknown for
// the client's other errors (2000-2999); permanent for the server's: access denied (1044, 1045),
// unknown database (1049), missing table (1146), bad statements or data, and a TLS set-up that
// cannot work (2026 about a certificate, a key or a server without TLS).
error_kind mariadb_kind(unsigned code, std::string_view message = {});

// Whether the error `code` leaves the connection unusable: the client's errors (2000-2999: a lost
// connection, a timeout, a protocol error), and the server's goodbye (1927: the connection was
// killed; 1053: the server is shutting down).
bool ends_session(unsigned code) noexcept;

// A failure of the client or the server. native_code() is "mysql NNNN".
class mariadb_error : public backend_error {
  public:
    mariadb_error(std::string backend, unsigned code, std::string detail,
                  const std::string& message, error_kind kind);
    unsigned code() const noexcept { return code_; }
    // The client's or server's own words, scrubbed.
    const std::string& detail() const noexcept { return detail_; }

  private:
    unsigned code_;
    std::string detail_;
};

// A statement parameter (MYSQL_BIND) that points at `value`, which must outlive the execution.
MYSQL_BIND text_param(const std::string& value);
MYSQL_BIND integer_param(long long& value);
MYSQL_BIND real_param(double& value);

// The first column of a statement's first row, read as an integer.
struct first_value {
    bool row = false;   // the statement returned a row
    bool null = false;  // ... whose first column is NULL
    long long value = 0;
};

class mariadb_session {
  public:
    // The most prepared statements a session keeps (slots 0 .. max_statements - 1).
    static constexpr std::size_t max_statements = 16;

    // Connects within target.connect_timeout (within refresh_deadline() too, rounded up to a
    // whole second); `target` must outlive the session. A DSN with a
    // port connects over TCP (to localhost too); localhost or no host without a port uses the
    // default Unix socket. TLS as the DSN asks: enforced (no fallback to plain TCP), and with
    // verify-full the certificate chain and the host name are checked.
    // Throws mariadb_error naming the redacted DSN and the reason (see mariadb_kind; a refused
    // login says how a TLS-only user must connect), backend_error ("dlopen") when libmariadb
    // cannot be loaded.
    explicit mariadb_session(const mariadb_target& target);
    // Closes the connection (the server then ends the session and frees its locks), except in a
    // fork()ed child, where the connection is the parent's: left alone there.
    ~mariadb_session();
    mariadb_session(const mariadb_session&) = delete;
    mariadb_session& operator=(const mariadb_session&) = delete;

    // Runs the statement `sql` (placeholders ?) with `params` as the prepared statement of
    // `slot` (prepared at its first use; a slot always holds the same statement), and returns it
    // for its results (affected_rows, insert_id, fetch_first). `what` names the step in messages
    // ("acquiring a lock").
    // Throws mariadb_error; after an error that ends the session (ends_session) it is no longer
    // usable(). Within refresh_deadline() (caller_deadline.hpp): a statement whose reply has not
    // come by then fails with 2013, transient, and the session is no longer usable (its socket
    // is shut down at the deadline, Connector/C having no per-call deadline). So do fetch_first
    // and run.
    MYSQL_STMT* execute(std::size_t slot, const std::string& sql,
                        std::initializer_list<MYSQL_BIND> params, std::string_view what);
    // execute(), then the first column of the first row as an integer.
    first_value fetch_first(std::size_t slot, const std::string& sql,
                            std::initializer_list<MYSQL_BIND> params, std::string_view what);
    std::uint64_t affected_rows(MYSQL_STMT* statement) const;
    std::uint64_t insert_id(MYSQL_STMT* statement) const;
    // A statement without parameters or result (DDL). Throws as execute().
    void run(const std::string& sql, std::string_view what);

    // False after a client error (the connection may be lost or out of step): drop it.
    bool usable() const noexcept { return usable_; }
    bool broken() const noexcept { return !usable_; }
    // True when the server ended the idle session (restart, KILL, wait_timeout) or a client
    // error broke it: the socket has news (an error packet, the end of stream) or is gone. No
    // round trip: one poll(2).
    bool hung_up() const noexcept;
    // The connection's socket, for poll(2) (readable: see hung_up()); -1 once unusable.
    int socket() const noexcept;
    // Opened by this process (false in a fork()ed child, which must not use it).
    bool ours() const noexcept;

    const mariadb_target& target() const noexcept { return target_; }
    // "<strategy>: <what> on <redacted dsn> failed: <message> (error <code>)", as a
    // mariadb_error; an error that ends the session (ends_session) makes it unusable.
    [[noreturn]] void fail(std::string_view what, unsigned code, std::string_view message);

  private:
    class deadline_guard;
    MYSQL_STMT* prepared(std::size_t slot, const std::string& sql, std::string_view what,
                         deadline_guard& bounded);
    const mariadb_target& target_;
    const std::uint64_t generation_;
    MYSQL* db_ = nullptr;
    bool usable_ = true;
    std::array<MYSQL_STMT*, max_statements> statements_{};
    std::unique_ptr<socket_cutter> cutter_;  // started at the first call with a deadline
    bool bounded_ = false;                   // a deadline_guard is armed
};

}  // namespace locksmith::mariadb

#pragma GCC visibility pop
