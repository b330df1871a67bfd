// The `etcd` strategy: etcd v3's lock recipe (clientv3 concurrency.Mutex), spoken over etcd's
// v3 JSON gateway (HTTP/1.1, etcd >= 3.4).
//
//   etcd_options   the strategy's JSON options
//   make_etcd_store
//
// Contract:
//  - Owner: the lock object's key, bound to this process (not serializable). Each grant has a
//    lease of its own (TTL = the lock's TTL in whole seconds, rounded up; etcd raises TTLs below
//    its minimum, about 2 s, to that minimum); the lock is the etcd key
//    `<prefix><stable_name_hash(name) hex>/<lease id hex>`, created with the lease in a
//    transaction that checks it does not exist yet (create_revision == 0). The name itself never
//    reaches etcd, so any name (`/`, `..`, NUL, 1 MiB) is safe.
//  - Holder: the key with the lowest create revision under `<prefix><hash>/`. A waiter watches
//    only the one or two keys created just before its own for their deletion (no herd: a key
//    has at most two watchers), from etcd's current revision on; waiters are granted in the
//    order their keys were created (FIFO-fair). While it waits, the waiter keeps its lease alive
//    itself.
//  - Round trips: acquire is two (lease grant; the transaction, which also reads the holder and
//    the keys just before ours), release is one (lease revoke, which deletes the key), refresh
//    is one (lease keep-alive), holds() is one (range on the key). A failed try costs a third
//    (the revoke). A wait adds the watch (a connection per watched key) and, when something was
//    written between the transaction and the watch, one read of the queue; the release is the
//    whole hand-over: the next waiter is granted on the deletion event, without a request.
//  - Fencing token: the key's create revision, strictly increasing over the whole cluster.
//  - Lease: a holder that dies keeps the lock until its lease expires (its TTL, plus up to about
//    half a second of etcd's expiry sweep). A holder paused past its TTL loses the lock: holds()
//    says false (is_acquired() false and the loss callback), and a refresh returns false.
//    refresh(ttl) with another TTL moves the key to a new lease (same key, same create revision).
//  - Consensus: etcd's raft; a grant survives the loss of a minority of members.
//  - Endpoints: tried in order; a connection that fails is replaced by one to the first endpoint
//    that answers. A request whose connection broke is sent once more on a fresh connection
//    (every request the store makes is safe to repeat). While waiting, errors of a server that
//    is restarting are retried until the waiter's lease could have expired.
//  - A broken or hostile endpoint: a reply or watch message longer than 1 MiB, nested deeper
//    than 32 levels, or not HTTP/JSON as the gateway sends it is a backend_error (protocol,
//    permanent), never parsed further; a request ends within request_timeout whatever the
//    server does (trickles, never answers; a second attempt on a fresh connection included),
//    and a wait at its deadline.
//  - No TLS (https:// endpoints are refused with a message saying so: TLS would need a TLS
//    library in the statically linked locksmith command). With `user`, the store authenticates
//    (POST /v3/auth/authenticate) and sends the token with every request.
//  - Leaves behind: nothing once released; a killed holder's key and lease until its TTL ends.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

// What the etcd strategy offers (its registry entry and its store agree on this).
inline constexpr capability etcd_capabilities =
    capability::exclusive | capability::noblock | capability::native_wait | capability::expiring |
    capability::distributed | capability::fencing | capability::fair | capability::consensus;

struct etcd_options {
    // http://host:port of the cluster's members; at least one; tried in order.
    std::vector<std::string> endpoints;
    // Longest wait for a TCP connection to one endpoint. Must be > 0.
    std::chrono::milliseconds dial_timeout{std::chrono::seconds(2)};
    // Longest wait for the reply to one request, and for a watch to be confirmed (a watch
    // itself is bounded by the caller's deadline instead). Must be > 0.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(5)};
    // Prepended to every etcd key; any bytes, at most 1024.
    std::string prefix = "locksmith/";
    // etcd user and password (etcd's auth); empty user: no authentication. The password is never
    // printed.
    std::string user;
    std::string password;

    // Reads {"endpoints": "http://h:2379[,http://h2:2379...]", "dial_timeout_s": 2,
    // "request_timeout_s": 5, "prefix": "locksmith/", "user": "...", "password": "..."};
    // "endpoints" is required. Throws config_error (never naming the password).
    static etcd_options from_json(const nlohmann::json& options);
};

// Connects to the first endpoint that answers and checks that it is an etcd v3 gateway.
// Throws invalid_argument_error for bad options, backend_error when no endpoint answers.
std::shared_ptr<store> make_etcd_store(const etcd_options& options);

}  // namespace locksmith::strategies
