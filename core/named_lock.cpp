// SPDX-License-Identifier: MIT
#include <locksmith/named_lock.hpp>

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <locksmith/author/caller_deadline.hpp>

#include "core/local_wake.hpp"
#include "core/lock_state.hpp"
#include "core/logging.hpp"

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

void named_lock::state::report(const error& e) const noexcept {
    if (options.on_error) {
        try {
            options.on_error(e);
            return;
        } catch (...) {
            // A throwing handler must not escape a noexcept unlock; fall back to stderr.
        }
    }
    std::fprintf(stderr, "locksmith: %s\n", e.what());
}

named_lock::state::~state() {
    if (lease_epoll >= 0) ::close(lease_epoll);
    if (lease_timer >= 0) ::close(lease_timer);
}

int named_lock::state::lease_timer_fd() {
    std::lock_guard guard(lease_timer_mutex);
    if (lease_timer < 0) {
        const int made = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (made < 0)
            throw backend_error(
                store->strategy(), std::to_string(errno),
                std::string("cannot make a timer for the lease: ") + std::strerror(errno));
        lease_timer = made;
    }
    set_lease_timer();
    return lease_timer;
}

void named_lock::state::sync_lease_timer() noexcept {
    // Without a timer yet, nothing to set: lease_timer_fd() reads lease_end after making one,
    // and the caller stored lease_end before this load (both sequentially consistent).
    if (lease_timer.load() < 0) return;
    std::lock_guard guard(lease_timer_mutex);
    set_lease_timer();
}

void named_lock::state::set_lease_timer() noexcept {
    if (lease_timer < 0) return;
    // steady_clock is CLOCK_MONOTONIC: its ticks are the timer's absolute time.
    itimerspec when{};
    const auto end = lease_end.load();
    if (end == lease_told) {
        when.it_value.tv_nsec = 1;  // long past: readable now
    } else if (end != no_lease) {
        // Without auto_refresh nobody tells the owner at tell_at: readable when the lifetime
        // ends, when is_acquired() finds it expired.
        const auto due =
            options.auto_refresh ? tell_at(end) : clock::time_point(clock::duration(end));
        const auto at =
            std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count();
        when.it_value.tv_sec = std::max<std::int64_t>(at / 1'000'000'000, 0);
        when.it_value.tv_nsec = std::max<std::int64_t>(at % 1'000'000'000, 1);
    }  // else disarmed: all zero
    ::timerfd_settime(lease_timer, TFD_TIMER_ABSTIME, &when, nullptr);
}

int named_lock::state::lease_timer_with(int fd) {
    const int timer = lease_timer_fd();
    std::lock_guard guard(lease_timer_mutex);
    auto fail = [&] {
        throw backend_error(store->strategy(), std::to_string(errno),
                            std::string("cannot watch the lease and the session together: ") +
                                std::strerror(errno));
    };
    if (lease_epoll < 0) {
        lease_epoll = ::epoll_create1(EPOLL_CLOEXEC);
        if (lease_epoll < 0) fail();
        epoll_event in{};
        in.events = EPOLLIN;
        in.data.fd = timer;
        if (::epoll_ctl(lease_epoll, EPOLL_CTL_ADD, timer, &in) != 0) fail();
    }
    if (fd != lease_epoll_member) {
        // The store's descriptor may have been closed and its number reused: removed if still in.
        if (lease_epoll_member >= 0)
            ::epoll_ctl(lease_epoll, EPOLL_CTL_DEL, lease_epoll_member, nullptr);
        epoll_event in{};
        in.events = EPOLLIN;
        in.data.fd = fd;
        if (::epoll_ctl(lease_epoll, EPOLL_CTL_ADD, fd, &in) != 0 && errno != EEXIST) fail();
        lease_epoll_member = fd;
    }
    return lease_epoll;
}

void named_lock::state::log(log_level level, const char* event, std::string message,
                            std::string error,
                            std::optional<std::chrono::nanoseconds> duration) const noexcept {
    if (!options.logger) return;
    try {
        log_record record;
        record.level = level;
        record.event = event;
        record.message = std::move(message);
        record.name = owner->resource();
        record.strategy = store->strategy();
        record.duration = duration;
        record.error = std::move(error);
        emit(options.logger, record);
    } catch (...) {
        // Out of memory while building the record: the operation goes on unlogged.
    }
}

namespace {

// "lock 'x' (file)": how records name their lock.
// std::timed_mutex's wait until a steady_clock time is pthread_mutex_clocklock, which gcc 12's
// ThreadSanitizer does not intercept: it then sees the mutex unlocked by a thread it never saw
// lock it, and every access under it as a race. Under it alone, the wait takes the system clock
// (pthread_mutex_timedlock, intercepted); a clock step then moves only a sanitizer run's wait.
bool lock_until(std::unique_lock<std::timed_mutex>& guard, clock::time_point until) {
#ifdef __SANITIZE_THREAD__
    return guard.try_lock_until(std::chrono::system_clock::now() + (until - clock::now()));
#else
    return guard.try_lock_until(until);
#endif
}

std::string lock_text(const named_lock::state& s) {
    return "lock '" + s.owner->resource() + "' (" + s.store->strategy() + ")";
}

// Waits for the grant until `until`; the caller holds the state's mutex. `started` is when the
// current attempt began (for the lifetime of expiring grants). With a logger, a wait that lasts
// options.slow_wait is logged while it goes on, and then its end.
bool wait_for_grant(named_lock::state& s, lock_mode mode, std::chrono::milliseconds ttl,
                    deadline until, clock::time_point& started) {
    std::optional<clock::time_point> slow_at;
    clock::time_point wait_started;
    if (s.options.logger && s.options.slow_wait > std::chrono::milliseconds(0)) {
        wait_started = clock::now();
        // Compared as durations: until may be deadline::max().
        if (until - wait_started > s.options.slow_wait)
            slow_at = wait_started + s.options.slow_wait;
    }
    bool logged_slow = false;
    auto log_slow = [&] {
        logged_slow = true;
        const auto waited = clock::now() - wait_started;
        s.log(log_level::info, "slow_wait",
              "still waiting for " + lock_text(s) + " after " + seconds_text(waited), {}, waited);
    };

    bool granted;
    if (s.store->waits_natively(*s.owner)) {
        if (slow_at) {
            granted = s.store->wait_acquire(*s.owner, mode, ttl, *slow_at);
            if (!granted) {
                log_slow();
                granted = s.store->wait_acquire(*s.owner, mode, ttl, until);
            }
        } else {
            granted = s.store->wait_acquire(*s.owner, mode, ttl, until);
        }
    } else {
        // Polls with backoff; a release on this host ends the sleep early (local_wake.hpp).
        backoff delays(s.options.retry);
        detail::local_waiter wake_on_release(s.owner->resource());
        std::optional<caller_deadline_scope> bounded;
        if (until != deadline::max()) bounded.emplace(until);
        for (;;) {
            wake_on_release.arm();
            if ((granted = s.store->try_acquire(*s.owner, mode, ttl))) break;
            const auto now = clock::now();
            if (slow_at && !logged_slow && now >= *slow_at) log_slow();
            if (now >= until) break;
            wake_on_release.sleep_until(
                std::min<clock::time_point>(now + delays.next_delay(), until));
            started = clock::now();
        }
    }
    if (logged_slow) {
        const auto waited = clock::now() - wait_started;
        s.log(log_level::info, "waited",
              (granted ? "acquired " + lock_text(s) + " after waiting "
                       : "gave up waiting for " + lock_text(s) + " after ") +
                  seconds_text(waited),
              {}, waited);
    }
    return granted;
}

// How long a wait without a deadline rides out a server's transient errors: the lock's TTL when
// it has one (a grant after a longer outage is not what the caller waited for: a holder stopped
// that long has lost its lock too), and at least 30 s, the time Redis Sentinel takes by default
// to notice that a master is gone; a lock() must not wait forever for a dead server.
std::chrono::milliseconds outage_bound(const named_lock::state& s) {
    return std::max<std::chrono::milliseconds>(
        s.expiring() ? s.options.ttl : std::chrono::milliseconds(0), std::chrono::seconds(30));
}

// wait_for_grant, riding out the server's transient errors (a restart, a failover: connections
// refused or reset, a grant a replica did not confirm) as a waiter must: retried after a pause
// until the caller's deadline (outage_bound without one); a permanent error, or a transient one
// at the deadline, is the caller's. Stores say which errors are transient, and may ride out more
// themselves (etcd keeps its place in the queue across an outage); this is the rule for all.
bool wait_riding_out(named_lock::state& s, lock_mode mode, std::chrono::milliseconds ttl,
                     deadline until, clock::time_point& started) {
    std::optional<clock::time_point> give_up;
    for (auto pause = std::chrono::milliseconds(50);;
         pause = std::min(pause * 2, std::chrono::milliseconds(1000))) {
        try {
            return wait_for_grant(s, mode, ttl, until, started);
        } catch (const backend_error& e) {
            if (!e.transient()) throw;
            const auto now = clock::now();
            if (!give_up) {
                give_up = until == deadline::max() ? now + outage_bound(s) : until;
                s.log(log_level::warning, "wait_outage",
                      "waiting for " + lock_text(s) + " through a server error: " + e.what(),
                      e.what());
            }
            if (now + pause >= *give_up) throw;
        }
        std::this_thread::sleep_for(pause);
        started = clock::now();
    }
}

// Releases the grant; the caller holds the state's mutex. When the store refuses (a robust
// mutex released from the wrong thread, a server that is down), the lock still counts as held,
// so that the owner can retry and the destructor tries again.
void release_locked(named_lock::state& s) {
    s.store->release(*s.owner);
    s.held.reset();
    s.drop_lease();
    s.owner->reset_lifetime();
    if (!s.store->waits_natively(*s.owner)) detail::notify_local_waiters(s.owner->resource());
}

// Lifetime and bookkeeping after the store granted; the caller holds the state's mutex.
void after_grant(named_lock::state& s, lock_mode mode, clock::time_point started) {
    s.held = mode;
    if (!has(s.store->capabilities(), capability::serializable) && s.owner->serializable())
        s.owner->mark_unserializable("strategy '" + s.store->strategy() +
                                     "' binds its locks to this process");
    if (!s.expiring()) return;
    s.drop_lease();  // a new grant: a loss told of the last one is not this one's
    s.restart_lifetime(started, s.options.ttl);
    if (s.owner->is_expired()) {
        try {
            release_locked(s);
        } catch (const std::exception&) {
            // The grant is already void; the expiry below is what the caller must hear about.
        }
        throw expired_error("lock '" + s.owner->resource() +
                            "' expired before it was granted (ttl " +
                            std::to_string(s.options.ttl.count()) + " ms)");
    }
    if (s.options.auto_refresh && !s.renewal_queued) {
        s.renewal_queued = true;
        schedule_renewal(s.weak_from_this(), started + s.options.ttl / 3);
    }
}

bool acquire_locked(named_lock::state& s, lock_mode wanted, deadline until) {
    // Symfony's rule: a read lock on a store without read locks is a write lock.
    const lock_mode mode =
        wanted == lock_mode::shared && !has(s.store->capabilities(), capability::shared)
            ? lock_mode::exclusive
            : wanted;
    const std::chrono::milliseconds ttl =
        s.expiring() ? s.options.ttl : std::chrono::milliseconds(0);
    const auto previous_expiry = s.owner->expires_at();

    s.owner->clear_attempt_started();
    // The clock is read only where it matters (a lifetime, or a finite deadline): the fastest
    // stores grant in tens of nanoseconds, and a clock read would be a third of that.
    const bool single_try = until == deadline::min();
    const bool timed = s.expiring() || (!single_try && until != deadline::max());
    auto started = timed ? clock::now() : clock::time_point{};
    bool granted;
    if (single_try || (timed && until <= started)) {
        granted = s.store->try_acquire(*s.owner, mode, ttl);
    } else {
        granted = wait_riding_out(s, mode, ttl, until, started);
    }
    if (!granted) {
        // A failed promotion keeps the read lock, and with it the lifetime it had.
        if (previous_expiry) s.owner->reduce_lifetime(*previous_expiry);
        return false;
    }
    after_grant(s, mode, s.owner->attempt_started().value_or(started));
    return true;
}

// Whether the backend ended s's grant since it was granted (a session the server closed), for
// stores whose grants can end so; the store is asked only when its loss descriptor has news.
// The caller holds the state's mutex.
bool ended_by_backend(named_lock::state& s) {
    const auto fd = s.store->loss_fd(*s.owner);
    if (!fd) return false;
    if (*fd >= 0) {
        pollfd p{*fd, POLLIN, 0};
        if (::poll(&p, 1, 0) == 0) return false;
    }
    return !s.store->holds(*s.owner);
}

// Whether the backend ended s's grant, asked of the store itself whatever its loss descriptor
// says; false when the store cannot tell (its own error is what the caller reports).
// The caller holds the state's mutex.
bool store_says_ended(named_lock::state& s) noexcept {
    try {
        return s.store->loss_fd(*s.owner) && !s.store->holds(*s.owner);
    } catch (const std::exception&) {
        return false;
    }
}

// Reports that s's lock, believed held, is gone though it was not released: no longer held,
// logged as lock_lost, on_lost called without the mutex (the caller's `guard`, taken again
// after). What a store whose backend ended the grant still keeps of it (a closed session) is
// dropped, so that the next acquire is a fresh request and not this report again.
void report_lost(named_lock::state& s, std::unique_lock<std::timed_mutex>& guard) {
    s.held.reset();
    // The lease watchdog may have told the holder already (renewal.cpp): once is enough.
    const bool told =
        s.lease_end.exchange(named_lock::state::no_lease) == named_lock::state::lease_told;
    s.sync_lease_timer();
    const acquire_error lost("lock '" + s.owner->resource() + "' (" + s.store->strategy() +
                             ") was lost: it is no longer held, though it was not released");
    if (!told) s.log(log_level::error, "lock_lost", lost.what(), lost.what());
    if (s.store->loss_fd(*s.owner)) {
        try {
            s.store->release(*s.owner);
        } catch (const std::exception&) {
            // The grant is gone; what is left goes with its session.
        }
    }
    if (told) return;
    auto on_lost = s.options.on_lost;
    guard.unlock();
    struct relock {
        std::unique_lock<std::timed_mutex>& guard;
        ~relock() { guard.lock(); }
    } again{guard};
    if (on_lost) on_lost(lost);
}

// For unlock() and release(), the holder's last chance to hear that its lock lapsed while it
// acted (issue 25: a holder stopped past its lease, so that its renewals did not run either,
// ended its work and released without a word). Checks before the release whether the lock,
// believed held, outlived its TTL, and reports it after the release, whatever that did
// (report_lost: on_lost once, without the mutex). The caller holds the mutex in `guard`.
class lapse_report {
  public:
    lapse_report(named_lock::state& s, std::unique_lock<std::timed_mutex>& guard)
        : s_(s),
          guard_(guard),
          lapsed_(s.held && s.expiring() && s.owner->is_expired() &&
                  s.lease_end != named_lock::state::lease_told) {}
    ~lapse_report() {
        if (!lapsed_) return;
        try {
            report_lost(s_, guard_);
        } catch (...) {
            // A throwing on_lost must not end the process from a destructor.
        }
    }
    lapse_report(const lapse_report&) = delete;
    lapse_report& operator=(const lapse_report&) = delete;

  private:
    named_lock::state& s_;
    std::unique_lock<std::timed_mutex>& guard_;
    bool lapsed_;
};

}  // namespace

named_lock::named_lock(std::shared_ptr<store> store, std::shared_ptr<key> owner,
                       lock_options options) {
    if (!store || !owner) throw invalid_argument_error("named_lock needs a store and a key");
    validate_ttl(options.ttl);
    state_ = std::make_shared<state>(std::move(store), std::move(owner), std::move(options));
}

named_lock::~named_lock() {
    if (state_ && state_->options.auto_release && held_mode()) unlock();
}

named_lock::named_lock(named_lock&& other) noexcept = default;

named_lock& named_lock::operator=(named_lock&& other) noexcept {
    if (this != &other) {
        if (state_ && state_->options.auto_release && held_mode()) unlock();
        state_ = std::move(other.state_);
    }
    return *this;
}

bool named_lock::acquire_until(lock_mode wanted, deadline until) {
    auto& s = *state_;
    std::unique_lock guard(s.mutex);
    if (s.held && s.lease_end == named_lock::state::lease_told) {
        // Its holder was told that its lease ran out: what the acquire gets is a new grant.
        s.held.reset();
        s.drop_lease();
    }
    try {
        // A grant the backend ended meanwhile is reported first: what the acquire gets is a new
        // grant, and the owner must not take it for the one it held.
        if (s.held && ended_by_backend(s)) report_lost(s, guard);
        // The attempt itself may be where the store first sees that the backend ended the grant
        // (a session found expired on resume, before its event reached the loss descriptor):
        // an attempt that fails then reports the loss before it answers, so that the owner
        // hears of it first, as above.
        const bool was_held = s.held.has_value();
        bool granted = false;
        try {
            granted = acquire_locked(s, wanted, until);
        } catch (const std::exception&) {
            if (was_held && store_says_ended(s)) report_lost(s, guard);
            throw;
        }
        if (!granted && was_held && store_says_ended(s)) report_lost(s, guard);
        // Symfony's Lock logs every grant at debug level; a program without a logger pays
        // this one test.
        if (granted && s.options.logger)
            s.log(log_level::debug, "acquired",
                  "acquired " + lock_text(s) +
                      (wanted == lock_mode::shared ? " (shared)" : " (exclusive)"));
        return granted;
    } catch (const std::exception& e) {
        s.log(log_level::error, "acquire_failed",
              "acquiring " + lock_text(s) + " failed: " + e.what(), e.what());
        throw;
    }
}

void named_lock::lock() {
    if (!acquire_until(lock_mode::exclusive, deadline::max()))
        throw acquire_error("lock '" + name() + "' could not be acquired");
}

bool named_lock::try_lock() {
    return acquire_until(lock_mode::exclusive, deadline::min());
}

void named_lock::lock_shared() {
    if (!acquire_until(lock_mode::shared, deadline::max()))
        throw acquire_error("shared lock '" + name() + "' could not be acquired");
}

bool named_lock::try_lock_shared() {
    return acquire_until(lock_mode::shared, deadline::min());
}

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
    const lock_mode wanted =
        has(mode, capability::shared) ? lock_mode::shared : lock_mode::exclusive;
    return acquire_until(wanted,
                         has(mode, capability::noblock) ? deadline::min() : deadline::max());
}

void named_lock::unlock() noexcept {
    auto& s = *state_;
    std::unique_lock guard(s.mutex);
    const lapse_report lapse(s, guard);
    try {
        release_locked(s);
        if (s.options.logger) s.log(log_level::debug, "released", "released " + lock_text(s));
    } catch (const error& e) {
        s.log(log_level::error, "release_failed",
              "releasing " + lock_text(s) + " failed: " + e.what(), e.what());
        s.report(e);
    } catch (const std::exception& e) {
        s.log(log_level::error, "release_failed",
              "releasing " + lock_text(s) + " failed: " + e.what(), e.what());
        s.report(release_error("releasing lock '" + name() + "' failed: " + e.what()));
    }
}

void named_lock::release() {
    auto& s = *state_;
    std::unique_lock guard(s.mutex);
    const lapse_report lapse(s, guard);
    try {
        try {
            release_locked(s);
        } catch (const error&) {
            throw;
        } catch (const std::exception& e) {
            throw release_error("releasing lock '" + name() + "' failed: " + e.what());
        }
        if (s.store->holds(*s.owner))
            throw release_error("lock '" + name() + "' is still held after release");
        if (s.options.logger) s.log(log_level::debug, "released", "released " + lock_text(s));
    } catch (const std::exception& e) {
        s.log(log_level::error, "release_failed",
              "releasing " + lock_text(s) + " failed: " + e.what(), e.what());
        throw;
    }
}

void named_lock::refresh() {
    refresh(state_->options.ttl);
}

namespace {

// refresh() after its checks; the caller holds the state's mutex.
void refresh_locked(named_lock::state& s, std::chrono::milliseconds ttl) {
    const std::string& name = s.owner->resource();
    const auto started = clock::now();
    s.owner->clear_attempt_started();
    const auto until = s.refresh_deadline();
    if (!(until ? s.store->refresh(*s.owner, ttl, *until) : s.store->refresh(*s.owner, ttl))) {
        s.held.reset();
        s.drop_lease();
        s.owner->reset_lifetime();
        throw acquire_error("lock '" + name +
                            "' is no longer held by this owner: it expired or was taken over");
    }
    if (!s.held) s.held = lock_mode::exclusive;  // continued from a serialized key
    if (!s.restart_lifetime(started, ttl)) {
        // The lease watchdog told the holder that the lease ran out while this refresh was on
        // its way: lost to it, whatever the server says now.
        s.held.reset();
        s.drop_lease();
        throw acquire_error("lock '" + name +
                            "' was lost: its lease ran out before its refresh "
                            "was confirmed");
    }
    if (s.owner->is_expired()) {
        try {
            release_locked(s);
        } catch (const std::exception&) {
        }
        throw expired_error("lock '" + name + "' expired before its refresh returned (ttl " +
                            std::to_string(ttl.count()) + " ms)");
    }
}

}  // namespace

void named_lock::refresh(std::chrono::milliseconds ttl) {
    validate_ttl(ttl);
    auto& s = *state_;
    std::lock_guard guard(s.mutex);
    if (!s.expiring()) return;
    try {
        refresh_locked(s, ttl);
    } catch (const std::exception& e) {
        s.log(log_level::error, "refresh_failed",
              "refreshing " + lock_text(s) + " failed: " + e.what(), e.what());
        throw;
    }
}

bool named_lock::is_acquired() {
    auto& s = *state_;
    // A refresh stuck on a dead network holds the mutex, maybe for longer than the lease lasts:
    // waited for only until the lease's end, the answer then coming from the lease's clock
    // (issue 25: the holder must hear of the loss before the server can grant the lock again).
    std::unique_lock guard(s.mutex, std::defer_lock);
    for (;;) {
        const auto end = s.lease_end.load();
        if (end == state::no_lease) {
            guard.lock();
            break;
        }
        if (end == state::lease_told) return false;
        if (lock_until(guard, s.tell_at(end))) break;
        s.check_lease();  // tells the holder, unless the lease was renewed or released meanwhile
    }
    const bool holds = !s.owner->is_expired() && s.store->holds(*s.owner);
    if (holds) {
        if (!s.held) s.held = lock_mode::exclusive;  // continued from a serialized key
        return true;
    }
    if (!s.held) return false;
    // Believed held, but gone (expired, or the backend ended the session that held it): for
    // strategies without renewals this question is where the loss shows, so report it here, once.
    report_lost(s, guard);
    return false;
}

std::optional<int> named_lock::loss_fd() const {
    auto& s = *state_;
    if (s.expiring()) {
        // Answered without waiting for a call in flight on this lock (a renewal stuck on a dead
        // network holds the mutex): the lease's timer is the notice then (issue 25).
        const auto end = s.lease_end.load();
        if (end == state::lease_told) return -1;
        if (end != state::no_lease) {
            std::unique_lock guard(s.mutex, std::try_to_lock);
            if (!guard) return s.lease_timer_fd();
            if (!s.held) return std::nullopt;
            const auto fd = s.store->loss_fd(*s.owner);
            if (!fd) return s.lease_timer_fd();
            if (*fd < 0) return -1;
            return s.lease_timer_with(*fd);
        }
    }
    std::lock_guard guard(s.mutex);
    if (!s.held) return std::nullopt;
    return s.store->loss_fd(*s.owner);
}

std::optional<lock_mode> named_lock::held_mode() const noexcept {
    std::lock_guard guard(state_->mutex);
    return state_->held;
}

std::optional<std::chrono::milliseconds> named_lock::remaining_lifetime() const {
    std::lock_guard guard(state_->mutex);
    if (!state_->held || !state_->expiring()) return std::nullopt;
    return state_->owner->remaining_lifetime();
}

bool named_lock::is_expired() const {
    std::lock_guard guard(state_->mutex);
    return state_->owner->is_expired();
}

std::optional<std::uint64_t> named_lock::fencing_token() const {
    std::lock_guard guard(state_->mutex);
    if (!state_->held) return std::nullopt;
    return state_->store->fencing_token(*state_->owner);
}

const std::string& named_lock::name() const noexcept {
    return state_->owner->resource();
}
const std::string& named_lock::strategy() const noexcept {
    return state_->store->strategy();
}
capability named_lock::capabilities() const noexcept {
    return state_->store->capabilities();
}
const std::shared_ptr<key>& named_lock::owner() const noexcept {
    return state_->owner;
}

void named_lock::set_auto_release(bool on) noexcept {
    std::lock_guard guard(state_->mutex);
    state_->options.auto_release = on;
}

nlohmann::json named_lock::serialize_key() const {
    std::lock_guard guard(state_->mutex);
    auto j = state_->owner->to_json();
    j["strategy"] = state_->store->strategy();
    return j;
}

}  // namespace locksmith
