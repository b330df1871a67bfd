// SPDX-License-Identifier: MIT
// Same-host wake-ups for strategies that cannot wait natively (simple, memcached, sql, combined):
// their waiters poll with backoff, so a release was noticed only at the next poll (hand-over
// p99 of milliseconds, and up to retry_policy::max). A waiter on this host now sleeps on a futex
// of a per-user board in shared memory, for at most its backoff delay; a release of the name by a
// process of the same user on this host wakes one of them at once. Waiters on other hosts, or of
// other users, still find the release at their next poll: this only shortens waits, it grants
// nothing.
//
// The board is /dev/shm/locksmith-wake-<uid>: 4096 slots (a name's slot is its hash), 32 KiB,
// 0600, never followed through a symlink, used only when owned by this user, private to it and
// linked once, its pages reserved before they are mapped. Without it (no /dev/shm, a foreign or
// hard-linked file, no room left in /dev/shm) waiting is the plain backoff.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace locksmith::detail {

// Usage by a polling waiter: one local_waiter for the whole wait, arm() before each attempt,
// sleep_until() after a failed one. A release of the name on this host after arm() ends the
// sleep at once.
class local_waiter {
  public:
    explicit local_waiter(std::string_view name) noexcept;
    ~local_waiter();
    local_waiter(const local_waiter&) = delete;
    local_waiter& operator=(const local_waiter&) = delete;

    void arm() noexcept;
    void sleep_until(std::chrono::steady_clock::time_point wake) noexcept;

    struct slot;

  private:
    slot* slot_ = nullptr;  // null: no board, plain sleeps
    std::uint32_t seen_ = 0;
};

// After a release of `name`: wakes one of this host's waiters asleep on its slot (the kernel's
// oldest, as a rule), and makes the others that are between two attempts try again at once; the
// rest sleep on until their next poll. One, not all: the others would only find the lock taken
// again (a herd of round trips to the server). With no waiter it costs one atomic load.
void notify_local_waiters(std::string_view name) noexcept;

}  // namespace locksmith::detail
