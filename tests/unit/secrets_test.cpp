// SPDX-License-Identifier: MIT
// No secret in any message: every URL form the redis, memcached and sql parsers see, with a
// password in its userinfo, a query parameter, a fragment or percent-encoded, and libpq's
// keyword/value form in every strategy that takes an endpoint, through every path
// that can echo it (the URL parser, the options reader, config check, the factory, a JSON syntax
// error), and redact_url, the one function that prints a URL.
#define BOOST_TEST_MODULE secrets
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/strategies/memcached.hpp>
#include <locksmith/strategies/redis.hpp>

using namespace locksmith;

namespace {

const std::string secret = "Hunter2Secret";
// "Hunter2Secret" with its 'S' percent-encoded: the decoded password must not appear either.
const std::string encoded = "Hunter2%53ecret";

void expect_no_secret(const std::string& text, const std::string& what) {
    BOOST_TEST_CONTEXT(what) {
        BOOST_TEST(text.find(secret) == std::string::npos, text);
        BOOST_TEST(text.find(encoded) == std::string::npos, text);
        BOOST_TEST(text.find("Hunter2") == std::string::npos, text);
    }
}

template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

// Every error path for one options object of `strategy`.
void expect_no_secret_anywhere(const std::string& strategy, const nlohmann::json& options) {
    const std::string context = strategy + " " + options.dump();
    strategy_registry registry;
    register_builtin_strategies(registry);
    nlohmann::json doc{{"strategies", {{strategy, {{"options", options}}}}}};
    for (const auto& e : registry.check(doc.dump()))
        expect_no_secret(e.what(), context + ", config check");
    expect_no_secret(message_of([&] { registry.validate(config::parse(doc.dump())); }),
                     context + ", validate");
    expect_no_secret(message_of([&] {
                         lock_factory factory(config::parse(doc.dump()), registry);
                         (void)factory.store_for(strategy);
                     }),
                     context + ", the factory");
}

}  // namespace

BOOST_AUTO_TEST_CASE(redis_url_forms) {
    const std::vector<std::string> urls = {
        "redis://h:6379/0?password=" + secret,
        "redis://h:6379/0?pass%77ord=" + encoded,
        "redis://h/0?auth=" + secret + "#x",
        "redis://h/0#" + secret,
        "redis://h/0?" + secret,
        "redis://u:" + secret + "@h:notaport/0",
        "redis://u:" + secret + "@h/notadb",
        "redis://u:" + secret + "/x@h/0",
        "redis://u:" + secret + "?x@h/0",
        "redis://" + secret + "@h:bad",
        "redis://:" + encoded + "%zz@h",
        "redis://:" + secret + "@[::1",
        "redis://:" + secret + "@",
        "unix:///run/r.sock?password=" + secret,
        "unix:///run/r.sock?db=" + secret,
        "rediss://u:" + secret + "@h",
        "rediss://:" + secret + "@h:6380/0?ssl_cert_reqs=none",
        "rediss://u:" + secret + "@h:bad",
        "http://u:" + secret + "@h",
    };
    for (const auto& url : urls) {
        expect_no_secret(message_of([&] { strategies::parse_redis_url(url); }), url + ", parse");
        expect_no_secret(message_of([&] {
                             strategies::redis_options::from_json({{"url", url}});
                         }),
                         url + ", from_json");
        expect_no_secret_anywhere("redis", {{"url", url}});
        expect_no_secret(redact_url(url), url + ", redact_url");
    }
    // TLS options beside a URL without TLS: refused, the URL shown redacted if at all.
    const nlohmann::json tls_without_tls = {{"url", "redis://u:" + secret + "@h:6379/0"},
                                            {"ca_file", "/etc/ssl/ca.pem"}};
    expect_no_secret(message_of([&] { strategies::redis_options::from_json(tls_without_tls); }),
                     "TLS options with redis://, from_json");
    expect_no_secret_anywhere("redis", tls_without_tls);
    strategies::redis_options in_code;
    in_code.endpoint = strategies::parse_redis_url("redis://u:" + secret + "@h:6379/0");
    in_code.cert_file = "/etc/ssl/client.pem";
    expect_no_secret(message_of([&] { strategies::make_redis_store(in_code); }),
                     "TLS options with redis://, make_redis_store");
}

BOOST_AUTO_TEST_CASE(redis_sentinel_forms) {
    // Wrong Sentinel entries, the passwords beside them, and passwords where they do not belong:
    // from_json, validation and the factory (which cannot connect to port 1) never show them.
    const std::vector<nlohmann::json> forms = {
        {{"sentinels", {"u:" + secret + "@127.0.0.1:1"}}, {"master_name", "m"}},
        {{"sentinels", {"127.0.0.1:" + secret}}, {"master_name", "m"}},
        {{"sentinels", {"127.0.0.1:1"}}, {"sentinel_password", secret}},
        {{"sentinels", {"127.0.0.1:1"}},
         {"master_name", "m"},
         {"sentinel_password", secret},
         {"password", secret}},
        {{"sentinels", {"127.0.0.1:1"}},
         {"master_name", "m"},
         {"password", secret},
         {"password_file", "/nonexistent"}},
        {{"sentinels", {"127.0.0.1:1"}},
         {"master_name", "m"},
         {"sentinel_password", secret},
         {"sentinel_password_file", "/nonexistent"}},
        {{"url", "redis://127.0.0.1:1"}, {"password", secret}},
        {{"url", "redis://:" + secret + "@127.0.0.1:1"}, {"password_file", "/nonexistent"}},
        // Redis Cluster: the same for its node entries and its password.
        {{"cluster", {"u:" + secret + "@127.0.0.1:1"}}},
        {{"cluster", {"127.0.0.1:" + secret}}},
        {{"cluster", {"127.0.0.1:1"}}, {"password", secret}},
        {{"cluster", {"127.0.0.1:1"}}, {"password", secret}, {"password_env", "NOPE"}},
        {{"cluster", {"127.0.0.1:1"}}, {"password", secret}, {"key_prefix", "{x}"}},
    };
    for (const auto& options : forms) {
        expect_no_secret(message_of([&] { strategies::redis_options::from_json(options); }),
                         options.dump() + ", from_json");
        expect_no_secret_anywhere("redis", options);
    }
}

BOOST_AUTO_TEST_CASE(memcached_server_forms) {
    const std::vector<std::string> lists = {
        "u:" + secret + "@h:11211",
        "h:11211?password=" + secret,
        "memcached://u:" + secret + "@h:11211",
        "a:11211,u:" + secret + "@b:bad",
        "[::1]:11211?password=" + secret,
        "[::1:11211/" + secret,
        "a:11211,,u:" + secret + "@b:11211",
    };
    for (const auto& servers : lists) {
        expect_no_secret(message_of([&] { strategies::parse_memcached_servers(servers); }),
                         servers + ", parse");
        expect_no_secret_anywhere("memcached", {{"servers", servers}});
    }
}

BOOST_AUTO_TEST_CASE(sql_dsn_forms) {
    // Port 1 on the loopback refuses at once: the driver's own connection error is checked too.
    const std::vector<std::string> dsns = {
        "postgresql://u:" + secret + "@127.0.0.1:1/db",
        "postgresql://u:" + encoded + "@127.0.0.1:1/db?sslmode=disable",
        "postgresql://u:" + secret + "@127.0.0.1:1/db?password=" + secret,
        "postgres://u:" + secret + "@127.0.0.1:notaport/db",
        "mysql://u:" + secret + "@127.0.0.1:1/db",
        "mysql://u:" + encoded + "@127.0.0.1:1/db",
        "mysql://u:" + secret + "@127.0.0.1:1/db?password=" + secret,
        "mysql://u:" + secret + "@127.0.0.1:1",
        "mysql://u:" + secret + "/x@h/db",
        "mysql://u:" + encoded + "%zz@h/db",
        "oracle://u:" + secret + "@h/db",
        // TLS parameters (issue 24): a client key's passphrase (libpq's sslpassword), a file that
        // does not exist, a password where a parameter should be, bad values.
        "postgresql://u:" + secret +
            "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/" +
            "ca.pem&sslcert=/nonexistent/c.pem&sslkey=/nonexistent/c.key&sslpassword=" + secret,
        "postgresql://u:" + secret + "@127.0.0.1:1/db?sslrootcert=/nonexistent/ca.pem",
        "mysql://u:" + secret +
            "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        "mysql://u:" + secret + "@127.0.0.1:1/db?sslcert=/nonexistent/c.pem&sslkey=/nonexistent/k",
        "mysql://u:" + secret + "@127.0.0.1:1/db?sslmode=" + secret,
        "mysql://u:" + secret + "@127.0.0.1:1/db?" + secret,
        "mysql://u@127.0.0.1:1/db?" + secret,
        "mysql://u@127.0.0.1:1/db?sslrootcert=" + secret + "&sslrootcert=" + secret,
    };
    for (const auto& dsn : dsns) {
        expect_no_secret_anywhere("sql", {{"dsn", dsn}});
        expect_no_secret(redact_url(dsn), dsn + ", redact_url");
    }
}

// libpq's keyword/value form and its careless variants, which no strategy accepts: the refusal
// must not quote the password (it did, through a redact_url that knew only URLs).
BOOST_AUTO_TEST_CASE(keyword_value_dsns) {
    const std::string where = "host=127.0.0.1 port=1 user=app ";
    const std::vector<std::string> dsns = {
        where + "password=" + secret + " dbname=app",
        where + "password='" + secret + " x' dbname=app",
        where + "password='it\\'s " + secret + "' dbname=app",
        where + "password=a\\ " + secret + " dbname=app",
        where + "password = " + secret + " dbname=app",
        where + "password\t=\t'" + secret,
        "password=" + secret,
        "host=h;user=app;password=" + secret + ";dbname=app",
        "host=" + secret + "'x dbname=app",
        where + secret,
        "postgresql://app@127.0.0.1:1/app password=" + secret,
        "postgresql://app@127.0.0.1:1/app\tpassword=" + secret,
    };
    for (const auto& dsn : dsns) {
        for (const char* strategy : {"sql", "pg_advisory", "mysql_get_lock"})
            expect_no_secret_anywhere(strategy, {{"dsn", dsn}});
        expect_no_secret_anywhere("redis", {{"url", dsn}});
        expect_no_secret_anywhere("etcd", {{"endpoints", dsn}});
        expect_no_secret_anywhere("memcached", {{"servers", dsn}});
        expect_no_secret_anywhere("zookeeper", {{"hosts", dsn}});
        expect_no_secret(redact_url(dsn), dsn + ", redact_url");
    }
}

// zookeeper's auth (digest:USER:PASSWORD) in every wrong form, and a right one on a server that
// does not answer; and auth_file: a file of the wrong form or mode, whose content no message
// quotes (read_secret_file, the helper every strategy's password file goes through).
BOOST_AUTO_TEST_CASE(zookeeper_auth_forms) {
    const std::vector<std::string> auths = {
        "digest:" + secret,
        "digest::" + secret,
        "digest:u:" + secret + "\n",
        "sasl:u:" + secret,
        secret,
        "digest:u:" + secret,
        "digest:" + secret + ":x",
    };
    for (const auto& auth : auths)
        expect_no_secret_anywhere(
            "zookeeper", {{"hosts", "127.0.0.1:1"}, {"connect_timeout_ms", 50}, {"auth", auth}});
    const std::string dir = "/tmp/locksmith-secrets-test-" + std::to_string(::getpid());
    const std::string file = dir + "/auth";  // a secret file's folder is its owner's alone
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    for (const auto& [content, mode] :
         std::vector<std::pair<std::string, mode_t>>{{"digest:u:" + secret, 0644},
                                                     {"digest:u:" + secret, 0600},
                                                     {secret, 0600},
                                                     {"sasl:" + secret + "\n", 0600}}) {
        std::FILE* f = std::fopen(file.c_str(), "w");
        BOOST_REQUIRE(f);
        std::fputs(content.c_str(), f);
        std::fclose(f);
        ::chmod(file.c_str(), mode);
        expect_no_secret_anywhere(
            "zookeeper",
            {{"hosts", "127.0.0.1:1"}, {"connect_timeout_ms", 50}, {"auth_file", file}});
        if (mode != 0600)
            expect_no_secret(message_of([&] { (void)read_secret_file(file, "test"); }),
                             "read_secret_file, mode " + std::to_string(mode));
        else
            // One trailing newline is not part of the secret.
            BOOST_TEST(read_secret_file(file, "test") + (content.back() == '\n' ? "\n" : "") ==
                       content);
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
}

// Every remote strategy's secret from a file (`<name>_file`) or an environment variable
// (`<name>_env`), on a server that does not answer: no path shows it. The options reader takes one
// of the three forms, an absolute path and a variable's name; resolve_secret names the variable
// or file when it cannot give the secret.
BOOST_AUTO_TEST_CASE(secrets_from_a_file_or_the_environment) {
    const std::string dir = "/tmp/locksmith-secrets-env-" + std::to_string(::getpid());
    const std::string file = dir + "/password";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    std::FILE* f = std::fopen(file.c_str(), "w");
    BOOST_REQUIRE(f);
    std::fputs(("digest:u:" + secret + "\n").c_str(), f);
    std::fclose(f);
    ::chmod(file.c_str(), 0600);
    ::setenv("LOCKSMITH_TEST_SECRET", ("digest:u:" + secret).c_str(), 1);
    const std::vector<std::pair<std::string, nlohmann::json>> cases = {
        {"etcd", {{"endpoints", "http://127.0.0.1:1"}, {"dial_timeout_s", 0.05}, {"user", "u"}}},
        {"pg_advisory", {{"dsn", "postgresql://u@127.0.0.1:1/db"}, {"connect_timeout_s", 0.05}}},
        {"sql", {{"dsn", "postgresql://u@127.0.0.1:1/db"}, {"connect_timeout_s", 0.05}}},
        {"sql", {{"dsn", "mysql://u@127.0.0.1:1/db"}, {"connect_timeout_s", 0.05}}},
        {"mysql_get_lock", {{"dsn", "mysql://u@127.0.0.1:1/db"}, {"connect_timeout_s", 0.05}}},
        {"zookeeper", {{"hosts", "127.0.0.1:1"}, {"connect_timeout_ms", 50}}},
    };
    for (const auto& [strategy, base] : cases) {
        const std::string name = strategy == "zookeeper" ? "auth" : "password";
        auto from_file = base, from_env = base;
        from_file[name + "_file"] = file;
        from_env[name + "_env"] = "LOCKSMITH_TEST_SECRET";
        expect_no_secret_anywhere(strategy, from_file);
        expect_no_secret_anywhere(strategy, from_env);
        // One form only; a path that is absolute; a variable's name.
        auto both = from_file;
        both[name + "_env"] = "LOCKSMITH_TEST_SECRET";
        auto relative = base, bad_name = base;
        relative[name + "_file"] = "password";
        bad_name[name + "_env"] = "NOT A NAME";
        for (const auto& wrong : {both, relative, bad_name}) {
            strategy_registry registry;
            register_builtin_strategies(registry);
            nlohmann::json doc{{"strategies", {{strategy, {{"options", wrong}}}}}};
            BOOST_TEST(!registry.check(doc.dump()).empty(), strategy << " " << wrong.dump());
        }
    }
    secret_source from;
    from.env = "LOCKSMITH_TEST_SECRET";
    BOOST_TEST(resolve_secret("", from, "etcd", "password") == "digest:u:" + secret);
    ::unsetenv("LOCKSMITH_TEST_SECRET");
    const auto unset = message_of([&] { (void)resolve_secret("", from, "etcd", "password"); });
    BOOST_TEST(unset.find("LOCKSMITH_TEST_SECRET") != std::string::npos, unset);
    BOOST_TEST(unset.find("password_env") != std::string::npos, unset);
    from = {file, ""};
    BOOST_TEST(resolve_secret("", from, "etcd", "password") == "digest:u:" + secret);
    BOOST_TEST(resolve_secret("inline", {}, "etcd", "password") == "inline");
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
}

// mysql_get_lock: a password in the DSN, and a password_file of the wrong mode, of the right one
// on a server that does not answer, and beside a DSN that has a password too.
BOOST_AUTO_TEST_CASE(mysql_get_lock_password_forms) {
    for (const auto& dsn : {"mysql://app:" + secret + "@127.0.0.1:1/app",
                            "mysql://app:" + encoded + "@127.0.0.1:1/app?sslmode=verify-full",
                            "mariadb://app:" + secret + "@127.0.0.1:1/app?sslrootcert=" + secret,
                            "mysql://app:" + secret + "@127.0.0.1:1/"})
        expect_no_secret_anywhere("mysql_get_lock", {{"dsn", dsn}, {"connect_timeout_s", 0.05}});
    const std::string dir = "/tmp/locksmith-secrets-test-my-" + std::to_string(::getpid());
    const std::string file = dir + "/password";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    for (const mode_t mode : {0644, 0600}) {
        std::FILE* f = std::fopen(file.c_str(), "w");
        BOOST_REQUIRE(f);
        std::fputs((secret + "\n").c_str(), f);
        std::fclose(f);
        ::chmod(file.c_str(), mode);
        expect_no_secret_anywhere("mysql_get_lock", {{"dsn", "mysql://app@127.0.0.1:1/app"},
                                                     {"connect_timeout_s", 0.05},
                                                     {"password_file", file}});
        expect_no_secret_anywhere(
            "mysql_get_lock", {{"dsn", "mysql://app:x@127.0.0.1:1/app"}, {"password_file", file}});
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
}

BOOST_AUTO_TEST_CASE(json_syntax_errors_do_not_quote_the_document) {
    // nlohmann's message ends with the token it was reading ("last read: '...'"), which may be
    // the URL with its password.
    const std::string url_start = R"({"strategies": {"redis": {"options": {"url": "redis://:)";
    const std::vector<std::string> texts = {
        url_start + secret + "\n@h\"}}}}",  // a raw newline in a string
        url_start + secret,                 // unterminated
        "{\"x\": " + secret + "}",          // a bare word
    };
    for (const auto& text : texts) {
        expect_no_secret(message_of([&] { config::parse(text); }), text + ", parse");
        for (const auto& e : config::check(text)) expect_no_secret(e.what(), text + ", check");
    }
}

BOOST_AUTO_TEST_CASE(redact_url_keeps_what_helps_and_hides_the_rest) {
    BOOST_TEST(redact_url("redis://alice:" + secret + "@example.org:6380/2") ==
               "redis://alice:***@example.org:6380/2");
    BOOST_TEST(redact_url("redis://" + secret + "@h") == "redis://***@h");
    BOOST_TEST(redact_url("redis://:" + secret + "@h") == "redis://:***@h");
    BOOST_TEST(redact_url("redis://h:6379/0?db=3&password=" + secret) ==
               "redis://h:6379/0?db=3&password=***");
    BOOST_TEST(redact_url("unix:///run/r.sock?db=4") == "unix:///run/r.sock?db=4");
    BOOST_TEST(redact_url("h:11211") == "h:11211");
    BOOST_TEST(redact_url("u:" + secret + "@h:11211") == "u:***@h:11211");
    // A userinfo without ':' is the user in the URLs of PostgreSQL and MySQL.
    BOOST_TEST(redact_url("postgresql://app@h:5432/db?password=" + secret) ==
               "postgresql://app@h:5432/db?password=***");
    BOOST_TEST(redact_url("mysql://app@h/db") == "mysql://app@h/db");
    BOOST_TEST(redact_url("postgresql://app:" + secret + "@h/db") == "postgresql://app:***@h/db");
    // A blank: no part after the scheme is shown, since a password may have the blank in it
    // (found by tests/fuzz/fuzz_pg_dsn), and redacting again changes nothing.
    BOOST_TEST(redact_url("postgresql://h/db password=" + secret) == "postgresql://***");
    BOOST_TEST(redact_url("postgresql://u:" + secret + " x@h/db") == "postgresql://***");
    BOOST_TEST(redact_url(redact_url("redis://h/0 ***")) == "redis://***");
    // Empty query parameters are kept, so that a second redaction changes nothing
    // (fuzz_redact_url).
    BOOST_TEST(redact_url("http://:" + secret + "@h?mb=4&p,a&&") == "http://:***@h?mb=***&***&&");
    // Keyword/value: where to connect stays readable, every other value does not.
    BOOST_TEST(redact_url("host=db.example port=5432 user=app password='" + secret +
                          " x' dbname=app sslmode=require") ==
               "host=db.example port=5432 user=app password=*** dbname=app sslmode=***");
    BOOST_TEST(redact_url(" host = /run/pg  password=" + secret) == "host=/run/pg password=***");
    BOOST_TEST(redact_url("host=h;password=" + secret) == "host=***");
    BOOST_TEST(redact_url("host=h password='" + secret) == "host=h password=***");
    BOOST_TEST(redact_url("host=h " + secret + " x") == "host=h ***");
    // A user name shows only when plain: no escape sequence or other control byte reaches a
    // terminal through a message, whatever the scheme.
    BOOST_TEST(redact_url("redis://u\x1b[2J:" + secret + "@h") == "redis://***@h");
    BOOST_TEST(redact_url("postgresql://u\x01@h/db") == "postgresql://***@h/db");
    BOOST_TEST(redact_url("redis://app.user-1_a:" + secret + "@h") == "redis://app.user-1_a:***@h");
}
