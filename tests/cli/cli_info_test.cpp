// SPDX-License-Identifier: MIT
// `locksmith strategies / explain / config check / status`, --help, --version, and bad input.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include <locksmith/author/plugin.hpp>
#include <locksmith/version.hpp>

#include "cli/cli_sandbox.hpp"
#include "support/child_process.hpp"
#include "support/skip_report.hpp"
#include "support/test_paths.hpp"

using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using locksmith::test::run_unprivileged;
using locksmith::test::skip_case;
using locksmith::test::wait_for_file;
using nlohmann::json;

namespace {

// One clear line to stderr, prefixed, and nothing that looks like a crash.
void expect_clean_error(const cli_result& r, int code, const std::string& fragment) {
    BOOST_TEST(r.exit_code == code, describe(r));
    BOOST_TEST(r.err.rfind("locksmith: ", 0) == 0, r.err);
    BOOST_TEST(r.err.find(fragment) != std::string::npos, "want [" + fragment + "] in " + r.err);
    BOOST_TEST(r.err.find("terminate called") == std::string::npos, r.err);
}

json find_strategy(const json& doc, const std::string& name) {
    for (const auto& s : doc.at("strategies")) {
        if (s.at("name") == name) return s;
    }
    return nullptr;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(info_commands)

BOOST_AUTO_TEST_CASE(help_and_version) {
    cli_sandbox box;
    auto r = box.run({"--help"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    for (const char* word : {"run", "strategies", "explain", "config", "status", "--version"}) {
        BOOST_TEST(r.out.find(word) != std::string::npos, word);
    }
    r = box.run({"run", "--help"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("--conflict-exit-code") != std::string::npos, r.out);
    // The version (CMake's project version, as the library and the manual page have it), the
    // plugin API and the strategies of this build.
    r = box.run({"--version"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.rfind("locksmith " + std::string(locksmith::version) + "\nplugin API " +
                               std::to_string(LOCKSMITH_PLUGIN_API_VERSION) + "\n",
                           0) == 0,
               r.out);
    const auto built_in = r.out.find("\nbuilt-in strategies: ");
    BOOST_TEST((built_in != std::string::npos &&
                r.out.find(" file", built_in) < r.out.find('\n', built_in + 1)),
               r.out);
    BOOST_TEST(std::string(locksmith::version) == std::to_string(locksmith::version_major) + "." +
                                                      std::to_string(locksmith::version_minor) +
                                                      "." +
                                                      std::to_string(locksmith::version_patch));
    std::ifstream manual(locksmith::test::build_path("doc/locksmith.1"));
    const std::string page{std::istreambuf_iterator<char>(manual), {}};
    BOOST_TEST(page.find("\"locksmith " + std::string(locksmith::version) + "\"") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(strategies_shows_raised_priority_and_disabled_strategy) {
    cli_sandbox box(
        json::parse(R"({"strategies": {"file": {"priority": 95}, "memory": {"enabled": false}}})"));
    auto r = box.run_with_config("strategies", {});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find(box.config_path().string()) != std::string::npos, r.out);
    BOOST_TEST(r.out.find("95") != std::string::npos, r.out);

    r = box.run_with_config("strategies", {"--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    json doc = json::parse(r.out);
    json file = find_strategy(doc, "file");
    BOOST_REQUIRE(!file.is_null());
    BOOST_TEST(file.at("priority") == 95);
    BOOST_TEST(file.at("default_priority") == 75);
    BOOST_TEST(file.at("priority_source").get<std::string>().find(box.config_path().string()) !=
               std::string::npos);
    BOOST_TEST(file.at("enabled") == true);
    BOOST_TEST(file.at("supported") == true);
    BOOST_TEST(file.at("capabilities").dump().find("\"exclusive\"") != std::string::npos);
    json memory = find_strategy(doc, "memory");
    BOOST_REQUIRE(!memory.is_null());
    BOOST_TEST(memory.at("enabled") == false);
}

BOOST_AUTO_TEST_CASE(explain_chooses_and_says_why) {
    cli_sandbox box;
    auto r = box.run_with_config("explain", {"--require", "exclusive"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("file") != std::string::npos, r.out);

    r = box.run_with_config("explain", {"--require", "exclusive,shared", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(doc.at("chosen") == "file");
    // memory is disabled by default, so it is passed over with a reason.
    bool memory_passed_over = false;
    for (const auto& e : doc.at("entries")) {
        if (e.at("strategy") == "memory") {
            memory_passed_over = e.at("candidate") == false && !e.at("passed_over").empty();
        }
    }
    BOOST_TEST(memory_passed_over, r.out);

    // expiring: only memory has it, and it is disabled → nothing to choose.
    r = box.run_with_config("explain", {"--require", "expiring", "--json"});
    BOOST_TEST(r.exit_code == EX_UNAVAILABLE, describe(r));
    BOOST_TEST(json::parse(r.out).at("chosen").is_null());

    // Raising memory's priority and enabling it changes the choice.
    cli_sandbox raised(
        json::parse(R"({"strategies": {"memory": {"enabled": true, "priority": 99}}})"));
    r = raised.run_with_config("explain", {"--require", "exclusive", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out).at("chosen") == "memory");
}

BOOST_AUTO_TEST_CASE(config_check_valid_malformed_and_invalid) {
    cli_sandbox box;
    auto r = box.run({"config", "check", box.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("OK") != std::string::npos, r.out);

    std::string bad_syntax =
        box.write_file("syntax.json", "{\n  \"strategies\": {\n    \"file\": ,\n}\n");
    r = box.run({"config", "check", bad_syntax});
    BOOST_TEST(r.exit_code == EX_CONFIG, describe(r));
    BOOST_TEST(r.out.find(bad_syntax + ":3:") != std::string::npos, r.out);

    std::string bad_values = box.write_file(
        "values.json",
        R"({"strategies": {"file": {"priority": 500}, "nosuch": {}}, "unknown_key": 1})");
    r = box.run({"config", "check", bad_values});
    BOOST_TEST(r.exit_code == EX_CONFIG, describe(r));
    BOOST_TEST(r.out.find("/strategies/file/priority") != std::string::npos, r.out);
    BOOST_TEST(r.out.find("/unknown_key") != std::string::npos, r.out);

    r = box.run({"config", "check", "--json", bad_values});
    BOOST_TEST(r.exit_code == EX_CONFIG, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(doc.at("valid") == false);
    BOOST_TEST(doc.at("errors").size() >= 2u);

    r = box.run({"config", "check", box.path("missing.json")});
    expect_clean_error(r, EX_NOINPUT, "does not exist");
}

// Issue 24: zookeeper without auth leaves every lock deletable by any client of the ensemble;
// explain NAME decides as run NAME: the lock rule that matches (its capabilities, pin, TTL), a
// --require that replaces the rule's capabilities (and with them its pin), and no rule at all.
BOOST_AUTO_TEST_CASE(explain_a_name_follows_its_lock_rule) {
    cli_sandbox box(json::parse(R"({"locks": {
        "deploy-*": {"require": "exclusive|shared", "ttl_s": 30},
        "local-*": {"strategy": "simple"}}})"));
    auto r = box.run_with_config("explain", {"deploy-web", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    auto j = json::parse(r.out);
    BOOST_TEST(j["rule"] == "deploy-*", r.out);
    BOOST_TEST(j["require_from"] == "rule", r.out);
    BOOST_TEST(j["requested"] == json({"exclusive", "shared"}), r.out);
    BOOST_TEST(j["ttl_ms"] == 30000, r.out);
    BOOST_TEST(j["chosen"] == "file", r.out);  // the best local strategy with shared
    r = box.run_with_config("explain", {"local-x"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("rule: 'local-*'") != std::string::npos, r.out);
    BOOST_TEST(r.out.find("strategy: simple (pinned by the rule") != std::string::npos, r.out);
    j = json::parse(box.run_with_config("explain", {"local-x", "--json"}).out);
    BOOST_TEST(j["chosen"] == "simple");
    BOOST_TEST(j["pinned"] == "simple");
    j = json::parse(
        box.run_with_config("explain", {"local-x", "--require", "exclusive|shared", "--json"}).out);
    BOOST_TEST(j["require_from"] == "--require");
    BOOST_TEST(j["pinned"].is_null());
    j = json::parse(box.run_with_config("explain", {"other", "--json"}).out);
    BOOST_TEST(j["rule"].is_null());
    BOOST_TEST(j["require_from"] == "default");
    r = box.run_with_config("explain", {});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(r.err.find("NAME or --require") != std::string::npos, r.err);
}

// `config check` and `explain` say so (a warning: the config is valid), and not with auth.
BOOST_AUTO_TEST_CASE(config_check_and_explain_warn_of_zookeeper_without_auth) {
    const std::string warning = "any client of the ensemble can delete";
    const json open = json::parse(
        R"({"strategies": {"zookeeper": {"priority": 100,
                                         "options": {"hosts": "127.0.0.1:1"}}}})");
    cli_sandbox box(open);
    auto r = box.run({"config", "check", box.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("/strategies/zookeeper/options: warning: ") != std::string::npos, r.out);
    BOOST_TEST(r.out.find(warning) != std::string::npos, r.out);
    r = box.run({"config", "check", "--json", box.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    const auto warnings = json::parse(r.out).at("warnings");
    BOOST_TEST(warnings.size() == 1u);
    BOOST_TEST(warnings.dump().find(warning) != std::string::npos, r.out);
    r = box.run_with_config("explain", {"--require", "consensus"});
    BOOST_TEST(r.err.find("warning: strategy 'zookeeper': ") != std::string::npos, describe(r));
    BOOST_TEST(r.err.find(warning) != std::string::npos, describe(r));

    json with_auth = open;
    with_auth["strategies"]["zookeeper"]["options"]["auth"] = "digest:u:Hunter2Secret";
    cli_sandbox protected_box(with_auth);
    r = protected_box.run({"config", "check", "--json", protected_box.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out).at("warnings").empty(), r.out);
    r = protected_box.run_with_config("explain", {"--require", "consensus", "--json"});
    BOOST_TEST(r.err.find(warning) == std::string::npos, describe(r));
    BOOST_TEST(r.out.find("Hunter2") == std::string::npos, r.out);
    BOOST_TEST(r.err.find("Hunter2") == std::string::npos, r.err);
}

// A Redis Cluster without WAIT: a failover can give a name to two holders.
BOOST_AUTO_TEST_CASE(config_check_warns_of_a_redis_cluster_without_wait) {
    json config = json::parse(
        R"({"strategies": {"redis": {"options": {"cluster": ["127.0.0.1:1"],
                                                 "wait_replicas": 0}}}})");
    cli_sandbox box(config);
    auto r = box.run({"config", "check", box.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("/strategies/redis/options: warning: ") != std::string::npos, r.out);
    BOOST_TEST(r.out.find("second holder") != std::string::npos, r.out);
    config["strategies"]["redis"]["options"].erase("wait_replicas");
    cli_sandbox confirmed(config);
    r = confirmed.run({"config", "check", "--json", confirmed.config_path().string()});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out).at("warnings").empty(), r.out);
}

BOOST_AUTO_TEST_CASE(status_free_and_held) {
    cli_sandbox box;
    auto r = box.run_with_config("status", {"st"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find("free") != std::string::npos, r.out);

    auto holder =
        box.start(box.with_config("run", {"st", "-c", "touch " + box.path("ready") + "; sleep 3"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    r = box.run_with_config("status", {"st", "--json"});
    BOOST_TEST(r.exit_code == 1, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(doc.at("state") == "held_exclusive");
    BOOST_TEST(doc.at("strategy") == "file");
    // Who holds it: the file strategy knows the holding process (locksmith itself holds the
    // flock; the command only runs under it).
    BOOST_TEST(doc.at("holders").dump().find(std::to_string(holder.pid)) != std::string::npos,
               r.out);
    // Looking does not take: the holder still holds, a -n run still fails.
    r = box.run(box.with_config("run", {"-n", "st", "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);

    r = box.run_with_config("status", {"st", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out).at("state") == "free");
}

BOOST_AUTO_TEST_CASE(bad_input_gets_a_clear_message_and_a_sysexits_code) {
    cli_sandbox box;
    auto run = [&](std::vector<std::string> args) { return box.run(args); };
    std::string cfg = box.config_path().string();

    expect_clean_error(run({}), EX_USAGE, "");
    expect_clean_error(run({"frobnicate"}), EX_USAGE, "frobnicate");
    expect_clean_error(run({"run", "--config", cfg, "name"}), EX_USAGE, "no command");
    expect_clean_error(run({"run", "--config", cfg, "name", "--"}), EX_USAGE, "no command");
    expect_clean_error(run({"run", "--config", cfg}), EX_USAGE, "NAME is required");
    expect_clean_error(run({"run", "--bogus", "name", "--", "true"}), EX_USAGE, "--bogus");
    expect_clean_error(run({"run", "--config", cfg, "--strategy", "nosuch", "n", "--", "true"}),
                       EX_USAGE, "unknown strategy 'nosuch'");
    expect_clean_error(
        run({"run", "--config", cfg, "--require", "exclusive,teleport", "n", "--", "true"}),
        EX_USAGE, "teleport");
    expect_clean_error(run({"explain", "--config", cfg, "--require", "warp"}), EX_USAGE, "warp");
    expect_clean_error(run({"run", "--config", cfg, "-w", "-1", "n", "--", "true"}), EX_USAGE,
                       "-w");
    expect_clean_error(run({"run", "--config", cfg, "-E", "300", "n", "--", "true"}), EX_USAGE, "");
    expect_clean_error(run({"run", "--config", cfg, "-x", "-s", "n", "--", "true"}), EX_USAGE, "");
    expect_clean_error(run({"run", "--config", cfg, "n", "-c", "true", "--", "true"}), EX_USAGE,
                       "not both");
    expect_clean_error(run({"run", "--config", cfg, "", "--", "true"}), EX_USAGE, "");

    // Config files: missing, unreadable (a directory), not JSON, JSON but invalid.
    expect_clean_error(run({"run", "--config", box.path("nope.json"), "n", "--", "true"}),
                       EX_NOINPUT, "does not exist");
    expect_clean_error(run({"run", "--config", box.dir().string(), "n", "--", "true"}), EX_NOINPUT,
                       "directory");
    {
        // Root reads any file, so as root this runs in a child that became another user
        // (nobody), with a sandbox of its own. The child cannot use Boost.Test: it answers with
        // its exit status.
        std::string why;
        auto unreadable = run_unprivileged(
            [] {
                cli_sandbox own;
                std::string locked = own.write_file("locked.json", "{}");
                std::filesystem::permissions(locked, std::filesystem::perms::none);
                auto r = own.run({"run", "--config", locked, "n", "--", "true"});
                std::fprintf(stderr, "unreadable config: %s\n", describe(r).c_str());
                if (r.exit_code != EX_NOINPUT) return 1;
                if (r.err.rfind("locksmith: ", 0) != 0) return 2;
                if (r.err.find("cannot be read") == std::string::npos) return 3;
                if (r.err.find(locked) == std::string::npos) return 4;
                return 0;
            },
            &why);
        if (!unreadable) return skip_case(why);
        BOOST_TEST(*unreadable == 0,
                   "unreadable config: 1 wrong exit code, 2 not one clean "
                   "line, 3 no 'cannot be read', 4 no path (details on stderr)");
    }
    std::string not_json = box.write_file("not.json", "this is not json");
    expect_clean_error(run({"run", "--config", not_json, "n", "--", "true"}), EX_CONFIG, "");
    expect_clean_error(run({"strategies", "--config", not_json}), EX_CONFIG, "");
    std::string invalid =
        box.write_file("invalid.json", R"({"strategies":{"file":{"priority":"high"}}})");
    expect_clean_error(run({"run", "--config", invalid, "n", "--", "true"}), EX_CONFIG,
                       "/strategies/file/priority");

    // LOCKSMITH_CONFIG naming a missing file is the same error as --config.
    box.set_env("LOCKSMITH_CONFIG", box.path("gone.json"));
    expect_clean_error(run({"strategies"}), EX_NOINPUT, "gone.json");
    // ...and a JSON document in it is used.
    box.set_env("LOCKSMITH_CONFIG", R"({"strategies":{"file":{"priority":42}}})");
    auto r = run({"strategies", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(find_strategy(json::parse(r.out), "file").at("priority") == 42);
}

// Issue 23 point 5: a service (no HOME) and a cron job or shell (HOME set) of one user read one
// config, so they lock a name in one place: the user's config is found through the passwd
// entry, never through HOME. Here HOME's config would move the lock directory.
BOOST_AUTO_TEST_CASE(a_service_and_a_shell_of_one_user_lock_in_one_place_whatever_home_says) {
    cli_sandbox box;
    std::filesystem::create_directories(box.dir() / "home" / ".config" / "locksmith");
    std::filesystem::create_directories(box.dir() / "elsewhere");
    box.write_file(
        "home/.config/locksmith/config.json",
        json{{"strategies", {{"file", {{"options", {{"lock_dir", box.path("elsewhere")}}}}}}}}
            .dump());
    const std::string name = "config-home-" + std::to_string(::getpid());
    box.set_env("XDG_CONFIG_HOME", std::nullopt);
    box.set_env("HOME", std::nullopt);  // a systemd service
    auto service =
        box.start({"run", name, "--", "sh", "-c", "touch " + box.path("ready") + "; sleep 60"});
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    box.set_env("HOME", box.path("home"));  // a cron job, a login shell, `sudo -E`
    auto shell = box.run({"run", "-n", name, "--", "true"});
    BOOST_TEST(shell.exit_code == 1, "a second holder: " + describe(shell));
    auto a = box.run({"strategies", "--json"});
    box.set_env("HOME", std::nullopt);
    auto b = box.run({"strategies", "--json"});
    BOOST_TEST(json::parse(a.out).at("config") == json::parse(b.out).at("config"));
    ::kill(service.pid, SIGTERM);
    box.wait(service);
}

// ...and XDG_CONFIG_HOME, which a service rarely has, does not move the config either: a config
// of the user's there is an error, not followed by some processes and not by others.
BOOST_AUTO_TEST_CASE(a_config_in_xdg_config_home_is_an_error) {
    cli_sandbox box;
    std::filesystem::create_directories(box.dir() / "xdg" / "locksmith");
    box.write_file("xdg/locksmith/config.json", R"({"strategies":{"file":{"priority":33}}})");
    expect_clean_error(box.run({"strategies", "--json"}), EX_CONFIG,
                       box.path("xdg/locksmith/config.json") + " ($XDG_CONFIG_HOME) is not read");
    // A named config decides before it.
    box.set_env("LOCKSMITH_CONFIG", box.path("xdg/locksmith/config.json"));
    auto r = box.run({"strategies", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(find_strategy(json::parse(r.out), "file").at("priority") == 33);
}

// Issue 23 point 6: a config another user can change is refused however it is named, before
// it decides anything (exit 78, like an unsafe plugin).
BOOST_AUTO_TEST_CASE(a_config_others_can_change_is_refused) {
    cli_sandbox box;
    const std::string config = box.config_path().string();
    ::chmod(config.c_str(), 0666);
    const std::string why =
        config + " is not safe to use: " + config + " is writable by group or others (mode 0666)";
    expect_clean_error(box.run_with_config("run", {"n", "--", "true"}), EX_CONFIG, why);
    expect_clean_error(box.run({"config", "check", config}), EX_CONFIG, why);
    box.set_env("LOCKSMITH_CONFIG", config);
    expect_clean_error(box.run({"strategies"}), EX_CONFIG, why);
    ::chmod(config.c_str(), 0644);
    auto r = box.run({"strategies"});
    BOOST_TEST(r.exit_code == 0, describe(r));
}

BOOST_AUTO_TEST_SUITE_END()
