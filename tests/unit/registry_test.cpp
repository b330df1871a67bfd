// SPDX-License-Identifier: MIT
// The strategy registry and selection, with test strategy doubles (tests/support/test_strategy).
#define BOOST_TEST_MODULE registry
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/registry.hpp>

#include "support/printers.hpp"
#include "support/test_helpers.hpp"
#include "support/test_strategy.hpp"

using namespace locksmith;
using locksmith::test::contains;
using locksmith::test::test_strategy;

namespace {

const capability ex = capability::exclusive;

std::vector<std::string> candidate_names(const strategy_registry& r, capability required) {
    std::vector<std::string> names;
    for (const auto& info : r.candidates(required)) names.push_back(info.descriptor.name);
    return names;
}

const selection_report::entry* entry_for(const selection_report& report, const std::string& name) {
    for (const auto& e : report.entries)
        if (e.strategy == name) return &e;
    return nullptr;
}

}  // namespace

BOOST_AUTO_TEST_CASE(add_find_remove) {
    strategy_registry r;
    test_strategy a("alpha", 50, ex);
    r.add(a.descriptor());
    BOOST_TEST(r.contains("alpha"));
    BOOST_TEST(!r.contains("beta"));
    BOOST_REQUIRE(r.find("alpha").has_value());
    BOOST_TEST(r.find("alpha")->default_priority == 50);
    BOOST_TEST(!r.find("beta").has_value());
    BOOST_TEST(r.names() == std::vector<std::string>{"alpha"});
    BOOST_TEST(r.remove("alpha"));
    BOOST_TEST(!r.remove("alpha"));
    BOOST_TEST(!r.contains("alpha"));
}

BOOST_AUTO_TEST_CASE(add_rejects_bad_descriptors) {
    strategy_registry r;
    r.add(test_strategy("alpha", 50, ex).descriptor());
    BOOST_CHECK_THROW(r.add(test_strategy("alpha", 60, ex).descriptor()), invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("", 50, ex).descriptor()), invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("Bad-Name", 50, ex).descriptor()),
                      invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("has space", 50, ex).descriptor()),
                      invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("high", max_priority + 1, ex).descriptor()),
                      invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("low", min_priority - 1, ex).descriptor()),
                      invalid_argument_error);
    BOOST_CHECK_THROW(r.add(test_strategy("nothing", 50, capability::none).descriptor()),
                      invalid_argument_error);
    auto no_factory = test_strategy("nofactory", 50, ex).descriptor();
    no_factory.create = nullptr;
    BOOST_CHECK_THROW(r.add(no_factory), invalid_argument_error);
    BOOST_TEST(r.names() == std::vector<std::string>{"alpha"});
    // The edges of the range are valid.
    BOOST_CHECK_NO_THROW(r.add(test_strategy("edge_low", min_priority, ex).descriptor()));
    BOOST_CHECK_NO_THROW(r.add(test_strategy("edge_high", max_priority, ex).descriptor()));
}

BOOST_AUTO_TEST_CASE(highest_priority_wins) {
    strategy_registry r;
    r.add(test_strategy("a", 50, ex).descriptor());
    r.add(test_strategy("b", 70, ex).descriptor());
    r.add(test_strategy("c", 60, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_REQUIRE(report.chosen() != nullptr);
    BOOST_TEST(report.chosen()->strategy == "b");
    BOOST_TEST(report.chosen()->priority == 70);
    BOOST_TEST(report.requested == ex);
    BOOST_TEST((candidate_names(r, ex) == std::vector<std::string>{"b", "c", "a"}));
}

BOOST_AUTO_TEST_CASE(ties_go_by_name) {
    strategy_registry r;
    // Registered in reverse order, so a registry that keeps insertion order fails.
    r.add(test_strategy("zeta", 50, ex).descriptor());
    r.add(test_strategy("beta", 50, ex).descriptor());
    r.add(test_strategy("alpha", 50, ex).descriptor());
    BOOST_TEST((candidate_names(r, ex) == std::vector<std::string>{"alpha", "beta", "zeta"}));
    BOOST_TEST(r.explain(ex).chosen()->strategy == "alpha");
}

BOOST_AUTO_TEST_CASE(candidates_need_every_requested_bit) {
    strategy_registry r;
    r.add(test_strategy("rw", 40, ex | capability::shared | capability::noblock).descriptor());
    r.add(test_strategy("mutex", 90, ex | capability::noblock).descriptor());
    r.add(test_strategy("readers", 95, capability::shared).descriptor());

    auto want = ex | capability::shared;
    BOOST_TEST(candidate_names(r, want) == std::vector<std::string>{"rw"});
    auto report = r.explain(want);
    auto* mutex = entry_for(report, "mutex");
    BOOST_REQUIRE(mutex != nullptr);
    BOOST_TEST(!mutex->candidate);
    BOOST_TEST(contains(mutex->passed_over, "shared"), mutex->passed_over);
    auto* readers = entry_for(report, "readers");
    BOOST_REQUIRE(readers != nullptr);
    BOOST_TEST(!readers->candidate);
    BOOST_TEST(contains(readers->passed_over, "exclusive"), readers->passed_over);

    // A subset request: everybody with exclusive, best first.
    BOOST_TEST((candidate_names(r, ex) == std::vector<std::string>{"mutex", "rw"}));
}

BOOST_AUTO_TEST_CASE(candidates_come_first_in_the_report) {
    strategy_registry r;
    r.add(test_strategy("high_but_unfit", 99, capability::shared).descriptor());
    r.add(test_strategy("fit", 10, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_REQUIRE(report.entries.size() == 2u);
    BOOST_TEST(report.entries[0].strategy == "fit");
    BOOST_TEST(report.entries[0].candidate);
    BOOST_TEST(report.entries[0].passed_over.empty());
    BOOST_TEST(!report.entries[1].candidate);
    BOOST_TEST(!report.entries[1].passed_over.empty());
}

BOOST_AUTO_TEST_CASE(unsupported_strategies_are_passed_over_with_the_probe_reason) {
    strategy_registry r;
    test_strategy broken("broken", 90, ex);
    broken.unsupported("kernel lacks frobnication");
    r.add(broken.descriptor());
    r.add(test_strategy("plain", 10, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_TEST(report.chosen()->strategy == "plain");
    auto* e = entry_for(report, "broken");
    BOOST_REQUIRE(e != nullptr);
    BOOST_TEST(!e->candidate);
    BOOST_TEST(contains(e->passed_over, "kernel lacks frobnication"), e->passed_over);
    BOOST_TEST(broken.probes() > 0);

    // The answer is cached: the probe runs at most once per registry, however often
    // selection asks (registry.hpp).
    (void)r.explain(ex);
    (void)r.candidates(ex);
    (void)r.info("broken");
    BOOST_TEST(broken.probes() == 1);
}

BOOST_AUTO_TEST_CASE(the_best_is_chosen_without_probing_the_strategies_below_it) {
    strategy_registry r;
    test_strategy broken("broken", 90, ex), winner("winner", 60, ex), below("below", 50, ex);
    broken.unsupported("no such kernel feature");
    for (auto* t : {&broken, &winner, &below}) r.add(t->descriptor());
    BOOST_TEST(r.best(ex).descriptor.name == "winner");
    BOOST_TEST(r.best(ex).support.supported);
    BOOST_TEST(broken.probes() == 1);
    BOOST_TEST(below.probes() == 0);  // every `locksmith run` probed them all (semget, /dev/shm)
    BOOST_TEST(r.best(ex).descriptor.name == r.candidates(ex).front().descriptor.name);
    BOOST_CHECK_THROW(r.best(capability::none), invalid_argument_error);
    BOOST_CHECK_THROW(r.best(capability::shared), no_strategy_error);
}

BOOST_AUTO_TEST_CASE(disabled_strategies_are_never_selected) {
    strategy_registry r;
    r.add(test_strategy("off", 90, ex).disabled_by_default().descriptor());
    r.add(test_strategy("on", 10, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_TEST(report.chosen()->strategy == "on");
    auto* e = entry_for(report, "off");
    BOOST_REQUIRE(e != nullptr);
    BOOST_TEST(!e->candidate);
    BOOST_TEST(contains(e->passed_over, "disabled"), e->passed_over);
    BOOST_TEST(!r.info("off").enabled);

    // A config may enable it...
    strategy_settings enable;
    enable.enabled = true;
    r.set_override("off", enable);
    BOOST_TEST(r.explain(ex).chosen()->strategy == "off");
    BOOST_TEST(r.info("off").enabled);

    // ...and disable any other.
    strategy_settings disable;
    disable.enabled = false;
    r.set_override("off", disable);
    r.set_override("on", disable);
    BOOST_CHECK_THROW(r.candidates(ex), no_strategy_error);
}

BOOST_AUTO_TEST_CASE(remote_strategies_need_configuration) {
    strategy_registry r;
    r.add(test_strategy("remote", 90, ex | capability::distributed)
              .needs_configuration()
              .descriptor());
    r.add(test_strategy("local", 10, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_TEST(report.chosen()->strategy == "local");
    auto* e = entry_for(report, "remote");
    BOOST_REQUIRE(e != nullptr);
    BOOST_TEST(!e->candidate);
    BOOST_TEST(!e->passed_over.empty());
    BOOST_TEST(!r.info("remote").configured);

    strategy_settings endpoint;
    endpoint.options = {{"url", "test://127.0.0.1"}};
    r.set_override("remote", endpoint);
    BOOST_TEST(r.explain(ex).chosen()->strategy == "remote");
    BOOST_TEST(r.info("remote").configured);
    BOOST_TEST(r.info("remote").options == endpoint.options);
}

BOOST_AUTO_TEST_CASE(an_empty_request_is_rejected) {
    strategy_registry r;
    r.add(test_strategy("a", 50, ex).descriptor());
    BOOST_CHECK_THROW(r.explain(capability::none), invalid_argument_error);
    BOOST_CHECK_THROW(r.candidates(capability::none), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(no_strategy_error_lists_every_strategy_and_why) {
    strategy_registry r;
    test_strategy unfit("unfit", 90, ex);
    test_strategy broken("broken", 80, ex | capability::fencing);
    broken.unsupported("probe says no: missing libfrob");
    test_strategy off("off", 70, ex | capability::fencing);
    off.disabled_by_default();
    test_strategy remote("remote", 60, ex | capability::fencing | capability::distributed);
    remote.needs_configuration();
    for (auto* s : {&unfit, &broken, &off, &remote}) r.add(s->descriptor());

    auto want = ex | capability::fencing;
    try {
        r.candidates(want);
        BOOST_ERROR("candidates() found a strategy where none qualifies");
    } catch (const no_strategy_error& e) {
        std::string m = e.what();
        BOOST_TEST_MESSAGE("message: " << m);
        for (auto* name : {"unfit", "broken", "off", "remote"})
            BOOST_TEST(contains(m, name), "message does not name " << name << ": " << m);
        BOOST_TEST(contains(m, "fencing"), "message does not name the missing bit: " << m);
        BOOST_TEST(contains(m, "probe says no: missing libfrob"), m);
        BOOST_TEST(contains(m, "disabled"), m);
    }
    // The same reasons are in the report.
    auto report = r.explain(want);
    BOOST_TEST(report.chosen() == nullptr);
    BOOST_TEST(report.entries.size() == 4u);
    for (const auto& e : report.entries) {
        BOOST_TEST(!e.candidate);
        BOOST_TEST(!e.passed_over.empty(), e.strategy << " has no reason");
    }
}

BOOST_AUTO_TEST_CASE(an_empty_registry_says_so) {
    strategy_registry r;
    BOOST_CHECK_THROW(r.candidates(ex), no_strategy_error);
    BOOST_TEST(r.explain(ex).chosen() == nullptr);
}

BOOST_AUTO_TEST_CASE(priority_override_changes_the_winner) {
    strategy_registry r;
    r.add(test_strategy("a", 50, ex).descriptor());
    r.add(test_strategy("b", 70, ex).descriptor());
    strategy_settings o;
    o.priority = 99;
    o.origin = "config test.json";
    r.set_override("a", o);
    BOOST_TEST(r.explain(ex).chosen()->strategy == "a");
    auto info = r.info("a");
    BOOST_TEST(info.effective_priority == 99);
    BOOST_TEST(contains(info.priority_source, "test.json"), info.priority_source);
    BOOST_TEST(r.info("b").priority_source == "default");
    BOOST_TEST(r.info("b").effective_priority == 70);

    r.clear_overrides();
    BOOST_TEST(r.explain(ex).chosen()->strategy == "b");
    BOOST_TEST(r.info("a").effective_priority == 50);
}

BOOST_AUTO_TEST_CASE(set_override_replaces_the_previous_one) {
    strategy_registry r;
    r.add(test_strategy("a", 50, ex).descriptor());
    strategy_settings first;
    first.priority = 90;
    first.enabled = false;
    r.set_override("a", first);
    strategy_settings second;
    second.priority = 20;
    r.set_override("a", second);
    BOOST_TEST(r.info("a").effective_priority == 20);
    BOOST_TEST(r.info("a").enabled);  // `enabled` of the first override is gone too
}

BOOST_AUTO_TEST_CASE(override_applies_to_a_strategy_registered_later) {
    strategy_registry r;
    r.add(test_strategy("builtin", 70, ex).descriptor());
    strategy_settings o;
    o.priority = 95;
    r.set_override("plugin", o);  // the plugin is not loaded yet
    BOOST_TEST(r.explain(ex).chosen()->strategy == "builtin");
    r.add(test_strategy("plugin", 10, ex).descriptor());
    BOOST_TEST(r.explain(ex).chosen()->strategy == "plugin");
    BOOST_TEST(r.info("plugin").effective_priority == 95);
}

BOOST_AUTO_TEST_CASE(config_overrides_apply_to_strategies_registered_later) {
    strategy_registry r;
    r.add(test_strategy("builtin", 70, ex).descriptor());
    auto cfg = config::parse(R"({"strategies": {"plugin": {"priority": 99},
                                                "builtin": {"priority": 5}}})");
    r.configure(cfg);
    BOOST_TEST(r.info("builtin").effective_priority == 5);
    r.add(test_strategy("plugin", 10, ex).disabled_by_default().descriptor());
    auto cfg2 = config::parse(R"({"strategies": {"plugin": {"priority": 99, "enabled": true}}})");
    r.configure(cfg2);
    BOOST_TEST(r.explain(ex).chosen()->strategy == "plugin");
}

BOOST_AUTO_TEST_CASE(a_configured_priority_names_the_config_it_came_from) {
    // parse() stamps each strategy's settings with the document's origin...
    strategy_registry r;
    r.add(test_strategy("a", 50, ex).descriptor());
    r.configure(config::parse(R"({"strategies": {"a": {"priority": 60}}})", "file one.json"));
    BOOST_TEST(r.info("a").priority_source == "file one.json");
    // ...and a config a program builds has no origin per strategy: the config's is used.
    config built;
    built.origin = "built by the test";
    built.strategies["a"].priority = 70;
    r.configure(built);
    BOOST_TEST(r.info("a").effective_priority == 70);
    BOOST_TEST(r.info("a").priority_source == "built by the test");
}

BOOST_AUTO_TEST_CASE(explain_creates_no_store) {
    strategy_registry r;
    test_strategy a("a", 50, ex);
    r.add(a.descriptor());
    (void)r.explain(ex);
    (void)r.candidates(ex);
    (void)r.list();
    BOOST_TEST(a.constructions() == 0);
    BOOST_TEST(a.failed_constructions() == 0);
}

BOOST_AUTO_TEST_CASE(a_throwing_probe_means_unsupported) {
    strategy_registry r;
    auto d = test_strategy("thrower", 90, ex).descriptor();
    d.supported = []() -> support_status { throw std::runtime_error("probe exploded"); };
    r.add(d);
    r.add(test_strategy("plain", 10, ex).descriptor());
    auto report = r.explain(ex);
    BOOST_TEST(report.chosen()->strategy == "plain");
    auto* e = entry_for(report, "thrower");
    BOOST_REQUIRE(e != nullptr);
    BOOST_TEST(contains(e->passed_over, "probe exploded"), e->passed_over);
}

BOOST_AUTO_TEST_CASE(report_text_names_winner_and_losers) {
    strategy_registry r;
    r.add(test_strategy("winner", 80, ex).descriptor());
    test_strategy loser("loser", 90, ex);
    loser.unsupported("no such device");
    r.add(loser.descriptor());
    auto text = r.explain(ex).to_string();
    BOOST_TEST(contains(text, "winner"), text);
    BOOST_TEST(contains(text, "loser"), text);
    BOOST_TEST(contains(text, "no such device"), text);
    // The winner comes first.
    BOOST_TEST(text.find("winner") < text.find("loser"), text);
}

BOOST_AUTO_TEST_CASE(list_is_sorted_by_name_and_info_rejects_unknown) {
    strategy_registry r;
    r.add(test_strategy("c", 50, ex).descriptor());
    r.add(test_strategy("a", 50, ex).descriptor());
    r.add(test_strategy("b", 50, ex).descriptor());
    auto all = r.list();
    BOOST_REQUIRE(all.size() == 3u);
    BOOST_TEST(all[0].descriptor.name == "a");
    BOOST_TEST(all[1].descriptor.name == "b");
    BOOST_TEST(all[2].descriptor.name == "c");
    BOOST_CHECK_THROW(r.info("nope"), invalid_argument_error);
}

// The built-ins of DESIGN.md, registered from one list.
BOOST_AUTO_TEST_CASE(builtin_strategies) {
    strategy_registry r;
    register_builtin_strategies(r);
    BOOST_REQUIRE(r.contains("file"));
    BOOST_REQUIRE(r.contains("memory"));
    auto file = *r.find("file");
    BOOST_TEST(file.default_priority == 75);
    BOOST_TEST(file.capabilities ==
               (capability::exclusive | capability::shared | capability::noblock |
                capability::native_wait | capability::crash_release | capability::counting));
    BOOST_TEST(file.enabled_by_default);
    auto memory = *r.find("memory");
    BOOST_TEST(memory.default_priority == 10);
    BOOST_TEST(has(memory.capabilities, capability::exclusive | capability::shared |
                                            capability::noblock | capability::native_wait |
                                            capability::expiring));
    BOOST_TEST(!memory.enabled_by_default);
    // The default registry holds the same list.
    for (const auto& name : r.names()) BOOST_TEST(default_registry().contains(name), name);
    // memory is disabled, so an exclusive request goes to file.
    BOOST_TEST(r.explain(capability::exclusive).chosen()->strategy == "file");
    auto report = r.explain(capability::exclusive | capability::expiring);
    auto* mem = entry_for(report, "memory");
    BOOST_REQUIRE(mem != nullptr);
    BOOST_TEST(!mem->candidate);  // disabled by default
}
