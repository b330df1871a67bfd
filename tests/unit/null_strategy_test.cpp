// SPDX-License-Identifier: MIT
// The `null` strategy (issue 12 item 5; Symfony's NullStore, TYPO3's "disable locking"): every
// acquire succeeds and nothing is excluded, so it must never be chosen unless a config asks.
#define BOOST_TEST_MODULE null_strategy
#include <boost/test/unit_test.hpp>

#include <string>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/registry.hpp>

#include "support/printers.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;

namespace {

const selection_report::entry* entry_for(const selection_report& report, const std::string& name) {
    for (const auto& e : report.entries)
        if (e.strategy == name) return &e;
    return nullptr;
}

// A registry of its own with the built-ins, so that overrides stay inside the test.
struct fixture {
    strategy_registry registry;
    fixture() { register_builtin_strategies(registry); }
    lock_factory factory(const std::string& json = "{}") {
        return lock_factory(config::parse(json), registry);
    }
};

const char* const enabled = R"({"strategies": {"null": {"enabled": true}}})";

}  // namespace

BOOST_AUTO_TEST_CASE(registered_disabled_and_marked_as_excluding_nothing) {
    fixture f;
    auto d = f.registry.find("null");
    BOOST_REQUIRE(d.has_value());
    BOOST_TEST(!d->enabled_by_default);
    BOOST_TEST(d->excludes_nothing);
    // It "spans" processes trivially: it excludes nothing anywhere.
    BOOST_TEST(d->spans_processes);
    // No promise of a value or of where the grant is decided: a fenced resource or a consensus
    // request must not be served by a lock that is not there.
    BOOST_TEST(!has(d->capabilities, capability::fencing));
    BOOST_TEST(!has(d->capabilities, capability::consensus));
    // Every other built-in excludes.
    for (const auto& name : f.registry.names())
        if (name != "null") BOOST_TEST(!f.registry.find(name)->excludes_nothing, name);
}

BOOST_AUTO_TEST_CASE(never_chosen_by_selection_unless_the_config_enables_it) {
    fixture f;
    const capability every_claim = f.registry.find("null")->capabilities;
    for (capability request :
         {capability::exclusive, capability::shared | capability::noblock, every_claim}) {
        auto report = f.factory().explain(request);
        if (auto* chosen = report.chosen()) BOOST_TEST(chosen->strategy != "null");
        auto* null = entry_for(report, "null");
        BOOST_REQUIRE(null != nullptr);
        BOOST_TEST(!null->candidate);
        BOOST_TEST(contains(null->passed_over, "disabled"), null->passed_over);
    }
    // Enabled, it wins: enabling it is the switch that turns locking off.
    BOOST_TEST(f.factory(enabled).explain(capability::exclusive).chosen()->strategy == "null");
    BOOST_TEST(f.factory(enabled).create_lock("x").strategy() == "null");
}

BOOST_AUTO_TEST_CASE(a_pin_needs_the_config_to_enable_it) {
    fixture f;
    lock_request pinned;
    pinned.strategy = "null";
    try {
        (void)f.factory().create_lock("x", pinned);
        BOOST_ERROR("a pin used the null strategy without the config enabling it");
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "disabled by default"), e.what());
    }
    BOOST_TEST(f.factory(enabled).create_lock("x", pinned).strategy() == "null");
}

BOOST_AUTO_TEST_CASE(every_acquire_succeeds_and_nothing_is_excluded) {
    fixture f;
    auto factory = f.factory(enabled);
    auto a = factory.create_lock("x");
    auto b = factory.create_lock("x");
    BOOST_TEST(a.try_lock());
    BOOST_TEST(b.try_lock());  // a holds it too: nothing is excluded
    BOOST_TEST(b.try_lock_for(10ms));
    BOOST_TEST(a.try_lock_shared());  // demotion and promotion always succeed
    BOOST_TEST(a.try_lock());
    b.lock();  // never waits
    b.lock_shared();
}

// Turning locking off turns semaphores off too: with `null` enabled, a semaphore is served by it
// (not by the next strategy that counts) and grants every permit whatever the limit.
BOOST_AUTO_TEST_CASE(every_permit_is_granted_whatever_the_limit) {
    fixture f;
    auto factory = f.factory(enabled);
    auto a = factory.create_semaphore("x", 1);
    auto b = factory.create_semaphore("x", 1);
    BOOST_TEST(a.strategy() == "null");
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());  // a second holder of a one-permit semaphore: nothing counts
    a.release();
    b.release();
}

// Each owner's own view stays consistent (unlike Symfony's NullStore, whose exists() is always
// false): a lock that reported itself lost right after acquiring would make `locksmith run` and
// the renewal thread treat every grant as lost.
BOOST_AUTO_TEST_CASE(an_owner_sees_its_own_grant_until_it_releases) {
    fixture f;
    auto factory = f.factory(enabled);
    auto a = factory.create_lock("x");
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(a.try_lock());
    BOOST_TEST(a.is_acquired());
    a.refresh(1s);
    a.release();  // checks that the lock is no longer held
    BOOST_TEST(!a.is_acquired());
    BOOST_CHECK_THROW(a.refresh(), acquire_error);
}

BOOST_AUTO_TEST_CASE(status_says_free_and_why) {
    fixture f;
    auto factory = f.factory(enabled);
    auto a = factory.create_lock("x");
    a.lock();
    auto status = factory.store_for("null")->status("x");
    BOOST_TEST(status.held == lock_status::state::free);
    BOOST_REQUIRE(!status.holders.empty());
    BOOST_TEST(contains(status.holders.front(), "locking is off"), status.holders.front());
}

BOOST_AUTO_TEST_CASE(a_key_continues_in_another_owner) {
    fixture f;
    auto factory = f.factory(enabled);
    auto a = factory.create_lock("x");
    a.lock();
    auto b = factory.create_lock_from_key(a.serialize_key());
    BOOST_TEST(b.is_acquired());
    b.release();
}

BOOST_AUTO_TEST_CASE(rejects_options) {
    fixture f;
    BOOST_CHECK_THROW(f.factory(R"({"strategies": {"null": {"enabled": true,
                                                             "options": {"x": 1}}}})"),
                      config_error);
}
