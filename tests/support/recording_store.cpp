// SPDX-License-Identifier: MIT
#include "support/recording_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <thread>

#include <locksmith/errors.hpp>

namespace locksmith::test {

recording_store::recording_store(capability caps, std::string strategy)
    : store(std::move(strategy), caps) {}

recording_store::~recording_store() {
    for (int fd : news_)
        if (fd >= 0) ::close(fd);
}

void recording_store::grants_can_end(bool on) {
    std::lock_guard lock(mutex_);
    if (on && news_[0] < 0 && ::pipe2(news_, O_CLOEXEC | O_NONBLOCK) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
    if (!on)
        for (int& fd : news_) {
            if (fd >= 0) ::close(fd);
            fd = -1;
        }
}

void recording_store::permits_polled(bool on) {
    std::lock_guard lock(mutex_);
    permits_polled_ = on;
}

bool recording_store::do_waits_natively(const key& k) const {
    std::lock_guard lock(mutex_);
    return !(permits_polled_ && k.limit() != 0);
}

void recording_store::end_grants(const std::string& resource) {
    std::lock_guard lock(mutex_);
    table_.erase(resource);
    table_.erase("semaphore\n" + resource);
    if (news_[1] >= 0 && ::write(news_[1], "x", 1) != 1)
        throw std::system_error(errno, std::generic_category(), "write");
}

std::optional<int> recording_store::do_loss_fd(const key& k) {
    std::lock_guard lock(mutex_);
    if (news_[0] < 0) return std::nullopt;
    auto it = table_.find(entry_name(k));
    const bool held = it != table_.end() &&
                      (it->second.writer == k.token() || it->second.readers.count(k.token()) != 0);
    return held ? news_[0] : -1;
}

void recording_store::conflict_next(int n) {
    std::lock_guard lock(mutex_);
    conflicts_left_ = n;
}
void recording_store::conflict_randomly(bool on) {
    std::lock_guard lock(mutex_);
    random_conflicts_ = on;
}
void recording_store::acquire_delay(std::chrono::milliseconds delay) {
    std::lock_guard lock(mutex_);
    delay_ = delay;
}
void recording_store::fail_acquire(bool on) {
    std::lock_guard lock(mutex_);
    fail_acquire_ = on;
}

void recording_store::fail_acquire_transiently(int n) {
    std::lock_guard lock(mutex_);
    transient_failures_left_ = n;
}
void recording_store::lose_acquire_reply(bool on) {
    std::lock_guard lock(mutex_);
    lose_acquire_reply_ = on;
}
void recording_store::fail_release(bool on) {
    std::lock_guard lock(mutex_);
    fail_release_ = on;
}
void recording_store::ignore_release(bool on) {
    std::lock_guard lock(mutex_);
    ignore_release_ = on;
}
void recording_store::fail_refresh(bool on) {
    std::lock_guard lock(mutex_);
    fail_refresh_ = on;
}

void recording_store::clear(const std::string& resource) {
    std::lock_guard lock(mutex_);
    table_.erase(resource);
    table_.erase("semaphore\n" + resource);
}

std::vector<recording_store::call> recording_store::calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
}

int recording_store::count(call::kind what) const {
    std::lock_guard lock(mutex_);
    return int(std::count_if(calls_.begin(), calls_.end(),
                             [what](const call& c) { return c.what == what; }));
}

std::optional<recording_store::call> recording_store::last(call::kind what) const {
    std::lock_guard lock(mutex_);
    for (auto it = calls_.rbegin(); it != calls_.rend(); ++it)
        if (it->what == what) return *it;
    return std::nullopt;
}

void recording_store::reset_calls() {
    std::lock_guard lock(mutex_);
    calls_.clear();
}

void recording_store::record(call c) {
    std::lock_guard lock(mutex_);
    calls_.push_back(std::move(c));
}

std::string recording_store::entry_name(const key& k) {
    return k.limit() != 0 ? "semaphore\n" + k.resource() : k.resource();
}

bool recording_store::grant_locked(key& k, lock_mode mode) {
    auto& e = table_[entry_name(k)];
    const auto& me = k.token();
    if (k.limit() != 0) {
        if (e.limit != 0 && e.limit != k.limit())
            throw invalid_argument_error("semaphore '" + k.resource() + "' has a limit of " +
                                         std::to_string(e.limit) + ", not " +
                                         std::to_string(k.limit()));
        e.limit = k.limit();
        if (e.readers.count(me) == 0) {
            if (e.readers.size() >= e.limit) return false;
            e.readers.insert(me);
        }
        if (has(capabilities(), capability::fencing)) k.set_fencing_token(next_fencing_token_++);
        return true;
    }
    bool other_writer = !e.writer.empty() && e.writer != me;
    bool other_readers = std::any_of(e.readers.begin(), e.readers.end(),
                                     [&](const std::string& t) { return t != me; });
    if (mode == lock_mode::exclusive) {
        if (other_writer || other_readers) return false;
        e.readers.erase(me);  // promotion
        e.writer = me;
    } else {
        if (other_writer) return false;
        if (e.writer == me) e.writer.clear();  // demotion
        e.readers.insert(me);
    }
    if (has(capabilities(), capability::fencing)) k.set_fencing_token(next_fencing_token_++);
    return true;
}

void recording_store::throw_if_transiently_failing() {
    if (transient_failures_left_ == 0) return;
    if (transient_failures_left_ > 0) --transient_failures_left_;
    throw backend_error(strategy(), "ECONNREFUSED",
                        "injected transient failure (server restarting)", error_kind::transient);
}

bool recording_store::do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) {
    record({call::kind::try_acquire, k.resource(), k.token(), mode, ttl});
    std::chrono::milliseconds delay;
    {
        std::lock_guard lock(mutex_);
        delay = delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard lock(mutex_);
    if (fail_acquire_) throw backend_error(strategy(), "test", "injected acquire failure");
    throw_if_transiently_failing();
    if (conflicts_left_ > 0) {
        --conflicts_left_;
        return false;
    }
    if (random_conflicts_) {
        // xorshift64: deterministic per store, good enough for a coin.
        rng_ ^= rng_ << 13;
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        if (rng_ & 1) return false;
    }
    const bool granted = grant_locked(k, mode);
    if (granted && lose_acquire_reply_)
        throw backend_error(strategy(), "test", "injected loss of the reply to a grant");
    return granted;
}

bool recording_store::do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                                      deadline until) {
    record({call::kind::wait_acquire, k.resource(), k.token(), mode, ttl});
    std::chrono::milliseconds delay;
    {
        std::lock_guard lock(mutex_);
        delay = delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    // The double waits by polling its table; callers only see one wait_acquire call, which is
    // what the tests count.
    for (;;) {
        {
            std::lock_guard lock(mutex_);
            if (fail_acquire_) throw backend_error(strategy(), "test", "injected acquire failure");
            throw_if_transiently_failing();
            if (grant_locked(k, mode)) return true;
        }
        if (deadline::clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

bool recording_store::do_refresh(key& k, std::chrono::milliseconds ttl) {
    record({call::kind::refresh, k.resource(), k.token(), lock_mode::exclusive, ttl});
    std::chrono::milliseconds delay;
    {
        std::lock_guard lock(mutex_);
        delay = delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard lock(mutex_);
    if (fail_refresh_) return false;
    auto it = table_.find(entry_name(k));
    if (it == table_.end()) return false;
    return it->second.writer == k.token() || it->second.readers.count(k.token()) != 0;
}

void recording_store::do_release(key& k) {
    record({call::kind::release, k.resource(), k.token(), lock_mode::exclusive, {}});
    std::lock_guard lock(mutex_);
    if (fail_release_) throw backend_error(strategy(), "test", "injected release failure");
    if (ignore_release_) return;
    auto it = table_.find(entry_name(k));
    if (it == table_.end()) return;
    if (it->second.writer == k.token()) it->second.writer.clear();
    it->second.readers.erase(k.token());
    if (it->second.writer.empty() && it->second.readers.empty()) table_.erase(it);
}

bool recording_store::do_holds(const key& k) {
    record({call::kind::holds, k.resource(), k.token(), lock_mode::exclusive, {}});
    std::lock_guard lock(mutex_);
    char news[64];
    while (news_[0] >= 0 && ::read(news_[0], news, sizeof news) > 0) {
    }
    auto it = table_.find(entry_name(k));
    if (it == table_.end()) return false;
    return it->second.writer == k.token() || it->second.readers.count(k.token()) != 0;
}

lock_status recording_store::do_status(std::string_view resource) {
    std::lock_guard lock(mutex_);
    lock_status status;
    auto it = table_.find("semaphore\n" + std::string(resource));
    if (it != table_.end()) {
        status.limit = it->second.limit;
        status.permits_held = static_cast<std::uint32_t>(it->second.readers.size());
        status.held = it->second.readers.size() < it->second.limit
                          ? lock_status::state::free
                          : lock_status::state::held_exclusive;
        status.holders.assign(it->second.readers.begin(), it->second.readers.end());
        return status;
    }
    it = table_.find(std::string(resource));
    if (it == table_.end()) {
        status.held = lock_status::state::free;
    } else if (!it->second.writer.empty()) {
        status.held = lock_status::state::held_exclusive;
        status.holders.push_back(it->second.writer);
    } else {
        status.held = lock_status::state::held_shared;
        status.holders.assign(it->second.readers.begin(), it->second.readers.end());
    }
    return status;
}

}  // namespace locksmith::test
