// SPDX-License-Identifier: MIT
// The `mysql_get_lock` strategy: MariaDB's and MySQL's user-level locks (GET_LOCK,
// RELEASE_LOCK, IS_USED_LOCK), shared by every host that talks to the same server. The twin of
// pg_advisory, after Symfony 8.2's MysqlStore.
//
//   mysql_get_lock_options  the strategy's JSON options
//   mysql_get_lock_name     the server-side lock name of a lock name
//   make_mysql_get_lock_store
//
// Contract:
//  - Owner: the lock object's key, bound to this process (not serializable). Every key that
//    holds a lock holds it through a connection (session) of its own, pinned to the key from the
//    grant until the release: user-level locks belong to the session, and a session that asks
//    again for a lock it holds is granted again (counted; MariaDB >= 10.0.2, MySQL >= 5.7), so
//    two keys sharing a session would both be granted. Two lock objects for one name thus
//    exclude each other in one process as across hosts. The grant itself refuses a session that
//    already holds the name (IS_USED_LOCK(name) = CONNECTION_ID(): a backend_error, never a
//    second grant). Released sessions go back to a pool of up to pool_size idle ones only when
//    RELEASE_ALL_LOCKS() says that they held exactly this one lock, once; any other count closes
//    the session (the server frees whatever it held).
//  - Names: the server's lock namespace is server-wide (every database, every application), and
//    MySQL refuses names over 64 characters (error 3057) and compares them case-insensitively,
//    while MariaDB 10.11 takes longer names and compares bytes. So a name of printable ASCII
//    (0x20-0x7e) of at most 54 characters is locked as "locksmith:" + name (readable in
//    IS_USED_LOCK and the processlist; on MySQL, two such names that differ only in case are one
//    lock), and any other name (longer, non-ASCII, control bytes, NUL, up to 1 MiB) as
//    "locksmith#" + the 32 hex digits of its 128-bit stable_name_hash: 42 characters on either
//    server. The two forms never meet (':' against '#'). Two hashed names collide with
//    probability 2^-128; among n names held at the same time some pair collides with
//    probability about n^2 / 2^129. A collision makes two names one lock: less concurrency,
//    never two holders. The name is a bound parameter: no name ever reaches SQL text.
//  - Statements (prepared, parameterised): try is `SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(),
//    -1, GET_LOCK(?, 0))`; release is `SELECT RELEASE_ALL_LOCKS()` on the key's session;
//    is_acquired() asks `IS_USED_LOCK(?) = CONNECTION_ID()` on it; status `IS_USED_LOCK(?)` (the
//    holder's connection id). Each is one round trip. RELEASE_ALL_LOCKS needs MariaDB >= 10.5.2
//    or MySQL >= 5.7.5: make_mysql_get_lock_store runs it once and refuses an older server
//    (backend_error "mysql 1305", naming the function and the versions).
//  - Waiting sleeps in the server: GET_LOCK(name, t) with t at most half the command timeout,
//    repeated until the grant or the caller's deadline, so that each reply is due within the
//    command timeout (a dead or stalled server is noticed so) and the deadline is kept to the
//    millisecond (MariaDB takes fractional seconds; MySQL may round t to whole seconds: there,
//    use command_timeout_s >= 2). A wait ends without a waiter left on the server. Waiters are
//    not served in order (no `fair`).
//  - Crash: a holder that dies frees its locks when the server sees its connection close (the
//    kernel closes the socket of a killed process: at once). A session that ends otherwise
//    (server restart, KILL CONNECTION, wait_timeout, a network failure) loses its locks: its
//    socket turns readable (loss_fd, so `locksmith run` stops its command), is_acquired() says
//    false, and the lost lock is never re-granted behind the owner's back, since a pinned
//    session never reconnects. A server that does not answer within command_timeout tells
//    nothing: is_acquired() throws that backend_error once, and says false afterwards (the
//    session was dropped). A held lock keeps an idle session open: the server's wait_timeout
//    (8 hours by default) ends it, and with it the lock, which the holder then learns as above.
//  - Counting semaphores (capability counting; a key with a limit N <= 256): permit i (shown
//    as i + 1, LOCKSMITH_PERMIT) of a name is the user lock "locksmith~" + the 32 hex digits of
//    the name's stable_name_hash + "/" + i, never a lock's name (':' and '#'), and its holder
//    also holds the marker lock of its limit, permit + "=" + N, each in the permit's own pinned
//    session as for a lock. A grant takes the first free slot of 0..N-1 (the marker, then the
//    permit, in one IF() statement: whoever holds a permit holds its marker), then looks at
//    every slot of 0..255 for a permit whose holder lacks the marker of N, and reads that
//    holder's limit: a second limit is an invalid_argument_error naming both (the taken slot is
//    given back first). Taking before looking means that of two owners of different limits
//    that take at once, the later look sees the earlier take: one of them at least is refused,
//    never both granted. A release drops the permit, then the marker (`SELECT IF(RELEASE_LOCK(
//    permit) = 1, RELEASE_ALL_LOCKS(), -1)`: the session is pooled only when the marker was all
//    that was left). A grant is 3 round trips uncontended (find, take, look; the look is one
//    statement over 256 slots). The server cannot wait for any one of N locks: waits_natively
//    is false for a permit, and named_lock polls with its backoff (a release on this host wakes
//    the waiters at once). Crash: as for a lock, a dead holder's session ends and takes its
//    permit and marker with it, at once. status() of a name whose permits are held gives the
//    permits held and the limit.
//  - No fencing (the server keeps no counter with a lock), no shared mode (GET_LOCK is
//    exclusive: a shared request takes the exclusive lock), no expiry. User-level locks are not
//    replicated: a failover to a replica forgets them all (each holder learns it, as above).
//    Proxies that multiplex sessions (ProxySQL, MaxScale's readwritesplit) break session locks:
//    connect to the server directly.
//  - TLS: the DSN's query parameters, with libpq's names as in the sql strategy: sslmode
//    (disable, require, verify-full), sslrootcert, sslcert and sslkey. Naming a certificate
//    without sslmode means verify-full: the server's certificate must chain to the CA and name
//    the DSN's host.
//  - Errors: backend_error whose native_code is "mysql NNNN" (client errors 2000-2999 included;
//    2026 for TLS that cannot be set up as asked), "dlopen" (libmariadb.so.3 cannot be loaded).
//    kind() is transient for a server that cannot be reached, went away or has too many
//    connections, and for a killed statement; permanent for authentication, TLS, unknown
//    databases. Messages name the redacted DSN; a password never appears in one.
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

// What the mysql_get_lock strategy offers (its registry entry and its store agree on this).
inline constexpr capability mysql_get_lock_capabilities =
    capability::exclusive | capability::noblock | capability::native_wait |
    capability::distributed | capability::crash_release | capability::counting;

struct mysql_get_lock_options {
    // mysql://[user[:password]@]host[:port]/database[?sslmode=...&sslrootcert=...] (mariadb://
    // too), read as the sql strategy reads it (parse_sql_dsn). The database only serves the
    // login: user-level locks are server-wide. Never printed but through redact_url.
    std::string dsn;
    // The password when the DSN has none, so that a config file can be readable by all: given
    // inline, or (password_from) from a file (read_secret_file: its owner's alone) or an
    // environment variable, read when the store starts. Never printed.
    std::string password;
    secret_source password_from;
    // Longest wait for a connection to be set up (TCP, TLS, login). Must be > 0. Connector/C
    // counts it in whole seconds, rounded up.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    // Longest wait for the reply to a statement; a wait for a lock is cut into slices of at most
    // half of it. Must be > 0; whole seconds at the client, rounded up.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
    // Most idle sessions kept open for later locks (a held lock keeps its own session beside
    // these). >= 1.
    std::size_t pool_size = 4;

    // Reads {"dsn": "...", "password" (or "password_file": "/path" or "password_env": "VARIABLE"),
    // "connect_timeout_s": 2,
    // "command_timeout_s": 5, "pool_size": 4}; only "dsn" is required. Throws config_error
    // (never naming the password).
    static mysql_get_lock_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): the server ("host:port").
    std::vector<std::string> backends() const;
};

// The server-side lock name of `name` (see Names above): "locksmith:" + name, or "locksmith#" +
// 32 hex digits.
std::string mysql_get_lock_name(std::string_view name);

// Reads the password file and connects once, so that a wrong DSN or password fails here.
// Throws invalid_argument_error for bad options, backend_error when the server cannot be reached
// or refuses the login, and what read_secret_file throws.
std::shared_ptr<store> make_mysql_get_lock_store(const mysql_get_lock_options& options);

}  // namespace locksmith::strategies
