// SPDX-License-Identifier: MIT
// The `memcached` strategy: locks kept as items of Memcached servers, spoken to with
// Memcached's meta protocol (memcached >= 1.6.10; Debian 12 ships 1.6.18).
//
//   memcached_options   the strategy's JSON options
//   make_memcached_store
//
// Contract:
//  - Owner: the key's 128-bit token, stored as the item's value. Any process holding the key
//    (serialized or not) is the owner; threads and processes are alike.
//  - Round trips: acquire is one (`ms <item> 32 T<exp> ME c`, an add that returns the item's
//    CAS id), release is one (`md <item> C<cas>`: delete only if the CAS is still ours), refresh
//    is one (`ms <item> 32 T<exp> C<cas> c`); so a lock+unlock pair is two. The CAS is kept in
//    the key's process-local state. When there is none (a key deserialized here) or the item
//    changed since (the same owner refreshed it through a copy of the key in another process),
//    release and refresh first read the item (`mg <item> v c`) and act, by the CAS just read,
//    only when it holds our token: never on another owner's item. A re-acquire while held
//    renews the TTL (`ms` NS, then `mg` + `ms C`). holds() is `mg <item> v`, status() is
//    `mg <item> t` (held, and the seconds left).
//  - A CAS id is trusted only on the server process that issued it: a restarted memcached
//    counts CAS ids from 1 again, so a cached CAS from before the restart is not used (each
//    connection learns the server's pid and start time when it connects).
//  - libmemcached is not used: it cannot send meta commands, and the classic protocol has no
//    compare-and-delete, so a safe release there takes three extra round trips (gets, cas to
//    take the item over, delete) after the add.
//  - Server requirements, checked on every new connection (`mn`, `stats`, `stats settings` in
//    one round trip): the meta protocol of memcached >= 1.6.10 (older servers answer
//    `mn` with ERROR or speak an earlier draft of it) and CAS ids enabled (not `-C`). Talk to
//    memcached servers directly, not through a proxy.
//  - Lease: TTLs are whole seconds (rounded up, plus one second because memcached's clock ticks
//    once a second); a TTL below 1 s is an invalid_argument_error. A holder that dies keeps the
//    lock until its TTL runs out.
//  - NOT durable: Memcached is a cache. An LRU eviction under memory pressure, a restart or a
//    flush silently drops locks, and another owner can then acquire while the first still
//    believes it holds. Use it for efficiency locks only, on a server with room to spare
//    (`-M` makes memcached refuse writes instead of evicting).
//  - Exclusive only (a shared request takes the exclusive lock); waiting is done by polling in
//    named_lock. No fencing tokens.
//  - Counting (a key with a limit N, named_semaphore; N <= 1000): permit i (1..N) of NAME is the
//    item `<base>.permit.<i>` (base: memcached_semaphore_key), holding `<token> <N>`, added
//    (`ms ... ME`, one holder each) with the permit's TTL; a grant adds the first free one of
//    1..N, so a free permit costs two round trips (the add, then a read of the limit item) and
//    a full semaphore N + 1. Refresh, release and holds act on that item as on a lock's, by CAS
//    and only while it holds the owner's value; the permit's number is in the key's portable
//    state ("permit"), so a serialized key releases it elsewhere. LOCKSMITH_PERMIT is i.
//    The limit is the item `<base>.limit` (decimal, no expiry), added by the name's first
//    grant; another limit is an invalid_argument_error naming both (delete that item to change
//    it), a value locksmith did not write a backend_error. All of a name's items live on the
//    server of its base. Waiting is polled (named_lock) as for locks.
//    What memcached can lose: an evicted or flushed permit item is a permit given again while
//    its holder believes it holds (as a lock item; a restart drops them all, and the limit).
//    A limit item lost (evicted, deleted) is written again by the next grant, after the add of
//    its permit, only when no permit item of 1..N holds another limit; holders under a larger
//    limit, whose permits lie beyond N, keep them until they release or expire: never more
//    holders than the larger limit. The limit is read after the add, never before, so no owner
//    keeps a permit taken on a limit that was replaced meanwhile. A value another program
//    writes in a permit item takes that permit out of use (fewer holders, never more); its
//    holder loses it at the next refresh. A lock named `NAME.limit` or `NAME.permit.<i>`
//    shares an item with semaphore NAME.
//  - Keys: `<key_prefix><name>` when the name is short printable ASCII without spaces; any other
//    name (binary, spaces, longer than the 250-byte key limit allows) becomes
//    `<key_prefix>#<sha256 of the name>`.
//  - With several servers each name lives on one server, chosen by rendezvous hashing of the
//    item key over "host:port" (the same in every process that lists the same servers, in any
//    order): losing a server drops its locks, and while it is down its names fail with
//    backend_error rather than moving to another server.
//  - Connections: one pool per server, at most pool_size connections each; a connection that
//    failed, or that the server closed while idle, is dropped and the next command opens a new
//    one, so a restarted server is used again without restarting the process. Each command is
//    bounded by command_timeout, each connection set-up by connect_timeout (plus the system
//    resolver's own time for host names). Each command asks the server to name its reply (the
//    meta flags k and O<n>): a reply for another key or an earlier request is a backend_error
//    ("protocol"), never taken for the command's answer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

// What the memcached strategy offers (its registry entry and its store agree on this).
inline constexpr capability memcached_capabilities =
    capability::exclusive | capability::noblock | capability::expiring | capability::distributed |
    capability::serializable | capability::counting;

struct memcached_options {
    // host:port pairs (IPv6 as [addr]:port); at least one. Port defaults to 11211.
    std::vector<std::pair<std::string, int>> servers;
    // Longest wait for a connection to be set up. Must be > 0.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(1)};
    // Longest wait for the reply to one command. Must be > 0.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(2)};
    // Prepended to every item key; at most 100 bytes of printable ASCII without spaces.
    std::string key_prefix = "locksmith:";
    // Most connections kept open to each server. >= 1.
    std::size_t pool_size = 8;

    // Reads {"servers": "host:port[,host:port...]", "connect_timeout_s": 1,
    // "command_timeout_s": 2, "key_prefix": "...", "pool_size": 8}; "servers" is required.
    // Throws config_error.
    static memcached_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): each server ("host:port").
    std::vector<std::string> backends() const;
};

// Parses "host:port[,host:port...]". Throws invalid_argument_error.
std::vector<std::pair<std::string, int>> parse_memcached_servers(const std::string& text);

// The item key of `name` (see Keys above): a frozen format (doc/FORMATS.md), for admins.
std::string memcached_item_key(std::string_view key_prefix, std::string_view name);

// The base of the items of counting semaphore `name` (see Counting above): like
// memcached_item_key, but hashed when `.permit.NNNN` would not fit; a frozen format.
std::string memcached_semaphore_key(std::string_view key_prefix, std::string_view name);

// The weight of server `address` ("host:port" as listed) for the item `item_key` in the
// rendezvous hashing over several servers: the item lives on the server of highest weight.
std::uint64_t memcached_server_weight(std::string_view address, std::string_view item_key);

// Opens one connection to every listed server, so that a wrong endpoint, a server that is down
// or one older than memcached 1.6.10 fails here.
// Throws backend_error when one does not answer, invalid_argument_error for bad options.
std::shared_ptr<store> make_memcached_store(const memcached_options& options);

}  // namespace locksmith::strategies
