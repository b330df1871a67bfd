// SPDX-License-Identifier: MIT
// The `redis` strategy: locks kept by one Redis server (its protocol through hiredis), shared by
// every host that talks to it.
//
//   redis_endpoint  where the server is, parsed from a URL
//   redis_options   the strategy's JSON options
//   make_redis_store
//
// Contract:
//  - Owner: the key's 128-bit token. Any process holding the key (serialized or not) is the
//    owner; threads and processes are alike. A lock object may move between threads.
//  - Lease: every grant has a TTL kept by the server (wall clock of the server). A holder that
//    dies keeps the lock until its TTL runs out; nothing else releases it (no crash_release).
//    A holder that pauses past its TTL loses the lock without noticing: check the fencing token.
//  - Exclusive grants of a free name are a plain `SET <prefix>lock:<name> <token> NX PX <ttl>`
//    (one round trip, no script: a Lua call costs the server several times the command). Any
//    other grant (re-acquire, promotion, reader sets, a waiting writer) goes through a script.
//    Refresh and release are compare-and-pexpire and compare-and-delete scripts, loaded once and
//    called by SHA (reloaded after NOSCRIPT).
//  - Fencing: a token is the server's clock (TIME) in microseconds, or one more than the name's
//    last token (`<prefix>fence:<name>`, never deleted, one small key per name ever locked) when
//    that is larger. So tokens keep increasing when the server loses its data (a restart
//    without persistence, kill -9 after the last snapshot, a failover to a replica that missed
//    the last writes), as long as its clock does not go back past the last grant before the
//    loss. A scripted grant takes its token in the same script; the plain SET grant takes it on
//    first request (named_lock::fencing_token: one more round trip), by a script that draws one
//    only while the owner still holds the lock. Either way a token is drawn during its grant,
//    so tokens increase strictly in grant order, owners that never ask pay nothing, and an
//    owner that already lost the lock gets expired_error instead of a token.
//  - Shared grants: the lock key is then a sorted set of reader tokens scored by their expiry
//    (server time, ms). The policy favours writers: a writer that waits registers in
//    `<prefix>wait:<name>` and, while it waits, no new reader is admitted (readers already
//    holding may renew). A sole reader may promote; a writer may demote; a failed promotion
//    keeps the read lock. Two readers that both wait to promote deadlock until their deadlines.
//  - Waiting writers are served first come, first served: a writer that must wait enqueues
//    itself in `<prefix>queue:<name>` and sleeps on a channel of its own; a release hands the
//    lock straight to the first live waiter (sets the lock to its token, with its TTL) and wakes
//    that waiter alone. A waiter renews its place at least every second; one that died loses
//    it when its registration lapses (3 s after its last renewal), and a grant handed to it
//    within those 3 s ends with its TTL, as any grant of a holder that died. A name
//    freed by an expiry (not a release) can go to a newcomer's plain attempt before the queue's
//    first retries. Waiting readers mark `<prefix>readers:<name>`, subscribe to
//    `<prefix>chan:<name>`, retry once, and retry at every release announced there. No wait
//    outlasts the obstacle's TTL without a retry, so a lost message costs latency, not
//    liveness. Each waiter uses one extra connection while it waits; up to pool_size of them
//    are kept (writers' still subscribed) for later waits.
//  - Counting semaphores (capability counting; a key with limit() = N): the holders of a name's
//    permits are a sorted set `<prefix>permits:<name>` of owner tokens scored by their expiry
//    (server time, ms); one script drops the holders whose TTL ran out and grants when fewer
//    than N remain. The limit is kept in `<prefix>limit:<name>` from the grant that finds none
//    until the last holder leaves (both keys expire with the latest holder): while a permit is
//    held, an owner asking for another limit gets invalid_argument_error naming both; once none
//    is, the next grant sets the limit anew. Refresh and release touch the owner's own entry
//    only; a release announces itself on `<prefix>chan:<name>`, where waiters for a permit
//    sleep (subscribed) and all retry: permits are not served in order, and a waiter whose
//    retry loses sleeps again. A waiter also retries when the first holder's TTL runs out.
//    Crash: a holder that dies keeps its permit until its TTL runs out. Fencing tokens come
//    from the name's fence key, so they increase across the name's permits and its lock (a
//    semaphore and the lock of one name are otherwise separate). Behind Sentinel and in a
//    cluster (all keys of the name in its slot) a permit is confirmed with WAIT as a lock is.
//    A key of the name that is not ours (another type, a limit outside 1..1000000) is a
//    backend_error "foreign" naming the key, never overwritten; holders with scores in the
//    past are expired ones. `status` reports the live permits and the kept limit.
//  - Names are binary-safe (any bytes, up to 1 MiB) and are used unhashed in the keys.
//  - Needs Redis >= 5 (the scripts read the server's TIME before writing); Redis Cluster needs
//    Redis >= 7 (sharded pub/sub).
//  - Redis Cluster (`cluster`): every key and channel of one name carries the same hash tag,
//    `<prefix><kind>{<8 hex digits of the name's FNV-1a hash>}<name>`, so that all of them are in
//    one slot and each script runs on one node; the releases' announcements are sharded
//    (SPUBLISH in the scripts, SSUBSCRIBE on the slot's master). The slot map comes from CLUSTER
//    SLOTS, asked of a known node (the configured ones last) when no map is known, after a
//    connection error and after MOVED; MOVED and ASK (with ASKING) are followed, and TRYAGAIN
//    retried, within command_timeout (after 2 redirections with pauses: the two nodes of a
//    migration may each name the other for a moment). More than 5 redirections by then, or a
//    MOVED that names the node that sent it, is a backend_error "redirect" (permanent: the
//    nodes do not agree), never a loop. A subscription
//    that the server ends because its slot moved away (sunsubscribe) is made again on the slot's
//    new master. Each master has its own pool (pool_size connections). A failover is what it is
//    behind Sentinel: `wait_replicas` (default 1) confirms every grant, refresh, hand-over and
//    token with WAIT on the master that made it.
//  - Replication: with one `url`, the server named is the only copy that counts; a failover to
//    an asynchronous replica outside locksmith's knowledge can lose grants (a promoted replica
//    may not have them). Behind Sentinel (`sentinels`), every grant, refresh, hand-over and
//    fencing token is confirmed with `WAIT <wait_replicas> <command_timeout / 2>` before it is
//    reported: then it is on wait_replicas replicas, so on the one Sentinel promotes when
//    wait_replicas is the number of replicas (the guarantee needs that). A grant not confirmed
//    is released and reported as backend_error "NOREPLICAS" (transient: a waiter keeps trying
//    until its deadline; an unconfirmed promotion or repeated grant releases what the owner held
//    too, as it cannot tell which of its writes a failover keeps); a refresh not confirmed is the
//    same error and does not extend the lease, so the watchdog retries and reports the loss
//    (on_lost) when the last confirmed lease runs out. A demoted master can take writes for seconds
//    and the Sentinels still name it for about a second after a failover starts, but it has lost
//    the replica that was promoted, so its writes are never confirmed: one holder per name, and
//    fencing tokens keep increasing across the failover (the fence key of every token reported is
//    on the promoted replica, the next token is at least one more). The master named by a Sentinel
//    is used only after its ROLE says master; a connection error, a READONLY reply or an
//    unconfirmed write makes the next connection ask the Sentinels again, and drops the pooled
//    connections to the old master.
//  - TLS: a rediss:// URL (with sentinels or a cluster, "tls": true) speaks TLS >= 1.2 (OpenSSL;
//  hiredis is
//    used for the protocol only).
//    The server's certificate chain is verified against ca_file (or the system's CA store) and
//    its name against server_name, or else the URL's host (an IP address against the
//    certificate's IP entries); neither check can be turned off. cert_file/key_file present a
//    client certificate (the server's tls-auth-clients). A refused certificate, host name or
//    handshake, and a client certificate the server refuses (under TLS 1.3 known only at the
//    first reply), is a backend_error with code "tls" (permanent) naming the redacted endpoint
//    and what failed, never a key or the password. The handshake is bounded by connect_timeout.
//  - A broken or hostile server: a reply longer than 16 MiB is a backend_error ("protocol",
//    permanent), never buffered further; every command ends within command_timeout whatever the
//    server does (never answers, trickles), over TLS or not.
//  - Fork: a store may be used in a fork()ed child, which opens connections of its own and
//    never writes or reads on its parent's (their TLS sessions stay the parent's); a request
//    that would have used one the parent returned just before the fork fails instead
//    (code "fork", transient: a retry opens a connection).
//  - Errors: backend_error whose native_code is the Redis error prefix ("WRONGPASS", "NOAUTH",
//    "NOSCRIPT") or the client's ("timeout", "eof", "errno N", "resolve", "tls", "protocol");
//    its kind() is
//    transient for a lost or slow connection and a server loading, busy or failing over,
//    permanent for a rejected password, script or argument. A password never appears in a
//    message.
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

// What the redis strategy offers (its registry entry and its store agree on this).
inline constexpr capability redis_capabilities =
    capability::exclusive | capability::shared | capability::noblock | capability::native_wait |
    capability::expiring | capability::distributed | capability::serializable |
    capability::fencing | capability::counting;

struct redis_endpoint {
    // TLS (a rediss:// URL).
    bool tls = false;
    // TCP host (name, IPv4, or IPv6 without brackets); empty for a Unix socket.
    std::string host = "127.0.0.1";
    // TCP port, 1..65535.
    int port = 6379;
    // Path of a Unix socket; empty for TCP.
    std::string socket_path;
    // ACL user ("" = the default user). Sent with AUTH only when a password is given.
    std::string user;
    // Password ("" = no AUTH). Never printed: see redacted().
    std::string password;
    // Database number for SELECT (0 = the default database).
    int db = 0;

    // The URL with the password replaced by "***", for messages.
    std::string redacted() const;
};

// Parses `redis://[[user]:password@]host[:port][/db]` (user and password percent-decoded,
// IPv6 hosts in brackets), the same with `rediss://` (TLS), and `unix:///path/to.sock[?db=N]`.
// Throws invalid_argument_error; its message never contains the password.
redis_endpoint parse_redis_url(std::string_view url);

struct redis_options {
    // Where the server is: see parse_redis_url. Behind Sentinel only its user, password and db
    // count (the master's credentials); host and port come from the Sentinels.
    redis_endpoint endpoint;
    // Sentinel mode when not empty: the Sentinels to ask, in this order, for the address of
    // `master_name` (host and port, with the Sentinels' own user and password; db unused).
    std::vector<redis_endpoint> sentinels;
    std::string master_name;
    // Cluster mode when not empty: nodes of a Redis Cluster to ask for its slot map (any nodes;
    // the others are learnt from them), with the endpoint's user and password; db is 0.
    std::vector<redis_endpoint> cluster;
    // Where the master's and the Sentinels' passwords come from in place of the options (a
    // file, read_secret_file, or an environment variable), read when the store is made.
    secret_source password_from;
    secret_source sentinel_password_from;
    // Replicas that must acknowledge a grant, refresh or fencing token (WAIT) before it counts;
    // 0 = no WAIT. Sentinel mode needs >= 1 and is safe across a failover when it is the number
    // of replicas; cluster mode defaults to 1 (0 only for a cluster without replicas).
    int wait_replicas = 0;
    // Longest wait for a TCP or socket connection to be set up (with rediss://, its TLS handshake
    // included). Must be > 0.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(1)};
    // Longest wait for the reply to one command (not for a lock: waiting for a release has no
    // command timeout, it is bounded by the caller's deadline). Must be > 0.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(2)};
    // Prepended to every key and channel this strategy uses; lets several applications share
    // one database. May be empty.
    std::string key_prefix = "locksmith:";
    // Most connections kept open for commands (waiters use their own, one each). >= 1.
    std::size_t pool_size = 8;
    // TLS (rediss:// only): CA certificates (PEM) that sign the server's certificate (empty: the
    // system's store); a client certificate and its unencrypted key (PEM; both or neither); the
    // name the server's certificate must have (empty: the URL's host).
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    std::string server_name;

    // Reads {"url": "...", "connect_timeout_s": 1, "command_timeout_s": 2, "key_prefix": "...",
    // "pool_size": 8, "password_file": "/abs/path" (or "password_env": "VARIABLE"),
    // "wait_replicas": 0, "ca_file": "...",
    // "cert_file": "...", "key_file": "...", "server_name": "..."} (the TLS options need a
    // rediss:// url), or, in place of "url", {"sentinels": ["host:port", ...], "master_name":
    // "...", "sentinel_user": "...", "sentinel_password" (or _file, _env), "user", "password"
    // (or _file, _env), "db", "wait_replicas": 1, "tls": false, and with "tls": true the TLS
    // options, for the Sentinels and the master alike}, or {"cluster":
    // ["host:port", ...], "user", "password" (or _file, _env), "wait_replicas": 1, "tls": false,
    // and with "tls": true the TLS options} (no db, no braces in key_prefix). Exactly one of "url",
    // "sentinels" and "cluster". Throws config_error (never naming a password).
    static redis_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): the server ("host:port" or "unix:/path"), with sentinels
    // the master's name at each Sentinel ("mymaster@host:port"), in a cluster each node given.
    std::vector<std::string> backends() const;
};

// The keys (and the channel) a name has in Redis, each written `<kind>:` in its key:
//   lock      the exclusive holder's token (a string with the TTL)
//   fence     the name's fencing counter
//   wait      the waiters' registrations; queue  their order; readers  the shared holders
//   chan      the channel a release is announced on
//   permits   a counting semaphore's holders (a sorted set scored by expiry); limit  its limit
enum class redis_key_kind { lock, fence, wait, queue, readers, chan, permits, limit };

// The Redis key (or channel) of kind `kind` for `name`: `<key_prefix><kind>:<name>`, with the
// name's hash tag before the name when `cluster` (see Redis Cluster above). A frozen format
// (doc/FORMATS.md): for `redis-cli` and ACLs.
std::string redis_key(std::string_view key_prefix, redis_key_kind kind, std::string_view name,
                      bool cluster);

// Reads the password files, then connects (and authenticates) once, so that a wrong endpoint
// fails here: behind Sentinel, asks the Sentinels and checks the master's ROLE.
// Throws invalid_argument_error for bad options (TLS options without rediss://, a certificate or
// key file that cannot be loaded, an unreadable or unsafe password file), backend_error when no
// server can be reached or one refuses the credentials or the TLS handshake.
std::shared_ptr<store> make_redis_store(const redis_options& options);

}  // namespace locksmith::strategies
