// SPDX-License-Identifier: MIT
// The `zookeeper` strategy: Apache Curator's lock recipe (InterProcessMutex and
// InterProcessReadWriteLock) on ZooKeeper, through its C client.
//
//   zookeeper_options      the strategy's JSON options
//   zookeeper_lock_parent  the znode under which a name's requests queue
//   make_zookeeper_store
//
// Contract:
//  - One ZooKeeper session per store, shared by every key of the store (the C client is
//    thread-safe). Its nodes are ephemeral: they live as long as the session.
//  - A request is an ephemeral sequential node under the name's parent,
//    `<root>/<stable_name_hash(name) as 32 hex digits>`, so that any name (with '/', "..", NUL,
//    1 MiB) maps to one short, safe node; a hash collision makes two names one lock (less
//    concurrency, never two holders). The node is `<owner token>-write-<seq>` or
//    `<owner token>-read-<seq>`: the owner's token makes a create whose reply was lost (a
//    connection loss during the create) findable again, as Curator's protection mode does.
//  - A request node's data is its owner's {"host": ..., "pid": ...} (JSON): status() names
//    each holder as "pid 42 on host a since <the node's creation, UTC> (node <name>)" (for a
//    holder that waited, since it queued).
//  - Grant: a write node holds when no other owner's node has a lower sequence; a read node
//    holds when no other owner's write node has one (readers wait only for earlier writers).
//    A waiter watches only the node it waits for (the nearest earlier one, or earlier write
//    node for a reader): no herd, native waiting, first come first served in sequence order.
//  - The parent is a container node (CreateMode CONTAINER): the server removes it once its last
//    request is gone (ZooKeeper checks every containerCheckIntervalMs, 60 s by default). The
//    root and the nodes above it are persistent and stay.
//  - Fencing token: the node's czxid (the transaction id of its creation), which increases over
//    the whole ensemble, also when a parent was removed and created again (the sequence number
//    would then start over).
//  - Promote (read -> write) queues a write node behind the owner's read node and needs every
//    other node before it gone; a writer that queued between the two would wait for this reader
//    forever, so the promotion fails with acquire_error instead (the read lock is kept). Demote
//    (write -> read) queues a read node, granted at once, then deletes the write node.
//  - Loss: a session that expires (the server did not hear from the client within the session
//    timeout: a paused or partitioned process) takes its nodes with it; is_acquired() then says
//    false and the loss is reported. A disconnect shorter than the session timeout keeps the
//    lock: is_acquired() waits for the client to reconnect, for at most the session timeout.
//    The store then starts a new session for later requests.
//  - Crash: a holder that dies frees its locks when its session expires (session_timeout).
//  - Access control: ZooKeeper checks a node's delete permission on its parent, so every node
//    the store creates (the root and the nodes above it, each name's parent, each request) gets
//    one ACL. With `auth` (digest:USER:PASSWORD, added to every session, before any request),
//    it is "auth ids: all, world:anyone: read": only clients of that identity can create,
//    change or delete them; anyone may read (status). At each session's start the root, and
//    at a session's first request for a name that name's parent, are checked: one that lets
//    another identity do more than read (left by a locksmith without auth, or another client)
//    protects nothing, and the request fails with a permanent backend_error ("ZOO acl") that
//    says how to fix it. Without `auth` every node is open (world:anyone: all): any client of
//    the ensemble can delete a holder's node and give the lock to a second holder; the
//    descriptor's warnings() say so (`config check`, `explain`).
//  - Counting (a key with a limit, named_semaphore): a permit is an ephemeral sequential node
//    `<owner token>-permit-<seq>` under the container `<root>/<hash hex>.permits`; the first
//    `limit` nodes by sequence hold (FIFO-fair). A waiter watches the node just before its own;
//    the first waiter (exactly `limit` nodes before it) watches every one of them, since any
//    holder's release lets it in; a waiter granted while a node was behind its own rewrites its
//    node's data, so that the waiter behind, which may be the first waiter now, looks again. A
//    release wakes one or two waiters, never all. The limit is the data (decimal) of the
//    persistent node `<root>/<hash hex>.limit`, made by the name's first user and kept for good
//    (Curator's rule): another limit is invalid_argument_error naming both; an administrator
//    deletes the node to change it. Data there that is not a limit 1..1000 is a backend_error
//    ("foreign"). Limits up to 1000. A crashed holder's permit goes with its session (the
//    session timeout). Fencing token: the node's czxid. Another client that deletes a holder's
//    node gives its place to a waiter: the holder learns it from its loss watch (is_acquired()
//    false, the loss callback), as for a lock; nodes another client adds take places (fewer
//    holders, never more).
//  - Errors: backend_error whose native_code is the C client's "ZOO <rc>" (e.g. "ZOO -4" for
//    ZCONNECTIONLOSS), naming the hosts.
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

// What the zookeeper strategy offers (its registry entry and its store agree on this).
inline constexpr capability zookeeper_capabilities =
    capability::exclusive | capability::shared | capability::noblock | capability::native_wait |
    capability::distributed | capability::crash_release | capability::fencing | capability::fair |
    capability::consensus | capability::counting;

struct zookeeper_options {
    // "host:port,host:port[/chroot]", as the C client takes it. The chroot must exist.
    std::string hosts;
    // The session timeout asked of the server, which clamps it to its own
    // [minSessionTimeout, maxSessionTimeout] (2 and 20 ticks by default). A holder that dies or
    // is cut off for longer loses its locks.
    std::chrono::milliseconds session_timeout{std::chrono::seconds(10)};
    // Longest wait for the first connection.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
    // Absolute path under which the per-name parents go (created when missing).
    std::string root = "/locksmith";
    // "digest:USER:PASSWORD" (a secret): the identity every session adds (zoo_add_auth) and
    // that alone may change the nodes; empty = none (open ACLs). Or auth_from: a file that
    // holds it (read_secret_file: its owner's alone) or an environment variable, read when the
    // store starts. At most one of them.
    std::string auth;
    secret_source auth_from;

    // Reads {"hosts": "...", "session_timeout_ms": 10000, "connect_timeout_ms": 5000,
    // "root": "/locksmith", "auth": "digest:u:p" | "auth_file": "/path" |
    // "auth_env": "VARIABLE"}; only "hosts" is
    // required. Throws config_error, which never quotes `auth`.
    static zookeeper_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): each server of `hosts` ("host:port"; the chroot aside: one
    // ensemble).
    std::vector<std::string> backends() const;
};

// The path of `name`'s parent node under `root`.
std::string zookeeper_lock_parent(const std::string& root, std::string_view name);
// A counting semaphore's: the container its permit nodes queue under, `<root>/<hash hex>.permits`,
// and the persistent node whose data is its limit, `<root>/<hash hex>.limit` (see Counting).
std::string zookeeper_permit_parent(const std::string& root, std::string_view name);
std::string zookeeper_permit_limit_node(const std::string& root, std::string_view name);

// The cautions `config check` and `explain` print for these options (strategy_descriptor::
// warnings): without auth, that any client of the ensemble can delete a lock.
std::vector<std::string> zookeeper_warnings(const nlohmann::json& options);

// Reads the auth from its file or variable (when given), connects (waiting for at most
// connect_timeout) and creates and checks the root, so that unreachable hosts, a chroot that does
// not exist or an open root fail here. Throws invalid_argument_error for bad options, backend_error
// otherwise.
std::shared_ptr<store> make_zookeeper_store(const zookeeper_options& options);

}  // namespace locksmith::strategies
