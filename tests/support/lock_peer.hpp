// SPDX-License-Identifier: MIT
// lock_peer: a forked process that holds lock objects for one resource and acts on the parent's
// commands, so that tests can put holders and waiters in different processes and order their
// steps through pipes (never sleeps). Generic: it builds its locks from a strategies_under_test()
// entry, in one of two patterns:
//   long_lived     one named_lock for the peer's whole life (a server process);
//   fresh_objects  a new lock_factory and lock object for every acquisition, dropped at unlock
//                  (what `locksmith run` and short-lived workers do).
// Every call but start_lock() waits for the peer's answer; a peer that does not answer within
// the safety limit fails the test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <locksmith/lock_factory.hpp>
#include <locksmith/named_lock.hpp>

#include "support/child_process.hpp"
#include "support/strategies_under_test.hpp"

namespace locksmith::test {

enum class lock_pattern { long_lived, fresh_objects };

const char* to_string(lock_pattern p) noexcept;

// A lock object made as a short-lived process makes it: a new lock_factory whose configuration
// gives the entry's options, and create_lock() pinned to the entry's strategy, with `ttl`.
struct fresh_lock {
    fresh_lock(const strategy_under_test& entry, const std::string& resource,
               std::chrono::milliseconds ttl = std::chrono::seconds(60));
    std::unique_ptr<lock_factory> factory;
    std::unique_ptr<named_lock> lock;
};

class lock_peer {
  public:
    lock_peer(const strategy_under_test& entry, const std::string& resource, lock_pattern pattern,
              std::chrono::milliseconds ttl = std::chrono::seconds(60));
    ~lock_peer();
    lock_peer(const lock_peer&) = delete;
    lock_peer& operator=(const lock_peer&) = delete;

    // One try (try_lock / try_lock_shared). Answers whether the peer holds it now.
    bool try_lock();
    bool try_lock_shared();
    // try_lock_for(wait).
    bool try_lock_for(std::chrono::milliseconds wait);
    // Sends lock() (exclusive) or lock_shared(), without waiting for the answer: the peer
    // answers once it holds the lock; see answer().
    void start_lock(bool shared = false);
    // The answer to start_lock(): true once the peer holds it; nullopt when none came within
    // `timeout` (the peer is still waiting).
    std::optional<bool> answer(std::chrono::milliseconds timeout);
    // unlock(); in the fresh_objects pattern the lock object and its factory are dropped too.
    // False when the peer held nothing.
    bool unlock();
    // refresh(ttl): false when it threw (the lock was lost) or the peer held nothing.
    bool refresh(std::chrono::milliseconds ttl);
    // is_acquired(), which asks the store.
    bool is_acquired();

  private:
    bool ask(char command);
    bool ask(char command, std::chrono::milliseconds arg);

    byte_pipe to_peer_;
    byte_pipe from_peer_;
    pid_t pid_ = -1;
};

}  // namespace locksmith::test
