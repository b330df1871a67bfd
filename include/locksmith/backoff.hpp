// SPDX-License-Identifier: MIT
// Waiting for stores that cannot wait natively.
//
//   retry_policy  exponential backoff parameters (first delay, cap, growth, jitter)
//   backoff       one waiter's sequence of delays, each clipped to the caller's deadline
#pragma once

#include <chrono>
#include <cstdint>

namespace locksmith {

struct retry_policy {
    // First delay after a failed attempt. Must be > 0.
    std::chrono::microseconds initial{500};
    // Largest delay between two attempts. Must be >= initial.
    std::chrono::microseconds max{50'000};
    // Each delay is the previous one times this (>= 1).
    double multiplier = 2.0;
    // Each delay is drawn uniformly from [d·(1-jitter), d·(1+jitter)], so that waiters started
    // together spread out. 0 disables jitter; must be in [0, 1).
    double jitter = 0.2;
};

class backoff {
  public:
    using clock = std::chrono::steady_clock;
    explicit backoff(const retry_policy& policy = {});

    // Sleeps the next delay, or only until `until` if that comes first.
    // Returns: false, without sleeping, when `until` has already passed.
    bool sleep(clock::time_point until);

    // The next delay, without sleeping (for tests and for stores that wait on something else).
    std::chrono::microseconds next_delay();

  private:
    retry_policy policy_;
    double current_us_;
    std::uint64_t rng_state_;
};

}  // namespace locksmith
