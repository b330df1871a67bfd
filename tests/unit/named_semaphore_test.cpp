// SPDX-License-Identifier: MIT
// named_semaphore's generic semantics (issue 27), against the recording store double, whose table
// counts permits: the limit, re-acquiring, a mismatched limit, timed waits, TTL and loss (all
// named_lock's code, reached through the key's limit), and the standard guards.
#define BOOST_TEST_MODULE named_semaphore
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <concepts>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>
#include <locksmith/strategies/memory.hpp>

#include "support/printers.hpp"
#include "support/recording_store.hpp"
#include "support/suite_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::recording_store;

template <class L>
concept timed_lockable = requires(L& l) {
    l.lock();
    l.unlock();
    { l.try_lock() } -> std::convertible_to<bool>;
    { l.try_lock_for(std::chrono::milliseconds(1)) } -> std::convertible_to<bool>;
    { l.try_lock_until(std::chrono::steady_clock::now()) } -> std::convertible_to<bool>;
};
static_assert(timed_lockable<named_semaphore>);
static_assert(noexcept(std::declval<named_semaphore&>().unlock()));
static_assert(std::is_nothrow_move_constructible_v<named_semaphore>);
static_assert(!std::is_copy_constructible_v<named_semaphore>);
static_assert(std::is_constructible_v<std::unique_lock<named_semaphore>, named_semaphore&>);

namespace {

const capability counting = capability::exclusive | capability::noblock | capability::counting;

std::shared_ptr<key> permit_key(const std::string& name, std::uint32_t limit) {
    auto k = std::make_shared<key>(name);
    k->set_limit(limit);
    return k;
}

named_semaphore make(const std::shared_ptr<store>& s, const std::string& name, std::uint32_t limit,
                     lock_options options = {}) {
    options.retry.initial = std::chrono::microseconds(100);
    options.retry.max = std::chrono::milliseconds(2);
    return named_semaphore(s, permit_key(name, limit), std::move(options));
}

// Six threads, each an owner, take a permit of `limit` 200 times each: the most owners that
// were inside at once.
int most_inside_at_once(const std::shared_ptr<store>& s, const std::string& name,
                        std::uint32_t limit) {
    std::atomic<int> inside{0}, most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
        threads.emplace_back([&] {
            auto p = make(s, name, limit);
            for (int i = 0; i < 200; ++i) {
                p.acquire();
                const int now = ++inside;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                // Held for a moment, so that others get in beside it however the scheduler
                // runs the threads (a yield ran them one at a time on a loaded machine).
                std::this_thread::sleep_for(std::chrono::microseconds(100));
                --inside;
                p.release();
            }
        });
    for (auto& t : threads) t.join();
    return most.load();
}

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(at_most_limit_owners_hold_a_permit) {
    auto s = std::make_shared<recording_store>(counting);
    auto a = make(s, "jobs", 2), b = make(s, "jobs", 2), c = make(s, "jobs", 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(!c.try_acquire());
    BOOST_TEST(s->status("jobs").permits_held.value_or(0) == 2u);
    BOOST_TEST(s->status("jobs").limit.value_or(0) == 2u);
    a.release();
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(c.try_acquire());
    BOOST_TEST(c.is_acquired());
    BOOST_TEST(c.limit() == 2u);
    BOOST_TEST(c.name() == "jobs");
}

BOOST_AUTO_TEST_CASE(acquiring_again_while_held_takes_no_second_permit) {
    auto s = std::make_shared<recording_store>(counting);
    auto a = make(s, "again", 2), b = make(s, "again", 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.try_acquire());
    a.acquire();
    BOOST_TEST(b.try_acquire());
    a.release();  // one release gives the one permit back
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(s->status("again").permits_held.value_or(0) == 1u);
}

BOOST_AUTO_TEST_CASE(a_different_limit_for_the_same_name_is_refused) {
    auto s = std::make_shared<recording_store>(counting);
    auto a = make(s, "one.limit", 3);
    BOOST_TEST(a.try_acquire());
    auto b = make(s, "one.limit", 5);
    const auto message = error_of([&] { (void)b.try_acquire(); });
    BOOST_TEST(message.find("limit of 3") != std::string::npos, message);
    BOOST_TEST(!b.held());
    BOOST_TEST(s->status("one.limit").permits_held.value_or(0) == 1u);
}

BOOST_AUTO_TEST_CASE(a_semaphore_needs_a_limit_and_a_counting_store) {
    auto plain = std::make_shared<recording_store>(capability::exclusive | capability::noblock);
    BOOST_CHECK_THROW(make(plain, "x", 2), invalid_argument_error);
    auto s = std::make_shared<recording_store>(counting);
    BOOST_CHECK_THROW(named_semaphore(s, std::make_shared<key>("x")), invalid_argument_error);
    BOOST_CHECK_THROW(named_semaphore(nullptr, permit_key("x", 1)), invalid_argument_error);
    BOOST_CHECK_THROW(permit_key("x", max_semaphore_limit + 1), invalid_argument_error);
    // The store refuses a permit on its own too (a plugin's store reached without the factory).
    key k("x");
    k.set_limit(2);
    BOOST_CHECK_THROW(plain->try_acquire(k, lock_mode::exclusive, 0ms), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(a_timed_wait_ends_on_time_and_gets_a_permit_given_back) {
    auto s = std::make_shared<recording_store>(counting);
    auto a = make(s, "timed", 1), b = make(s, "timed", 1);
    BOOST_TEST(a.try_acquire());
    const auto start = std::chrono::steady_clock::now();
    BOOST_TEST(!b.try_acquire_for(60ms));
    const auto waited = std::chrono::steady_clock::now() - start;
    BOOST_TEST(waited >= 60ms);
    BOOST_TEST(waited < 5s);
    std::thread giver([&] {
        std::this_thread::sleep_for(30ms);
        a.unlock();
    });
    BOOST_TEST(b.try_acquire_for(5s));
    giver.join();
}

BOOST_AUTO_TEST_CASE(a_lock_and_a_semaphore_of_one_name_are_separate) {
    auto s = std::make_shared<recording_store>(counting);
    named_lock lock(s, std::make_shared<key>("both"));
    auto permit = make(s, "both", 1);
    BOOST_TEST(lock.try_lock());
    BOOST_TEST(permit.try_acquire());
}

BOOST_AUTO_TEST_CASE(expiring_permits_refresh_and_report_their_loss) {
    auto s =
        std::make_shared<recording_store>(counting | capability::expiring | capability::fencing);
    std::atomic<int> lost{0};
    lock_options options;
    options.ttl = 10s;
    options.on_lost = [&](const error&) { ++lost; };
    auto a = make(s, "lease", 2, options);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.remaining_lifetime().has_value());
    BOOST_TEST(a.fencing_token().has_value());
    a.refresh(20s);
    BOOST_TEST(a.remaining_lifetime()->count() > 10'000);
    s->clear("lease");  // the backend forgot the permit (expired)
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(lost.load() == 1);
    BOOST_CHECK_THROW(a.refresh(), acquire_error);
}

BOOST_AUTO_TEST_CASE(guards_and_destruction_give_the_permit_back) {
    auto s = std::make_shared<recording_store>(counting);
    {
        auto a = make(s, "guard", 1);
        std::unique_lock guard(a);
        BOOST_TEST(a.held());
        BOOST_TEST(a.permit() == a.owner()->token());
        auto b = make(s, "guard", 1);
        BOOST_TEST(!b.try_acquire());
    }
    {
        auto a = make(s, "guard", 1);
        BOOST_TEST(a.permit().empty());
        BOOST_TEST(a.try_acquire());
    }  // destroyed while held
    auto c = make(s, "guard", 1);
    BOOST_TEST(c.try_acquire());
}

BOOST_AUTO_TEST_CASE(threads_never_exceed_the_limit) {
    auto s = std::make_shared<recording_store>(counting);
    const int most = most_inside_at_once(s, "threads", 3);
    BOOST_TEST(most <= 3);
    BOOST_TEST(most >= 2);
}

// The memory strategy counts in its store object (process-local), waiting on its condition
// variable. Guards: grant beyond the limit; a second limit; permit numbers; expiry; the wake.
BOOST_AUTO_TEST_CASE(memory_counts_in_its_store_object) {
    auto s = strategies::make_memory_store();
    BOOST_TEST(has(s->capabilities(), capability::counting));
    auto a = make(s, "memory", 2), b = make(s, "memory", 2), c = make(s, "memory", 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(!c.try_acquire());
    BOOST_TEST(a.permit() == "1");
    BOOST_TEST(b.permit() == "2");
    auto st = s->status("memory");
    BOOST_TEST(st.limit.value_or(0) == 2u);
    BOOST_TEST(st.permits_held.value_or(0) == 2u);
    BOOST_TEST(st.held == lock_status::state::held_exclusive);
    auto other = make(s, "memory", 3);
    const auto refused = error_of([&] { (void)other.try_acquire(); });
    BOOST_TEST(refused.find("limit of 2") != std::string::npos, refused);
    BOOST_TEST(refused.find("asks for 3") != std::string::npos, refused);
    // The lock of the name is another object.
    named_lock lock(s, std::make_shared<key>("memory"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    // A waiter is woken by a release, and gets the permit given back.
    std::atomic<bool> granted{false};
    std::thread t([&] { granted = c.try_acquire_for(10s); });
    std::this_thread::sleep_for(50ms);
    BOOST_TEST(!granted.load());
    a.release();
    t.join();
    BOOST_TEST(granted.load());
    BOOST_TEST(c.permit() == "1");
    b.release();
    c.release();
    BOOST_TEST(!s->status("memory").limit.has_value());
    BOOST_TEST(other.try_acquire());  // the limit went with the last holder
    other.release();
}

BOOST_AUTO_TEST_CASE(memory_permits_expire_and_threads_never_exceed_the_limit) {
    auto s = strategies::make_memory_store();
    lock_options o;
    o.ttl = 100ms;
    o.auto_refresh = false;
    auto held = make(s, "expiring", 1, o), next = make(s, "expiring", 1, o);
    BOOST_TEST(held.try_acquire());
    BOOST_TEST(!next.try_acquire());
    BOOST_TEST(next.try_acquire_for(5s));  // woken at the holder's expiry
    BOOST_TEST(!held.is_acquired());
    next.release();

    const int most = most_inside_at_once(s, "memory-threads", 3);
    BOOST_TEST(most <= 3);
    BOOST_TEST(most >= 2);
}
