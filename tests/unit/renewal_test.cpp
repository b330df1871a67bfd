// SPDX-License-Identifier: MIT
// auto_refresh: the process's renewal thread keeps expiring locks alive at a third of their
// TTL, stops when the lock is released, and reports a loss.
#define BOOST_TEST_MODULE renewal
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include <poll.h>

#include <locksmith/named_lock.hpp>
#include <locksmith/strategies/memory.hpp>

#include "support/recording_store.hpp"

using namespace locksmith;
using namespace std::chrono_literals;

namespace {

lock_options renewing(std::chrono::milliseconds ttl) {
    lock_options o;
    o.ttl = ttl;
    o.auto_refresh = true;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_auto_refreshed_lock_outlives_its_ttl) {
    auto store = strategies::make_memory_store();
    named_lock holder(store, std::make_shared<key>("renewed"), renewing(300ms));
    BOOST_REQUIRE(holder.try_lock());
    std::this_thread::sleep_for(1200ms);  // four TTLs
    named_lock rival(store, std::make_shared<key>("renewed"), lock_options{});
    BOOST_TEST(!rival.try_lock());
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(holder.remaining_lifetime()->count() > 0);
}

// An event loop asks for loss_fd() once and polls it: each confirmed renewal must move the
// timer behind it, else it turns readable at the first lease's end although nothing was lost.
BOOST_AUTO_TEST_CASE(renewals_keep_the_loss_fd_quiet) {
    auto store = strategies::make_memory_store();
    named_lock holder(store, std::make_shared<key>("watched"), renewing(300ms));
    BOOST_REQUIRE(holder.try_lock());
    const auto fd = holder.loss_fd();
    BOOST_REQUIRE(fd.has_value());
    pollfd p{*fd, POLLIN, 0};
    BOOST_TEST(::poll(&p, 1, 1000) == 0);  // three TTLs
    BOOST_TEST(holder.is_acquired());
    holder.unlock();
}

BOOST_AUTO_TEST_CASE(without_auto_refresh_the_lock_expires) {
    auto store = strategies::make_memory_store();
    lock_options o;
    o.ttl = 300ms;
    named_lock holder(store, std::make_shared<key>("plain"), o);
    BOOST_REQUIRE(holder.try_lock());
    std::this_thread::sleep_for(500ms);
    named_lock rival(store, std::make_shared<key>("plain"), lock_options{});
    BOOST_TEST(rival.try_lock());
    BOOST_TEST(!holder.is_acquired());
}

BOOST_AUTO_TEST_CASE(unlock_stops_the_renewal) {
    auto store = strategies::make_memory_store();
    named_lock holder(store, std::make_shared<key>("stopped"), renewing(300ms));
    BOOST_REQUIRE(holder.try_lock());
    holder.unlock();
    named_lock rival(store, std::make_shared<key>("stopped"), lock_options{});
    BOOST_REQUIRE(rival.try_lock());
    std::this_thread::sleep_for(400ms);  // a stale renewal would have fired by now
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(rival.is_acquired());
}

BOOST_AUTO_TEST_CASE(a_failed_renewal_reports_the_loss) {
    auto store = std::make_shared<test::recording_store>(
        capability::exclusive | capability::noblock | capability::expiring);
    std::atomic<int> losses{0};
    auto o = renewing(150ms);
    o.on_lost = [&](const error&) { ++losses; };
    named_lock holder(store, std::make_shared<key>("lost"), o);
    BOOST_REQUIRE(holder.try_lock());
    store->fail_refresh(true);
    std::this_thread::sleep_for(400ms);
    BOOST_TEST(losses.load() == 1);
    BOOST_TEST(!holder.held_mode().has_value());
}
