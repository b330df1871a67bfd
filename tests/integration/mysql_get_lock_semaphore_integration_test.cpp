// SPDX-License-Identifier: MIT
// Counting semaphores on the mysql_get_lock strategy (issue 27) against the MariaDB of
// scripts/services.sh (LOCKSMITH_TEST_MARIADB_DSN): permits are user-level locks of sessions, so
// a killed holder's permit comes back at once; each case names the path it guards
// (tests/mutants/faults.txt). The limit and the permits' numbers are the conformance suite's
// (counting_limit_kept_and_permits_numbered, for every strategy with `counting`).
#define BOOST_TEST_MODULE mysql_get_lock_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/mysql_get_lock.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::endpoint;
using locksmith::test::make_permit;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* dsn_variable = "LOCKSMITH_TEST_MARIADB_DSN";

std::shared_ptr<store> store_for(const std::string& dsn) {
    strategies::mysql_get_lock_options o;
    o.dsn = dsn;
    o.connect_timeout = 2s;
    o.command_timeout = 5s;
    return strategies::make_mysql_get_lock_store(o);
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(dsn_variable));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mysql_get_lock_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          dsn_variable}))

// Guards: a release that keeps the permit's marker on a pooled session: another store (another
// process) then finds the slot free but cannot take it.
BOOST_AUTO_TEST_CASE(a_released_permit_leaves_nothing_behind) {
    const std::string name = test::unique_resource("released");
    auto first = shared_store(), second = shared_store();
    for (int round = 0; round < 2; ++round) {
        auto a = make_permit(first, name, 1), b = make_permit(second, name, 1);
        BOOST_REQUIRE(a.try_acquire());
        a.release();
        BOOST_TEST(b.try_acquire(), "round " << round);
        b.release();
        std::swap(first, second);
    }
}

// Guards: grant beyond the limit, across processes (waits poll): N + 2 processes, limit N.
BOOST_AUTO_TEST_CASE(five_processes_limit_three_never_above_three) {
    const std::string name = test::unique_resource("pool");
    const std::string dsn = endpoint(dsn_variable);
    test::permit_page page;
    auto* c = page.counter;
    BOOST_TEST(test::hold_permits_in_processes([&] { return store_for(dsn); }, name, 3, 5, 40, *c,
                                               5ms) == 0);
    BOOST_TEST(c->grants.load() == 200);
    BOOST_TEST(c->most.load() <= 3);
    BOOST_TEST(c->most.load() == 3);
}

// Crash: the session of a killed holder ends, and its permit with it, at once.
BOOST_AUTO_TEST_CASE(a_killed_holders_permit_returns_at_once) {
    const std::string name = test::unique_resource("killed");
    const std::string dsn = endpoint(dsn_variable);
    test::byte_pipe ready;
    const pid_t child = test::fork_child([&] {
        auto permit = make_permit(store_for(dsn), name, 2);
        auto other = make_permit(store_for(dsn), name, 2);
        if (!permit.try_acquire() || !other.try_acquire()) return 2;
        ready.put('1');
        ::pause();
        return 0;
    });
    BOOST_REQUIRE(ready.get(10s) == '1');
    auto waiter = make_permit(shared_store(), name, 2);
    BOOST_TEST(!waiter.try_acquire());
    const auto killed_at = clock_type::now();
    ::kill(child, SIGKILL);
    test::wait_child(child, 5s);
    BOOST_TEST(waiter.try_acquire_for(10s));
    BOOST_TEST_MESSAGE("permit back " << test::ms_since(killed_at) << " ms after the kill");
    auto second = make_permit(shared_store(), name, 2);
    BOOST_TEST(second.try_acquire());  // both of the dead holder's permits
    waiter.release();
    second.release();
}

// Guards: limit mismatch ignored; a refused owner keeps no lock on a pooled session.
BOOST_AUTO_TEST_CASE(a_second_limit_for_a_name_is_refused_naming_both) {
    const std::string name = test::unique_resource("mismatch");
    auto s = shared_store();
    auto three = make_permit(s, name, 3);
    BOOST_REQUIRE(three.try_acquire());
    auto five = make_permit(s, name, 5);
    try {
        five.try_acquire();
        BOOST_ERROR("a second limit was accepted");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(contains(e.what(), "limit of 3"), e.what());
        BOOST_TEST(contains(e.what(), "asks for 5"), e.what());
    }
    BOOST_CHECK_THROW(five.try_acquire_for(100ms), invalid_argument_error);
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 1u);
    // A smaller limit is refused too, although its slots are free.
    auto two = make_permit(s, name, 2);
    BOOST_CHECK_THROW(two.try_acquire(), invalid_argument_error);
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 1u);
    // Refused with every permit taken: no permit left behind on the pooled session.
    auto one = make_permit(s, name, 3), other = make_permit(s, name, 3),
         four = make_permit(s, name, 3);
    BOOST_REQUIRE(one.try_acquire());
    BOOST_REQUIRE(other.try_acquire());
    BOOST_TEST(!four.try_acquire());
    BOOST_CHECK_THROW(five.try_acquire(), invalid_argument_error);
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 3u);
    three.release();
    one.release();
    other.release();
    BOOST_TEST(five.try_acquire());  // the limit went with the last holder
    BOOST_TEST(s->status(name).limit.value_or(0) == 5u);
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 1u);
    five.release();
}

// A larger limit held on slots beyond a smaller one's is seen too (the look covers every slot).
BOOST_AUTO_TEST_CASE(a_larger_limit_on_high_slots_is_seen) {
    const std::string name = test::unique_resource("high");
    auto s = shared_store();
    std::vector<named_semaphore> big;
    for (int i = 0; i < 6; ++i) {
        big.push_back(make_permit(s, name, 6));
        BOOST_REQUIRE(big.back().try_acquire());
    }
    for (int i = 0; i < 5; ++i) big[std::size_t(i)].release();  // permit 6 (slot 5) stays
    auto small = make_permit(s, name, 2);
    try {
        small.try_acquire();
        BOOST_ERROR("a second limit was accepted");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(contains(e.what(), "limit of 6"), e.what());
    }
    big.back().release();
    BOOST_TEST(small.try_acquire());
    small.release();
}

// Two owners of different limits that take at once: never both granted.
BOOST_AUTO_TEST_CASE(racing_owners_of_two_limits_are_never_both_granted) {
    const std::string name = test::unique_resource("race");
    const std::string dsn = endpoint(dsn_variable);
    for (int round = 0; round < 20; ++round) {
        const auto n = name + std::to_string(round);
        auto a = make_permit(store_for(dsn), n, 1), b = make_permit(store_for(dsn), n, 2);
        std::atomic<int> go{0};
        bool got_a = false, got_b = false;
        std::thread t([&] {
            ++go;
            while (go.load() < 2) {
            }
            try {
                got_b = b.try_acquire();
            } catch (const invalid_argument_error&) {
            } catch (const std::exception& e) {
                BOOST_ERROR(e.what());
            }
        });
        ++go;
        while (go.load() < 2) {
        }
        try {
            got_a = a.try_acquire();
        } catch (const invalid_argument_error&) {
        }
        t.join();
        BOOST_TEST(!(got_a && got_b), "round " << round << ": both limits granted");
        if (got_a) a.release();
        if (got_b) b.release();
    }
}

// A limit beyond the slots a grant looks at (256) is refused by name; a timed wait ends on time.
BOOST_AUTO_TEST_CASE(a_huge_limit_is_refused_and_a_timed_wait_ends_on_time) {
    const std::string name = test::unique_resource("bounds");
    auto s = shared_store();
    auto huge = make_permit(s, name, 257);
    BOOST_CHECK_THROW(huge.try_acquire(), invalid_argument_error);
    auto largest = make_permit(s, name + "-largest", 256);
    BOOST_TEST(largest.try_acquire());
    BOOST_TEST(s->status(name + "-largest").limit.value_or(0) == 256u);
    largest.release();
    auto holder = make_permit(s, name, 1), waiter = make_permit(s, name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    const auto started = clock_type::now();
    BOOST_TEST(!waiter.try_acquire_for(300ms));
    const double waited = test::ms_since(started);
    BOOST_TEST(waited >= 290.0);
    BOOST_TEST(waited < 5000.0);
    holder.release();
}

// Guards: a permit waiter waiting for the name's lock. The server cannot wait for any one of N
// locks, so the store waits natively for its locks only and named_lock polls for a permit; a
// release wakes the waiter.
BOOST_AUTO_TEST_CASE(a_permit_wait_is_polled_and_a_release_wakes_it) {
    const std::string name = test::unique_resource("polled");
    auto s = shared_store();
    key lock_key(name), permit_key(name);
    permit_key.set_limit(1);
    BOOST_TEST(s->waits_natively(lock_key));
    BOOST_TEST(!s->waits_natively(permit_key));
    auto holder = make_permit(s, name, 1), waiter = make_permit(s, name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    std::atomic<bool> granted{false};
    std::string failed;
    std::thread t([&] {
        try {
            granted = waiter.try_acquire_for(20s);
        } catch (const std::exception& e) {
            failed = e.what();
        }
    });
    std::this_thread::sleep_for(200ms);
    BOOST_TEST(!granted.load());
    holder.release();
    t.join();
    BOOST_TEST(failed.empty(), failed);
    BOOST_TEST(granted.load());
    BOOST_TEST(waiter.permit() == "1");
    waiter.release();
}

BOOST_AUTO_TEST_SUITE_END()
