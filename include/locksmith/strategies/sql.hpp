// SPDX-License-Identifier: MIT
// The `sql` strategy: locks kept as rows of one table in an SQL database, shared by every
// process (SQLite file) or every host (PostgreSQL, MariaDB/MySQL server) that uses the table.
//
//   sql_options     the strategy's JSON options
//   sql_dsn         a parsed `dsn`
//   parse_sql_dsn
//   sql_capabilities_for
//   make_sql_store
//
// Contract:
//  - Drivers, chosen by the DSN's scheme: `sqlite:///abs/path.db` (libsqlite3),
//    `postgresql://user:pass@host:port/db` (libpq; `postgres://` too, query parameters such as
//    sslmode go to libpq), `mysql://user:pass@host:port/db` (MariaDB Connector/C, for MariaDB and
//    MySQL; `mariadb://` too; a port means TCP, also to localhost; localhost or no host without
//    a port means the default Unix socket; the environment's MYSQL_TCP_PORT and MYSQL_UNIX_PORT
//    are not read). A driver whose client library was missing at build time says so when used.
//  - TLS, with libpq's parameter names for both server drivers: `?sslmode=verify-full&
//    sslrootcert=/ca.pem[&sslcert=/client.pem&sslkey=/client.key]`. Naming a certificate
//    without sslmode means verify-full (for libpq too, whose own default, prefer, would verify
//    nothing): the server's certificate must chain to the CA and name the DSN's host. Weaker
//    modes must be asked for by name (require; libpq's verify-ca too). A certificate that does
//    not verify, or a file that cannot be used, is a permanent backend_error ("tls" for
//    PostgreSQL, "mysql 2026" for MariaDB); a TLS-only user connecting without TLS is refused
//    by the server (SQLSTATE 28000, mysql 1045), permanent too.
//  - Rows: (key_id, token, expires_ms, fence). key_id is the 128-bit stable_name_hash of the
//    name (32 hex digits), so any name (any bytes, up to 1 MiB) fits a fixed-size key; two names
//    with one hash share a row, which costs concurrency, never exclusion. The token is the key's
//    owner token; '' while nobody holds the row.
//  - Acquire is ONE statement: an insert, or an update of a row that is free, expired or ours
//    (PostgreSQL and SQLite INSERT .. ON CONFLICT DO UPDATE .. WHERE, MariaDB INSERT .. ON
//    DUPLICATE KEY UPDATE with IF()). Refresh and release are one UPDATE each, matching our
//    token (refresh also requires the grant not to have expired). Every statement is
//    parameterised; the table and schema names are plain identifiers, checked at configuration
//    and again by make_sql_store, and quoted.
//  - One table per database, whoever connects: the table is always named with its schema
//    (sql_options::schema), never looked up through a role's search path. PostgreSQL's `public`
//    does not let every role create tables (since PostgreSQL 15): create the table once and
//    grant SELECT, INSERT, UPDATE on it to every role that locks, or name a schema they share.
//  - Expiry is computed by the database's clock, in milliseconds: hosts need no synchronised
//    clocks. A holder that dies keeps the lock until its TTL runs out (no crash_release).
//  - Fencing: `fence` counts the grants of the row, incremented in the granting statement
//    (a re-acquire by the holder keeps its token). Release clears the token and keeps the row,
//    so the counter survives and tokens strictly increase across release, expiry and re-grant.
//    The table therefore keeps one small row per name ever locked (a semaphore: its limit row
//    and one row per permit ever held at once).
//  - Exclusive only (a shared request takes the exclusive lock); waiting is polled by
//    named_lock with the core's backoff (no native_wait).
//  - Counting semaphores (capability counting; a key with limit() = N, 1..1000): in the same table,
//    a name's permit rows share a prefix, the first 24 hex digits of its key_id and '/' (a lock's
//    key_id has no '/': a semaphore and the lock of one name are separate rows). Permit i is the
//    row `<prefix><i>` (i = 1..N; the key's portable_state "permit", which LOCKSMITH_PERMIT shows),
//    a lock row in all but its key: taken for an owner token by one conditional upsert on the
//    unique key_id when it is missing, released or expired (by the database's clock), refreshed and
//    released by that token only. Only rows 1..N are ever offered, so owners that agree on N never
//    exceed N whatever the isolation; owners of two limits (an administrator deleted the limit row)
//    never exceed the larger. The row `<prefix>limit` keeps the limit (token 'limit', expires_ms =
//    N: never a holder) and the name's fencing counter (fence). Each grant is a transaction that
//    locks that row first (PostgreSQL READ COMMITTED and MariaDB REPEATABLE READ, the servers'
//    defaults, with INSERT .. ON CONFLICT/ON DUPLICATE KEY; SQLite: BEGIN IMMEDIATE), so grants of
//    one name run one at a time: the limit is checked exactly, the lowest slot nobody holds is
//    taken and fencing tokens increase across the name's permits in grant order. Another limit is
//    refused (invalid_argument_error naming both) while any permit of either is held; with none
//    held, the next grant keeps its own limit. A limit row that is not one (another token, a limit
//    outside 1..1000, a NULL fence) is a permanent backend_error ("foreign") naming the row and the
//    DELETE that resets it; a slot row that cannot be taken (a live foreign token, NULLs) keeps its
//    slot out of use: fewer holders, never more. Waits are polled like the lock's. Crash: a holder
//    that dies keeps its permit until its TTL runs out. status() of a name whose lock is free and
//    that has a limit row counts its held permits. MariaDB needs recursive CTEs (>= 10.2; MySQL >=
//    8.0).
//  - The table is created on first use when missing (`create_table`, default true), detected by
//    each driver's own error (PostgreSQL SQLSTATE 42P01, MariaDB error 1146, SQLite "no such
//    table"). A table without the expected columns is a backend_error naming them.
//  - SQLite: the file's folder must be safe like a lock directory (open_lock_directory: not a
//    symlink, writable by nobody but its owner); the folder is created 0700 when missing and the
//    file 0600; the file is never opened through a symlink. WAL mode and a busy timeout let many
//    processes share it. Commits are not synced (synchronous = NORMAL): a crash of the processes
//    loses nothing, but after an OS crash or power loss the last grants may be gone — their
//    holders are gone too — and with them the last fence counts, so a fencing token may then be
//    issued twice; resources that keep tokens across a reboot should use a server database.
//    A SQLite-backed store is host-local: it lacks `distributed`, and selection
//    (sql_capabilities_for) treats it as a local strategy.
//  - Connections: a pool of at most pool_size; one that failed or that the server closed while
//    idle is dropped, so a restarted server is used again without restarting the process.
//    Set-up is bounded by connect_timeout and each statement by command_timeout (MariaDB's
//    client counts both in whole seconds, rounded up).
//  - Client libraries: SQLite is linked; libpq (libpq.so.5) and libmariadb (libmariadb.so.3) are
//    loaded with dlopen when a DSN first needs them, so that a program (the statically linked
//    locksmith command) that never talks to those servers does not load them at every start.
//  - Errors: backend_error whose native_code is "SQLSTATE xxxxx" (PostgreSQL), "mysql NNNN"
//    (MariaDB, client errors 2000-2999 included), "sqlite N" (SQLite), "connect", "timeout" or
//    "connection" (PostgreSQL client side), "dlopen" (a client library that cannot be loaded).
//    kind() is transient for a server that cannot be reached, went away, is starting, has too
//    many connections, or for a timeout, a deadlock or a busy SQLite file; permanent for a wrong
//    password, an unknown database, a missing table or one of the wrong shape.
//    A password never appears in a message: DSNs are shown through redact_url and driver
//    messages are scrubbed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies {

// Everything the sql strategy can offer; a SQLite-backed store lacks `distributed`.
inline constexpr capability sql_capabilities =
    capability::exclusive | capability::noblock | capability::expiring | capability::distributed |
    capability::serializable | capability::fencing | capability::counting;

struct sql_dsn {
    enum class kind { sqlite, postgresql, mysql };
    kind driver = kind::sqlite;
    std::string text;      // the DSN as given (contains the password: never print it)
    std::string path;      // sqlite: the absolute file path
    std::string user;      // server drivers, percent-decoded
    std::string password;  // percent-decoded; never printed
    std::string host;
    int port = 0;  // 0: the driver's default
    std::string database;
    // mysql:// only (libpq reads a postgresql:// DSN's own parameters): TLS as the query
    // parameters ask, with libpq's names. sslmode=disable (the default without certificate
    // parameters), require (encrypted, the server's certificate not checked), verify-full (the
    // default as soon as sslrootcert, sslcert or sslkey is given: the certificate must verify
    // against sslrootcert, or the system's CAs without it, and name the DSN's host).
    enum class tls_mode { disable, require, verify_full };
    tls_mode tls = tls_mode::disable;
    std::string tls_ca;    // sslrootcert: the CA file (PEM)
    std::string tls_cert;  // sslcert: a client certificate (PEM), with tls_key
    std::string tls_key;   // sslkey: its private key (PEM)

    // The DSN fit to print (redact_url).
    std::string redacted() const;
    // Where the data lives (strategy_descriptor::backends): "file:/path" for SQLite, else the
    // server as "host:port" (the driver's default port when none is given).
    std::vector<std::string> servers() const;
};

// Parses the forms above, and the spellings of Symfony's and Doctrine's docs, which
// normalize_sql_dsn turns into them. Throws invalid_argument_error naming what is wrong, never
// the password.
sql_dsn parse_sql_dsn(std::string_view dsn);

// `dsn` in the forms above: Doctrine DBAL's `pgsql://` (postgresql://), `mysql2://` (mysql://),
// `sqlite3:///abs/path`, `sqlite:////abs/path` and `sqlite://localhost//abs/path` (sqlite:///
// abs/path), and PDO's `sqlite:/abs/path`, `pgsql:host=H;port=P;dbname=D[;user=U;password=W;
// sslmode=...]` and `mysql:host=H;port=P;dbname=D[;charset=C]` (URLs with those parts). Other
// text is returned as it is. Throws invalid_argument_error for a spelling that cannot work
// (sqlite::memory:, a relative SQLite path, unix_socket, SQL Server, Oracle, DB2), naming keys,
// never values.
std::string normalize_sql_dsn(std::string_view dsn);

// The key_id of `name`'s row (see Rows above): a frozen format (doc/FORMATS.md), for queries.
std::string sql_key_id(std::string_view name);

struct sql_options {
    sql_dsn dsn;
    // The password when the DSN has none (PostgreSQL, MariaDB), so that a config file can be
    // readable by all: given inline, or (password_from) from a file or an environment variable.
    // Never printed.
    std::string password;
    secret_source password_from;
    // Table name: a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 characters).
    std::string table = "locksmith_keys";
    // The table's schema, a plain identifier too; "" for the one every user of the database
    // shares: PostgreSQL's `public`, SQLite's `main`, MariaDB's database of the DSN. Never the
    // search path: with a schema per role on it (PostgreSQL's secure-schema pattern), each role
    // would create and use a table of its own. PostgreSQL's pg_* schemas (pg_temp is one per
    // session) and SQLite's schemas but `main` (temp is one per connection) are refused.
    std::string schema;
    // Create the table on first use when it is missing.
    bool create_table = true;
    // Longest wait for a connection to be set up. Must be > 0.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    // Longest wait for one statement (SQLite: for the file's write lock). Must be > 0.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
    // Most connections kept open. >= 1.
    std::size_t pool_size = 4;

    // Reads {"dsn": "...", "password" (or "password_file": "/path" or "password_env": "VARIABLE"),
    // "table": "locksmith_keys", "create_table": true,
    // "connect_timeout_s": 2, "command_timeout_s": 5, "pool_size": 4}; only "dsn" is required.
    // "table" may be "schema.table". Throws config_error (never naming the password).
    static sql_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): the server ("host:port"), or a SQLite database as
    // "file:/path".
    std::vector<std::string> backends() const;
};

// The capabilities a store built from `options` has: sql_capabilities, without `distributed`
// for a SQLite DSN. Options it cannot read give sql_capabilities (their error comes later).
capability sql_capabilities_for(const nlohmann::json& options) noexcept;

// Connects once and checks (or creates) the table, so that a wrong endpoint, password,
// database or table fails here. Throws backend_error; invalid_argument_error for bad options
// (a table or schema that is not a plain identifier, or a schema the DSN's database may not use).
std::shared_ptr<store> make_sql_store(const sql_options& options);

}  // namespace locksmith::strategies
