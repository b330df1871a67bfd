// SPDX-License-Identifier: MIT
// Configuration: the document's fields, strict validation (one case per error class, each
// checking the JSON pointer), glob_match, rule_for and LOCKSMITH_CONFIG.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/registry.hpp>

#include "support/child_process.hpp"
#include "support/printers.hpp"
#include "support/test_environment.hpp"
#include "support/test_strategy.hpp"

using namespace locksmith;
using locksmith::test::scoped_env;
using namespace std::chrono_literals;
using locksmith::test::test_strategy;

namespace {

struct caught {
    bool thrown = false;
    std::string id, pointer, message;
    std::size_t line = 0, column = 0;
};

template <class F>
caught catch_config_error(F&& f) {
    caught c;
    try {
        f();
    } catch (const config_error& e) {
        c.thrown = true;
        c.id = e.id();
        c.pointer = e.pointer();
        c.message = e.what();
        c.line = e.line();
        c.column = e.column();
    }
    return c;
}

caught parse_error(const std::string& text) {
    return catch_config_error([&] { (void)config::parse(text); });
}

// Checks that parsing `text` fails with a config_error at `pointer`, whose message names the
// pointer too (a user reads the message, not the field).
void expect_error_at(const std::string& text, const std::string& pointer) {
    BOOST_TEST_CONTEXT("document " << text) {
        auto c = parse_error(text);
        BOOST_TEST(c.thrown, "no config_error");
        BOOST_TEST(c.pointer == pointer);
        BOOST_TEST(!c.id.empty());
        if (!pointer.empty())
            BOOST_TEST(c.message.find(pointer) != std::string::npos, "message: " << c.message);
    }
}

// A registry with the test strategies the documents below name.
struct registry_fixture {
    strategy_registry registry;
    registry_fixture() {
        registry.add(test_strategy("alpha", 50, capability::exclusive).descriptor());
        registry.add(test_strategy("beta", 60, capability::exclusive)
                         .reject_option("forbidden")
                         .descriptor());
    }
};

// A file in a private folder of the test's: a config directly in /tmp, where others may write,
// is refused (config::read_file).
std::filesystem::path temp_file(const std::string& content) {
    static const struct private_folder {
        std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("locksmith-config-test-" + std::to_string(::getpid()));
        private_folder() {
            std::filesystem::create_directory(path);
            std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                         std::filesystem::perm_options::replace);
        }
        ~private_folder() {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
    } folder;
    auto path = folder.path / "config.json";
    std::ofstream(path) << content;
    return path;
}

}  // namespace

// --- what a valid document gives ---

BOOST_AUTO_TEST_CASE(empty_document_gives_defaults) {
    auto c = config::parse("{}");
    BOOST_TEST(c.default_ttl.count() == 300'000);
    BOOST_TEST(c.auto_release);
    BOOST_TEST(c.strategies.empty());
    BOOST_TEST(c.locks.empty());
    BOOST_TEST(c.plugins.empty());
}

BOOST_AUTO_TEST_CASE(full_document_is_read) {
    auto c = config::parse(R"({
        "defaults":   { "ttl_s": 30, "auto_release": false, "retry_initial_ms": 2,
                        "retry_max_ms": 40 },
        "strategies": { "file":  { "priority": 75, "options": { "lock_dir": "/var/lock/x" } },
                        "memory": { "enabled": true } },
        "locks":      { "invoice.*": { "require": "exclusive|distributed", "ttl_s": 1.5,
                                       "strategy": "file" } },
        "plugins":    [ "/usr/lib/locksmith/libmy.so" ]
    })");
    BOOST_TEST(c.default_ttl.count() == 30'000);
    BOOST_TEST(!c.auto_release);
    BOOST_TEST(c.retry.initial.count() == 2000);
    BOOST_TEST(c.retry.max.count() == 40'000);
    BOOST_REQUIRE(c.strategies.count("file") == 1u);
    BOOST_TEST(c.strategies["file"].priority.value_or(-1) == 75);
    BOOST_TEST(!c.strategies["file"].enabled.has_value());
    BOOST_TEST(c.strategies["file"].options["lock_dir"] == "/var/lock/x");
    BOOST_TEST(c.strategies["memory"].enabled.value_or(false));
    BOOST_TEST(c.strategies["memory"].options.is_null());
    BOOST_REQUIRE(c.locks.size() == 1u);
    BOOST_TEST(c.locks[0].pattern == "invoice.*");
    BOOST_TEST(c.locks[0].require.value_or(capability::none) ==
               (capability::exclusive | capability::distributed));
    BOOST_TEST(c.locks[0].ttl.value_or(0ms).count() == 1500);
    BOOST_TEST(c.locks[0].strategy.value_or("") == "file");
    BOOST_TEST(c.plugins == std::vector<std::string>{"/usr/lib/locksmith/libmy.so"});
}

BOOST_AUTO_TEST_CASE(a_lock_rule_may_set_a_semaphore_limit) {
    auto c = config::parse(R"({"locks": {"backup.*": {"limit": 3}, "other": {}}})");
    BOOST_REQUIRE(c.locks.size() == 2u);
    BOOST_TEST(c.locks[0].limit.value_or(0) == 3u);
    BOOST_TEST(!c.locks[1].limit.has_value());
    for (const char* bad : {"0", "-1", "1000001", "2.5", "\"3\"", "1e30", "true"})
        expect_error_at(std::string(R"({"locks": {"b": {"limit": )") + bad + "}}}",
                        "/locks/b/limit");
}

// --- one case per error class ---

BOOST_AUTO_TEST_CASE(not_json_gives_line_and_column) {
    auto c = parse_error("{\n  \"defaults\": {\n    \"ttl_s\": 30,,\n  }\n}");
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.line == 3u);
    BOOST_TEST(c.column > 0u);
    BOOST_TEST(c.message.find("3") != std::string::npos, "message: " << c.message);
    BOOST_TEST(c.message.find("line") != std::string::npos, "message: " << c.message);

    auto c2 = parse_error("not json at all");
    BOOST_TEST(c2.thrown);
    BOOST_TEST(c2.line == 1u);
    BOOST_TEST(c2.column > 0u);

    auto c3 = parse_error("");
    BOOST_TEST(c3.thrown);

    auto c4 = parse_error("{\"defaults\": {}");  // truncated
    BOOST_TEST(c4.thrown);
    BOOST_TEST(c4.line >= 1u);
}

// Found by tests/fuzz/fuzz_config: nlohmann reads 1e400 as valid JSON but throws its own
// out_of_range (not a parse_error), which escaped config::parse and config::check.
BOOST_AUTO_TEST_CASE(a_number_beyond_a_double_is_a_config_error) {
    const std::string text = R"({"defaults": {"ttl_s": 1e400}})";
    auto c = parse_error(text);
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.syntax");
    BOOST_TEST(c.message.find("1e400") != std::string::npos, "message: " << c.message);
    const auto problems = config::check(text);
    BOOST_REQUIRE(problems.size() == 1u);
    BOOST_TEST(problems[0].id() == "config.syntax");
}

BOOST_AUTO_TEST_CASE(trailing_garbage_is_an_error) {
    BOOST_TEST(parse_error("{} {}").thrown);
}

BOOST_AUTO_TEST_CASE(wrong_shape_names_the_pointer) {
    expect_error_at("[]", "");
    expect_error_at("42", "");
    expect_error_at(R"({"defaults": 5})", "/defaults");
    expect_error_at(R"({"strategies": []})", "/strategies");
    expect_error_at(R"({"strategies": {"file": 3}})", "/strategies/file");
    expect_error_at(R"({"locks": ["a"]})", "/locks");
    expect_error_at(R"({"locks": {"a.*": "exclusive"}})", "/locks/a.*");
}

BOOST_AUTO_TEST_CASE(unknown_keys_name_the_pointer) {
    auto c = parse_error(R"({"defualts": {}})");
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.unknown_key");
    BOOST_TEST(c.pointer == "/defualts");
    BOOST_TEST(c.message.find("defualts") != std::string::npos, c.message);
    expect_error_at(R"({"defaults": {"ttl": 3}})", "/defaults/ttl");
    expect_error_at(R"({"strategies": {"file": {"priorty": 3}}})", "/strategies/file/priorty");
    expect_error_at(R"({"locks": {"a": {"requires": "exclusive"}}})", "/locks/a/requires");
}

BOOST_AUTO_TEST_CASE(pointer_tokens_are_escaped) {
    // RFC 6901: "/" in a key is "~1", "~" is "~0".
    expect_error_at(R"({"locks": {"jobs/*": {"ttl_s": 0}}})", "/locks/jobs~1*/ttl_s");
    expect_error_at(R"({"locks": {"a~b": {"ttl_s": 0}}})", "/locks/a~0b/ttl_s");
}

BOOST_AUTO_TEST_CASE(unknown_strategy_names_the_pointer) {
    registry_fixture f;
    auto c = catch_config_error([&] {
        f.registry.validate(config::parse(R"({"strategies": {"nosuch": {"priority": 3}}})"));
    });
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.pointer == "/strategies/nosuch");
    BOOST_TEST(c.message.find("nosuch") != std::string::npos, c.message);

    auto rule = catch_config_error([&] {
        f.registry.validate(config::parse(R"({"locks": {"a.*": {"strategy": "nosuch"}}})"));
    });
    BOOST_TEST(rule.thrown);
    BOOST_TEST(rule.pointer == "/locks/a.*/strategy");
    BOOST_TEST(rule.message.find("nosuch") != std::string::npos, rule.message);

    BOOST_CHECK_NO_THROW(
        f.registry.validate(config::parse(R"({"strategies": {"alpha": {"priority": 3}},
                                           "locks": {"a.*": {"strategy": "beta"}}})")));
}

BOOST_AUTO_TEST_CASE(options_rejected_by_the_strategy_name_the_full_pointer) {
    registry_fixture f;
    auto c = catch_config_error([&] {
        f.registry.validate(
            config::parse(R"({"strategies": {"beta": {"options": {"forbidden": 1}}}})"));
    });
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.pointer == "/strategies/beta/options/forbidden");
}

BOOST_AUTO_TEST_CASE(builtin_file_options_are_checked) {
    strategy_registry r;
    register_builtin_strategies(r);
    auto c = catch_config_error([&] {
        r.validate(
            config::parse(R"({"strategies": {"file": {"options": {"lock_dirr": "/tmp"}}}})"));
    });
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.pointer == "/strategies/file/options/lock_dirr");
    auto t = catch_config_error([&] {
        r.validate(config::parse(R"({"strategies": {"file": {"options": {"lock_dir": 5}}}})"));
    });
    BOOST_TEST(t.thrown);
    BOOST_TEST(t.pointer == "/strategies/file/options/lock_dir");
}

BOOST_AUTO_TEST_CASE(wrong_types_name_the_pointer) {
    auto c = parse_error(R"({"strategies": {"file": {"priority": "high"}}})");
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.type");
    BOOST_TEST(c.pointer == "/strategies/file/priority");
    expect_error_at(R"({"strategies": {"file": {"enabled": "yes"}}})", "/strategies/file/enabled");
    expect_error_at(R"({"strategies": {"file": {"options": [1]}}})", "/strategies/file/options");
    expect_error_at(R"({"defaults": {"auto_release": 1}})", "/defaults/auto_release");
    expect_error_at(R"({"defaults": {"ttl_s": "300"}})", "/defaults/ttl_s");
    expect_error_at(R"({"locks": {"a": {"require": 5.5}}})", "/locks/a/require");
    expect_error_at(R"({"locks": {"a": {"strategy": 1}}})", "/locks/a/strategy");
}

BOOST_AUTO_TEST_CASE(priority_out_of_range_names_the_pointer) {
    expect_error_at(R"({"strategies": {"file": {"priority": 101}}})", "/strategies/file/priority");
    expect_error_at(R"({"strategies": {"file": {"priority": -1}}})", "/strategies/file/priority");
    expect_error_at(R"({"strategies": {"file": {"priority": 50.5}}})", "/strategies/file/priority");
    expect_error_at(R"({"strategies": {"file": {"priority": 1e300}}})",
                    "/strategies/file/priority");
    BOOST_CHECK_NO_THROW(config::parse(R"({"strategies": {"a": {"priority": 0},
                                                          "b": {"priority": 100}}})"));
}

BOOST_AUTO_TEST_CASE(ttl_out_of_range_names_the_pointer) {
    expect_error_at(R"({"defaults": {"ttl_s": 0}})", "/defaults/ttl_s");
    expect_error_at(R"({"defaults": {"ttl_s": -5}})", "/defaults/ttl_s");
    expect_error_at(R"({"defaults": {"ttl_s": 1e12}})", "/defaults/ttl_s");  // beyond max_ttl
    expect_error_at(R"({"locks": {"a": {"ttl_s": 0}}})", "/locks/a/ttl_s");
    expect_error_at(R"({"locks": {"a": {"ttl_s": -0.5}}})", "/locks/a/ttl_s");
}

BOOST_AUTO_TEST_CASE(bad_retry_settings_name_the_pointer) {
    expect_error_at(R"({"defaults": {"retry_initial_ms": 0}})", "/defaults/retry_initial_ms");
    // max below initial: either field may be blamed, but one of them must be.
    auto c = parse_error(R"({"defaults": {"retry_initial_ms": 10, "retry_max_ms": 1}})");
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.pointer.rfind("/defaults/retry_", 0) == 0u, "pointer: " << c.pointer);
}

BOOST_AUTO_TEST_CASE(bad_capability_in_a_lock_rule_names_the_pointer) {
    auto c = parse_error(R"({"locks": {"invoice.*": {"require": "exclusive|bogus"}}})");
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.pointer == "/locks/invoice.*/require");
    BOOST_TEST(c.message.find("bogus") != std::string::npos, c.message);
    expect_error_at(R"({"locks": {"a": {"require": ""}}})", "/locks/a/require");
}

BOOST_AUTO_TEST_CASE(bad_plugins_name_the_pointer) {
    expect_error_at(R"({"plugins": "/usr/lib/x.so"})", "/plugins");
    expect_error_at(R"({"plugins": ["./libx.so"]})", "/plugins/0");
    expect_error_at(R"({"plugins": [".."]})", "/plugins/0");
    expect_error_at(R"({"plugins": ["/ok.so", "relative/x.so"]})", "/plugins/1");
    expect_error_at(R"({"plugins": [5]})", "/plugins/0");
    expect_error_at(R"({"plugins": [""]})", "/plugins/0");
}

BOOST_AUTO_TEST_CASE(a_plugin_named_without_a_path_is_a_file_in_the_module_folder) {
    auto c = config::parse(R"({"plugins": ["libx.so", "/opt/y.so"]})");
    BOOST_TEST(c.plugins == (std::vector<std::string>{"libx.so", "/opt/y.so"}));
}

BOOST_AUTO_TEST_CASE(check_lists_every_problem) {
    auto problems = config::check(R"({"defaults": {"ttl_s": 0}, "plugins": "x",
                                      "unknown": 1})");
    BOOST_TEST(problems.size() == 3u);
    std::set<std::string> pointers;
    for (const auto& p : problems) pointers.insert(p.pointer());
    BOOST_TEST(pointers.count("/defaults/ttl_s") == 1u);
    BOOST_TEST(pointers.count("/plugins") == 1u);
    BOOST_TEST(pointers.count("/unknown") == 1u);
    BOOST_TEST(config::check("{}").empty());
    BOOST_TEST(config::check("{").size() == 1u);
}

BOOST_AUTO_TEST_CASE(check_uses_the_registry) {
    registry_fixture f;
    auto problems = f.registry.check(R"({"strategies": {"nosuch": {}, "alpha": {}}})");
    BOOST_REQUIRE(problems.size() == 1u);
    BOOST_TEST(problems[0].pointer() == "/strategies/nosuch");
    BOOST_TEST(config::check(R"({"strategies": {"nosuch": {}}})").empty());
}

BOOST_AUTO_TEST_CASE(load_file_reports_io_errors_and_origin) {
    auto c = catch_config_error([] { config::load_file("/nonexistent/locksmith.json"); });
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.io");
    BOOST_TEST(c.message.find("/nonexistent/locksmith.json") != std::string::npos, c.message);

    auto path = temp_file(R"({"defaults": {"ttl_s": 12}})");
    auto cfg = config::load_file(path);
    BOOST_TEST(cfg.default_ttl.count() == 12'000);
    BOOST_TEST(cfg.origin.find(path.string()) != std::string::npos, cfg.origin);

    // A syntax error in a file still has its position.
    auto bad = temp_file("{\n\n  x\n}");
    auto e = catch_config_error([&] { config::load_file(bad); });
    BOOST_TEST(e.thrown);
    BOOST_TEST(e.line == 3u);
    std::filesystem::remove(path);
}

// --- glob_match and rule_for ---

BOOST_AUTO_TEST_CASE(glob_match_cases) {
    BOOST_TEST(glob_match("*", ""));
    BOOST_TEST(glob_match("*", "anything/at.all"));
    BOOST_TEST(glob_match("invoice.*", "invoice.42"));
    BOOST_TEST(glob_match("invoice.*", "invoice."));
    BOOST_TEST(!glob_match("invoice.*", "invoice"));
    BOOST_TEST(!glob_match("invoice.*", "xinvoice.42"));
    BOOST_TEST(glob_match("a?c", "abc"));
    BOOST_TEST(!glob_match("a?c", "ac"));
    BOOST_TEST(!glob_match("?", ""));
    BOOST_TEST(glob_match("a*b*c", "axxbyybzc"));
    BOOST_TEST(!glob_match("a*b*c", "axxbyyb"));
    BOOST_TEST(glob_match("*.lock", "a/b/c.lock"));  // '*' crosses '/'
    BOOST_TEST(glob_match("[ab]", "[ab]"));          // only * and ? are special
    BOOST_TEST(!glob_match("[ab]", "a"));
    BOOST_TEST(glob_match("exact", "exact"));
    BOOST_TEST(!glob_match("exact", "exactly"));
    BOOST_TEST(!glob_match("", "x"));
    BOOST_TEST(glob_match("", ""));
    BOOST_TEST(glob_match(std::string_view("a\0*", 3), std::string_view("a\0bc", 4)));
    BOOST_TEST(!glob_match(std::string_view("a\0*", 3), "abc"));
    // Backtracking-heavy input must finish (and not match).
    std::string many_a(2000, 'a');
    BOOST_TEST(!glob_match("*a*a*a*a*a*a*a*a*b", many_a));
}

BOOST_AUTO_TEST_CASE(rule_for_takes_the_first_match_in_document_order) {
    // "*" sorts before "z.*": a config that loses document order picks the wrong rule.
    auto c = config::parse(R"({"locks": {"z.*": {"ttl_s": 1}, "*": {"ttl_s": 2}}})");
    BOOST_REQUIRE(c.locks.size() == 2u);
    BOOST_TEST(c.locks[0].pattern == "z.*");
    BOOST_TEST(c.locks[1].pattern == "*");
    auto* rule = c.rule_for("z.a");
    BOOST_REQUIRE(rule != nullptr);
    BOOST_TEST(rule->pattern == "z.*");
    rule = c.rule_for("other");
    BOOST_REQUIRE(rule != nullptr);
    BOOST_TEST(rule->pattern == "*");
    BOOST_TEST(config::parse("{}").rule_for("x") == nullptr);
    auto narrow = config::parse(R"({"locks": {"a.*": {"ttl_s": 1}}})");
    BOOST_TEST(narrow.rule_for("b.1") == nullptr);
}

// --- LOCKSMITH_CONFIG ---

BOOST_AUTO_TEST_CASE(environment_unset_or_empty_gives_nothing) {
    {
        scoped_env e("LOCKSMITH_CONFIG", std::nullopt);
        BOOST_TEST(!config::from_environment().has_value());
    }
    {
        scoped_env e("LOCKSMITH_CONFIG", std::string());
        BOOST_TEST(!config::from_environment().has_value());
    }
}

BOOST_AUTO_TEST_CASE(environment_inline_json) {
    scoped_env e("LOCKSMITH_CONFIG", std::string(R"({"defaults": {"ttl_s": 7}})"));
    auto c = config::from_environment();
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(c->default_ttl.count() == 7000);
    BOOST_TEST(c->origin.find("LOCKSMITH_CONFIG") != std::string::npos, c->origin);
}

BOOST_AUTO_TEST_CASE(environment_path) {
    auto path = temp_file(R"({"defaults": {"ttl_s": 9}})");
    scoped_env e("LOCKSMITH_CONFIG", path.string());
    auto c = config::from_environment();
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(c->default_ttl.count() == 9000);
    std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(environment_errors_are_config_errors) {
    {
        scoped_env e("LOCKSMITH_CONFIG", std::string(R"({"defaults": {"ttl_s": 0}})"));
        auto c = catch_config_error([] { (void)config::from_environment(); });
        BOOST_TEST(c.thrown);
        BOOST_TEST(c.pointer == "/defaults/ttl_s");
    }
    {
        scoped_env e("LOCKSMITH_CONFIG", std::string("/nonexistent/dir/locksmith.json"));
        auto c = catch_config_error([] { (void)config::from_environment(); });
        BOOST_TEST(c.thrown);
        BOOST_TEST(c.id == "config.io");
    }
    {
        scoped_env e("LOCKSMITH_CONFIG", std::string("{ broken"));
        auto c = catch_config_error([] { (void)config::from_environment(); });
        BOOST_TEST(c.thrown);
        BOOST_TEST(c.line == 1u);
    }
}

// --- hostile inputs: the parser's bounds (regular file, size, depth) ---

namespace {

// Runs `load` in a forked child with a safety limit and memory capped, so that a crash, a hang
// or an unbounded read fails the test instead of taking the test run (or the machine) with it.
// The child exits 0 when `load` threw a config_error with `id` whose message contains `needle`.
int in_child(const std::function<void()>& load, const std::string& id, const std::string& needle) {
    pid_t pid = locksmith::test::fork_child(
        [&] {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
            // A sanitizer reserves terabytes of address space for its shadow, so there the cap
            // is the sanitizer's own (scripts/sanitize.sh: hard_rss_limit_mb).
            rlimit memory{512u << 20, 512u << 20};
            ::setrlimit(RLIMIT_AS, &memory);
#endif
            try {
                load();
            } catch (const config_error& e) {
                const std::string message = e.what();
                if (e.id() == id && message.find(needle) != std::string::npos) return 0;
                std::fprintf(stderr, "config_error %s: %s\n", e.id().c_str(), e.what());
                return 2;
            }
            return 3;
        },
        std::chrono::seconds(20));
    return locksmith::test::wait_child(pid, std::chrono::seconds(20));
}

std::string nested_arrays(std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

// A document whose deepest value sits at `depth` levels (the root object is level 1).
std::string document_of_depth(std::size_t depth) {
    // root { strategies { file { options { a: [ ... ] } } } }: four objects, then arrays.
    return R"({"strategies": {"file": {"options": {"a": )" + nested_arrays(depth - 4) + "}}}}";
}

}  // namespace

BOOST_AUTO_TEST_CASE(deep_nesting_is_refused_without_recursing) {
    // Before: nlohmann's recursive dump of the options overflowed the stack (SIGSEGV).
    const std::string deep = document_of_depth(100'000);
    BOOST_TEST(in_child([&] { (void)config::parse(deep); }, "config.too_deep", "64") == 0);
    BOOST_TEST(in_child(
                   [&] {
                       auto problems = config::check(deep);
                       if (problems.size() == 1) throw problems.front();
                   },
                   "config.too_deep", "64") == 0);
    // The limit itself is accepted; one more level is not, and the error says where.
    BOOST_CHECK_NO_THROW(config::parse(document_of_depth(config::max_depth)));
    auto c = parse_error(document_of_depth(config::max_depth + 1));
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.too_deep");
    BOOST_TEST(c.line == 1u);
    BOOST_TEST(c.column > 0u);
    // Brackets inside strings are text, not nesting.
    BOOST_CHECK_NO_THROW(
        config::parse(R"({"locks": {")" + std::string(1000, '[') + R"(\"{": {}}})"));
}

BOOST_AUTO_TEST_CASE(a_fifo_is_refused_without_blocking) {
    // Before: opening the FIFO waited for a writer forever.
    auto fifo = std::filesystem::temp_directory_path() /
                ("locksmith-config-fifo-" + std::to_string(::getpid()));
    std::filesystem::remove(fifo);
    BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    BOOST_TEST(
        in_child([&] { (void)config::load_file(fifo); }, "config.io", "not a regular file") == 0);
    {
        scoped_env e("LOCKSMITH_CONFIG", fifo.string());
        BOOST_TEST(
            in_child([&] { (void)config::from_environment(); }, "config.io", fifo.string()) == 0);
    }
    std::filesystem::remove(fifo);
}

BOOST_AUTO_TEST_CASE(a_device_is_refused_without_reading_it) {
    // Before: /dev/zero was read until memory ran out (here: the child's 512 MiB cap).
    BOOST_TEST(in_child([] { (void)config::load_file("/dev/zero"); }, "config.io",
                        "not a regular file") == 0);
    BOOST_TEST(in_child([] { (void)config::load_file("/tmp"); }, "config.io", "directory") == 0);
}

BOOST_AUTO_TEST_CASE(size_is_bounded_for_files_and_strings) {
    // Whitespace is valid JSON, so only the limit can refuse these.
    const std::string big = "{}" + std::string(config::max_bytes, ' ');
    auto path = temp_file(big);
    auto c = catch_config_error([&] { (void)config::load_file(path); });
    BOOST_TEST(c.thrown);
    BOOST_TEST(c.id == "config.too_large");
    BOOST_TEST(c.message.find("1 MiB") != std::string::npos, c.message);
    BOOST_TEST(c.message.find(path.string()) != std::string::npos, c.message);
    std::filesystem::remove(path);

    auto s = parse_error(big);
    BOOST_TEST(s.thrown);
    BOOST_TEST(s.id == "config.too_large");
    {
        scoped_env e("LOCKSMITH_CONFIG", big);
        auto env = catch_config_error([] { (void)config::from_environment(); });
        BOOST_TEST(env.id == "config.too_large");
        BOOST_TEST(env.message.find("LOCKSMITH_CONFIG") != std::string::npos, env.message);
    }
    // Exactly at the limit is fine.
    BOOST_CHECK_NO_THROW(config::parse("{}" + std::string(config::max_bytes - 2, ' ')));
}

// --- one pointer, the right source, every error ---

namespace {

std::size_t count_of(const std::string& text, const std::string& part) {
    std::size_t n = 0;
    for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
    return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(check_lists_every_strategys_option_errors_once_each) {
    // Before: check() stopped at the first strategy's options, blamed "built-in defaults" and
    // repeated the pointer in the message; validating named the file and pointer twice.
    strategy_registry r;
    register_builtin_strategies(r);
    const std::string text = R"({"strategies": {
        "file": {"options": {"lock_dirr": "/tmp"}},
        "semaphore": {"options": {"bogus": 1}},
        "memory": {"options": {"nope": true}}}, "defaults": {"ttl_s": 0}})";
    auto problems = r.check(text);
    BOOST_TEST(problems.size() == 4u);
    std::set<std::string> pointers;
    for (const auto& p : problems) {
        pointers.insert(p.pointer());
        // The caller prints source and pointer with the message: the message has neither.
        BOOST_TEST(std::string(p.what()).find(p.pointer()) == std::string::npos, p.what());
        BOOST_TEST(std::string(p.what()).find("built-in defaults") == std::string::npos, p.what());
    }
    BOOST_TEST(pointers.count("/strategies/file/options/lock_dirr") == 1u);
    BOOST_TEST(pointers.count("/strategies/semaphore/options/bogus") == 1u);
    BOOST_TEST(pointers.count("/strategies/memory/options/nope") == 1u);
    BOOST_TEST(pointers.count("/defaults/ttl_s") == 1u);

    // Thrown: the file named once, the pointer once, per problem.
    auto path = temp_file(R"({"strategies": {"file": {"options": {"lock_dirr": "/tmp"}},
        "semaphore": {"options": {"bogus": 1}}, "memory": {"options": {"nope": true}}}})");
    auto c = catch_config_error([&] { r.validate(config::load_file(path)); });
    BOOST_TEST(c.thrown);
    for (const char* p : {"/strategies/file/options/lock_dirr",
                          "/strategies/semaphore/options/bogus", "/strategies/memory/options/nope"})
        BOOST_TEST(count_of(c.message, p) == 1u, c.message);
    BOOST_TEST(count_of(c.message, path.string()) == 3u, c.message);
    BOOST_TEST(c.message.find("built-in defaults") == std::string::npos, c.message);
    std::filesystem::remove(path);

    auto one = parse_error(R"({"defaults": {"ttl_s": 0}})");
    BOOST_TEST(count_of(one.message, "/defaults/ttl_s") == 1u, one.message);
    BOOST_TEST(one.message.rfind("string: ", 0) == 0u, one.message);
}

// Issue 11 point 19: out-of-range numbers are quoted as written and bounds in full, not as
// 3.1536e+07, and 2^64-1 is not read as -1.
BOOST_AUTO_TEST_CASE(out_of_range_numbers_are_quoted_exactly) {
    auto problems = [](const std::string& json) {
        std::string all;
        for (const auto& e : default_registry().check(json)) all += e.what() + std::string("\n");
        return all;
    };
    auto text = problems(R"({"defaults": {"ttl_s": 31536001}})");
    BOOST_TEST(text.find("31536001") != std::string::npos, text);
    BOOST_TEST(text.find("31536000") != std::string::npos, text);
    BOOST_TEST(text.find("e+") == std::string::npos, text);

    text = problems(R"({"strategies": {"file": {"priority": 18446744073709551615}}})");
    BOOST_TEST(text.find("18446744073709551615") != std::string::npos, text);
    BOOST_TEST(text.find("-1") == std::string::npos, text);
    // A huge priority must never be accepted as a small one.
    BOOST_CHECK_THROW(
        config::parse(R"({"strategies": {"file": {"priority": 18446744073709551615}}})"),
        config_error);

    if (default_registry().contains("semaphore")) {
        text = problems(
            R"({"strategies": {"semaphore": {"options": {"key": 18446744073709551615}}}})");
        BOOST_TEST(text.find("18446744073709551615") != std::string::npos, text);
    }
}

// combined has no counting (README, "Why combined does not count"): a rule that gives names a
// limit and pins combined is refused by config check, and explain --require counting says why.
BOOST_AUTO_TEST_CASE(a_limit_pinned_on_combined_is_refused_saying_why) {
    auto rule = catch_config_error([&] {
        default_registry().validate(
            config::parse(R"({"locks": {"backup*": {"strategy": "combined", "limit": 3}}})"));
    });
    BOOST_TEST(rule.thrown);
    BOOST_TEST(rule.pointer == "/locks/backup*/limit");
    BOOST_TEST(rule.message.find("lacks counting") != std::string::npos, rule.message);
    BOOST_TEST(rule.message.find("majority quorum") != std::string::npos, rule.message);
    BOOST_CHECK_NO_THROW(default_registry().validate(
        config::parse(R"({"locks": {"backup*": {"strategy": "file", "limit": 3}}})")));
    const auto report = default_registry().explain(capability::exclusive | capability::counting);
    bool said = false;
    for (const auto& e : report.entries)
        if (e.strategy == "combined") {
            BOOST_TEST(!e.candidate);
            said = e.passed_over.find("majority quorum") != std::string::npos;
            BOOST_TEST(said, e.passed_over);
        }
    BOOST_TEST(said);
}
