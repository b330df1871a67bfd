// SPDX-License-Identifier: MIT
// The `etcd` strategy: etcd v3's lock recipe (clientv3 concurrency.Mutex), spoken over etcd's
// v3 JSON gateway (HTTP/1.1, etcd >= 3.4).
//
//   etcd_options   the strategy's JSON options
//   make_etcd_store
//
// Contract:
//  - Owner: the lock object's key, bound to this process (not serializable). Each grant has a
//    lease of its own, which carries no other key while it holds (a new lease, or one this
//    store kept from a released key: Kept leases, below). Its TTL is the lock's TTL in whole
//    seconds, rounded up (etcd raises TTLs below its minimum, 1.5 election timeouts: 2 s by
//    default, to that minimum). The lock is the etcd key
//    `<prefix><stable_name_hash(name) hex>/<lease id hex>`, created with the lease in a
//    transaction that checks it does not exist yet (create_revision == 0). The name itself never
//    reaches etcd, so any name (`/`, `..`, NUL, 1 MiB) is safe.
//  - Holder: the key with the lowest create revision under `<prefix><hash>/`. A waiter follows
//    the one or two keys created just before its own on a watch of the name's queue for
//    deletions (from etcd's current revision on), which the store keeps open for its next wait
//    on the name (up to 8 names, each for 2 s after its wait); every waiter of a name reads each
//    deletion, and only those of the keys it follows make it look again or grant it. Waiters
//    are granted in the order their keys were created (FIFO-fair). While it waits, the waiter
//    keeps its lease alive itself.
//  - Round trips: acquire is one with a kept lease (the transaction, which also reads the holder
//    and the keys just before ours), two otherwise (a lease grant first, or a keep-alive of a kept
//    lease that waited), release is one (the key's delete, or the lease's revoke, which deletes
//    the key), refresh is one (lease keep-alive), holds() is one (range on the key). A failed try
//    adds one (the delete or the revoke). An uncontended acquire + release on a store that
//    acquires again is two round trips. A wait adds the watch (a connection, unless one is kept)
//    and, when something was written between the transaction and the watch, one read of the queue;
//    the release is the whole hand-over: the next waiter is granted on the deletion event, without
//    a request.
//  - Fencing token: the key's create revision, strictly increasing over the whole cluster.
//  - Lease: a holder that dies keeps the lock until its lease expires (its TTL, plus up to about
//    half a second of etcd's expiry sweep). A holder paused past its TTL loses the lock: holds()
//    says false (is_acquired() false and the loss callback), and a refresh returns false.
//    refresh(ttl) with another TTL moves the key to a new lease (same key, same create revision).
//  - Consensus: etcd's raft; a grant survives the loss of a minority of members.
//  - Endpoints: tried in order; a connection that fails is replaced by one to the first endpoint
//    that answers (failover: a killed member's requests, keep-alives included, move to the next
//    member within one request_timeout); a member that timed out or answered 5xx (no leader) is
//    left for the next endpoint. A keep-alive the server failed (the gateway's {"error"} reply
//    of the keep-alive stream, e.g. during a leader change) is a transient backend_error, never
//    a lost lease. A request whose connection broke is sent once more on a
//    fresh connection (every request the store makes is safe to repeat). While waiting, errors of a
//    server that is restarting are retried until the waiter's deadline (its key keeps its place:
//    etcd keeps leases across a restart, and the keep-alive that comes first once the server
//    answers says whether the lease lived); a wait without a deadline gives up once its lease
//    could have expired.
//  - A broken or hostile endpoint: a reply or watch message longer than 1 MiB, nested deeper
//    than 32 levels, or not HTTP/JSON as the gateway sends it is a backend_error (protocol,
//    permanent), never parsed further; a request ends within request_timeout whatever the
//    server does (trickles, never answers; a second attempt on a fresh connection included),
//    and a wait at its deadline.
//  - TLS: https:// endpoints (all or none of them) speak TLS >= 1.2 (OpenSSL). The server's
//    certificate chain is verified against ca_file (or the system's CA store) and its name
//    against server_name, or else the endpoint's host (an IP address against the certificate's
//    IP entries); neither check can be turned off. cert_file/key_file present a client
//    certificate (etcd's --client-cert-auth). etcd 3.4's JSON gateway answers HTTP 400 to a
//    client certificate that has a CommonName (its CN-as-user rule, CVE-2018-16886): give one
//    without a CN (README, etcd). A refused certificate, host name or handshake is a
//    backend_error (code "tls", permanent) naming the endpoint and what failed, never a key.
//    With `user`, the store authenticates (POST /v3/auth/authenticate) and sends the token with
//    every request.
//  - Counting (a key with a limit, named_semaphore): a permit is a key
//    `<prefix><hash hex>.permits/<lease id hex>` under the holder's own lease; the first `limit`
//    keys by create revision hold, the others wait, in order (FIFO-fair). The limit is kept in
//    `<prefix><hash hex>.limit` (decimal text, no lease), made by the name's first user and kept
//    for good (Curator's rule); each permit key is created in a transaction that compares it
//    with the owner's limit, so another limit is refused (invalid_argument_error naming both)
//    and never adds holders; an administrator deletes the key (etcdctl del) to change it. Data
//    there that is not a limit is a backend_error ("foreign"). Limits up to 1000 (a waiter reads
//    the keys before its own, up to limit + 1). Waiting: the first waiter (exactly `limit` keys
//    before its own) watches the permits' range for deletions (with prev_kv: a deletion before
//    its own key is its grant, without another read); each other waiter watches only the key
//    just before its own, which a waiter granted after a wait rewrites (same value and lease),
//    so that the one behind looks again. A release wakes one or two waiters, never all. A
//    killed holder's permit comes back when its lease ends. A permit's refresh also reads its
//    key: another client that deletes a holder's key (its lease alive) gives its place to a
//    waiter, and the holder learns at its next refresh or is_acquired() that it lost the permit;
//    keys another client adds take places (fewer holders, never more). Fencing token: the key's
//    create revision. Round trips: a grant is two, one with a kept lease (one more for a name's
//    first user), a release one, a refresh two.
//  - fork(): a child's copy of a grant releases nothing (the lease stays the parent's), and the
//    child takes none of the leases its parent kept.
//  - Leaves behind: nothing once released (but a semaphore's limit key, and a store's kept
//    leases, without keys: see Kept leases); a killed holder's key and lease until its TTL ends.
//    A revocation that cannot reach etcd (a release, or a waiter giving up, while the server is
//    down) leaves the lease to this process's next acquisition on the same cluster (any store),
//    which revokes it first: etcd keeps leases across a restart and renews each to its full TTL
//    (plus its election timeout) when it starts, and the key would block the name that long.
//    A lock whose release failed so is not renewed or re-acquired any more (holds() says
//    false); release() may be called again (`locksmith run` does, for up to 10 s, before it
//    exits: a process that exits in the outage cannot revoke later). A waiter whose deadline
//    passes before the server answers again leaves its lease the same way.
//  - Connections: unary requests share a store's keep-alive connections (at most 16 idle); one
//    the server closed while idle is noticed (stale) or, when the close crosses the request, the
//    request is sent once more on a fresh one. A watch needs a connection of its own while it is
//    open, and etcd 3.4's gateway (Go's HTTP/1.1 server, not full duplex) ends a watch only with
//    its connection: hence the queue's watch kept open between waits (Holder, above), rather
//    than a watch per key closed after each wait; a kept watch the server closed meanwhile is
//    replaced at once. A new connection over TLS resumes the session of the store's earlier one
//    to that member (strategies/common/tls): no certificate exchange. Counting waits still
//    open a watch per wait.
//  - Kept leases (issue 24): a store that has granted more than once deletes a released (or
//    failed try's) key and keeps its lease, up to 8, for its next acquisition with the same TTL
//    in whole seconds, which then needs no lease grant. A kept lease serves as it is when it was
//    renewed less than a twentieth of its TTL (at most 1 s) ago, else after a keep-alive: a
//    grant's lifetime counts from its lease's last renewal. One that another client revoked
//    (or that expired) is replaced by a new lease at the acquisition that finds it gone. A
//    store's first release revokes (a process that locks once leaves nothing); a store revokes
//    its kept leases when it is destroyed, and those of a process that exits without that end at
//    their TTL, holding no key. A release whose delete cannot reach
//    etcd leaves the lease among the orphans (above), as a failed revoke does.
//  - One lease per grant, not one per session (clientv3's concurrency.Session), decided so
//    (issue 24, twice): kept leases give the two-round-trip pair without what a session lease
//    would change: (1) the TTL is per lock in this API: a lock its holder stops refreshing must
//    end at its own TTL while the process renews others, and a session lease kept alive for one
//    lock would keep them all; (2) a killed holder would block each name for the session's TTL,
//    not the lock's; (3) a release that cannot reach etcd would leave a key under a lease that
//    lives on (the orphan recovery revokes leases, it would have to delete keys); (4) another
//    client revoking one lease would end every lock of the process at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies {

// What the etcd strategy offers (its registry entry and its store agree on this).
inline constexpr capability etcd_capabilities =
    capability::exclusive | capability::noblock | capability::native_wait | capability::expiring |
    capability::distributed | capability::fencing | capability::fair | capability::consensus |
    capability::counting;

struct etcd_options {
    // http://host:port or https://host:port of the cluster's members; at least one; tried in
    // order; all of one scheme.
    std::vector<std::string> endpoints;
    // TLS (https:// endpoints only): CA certificates (PEM) that sign the servers' certificates
    // (empty: the system's store); a client certificate and its unencrypted key (PEM; both or
    // neither); the name the servers' certificates must have (empty: each endpoint's host).
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    std::string server_name;
    // Longest wait for a TCP connection to one endpoint. Must be > 0.
    std::chrono::milliseconds dial_timeout{std::chrono::seconds(2)};
    // Longest wait for the reply to one request, and for a watch to be confirmed (a watch
    // itself is bounded by the caller's deadline instead). Must be > 0.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(5)};
    // Prepended to every etcd key; any bytes, at most 1024.
    std::string prefix = "locksmith/";
    // etcd user and password (etcd's auth); empty user: no authentication. The password is never
    // printed. It may come from a file or an environment variable instead (password_from).
    std::string user;
    std::string password;
    secret_source password_from;

    // Reads {"endpoints": "http://h:2379[,http://h2:2379...]", "dial_timeout_s": 2,
    // "request_timeout_s": 5, "prefix": "locksmith/", "user": "...", "password": "..." (or
    // "password_file": "/path" or "password_env": "VARIABLE"),
    // "ca_file": "...", "cert_file": "...", "key_file": "...", "server_name": "..."};
    // "endpoints" is required; the TLS options need https:// endpoints. Throws config_error (never
    // naming the password).
    static etcd_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): each endpoint ("host:port").
    std::vector<std::string> backends() const;
};

// The key prefix under which `name`'s lock keys queue, `<prefix><hash hex>/` (see Owner above):
// a frozen format (doc/FORMATS.md), for `etcdctl get --prefix`.
std::string etcd_lock_queue(std::string_view prefix, std::string_view name);
// A counting semaphore's permit keys queue under `<prefix><hash hex>.permits/`, and its limit
// is kept in `<prefix><hash hex>.limit` (see Counting above): frozen formats (doc/FORMATS.md).
std::string etcd_permit_queue(std::string_view prefix, std::string_view name);
std::string etcd_permit_limit_key(std::string_view prefix, std::string_view name);

// Connects to the first endpoint that answers and checks that it is an etcd v3 gateway.
// Throws invalid_argument_error for bad options, backend_error when no endpoint answers.
std::shared_ptr<store> make_etcd_store(const etcd_options& options);

}  // namespace locksmith::strategies
