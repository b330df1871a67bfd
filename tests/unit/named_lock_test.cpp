// SPDX-License-Identifier: MIT
// named_lock's generic semantics, against the recording store double (Symfony's LockTest).
#define BOOST_TEST_MODULE named_lock
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>

#include "support/child_process.hpp"
#include "support/forwarding_store.hpp"
#include "support/printers.hpp"
#include "support/recording_store.hpp"
#include "support/skip_report.hpp"
#include "support/suite_helpers.hpp"
#include "support/thread_signals.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::eventually;
using locksmith::test::recording_store;
using kind = recording_store::call::kind;

// --- the standard library's named requirements (checked at compile time) ---

template <class L>
concept basic_lockable = requires(L& l) {
    l.lock();
    l.unlock();
};
template <class L>
concept lockable = basic_lockable<L> && requires(L& l) {
    { l.try_lock() } -> std::convertible_to<bool>;
};
template <class L>
concept timed_lockable = lockable<L> && requires(L& l) {
    { l.try_lock_for(std::chrono::milliseconds(1)) } -> std::convertible_to<bool>;
    { l.try_lock_for(std::chrono::duration<double>(0.5)) } -> std::convertible_to<bool>;
    { l.try_lock_until(std::chrono::steady_clock::now()) } -> std::convertible_to<bool>;
    { l.try_lock_until(std::chrono::system_clock::now()) } -> std::convertible_to<bool>;
};
template <class L>
concept shared_timed_lockable = requires(L& l) {
    l.lock_shared();
    l.unlock_shared();
    { l.try_lock_shared() } -> std::convertible_to<bool>;
    { l.try_lock_shared_for(std::chrono::milliseconds(1)) } -> std::convertible_to<bool>;
    { l.try_lock_shared_until(std::chrono::steady_clock::now()) } -> std::convertible_to<bool>;
};

static_assert(lockable<named_lock>);
static_assert(timed_lockable<named_lock>);
static_assert(shared_timed_lockable<named_lock>);
static_assert(noexcept(std::declval<named_lock&>().unlock()));
static_assert(noexcept(std::declval<named_lock&>().unlock_shared()));
static_assert(std::is_nothrow_move_constructible_v<named_lock>);
static_assert(!std::is_copy_constructible_v<named_lock>);
static_assert(std::is_constructible_v<std::unique_lock<named_lock>, named_lock&>);
static_assert(
    std::is_constructible_v<std::unique_lock<named_lock>, named_lock&, std::try_to_lock_t>);
static_assert(
    std::is_constructible_v<std::unique_lock<named_lock>, named_lock&, std::chrono::milliseconds>);
static_assert(std::is_constructible_v<std::shared_lock<named_lock>, named_lock&>);
static_assert(
    std::is_constructible_v<std::shared_lock<named_lock>, named_lock&, std::chrono::milliseconds>);
static_assert(
    std::is_constructible_v<std::scoped_lock<named_lock, named_lock>, named_lock&, named_lock&>);

namespace {

const capability basic = capability::exclusive | capability::noblock;
const capability blocking = basic | capability::native_wait;
const capability rw = basic | capability::shared;
const capability expiring = basic | capability::expiring;

struct fixture {
    std::shared_ptr<recording_store> store;
    explicit fixture(capability caps) : store(std::make_shared<recording_store>(caps)) {}

    named_lock make(const std::string& name = "resource", lock_options options = {}) {
        return named_lock(store, std::make_shared<key>(name), std::move(options));
    }
    lock_options with_ttl(std::chrono::milliseconds ttl) {
        lock_options o;
        o.ttl = ttl;
        return o;
    }
};

// Every recorded acquisition call used `mode`.
bool all_acquisitions_in(const recording_store& s, lock_mode mode) {
    for (const auto& c : s.calls())
        if ((c.what == kind::try_acquire || c.what == kind::wait_acquire) && c.mode != mode)
            return false;
    return true;
}

}  // namespace

// --- Symfony LockTest 1-7: acquiring ---

BOOST_AUTO_TEST_CASE(acquire_no_blocking) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_TEST(lock.acquire(false));
    BOOST_TEST(f.store->try_acquires() == 1);
    BOOST_TEST(f.store->wait_acquires() == 0);
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::exclusive));
}

BOOST_AUTO_TEST_CASE(acquire_blocking_on_a_polling_store_first_try) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_TEST(lock.acquire(true));
    BOOST_TEST(f.store->try_acquires() == 1);
    BOOST_TEST(f.store->wait_acquires() == 0);  // the store has no native_wait
}

BOOST_AUTO_TEST_CASE(acquire_blocking_retries_until_success) {
    fixture f(basic);
    f.store->conflict_randomly(true);
    auto lock = f.make();
    for (int i = 0; i < 20; ++i) {
        BOOST_TEST(lock.acquire(true));
        lock.release();
    }
    BOOST_TEST(f.store->try_acquires() >= 20);
    BOOST_TEST(f.store->wait_acquires() == 0);
}

// --- a wait rides out a server's transient errors (a restart, a failover) ---

BOOST_AUTO_TEST_CASE(a_wait_rides_out_transient_errors_until_granted) {
    for (const capability caps : {basic, blocking}) {
        fixture f(caps);
        f.store->fail_acquire_transiently(3);
        auto lock = f.make();
        BOOST_TEST(lock.try_lock_for(std::chrono::seconds(10)));
        BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() == 4);
        lock.unlock();
        f.store->fail_acquire_transiently(2);
        BOOST_TEST(lock.acquire(true));  // a wait without a deadline too
    }
}

BOOST_AUTO_TEST_CASE(a_single_try_and_a_permanent_error_are_not_retried) {
    fixture f(blocking);
    f.store->fail_acquire_transiently(1);
    auto lock = f.make();
    BOOST_CHECK_THROW((void)lock.try_lock(), backend_error);
    BOOST_TEST(f.store->try_acquires() == 1);
    f.store->fail_acquire(true);  // error_kind::unknown: retrying may not help
    const auto start = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW((void)lock.try_lock_for(std::chrono::seconds(10)), backend_error);
    BOOST_TEST(f.store->wait_acquires() == 1);
    BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(2)));
}

BOOST_AUTO_TEST_CASE(a_wait_gives_the_last_transient_error_at_its_deadline) {
    fixture f(basic);
    f.store->fail_acquire_transiently(-1);
    auto lock = f.make();
    const auto start = std::chrono::steady_clock::now();
    try {
        (void)lock.try_lock_for(std::chrono::milliseconds(600));
        BOOST_ERROR("a wait on a server that never answers was granted");
    } catch (const backend_error& e) {
        BOOST_TEST(e.transient());
    }
    const auto took = std::chrono::steady_clock::now() - start;
    BOOST_TEST(took > std::chrono::milliseconds(200));     // it tried again
    BOOST_TEST((took < std::chrono::milliseconds(1600)));  // not past its deadline and a pause
    BOOST_TEST(f.store->try_acquires() >= 3);
    BOOST_TEST(!lock.held_mode());
}

BOOST_AUTO_TEST_CASE(blocking_polls_until_the_holder_leaves) {
    fixture f(basic);
    auto holder = f.make();
    BOOST_REQUIRE(holder.try_lock());
    auto waiter = f.make();
    std::atomic<bool> releasing{false};
    std::thread releaser([&] {
        std::this_thread::sleep_for(50ms);  // lets the waiter start polling; not a check
        releasing = true;
        holder.unlock();
    });
    waiter.lock();
    // The holder let go first: lock() did not return while the lock was held.
    BOOST_TEST(releasing.load());
    releaser.join();
    BOOST_TEST(waiter.is_acquired());
    BOOST_TEST(f.store->try_acquires() >= 3);  // 1 for the holder, several polls
}

BOOST_AUTO_TEST_CASE(acquire_returns_false_on_conflict) {
    fixture f(basic);
    f.store->conflict_next(1);
    auto lock = f.make();
    BOOST_TEST(!lock.acquire(false));
    BOOST_TEST(!lock.held_mode().has_value());
    BOOST_TEST(f.store->try_acquires() == 1);
}

BOOST_AUTO_TEST_CASE(try_lock_returns_false_when_another_owner_holds) {
    fixture f(basic);
    auto a = f.make();
    auto b = f.make();
    BOOST_TEST(a.try_lock());
    BOOST_TEST(!b.try_lock());
    BOOST_TEST(a.is_acquired());
    BOOST_TEST(!b.is_acquired());
}

BOOST_AUTO_TEST_CASE(native_wait_store_waits_in_the_store_and_never_polls) {
    fixture f(blocking);
    auto holder = f.make();
    BOOST_REQUIRE(holder.try_lock());
    f.store->reset_calls();
    auto waiter = f.make();
    std::thread releaser([&] {
        std::this_thread::sleep_for(30ms);
        holder.unlock();
    });
    BOOST_TEST(waiter.acquire(true));
    releaser.join();
    BOOST_TEST(f.store->wait_acquires() == 1);
    // One quick try before waiting is fine; a polling loop is not.
    BOOST_TEST(f.store->try_acquires() <= 1);
}

// A store that waits natively for its locks only (pg_advisory): named_lock polls for a permit,
// and still leaves a lock's wait to the store.
BOOST_AUTO_TEST_CASE(a_store_that_cannot_wait_for_a_permit_is_polled_for_one) {
    fixture f(blocking | capability::counting);
    f.store->permits_polled(true);
    auto permit = [&] {
        auto k = std::make_shared<key>("resource");
        k->set_limit(1);
        return named_semaphore(f.store, k);
    };
    auto holder = permit(), waiter = permit();
    BOOST_REQUIRE(holder.try_acquire());
    f.store->reset_calls();
    BOOST_TEST(!waiter.try_acquire_for(60ms));
    BOOST_TEST(f.store->wait_acquires() == 0);
    BOOST_TEST(f.store->try_acquires() > 1);
    std::thread releaser([&] {
        std::this_thread::sleep_for(30ms);
        holder.release();
    });
    BOOST_TEST(waiter.try_acquire_for(10s));
    releaser.join();
    BOOST_TEST(f.store->wait_acquires() == 0);
    f.store->reset_calls();
    auto lock_holder = f.make(), lock_waiter = f.make();
    BOOST_REQUIRE(lock_holder.try_lock());
    BOOST_TEST(!lock_waiter.try_lock_for(20ms));
    BOOST_TEST(f.store->wait_acquires() == 1);
}

BOOST_AUTO_TEST_CASE(native_wait_bounded_wait_passes_the_deadline) {
    fixture f(blocking);
    auto holder = f.make();
    BOOST_REQUIRE(holder.try_lock());
    f.store->reset_calls();
    auto waiter = f.make();
    auto start = std::chrono::steady_clock::now();
    BOOST_TEST(!waiter.try_lock_for(60ms));
    auto waited = std::chrono::steady_clock::now() - start;
    BOOST_TEST(waited >= 55ms);
    BOOST_TEST(f.store->wait_acquires() == 1);
    BOOST_TEST(f.store->try_acquires() <= 1);
}

BOOST_AUTO_TEST_CASE(bounded_wait_on_a_polling_store_backs_off) {
    fixture f(basic);
    auto holder = f.make();
    BOOST_REQUIRE(holder.try_lock());
    f.store->reset_calls();
    auto waiter = f.make();
    auto start = std::chrono::steady_clock::now();
    BOOST_TEST(!waiter.try_lock_for(150ms));
    auto waited = std::chrono::steady_clock::now() - start;
    BOOST_TEST(waited >= 145ms);
    int tries = f.store->try_acquires();
    BOOST_TEST(tries >= 2);
    // Exponential backoff from 0.5 ms to 50 ms needs about ten tries in 150 ms; a busy spin
    // needs thousands.
    BOOST_TEST(tries < 100, "polled " << tries << " times in 150 ms");
    BOOST_TEST(f.store->wait_acquires() == 0);
}

BOOST_AUTO_TEST_CASE(try_lock_for_zero_is_a_single_try) {
    for (auto caps : {basic, blocking}) {
        BOOST_TEST_CONTEXT("capabilities " << to_string(caps)) {
            fixture f(caps);
            auto holder = f.make();
            BOOST_REQUIRE(holder.try_lock());
            f.store->reset_calls();
            auto waiter = f.make();
            BOOST_TEST(!waiter.try_lock_for(0ms));
            BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() == 1);
            f.store->reset_calls();
            BOOST_TEST(!waiter.try_lock_for(-5s));
            BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() == 1);
            f.store->reset_calls();
            BOOST_TEST(!waiter.try_lock_until(std::chrono::steady_clock::now() - 1s));
            BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() == 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(huge_timeouts_do_not_overflow) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_TEST(lock.try_lock_for(std::chrono::hours::max()));
    lock.unlock();
    BOOST_TEST(lock.try_lock_until(std::chrono::steady_clock::time_point::max()));
    lock.unlock();
    BOOST_TEST(lock.try_lock_for(std::chrono::duration<double>(1e300)));
}

BOOST_AUTO_TEST_CASE(system_clock_deadlines_work) {
    fixture f(basic);
    auto holder = f.make();
    BOOST_REQUIRE(holder.try_lock());
    auto waiter = f.make();
    auto start = std::chrono::steady_clock::now();
    BOOST_TEST(!waiter.try_lock_until(std::chrono::system_clock::now() + 50ms));
    BOOST_TEST((std::chrono::steady_clock::now() - start) >= 40ms);
}

// --- Symfony LockTest 8-10: TTL ---

BOOST_AUTO_TEST_CASE(acquire_passes_the_ttl_to_the_store) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_TEST(lock.acquire());
    BOOST_TEST(f.store->try_acquires() == 1);
    auto call = f.store->last(kind::try_acquire);
    BOOST_REQUIRE(call.has_value());
    BOOST_TEST(call->ttl.count() == 10'000);
    auto left = lock.remaining_lifetime();
    BOOST_REQUIRE(left.has_value());
    BOOST_TEST(left->count() <= 10'000);
    BOOST_TEST(left->count() > 9'000);
    BOOST_TEST(!lock.is_expired());
}

BOOST_AUTO_TEST_CASE(refresh_uses_the_lock_ttl) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    lock.refresh();
    BOOST_TEST(f.store->refreshes() == 1);
    BOOST_TEST(f.store->last(kind::refresh)->ttl.count() == 10'000);
}

BOOST_AUTO_TEST_CASE(refresh_with_a_custom_ttl) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    lock.refresh(20s);
    BOOST_TEST(f.store->refreshes() == 1);
    BOOST_TEST(f.store->last(kind::refresh)->ttl.count() == 20'000);
    auto left = lock.remaining_lifetime();
    BOOST_REQUIRE(left.has_value());
    BOOST_TEST(left->count() > 19'000);  // the key's lifetime follows the refresh
}

BOOST_AUTO_TEST_CASE(refresh_rejects_bad_ttls) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    BOOST_CHECK_THROW(lock.refresh(0ms), invalid_argument_error);
    BOOST_CHECK_THROW(lock.refresh(-1s), invalid_argument_error);
    BOOST_CHECK_THROW(lock.refresh(max_ttl + 1ms), invalid_argument_error);
    BOOST_TEST(f.store->refreshes() == 0);
}

BOOST_AUTO_TEST_CASE(refresh_of_a_lost_lock_throws_acquire_error) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    f.store->fail_refresh(true);
    BOOST_CHECK_THROW(lock.refresh(), acquire_error);
}

BOOST_AUTO_TEST_CASE(refresh_is_a_no_op_without_expiring) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire());
    BOOST_CHECK_NO_THROW(lock.refresh());
    BOOST_CHECK_NO_THROW(lock.refresh(5s));
    BOOST_TEST(f.store->refreshes() == 0);
    BOOST_TEST(!lock.remaining_lifetime().has_value());
    BOOST_TEST(!lock.is_expired());
}

BOOST_AUTO_TEST_CASE(bad_ttl_at_construction) {
    fixture f(expiring);
    BOOST_CHECK_THROW(f.make("r", f.with_ttl(0ms)), invalid_argument_error);
    BOOST_CHECK_THROW(f.make("r", f.with_ttl(-1ms)), invalid_argument_error);
    BOOST_CHECK_THROW(f.make("r", f.with_ttl(max_ttl + 1ms)), invalid_argument_error);
    BOOST_CHECK_NO_THROW(f.make("r", f.with_ttl(max_ttl)));
    BOOST_CHECK_THROW(validate_ttl(0ms), invalid_argument_error);
    BOOST_CHECK_NO_THROW(validate_ttl(1ms));
}

// --- Symfony LockTest 11-19: is_acquired and release ---

BOOST_AUTO_TEST_CASE(is_acquired_asks_the_store) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire());
    int before = f.store->holds_calls();
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(f.store->holds_calls() == before + 1);
    // The store is the truth: a lock lost behind our back is reported lost.
    f.store->clear("resource");
    BOOST_TEST(!lock.is_acquired());
}

BOOST_AUTO_TEST_CASE(release_calls_the_store_and_checks) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire());
    f.store->reset_calls();
    BOOST_CHECK_NO_THROW(lock.release());
    BOOST_TEST(f.store->releases() == 1);
    BOOST_TEST(!lock.held_mode().has_value());
    BOOST_TEST(!lock.is_acquired());
}

BOOST_AUTO_TEST_CASE(release_without_acquiring_is_harmless) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_CHECK_NO_THROW(lock.release());
    BOOST_CHECK_NO_THROW(lock.unlock());
}

BOOST_AUTO_TEST_CASE(release_throws_when_the_store_fails) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire());
    f.store->fail_release(true);
    bool thrown = false;
    try {
        lock.release();
    } catch (const release_error&) {
        thrown = true;
    } catch (const backend_error&) {
        thrown = true;
    }
    BOOST_TEST(thrown);
    f.store->fail_release(false);
}

BOOST_AUTO_TEST_CASE(release_throws_when_still_held_afterwards) {
    fixture f(basic);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire());
    f.store->ignore_release(true);
    BOOST_CHECK_THROW(lock.release(), release_error);
    f.store->ignore_release(false);
}

BOOST_AUTO_TEST_CASE(unlock_reports_errors_to_the_handler) {
    fixture f(basic);
    std::vector<std::string> errors;
    lock_options o;
    o.on_error = [&](const error& e) { errors.push_back(e.what()); };
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.try_lock());
    f.store->fail_release(true);
    lock.unlock();  // noexcept: must not throw
    BOOST_TEST(errors.size() == 1u);
    BOOST_TEST(errors.at(0).find("injected release failure") != std::string::npos);
    f.store->fail_release(false);
}

BOOST_AUTO_TEST_CASE(one_unlock_releases_a_lock_acquired_twice) {
    fixture f(basic);
    auto a = f.make();
    auto b = f.make();
    BOOST_TEST(a.try_lock());
    BOOST_TEST(a.try_lock());  // idempotent
    BOOST_TEST(a.acquire(true));
    a.unlock();
    BOOST_TEST(b.try_lock());
}

BOOST_AUTO_TEST_CASE(destructor_releases) {
    fixture f(blocking);
    {
        auto lock = f.make("resource", f.with_ttl(10s));
        BOOST_REQUIRE(lock.acquire(false));
    }
    BOOST_TEST(f.store->releases() == 1);
    BOOST_TEST(f.make().try_lock());
}

BOOST_AUTO_TEST_CASE(destructor_keeps_the_lock_when_auto_release_is_off) {
    fixture f(basic);
    {
        lock_options o;
        o.auto_release = false;
        auto lock = f.make("resource", o);
        BOOST_REQUIRE(lock.acquire(false));
    }
    BOOST_TEST(f.store->releases() == 0);
    BOOST_TEST(!f.make().try_lock());
    {
        auto lock = f.make("other");
        BOOST_REQUIRE(lock.acquire(false));
        lock.set_auto_release(false);
    }
    BOOST_TEST(!f.make("other").try_lock());
}

BOOST_AUTO_TEST_CASE(destructor_swallows_release_errors) {
    fixture f(basic);
    int reported = 0;
    {
        lock_options o;
        o.on_error = [&](const error&) { ++reported; };
        auto lock = f.make("resource", o);
        BOOST_REQUIRE(lock.acquire(false));
        f.store->fail_release(true);
    }  // must not throw out of the destructor
    BOOST_TEST(reported == 1);
    f.store->fail_release(false);
}

BOOST_AUTO_TEST_CASE(destructor_of_an_unacquired_lock_does_not_touch_the_store) {
    fixture f(basic);
    { auto lock = f.make(); }
    BOOST_TEST(f.store->releases() == 0);
}

BOOST_AUTO_TEST_CASE(moved_from_lock_releases_nothing) {
    fixture f(basic);
    {
        auto a = f.make();
        BOOST_REQUIRE(a.try_lock());
        named_lock b(std::move(a));
        BOOST_TEST(b.held_mode().has_value());
        BOOST_TEST(b.is_acquired());
        {
            named_lock c = f.make("other");
            c = std::move(b);  // c held nothing; now it holds "resource"
            BOOST_TEST(f.store->releases() == 0);
            BOOST_TEST(c.name() == "resource");
        }
        BOOST_TEST(f.store->releases() == 1);
    }
    BOOST_TEST(f.store->releases() == 1);
}

BOOST_AUTO_TEST_CASE(move_assignment_releases_the_previous_lock) {
    fixture f(basic);
    auto a = f.make("first");
    BOOST_REQUIRE(a.try_lock());
    auto b = f.make("second");
    BOOST_REQUIRE(b.try_lock());
    a = std::move(b);  // "first" is released (auto-release), "second" now belongs to a
    BOOST_TEST(f.make("first").try_lock());
    BOOST_TEST(!f.make("second").try_lock());
}

// --- a throwing acquire leaves nothing held ---

BOOST_AUTO_TEST_CASE(failing_store_leaves_nothing_held) {
    fixture f(basic);
    f.store->fail_acquire(true);
    auto lock = f.make();
    BOOST_CHECK_THROW(lock.lock(), error);
    BOOST_TEST(!lock.held_mode().has_value());
    BOOST_CHECK_THROW((void)lock.try_lock(), error);
    f.store->fail_acquire(false);
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(f.make().try_lock());
}

// --- expiry ---

BOOST_AUTO_TEST_CASE(grant_that_comes_back_expired_is_released_and_reported) {
    fixture f(expiring);
    f.store->acquire_delay(40ms);
    auto lock = f.make("resource", f.with_ttl(5ms));
    BOOST_CHECK_THROW(lock.acquire(), expired_error);
    BOOST_TEST(f.store->releases() >= 1);
    f.store->acquire_delay(0ms);
    BOOST_TEST(!lock.held_mode().has_value());
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(f.make().try_lock());  // nothing stale blocks the next owner
}

BOOST_AUTO_TEST_CASE(refresh_that_comes_back_expired_is_reported) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    f.store->acquire_delay(40ms);
    BOOST_CHECK_THROW(lock.refresh(5ms), expired_error);
    f.store->acquire_delay(0ms);
}

// Symfony LockTest::testExpiration at the lock level: is_expired() follows the key.
BOOST_AUTO_TEST_CASE(is_expired_follows_the_key) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_REQUIRE(lock.acquire());
    BOOST_TEST(!lock.is_expired());
    lock.owner()->reduce_lifetime(key::clock::now() - 100ms);
    BOOST_TEST(lock.is_expired());
    BOOST_REQUIRE(lock.remaining_lifetime().has_value());
    BOOST_TEST(lock.remaining_lifetime()->count() < 0);
}

// Symfony #38541 (LockTest 23/24): acquiring again after a grant expired must start a new
// lifetime, not inherit the old, past expiry.
BOOST_AUTO_TEST_CASE(reacquire_after_expiry_works) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(30ms));
    BOOST_TEST(lock.acquire());
    lock.release();
    std::this_thread::sleep_for(60ms);
    bool again = false;
    BOOST_CHECK_NO_THROW(again = lock.acquire());
    BOOST_TEST(again);
    BOOST_TEST(!lock.is_expired());
    lock.release();
}

BOOST_AUTO_TEST_CASE(reacquire_read_after_expiry_works_on_a_store_without_shared) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(30ms));
    BOOST_TEST(lock.acquire_read());
    lock.release();
    std::this_thread::sleep_for(60ms);
    bool again = false;
    BOOST_CHECK_NO_THROW(again = lock.acquire_read());
    BOOST_TEST(again);
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::exclusive));
}

BOOST_AUTO_TEST_CASE(reacquire_while_held_after_expiry_renews) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(30ms));
    BOOST_TEST(lock.acquire());
    std::this_thread::sleep_for(60ms);
    BOOST_TEST(lock.is_expired());
    bool again = false;
    BOOST_CHECK_NO_THROW(again = lock.acquire());
    BOOST_TEST(again);
    BOOST_TEST(!lock.is_expired());
}

BOOST_AUTO_TEST_CASE(remaining_lifetime_is_empty_when_not_held) {
    fixture f(expiring);
    auto lock = f.make("resource", f.with_ttl(10s));
    BOOST_TEST(!lock.remaining_lifetime().has_value());
    BOOST_REQUIRE(lock.acquire());
    BOOST_TEST(lock.remaining_lifetime().has_value());
    lock.release();
    BOOST_TEST(!lock.remaining_lifetime().has_value());
}

// --- auto_refresh (the renewal thread) ---

BOOST_AUTO_TEST_CASE(auto_refresh_renews_with_the_lock_ttl) {
    fixture f(expiring);
    lock_options o;
    o.ttl = 90ms;
    o.auto_refresh = true;
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    // Renewals at a third of the TTL: several within two TTLs.
    BOOST_TEST(eventually([&] { return f.store->refreshes() >= 2; }));
    std::this_thread::sleep_for(200ms);
    BOOST_TEST(!lock.is_expired(), "the lock expired although it was renewed");
    BOOST_TEST(lock.is_acquired());
    for (const auto& c : f.store->calls())
        if (c.what == kind::refresh) BOOST_TEST(c.ttl.count() == 90);
}

// The renewal thread blocks every signal: a process signal (the SIGCHLD a program waits for on
// a signalfd, as the locksmith command does) must never go to it, where it would be dropped. In
// a process of its own: the thread is one per process, started by the first auto_refresh lock
// (which the cases above started here; a forked child would run beside it).
BOOST_AUTO_TEST_CASE(the_renewal_thread_takes_no_process_signals) {
    if (!locksmith::test::running_alone()) {
        BOOST_TEST(locksmith::test::run_alone_in_a_fresh_process() == 0);
        return;
    }
    fixture f(expiring);
    lock_options o;
    o.ttl = 60s;
    o.auto_refresh = true;
    auto lock = f.make("resource", o);
    const auto masks = locksmith::test::masks_of_threads_started_by([&] { (void)lock.acquire(); });
    BOOST_REQUIRE_EQUAL(masks.size(), 1u);
    BOOST_TEST((masks[0] >> (SIGCHLD - 1) & 1u) == 1u, "the renewal thread takes SIGCHLD");
}

BOOST_AUTO_TEST_CASE(unlock_stops_the_renewals) {
    fixture f(expiring);
    lock_options o;
    o.ttl = 60ms;
    o.auto_refresh = true;
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    BOOST_REQUIRE(eventually([&] { return f.store->refreshes() >= 1; }));
    lock.unlock();
    std::this_thread::sleep_for(30ms);  // a renewal already running may finish
    int after_unlock = f.store->refreshes();
    std::this_thread::sleep_for(150ms);
    BOOST_TEST(f.store->refreshes() == after_unlock);
}

BOOST_AUTO_TEST_CASE(destroying_a_renewed_lock_stops_the_renewals) {
    fixture f(expiring);
    {
        lock_options o;
        o.ttl = 60ms;
        o.auto_refresh = true;
        auto lock = f.make("resource", o);
        BOOST_REQUIRE(lock.acquire());
        BOOST_REQUIRE(eventually([&] { return f.store->refreshes() >= 1; }));
    }
    std::this_thread::sleep_for(30ms);
    int after = f.store->refreshes();
    std::this_thread::sleep_for(150ms);
    BOOST_TEST(f.store->refreshes() == after);
    BOOST_TEST(f.make().try_lock());
}

BOOST_AUTO_TEST_CASE(a_lost_lock_is_reported_through_on_lost) {
    fixture f(expiring);
    std::atomic<int> lost{0};
    lock_options o;
    o.ttl = 60ms;
    o.auto_refresh = true;
    o.on_lost = [&](const error&) { ++lost; };
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    f.store->clear("resource");  // taken away behind the owner's back
    BOOST_TEST(eventually([&] { return lost.load() == 1; }));
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(!lock.held_mode().has_value());
    std::this_thread::sleep_for(100ms);
    BOOST_TEST(lost.load() == 1);  // reported once, and renewals stopped
}

// Issue 25: a holder stopped past its TTL (so that its renewals did not run either) that ends its
// work and releases hears of the loss then: on_lost from unlock(), release() or the destructor,
// once, after the release. A release within the TTL tells nothing.
BOOST_AUTO_TEST_CASE(a_lock_that_lapsed_while_held_is_reported_when_released) {
    fixture f(expiring);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error& e) {
        ++lost;
        BOOST_TEST(std::string(e.what()).find("'resource'") != std::string::npos);
    };
    o.ttl = std::chrono::minutes(1);
    {
        auto lock = f.make("resource", o);
        BOOST_REQUIRE(lock.acquire());
        lock.unlock();
        BOOST_REQUIRE(lock.acquire());
        lock.release();
    }
    BOOST_TEST(lost == 0);
    o.ttl = 20ms;
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    std::this_thread::sleep_for(60ms);  // past the TTL, unrenewed
    lock.unlock();
    BOOST_TEST(lost == 1);
    BOOST_TEST(!lock.held_mode().has_value());
    BOOST_REQUIRE(lock.acquire());
    std::this_thread::sleep_for(60ms);
    lock.release();
    BOOST_TEST(lost == 2);
    {
        auto other = f.make("resource", o);
        BOOST_REQUIRE(other.acquire());
        std::this_thread::sleep_for(60ms);
    }  // the destructor releases
    BOOST_TEST(lost == 3);
}

// A strategy without renewals (pg_advisory: the server ended the session) learns of a loss only
// when the owner asks: that is reported through on_lost too, once.
BOOST_AUTO_TEST_CASE(a_loss_that_is_acquired_finds_is_reported_through_on_lost_once) {
    fixture f(basic);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error& e) {
        ++lost;
        BOOST_TEST(std::string(e.what()).find("'resource'") != std::string::npos);
    };
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(lost == 0);
    f.store->clear("resource");
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(lost == 1);
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(lost == 1);  // once: the object no longer believes it holds
    BOOST_TEST(!lock.held_mode().has_value());
}

// Issue 23, point 17: where the backend can end a grant (store::loss_fd), an acquire by an
// owner that believes it holds reports the loss first (on_lost), drops what the store kept,
// and only then asks for a fresh grant: never a new grant taken silently for the old one.
BOOST_AUTO_TEST_CASE(an_ended_grant_is_reported_before_a_fresh_one) {
    fixture f(basic);
    f.store->grants_can_end(true);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto lock = f.make("resource", o);
    BOOST_TEST(!lock.loss_fd().has_value());  // not held
    BOOST_REQUIRE(lock.acquire());
    const auto fd = lock.loss_fd();
    BOOST_REQUIRE(fd.has_value());
    BOOST_REQUIRE(*fd >= 0);
    pollfd p{*fd, POLLIN, 0};
    BOOST_TEST(::poll(&p, 1, 0) == 0);
    BOOST_TEST(lock.acquire());  // no news: held, and nothing reported
    BOOST_TEST(lost == 0);
    f.store->end_grants("resource");
    BOOST_TEST(::poll(&p, 1, 0) == 1);
    f.store->reset_calls();
    BOOST_TEST(lock.acquire());
    BOOST_TEST(lost == 1);
    BOOST_TEST(f.store->releases() == 1);  // the leftover, before the fresh request
    BOOST_TEST(lock.held_mode() == std::optional(lock_mode::exclusive));
    // Another owner holds now: the next acquire after a loss says false, and the object does not
    // believe it holds.
    f.store->end_grants("resource");
    auto other = f.make("resource");
    BOOST_REQUIRE(other.acquire());
    BOOST_TEST(!lock.acquire());
    BOOST_TEST(lost == 2);
    BOOST_TEST(!lock.held_mode().has_value());
}

// A store whose loss descriptor has no news yet while the grant is already gone: a ZooKeeper
// session found expired on resume, before its event reached the descriptor.
class news_comes_late : public test::forwarding_store {
  public:
    explicit news_comes_late(std::shared_ptr<store> inner) : forwarding_store(std::move(inner)) {
        BOOST_REQUIRE(::pipe(never_) == 0);
    }
    ~news_comes_late() override {
        ::close(never_[0]);
        ::close(never_[1]);
    }

  protected:
    std::optional<int> do_loss_fd(const key&) override { return never_[0]; }

  private:
    int never_[2] = {-1, -1};
};

// The attempt may then be where the store first finds the grant ended: an acquire that fails or
// is refused reports the loss first, and the object no longer believes it holds.
BOOST_AUTO_TEST_CASE(a_grant_found_ended_by_the_attempt_is_reported_before_its_answer) {
    fixture f(basic);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    named_lock lock(std::make_shared<news_comes_late>(f.store), std::make_shared<key>("resource"),
                    o);
    BOOST_REQUIRE(lock.acquire());
    f.store->clear("resource");  // ended, with no news on the loss descriptor
    f.store->fail_acquire(true);
    BOOST_CHECK_THROW(lock.acquire(), error);
    BOOST_TEST(lost == 1);
    BOOST_TEST(!lock.held_mode().has_value());
    f.store->fail_acquire(false);

    BOOST_REQUIRE(lock.acquire());
    f.store->clear("resource");
    auto other = f.make("resource");
    BOOST_REQUIRE(other.acquire());
    BOOST_TEST(!lock.acquire());
    BOOST_TEST(lost == 2);
    BOOST_TEST(!lock.held_mode().has_value());
}

BOOST_AUTO_TEST_CASE(grants_that_end_only_by_release_have_no_loss_fd) {
    fixture f(basic);
    auto lock = f.make("resource");
    BOOST_REQUIRE(lock.acquire());
    BOOST_TEST(!lock.loss_fd().has_value());
    f.store->reset_calls();
    BOOST_TEST(lock.acquire());
    BOOST_TEST(f.store->holds_calls() == 0);  // a re-acquire costs nothing more
}

BOOST_AUTO_TEST_CASE(is_acquired_on_a_lock_never_held_reports_no_loss) {
    fixture f(basic);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto lock = f.make("resource", o);
    BOOST_TEST(!lock.is_acquired());
    BOOST_REQUIRE(lock.acquire());
    lock.unlock();
    BOOST_TEST(!lock.is_acquired());
    BOOST_TEST(lost == 0);
}

BOOST_AUTO_TEST_CASE(auto_refresh_is_ignored_without_expiring) {
    fixture f(basic);
    lock_options o;
    o.ttl = 30ms;
    o.auto_refresh = true;
    auto lock = f.make("resource", o);
    BOOST_REQUIRE(lock.acquire());
    std::this_thread::sleep_for(100ms);
    BOOST_TEST(f.store->refreshes() == 0);
    BOOST_TEST(lock.is_acquired());
}

// --- Symfony LockTest 22, 25-28: shared ---

BOOST_AUTO_TEST_CASE(acquire_read_on_a_shared_store) {
    fixture f(rw);
    auto lock = f.make();
    BOOST_TEST(lock.acquire_read(false));
    BOOST_TEST(f.store->try_acquires() == 1);
    BOOST_TEST(f.store->last(kind::try_acquire)->mode == lock_mode::shared);
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::shared));
    // Two readers coexist, a writer is refused.
    auto reader = f.make();
    BOOST_TEST(reader.try_lock_shared());
    BOOST_TEST(!f.make().try_lock());
}

BOOST_AUTO_TEST_CASE(acquire_read_blocking_on_a_native_shared_store) {
    fixture f(rw | capability::native_wait);
    auto lock = f.make();
    BOOST_TEST(lock.acquire_read(true));
    BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() >= 1);
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::shared));
    auto writer = f.make();
    BOOST_REQUIRE(writer.held_mode() == std::nullopt);
    lock.release();
    BOOST_REQUIRE(writer.try_lock());
    f.store->reset_calls();
    std::thread releaser([&] {
        std::this_thread::sleep_for(30ms);
        writer.unlock();
    });
    BOOST_TEST(lock.acquire_read(true));
    releaser.join();
    BOOST_TEST(f.store->wait_acquires() == 1);
    BOOST_TEST(f.store->try_acquires() <= 1);
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::shared));
}

BOOST_AUTO_TEST_CASE(acquire_read_blocking_polls_a_shared_store) {
    fixture f(rw);
    f.store->conflict_randomly(true);
    auto lock = f.make();
    for (int i = 0; i < 10; ++i) {
        BOOST_TEST(lock.acquire_read(true));
        lock.release();
    }
    BOOST_TEST(f.store->wait_acquires() == 0);
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::shared));
}

BOOST_AUTO_TEST_CASE(acquire_read_falls_back_to_exclusive_on_a_native_store) {
    fixture f(blocking);
    auto lock = f.make();
    BOOST_TEST(lock.acquire_read(true));
    BOOST_TEST(f.store->try_acquires() + f.store->wait_acquires() >= 1);
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::exclusive));
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::exclusive));
}

BOOST_AUTO_TEST_CASE(acquire_read_falls_back_to_exclusive_on_a_polling_store) {
    fixture f(basic);
    f.store->conflict_randomly(true);
    auto lock = f.make();
    for (int i = 0; i < 10; ++i) {
        BOOST_TEST(lock.acquire_read(true));
        lock.release();
    }
    BOOST_TEST(all_acquisitions_in(*f.store, lock_mode::exclusive));
    // And two "readers" exclude each other, since they are writers underneath.
    f.store->conflict_randomly(false);
    auto a = f.make();
    auto b = f.make();
    BOOST_TEST(a.try_lock_shared());
    BOOST_TEST(!b.try_lock_shared());
}

BOOST_AUTO_TEST_CASE(promote_and_demote) {
    fixture f(rw);
    auto lock = f.make();
    BOOST_REQUIRE(lock.acquire_read());
    BOOST_TEST(lock.acquire());  // sole reader: promotion succeeds
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::exclusive));
    BOOST_TEST(f.store->last(kind::try_acquire)->mode == lock_mode::exclusive);
    BOOST_TEST(!f.make().try_lock_shared());
    BOOST_TEST(lock.acquire_read());  // demotion
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::shared));
    BOOST_TEST(f.store->last(kind::try_acquire)->mode == lock_mode::shared);
    BOOST_TEST(f.make().try_lock_shared());
}

BOOST_AUTO_TEST_CASE(failed_promotion_keeps_the_read_lock) {
    fixture f(rw);
    auto lock = f.make();
    auto other = f.make();
    BOOST_REQUIRE(lock.acquire_read());
    BOOST_REQUIRE(other.acquire_read());
    BOOST_TEST(!lock.acquire(false));
    BOOST_TEST(lock.held_mode() == std::optional<lock_mode>(lock_mode::shared));
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(!f.make().try_lock());
}

// --- TYPO3's acquire(mode) ---

BOOST_AUTO_TEST_CASE(typo3_acquire_with_a_mode) {
    fixture f(rw);
    auto a = f.make();
    auto b = f.make();
    BOOST_TEST(a.acquire(capability::exclusive | capability::noblock));
    BOOST_TEST(!b.acquire(capability::exclusive | capability::noblock));
    BOOST_TEST(!b.acquire(capability::shared | capability::noblock));
    a.release();
    BOOST_TEST(a.acquire(capability::shared));  // waits, but it is free
    BOOST_TEST(b.acquire(capability::shared | capability::noblock));
    BOOST_CHECK_THROW(a.acquire(capability::fencing), invalid_argument_error);
    BOOST_CHECK_THROW(a.acquire(capability::exclusive | capability::distributed),
                      invalid_argument_error);
}

// --- fencing and identity ---

BOOST_AUTO_TEST_CASE(fencing_token_comes_from_the_grant) {
    fixture plain(basic);
    auto p = plain.make();
    BOOST_REQUIRE(p.acquire());
    BOOST_TEST(!p.fencing_token().has_value());

    fixture f(basic | capability::fencing);
    auto a = f.make();
    BOOST_REQUIRE(a.acquire());
    auto first = a.fencing_token();
    BOOST_REQUIRE(first.has_value());
    a.release();
    auto b = f.make();
    BOOST_REQUIRE(b.acquire());
    auto second = b.fencing_token();
    BOOST_REQUIRE(second.has_value());
    BOOST_TEST(*second > *first);
}

BOOST_AUTO_TEST_CASE(identity) {
    fixture f(basic);
    auto lock = f.make("name.1");
    BOOST_TEST(lock.name() == "name.1");
    BOOST_TEST(lock.strategy() == "recording");
    BOOST_TEST(lock.capabilities() == basic);
    BOOST_TEST(lock.owner()->resource() == "name.1");
}

BOOST_AUTO_TEST_CASE(serialize_key) {
    fixture plain(basic);
    auto p = plain.make();
    BOOST_REQUIRE(p.acquire());
    BOOST_CHECK_THROW((void)p.serialize_key(), not_serializable_error);

    fixture f(basic | capability::serializable);
    auto lock = f.make("moving");
    BOOST_REQUIRE(lock.acquire());
    auto json = lock.serialize_key();
    BOOST_TEST(json.dump().find("recording") != std::string::npos, json.dump());
    BOOST_TEST(json.dump().find(lock.owner()->token()) != std::string::npos, json.dump());
}

// --- the standard wrappers at run time ---

BOOST_AUTO_TEST_CASE(standard_wrappers) {
    fixture f(rw);
    auto a = f.make("x");
    auto b = f.make("y");
    {
        std::unique_lock guard(a);
        BOOST_TEST(guard.owns_lock());
        BOOST_TEST(!f.make("x").try_lock());
    }
    BOOST_TEST(f.make("x").try_lock());
    {
        std::unique_lock guard(a, std::defer_lock);
        BOOST_TEST(guard.try_lock_for(10ms));
    }
    {
        std::shared_lock guard(a);
        BOOST_TEST(guard.owns_lock());
        BOOST_TEST(f.make("x").try_lock_shared());
        BOOST_TEST(!f.make("x").try_lock());
    }
    {
        std::scoped_lock both(a, b);
        BOOST_TEST(!f.make("x").try_lock());
        BOOST_TEST(!f.make("y").try_lock());
    }
    BOOST_TEST(f.make("x").try_lock());
    BOOST_TEST(f.make("y").try_lock());
}

BOOST_AUTO_TEST_CASE(mutual_exclusion_across_threads) {
    fixture f(basic);
    long counter = 0;
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            auto lock = f.make("counter");
            for (int i = 0; i < 200; ++i) {
                std::lock_guard guard(lock);
                if (inside.fetch_add(1) != 0) ++overlaps;
                ++counter;
                inside.fetch_sub(1);
            }
        });
    for (auto& t : threads) t.join();
    BOOST_TEST(overlaps.load() == 0);
    BOOST_TEST(counter == 800);
}

// Reports its first attempt on a pipe.
class first_attempt_reporter : public test::forwarding_store {
  public:
    first_attempt_reporter(std::shared_ptr<store> inner, test::byte_pipe& out)
        : forwarding_store(std::move(inner)), out_(out) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) override {
        const bool granted = forwarding_store::do_try_acquire(k, mode, ttl);
        if (!reported_) out_.put('W');
        reported_ = true;
        return granted;
    }

  private:
    test::byte_pipe& out_;
    bool reported_ = false;
};

namespace {

// Whether a polled waiter of `user`, killed mid-wait (so that a board it used keeps its count of
// waiters), wrote into `fd`: the file the test planted at the user's wake-up board
// (core/local_wake.hpp), 32 KiB of zeros.
bool a_waiter_wrote_into(const test::local_user& user, int fd) {
    test::byte_pipe waiting;
    pid_t child = test::fork_child_as(user, [&] {
        waiting.close_read();
        auto polled =
            std::make_shared<recording_store>(capability::exclusive | capability::noblock);
        named_lock holder(polled, std::make_shared<key>("board"));
        if (!holder.try_lock()) return 2;
        named_lock waiter(std::make_shared<first_attempt_reporter>(polled, waiting),
                          std::make_shared<key>("board"));
        return waiter.try_lock_for(60s) ? 3 : 0;
    });
    waiting.close_write();
    BOOST_REQUIRE(waiting.get(10s) == 'W');
    ::kill(child, SIGKILL);
    BOOST_TEST(test::wait_child(child) == 128 + SIGKILL);
    std::vector<char> content(32768);
    BOOST_TEST(::pread(fd, content.data(), content.size(), 0) == ssize_t(content.size()));
    return !std::all_of(content.begin(), content.end(), [](char c) { return c == 0; });
}

// The board of `user`'s uid, planted by the test: 32 KiB of zeros, the user's, with `mode`.
int plant_board_file(const std::string& path, const test::local_user& user, mode_t mode) {
    ::unlink(path.c_str());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::fchown(fd, user.uid, user.gid) == 0);
    BOOST_REQUIRE(::fchmod(fd, mode) == 0);
    BOOST_REQUIRE(::ftruncate(fd, 32768) == 0);
    return fd;
}

}  // namespace

// The wake-up board of polled waits (core/local_wake.hpp) is used only when it is private to
// its user: one that others can read or write (here: the user's own name and file, mode 0666) is
// left alone and waits fall back to polling.
BOOST_AUTO_TEST_CASE(a_wake_up_board_others_can_write_is_never_used) {
    auto user = test::another_local_user_or_skip();
    if (!user) return;
    if (!test::running_alone()) {  // it forks: away from the renewal thread of the cases above
        BOOST_TEST(test::run_alone_in_a_fresh_process() == 0);
        return;
    }
    const std::string path = "/dev/shm/locksmith-wake-" + std::to_string(user->uid);
    const int fd = plant_board_file(path, *user, 0666);
    const bool written = a_waiter_wrote_into(*user, fd);
    ::close(fd);
    ::unlink(path.c_str());
    BOOST_TEST(!written, "a waiter used a board that others can write");
}

// Issue 23 point 18: nor one with a second link: some other file of the user's linked in at the
// board's name (which another user can plant where fs.protected_hardlinks=0: a 0600 shm segment
// of the user's, say), into which the board's counters would write.
BOOST_AUTO_TEST_CASE(a_hard_linked_wake_up_board_is_never_used) {
    auto user = test::another_local_user_or_skip();
    if (!user) return;
    if (!test::running_alone()) {  // it forks: away from the renewal thread of the cases above
        BOOST_TEST(test::run_alone_in_a_fresh_process() == 0);
        return;
    }
    const std::string victim = "/dev/shm/locksmith-test-victim-" + std::to_string(::getpid());
    const std::string path = "/dev/shm/locksmith-wake-" + std::to_string(user->uid);
    const int fd = plant_board_file(victim, *user, 0600);
    ::unlink(path.c_str());
    BOOST_REQUIRE(::link(victim.c_str(), path.c_str()) == 0);
    const bool written = a_waiter_wrote_into(*user, fd);
    ::close(fd);
    ::unlink(path.c_str());
    ::unlink(victim.c_str());
    BOOST_TEST(!written, "a waiter wrote its counters into a file hard-linked at its board");
}
