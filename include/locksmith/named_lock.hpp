// SPDX-License-Identifier: MIT
// named_lock: one owner's handle on a named lock, with Symfony Lock's semantics under the
// standard C++ names.
//
// Contract:
//  - Ownership: the object (through its key) is the owner. Two named_lock objects for the same
//    name exclude each other, in one thread, across threads and across processes. Acquiring
//    again while held succeeds at once (idempotent, not counted: one unlock releases).
//  - Threads: one object is used by one thread at a time (the renewal thread excepted: it
//    synchronises with the owner); it may move between threads where its strategy allows (see
//    the strategy's header).
//  - Waiting: stores with native_wait wait in the backend; others are polled with exponential
//    backoff and jitter, bounded by the caller's deadline. lock() waits without bound.
//  - Shared: a shared request on a strategy without `shared` takes the exclusive lock.
//    acquire() while holding the read lock promotes; acquire_read() while holding the write lock
//    demotes; a failed promotion keeps the read lock.
//  - Expiry: for strategies with `expiring`, every grant carries a TTL (lock_options::ttl); the
//    lifetime is measured on the monotonic clock from just before the store call, and a grant
//    that comes back already expired is released and reported with expired_error. With
//    auto_refresh, the process's renewal threads renew every such lock at a third of its TTL
//    (a renewal stuck on a dead network gives up at the lease's end, and holds back no other
//    lock's); a lock whose renewal fails, or is not confirmed by the lease's end, counts as lost
//    (is_acquired() is false, on_lost is called, loss_fd() turns readable).
//  - Loss: where the backend can end a grant while held (a session the server closed), the
//    owner hears of it from is_acquired() or, before a fresh grant, from the next acquire
//    (on_lost either way); loss_fd() lets an event loop wait for the backend's notice.
//  - Crash: what survives the holder's death is the strategy's contract (crash_release).
//  - Logging: with lock_options::logger, failures (also those thrown to the caller), renewals,
//    lost locks and slow waits are logged; see logger.hpp.
//  - Destruction releases the lock unless auto-release is off (needed after fork(), and to hand
//    a serialized key to another process).
//
// Satisfies Lockable, TimedLockable, SharedLockable and SharedTimedLockable, so
// std::unique_lock, std::shared_lock and std::scoped_lock work with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/backoff.hpp>
#include <locksmith/capability.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/logger.hpp>

namespace locksmith {

// Receives the errors of noexcept operations (unlock, the destructor). The default writes one
// line to stderr.
using error_handler = std::function<void(const error&)>;

struct lock_options {
    // Lifetime of each grant, for strategies with `expiring`; ignored by the others.
    // Must be > 0 and at most max_ttl.
    std::chrono::milliseconds ttl{std::chrono::minutes(5)};
    // Release in the destructor.
    bool auto_release = true;
    // Polling schedule for strategies without native_wait.
    retry_policy retry{};
    // For unlock() and the destructor; empty = the default (stderr).
    error_handler on_error{};
    // Renew the TTL at a third of it while held, from the process's renewal thread (strategies
    // with `expiring` only; ignored by others). unlock() stops the renewal.
    bool auto_refresh = false;
    // Called once when a lock this object holds turns out to be lost: from the renewal thread
    // when a renewal finds it gone or keeps failing until the TTL runs out; from the process's
    // lease watchdog thread at the lease's end (less 1% of the TTL and 2 ms) when a renewal is
    // still unanswered then (a dead network), before the server can grant it again; from
    // is_acquired() when the store no longer has it (expired; a pg_advisory or zookeeper session
    // the server ended); from an acquire while held that finds the backend ended the grant, before
    // it asks for a fresh one (a lock is never re-granted silently); or from unlock(), release() or
    // the destructor when the lock's TTL ran out while held, unrenewed (its holder stopped past the
    // TTL), after the release. Must not call back into the lock object.
    error_handler on_lost{};
    // Where this lock logs failures, renewals and slow waits (logger.hpp); null = nowhere.
    // lock_factory::set_logger sets it for the locks a factory creates.
    std::shared_ptr<log_sink> logger{};
    // With a logger: a wait that has lasted this long is logged (slow_wait) while it goes on,
    // and its end too (waited). 0 = waits are never logged.
    std::chrono::milliseconds slow_wait{std::chrono::seconds(1)};
};

inline constexpr std::chrono::milliseconds max_ttl = std::chrono::hours(24 * 365);

// Throws invalid_argument_error unless 0 < ttl <= max_ttl.
void validate_ttl(std::chrono::milliseconds ttl);

class named_lock {
  public:
    // Requires: `store` and `owner` are not null. Throws invalid_argument_error for a bad TTL.
    named_lock(std::shared_ptr<store> store, std::shared_ptr<key> owner, lock_options options = {});
    ~named_lock();
    named_lock(named_lock&& other) noexcept;
    named_lock& operator=(named_lock&& other) noexcept;
    named_lock(const named_lock&) = delete;
    named_lock& operator=(const named_lock&) = delete;

    // --- the standard names (exclusive) ---
    // Waits without bound. Throws acquire_error/backend_error on failure; nothing is held then.
    void lock();
    // Returns false at once when another owner holds the lock.
    bool try_lock();
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return acquire_until(lock_mode::exclusive, deadline_after(timeout));
    }
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration>& until) {
        return try_lock_for(until - Clock::now());
    }
    // Releases; errors go to the error handler.
    void unlock() noexcept;

    // --- the standard names (shared) ---
    void lock_shared();
    bool try_lock_shared();
    template <class Rep, class Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
        return acquire_until(lock_mode::shared, deadline_after(timeout));
    }
    template <class Clock, class Duration>
    bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& until) {
        return try_lock_shared_for(until - Clock::now());
    }
    void unlock_shared() noexcept { unlock(); }

    // --- Symfony's names ---
    // blocking=false: one attempt; blocking=true: waits without bound. Returns true when held.
    bool acquire(bool blocking = false);
    bool acquire_read(bool blocking = false);
    // TYPO3's acquire($mode): `mode` is exclusive or shared, optionally | noblock.
    // Without noblock it waits. Throws invalid_argument_error for any other bit.
    bool acquire(capability mode);
    // Releases and checks that the lock is no longer held. Throws release_error/backend_error.
    void release();
    // Renews the TTL to `ttl` (default: the lock's TTL). A no-op for strategies without
    // `expiring`. Throws invalid_argument_error for a bad TTL, acquire_error when the lock is no
    // longer ours, expired_error when the renewal came back too late.
    void refresh();
    void refresh(std::chrono::milliseconds ttl);
    // Asks the store whether this owner holds the lock now. While another thread is in a call
    // on this lock (a renewal stuck on a dead network), waits for it only until the lease's end
    // (less 1% of the TTL and 2 ms) and answers false then, reporting the loss.
    bool is_acquired();
    // So that an event loop learns of a loss when it happens: a descriptor to poll for POLLIN,
    // then call is_acquired() (which reports the loss); -1 when the grant is already known gone
    // (call is_acquired() now). It turns readable when the backend's notice arrives, for
    // strategies whose backend can end a grant while it is held (a session or connection the
    // server closes: pg_advisory, zookeeper), and, for expiring strategies, at the lease's end
    // unless a renewal was confirmed by then (with auto_refresh: less 1% of the TTL and 2 ms;
    // without: when the lifetime ends). Answered without waiting for a renewal in flight.
    // nullopt when not held, or when the strategy's grants end only by release. Ask again after
    // each operation on the lock.
    std::optional<int> loss_fd() const;
    // The mode this object believes it holds, without asking the store; nullopt when not held.
    std::optional<lock_mode> held_mode() const noexcept;
    // nullopt for strategies without `expiring` (or when not held).
    std::optional<std::chrono::milliseconds> remaining_lifetime() const;
    bool is_expired() const;
    // The current grant's token, for strategies with `fencing`; nullopt when not held or the
    // strategy has none. The store may assign it on this first request (store::fencing_token),
    // which can cost one round trip and throws expired_error when the grant was lost first.
    std::optional<std::uint64_t> fencing_token() const;

    // --- identity ---
    const std::string& name() const noexcept;
    const std::string& strategy() const noexcept;
    capability capabilities() const noexcept;
    const std::shared_ptr<key>& owner() const noexcept;
    // The key as JSON (with the strategy name), for create_lock_from_key in another process.
    // Throws not_serializable_error for strategies without `serializable`.
    nlohmann::json serialize_key() const;
    void set_auto_release(bool on) noexcept;

    // The state behind the handle, shared with the renewal thread (core/lock_state.hpp).
    struct state;

  private:
    template <class Rep, class Period>
    static deadline deadline_after(const std::chrono::duration<Rep, Period>& timeout) {
        auto now = deadline::clock::now();
        if (timeout <= timeout.zero()) return now;
        // Compared in double, which rounds near deadline::max() (by up to a microsecond): with an
        // hour to spare, `now + timeout` cannot overflow (a time point's max minus now, as from
        // try_lock_until(time_point::max()), did: UBSan, scripts/sanitize.sh asan).
        if (std::chrono::duration<double>(timeout) >=
            std::chrono::duration<double>(deadline::max() - now - std::chrono::hours(1)))
            return deadline::max();
        return now + std::chrono::ceil<deadline::duration>(timeout);
    }
    bool acquire_until(lock_mode mode, deadline until);

    std::shared_ptr<state> state_;
};

}  // namespace locksmith

// fork() and the lock objects (the contract above, continued):
//  - The child holds nothing. The objects it inherits stay the parent's: it must not use them,
//    only destroy them with auto-release off (their connections and sessions are left to the
//    parent). It may make new ones, which open their own connections and sessions and start
//    their own renewal thread.
//  - The library's threads are not in the child: the renewal thread, a ZooKeeper session's
//    client threads, and combined's member requests (which may run on after the quorum
//    answered: see strategies/combined.hpp). A lock one of them held at the fork (a strategy's
//    mutex, the resolver's, the allocator's under a sanitizer) stays held in the child, which
//    hangs at its first use of it: after a fork beside threads POSIX allows only
//    async-signal-safe calls until exec. So a program that forks while such a thread may be
//    inside a call (it holds a lock with auto_refresh, a zookeeper lock, or has just used a
//    combined lock) must exec in the child at once (`locksmith run` does); fork before making
//    the first lock object to use locks in the child.
