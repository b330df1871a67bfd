// SPDX-License-Identifier: MIT
// The logger hook (issue 12 item 6): a recording sink on the factory, or on one lock, sees
// failures, fallbacks, renewals, lost locks, slow waits and locking_off, with their fields; with
// no sink nothing is logged; a throwing sink breaks nothing; no record carries a secret.
#define BOOST_TEST_MODULE logger
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/logger.hpp>
#include <locksmith/registry.hpp>

#include "support/printers.hpp"
#include "support/recording_store.hpp"
#include "support/skip_report.hpp"
#include "support/test_helpers.hpp"
#include "support/test_strategy.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::recording_store;
using locksmith::test::test_strategy;

namespace locksmith {
std::ostream& operator<<(std::ostream& out, log_level level) {
    return out << to_string(level);
}
}  // namespace locksmith

namespace {

// Keeps every record; a test can wait for an event (the renewal thread logs asynchronously)
// and run a step when one arrives (to order a wait without sleeping).
class recording_sink : public log_sink {
  public:
    void log(const log_record& record) override {
        std::function<void()> step;
        {
            std::lock_guard guard(mutex_);
            records_.push_back(record);
            if (auto it = on_event_.find(record.event); it != on_event_.end()) {
                step = std::move(it->second);
                on_event_.erase(it);
            }
        }
        changed_.notify_all();
        if (step) step();
    }
    void on(const std::string& event, std::function<void()> step) {
        std::lock_guard guard(mutex_);
        on_event_[event] = std::move(step);
    }
    std::vector<log_record> records() const {
        std::lock_guard guard(mutex_);
        return records_;
    }
    std::vector<log_record> of(const std::string& event) const {
        std::vector<log_record> out;
        for (auto& r : records())
            if (r.event == event) out.push_back(r);
        return out;
    }
    // A safety net only: the event is expected long before.
    bool wait_for(const std::string& event, std::chrono::seconds timeout = 30s) {
        std::unique_lock guard(mutex_);
        return changed_.wait_for(guard, timeout, [&] {
            for (auto& r : records_)
                if (r.event == event) return true;
            return false;
        });
    }

  private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<log_record> records_;
    std::map<std::string, std::function<void()>> on_event_;
};

struct throwing_sink : log_sink {
    int calls = 0;
    void log(const log_record&) override {
        ++calls;
        throw std::runtime_error("the sink is broken");
    }
};

const capability ex = capability::exclusive;
const capability polled = ex | capability::noblock | capability::expiring;  // no native_wait

// A registry with one polled test strategy ("alpha"), and factories that log to `sink`.
struct fixture {
    strategy_registry registry;
    test_strategy alpha{"alpha", 50, polled};
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
    std::vector<std::unique_ptr<lock_factory>> factories;  // a factory cannot move (its mutex)
    fixture() { registry.add(alpha.descriptor()); }
    lock_factory& factory(const std::string& json = "{}") {
        factories.push_back(std::make_unique<lock_factory>(config::parse(json), registry));
        factories.back()->set_logger(sink);
        return *factories.back();
    }
};

}  // namespace

BOOST_AUTO_TEST_CASE(level_names) {
    BOOST_TEST(to_string(log_level::debug) == "debug");
    BOOST_TEST(to_string(log_level::info) == "info");
    BOOST_TEST(to_string(log_level::warning) == "warning");
    BOOST_TEST(to_string(log_level::error) == "error");
}

BOOST_AUTO_TEST_CASE(without_a_sink_nothing_is_logged_and_nothing_breaks) {
    fixture f;
    lock_factory quiet(config::parse("{}"), f.registry);
    auto lock = quiet.create_lock("x");
    f.alpha.last_store()->fail_release(true);
    int reported = 0;
    lock_request request;
    request.on_error = [&](const error&) { ++reported; };
    auto other = quiet.create_lock("y", request);
    other.lock();
    other.unlock();
    BOOST_TEST(reported == 1);
    BOOST_TEST(f.sink->records().empty());
}

BOOST_AUTO_TEST_CASE(fallback_is_a_warning_record) {
    fixture f;
    test_strategy down("down", 90, ex);
    down.fail_construction("connection refused");
    f.registry.add(down.descriptor());
    auto& factory = f.factory(R"({"defaults": {"fallback": true}})");
    BOOST_TEST(factory.create_lock("x").strategy() == "alpha");
    auto records = f.sink->of("fallback");
    BOOST_REQUIRE(records.size() == 1u);
    BOOST_TEST(records[0].level == log_level::warning);
    BOOST_TEST(records[0].strategy == "alpha");
    BOOST_TEST(contains(records[0].message, "'down'"), records[0].message);
    BOOST_TEST(contains(records[0].message, "'alpha'"), records[0].message);
    BOOST_TEST(contains(records[0].error, "connection refused"), records[0].error);
}

BOOST_AUTO_TEST_CASE(acquire_failure_is_logged_and_still_thrown) {
    fixture f;
    auto& factory = f.factory();
    auto lock = factory.create_lock("x");
    f.alpha.last_store()->fail_acquire(true);
    BOOST_CHECK_THROW(lock.try_lock(), backend_error);
    BOOST_CHECK_THROW(lock.try_lock_for(1s), backend_error);
    auto records = f.sink->of("acquire_failed");
    BOOST_REQUIRE(records.size() == 2u);
    BOOST_TEST(records[0].level == log_level::error);
    BOOST_TEST(records[0].name == "x");
    BOOST_TEST(records[0].strategy == "alpha");
    BOOST_TEST(contains(records[0].error, "injected acquire failure"), records[0].error);
    BOOST_TEST(contains(records[0].message, "'x'"), records[0].message);
    // Contention is not a failure.
    f.alpha.last_store()->fail_acquire(false);
    auto holder = factory.create_lock("y");
    auto other = factory.create_lock("y");
    holder.lock();
    BOOST_TEST(!other.try_lock());
    BOOST_TEST(f.sink->of("acquire_failed").size() == 2u);
}

// Symfony's Lock logs every grant and every release at debug level; its LockTest
// (testSuccessReleaseLog) expects exactly one record for a release, even of a lock not held.
BOOST_AUTO_TEST_CASE(every_grant_and_release_is_a_debug_record) {
    fixture f;
    auto& factory = f.factory();
    auto lock = factory.create_lock("x");
    lock.release();  // never acquired
    auto released = f.sink->of("released");
    BOOST_REQUIRE(released.size() == 1u);
    BOOST_TEST(released[0].level == log_level::debug);
    BOOST_TEST(released[0].name == "x");
    BOOST_TEST(released[0].strategy == "alpha");
    BOOST_TEST(f.sink->of("acquired").empty());

    lock.lock();
    auto other = factory.create_lock("x");
    BOOST_TEST(!other.try_lock());  // contention is no grant
    auto acquired = f.sink->of("acquired");
    BOOST_REQUIRE(acquired.size() == 1u);
    BOOST_TEST(acquired[0].level == log_level::debug);
    BOOST_TEST(acquired[0].name == "x");
    BOOST_TEST(contains(acquired[0].message, "'x'"), acquired[0].message);
    lock.unlock();
    {
        auto scoped = factory.create_lock("y");
        scoped.lock();
    }  // the destructor releases
    BOOST_TEST(f.sink->of("released").size() == 3u);
    BOOST_TEST(f.sink->of("acquired").size() == 2u);
    // A release that fails is an error record, not a debug one.
    lock.lock();
    f.alpha.last_store()->fail_release(true);
    BOOST_CHECK_THROW(lock.release(), error);
    BOOST_TEST(f.sink->of("released").size() == 3u);
    f.alpha.last_store()->fail_release(false);
}

BOOST_AUTO_TEST_CASE(release_failure_is_logged_both_ways) {
    fixture f;
    auto& factory = f.factory();
    int reported = 0;
    lock_request request;
    request.on_error = [&](const error&) { ++reported; };
    auto lock = factory.create_lock("x", request);
    lock.lock();
    f.alpha.last_store()->fail_release(true);
    lock.unlock();  // noexcept: the error handler and the log both hear of it
    BOOST_TEST(reported == 1);
    BOOST_CHECK_THROW(lock.release(), error);
    auto records = f.sink->of("release_failed");
    BOOST_REQUIRE(records.size() == 2u);
    BOOST_TEST(records[1].level == log_level::error);
    BOOST_TEST(records[1].name == "x");
    BOOST_TEST(!records[1].error.empty());
    f.alpha.last_store()->fail_release(false);
    lock.release();
    BOOST_TEST(f.sink->of("release_failed").size() == 2u);
}

BOOST_AUTO_TEST_CASE(refresh_failure_is_logged) {
    fixture f;
    auto& factory = f.factory();
    auto lock = factory.create_lock("x");
    lock.lock();
    lock.refresh();
    BOOST_TEST(f.sink->of("refresh_failed").empty());
    f.alpha.last_store()->fail_refresh(true);
    BOOST_CHECK_THROW(lock.refresh(), acquire_error);
    auto records = f.sink->of("refresh_failed");
    BOOST_REQUIRE(records.size() == 1u);
    BOOST_TEST(records[0].level == log_level::error);
    BOOST_TEST(records[0].name == "x");
    BOOST_TEST(contains(records[0].error, "no longer held"), records[0].error);
}

// The wait is ordered by the sink itself: when it hears slow_wait, it frees the holder.
void check_slow_wait(fixture& f, lock_factory& factory, bool timed) {
    auto holder = factory.create_lock("x");
    auto waiter = factory.create_lock("x");
    holder.lock();
    f.sink->on("slow_wait", [&] { holder.unlock(); });
    if (timed)
        BOOST_TEST(waiter.try_lock_for(60s));
    else
        waiter.lock();
    auto slow = f.sink->of("slow_wait");
    BOOST_REQUIRE(slow.size() == 1u);
    BOOST_TEST(slow[0].level == log_level::info);
    BOOST_TEST(slow[0].name == "x");
    BOOST_TEST(slow[0].strategy == waiter.strategy());
    BOOST_REQUIRE(slow[0].duration.has_value());
    BOOST_TEST(*slow[0].duration >= std::chrono::nanoseconds(1ms));
    auto waited = f.sink->of("waited");
    BOOST_REQUIRE(waited.size() == 1u);
    BOOST_TEST(contains(waited[0].message, "acquired"), waited[0].message);
    BOOST_REQUIRE(waited[0].duration.has_value());
    BOOST_TEST(*waited[0].duration >= *slow[0].duration);
}

BOOST_AUTO_TEST_CASE(slow_waits_are_logged_while_they_last_polling) {
    fixture f;
    auto& factory = f.factory();
    factory.set_logger(f.sink, 1ms);
    check_slow_wait(f, factory, true);
}

BOOST_AUTO_TEST_CASE(slow_waits_are_logged_while_they_last_native) {
    fixture f;
    test_strategy native("native", 90, ex | capability::native_wait | capability::noblock);
    f.registry.add(native.descriptor());
    auto& factory = f.factory();
    factory.set_logger(f.sink, 1ms);
    check_slow_wait(f, factory, false);
    BOOST_TEST(factory.create_lock("x").strategy() == "native");
}

BOOST_AUTO_TEST_CASE(a_wait_that_gives_up_is_logged_too_and_quick_waits_are_not) {
    fixture f;
    auto& factory = f.factory();
    factory.set_logger(f.sink, 1ms);
    auto holder = factory.create_lock("x");
    auto waiter = factory.create_lock("x");
    holder.lock();
    BOOST_TEST(!waiter.try_lock_for(20ms));
    BOOST_TEST(f.sink->of("slow_wait").size() == 1u);
    auto waited = f.sink->of("waited");
    BOOST_REQUIRE(waited.size() == 1u);
    BOOST_TEST(contains(waited[0].message, "gave up"), waited[0].message);
    // A threshold of 0 logs no wait; neither does a wait that ends before the threshold.
    factory.set_logger(f.sink, 0ms);
    auto quiet = factory.create_lock("x");
    BOOST_TEST(!quiet.try_lock_for(20ms));
    factory.set_logger(f.sink, 3600s);
    auto patient = factory.create_lock("x");
    BOOST_TEST(!patient.try_lock_for(5ms));
    holder.unlock();
    BOOST_TEST(patient.try_lock_for(1s));
    BOOST_TEST(f.sink->of("slow_wait").size() == 1u);
}

BOOST_AUTO_TEST_CASE(renewals_and_a_lost_lock_are_logged) {
    fixture f;
    auto store = std::make_shared<recording_store>(polled, "alpha");
    lock_options options;
    options.ttl = 300ms;
    options.auto_refresh = true;
    options.logger = f.sink;
    options.on_lost = [](const error&) {};
    named_lock lock(store, std::make_shared<key>("x"), options);
    lock.lock();
    BOOST_REQUIRE(f.sink->wait_for("renewed"));
    auto renewed = f.sink->of("renewed").front();
    BOOST_TEST(renewed.level == log_level::debug);
    BOOST_TEST(renewed.name == "x");
    BOOST_TEST(renewed.strategy == "alpha");
    BOOST_TEST(renewed.duration.has_value());
    store->fail_refresh(true);
    BOOST_REQUIRE(f.sink->wait_for("lock_lost"));
    auto lost = f.sink->of("lock_lost").front();
    BOOST_TEST(lost.level == log_level::error);
    BOOST_TEST(lost.name == "x");
    BOOST_TEST(contains(lost.error, "lost"), lost.error);
}

// A store whose refresh throws (a backend hiccup) while told to.
class flaky_store : public recording_store {
  public:
    using recording_store::recording_store;
    std::atomic<bool> throw_on_refresh{false};

  protected:
    bool do_refresh(key& k, std::chrono::milliseconds ttl) override {
        if (throw_on_refresh) throw backend_error("alpha", "test", "injected refresh failure");
        return recording_store::do_refresh(k, ttl);
    }
};

BOOST_AUTO_TEST_CASE(a_renewal_that_fails_is_retried_and_logged) {
    fixture f;
    auto store = std::make_shared<flaky_store>(polled, "alpha");
    lock_options options;
    options.ttl = 3s;  // the retry comes at a tenth of it, well before the grant runs out
    options.auto_refresh = true;
    options.logger = f.sink;
    options.on_lost = [](const error&) {};
    named_lock lock(store, std::make_shared<key>("x"), options);
    store->throw_on_refresh = true;
    // The next renewal succeeds: the sink heals the store when it hears of the failure.
    f.sink->on("renewal_failed", [&] { store->throw_on_refresh = false; });
    lock.lock();
    BOOST_REQUIRE(f.sink->wait_for("renewal_failed"));
    auto failed = f.sink->of("renewal_failed").front();
    BOOST_TEST(failed.level == log_level::warning);
    BOOST_TEST(failed.name == "x");
    BOOST_TEST(contains(failed.error, "injected refresh failure"), failed.error);
    BOOST_REQUIRE(f.sink->wait_for("renewed"));
    BOOST_TEST(f.sink->of("lock_lost").empty());
    BOOST_TEST(lock.is_acquired());
}

BOOST_AUTO_TEST_CASE(null_strategy_is_a_warning_on_every_lock) {
    strategy_registry registry;
    register_builtin_strategies(registry);
    if (!registry.contains("null")) return;
    auto sink = std::make_shared<recording_sink>();
    lock_factory factory(config::parse(R"({"strategies": {"null": {"enabled": true}}})"), registry);
    factory.set_logger(sink);
    auto lock = factory.create_lock("orders");
    auto records = sink->of("locking_off");
    BOOST_REQUIRE(records.size() == 1u);
    BOOST_TEST(records[0].level == log_level::warning);
    BOOST_TEST(records[0].name == "orders");
    BOOST_TEST(records[0].strategy == "null");
    BOOST_TEST(contains(records[0].message, "locking is off"), records[0].message);
}

BOOST_AUTO_TEST_CASE(a_throwing_sink_breaks_nothing) {
    fixture f;
    auto sink = std::make_shared<throwing_sink>();
    lock_factory factory(config::parse("{}"), f.registry);
    factory.set_logger(sink);
    lock_request request;
    request.on_error = [](const error&) {};
    auto lock = factory.create_lock("x", request);
    lock.lock();
    f.alpha.last_store()->fail_release(true);
    lock.unlock();                             // noexcept: the sink's exception must not escape
    BOOST_TEST(sink->calls == 2);              // the grant's debug record, then the failed release
    BOOST_CHECK_THROW(lock.release(), error);  // the lock's error, not the sink's
}

// No record quotes a password: a redis URL with one, a server that is down, and a fallback.
BOOST_AUTO_TEST_CASE(no_secret_in_any_record) {
    strategy_registry registry;
    register_builtin_strategies(registry);
    if (!registry.contains("redis")) return;  // not built: no redis URL to leak
    if (auto info = registry.info("redis"); !info.support.supported) {
        locksmith::test::skip_case("the redis module cannot start: " + info.support.reason);
        return;
    }
    test_strategy backup("backup", 10, ex | capability::distributed);
    registry.add(backup.descriptor());
    const std::string secret = "Hunter2Secret";
    auto sink = std::make_shared<recording_sink>();
    lock_factory factory(
        config::parse(R"({"defaults": {"fallback": true}, "strategies": {"redis": {"options":
                          {"url": "redis://alice:)" +
                      secret + R"(@127.0.0.1:1/0", "connect_timeout_s": 1}}}})"),
        registry);
    factory.set_logger(sink);
    // Whether the store connects when it starts (then: a fallback) or at the first acquire
    // (then: an acquire failure), some record quotes the redis error.
    auto lock = factory.create_lock("x", ex | capability::distributed);
    if (lock.strategy() == "redis") BOOST_CHECK_THROW(lock.try_lock(), error);
    BOOST_REQUIRE_MESSAGE(!sink->records().empty(),
                          "strategy " << lock.strategy() << "; "
                                      << factory.explain(ex | capability::distributed).to_string());
    std::string all;
    for (const auto& r : sink->records()) all += r.message + "\n" + r.error + "\n";
    BOOST_TEST(!contains(all, "Hunter2"), all);
    BOOST_TEST(contains(all, "127.0.0.1"), all);  // the records do quote the endpoint
}
