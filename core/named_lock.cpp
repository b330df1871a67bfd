#include <locksmith/named_lock.hpp>

#include <cstdio>

namespace locksmith {

using clock = deadline::clock;

void validate_ttl(std::chrono::milliseconds ttl) {
    if (ttl <= ttl.zero())
        throw invalid_argument_error("ttl must be positive, got " + std::to_string(ttl.count()) +
                                     " ms");
    if (ttl > max_ttl)
        throw invalid_argument_error("ttl of " + std::to_string(ttl.count()) +
                                     " ms exceeds the maximum of 365 days");
}

named_lock::named_lock(std::shared_ptr<store> store, std::shared_ptr<key> owner,
                       lock_options options)
    : store_(std::move(store)), key_(std::move(owner)), options_(std::move(options)) {
    if (!store_ || !key_) throw invalid_argument_error("named_lock needs a store and a key");
    validate_ttl(options_.ttl);
}

named_lock::~named_lock() {
    if (store_ && options_.auto_release && held_) unlock();
}

named_lock::named_lock(named_lock&& other) noexcept
    : store_(std::move(other.store_)),
      key_(std::move(other.key_)),
      options_(std::move(other.options_)),
      held_(std::exchange(other.held_, std::nullopt)) {}

named_lock& named_lock::operator=(named_lock&& other) noexcept {
    if (this != &other) {
        if (store_ && options_.auto_release && held_) unlock();
        store_ = std::move(other.store_);
        key_ = std::move(other.key_);
        options_ = std::move(other.options_);
        held_ = std::exchange(other.held_, std::nullopt);
    }
    return *this;
}

lock_mode named_lock::effective_mode(lock_mode wanted) const noexcept {
    // Symfony's rule: a read lock on a store without read locks is a write lock.
    if (wanted == lock_mode::shared && !has(store_->capabilities(), capability::shared))
        return lock_mode::exclusive;
    return wanted;
}

bool named_lock::acquire_until(lock_mode wanted, deadline until) {
    const lock_mode mode = effective_mode(wanted);
    const bool expiring = has(store_->capabilities(), capability::expiring);
    const std::chrono::milliseconds ttl = expiring ? options_.ttl : std::chrono::milliseconds(0);
    const auto previous_expiry = key_->expires_at();

    key_->clear_attempt_started();
    auto started = clock::now();
    bool granted;
    if (until <= started) {
        granted = store_->try_acquire(*key_, mode, ttl);
    } else if (has(store_->capabilities(), capability::native_wait)) {
        granted = store_->wait_acquire(*key_, mode, ttl, until);
    } else {
        backoff delays(options_.retry);
        while (!(granted = store_->try_acquire(*key_, mode, ttl))) {
            if (!delays.sleep(until)) break;
            started = clock::now();
        }
    }
    if (!granted) {
        // A failed promotion keeps the read lock, and with it the lifetime it had.
        if (previous_expiry) key_->reduce_lifetime(*previous_expiry);
        return false;
    }
    after_grant(mode, key_->attempt_started().value_or(started));
    return true;
}

void named_lock::after_grant(lock_mode mode, clock::time_point started) {
    held_ = mode;
    if (!has(store_->capabilities(), capability::serializable) && key_->serializable())
        key_->mark_unserializable("strategy '" + store_->strategy() +
                                  "' binds its locks to this process");
    if (!has(store_->capabilities(), capability::expiring)) return;
    // Lifetime counts from before the request was sent: the server's clock started no earlier.
    key_->reset_lifetime();
    key_->reduce_lifetime(started + options_.ttl);
    if (key_->is_expired()) {
        try {
            store_->release(*key_);
        } catch (const std::exception&) {
            // The grant is already void; the expiry below is what the caller must hear about.
        }
        held_.reset();
        throw expired_error("lock '" + name() + "' expired before it was granted (ttl " +
                            std::to_string(options_.ttl.count()) + " ms)");
    }
}

void named_lock::lock() {
    if (!acquire_until(lock_mode::exclusive, deadline::max()))
        throw acquire_error("lock '" + name() + "' could not be acquired");
}

bool named_lock::try_lock() { return acquire_until(lock_mode::exclusive, deadline::min()); }

void named_lock::lock_shared() {
    if (!acquire_until(lock_mode::shared, deadline::max()))
        throw acquire_error("shared lock '" + name() + "' could not be acquired");
}

bool named_lock::try_lock_shared() { return acquire_until(lock_mode::shared, deadline::min()); }

bool named_lock::acquire(bool blocking) {
    return acquire_until(lock_mode::exclusive, blocking ? deadline::max() : deadline::min());
}

bool named_lock::acquire_read(bool blocking) {
    return acquire_until(lock_mode::shared, blocking ? deadline::max() : deadline::min());
}

bool named_lock::acquire(capability mode) {
    const capability allowed = capability::exclusive | capability::shared | capability::noblock;
    if ((mode & ~allowed) != capability::none)
        throw invalid_argument_error("acquire mode '" + to_string(mode) +
                                     "' may only combine exclusive or shared with noblock");
    if (has(mode, capability::exclusive | capability::shared))
        throw invalid_argument_error("acquire mode cannot be both exclusive and shared");
    const lock_mode wanted = has(mode, capability::shared) ? lock_mode::shared : lock_mode::exclusive;
    return acquire_until(wanted, has(mode, capability::noblock) ? deadline::min() : deadline::max());
}

void named_lock::unlock() noexcept {
    try {
        store_->release(*key_);
    } catch (const error& e) {
        report(e);
    } catch (const std::exception& e) {
        report(release_error("releasing lock '" + name() + "' failed: " + e.what()));
    }
    held_.reset();
    key_->reset_lifetime();
}

void named_lock::release() {
    try {
        store_->release(*key_);
    } catch (const error&) {
        held_.reset();
        throw;
    } catch (const std::exception& e) {
        held_.reset();
        throw release_error("releasing lock '" + name() + "' failed: " + e.what());
    }
    held_.reset();
    key_->reset_lifetime();
    if (store_->holds(*key_))
        throw release_error("lock '" + name() + "' is still held after release");
}

void named_lock::refresh() { refresh(options_.ttl); }

void named_lock::refresh(std::chrono::milliseconds ttl) {
    validate_ttl(ttl);
    if (!has(store_->capabilities(), capability::expiring)) return;
    const auto started = clock::now();
    if (!store_->refresh(*key_, ttl)) {
        held_.reset();
        key_->reset_lifetime();
        throw acquire_error("lock '" + name() +
                            "' is no longer held by this owner: it expired or was taken over");
    }
    if (!held_) held_ = lock_mode::exclusive;
    key_->reset_lifetime();
    key_->reduce_lifetime(started + ttl);
    if (key_->is_expired()) {
        try {
            store_->release(*key_);
        } catch (const std::exception&) {
        }
        held_.reset();
        throw expired_error("lock '" + name() + "' expired before its refresh returned (ttl " +
                            std::to_string(ttl.count()) + " ms)");
    }
}

bool named_lock::is_acquired() {
    const bool holds = !key_->is_expired() && store_->holds(*key_);
    if (!holds)
        held_.reset();
    else if (!held_)
        held_ = lock_mode::exclusive;  // continued from a serialized key; the mode is the store's
    return holds;
}

std::optional<std::chrono::milliseconds> named_lock::remaining_lifetime() const {
    if (!held_ || !has(store_->capabilities(), capability::expiring)) return std::nullopt;
    return key_->remaining_lifetime();
}

bool named_lock::is_expired() const { return key_->is_expired(); }

std::optional<std::uint64_t> named_lock::fencing_token() const {
    if (!held_) return std::nullopt;
    return key_->fencing_token();
}

nlohmann::json named_lock::serialize_key() const {
    auto j = key_->to_json();
    j["strategy"] = store_->strategy();
    return j;
}

void named_lock::report(const error& e) const noexcept {
    if (options_.on_error) {
        try {
            options_.on_error(e);
            return;
        } catch (...) {
            // A throwing handler must not escape a noexcept unlock; fall back to stderr.
        }
    }
    std::fprintf(stderr, "locksmith: %s\n", e.what());
}

}  // namespace locksmith
