// SPDX-License-Identifier: MIT
// key: the identity of one lock holder.
//
// A key names the resource and carries a random owner token (128 bits, hex). Two keys for the
// same resource are two competing owners, even in one thread. The key also keeps the lock's
// lifetime (on the monotonic clock), the fencing token of the current grant, and the store's
// private state. Locks made from one key (lock_factory::create_lock_from_key) share the owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace locksmith {

// Longest accepted resource name, in bytes. Any bytes are allowed, NUL and non-UTF-8 included.
inline constexpr std::size_t max_name_length = 1024 * 1024;

// Throws invalid_argument_error when `name` is empty or longer than max_name_length.
void validate_lock_name(std::string_view name);

// Largest limit of a counting semaphore (a strategy may allow fewer: System V's is 32767).
inline constexpr std::uint32_t max_semaphore_limit = 1'000'000;

// Throws invalid_argument_error unless 1 <= limit <= max_semaphore_limit.
void validate_semaphore_limit(std::uint64_t limit);

// A tag for key::set_local_state, unique in this process and never 0. Every store has one
// (store::instance_id()); stores that share state across instances take one of their own.
std::uint64_t new_local_state_tag() noexcept;

// Base of a store's per-key state that lives only in this process (an open file, a semaphore
// handle). A store derives from it and keeps it in the key with key::set_local_state().
struct key_local_state {
    virtual ~key_local_state() = default;
};

class key {
  public:
    using clock = std::chrono::steady_clock;

    // A new owner of `resource` with a fresh random token.
    // Throws invalid_argument_error for a bad name (see validate_lock_name).
    explicit key(std::string resource);

    const std::string& resource() const noexcept { return resource_; }
    // 32 lowercase hex digits (128 random bits from the OS).
    const std::string& token() const noexcept { return token_; }

    // --- lifetime (Symfony's rules) ---
    // Forgets the expiry: the key no longer expires.
    void reset_lifetime() noexcept { expires_at_.reset(); }
    // Lowers the expiry to `deadline` when that is earlier than the current one; never raises it.
    void reduce_lifetime(clock::time_point deadline) noexcept;
    std::optional<clock::time_point> expires_at() const noexcept { return expires_at_; }
    // Time left before expiry (negative once expired); nullopt for a key that does not expire.
    std::optional<std::chrono::milliseconds> remaining_lifetime() const;
    bool is_expired() const;
    // A store that waits natively and expires calls this right before the attempt that grants,
    // so that the lifetime is measured from there, not from the start of a long wait.
    void set_attempt_started(clock::time_point when) noexcept { attempt_started_ = when; }
    std::optional<clock::time_point> attempt_started() const noexcept { return attempt_started_; }
    // A store whose grant is worth less than its TTL (a quorum's allowance for clock drift) says
    // by how much; named_lock takes it off the owner's lifetime.
    void set_lifetime_margin(std::chrono::milliseconds margin) noexcept { margin_ = margin; }
    std::chrono::milliseconds lifetime_margin() const noexcept { return margin_; }
    // named_lock calls this before each grant or refresh: the hints above are per call.
    void clear_attempt_started() noexcept {
        attempt_started_.reset();
        margin_ = {};
    }

    // --- counting semaphores ---
    // 0 for a lock (the default); N for one permit of the counting semaphore `resource` of N
    // permits (named_semaphore). Stores act on such a key only with capability::counting.
    std::uint32_t limit() const noexcept { return limit_; }
    // Throws invalid_argument_error for a limit beyond max_semaphore_limit.
    void set_limit(std::uint32_t limit);

    // --- fencing ---
    std::optional<std::uint64_t> fencing_token() const noexcept { return fencing_token_; }
    void set_fencing_token(std::optional<std::uint64_t> token) noexcept { fencing_token_ = token; }

    // --- store state ---
    // Process-local state (file descriptors, handles); never serialized. It belongs to the store
    // that set it (store::instance_id()): another store sees none and starts afresh. The check
    // is an integer compare, not a dynamic_cast: the fastest stores grant in tens of nanoseconds.
    key_local_state* local_state() const noexcept { return local_state_.get(); }
    template <class T>
    T* local_state_of(std::uint64_t store_id) const noexcept {
        return local_state_store_ == store_id ? static_cast<T*>(local_state_.get()) : nullptr;
    }
    void set_local_state(std::uint64_t store_id, std::unique_ptr<key_local_state> state) noexcept {
        local_state_ = std::move(state);
        local_state_store_ = local_state_ ? store_id : 0;
    }
    // State that travels with a serialized key (JSON object, empty by default).
    nlohmann::json& portable_state() noexcept { return portable_state_; }
    const nlohmann::json& portable_state() const noexcept { return portable_state_; }

    // --- serialization ---
    // Marks the key as bound to this process; `reason` says why (shown by to_json()).
    void mark_unserializable(std::string reason);
    bool serializable() const noexcept { return unserializable_reason_.empty(); }
    // {"resource","token","limit"?,"expires_at_unix_ms"?,"fencing_token"?,"state"}. The expiry
    // travels as wall-clock time, so a key moved to another host assumes synchronised clocks.
    // Throws not_serializable_error when the key was marked unserializable.
    nlohmann::json to_json() const;
    // Throws invalid_argument_error naming the missing or malformed field.
    static key from_json(const nlohmann::json& json);

  private:
    key() = default;
    std::string resource_;
    std::string token_;
    std::optional<clock::time_point> expires_at_;
    std::optional<clock::time_point> attempt_started_;
    std::chrono::milliseconds margin_{0};
    std::optional<std::uint64_t> fencing_token_;
    std::uint32_t limit_ = 0;
    std::unique_ptr<key_local_state> local_state_;
    std::uint64_t local_state_store_ = 0;
    nlohmann::json portable_state_ = nlohmann::json::object();
    std::string unserializable_reason_;
};

// 128 random bits from getrandom(2) as 32 hex digits.
std::string random_token();

}  // namespace locksmith
