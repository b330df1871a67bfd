// SPDX-License-Identifier: MIT
// The state behind a named_lock handle. Private to the library.
//
// It lives in a shared_ptr so that the renewal thread can hold a weak reference: a handle may
// move, and may die while a renewal is queued. Every member but lease_end is guarded by `mutex`.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include <locksmith/named_lock.hpp>

namespace locksmith {

struct named_lock::state : std::enable_shared_from_this<named_lock::state> {
    using clock = deadline::clock;

    state(std::shared_ptr<locksmith::store> s, std::shared_ptr<key> k, lock_options o)
        : store(std::move(s)), owner(std::move(k)), options(std::move(o)) {}
    ~state();
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    const std::shared_ptr<locksmith::store> store;
    const std::shared_ptr<key> owner;
    lock_options options;
    // Timed: is_acquired() waits for it no longer than the lease lasts (see lease_end).
    std::timed_mutex mutex;
    std::optional<lock_mode> held;
    bool renewal_queued = false;

    // The end of the current grant's lease on the owner's clock (ticks since the clock's epoch;
    // no_lease: none; lease_told: it ran out and the owner was told). The one member read
    // without `mutex`: a refresh stuck on a dead network holds the mutex for up to the store's
    // command timeout, which may outlast the lease, and the holder must hear of the loss before
    // the server can grant the lock again (issue 25). The lease watchdog (renewal.cpp) takes it
    // from an end that passed to lease_told, and calls on_lost; whoever would tell the owner
    // later (the renewal, is_acquired) sees that it was told.
    static constexpr clock::rep no_lease = 0;
    static constexpr clock::rep lease_told = 1;
    std::atomic<clock::rep> lease_end{no_lease};

    bool expiring() const noexcept { return has(store->capabilities(), capability::expiring); }

    // What loss_fd() gives for an expiring grant, made on first request: a timerfd readable at
    // the lease's tell_at (below), at once when the owner was told of a loss (lease_told), never
    // without a lease; kept so by sync_lease_timer() after each change of lease_end. Guarded by
    // lease_timer_mutex, not `mutex`: loss_fd() must answer while a renewal holds that
    // (issue 25). The epoll set merges it with the store's own loss descriptor, if it has one.
    // Atomic: sync_lease_timer() looks at it before the mutex (a lock nobody asked loss_fd() of
    // takes no second mutex at each grant and release).
    std::mutex lease_timer_mutex;
    std::atomic<int> lease_timer{-1};
    int lease_epoll = -1;
    int lease_epoll_member = -1;  // the store's descriptor last added to lease_epoll
    // The timer, made if need be, set from lease_end. Throws backend_error when it cannot be made.
    int lease_timer_fd();
    // Sets the timer (if made) from lease_end; call after changing lease_end.
    void sync_lease_timer() noexcept;
    // The timer merged with the store's descriptor `fd` (an epoll set).
    int lease_timer_with(int fd);
    void set_lease_timer() noexcept;  // sync_lease_timer() under lease_timer_mutex
    // The lease's end (less the drift allowance) as the deadline of a refresh renewing it:
    // nullopt without a lease.
    std::optional<clock::time_point> refresh_deadline() const noexcept {
        const auto end = lease_end.load();
        if (end == no_lease || end == lease_told) return std::nullopt;
        return tell_at(end);
    }

    // Called by the renewal thread. Renews the TTL if the lock is still held; returns when to
    // renew next, or nullopt to stop.
    std::optional<clock::time_point> renew();

    // The owner's lifetime after a grant or refresh whose request left at `started`: the server
    // started the TTL no earlier; less the margin the store asked for (key::lifetime_margin).
    // Returns false, changing nothing, when the owner was already told that the lease ran out.
    bool restart_lifetime(clock::time_point started, std::chrono::milliseconds ttl) {
        auto before = lease_end.load();
        const auto end = started + ttl - owner->lifetime_margin();
        const auto ticks = std::max(end.time_since_epoch().count(), lease_told + 1);
        do {
            if (before == lease_told) return false;
        } while (!lease_end.compare_exchange_weak(before, ticks));
        sync_lease_timer();
        owner->reset_lifetime();
        owner->reduce_lifetime(end);
        return true;
    }

    // The grant ended (released, or its loss reported): nothing for the watchdog to watch.
    void drop_lease() noexcept {
        lease_end = no_lease;
        sync_lease_timer();
    }

    // How long before the lease's end its holder is told it is lost, when no refresh was
    // confirmed by then: the server's clock may run a little faster (Redlock's drift allowance,
    // 1% of the TTL plus 2 ms).
    clock::duration tell_early() const noexcept {
        return options.ttl / 100 + std::chrono::milliseconds(2);
    }

    // When the holder of a lease ending at `end` (ticks) is told it is lost.
    clock::time_point tell_at(clock::rep end) const noexcept {
        return clock::time_point(clock::duration(end)) - tell_early();
    }

    // Takes the lease to lease_told if its tell_at passed; true if this call did it (the caller
    // then tells the owner). Safe without `mutex`.
    bool claim_lapsed_lease() noexcept {
        auto end = lease_end.load();
        while (end != no_lease && end != lease_told && tell_at(end) <= clock::now())
            if (lease_end.compare_exchange_weak(end, lease_told)) return true;
        return false;
    }

    // Called by the lease watchdog at a lease's end: tells the owner if the lease ran out
    // without a confirmed refresh, without waiting for `mutex`. Returns nullopt (once only).
    std::optional<clock::time_point> check_lease();

    // Logs `lost` and calls on_lost (or report without one); the caller does not hold `mutex`.
    void tell_lost(const error& lost) const noexcept;

    void report(const error& e) const noexcept;

    // Sends a record about this lock to options.logger; nothing without one.
    void log(log_level level, const char* event, std::string message, std::string error = {},
             std::optional<std::chrono::nanoseconds> duration = {}) const noexcept;
};

// Queues a renewal of `lock` at `when` on the process's renewal thread (started on first use).
void schedule_renewal(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when);

// Queues a check_lease of `lock` at `when` on the process's lease watchdog thread.
void watch_lease(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when);

}  // namespace locksmith
