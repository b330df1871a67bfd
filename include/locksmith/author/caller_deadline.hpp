// SPDX-License-Identifier: MIT
// caller_deadline: the deadline of the acquire a thread is making, for a store whose one try
// can take long.
//
//   caller_deadline        the deadline, if the caller has one
//   caller_deadline_scope  sets it for a scope (named_lock's polling wait)
//   refresh_deadline       the end of the lease a refresh on this thread renews, or a
//                          request_deadline_scope's deadline
//   request_deadline_scope bounds a thread's store requests for a scope
#pragma once

#include <optional>

#include <locksmith/author/store.hpp>

namespace locksmith {

// The caller's deadline for the acquire this thread is making, while named_lock polls
// try_acquire until a deadline: a store whose one try may take long (one that asks several
// servers, as `combined` does) can return by then. nullopt otherwise (a single try, lock()).
std::optional<deadline> caller_deadline() noexcept;

// The end of the lease that store::refresh(k, ttl, until) is renewing on this thread, while it
// runs, or the deadline of a request_deadline_scope (the earlier of the two); nullopt otherwise.
// A remote store bounds each request made meanwhile by it (its socket timeouts set from it, as
// from its command timeout): one refresh stuck on a dead network must not outlast the lease
// (issue 25).
std::optional<deadline> refresh_deadline() noexcept;

// `until`, or refresh_deadline() when that comes first.
deadline bounded_by_refresh_deadline(deadline until) noexcept;

// Sets caller_deadline() on this thread while it lives.
class caller_deadline_scope {
  public:
    explicit caller_deadline_scope(deadline until) noexcept;
    ~caller_deadline_scope();
    caller_deadline_scope(const caller_deadline_scope&) = delete;
    caller_deadline_scope& operator=(const caller_deadline_scope&) = delete;

  private:
    std::optional<deadline> previous_;
};

// Bounds every store request this thread makes while it lives by `until` (refresh_deadline() is
// the earlier of it and an enclosing one): `locksmith run`'s releases of a lock lost on a dead
// network, which must not keep it for a request's timeout after its retries are over.
class request_deadline_scope {
  public:
    explicit request_deadline_scope(deadline until) noexcept;
    ~request_deadline_scope();
    request_deadline_scope(const request_deadline_scope&) = delete;
    request_deadline_scope& operator=(const request_deadline_scope&) = delete;

  private:
    std::optional<deadline> previous_;
};

}  // namespace locksmith
