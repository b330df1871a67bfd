// The `memcached` strategy: locks kept as items of a Memcached server (libmemcached).
//
//   memcached_options   the strategy's JSON options
//   make_memcached_store
//
// Contract:
//  - Owner: the key's 128-bit token, stored as the item's value. Any process holding the key
//    (serialized or not) is the owner; threads and processes are alike.
//  - Acquire is `add` with an expiry (it fails when the item exists); refresh and release read
//    the item with its CAS id and act only when it holds our token (gets/cas). Release first
//    takes the item over with a CAS (2 s expiry) and then deletes it, Symfony's way of making
//    "delete if mine" safe without a server-side compare-and-delete.
//  - Lease: TTLs are whole seconds (rounded up); a TTL below 1 s is an invalid_argument_error.
//    A holder that dies keeps the lock until its TTL runs out.
//  - NOT durable: Memcached is a cache. An LRU eviction under memory pressure, a restart or a
//    flush silently drops locks, and another owner can then acquire while the first still
//    believes it holds. Use it for efficiency locks only, on a server with room to spare
//    (`-M` makes memcached refuse writes instead of evicting).
//  - Exclusive only (a shared request takes the exclusive lock); waiting is done by polling in
//    named_lock. No fencing tokens.
//  - Keys: `<key_prefix><name>` when the name is short printable ASCII without spaces; any other
//    name (binary, spaces, longer than the 250-byte key limit allows) becomes
//    `<key_prefix>#<sha256 of the name>`.
//  - With several servers each name lives on one server (libmemcached's consistent hashing):
//    losing a server drops its locks.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/store.hpp>

namespace locksmith::strategies {

// What the memcached strategy offers (its registry entry and its store agree on this).
inline constexpr capability memcached_capabilities = capability::exclusive | capability::noblock |
                                                     capability::expiring |
                                                     capability::distributed |
                                                     capability::serializable;

struct memcached_options {
    // host:port pairs (IPv6 as [addr]:port); at least one. Port defaults to 11211.
    std::vector<std::pair<std::string, int>> servers;
    // Longest wait for a connection to be set up. Must be > 0.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(1)};
    // Longest wait for the reply to one command. Must be > 0.
    std::chrono::milliseconds command_timeout{std::chrono::seconds(2)};
    // Prepended to every item key; at most 100 bytes of printable ASCII without spaces.
    std::string key_prefix = "locksmith:";
    // Most connections kept open. >= 1.
    std::size_t pool_size = 8;

    // Reads {"servers": "host:port[,host:port...]", "connect_timeout_s": 1,
    // "command_timeout_s": 2, "key_prefix": "...", "pool_size": 8}; "servers" is required.
    // Throws config_error.
    static memcached_options from_json(const nlohmann::json& options);
};

// Parses "host:port[,host:port...]". Throws invalid_argument_error.
std::vector<std::pair<std::string, int>> parse_memcached_servers(const std::string& text);

// Checks that a server answers, so that a wrong endpoint fails here.
// Throws backend_error when it does not, invalid_argument_error for bad options.
std::shared_ptr<store> make_memcached_store(const memcached_options& options);

}  // namespace locksmith::strategies
