// SPDX-License-Identifier: MIT
// forwarding_store: wraps a real store, counts the calls that reach it and can delay them.
//
// The conformance suite uses it to check what named_lock does on top of a real strategy:
// that try_lock_for(0) is one attempt, and that a grant coming back after its TTL is released
// (Symfony's testAbortAfterExpiration, which relies on a TTL shorter than the store call).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include <locksmith/author/store.hpp>

namespace locksmith::test {

class forwarding_store : public store {
  public:
    explicit forwarding_store(std::shared_ptr<store> inner);

    // Sleep this long before forwarding try_acquire, wait_acquire and refresh.
    void delay(std::chrono::milliseconds d) { delay_ms_ = int(d.count()); }

    int acquire_calls() const { return try_calls_ + wait_calls_; }
    int try_calls() const { return try_calls_; }
    int wait_calls() const { return wait_calls_; }
    int release_calls() const { return release_calls_; }
    store& inner() { return *inner_; }

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) override;
    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                         deadline until) override;
    bool do_waits_natively(const key& k) const override;
    bool do_refresh(key& k, std::chrono::milliseconds ttl) override;
    void do_release(key& k) override;
    bool do_holds(const key& k) override;
    std::optional<int> do_loss_fd(const key& k) override;
    lock_status do_status(std::string_view resource) override;

  private:
    void pause() const;
    std::shared_ptr<store> inner_;
    std::atomic<int> delay_ms_{0};
    std::atomic<int> try_calls_{0};
    std::atomic<int> wait_calls_{0};
    std::atomic<int> release_calls_{0};
};

}  // namespace locksmith::test
