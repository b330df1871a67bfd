// SPDX-License-Identifier: MIT
// recording_store: a store double for unit tests of named_lock, lock_factory and the registry.
//
// It keeps a real, in-memory lock table (owners are key tokens, so a key restored from JSON is
// the same owner), records every hook call with its arguments, and lets a test inject
// contention, delays and failures. Symfony's LockTest uses PHPUnit mocks for the same purpose;
// a small real table is easier to reason about than scripted `exists` answers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <locksmith/author/store.hpp>
#include <locksmith/capability.hpp>

namespace locksmith::test {

class recording_store : public store {
  public:
    struct call {
        enum class kind { try_acquire, wait_acquire, refresh, release, holds };
        kind what;
        std::string resource;
        std::string token;
        lock_mode mode = lock_mode::exclusive;
        std::chrono::milliseconds ttl{0};
    };

    explicit recording_store(capability caps, std::string strategy = "recording");
    ~recording_store() override;

    // --- injection (set before use; read under the store's mutex) ---
    // The next `n` try_acquire calls report contention without looking at the table.
    void conflict_next(int n);
    // Every try_acquire reports contention with probability 1/2 (Symfony's "randomly conflicts").
    void conflict_randomly(bool on);
    // Sleeps this long inside every try_acquire, wait_acquire and refresh (to make a grant or a
    // renewal come back after its TTL).
    void acquire_delay(std::chrono::milliseconds delay);
    // try_acquire throws backend_error.
    void fail_acquire(bool on);
    // The next `n` acquisition calls (try_acquire, wait_acquire; every one when n < 0) throw a
    // transient backend_error, as a server that restarts does.
    void fail_acquire_transiently(int n);
    // try_acquire grants, then throws backend_error (a reply lost after the grant).
    void lose_acquire_reply(bool on);
    // release throws backend_error.
    void fail_release(bool on);
    // release does nothing, so the owner still holds afterwards.
    void ignore_release(bool on);
    // refresh reports that the lock is no longer ours.
    void fail_refresh(bool on);
    // The store says that its backend can end grants (store::loss_fd: a pipe that end_grants
    // makes readable and holds() drains), as a store of sessions does.
    void grants_can_end(bool on);
    // With capability::native_wait: waits natively for locks only, and named_lock polls for a
    // permit (as pg_advisory does: PostgreSQL cannot wait for any one of N locks).
    void permits_polled(bool on);

    // --- direct table access for tests ---
    // Frees `resource` for everybody (simulates another owner releasing or a grant expiring).
    void clear(const std::string& resource);
    // The backend ends every grant of `resource` (clear) and says so on the loss descriptor.
    void end_grants(const std::string& resource);

    // --- what happened ---
    std::vector<call> calls() const;
    int count(call::kind what) const;
    int try_acquires() const { return count(call::kind::try_acquire); }
    int wait_acquires() const { return count(call::kind::wait_acquire); }
    int refreshes() const { return count(call::kind::refresh); }
    int releases() const { return count(call::kind::release); }
    int holds_calls() const { return count(call::kind::holds); }
    // The last call of a kind; nullopt when there was none.
    std::optional<call> last(call::kind what) const;
    void reset_calls();

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) override;
    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                         deadline until) override;
    bool do_refresh(key& k, std::chrono::milliseconds ttl) override;
    void do_release(key& k) override;
    bool do_holds(const key& k) override;
    std::optional<int> do_loss_fd(const key& k) override;
    lock_status do_status(std::string_view resource) override;
    bool do_waits_natively(const key& k) const override;

  private:
    struct entry {
        std::string writer;             // token of the exclusive holder, empty when none
        std::set<std::string> readers;  // or, for a counting semaphore, the permit holders
        std::uint32_t limit = 0;        // a counting semaphore's, kept while it has holders
    };
    // The table's entry name of k: semaphores and locks of one name are separate objects.
    static std::string entry_name(const key& k);
    void record(call c);
    // Requires mutex_ held.
    bool grant_locked(key& k, lock_mode mode);
    // Caller holds mutex_.
    void throw_if_transiently_failing();

    mutable std::mutex mutex_;
    std::map<std::string, entry> table_;
    std::vector<call> calls_;
    int conflicts_left_ = 0;
    bool random_conflicts_ = false;
    std::chrono::milliseconds delay_{0};
    bool fail_acquire_ = false;
    int transient_failures_left_ = 0;
    bool lose_acquire_reply_ = false;
    bool fail_release_ = false;
    bool ignore_release_ = false;
    bool fail_refresh_ = false;
    int news_[2] = {-1, -1};  // grants_can_end: the loss descriptor's pipe
    bool permits_polled_ = false;
    std::uint64_t next_fencing_token_ = 1;
    std::uint64_t rng_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace locksmith::test
