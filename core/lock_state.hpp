// SPDX-License-Identifier: MIT
// The state behind a named_lock handle. Private to the library.
//
// It lives in a shared_ptr so that the renewal thread can hold a weak reference: a handle may
// move, and may die while a renewal is queued. Every member is guarded by `mutex`.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include <locksmith/named_lock.hpp>

namespace locksmith {

struct named_lock::state : std::enable_shared_from_this<named_lock::state> {
    using clock = deadline::clock;

    state(std::shared_ptr<locksmith::store> s, std::shared_ptr<key> k, lock_options o)
        : store(std::move(s)), owner(std::move(k)), options(std::move(o)) {}

    const std::shared_ptr<locksmith::store> store;
    const std::shared_ptr<key> owner;
    lock_options options;
    std::mutex mutex;
    std::optional<lock_mode> held;
    bool renewal_queued = false;

    bool expiring() const noexcept { return has(store->capabilities(), capability::expiring); }

    // Called by the renewal thread. Renews the TTL if the lock is still held; returns when to
    // renew next, or nullopt to stop.
    std::optional<clock::time_point> renew();

    // The owner's lifetime after a grant or refresh whose request left at `started`: the server
    // started the TTL no earlier; less the margin the store asked for (key::lifetime_margin).
    void restart_lifetime(clock::time_point started, std::chrono::milliseconds ttl) {
        owner->reset_lifetime();
        owner->reduce_lifetime(started + ttl - owner->lifetime_margin());
    }

    void report(const error& e) const noexcept;

    // Sends a record about this lock to options.logger; nothing without one.
    void log(log_level level, const char* event, std::string message, std::string error = {},
             std::optional<std::chrono::nanoseconds> duration = {}) const noexcept;
};

// Queues a renewal of `lock` at `when` on the process's renewal thread (started on first use).
void schedule_renewal(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when);

}  // namespace locksmith
