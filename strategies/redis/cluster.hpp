// SPDX-License-Identifier: MIT
// Private to the redis strategy: Redis Cluster, the slot map and the redirections.
//
//   hash_tag        the hash tag of a lock name, which all of its keys and channels carry
//   key_slot        the slot of a key (CRC16 of its hash tag, as the servers compute it)
//   slot_router     which master serves which slot (CLUSTER SLOTS), a connection pool per
//                   master, and commands that follow MOVED and ASK
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <locksmith/strategies/redis.hpp>

#include "redis_connection.hpp"

namespace locksmith::strategies::redis_detail {

inline constexpr std::size_t slot_count = 16384;
// The most nodes a router keeps: Redis supports clusters of up to 1000 nodes, and the nodes a
// router has met are kept (their pools outlive leases), so a cluster that names ever more
// addresses (a hostile one, or years of replaced nodes) is refused rather than grown without end.
inline constexpr std::size_t max_cluster_nodes = 2000;

// "{xxxxxxxx}": eight hex digits of the name's FNV-1a hash, in braces. A hash and not the name
// itself: a name may contain braces (which would end the tag early) and spaces (which a waiting
// writer's queue entry cannot carry in its channel).
std::string hash_tag(std::string_view name);

// The slot of `key`: CRC16 (XMODEM) of its hash tag (the text between its first '{' and the
// next '}', when not empty), else of the whole key, modulo 16384.
std::uint16_t key_slot(std::string_view key);

class slot_router {
  public:
    using lease = connection_pool::lease;

    // `options` (cluster, the nodes' credentials, pool_size) must outlive the router; `tls`
    // (make_tls_context's) when the nodes speak TLS (options.endpoint.tls).
    slot_router(const redis_options& options, std::shared_ptr<const tls::tls_context> tls);
    slot_router(const slot_router&) = delete;
    slot_router& operator=(const slot_router&) = delete;

    // A pooled connection to the master of `slot`; asks for the slot map first when none is
    // known (or an error made it doubtful). Throws backend_error.
    lease take(std::uint16_t slot);
    // A new connection outside the pools to the master of `slot` (subscribers).
    std::unique_ptr<connection> connect(std::uint16_t slot);
    // True when `c` is a connection to the master that serves `slot` now.
    bool serves(const connection& c, std::uint16_t slot);

    // Sends `args` (whose keys are in `slot`) on `c` and returns the reply, following MOVED
    // (the map learns the new owner) and ASK (ASKING first); `c` becomes a lease of the node
    // that answered, so that what follows (WAIT) goes to the server that made the write.
    // A transient error marks the map as doubtful. Throws backend_error ("redirect" when the
    // nodes keep sending the command elsewhere).
    reply_ptr command(std::uint16_t slot, std::optional<lease>& c,
                      const std::vector<std::string_view>& args);

    // The slot map may be out of date (a subscription ended because its slot moved): the next
    // take() or connect() reads it again.
    void doubt() noexcept;

    // "Redis Cluster of h1:p1, h2:p2": for messages.
    std::string description() const;

  private:
    struct node {
        redis_endpoint endpoint;
        std::unique_ptr<connection_pool> pool;
    };
    // The node at host:port (made, with the options' credentials, when new). Caller holds mutex_.
    node* node_at(const std::string& host, int port);
    // Asks the known masters, then the configured nodes, for CLUSTER SLOTS, until one's map has
    // a master for `wanted` (during a failover some nodes' maps lack the failed master's slots);
    // with none such, the first map read. Throws backend_error when no node answers.
    void refresh(std::uint16_t wanted);
    node* owner(std::uint16_t slot);

    const redis_options& options_;
    const std::shared_ptr<const tls::tls_context> tls_;
    mutable std::mutex mutex_;
    std::deque<node> nodes_;                     // never shrinks: pools outlive leases
    std::array<node*, slot_count> slots_{};      // guarded by mutex_
    bool known_ = false;                         // a map was read and not doubted since
    std::mutex refresh_mutex_;                   // one CLUSTER SLOTS at a time
    std::pair<std::string, int> last_answered_;  // host, port; guarded by refresh_mutex_
};

}  // namespace locksmith::strategies::redis_detail
