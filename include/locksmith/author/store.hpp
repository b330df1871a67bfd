// SPDX-License-Identifier: MIT
// store: the backend half of a lock, implemented once per strategy.
//
//   lock_mode     exclusive (writer) or shared (reader)
//   deadline      an instant on the monotonic clock; deadline::max() waits forever
//   lock_status   what a store can tell about a name without taking it (for `locksmith status`)
//   store         the interface: public non-virtual operations that do the common checks and call
//                 the protected hooks a strategy implements
//
// A store is shared by every lock of its strategy in the process and must be thread-safe. It
// knows nothing about waiting policies, lifetimes or auto-release: named_lock does that once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/capability.hpp>
#include <locksmith/key.hpp>

namespace locksmith {

enum class lock_mode { exclusive, shared };

using deadline = std::chrono::steady_clock::time_point;

struct lock_status {
    enum class state { free, held_exclusive, held_shared, unknown };
    state held = state::unknown;
    // What the strategy knows about the holders: "pid 1234 on host a" etc. May be empty.
    std::vector<std::string> holders;
    // Time left before the current grant expires, for expiring strategies.
    std::optional<std::chrono::milliseconds> remaining;
    // For a counting semaphore: its limit and how many permits are held (`held` is then
    // held_exclusive when none is left, free otherwise). nullopt for a lock.
    std::optional<std::uint32_t> limit;
    std::optional<std::uint32_t> permits_held;
};

std::string_view to_string(lock_mode mode) noexcept;
std::string_view to_string(lock_status::state state) noexcept;

class store {
  public:
    virtual ~store() = default;
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    const std::string& strategy() const noexcept { return strategy_; }
    capability capabilities() const noexcept { return capabilities_; }
    // Unique among the stores of this process (never 0, never reused): tags the state a store
    // keeps in a key (key::set_local_state).
    std::uint64_t instance_id() const noexcept { return instance_id_; }

    // Tries once to make `k` hold the lock in `mode`; when k.limit() is N > 0, one of the N
    //   permits of the counting semaphore k.resource() instead (mode is then exclusive).
    // Requires: `mode` is shared only for stores with capability::shared; `ttl` > 0 for stores with
    //   capability::expiring (ignored by others); k.limit() is 0 for stores without
    //   capability::counting (checked: invalid_argument_error).
    // Counting: a store keeps the limit with the name where its backend can, and refuses a key
    //   whose limit differs from the one kept (invalid_argument_error): never N1 + N2 holders.
    //   Semaphores and locks of one name are separate objects unless the strategy says otherwise.
    // Effects: re-acquiring in the mode already held succeeds (and, for expiring stores, renews
    //   the TTL); acquiring the other mode promotes or demotes the same owner. A failed promotion
    //   keeps the read lock. On success the store may set k's fencing token.
    // Returns: false when another owner holds the lock (contention is not an error).
    // Throws: backend_error when the backend fails.
    bool try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl);

    // Like try_acquire, but waits without polling until `until`.
    // Requires: waits_natively(k).
    // Returns: false when `until` passed first.
    bool wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl, deadline until);

    // Does a wait for k happen in the backend (wait_acquire), or does named_lock poll
    // try_acquire? capability::native_wait, unless the store waits natively for its locks only
    // (pg_advisory: PostgreSQL cannot wait for any one of a semaphore's N permits).
    bool waits_natively(const key& k) const;

    // Extends k's grant to now + ttl. Requires capability::expiring and ttl > 0.
    // Returns: false when k no longer holds the lock (it expired or was taken over).
    bool refresh(key& k, std::chrono::milliseconds ttl);
    // The same, given up at `until` (the end of the lease being renewed: a reply after it is of
    // no use, the holder having been told that the lock is lost): while do_refresh runs,
    // refresh_deadline() is `until`, and a remote store's requests wait for the server no longer
    // (throwing backend_error, transient, as at its command timeout).
    bool refresh(key& k, std::chrono::milliseconds ttl, deadline until);

    // Releases k's grant, in either mode. A lock that k does not hold is left alone (no error).
    // Throws: backend_error when the backend fails.
    void release(key& k);

    // Does k (this owner, not anybody) hold the lock now?
    bool holds(const key& k);

    // How k learns that the backend ended its grant while k held it: a session or connection
    // that the server closed (pg_terminate_backend, a restart, an expired ZooKeeper session),
    // not an expiry (named_lock tracks lifetimes itself).
    // Returns: nullopt for stores whose grants end only by release or expiry (the default).
    //   Otherwise a descriptor that turns readable (POLLIN) when k's grant may have ended so, or
    //   -1 when k has no live grant here (then holds() is false). Readable means "ask holds()":
    //   it answers from the backend and takes in the news, so that the descriptor is quiet again
    //   while the grant lives. The store owns the descriptor (close-on-exec); it stays valid
    //   until the next operation on k. Cheap after the first call for a grant; never waits
    //   for the backend longer than one request.
    // A store that returns a value never grants k afresh in place of a grant that ended so (an
    //   acquire while it still keeps that grant throws acquire_error); release() drops it.
    std::optional<int> loss_fd(const key& k);

    // Who holds `resource`, without taking it. Stores that cannot tell return state::unknown.
    lock_status status(std::string_view resource);
    // The fencing token of k's current grant (capability::fencing), kept in k. A store may
    // assign it on first request instead of at the grant, so that owners that never ask pay
    // nothing; it then assigns it only while k still holds the lock, which keeps tokens strictly
    // increasing in grant order.
    // Returns: nullopt for stores without fencing.
    // Throws: expired_error when k lost the lock before a token was assigned; backend_error.
    std::optional<std::uint64_t> fencing_token(key& k);

  protected:
    store(std::string strategy, capability capabilities);

    virtual bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) = 0;
    // Only called when waits_natively(k).
    virtual bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                                 deadline until);
    // Only asked for stores with capability::native_wait. Default: true.
    virtual bool do_waits_natively(const key& k) const;
    // Only called for stores with capability::expiring.
    virtual bool do_refresh(key& k, std::chrono::milliseconds ttl);
    virtual void do_release(key& k) = 0;
    virtual bool do_holds(const key& k) = 0;
    // Default: nullopt (grants end only by release or expiry).
    virtual std::optional<int> do_loss_fd(const key& k);
    virtual lock_status do_status(std::string_view resource);
    // Default: the token the grant put in k (or none).
    virtual std::optional<std::uint64_t> do_fencing_token(key& k);

  private:
    void check_mode(const key& k, lock_mode mode) const;
    std::string strategy_;
    capability capabilities_;
    std::uint64_t instance_id_;
};

}  // namespace locksmith
