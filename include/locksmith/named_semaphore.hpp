// SPDX-License-Identifier: MIT
// named_semaphore: one owner's handle on a permit of a named counting semaphore: at most
// `limit` owners hold a permit of one name at once (issue 27).
//
// Design: a permit is a lock whose key carries a limit (key::limit()), not a second lock type.
// named_semaphore wraps a named_lock, so waiting (native or polled with backoff), bounded waits,
// the TTL and its renewal, loss reports, fencing tokens, logging and auto-release are
// named_lock's code, written once; a store learns from the key that it grants one of N permits
// instead of the lock, through the one store interface (store::try_acquire), and only a store
// with capability::counting may be asked (store.cpp checks). The alternative, a semaphore of 1
// as the only type, would have changed every strategy's lock and its kernel or server objects
// for the sake of a minority of callers; two types over one store interface would have copied
// named_lock's state machine.
//
// Contract (named_lock's, with these differences):
//  - Ownership: the object is one owner; it holds at most one permit. Acquiring again while it
//    holds one succeeds at once (not counted). Two objects for the same name are two owners:
//    at most `limit` of them, in any threads or processes, hold a permit at once.
//  - One name, one limit: where the backend keeps the limit with the name (the strategy's
//    header says), an owner asking for another limit gets invalid_argument_error, never a share
//    of a second semaphore.
//  - A semaphore and a lock of the same name are separate objects unless the strategy says
//    otherwise.
//  - Crash: what survives the holder's death is the strategy's contract (crash_release).
//  - No shared mode: there is one kind of permit.
// Satisfies Lockable and TimedLockable (lock, try_lock, try_lock_for, try_lock_until, unlock),
// so std::unique_lock and std::scoped_lock hold a permit; std::counting_semaphore's names
// (acquire, try_acquire, try_acquire_for, try_acquire_until, release) are here too.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <locksmith/named_lock.hpp>

namespace locksmith {

class named_semaphore {
  public:
    // Requires: `store` and `owner` are not null. Throws invalid_argument_error when
    // owner->limit() is 0, when `store` lacks capability::counting, or for a bad TTL.
    named_semaphore(std::shared_ptr<store> store, std::shared_ptr<key> owner,
                    lock_options options = {});

    // Waits without bound for a permit. Throws acquire_error/backend_error on failure (nothing
    // is held then); invalid_argument_error when the name's kept limit differs from limit().
    void acquire() { lock_.lock(); }
    // One attempt: false when all `limit` permits are held by others.
    bool try_acquire() { return lock_.try_lock(); }
    // Waits at most `timeout` (<= 0: one attempt). False when no permit came free in time.
    template <class Rep, class Period>
    bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
        return lock_.try_lock_for(timeout);
    }
    template <class Clock, class Duration>
    bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& until) {
        return lock_.try_lock_until(until);
    }
    // Gives the permit back and checks that it is no longer held. Throws release_error or
    // backend_error. Nothing happens when no permit is held.
    void release() { lock_.release(); }

    // The standard names, for std::unique_lock and friends.
    void lock() { acquire(); }
    bool try_lock() { return try_acquire(); }
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return try_acquire_for(timeout);
    }
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration>& until) {
        return try_acquire_until(until);
    }
    // Gives the permit back; errors go to the error handler.
    void unlock() noexcept { lock_.unlock(); }

    // Asks the store whether this owner holds a permit now (a loss is reported as for a lock).
    bool is_acquired() { return lock_.is_acquired(); }
    // Whether this object believes it holds a permit, without asking the store.
    bool held() const noexcept { return lock_.held_mode().has_value(); }
    // As named_lock's: renew the TTL (expiring strategies; a no-op for the others).
    void refresh() { lock_.refresh(); }
    void refresh(std::chrono::milliseconds ttl) { lock_.refresh(ttl); }
    std::optional<std::chrono::milliseconds> remaining_lifetime() const {
        return lock_.remaining_lifetime();
    }
    bool is_expired() const { return lock_.is_expired(); }
    std::optional<int> loss_fd() const { return lock_.loss_fd(); }
    // The current grant's token, for strategies with `fencing`; ordered across the permits of
    // one name.
    std::optional<std::uint64_t> fencing_token() const { return lock_.fencing_token(); }

    // Which permit this owner holds, for LOCKSMITH_PERMIT: a strategy that numbers its permits
    // (slots) puts the number in the key's portable state as "permit"; otherwise the owner's
    // token, which tells holders apart. Empty when no permit is held.
    std::string permit() const;

    const std::string& name() const noexcept { return lock_.name(); }
    std::uint32_t limit() const noexcept { return lock_.owner()->limit(); }
    const std::string& strategy() const noexcept { return lock_.strategy(); }
    capability capabilities() const noexcept { return lock_.capabilities(); }
    const std::shared_ptr<key>& owner() const noexcept { return lock_.owner(); }
    void set_auto_release(bool on) noexcept { lock_.set_auto_release(on); }

    // The lock behind the permit (its key carries the limit), for code written once for
    // named_lock: `locksmith run` supervises a permit as it does a lock.
    named_lock& as_lock() noexcept { return lock_; }

  private:
    named_lock lock_;
};

}  // namespace locksmith
