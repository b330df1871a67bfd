// SPDX-License-Identifier: MIT
// The `null` strategy in the command (issue 12 item 5): refused unless the config enables it,
// and once enabled, `run`, `explain` and `status` say on stderr that locking is off.
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "cli/cli_sandbox.hpp"
#include "support/test_helpers.hpp"

using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::contains;
using locksmith::test::describe;
using locksmith::test::wait_for_file;
using nlohmann::json;

namespace {

std::size_t lines_with(const std::string& text, const std::string& part) {
    std::size_t n = 0;
    for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
        ++n;
    return n;
}

const char* const locking_off = "locking is off";

json null_enabled() {
    return json::parse(R"({"strategies": {"null": {"enabled": true}}})");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(null_strategy)

BOOST_AUTO_TEST_CASE(run_refuses_null_unless_the_config_enables_it) {
    cli_sandbox box;
    auto r = box.run(box.with_config("run", {"--strategy", "null", "job", "--", "true"}));
    BOOST_TEST(r.exit_code == 69, describe(r));
    BOOST_TEST(contains(r.err, "disabled by default"), r.err);
    // Plain selection never picks it.
    r = box.run(box.with_config("run", {"-v", "job", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(!contains(r.err, locking_off), r.err);
    BOOST_TEST(contains(r.err, "strategy file"), r.err);
}

// Without -v `run` is silent on success, but not here: a config that turned locking off (meant
// for a development machine) must not go unnoticed where it was copied to by mistake. One line.
BOOST_AUTO_TEST_CASE(run_with_null_says_once_that_locking_is_off) {
    cli_sandbox box(null_enabled());
    auto r = box.run(box.with_config("run", {"job", "-c", "echo \"$LOCKSMITH_STRATEGY\""}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out == "null\n", describe(r));
    BOOST_TEST(lines_with(r.err, locking_off) == 1u, describe(r));
    BOOST_TEST(r.err.rfind("locksmith: warning: ", 0) == 0, r.err);
    BOOST_TEST(contains(r.err, "'job'"), r.err);

    r = box.run(box.with_config("run", {"-v", "job", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(lines_with(r.err, locking_off) == 1u, describe(r));
    BOOST_TEST(contains(r.err, "strategy null"), r.err);
}

// What the warning is about: a second run gets the name while the first holds it.
BOOST_AUTO_TEST_CASE(two_runs_both_hold_the_name) {
    cli_sandbox box(null_enabled());
    const std::string holding = box.path("holding"), done = box.path("done");
    auto first = box.start(box.with_config(
        "run", {"job", "-c",
                "touch '" + holding + "'; while [ ! -e '" + done + "' ]; do sleep 0.01; done"}));
    BOOST_REQUIRE(wait_for_file(holding));
    auto second = box.run(box.with_config("run", {"-n", "job", "--", "touch", done}));
    BOOST_TEST(second.exit_code == 0, describe(second));
    auto r = box.wait(first);
    BOOST_TEST(r.exit_code == 0, describe(r));
}

BOOST_AUTO_TEST_CASE(explain_and_status_say_that_locking_is_off) {
    cli_sandbox box(null_enabled());
    auto r = box.run(box.with_config("explain", {"--require", "exclusive"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(contains(r.out, "null"), r.out);
    BOOST_TEST(contains(r.err, locking_off), describe(r));
    // JSON keeps stdout one document; the warning is on stderr, and in the document.
    r = box.run(box.with_config("explain", {"--require", "exclusive", "--json"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    auto doc = json::parse(r.out);
    BOOST_TEST(doc.at("chosen") == "null");
    BOOST_TEST(doc.at("excludes_nothing") == true);
    BOOST_TEST(contains(r.err, locking_off), describe(r));

    r = box.run(box.with_config("status", {"job"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(contains(r.err, locking_off), describe(r));
    BOOST_TEST(contains(r.out, "strategy null"), r.out);

    // Where another strategy serves the request, nothing is said.
    r = box.run(box.with_config("explain", {"--require", "fencing"}));
    BOOST_TEST(!contains(r.err, locking_off), describe(r));
    r = box.run(box.with_config("status", {"--strategy", "file", "job"}));
    BOOST_TEST(!contains(r.err, locking_off), describe(r));
}

BOOST_AUTO_TEST_SUITE_END()
