// SPDX-License-Identifier: MIT
// No password in anything the `locksmith` command prints: every form an endpoint or DSN can be
// written in (a URL's userinfo or query, libpq's keyword/value form with plain, quoted, escaped
// and spaced values, forms no parser accepts), for every strategy that takes one, through every
// command that reads the config (config check, text and --json; run, also -v; status; explain
// --start; strategies), on stdout and stderr alike. The endpoints are a port nobody listens on,
// so the errors of a connection that fails are read too.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_sandbox.hpp"
#include "integration/integration_support.hpp"

using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using nlohmann::json;

namespace {

// Every spelling below carries this; none of the outputs may.
const std::string secret = "S3cretPw";

struct endpoint_option {
    std::string strategy;
    std::string option;
    std::vector<json> values;
    json extra = json::object();  // options given beside each value
};

// The forms, for a server at 127.0.0.1:`port`.
std::vector<endpoint_option> endpoint_forms(int port) {
    const std::string at = "127.0.0.1:" + std::to_string(port);
    const std::string host = "host=127.0.0.1 port=" + std::to_string(port);
    // libpq's keyword/value form as a careless admin writes it: plain, quoted with a blank,
    // quoted with an escaped quote, an escaped blank, blanks around '=', a password first, an
    // unterminated quote, ODBC-style ';' separators, and a URL followed by keywords.
    const std::vector<std::string> keyword_value = {
        host + " user=app password=" + secret + " dbname=app",
        host + " user=app password='" + secret + " x' dbname=app",
        host + " user=app password='it\\'s " + secret + "' dbname=app",
        host + " user=app password=a\\ " + secret + " dbname=app",
        host + " user=app password = " + secret + " dbname=app",
        "password=" + secret + " " + host + " dbname=app",
        host + " password='" + secret,
        "host=127.0.0.1;user=app;password=" + secret + ";dbname=app",
        "postgresql://app@" + at + "/app password=" + secret,
    };
    auto with = [&](std::vector<std::string> urls) {
        urls.insert(urls.end(), keyword_value.begin(), keyword_value.end());
        return std::vector<json>(urls.begin(), urls.end());
    };
    return {
        {"pg_advisory", "dsn",
         with({"postgresql://app:" + secret + "@" + at + "/app",
               "postgresql://app@" + at + "/app?password=" + secret,
               "postgres://app:" + secret + "@" + at + "/app?sslmode=disable&password=" + secret})},
        {"sql", "dsn",
         with({"postgresql://app:" + secret + "@" + at + "/app",
               "postgresql://app@" + at + "/app?password=" + secret,
               "mysql://app:" + secret + "@" + at + "/app",
               "mysql://app@" + at + "/app?password=" + secret,
               "mysql://app:" + secret + "@localhost:" + std::to_string(port) + "/app"})},
        {"mysql_get_lock", "dsn",
         with({"mysql://app:" + secret + "@" + at + "/app",
               "mysql://app@" + at + "/app?password=" + secret,
               "mariadb://app:" + secret + "@localhost:" + std::to_string(port) + "/app"})},
        {"redis", "url",
         with({"redis://:" + secret + "@" + at + "/0", "redis://" + secret + "@" + at + "/0",
               "redis://app:" + secret + "@" + at + "/0", "redis://" + at + "/0?password=" + secret,
               "unix:///run/redis.sock?password=" + secret})},
        // Behind Sentinel: the passwords are options of their own, and one pasted into a
        // Sentinel's entry.
        {"redis",
         "sentinels",
         {json::array({at}), json::array({"app:" + secret + "@" + at}),
          json::array({at, "127.0.0.1:" + secret})},
         {{"master_name", "m"}, {"sentinel_password", secret}, {"password", secret}}},
        {"etcd", "endpoints",
         with({"http://app:" + secret + "@" + at, "http://" + at + "/?p=" + secret})},
        {"memcached", "servers", with({"app:" + secret + "@" + at, at + "?password=" + secret})},
        {"zookeeper", "hosts", with({"app:" + secret + "@" + at, at + "/?password=" + secret})},
    };
}

// The strategies this build has.
std::vector<std::string> built_strategies() {
    cli_sandbox box;
    auto r = box.run({"strategies", "--json"});
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    std::vector<std::string> names;
    const auto listing = json::parse(r.out);
    for (const auto& s : listing.at("strategies")) names.push_back(s.at("name"));
    return names;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(secrets)

BOOST_AUTO_TEST_CASE(no_command_prints_a_password_in_any_endpoint_form) {
    const auto built = built_strategies();
    const int port = locksmith::test::free_port();
    int checked = 0;
    for (const auto& form : endpoint_forms(port)) {
        if (std::find(built.begin(), built.end(), form.strategy) == built.end()) {
            BOOST_TEST_MESSAGE(form.strategy << " is not built: its forms are not tried");
            continue;
        }
        for (const auto& value : form.values) {
            json options = form.extra;
            options[form.option] = value;
            if (form.strategy == "etcd") options["request_timeout_s"] = 1;
            cli_sandbox box(json{{"strategies", {{form.strategy, {{"options", options}}}}}});
            const std::string config = box.config_path().string();
            const std::vector<std::vector<std::string>> commands = {
                {"config", "check", config},
                {"config", "check", config, "--json"},
                box.with_config("run", {"-n", "--strategy", form.strategy, "job", "--", "true"}),
                box.with_config("run",
                                {"-v", "-n", "--strategy", form.strategy, "job", "--", "true"}),
                box.with_config("status", {"--strategy", form.strategy, "job"}),
                box.with_config("status", {"--json", "--strategy", form.strategy, "job"}),
                box.with_config("explain", {"--require", "exclusive,distributed", "--start"}),
                box.with_config("explain", {"--json", "--require", "exclusive,distributed"}),
                box.with_config("strategies", {}),
                box.with_config("strategies", {"--json"}),
            };
            for (const auto& args : commands) {
                std::string command = "locksmith";
                for (const auto& a : args) command += " " + a;
                BOOST_TEST_CONTEXT(form.strategy << " " << form.option << " = " << value << "; "
                                                 << command) {
                    const cli_result r = box.run(args);
                    BOOST_TEST(r.out.find(secret) == std::string::npos, describe(r));
                    BOOST_TEST(r.err.find(secret) == std::string::npos, describe(r));
                    ++checked;
                }
            }
            // The run failed and said why: the error paths were read, not skipped.
            const auto run = box.run(commands[2]);
            BOOST_TEST(run.exit_code != 0, describe(run));
            BOOST_TEST(!run.err.empty(), describe(run));
        }
    }
    BOOST_TEST(checked > 0);
}

BOOST_AUTO_TEST_SUITE_END()
