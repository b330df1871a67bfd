// SPDX-License-Identifier: MIT
#include <locksmith/backoff.hpp>

#include <algorithm>
#include <thread>

#include <locksmith/key.hpp>

namespace locksmith {

backoff::backoff(const retry_policy& policy)
    : policy_(policy),
      current_us_(double(std::max<std::int64_t>(1, policy.initial.count()))),
      rng_state_(0) {}

std::chrono::microseconds backoff::next_delay() {
    // Seeded from the OS so that waiters started at the same instant draw different jitter; on
    // the first delay, since most backoffs (a grant at the first try) never sleep and the seed is
    // a system call.
    if (rng_state_ == 0) rng_state_ = std::stoull(random_token().substr(0, 16), nullptr, 16) | 1;
    double base = current_us_;
    current_us_ = std::min(current_us_ * std::max(1.0, policy_.multiplier),
                           double(std::max(policy_.max, policy_.initial).count()));
    // xorshift64*: cheap, and quality is irrelevant for spreading sleeps.
    rng_state_ ^= rng_state_ >> 12;
    rng_state_ ^= rng_state_ << 25;
    rng_state_ ^= rng_state_ >> 27;
    double unit = double((rng_state_ * 2685821657736338717ull) >> 11) / double(1ull << 53);
    double jitter = std::clamp(policy_.jitter, 0.0, 0.999);
    double factor = 1.0 - jitter + 2.0 * jitter * unit;
    // `max` bounds the delay itself, jitter included.
    double cap = double(std::max(policy_.max, policy_.initial).count());
    return std::chrono::microseconds(
        std::max<std::int64_t>(1, std::int64_t(std::min(base * factor, cap))));
}

bool backoff::sleep(clock::time_point until) {
    auto now = clock::now();
    if (now >= until) return false;
    auto wake = now + next_delay();
    std::this_thread::sleep_until(std::min(wake, until));
    return true;
}

}  // namespace locksmith
