// SPDX-License-Identifier: MIT
// Private to the redis strategy: finding the master of a group that Redis Sentinel monitors.
//
//   master_locator  asks the Sentinels for the master's address, checks it with ROLE, and
//                   opens connections to it; forgets it when a connection to it failed
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include <locksmith/strategies/redis.hpp>

#include "redis_connection.hpp"

namespace locksmith::strategies::redis_detail {

class master_locator {
  public:
    // `options` (sentinels, master_name, the master's credentials) must outlive the locator;
    // `tls` (make_tls_context's; null without "tls": true) serves the Sentinels and the master.
    master_locator(const redis_options& options, std::shared_ptr<const tls::tls_context> tls);

    // A new connection to the master, tagged with the generation it was found in. Asks the
    // Sentinels when no master is known (in order, from the one that answered last; a dead or
    // refusing Sentinel costs at most its connect and command timeouts), and uses the master
    // only when its ROLE says master: the Sentinels name a master that is being demoted for
    // about a second after a failover starts. Throws backend_error: transient unless every
    // Sentinel refused for good (a wrong password, an unknown master name); never a password.
    std::unique_ptr<connection> connect();

    // The master known at `generation` may be gone (a connection to it failed, answered
    // READONLY or could not confirm a write): the next connect() asks the Sentinels again, and
    // connections of older generations are dropped (current() is false for them).
    void forget(std::uint64_t generation) noexcept;
    bool current(const connection& c) const noexcept {
        return c.master_generation() == generation_;
    }

    // "master 'NAME' of Sentinels h1:p1, h2:p2": for messages.
    std::string description() const;

  private:
    // The master's endpoint as the Sentinels name it (with the master's credentials).
    redis_endpoint ask_sentinels();

    const redis_options& options_;
    const std::shared_ptr<const tls::tls_context> tls_;
    std::mutex mutex_;
    std::optional<redis_endpoint> master_;  // guarded by mutex_
    std::size_t first_ = 0;                 // the Sentinel to ask first; guarded by mutex_
    std::atomic<std::uint64_t> generation_{1};
};

}  // namespace locksmith::strategies::redis_detail
