// SPDX-License-Identifier: MIT
// The renewal threads, renewing every auto_refresh lock at a third of its TTL. A few threads
// rather than one per lock, because a process may hold thousands of leases (Redisson's watchdog
// has one timer for all); more than one, because a renewal stuck on a dead network must not
// hold back the others. Beside them, the lease watchdog: a renewal may be stuck in a store call
// on a dead network until the lease's end (its deadline), and the holder must be told then, not
// when the call gives up (issue 25), so the watchdog, which never calls a store, checks each
// lease at the end it had when its renewal began.
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

void the_threads_after_fork();

// A queue of locks, each worked on at the time it was queued for. `max_workers` threads take
// what is due: more than one where a call may block (a renewal's store call on a dead network,
// bounded by that lease's end), so that one lock's stuck renewal does not hold back the renewals
// of the others past their own leases (issue 25). A thread is added when something is due and
// none is idle, and leaves after idling for a while with another one idle beside it.
class renewal_thread {
  public:
    // `work` is called at the time a lock was queued for, and returns when to call it next.
    using work = std::optional<deadline::clock::time_point> (named_lock::state::*)();

    renewal_thread(work w, int max_workers) : work_(w), max_workers_(max_workers) {}

    void reset_in_child() {
        new (&mutex_) std::mutex();  // another thread may have held it at the fork
        new (&wakeup_) std::condition_variable();
        queue_.clear();
        workers_ = 0;
        idle_ = 0;
    }

    void schedule(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when) {
        std::lock_guard guard(mutex_);
        queue_.emplace(when, std::move(lock));
        if (workers_ == 0) start_worker();
        wakeup_.notify_one();
    }

  private:
    // Called with mutex_ held.
    void start_worker() {
        ++workers_;
        // Detached: it owns nothing that needs tearing down, and joining it from a static
        // destructor could deadlock with locks released at exit.
        const every_signal_blocked in_the_new_thread;
        std::thread([this] { run(); }).detach();
    }

    void run() {
        constexpr auto linger = std::chrono::seconds(10);
        std::unique_lock guard(mutex_);
        while (true) {
            const auto now = deadline::clock::now();
            auto first = queue_.begin();
            if (first == queue_.end() || first->first > now) {
                const auto wake =
                    first == queue_.end() ? now + linger : std::min(first->first, now + linger);
                ++idle_;
                const bool timed_out = wakeup_.wait_until(guard, wake) == std::cv_status::timeout;
                --idle_;
                // Nothing to do for a while, and another thread waits too: one is enough.
                if (timed_out && idle_ > 0 && deadline::clock::now() >= now + linger) {
                    --workers_;
                    return;
                }
                continue;
            }
            auto lock = std::move(first->second);
            queue_.erase(first);
            // What comes due while this one works goes to another thread.
            if (idle_ == 0 && workers_ < max_workers_) start_worker();
            guard.unlock();
            std::optional<deadline::clock::time_point> next;
            if (auto alive = lock.lock()) next = ((*alive).*work_)();
            guard.lock();
            if (next) queue_.emplace(*next, std::move(lock));
        }
    }

    const work work_;
    const int max_workers_;
    std::mutex mutex_;
    std::condition_variable wakeup_;
    std::multimap<deadline::clock::time_point, std::weak_ptr<named_lock::state>> queue_;
    int workers_ = 0;  // threads running run()
    int idle_ = 0;     // of which waiting for something to come due
};

// Renewals in flight at once at most: each blocks a thread for at most its lease's remainder.
constexpr int max_renewal_threads = 32;

// Never destroyed: see the detach.
renewal_thread* renewals = nullptr;
renewal_thread* watchdog = nullptr;

void register_fork_handler() {
    // A fork()ed child has our memory but not our threads: start afresh there, with none of
    // the parent's locks (the child does not own them).
    static const bool once = [] {
        ::pthread_atfork(nullptr, nullptr, [] { the_threads_after_fork(); });
        return true;
    }();
    (void)once;
}

renewal_thread& the_renewal_thread() {
    static auto* thread = renewals =
        (register_fork_handler(),
         new renewal_thread(&named_lock::state::renew, max_renewal_threads));
    return *thread;
}

renewal_thread& the_watchdog() {
    static auto* thread = watchdog =
        (register_fork_handler(), new renewal_thread(&named_lock::state::check_lease, 1));
    return *thread;
}

void the_threads_after_fork() {
    if (renewals != nullptr) renewals->reset_in_child();
    if (watchdog != nullptr) watchdog->reset_in_child();
}

}  // namespace

void schedule_renewal(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when) {
    the_renewal_thread().schedule(std::move(lock), when);
}

void watch_lease(std::weak_ptr<named_lock::state> lock, deadline::clock::time_point when) {
    the_watchdog().schedule(std::move(lock), when);
}

std::optional<named_lock::state::clock::time_point> named_lock::state::check_lease() {
    if (claim_lapsed_lease())  // not refreshed meanwhile, nor released, nor told already
        tell_lost(acquire_error("lock '" + owner->resource() + "' (" + store->strategy() +
                                ") was lost: its lease ran out before a renewal was confirmed"));
    return std::nullopt;
}

void named_lock::state::tell_lost(const error& lost) const noexcept {
    log(log_level::error, "lock_lost", lost.what(), lost.what());
    if (options.on_lost) {
        try {
            options.on_lost(lost);
        } catch (...) {
            // The thread that tells must survive a throwing callback.
        }
    } else {
        report(lost);
    }
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
    // The watchdog tells the holder at the lease's end if this renewal is still stuck then, and
    // the store gives up then (a reply after it would come too late to be of use).
    const auto until = refresh_deadline();
    if (until) watch_lease(weak_from_this(), *until);
    std::optional<error> lost;
    bool renewed = false;
    try {
        const auto started = clock::now();
        owner->clear_attempt_started();
        if (lease_end.load() != lease_told &&
            (until ? store->refresh(*owner, ttl, *until) : store->refresh(*owner, ttl))) {
            renewed = true;
            // False when the watchdog told the holder meanwhile: the lock is lost to it then,
            // whatever the server says now.
            if (restart_lifetime(started, ttl)) {
                if (options.logger) {
                    const auto took = clock::now() - started;
                    log(log_level::debug, "renewed",
                        "renewed lock '" + owner->resource() + "' (" + store->strategy() +
                            ") for " + seconds_text(ttl),
                        {}, took);
                }
                return started + ttl / 3;
            }
        } else if (lease_end.load() != lease_told) {
            lost.emplace(
                acquire_error("lock '" + owner->resource() +
                              "' was lost: it expired or was taken over before its renewal"));
        }
    } catch (const std::exception& e) {
        // A backend hiccup: retry while the grant still has time left.
        if (!owner->is_expired() && lease_end.load() != lease_told) {
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
    // lease_told from here on: loss_fd() turns readable and is_acquired() says false, for the
    // owner that waits on them rather than on on_lost.
    const bool told = lease_end.exchange(lease_told) == lease_told;
    sync_lease_timer();
    if (renewed) {
        // Renewed after the holder was told it lost the lock: handed back, so that nobody
        // waits for a lease its holder no longer uses.
        try {
            store->release(*owner);
        } catch (const std::exception&) {
            // The lease runs out on the server.
        }
    }
    guard.unlock();
    if (!told && lost) tell_lost(*lost);
    return std::nullopt;
}

}  // namespace locksmith
