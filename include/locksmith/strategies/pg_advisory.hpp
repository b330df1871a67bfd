// SPDX-License-Identifier: MIT
// The `pg_advisory` strategy: PostgreSQL's session-level advisory locks (libpq), shared by
// every host that talks to the same database.
//
//   pg_advisory_options   the strategy's JSON options
//   pg_advisory_lock_key  the 64-bit advisory key of a name
//   make_pg_advisory_store
//
// Contract:
//  - Owner: the lock object's key, bound to this process (not serializable). Every key that
//    holds a lock holds it through a database session (connection) of its own, pinned to the key
//    from the grant until the release, because advisory locks are re-entrant and counted per
//    session: two keys sharing a session would both be granted. So two lock objects for one name
//    exclude each other in one process as across hosts. Released sessions go back to a pool of
//    up to pool_size idle ones, with no advisory lock left on them (pg_advisory_unlock_all()).
//  - Statements: try is `SELECT pg_try_advisory_lock[_shared](k)` (one round trip); release is
//    `SELECT pg_advisory_unlock_all()` on the key's session (one round trip). The name never
//    reaches SQL: only the integer k does, so any name (quotes, NUL, 1 MiB) is safe.
//  - Waiting sleeps in the server: `SET LOCAL lock_timeout = '<ms left>'; SELECT
//    pg_advisory_lock[_shared](k)` in one round trip; the timeout (SQLSTATE 55P03) ends the wait
//    with `false` and leaves no waiting backend. lock() waits without a timeout.
//  - Keys: k is the first 64 bits of stable_name_hash(name), passed as the bigint form (pg_locks
//    shows classid = high 32 bits, objid = low 32 bits, objsubid = 1; the (int, int) form has
//    objsubid = 2 and never meets ours). Two names collide with probability 2^-64; among n names
//    held at the same time, some pair collides with probability about n^2 / 2^65 (10^6 names:
//    3e-8). A collision makes two names one lock: less concurrency, never two holders.
//  - Promote (shared -> exclusive) takes the exclusive lock in the same session while the shared
//    one is still held (a session never conflicts with itself), then drops the shared one, in
//    one statement: no instant holds neither. It fails (false, the read lock kept) while other
//    readers hold. Two readers that both wait to promote deadlock: the server's deadlock detector
//    (deadlock_timeout, 1 s by default) cancels one wait, which then throws acquire_error with
//    its read lock kept; the other promotes once that reader releases. Demote (exclusive ->
//    shared) takes the shared lock in the same session, then drops the exclusive one: always
//    succeeds, at once.
//  - Crash: a holder that dies frees its locks when the server sees its session end (the kernel
//    closes the socket of a killed process: at once). A session that ends otherwise (server
//    restart, pg_terminate_backend, network failure) loses its locks: is_acquired() then asks the
//    server (pg_locks, for the session's own backend) and says false; the lost lock is never
//    re-granted behind the owner's back, since a pinned session never reconnects. A server that
//    does not answer within command_timeout tells nothing: is_acquired() throws that
//    backend_error ("timeout") once, and says false afterwards (the session was closed).
//  - Counting semaphores (capability counting; a key with limit() = N, 1..10000: each permit is
//    a session, so a larger N is never reached): permit i of a name is the advisory lock
//    (int4 a, int4 i) of the holder's own session, and the holder also holds (int4 b, int4 N)
//    shared (a, b: the halves of the low 64 bits of stable_name_hash(name); pg_locks shows them
//    with objsubid 2, so they never meet a name's lock, which is a bigint key). One statement,
//    under the transaction lock (b, 0) that makes one name's grants one at a time, refuses when
//    a holder holds another limit (invalid_argument_error naming both: one name, one limit
//    while any permit is held) and takes the first free permit; its number is the key's
//    portable_state "permit" (LOCKSMITH_PERMIT). PostgreSQL cannot wait for any one of N locks:
//    the store waits natively for locks only (waits_natively), and named_lock polls for a permit
//    with its backoff, woken early by a release on this host. Crash: a holder's permit ends with
//    its session, as a lock does. status() counts the permits held and names the kept limit. Two
//    names whose a (or b) collide, about n^2 / 2^33 among n semaphores in use (1,000: 1e-4),
//    share their permits (fewer holders) or refuse each other's limit: never more holders.
//  - Transaction-mode poolers (PgBouncer pool_mode=transaction) break session locks: connect to
//    PostgreSQL directly or through session pooling.
//  - TLS: libpq's DSN parameters (sslmode, sslrootcert, sslcert, sslkey). A DSN that names a
//    certificate file without sslmode gets sslmode=verify-full (libpq's default, prefer, would
//    verify nothing): weaker modes must be written out.
//  - Errors: backend_error whose native_code is "SQLSTATE xxxxx" when the server sent one (at
//    connection too: an unknown role or database, a role allowed only over TLS), "tls" when
//    TLS cannot be set up as asked (a certificate that does not verify against the CA or the
//    host name, an unusable certificate or key file, a server without TLS), else "connect",
//    "timeout", "connection" or "dlopen" (libpq.so.5 cannot be loaded). kind() is transient
//    for a server that cannot be reached, went away, is starting or has too many connections,
//    and for timeouts and deadlocks; permanent for authentication, TLS, unknown databases and
//    bad statements. Messages name the redacted DSN; a password never appears in one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies {

// What the pg_advisory strategy offers (its registry entry and its store agree on this).
inline constexpr capability pg_advisory_capabilities =
    capability::exclusive | capability::shared | capability::noblock | capability::native_wait |
    capability::distributed | capability::crash_release | capability::counting;

struct pg_advisory_options {
    // postgresql://[user[:password]@]host[:port]/database[?param=value...] (postgres:// too):
    // libpq's URI form; the query takes libpq connection parameters (sslmode=verify-full,
    // sslrootcert=/path/ca.pem, ...; see TLS above).
    // Never printed but through redact_url.
    std::string dsn;
    // The password when the DSN has none, so that a config file can be readable by all: given
    // inline, or (password_from) from a file or an environment variable. Never printed.
    std::string password;
    secret_source password_from;
    // Longest wait for a connection to be set up (TCP, TLS, authentication). Must be > 0.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
    // Longest wait for the reply to a statement that does not wait for a lock (try, release,
    // is_acquired). A statement that waits for a lock is bounded by the caller's deadline plus
    // this. Must be > 0.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(5)};
    // Most idle sessions kept open for later locks (a held lock keeps its own session beside
    // these). >= 1.
    std::size_t pool_size = 4;

    // Reads {"dsn": "...", "password" (or "password_file": "/path" or "password_env": "VARIABLE"),
    // "connect_timeout_s": 2, "command_timeout_s": 5, "pool_size": 4}; only "dsn" is required.
    // Throws config_error (never naming the password).
    static pg_advisory_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): each server the DSN names ("host:port"; a Unix socket as
    // "unix:DIR:port").
    std::vector<std::string> backends() const;
};

// The advisory key (bigint) of `name`: the first 64 bits of stable_name_hash(name).
std::int64_t pg_advisory_lock_key(std::string_view name) noexcept;

// Connects once, so that a wrong DSN fails here.
// Throws invalid_argument_error for bad options, backend_error when the server cannot be reached
// or refuses the login.
std::shared_ptr<store> make_pg_advisory_store(const pg_advisory_options& options);

}  // namespace locksmith::strategies
