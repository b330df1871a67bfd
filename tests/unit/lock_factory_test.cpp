// SPDX-License-Identifier: MIT
// lock_factory: owners, rules, fallback, bad names and TTLs (Symfony's LockFactoryTest and the
// "Bad input" list of issue 3).
#define BOOST_TEST_MODULE lock_factory
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/registry.hpp>

#include "support/child_process.hpp"
#include "support/printers.hpp"
#include "support/skip_report.hpp"
#include "support/test_helpers.hpp"
#include "support/test_strategy.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::run_unprivileged;
using locksmith::test::skip_case;
using locksmith::test::test_strategy;
using kind = locksmith::test::recording_store::call::kind;
namespace fs = std::filesystem;

namespace {

const capability ex = capability::exclusive;
const capability local_caps =
    ex | capability::noblock | capability::serializable | capability::expiring | capability::shared;

// A registry with one local test strategy ("alpha") and whatever a test adds.
struct fixture {
    strategy_registry registry;
    test_strategy alpha{"alpha", 50, local_caps};
    fixture() { registry.add(alpha.descriptor()); }
    lock_factory factory(const std::string& json = "{}") {
        return lock_factory(config::parse(json), registry);
    }
};

// The sentences of the fallback records a factory logs.
struct fallback_sink : log_sink {
    std::vector<std::string> sentences;
    void log(const log_record& record) override {
        if (record.event == "fallback") sentences.push_back(record.message);
    }
};

// A fresh directory for the file strategy, inside a parent that must stay empty apart from it.
struct lock_dir_fixture {
    fs::path parent;
    fs::path dir;
    lock_dir_fixture() {
        parent =
            fs::temp_directory_path() / ("locksmith-factory-test-" + std::to_string(::getpid()));
        fs::remove_all(parent);
        dir = parent / "locks";
        fs::create_directories(dir);
        fs::permissions(parent, fs::perms::owner_all, fs::perm_options::replace);
        fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
    }
    ~lock_dir_fixture() {
        std::error_code ec;
        fs::remove_all(parent, ec);
    }
    std::string config_json() const {
        nlohmann::json j = {
            {"strategies", {{"file", {{"options", {{"lock_dir", dir.string()}}}}}}}};
        return j.dump();
    }
};

}  // namespace

// --- Symfony LockFactoryTest ---

BOOST_AUTO_TEST_CASE(create_lock_twice_gives_competing_owners) {
    fixture f;
    auto factory = f.factory();
    auto a = factory.create_lock("foo");
    auto b = factory.create_lock("foo");
    BOOST_TEST(a.owner()->token() != b.owner()->token());
    BOOST_TEST(a.owner() != b.owner());
    BOOST_TEST(a.try_lock());
    BOOST_TEST(!b.try_lock());
    auto store = f.alpha.last_store();
    BOOST_REQUIRE(store);
    auto calls = store->calls();
    std::vector<std::string> tokens;
    for (const auto& c : calls)
        if (c.what == kind::try_acquire) tokens.push_back(c.token);
    BOOST_REQUIRE(tokens.size() == 2u);
    BOOST_TEST(tokens[0] != tokens[1]);
}

BOOST_AUTO_TEST_CASE(locks_of_one_strategy_share_one_store) {
    fixture f;
    auto factory = f.factory();
    auto a = factory.create_lock("a");
    auto b = factory.create_lock("b");
    BOOST_TEST(f.alpha.constructions() == 1);
    BOOST_TEST(factory.store_for("alpha") == f.alpha.last_store());
    BOOST_TEST(f.alpha.constructions() == 1);
}

BOOST_AUTO_TEST_CASE(create_lock_from_key_shares_the_owner) {
    fixture f;
    auto factory = f.factory();
    auto a = factory.create_lock("foo");
    BOOST_REQUIRE(a.try_lock());
    auto serialized = a.serialize_key();
    {
        auto b = factory.create_lock_from_key(serialized);
        BOOST_TEST(b.owner()->token() == a.owner()->token());
        BOOST_TEST(b.name() == "foo");
        BOOST_TEST(b.strategy() == "alpha");
        BOOST_TEST(b.is_acquired());  // the same owner holds it
        BOOST_TEST(b.try_lock());     // re-entry of the same owner
        auto calls = f.alpha.last_store()->calls();
        std::vector<std::string> tokens;
        for (const auto& c : calls)
            if (c.what == kind::try_acquire) tokens.push_back(c.token);
        BOOST_REQUIRE(tokens.size() == 2u);
        BOOST_TEST(tokens[0] == tokens[1]);
    }
    // Auto-release defaults to off for a continued key: the lock survives b.
    BOOST_TEST(a.is_acquired());
    BOOST_TEST(!factory.create_lock("foo").try_lock());
}

BOOST_AUTO_TEST_CASE(create_lock_from_key_rejects_bad_keys) {
    fixture f;
    auto factory = f.factory();
    auto good = factory.create_lock("foo").serialize_key();
    bool rejected = false;
    try {
        factory.create_lock_from_key(nlohmann::json{{"nonsense", true}});
    } catch (const invalid_argument_error&) {
        rejected = true;
    } catch (const config_error&) {
        rejected = true;
    }
    BOOST_TEST(rejected);
    // A key that names a strategy this registry does not have.
    auto foreign = good;
    if (foreign.contains("strategy")) {
        foreign["strategy"] = "nosuch";
        BOOST_CHECK_THROW(factory.create_lock_from_key(foreign), error);
    } else {
        BOOST_ERROR("serialize_key() does not name the strategy: " << good.dump());
    }
}

// --- selection through the factory ---

BOOST_AUTO_TEST_CASE(highest_priority_candidate_is_used) {
    fixture f;
    test_strategy beta("beta", 60, ex | capability::noblock);
    f.registry.add(beta.descriptor());
    auto factory = f.factory();
    BOOST_TEST(factory.create_lock("x").strategy() == "beta");
    BOOST_TEST(factory.create_lock("x", ex | capability::serializable).strategy() == "alpha");
    BOOST_TEST(factory.strategy_for("x") == "beta");
    BOOST_TEST(factory.explain(ex).chosen()->strategy == "beta");
    BOOST_CHECK_THROW(factory.create_lock("x", ex | capability::consensus), no_strategy_error);
}

BOOST_AUTO_TEST_CASE(config_priorities_apply) {
    fixture f;
    test_strategy beta("beta", 60, ex);
    f.registry.add(beta.descriptor());
    auto factory = f.factory(R"({"strategies": {"alpha": {"priority": 90}}})");
    BOOST_TEST(factory.create_lock("x").strategy() == "alpha");
}

BOOST_AUTO_TEST_CASE(unknown_strategy_in_config_is_rejected) {
    fixture f;
    BOOST_CHECK_THROW(f.factory(R"({"strategies": {"nosuch": {"priority": 90}}})"), config_error);
    BOOST_CHECK_THROW(f.factory(R"({"locks": {"a": {"strategy": "nosuch"}}})"), config_error);
}

// Issue 11 point 1: A held via the winner; B, whose winner could not start, fell back to the
// next candidate and held the same name on another mechanism. Falling back is now opt-in.
BOOST_AUTO_TEST_CASE(a_winner_that_cannot_start_is_an_error_not_a_fallback) {
    fixture f;
    test_strategy down("down", 90, ex);
    down.fail_construction("connection refused");
    f.registry.add(down.descriptor());
    auto factory = f.factory();
    auto fallbacks = std::make_shared<fallback_sink>();
    factory.set_logger(fallbacks);
    try {
        auto lock = factory.create_lock("x");
        BOOST_ERROR("fell back to " << lock.strategy() << " without the config allowing it");
    } catch (const no_strategy_error& e) {
        // Which strategy failed, why, and what to do.
        BOOST_TEST(contains(e.what(), "'down'"), e.what());
        BOOST_TEST(contains(e.what(), "connection refused"), e.what());
        BOOST_TEST(contains(e.what(), "--strategy"), e.what());
        BOOST_TEST(contains(e.what(), "\"fallback\": true"), e.what());
    }
    BOOST_TEST(f.alpha.constructions() == 0);
    BOOST_TEST(fallbacks->sentences.empty());
}

BOOST_AUTO_TEST_CASE(fallback_is_allowed_per_lock_rule) {
    fixture f;
    test_strategy down("down", 90, ex);
    down.fail_construction("connection refused");
    f.registry.add(down.descriptor());
    auto factory = f.factory(R"({"locks": {"cache.*": {"fallback": true}}})");
    BOOST_TEST(factory.create_lock("cache.1").strategy() == "alpha");
    BOOST_CHECK_THROW((void)factory.create_lock("invoice.1"), no_strategy_error);
    // A rule can also turn off what the defaults allow.
    auto strict = f.factory(
        R"({"defaults": {"fallback": true}, "locks": {"invoice.*": {"fallback": false}}})");
    BOOST_TEST(strict.create_lock("cache.1").strategy() == "alpha");
    BOOST_CHECK_THROW((void)strict.create_lock("invoice.1"), no_strategy_error);
    // And a program can decide for its own request.
    lock_request request;
    request.fallback = true;
    BOOST_TEST(factory.create_lock("invoice.2", request).strategy() == "alpha");
}

BOOST_AUTO_TEST_CASE(explain_and_start_reports_a_winner_that_cannot_start) {
    fixture f;
    test_strategy down("down", 90, ex);
    down.fail_construction("connection refused");
    f.registry.add(down.descriptor());
    auto factory = f.factory();
    BOOST_TEST(factory.explain(ex).start_error.empty());  // explain alone starts nothing
    BOOST_TEST(down.failed_constructions() == 0);
    auto report = factory.explain_and_start(ex);
    BOOST_TEST(report.chosen()->strategy == "down");
    BOOST_TEST(contains(report.start_error, "connection refused"), report.start_error);
    BOOST_TEST(contains(report.to_string(), "cannot start"), report.to_string());
    down.fail_construction("");
    BOOST_TEST(factory.explain_and_start(ex).start_error.empty());
}

// Issue 11 point 6: a pin does not get past `enabled`.
BOOST_AUTO_TEST_CASE(a_pin_to_a_disabled_strategy_is_refused) {
    fixture f;
    auto factory = f.factory(R"({"strategies": {"alpha": {"enabled": false}},
                                 "locks": {"pinned": {"strategy": "alpha"}}})");
    try {
        (void)factory.create_lock("pinned");
        BOOST_ERROR("a lock rule's pin used a disabled strategy");
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "disabled"), e.what());
    }
    lock_request request;
    request.strategy = "alpha";
    BOOST_CHECK_THROW((void)factory.create_lock("other", request), no_strategy_error);
    BOOST_TEST(f.alpha.constructions() == 0);
}

BOOST_AUTO_TEST_CASE(fallback_to_the_next_candidate_is_reported) {
    fixture f;
    test_strategy down("down", 90, ex);
    down.fail_construction("connection refused");
    f.registry.add(down.descriptor());
    auto factory = f.factory(R"({"defaults": {"fallback": true}})");
    auto sink = std::make_shared<fallback_sink>();
    factory.set_logger(sink);
    const auto& reports = sink->sentences;
    auto lock = factory.create_lock("x");
    BOOST_TEST(lock.strategy() == "alpha");
    BOOST_TEST(down.failed_constructions() >= 1);
    BOOST_REQUIRE(reports.size() == 1u);
    BOOST_TEST(contains(reports[0], "down"), reports[0]);
    BOOST_TEST(contains(reports[0], "alpha"), reports[0]);
    BOOST_TEST(contains(reports[0], "connection refused"), reports[0]);

    // Once the server is back, the best strategy is used again.
    down.fail_construction("");
    BOOST_TEST(factory.create_lock("y").strategy() == "down");
}

BOOST_AUTO_TEST_CASE(distributed_never_falls_back_to_local) {
    fixture f;  // alpha is local
    test_strategy remote("remote", 90, ex | capability::distributed);
    remote.fail_construction("connection refused");
    f.registry.add(remote.descriptor());
    auto factory = f.factory(R"({"defaults": {"fallback": true}})");
    auto fallbacks = std::make_shared<fallback_sink>();
    factory.set_logger(fallbacks);
    // Even a request that does not name `distributed`: the winner's scope is distributed.
    try {
        auto lock = factory.create_lock("x");
        BOOST_ERROR("fell back from a distributed strategy to " << lock.strategy());
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "remote"), e.what());
        BOOST_TEST(contains(e.what(), "connection refused"), e.what());
    }
    BOOST_TEST(f.alpha.constructions() == 0);
    BOOST_TEST(fallbacks->sentences.empty());
}

BOOST_AUTO_TEST_CASE(distributed_falls_back_to_distributed) {
    fixture f;
    test_strategy remote("remote", 90, ex | capability::distributed);
    remote.fail_construction("connection refused");
    test_strategy backup("backup", 80, ex | capability::distributed);
    f.registry.add(remote.descriptor());
    f.registry.add(backup.descriptor());
    auto factory = f.factory(R"({"defaults": {"fallback": true}})");
    auto sink = std::make_shared<fallback_sink>();
    factory.set_logger(sink);
    const auto& reports = sink->sentences;
    auto lock = factory.create_lock("x", ex | capability::distributed);
    BOOST_TEST(lock.strategy() == "backup");
    BOOST_TEST(reports.size() == 1u);
    BOOST_TEST(f.alpha.constructions() == 0);
}

BOOST_AUTO_TEST_CASE(every_candidate_down_is_a_no_strategy_error) {
    fixture f;
    f.alpha.fail_construction("disk on fire");
    auto factory = f.factory();
    try {
        (void)factory.create_lock("x");
        BOOST_ERROR("a lock was created although every candidate failed");
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "disk on fire"), e.what());
    }
}

// --- lock rules ---

BOOST_AUTO_TEST_CASE(lock_rules_pin_require_strategy_and_ttl) {
    fixture f;
    test_strategy beta("beta", 60, ex | capability::noblock | capability::expiring);
    test_strategy fenced("fenced", 10, ex | capability::fencing);
    f.registry.add(beta.descriptor());
    f.registry.add(fenced.descriptor());
    auto factory = f.factory(R"({
        "defaults": {"ttl_s": 300},
        "locks": {
            "pinned.*": {"strategy": "alpha"},
            "fenced.*": {"require": "exclusive|fencing"},
            "short.*":  {"ttl_s": 2}
        }})");
    BOOST_TEST(factory.strategy_for("other") == "beta");
    BOOST_TEST(factory.strategy_for("pinned.1") == "alpha");
    BOOST_TEST(factory.strategy_for("fenced.1") == "fenced");
    BOOST_TEST(factory.create_lock("pinned.1").strategy() == "alpha");
    BOOST_TEST(factory.create_lock("fenced.1").strategy() == "fenced");

    auto lock = factory.create_lock("short.1");
    BOOST_TEST(lock.strategy() == "beta");
    BOOST_REQUIRE(lock.acquire());
    auto call = beta.last_store()->last(kind::try_acquire);
    BOOST_REQUIRE(call.has_value());
    BOOST_TEST(call->ttl.count() == 2000);

    // The config's default TTL for names without a rule.
    auto plain = factory.create_lock("other");
    BOOST_REQUIRE(plain.acquire());
    BOOST_TEST(beta.last_store()->last(kind::try_acquire)->ttl.count() == 300'000);

    // The request wins over the rule.
    lock_request request;
    request.ttl = 5s;
    request.strategy = "alpha";
    auto explicit_lock = factory.create_lock("short.2", request);
    BOOST_TEST(explicit_lock.strategy() == "alpha");
    BOOST_REQUIRE(explicit_lock.acquire());
    BOOST_TEST(f.alpha.last_store()->last(kind::try_acquire)->ttl.count() == 5000);
    BOOST_TEST(factory.strategy_for("short.2", request) == "alpha");
}

BOOST_AUTO_TEST_CASE(rule_require_that_nothing_meets_fails) {
    fixture f;
    auto factory = f.factory(R"({"locks": {"ha.*": {"require": "exclusive|consensus"}}})");
    BOOST_CHECK_THROW(factory.create_lock("ha.1"), no_strategy_error);
    BOOST_TEST(factory.create_lock("other").strategy() == "alpha");
}

BOOST_AUTO_TEST_CASE(pinned_strategy_must_have_the_required_bits) {
    fixture f;
    test_strategy plain("plain", 10, ex);
    f.registry.add(plain.descriptor());
    auto factory = f.factory();
    lock_request r;
    r.strategy = "plain";
    r.require = ex | capability::shared;
    BOOST_CHECK_THROW(factory.create_lock("x", r), no_strategy_error);
    r.strategy = "nosuch";
    r.require = capability::none;
    BOOST_CHECK_THROW(factory.create_lock("x", r), error);
}

BOOST_AUTO_TEST_CASE(config_auto_release_default) {
    fixture f;
    auto factory = f.factory(R"({"defaults": {"auto_release": false}})");
    {
        auto lock = factory.create_lock("kept");
        BOOST_REQUIRE(lock.try_lock());
    }
    BOOST_TEST(f.alpha.last_store()->releases() == 0);
    lock_request r;
    r.auto_release = true;
    {
        auto lock = factory.create_lock("released", r);
        BOOST_REQUIRE(lock.try_lock());
    }
    BOOST_TEST(f.alpha.last_store()->releases() == 1);
}

BOOST_AUTO_TEST_CASE(typo3_entry_point) {
    fixture f;
    test_strategy rw("rw", 40, ex | capability::shared | capability::noblock);
    f.registry.add(rw.descriptor());
    auto factory = f.factory();
    auto lock = factory.create_lock("x", ex | capability::shared);
    BOOST_TEST(lock.strategy() == "alpha");  // alpha (50) has shared too
    BOOST_TEST(lock.acquire(capability::shared | capability::noblock));
}

// --- bad input ---

BOOST_AUTO_TEST_CASE(bad_ttls_are_invalid_arguments) {
    fixture f;
    auto factory = f.factory();
    for (std::chrono::milliseconds ttl :
         {0ms, -1ms, std::chrono::milliseconds(-1h), max_ttl + 1ms}) {
        BOOST_TEST_CONTEXT("ttl " << ttl.count() << " ms") {
            lock_request r;
            r.ttl = ttl;
            BOOST_CHECK_THROW(factory.create_lock("x", r), invalid_argument_error);
        }
    }
}

BOOST_AUTO_TEST_CASE(bad_names_are_invalid_arguments) {
    fixture f;
    auto factory = f.factory();
    BOOST_CHECK_THROW(factory.create_lock(""), invalid_argument_error);
    BOOST_CHECK_THROW(factory.create_lock(std::string(max_name_length + 1, 'n')),
                      invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(odd_names_work_with_file_and_stay_in_lock_dir) {
    lock_dir_fixture d;
    strategy_registry registry;
    register_builtin_strategies(registry);
    lock_factory factory(config::parse(d.config_json()), registry);
    lock_request r;
    r.strategy = "file";

    const std::vector<std::string> names = {
        "/",
        "..",
        "../../../../tmp/escaped",
        "a/b/c",
        "/etc/passwd",
        std::string("nul\0inside", 10),
        std::string("\xff\xfe\x80 not utf-8", 13),
        std::string(max_name_length, 'x'),  // 1 MiB
        std::string("a\nb\tc\\d*e?f"),
        ".",
        "~",
        "-rf",
    };
    std::vector<named_lock> held;
    for (const auto& name : names) {
        BOOST_TEST_CONTEXT("name of " << name.size() << " bytes starting " << name.substr(0, 20)) {
            auto a = factory.create_lock(name, r);
            auto b = factory.create_lock(name, r);
            BOOST_TEST(a.try_lock());
            BOOST_TEST(!b.try_lock());  // and the lock works
            held.push_back(std::move(a));
        }
    }
    // Different names are different locks, even those a naive sanitizer would merge.
    auto slash = factory.create_lock("a/b", r);
    auto underscore = factory.create_lock("a_b", r);
    auto nul = factory.create_lock(std::string("a\0b", 3), r);
    auto a_only = factory.create_lock("a", r);
    BOOST_TEST(slash.try_lock());
    BOOST_TEST(underscore.try_lock());
    BOOST_TEST(nul.try_lock());
    BOOST_TEST(a_only.try_lock());

    // Nothing outside lock_dir: the parent holds only lock_dir, and lock_dir only plain files.
    for (const auto& entry : fs::directory_iterator(d.parent))
        BOOST_TEST(entry.path() == d.dir, "unexpected " << entry.path());
    for (const auto& entry : fs::recursive_directory_iterator(d.dir)) {
        BOOST_TEST(entry.is_regular_file(), "not a plain file: " << entry.path());
        BOOST_TEST(entry.path().parent_path() == d.dir, "nested: " << entry.path());
        BOOST_TEST(entry.path().filename().string().size() <= 255u);
    }
    BOOST_TEST(!fs::exists("/tmp/escaped"));
}

BOOST_AUTO_TEST_CASE(bad_lock_dirs_give_clear_errors) {
    lock_dir_fixture d;
    auto make = [&](const fs::path& dir) {
        strategy_registry registry;
        register_builtin_strategies(registry);
        nlohmann::json j = {
            {"strategies", {{"file", {{"options", {{"lock_dir", dir.string()}}}}}}}};
        lock_factory factory(config::parse(j.dump()), registry);
        lock_request r;
        r.strategy = "file";
        auto lock = factory.create_lock("x", r);
        (void)lock.try_lock();
    };
    // A symlink to a good directory.
    auto link = d.parent / "link";
    fs::create_directory_symlink(d.dir, link);
    BOOST_CHECK_THROW(make(link), error);
    // World-writable without the sticky bit.
    auto open_dir = d.parent / "open";
    fs::create_directory(open_dir);
    fs::permissions(open_dir, fs::perms::all, fs::perm_options::replace);
    BOOST_CHECK_THROW(make(open_dir), error);
    // A regular file.
    auto file = d.parent / "file";
    std::ofstream(file.string()) << "x";
    BOOST_CHECK_THROW(make(file), error);
    // Not writable by this user. Root may write anywhere, so as root the check runs in a child
    // that became another user (nobody), for whom the directory is read-only.
    auto ro = d.parent / "readonly";
    fs::create_directory(ro);
    fs::permissions(ro,
                    fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                        fs::perms::others_exec,
                    fs::perm_options::replace);
    fs::permissions(d.parent, fs::perms::others_exec, fs::perm_options::add);
    std::string why;
    auto refused = run_unprivileged(
        [&] {
            try {
                make(ro);
            } catch (const error& e) {
                std::string what = e.what();
                if (what.find(ro.string()) == std::string::npos) return 2;  // names the dir
                if (what.find("writable") == std::string::npos) return 3;   // and the cause
                return 0;
            }
            return 1;  // accepted
        },
        &why);
    if (!refused) return skip_case(why);
    BOOST_TEST(*refused == 0, "1: accepted, 2: error without the path, 3: without the cause");
    fs::permissions(ro, fs::perms::owner_all, fs::perm_options::replace);
}

// The factory's resolution is public, so that the command explains what the factory decided
// instead of deciding again (a rule's pin yields to a request that names its own capabilities).
BOOST_AUTO_TEST_CASE(resolve_says_what_decided_and_from_where) {
    fixture f;
    auto factory =
        f.factory(R"({"locks": {"pinned.*": {"strategy": "alpha", "require": "shared"}}})");
    auto r = factory.resolve("pinned.1");
    BOOST_TEST(r.strategy == "alpha");
    BOOST_TEST(!r.strategy_from_request);
    BOOST_REQUIRE(r.rule != nullptr);
    BOOST_TEST(r.rule->pattern == "pinned.*");
    BOOST_TEST(r.require == capability::shared);
    BOOST_TEST(!r.require_from_request);

    lock_request request;
    request.require = ex;
    r = factory.resolve("pinned.1", request);
    BOOST_TEST(r.strategy.empty());  // the request's capabilities, so selection decides
    BOOST_TEST(r.require_from_request);

    r = factory.resolve("other");
    BOOST_TEST(r.rule == nullptr);
    BOOST_TEST(r.require == ex);
    BOOST_TEST(r.strategy.empty());
}

// --- counting semaphores (issue 27) ---

BOOST_AUTO_TEST_CASE(a_semaphore_goes_only_to_a_strategy_with_counting) {
    fixture f;  // alpha (50) has no counting
    test_strategy counter("counter", 10, ex | capability::noblock | capability::counting);
    f.registry.add(counter.descriptor());
    auto factory = f.factory();
    auto a = factory.create_semaphore("jobs", 2);
    auto b = factory.create_semaphore("jobs", 2);
    auto c = factory.create_semaphore("jobs", 2);
    BOOST_TEST(a.strategy() == "counter");
    BOOST_TEST(a.limit() == 2u);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(!c.try_acquire());
    BOOST_TEST(factory.create_lock("jobs").strategy() == "alpha");  // locks choose as before
}

BOOST_AUTO_TEST_CASE(no_strategy_with_counting_is_a_clear_error) {
    fixture f;
    auto factory = f.factory();
    try {
        (void)factory.create_semaphore("jobs", 2);
        BOOST_FAIL("no error");
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "counting"), e.what());
    }
    lock_request pinned;
    pinned.strategy = "alpha";
    try {
        (void)factory.create_semaphore("jobs", 2, pinned);
        BOOST_FAIL("no error");
    } catch (const no_strategy_error& e) {
        BOOST_TEST(contains(e.what(), "lacks counting"), e.what());
        BOOST_TEST(contains(e.what(), "semaphore 'jobs'"), e.what());
    }
}

BOOST_AUTO_TEST_CASE(a_lock_rule_gives_the_limit_when_the_caller_does_not) {
    fixture f;
    test_strategy counter("counter", 10, ex | capability::noblock | capability::counting);
    f.registry.add(counter.descriptor());
    auto factory = f.factory(R"({"locks": {"backup.*": {"limit": 3}}})");
    BOOST_TEST(factory.create_semaphore("backup.db", 0).limit() == 3u);
    BOOST_TEST(factory.create_semaphore("backup.db", 5).limit() == 5u);  // the caller's wins
    try {
        (void)factory.create_semaphore("other", 0);
        BOOST_FAIL("no error");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(contains(e.what(), "no limit"), e.what());
    }
    BOOST_CHECK_THROW((void)factory.create_semaphore("x", max_semaphore_limit + 1),
                      invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(a_permits_key_is_not_continued_as_a_lock) {
    fixture f;
    auto factory = f.factory();
    key k("jobs");
    k.set_limit(2);
    auto json = k.to_json();
    BOOST_TEST(json["limit"] == 2);
    json["strategy"] = "alpha";
    BOOST_CHECK_THROW((void)factory.create_lock_from_key(json), invalid_argument_error);
}
