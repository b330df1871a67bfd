// SPDX-License-Identifier: MIT
#include "support/forwarding_store.hpp"

#include <thread>

namespace locksmith::test {

forwarding_store::forwarding_store(std::shared_ptr<store> inner)
    : store(inner->strategy(), inner->capabilities()), inner_(std::move(inner)) {}

void forwarding_store::pause() const {
    int ms = delay_ms_;
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool forwarding_store::do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) {
    ++try_calls_;
    pause();
    return inner_->try_acquire(k, mode, ttl);
}

bool forwarding_store::do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                                       deadline until) {
    ++wait_calls_;
    pause();
    return inner_->wait_acquire(k, mode, ttl, until);
}

bool forwarding_store::do_waits_natively(const key& k) const {
    return inner_->waits_natively(k);
}

bool forwarding_store::do_refresh(key& k, std::chrono::milliseconds ttl) {
    pause();
    return inner_->refresh(k, ttl);
}

void forwarding_store::do_release(key& k) {
    ++release_calls_;
    inner_->release(k);
}

bool forwarding_store::do_holds(const key& k) {
    return inner_->holds(k);
}

std::optional<int> forwarding_store::do_loss_fd(const key& k) {
    return inner_->loss_fd(k);
}

lock_status forwarding_store::do_status(std::string_view resource) {
    return inner_->status(resource);
}

}  // namespace locksmith::test
