// SPDX-License-Identifier: MIT
// Counting semaphores on the pg_advisory strategy (issue 27) against the PostgreSQL of
// scripts/services.sh (LOCKSMITH_TEST_POSTGRES_DSN): permits are advisory locks of sessions, so
// a killed holder's permit comes back at once; each case names the path it guards
// (tests/mutants/faults.txt). The limit and the permits' numbers are the conformance suite's
// (counting_limit_kept_and_permits_numbered, for every strategy with `counting`).
#define BOOST_TEST_MODULE pg_advisory_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/pg_advisory.hpp>

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

constexpr const char* dsn_variable = "LOCKSMITH_TEST_POSTGRES_DSN";

std::shared_ptr<store> store_for(const std::string& dsn) {
    strategies::pg_advisory_options o;
    o.dsn = dsn;
    o.connect_timeout = 2s;
    o.command_timeout = 5s;
    return strategies::make_pg_advisory_store(o);
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(dsn_variable));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pg_advisory_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          dsn_variable}))

// Crash: the session of a killed holder ends, and its permit with it, at once.
BOOST_AUTO_TEST_CASE(a_killed_holders_permit_returns_at_once) {
    const std::string name = test::unique_resource("killed");
    const std::string dsn = endpoint(dsn_variable);
    test::byte_pipe ready;
    const pid_t child = test::fork_child([&] {
        auto permit = make_permit(store_for(dsn), name, 1);
        if (!permit.try_acquire()) return 2;
        ready.put('1');
        ::pause();
        return 0;
    });
    BOOST_REQUIRE(ready.get(10s) == '1');
    auto waiter = make_permit(shared_store(), name, 1);
    BOOST_TEST(!waiter.try_acquire());
    const auto killed_at = clock_type::now();
    ::kill(child, SIGKILL);
    test::wait_child(child, 5s);
    BOOST_TEST(waiter.try_acquire_for(10s));
    BOOST_TEST_MESSAGE("permit back " << test::ms_since(killed_at) << " ms after the kill");
    waiter.release();
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
    // Refused with every permit taken: no limit lock left behind on the pooled session.
    auto one = make_permit(s, name, 3), two = make_permit(s, name, 3),
         four = make_permit(s, name, 3);
    BOOST_REQUIRE(one.try_acquire());
    BOOST_REQUIRE(two.try_acquire());
    BOOST_TEST(!four.try_acquire());
    three.release();
    one.release();
    two.release();
    BOOST_TEST(five.try_acquire());  // the limit went with the last holder
    BOOST_TEST(s->status(name).limit.value_or(0) == 5u);
    five.release();
}

// A limit beyond what sessions can reach is refused by name; a timed wait ends on time.
BOOST_AUTO_TEST_CASE(a_huge_limit_is_refused_and_a_timed_wait_ends_on_time) {
    const std::string name = test::unique_resource("bounds");
    auto s = shared_store();
    auto huge = make_permit(s, name, 20000);
    BOOST_CHECK_THROW(huge.try_acquire(), invalid_argument_error);
    auto holder = make_permit(s, name, 1), waiter = make_permit(s, name, 1);
    BOOST_REQUIRE(holder.try_acquire());
    const auto started = clock_type::now();
    BOOST_TEST(!waiter.try_acquire_for(300ms));
    const double waited = test::ms_since(started);
    BOOST_TEST(waited >= 290.0);
    BOOST_TEST(waited < 5000.0);
    holder.release();
}

// Guards: a permit waiter waiting for the name's lock. PostgreSQL cannot wait for any one of N
// locks, so the store waits natively for its locks only and named_lock polls for a permit; a
// release wakes the waiter.
BOOST_AUTO_TEST_CASE(a_permit_wait_is_polled_and_a_release_wakes_it) {
    const std::string name = test::unique_resource("polled");
    auto s = shared_store();
    key lock_key(name), permit_key(name);
    permit_key.set_limit(1);
    BOOST_TEST(s->waits_natively(lock_key));
    BOOST_TEST(!s->waits_natively(permit_key));
    BOOST_CHECK_THROW(s->wait_acquire(permit_key, lock_mode::exclusive, 0ms, deadline::max()),
                      invalid_argument_error);
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
