// SPDX-License-Identifier: MIT
// The pool of idle sessions of the strategies whose locks live in a server session
// (pg_advisory, mysql_get_lock): header-only, included by each such module (its CMakeLists adds
// strategies/common to the include path).
//
//   session_pool<Session, Target>  idle sessions, none holding a lock, shared by a store and the
//                                  keys' states (a key may outlive its store)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <locksmith/author/strategy_support.hpp>

// Hidden in every module that includes it, as the session classes are.
#pragma GCC visibility push(hidden)

namespace locksmith {

// Session must be constructible from `const Target&` (connecting; it may throw) and offer
// hung_up() (the server ended it while idle), broken() (an error left it unusable) and ours()
// (false in a fork()ed child), all noexcept. A session refers to the pool's target, so the pool
// must outlive every session it made: holders of a session keep the pool (shared_ptr) too.
template <class Session, class Target>
class session_pool {
  public:
    session_pool(Target target, std::size_t max_idle)
        : target_(std::move(target)), max_idle_(max_idle) {}

    // An idle session the server has not ended, or a new one (connecting may throw).
    std::unique_ptr<Session> take() {
        {
            std::lock_guard guard(mutex_);
            if (generation_ != fork_generation()) {
                // A fork()ed child: the sessions are the parent's (their destructors leave them
                // alone). Used here, a session-level lock would be re-entered by two processes.
                idle_.clear();
                generation_ = fork_generation();
            }
            while (!idle_.empty()) {
                auto s = std::move(idle_.back());
                idle_.pop_back();
                if (!s->hung_up()) return s;
            }
        }
        return std::make_unique<Session>(target_);
    }

    // Keeps `s` for a later take(), up to max_idle; closes it otherwise. Requires: `s` holds no
    // lock (its locks would be granted again, re-entrantly, to the next key that takes it).
    void give_back(std::unique_ptr<Session> s) noexcept {
        if (!s || s->broken() || !s->ours()) return;
        std::lock_guard guard(mutex_);
        if (idle_.size() < max_idle_) idle_.push_back(std::move(s));
    }

    const Target& target() const noexcept { return target_; }

  private:
    const Target target_;
    const std::size_t max_idle_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<Session>> idle_;
    std::uint64_t generation_ = fork_generation();
};

}  // namespace locksmith

#pragma GCC visibility pop
