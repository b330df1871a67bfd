// SPDX-License-Identifier: MIT
// The renewal thread: one per process, renewing every auto_refresh lock at a third of its TTL.
// One thread rather than one per lock, because a process may hold thousands of leases
// (Redisson's watchdog makes the same choice).
#include <pthread.h>
#include <condition_variable>
#include <map>
#include <new>
#include <thread>

#include <locksmith/author/strategy_support.hpp>

#include "core/lock_state.hpp"
#include "core/logging.hpp"

namespace locksmith {
namespace {

void the_renewal_thread_after_fork();

class renewal_thread {
  public:
    renewal_thread() {
        // A fork()ed child has our memory but not our thread: start afresh there, with none of
        // the parent's locks (the child does not own them).
        ::pthread_atfork(nullptr, nullptr, [] { the_renewal_thread_after_fork(); });
    }

    void reset_in_child() {
        new (&mutex_) std::mutex();  // another thread may have held it at the fork
        new (&wakeup_) std::condition_variable();
        queue_.clear();
        started_ = false;
    }

    void schedule(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when) {
        std::lock_guard guard(mutex_);
        queue_.emplace(when, std::move(lock));
        if (!started_) {
            started_ = true;
            // Detached: it owns nothing that needs tearing down, and joining it from a static
            // destructor could deadlock with locks released at exit.
            const every_signal_blocked in_the_new_thread;
            std::thread([this] { run(); }).detach();
        }
        wakeup_.notify_one();
    }

  private:
    void run() {
        std::unique_lock guard(mutex_);
        while (true) {
            if (queue_.empty()) {
                wakeup_.wait(guard);
                continue;
            }
            auto first = queue_.begin();
            if (first->first > deadline::clock::now()) {
                wakeup_.wait_until(guard, first->first);
                continue;
            }
            auto lock = std::move(first->second);
            queue_.erase(first);
            guard.unlock();
            std::optional<deadline::clock::time_point> next;
            if (auto alive = lock.lock()) next = alive->renew();
            guard.lock();
            if (next) queue_.emplace(*next, std::move(lock));
        }
    }

    std::mutex mutex_;
    std::condition_variable wakeup_;
    std::multimap<deadline::clock::time_point, std::weak_ptr<named_lock::state>> queue_;
    bool started_ = false;
};

renewal_thread* instance = nullptr;

renewal_thread& the_renewal_thread() {
    static auto* thread = instance = new renewal_thread();  // never destroyed: see the detach
    return *thread;
}

void the_renewal_thread_after_fork() {
    if (instance != nullptr) instance->reset_in_child();
}

}  // namespace

void schedule_renewal(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when) {
    the_renewal_thread().schedule(std::move(lock), when);
}

std::optional<named_lock::state::clock::time_point> named_lock::state::renew() {
    const auto ttl = options.ttl;
    std::unique_lock guard(mutex, std::try_to_lock);
    // The owner is in the middle of an operation: come back soon rather than block the thread
    // that renews every other lock of the process.
    if (!guard)
        return clock::now() + std::min<clock::duration>(ttl / 10, std::chrono::milliseconds(50));
    if (!held || !options.auto_refresh) {
        renewal_queued = false;
        return std::nullopt;
    }
    std::optional<error> lost;
    try {
        const auto started = clock::now();
        owner->clear_attempt_started();
        if (store->refresh(*owner, ttl)) {
            restart_lifetime(started, ttl);
            if (options.logger) {
                const auto took = clock::now() - started;
                log(log_level::debug, "renewed",
                    "renewed lock '" + owner->resource() + "' (" + store->strategy() + ") for " +
                        seconds_text(ttl),
                    {}, took);
            }
            return started + ttl / 3;
        }
        lost.emplace(acquire_error("lock '" + owner->resource() +
                                   "' was lost: it expired or was taken over before its renewal"));
    } catch (const std::exception& e) {
        // A backend hiccup: retry while the grant still has time left.
        if (!owner->is_expired()) {
            log(log_level::warning, "renewal_failed",
                "renewing lock '" + owner->resource() + "' (" + store->strategy() +
                    ") failed; retrying while it has time left: " + e.what(),
                e.what());
            return clock::now() + ttl / 10;
        }
        lost.emplace(backend_error(store->strategy(), "",
                                   "lock '" + owner->resource() +
                                       "' was lost: renewals failed until its TTL ran out (last "
                                       "error: " +
                                       e.what() + ")"));
    }
    held.reset();
    renewal_queued = false;
    log(log_level::error, "lock_lost", lost->what(), lost->what());
    auto on_lost = options.on_lost;
    guard.unlock();
    if (on_lost) {
        try {
            on_lost(*lost);
        } catch (...) {
            // The renewal thread must survive a throwing callback.
        }
    } else {
        report(*lost);
    }
    return std::nullopt;
}

}  // namespace locksmith
