// SPDX-License-Identifier: MIT
#include <locksmith/author/store.hpp>

#include <algorithm>

#include <locksmith/author/caller_deadline.hpp>

#include <locksmith/errors.hpp>

namespace locksmith {

std::string_view to_string(lock_mode mode) noexcept {
    return mode == lock_mode::exclusive ? "exclusive" : "shared";
}

std::string_view to_string(lock_status::state state) noexcept {
    switch (state) {
        case lock_status::state::free:
            return "free";
        case lock_status::state::held_exclusive:
            return "held exclusively";
        case lock_status::state::held_shared:
            return "held shared";
        case lock_status::state::unknown:
            return "unknown";
    }
    return "unknown";
}

namespace {
thread_local std::optional<deadline> current_caller_deadline;
thread_local std::optional<deadline> current_refresh_deadline;
}  // namespace

std::optional<deadline> refresh_deadline() noexcept {
    return current_refresh_deadline;
}

deadline bounded_by_refresh_deadline(deadline until) noexcept {
    return current_refresh_deadline ? std::min(until, *current_refresh_deadline) : until;
}

std::optional<deadline> caller_deadline() noexcept {
    return current_caller_deadline;
}

caller_deadline_scope::caller_deadline_scope(deadline until) noexcept
    : previous_(current_caller_deadline) {
    current_caller_deadline = until;
}

caller_deadline_scope::~caller_deadline_scope() {
    current_caller_deadline = previous_;
}

request_deadline_scope::request_deadline_scope(deadline until) noexcept
    : previous_(current_refresh_deadline) {
    current_refresh_deadline = previous_ ? std::min(*previous_, until) : until;
}

request_deadline_scope::~request_deadline_scope() {
    current_refresh_deadline = previous_;
}

store::store(std::string strategy, capability capabilities)
    : strategy_(std::move(strategy)),
      capabilities_(capabilities),
      instance_id_(new_local_state_tag()) {}

void store::check_mode(const key& k, lock_mode mode) const {
    if (mode == lock_mode::shared && !has(capabilities_, capability::shared))
        throw invalid_argument_error("strategy '" + strategy_ + "' has no shared locks");
    if (k.limit() != 0 && !has(capabilities_, capability::counting))
        throw invalid_argument_error("strategy '" + strategy_ +
                                     "' has no counting semaphores (capability counting)");
}

bool store::try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) {
    check_mode(k, mode);
    return do_try_acquire(k, mode, ttl);
}

bool store::wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl, deadline until) {
    check_mode(k, mode);
    if (!waits_natively(k))
        throw invalid_argument_error("strategy '" + strategy_ + "' cannot wait natively" +
                                     (k.limit() != 0 ? " for a permit" : ""));
    return do_wait_acquire(k, mode, ttl, until);
}

bool store::waits_natively(const key& k) const {
    return has(capabilities_, capability::native_wait) && do_waits_natively(k);
}

bool store::refresh(key& k, std::chrono::milliseconds ttl) {
    if (!has(capabilities_, capability::expiring))
        throw invalid_argument_error("strategy '" + strategy_ + "' has no expiring locks");
    return do_refresh(k, ttl);
}

bool store::refresh(key& k, std::chrono::milliseconds ttl, deadline until) {
    const request_deadline_scope bounded(until);
    return refresh(k, ttl);
}

void store::release(key& k) {
    do_release(k);
}

bool store::holds(const key& k) {
    return do_holds(k);
}

std::optional<int> store::loss_fd(const key& k) {
    return do_loss_fd(k);
}

lock_status store::status(std::string_view resource) {
    validate_lock_name(resource);
    return do_status(resource);
}

std::optional<std::uint64_t> store::fencing_token(key& k) {
    if (!has(capabilities_, capability::fencing)) return std::nullopt;
    return do_fencing_token(k);
}

std::optional<std::uint64_t> store::do_fencing_token(key& k) {
    return k.fencing_token();
}

bool store::do_wait_acquire(key&, lock_mode, std::chrono::milliseconds, deadline) {
    throw invalid_argument_error("strategy '" + strategy_ + "' cannot wait natively");
}

bool store::do_waits_natively(const key&) const {
    return true;
}

bool store::do_refresh(key& k, std::chrono::milliseconds) {
    return do_holds(k);
}

std::optional<int> store::do_loss_fd(const key&) {
    return std::nullopt;
}

lock_status store::do_status(std::string_view) {
    return {};
}

}  // namespace locksmith
