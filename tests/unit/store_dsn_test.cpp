// SPDX-License-Identifier: MIT
// Symfony Lock's store spellings (parse_store_dsn, a config's "store"), the SQL spellings of
// Symfony's and Doctrine's docs (normalize_sql_dsn), and the errors for what is not supported.
#define BOOST_TEST_MODULE store_dsn
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/sql.hpp>

using namespace locksmith;
using nlohmann::json;

namespace {

void is_store(const std::string& dsn, const std::string& strategy, const json& options) {
    BOOST_TEST_CONTEXT(dsn) {
        const auto s = parse_store_dsn(dsn);
        BOOST_TEST(s.strategy == strategy);
        BOOST_TEST(s.options.dump() == options.dump());
    }
}

// The message of the error parse_store_dsn throws for `dsn`; the test fails when none comes.
std::string refusal(const std::string& dsn) {
    try {
        (void)parse_store_dsn(dsn);
    } catch (const invalid_argument_error& e) {
        return e.what();
    }
    BOOST_ERROR("accepted: " << dsn);
    return {};
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(symfony_local_stores) {
    is_store("flock", "file", json::object());
    is_store("flock:///var/lock/app", "file", {{"lock_dir", "/var/lock/app"}});
    is_store("semaphore", "semaphore", json::object());
    is_store("in-memory", "memory", json::object());
    BOOST_TEST(parse_store_dsn("in-memory").enable);
    is_store("null", "null", json::object());
    BOOST_TEST(!parse_store_dsn("flock").enable);
    BOOST_TEST(has(refusal("flock://var/lock"), "absolute path"));
}

BOOST_AUTO_TEST_CASE(symfony_redis_spellings) {
    is_store("redis://localhost", "redis", {{"url", "redis://localhost"}});
    is_store("redis://localhost?lazy=1", "redis", {{"url", "redis://localhost"}});
    is_store("rediss://secret@cache:6380/2", "redis", {{"url", "rediss://secret@cache:6380/2"}});
    is_store("redis://cache?dbindex=3&timeout=0.5&read_timeout=2", "redis",
             {{"command_timeout_s", 2.0}, {"connect_timeout_s", 0.5}, {"url", "redis://cache/3"}});
    is_store("redis:///var/run/redis.sock", "redis", {{"url", "unix:///var/run/redis.sock"}});
    is_store("redis://localhost?redis_cluster=1", "redis", {{"cluster", {"localhost:6379"}}});
    is_store("redis://localhost?redis_cluster=1&lazy=1", "redis",
             {{"cluster", {"localhost:6379"}}});
    is_store("redis:?host[localhost]&host[localhost:6379]&redis_cluster=1", "redis",
             {{"cluster", {"localhost:6379", "localhost:6379"}}});
    is_store("rediss://u:pw@a:7000?host[b:7001]&redis_cluster=1", "redis",
             {{"cluster", {"a:7000", "b:7001"}}, {"password", "pw"}, {"tls", true}, {"user", "u"}});
    is_store("redis:?host[s1]&host[s2:26380]&redis_sentinel=mymaster", "redis",
             {{"master_name", "mymaster"}, {"sentinels", {"s1:26379", "s2:26380"}}});

    BOOST_TEST(has(refusal("redis:?host[a]&host[b]"), "RedisArray"));
    BOOST_TEST(has(refusal("redis://a?host[b]"), "RedisArray"));
    BOOST_TEST(has(refusal("redis://a?compression=1"), "'compression' is not supported"));
    BOOST_TEST(has(refusal("redis:?host[a]=5&redis_cluster=1"), "weights"));
    BOOST_TEST(has(refusal("redis://a?redis_cluster=1&redis_sentinel=m"), "do not go together"));
    BOOST_TEST(has(refusal("redis:"), "no Redis server"));
    BOOST_TEST(has(refusal("redis://a?timeout=soon"), "timeout"));
    BOOST_TEST(has(refusal("redis://a/x"), "database number"));
    BOOST_TEST(has(refusal("rediss:?host[a]&redis_sentinel=m"), "TLS behind Sentinel"));
}

BOOST_AUTO_TEST_CASE(symfony_memcached_spellings) {
    is_store("memcached://server.com", "memcached", {{"servers", "server.com:11211"}});
    is_store("memcached:?host[localhost]&host[localhost:12345]", "memcached",
             {{"servers", "localhost:11211,localhost:12345"}});
    BOOST_TEST(has(refusal("memcached://user:hunter2@h"), "SASL"));
    BOOST_TEST(!has(refusal("memcached://user:hunter2@h"), "hunter2"));
    BOOST_TEST(has(refusal("memcached://h?retry_timeout=10"), "'retry_timeout' is not supported"));
    BOOST_TEST(has(refusal("memcached:///var/run/memcached.sock"), "Unix socket"));
}

BOOST_AUTO_TEST_CASE(symfony_sql_spellings_go_to_sql) {
    // StoreFactoryTest's PDO and DBAL spellings of the databases we speak.
    for (const char* dsn :
         {"sqlite:/tmp/sqlite.db", "mysql:host=localhost;dbname=test;",
          "pgsql:host=localhost;dbname=test;", "mysql://server.com/test",
          "mysql2://server.com/test", "pgsql://server.com/test", "postgres://server.com/test",
          "postgresql://server.com/test", "sqlite:///tmp/test", "sqlite3:///tmp/test"})
        is_store(dsn, "sql", {{"dsn", dsn}});
    // And the advisory ones to pg_advisory, as libpq URLs.
    is_store("pgsql+advisory:host=localhost;dbname=test;", "pg_advisory",
             {{"dsn", "postgresql://localhost/test"}});
    is_store("postgresql+advisory://u:p@db:5634/lock", "pg_advisory",
             {{"dsn", "postgresql://u:p@db:5634/lock"}});
    is_store("pgsql+advisory://db/lock", "pg_advisory", {{"dsn", "postgresql://db/lock"}});

    for (const char* dsn :
         {"oci:host=localhost;dbname=test;", "sqlsrv:server=localhost;Database=test",
          "mssql://server.com/test", "oci8://server.com/test"})
        BOOST_TEST(has(refusal(dsn), "not supported"), dsn);
    BOOST_TEST(has(refusal("sqlite::memory:"), "private to one connection"));
}

BOOST_AUTO_TEST_CASE(sql_takes_symfony_and_doctrine_spellings) {
    using strategies::normalize_sql_dsn;
    using strategies::parse_sql_dsn;
    BOOST_TEST(normalize_sql_dsn("pgsql://u:p@h:5432/db") == "postgresql://u:p@h:5432/db");
    BOOST_TEST(normalize_sql_dsn("mysql2://u@h/db") == "mysql://u@h/db");
    BOOST_TEST(normalize_sql_dsn("sqlite3:///var/lib/app/locks.db") ==
               "sqlite:///var/lib/app/locks.db");
    BOOST_TEST(normalize_sql_dsn("sqlite://localhost//var/lib/locks.db") ==
               "sqlite:///var/lib/locks.db");
    BOOST_TEST(normalize_sql_dsn("sqlite:////var/lib/locks.db") == "sqlite:///var/lib/locks.db");
    BOOST_TEST(normalize_sql_dsn("sqlite:/var/lib/locks.db") == "sqlite:///var/lib/locks.db");
    BOOST_TEST(normalize_sql_dsn("pgsql:host=db;port=5634;dbname=app") ==
               "postgresql://db:5634/app");
    BOOST_TEST(normalize_sql_dsn(" pgsql:host=db") == " pgsql:host=db");  // not ours: as given
    BOOST_TEST(normalize_sql_dsn("pgsql:host=db;dbname=app;user=me;password=p w;sslmode=require") ==
               "postgresql://me:p%20w@db/app?sslmode=require");
    BOOST_TEST(normalize_sql_dsn("mysql:host=127.0.0.1;port=3307;dbname=app;charset=utf8mb4") ==
               "mysql://127.0.0.1:3307/app");
    BOOST_TEST(normalize_sql_dsn("pgsql:host=::1;dbname=app") == "postgresql://[::1]/app");
    // The parsed result, as the drivers see it.
    const auto pg = parse_sql_dsn("pgsql:host=db;port=5634;dbname=app;user=me;password=secret");
    BOOST_TEST(int(pg.driver) == int(strategies::sql_dsn::kind::postgresql));
    BOOST_TEST(pg.host == "db");
    BOOST_TEST(pg.port == 5634);
    BOOST_TEST(pg.database == "app");
    BOOST_TEST(pg.user == "me");
    BOOST_TEST(pg.password == "secret");
    BOOST_TEST(pg.text == "postgresql://me:secret@db:5634/app");
    const auto my = parse_sql_dsn("mysql:host=localhost;dbname=test;");
    BOOST_TEST(int(my.driver) == int(strategies::sql_dsn::kind::mysql));
    BOOST_TEST(my.database == "test");
    BOOST_TEST(parse_sql_dsn("sqlite://localhost//tmp/x.db").path == "/tmp/x.db");

    auto refused = [](const std::string& dsn) -> std::string {
        try {
            (void)parse_sql_dsn(dsn);
        } catch (const invalid_argument_error& e) {
            return e.what();
        }
        BOOST_ERROR("accepted: " << dsn);
        return {};
    };
    BOOST_TEST(has(refused("sqlite://localhost/locks.db"), "relative"));
    BOOST_TEST(has(refused("sqlite:locks.db"), "absolute file path"));
    BOOST_TEST(has(refused("mysql:host=h;unix_socket=/run/mysqld.sock;dbname=d"), "unix_socket"));
    BOOST_TEST(has(refused("pgsql+advisory:host=h;dbname=d"), "pg_advisory"));
    // A value cannot reshape the URL it goes into (found by fuzz_sql_dsn).
    BOOST_TEST(has(refused("pgsql:host=;port=1@2;dbname=a"), "port"));
    BOOST_TEST(has(refused("pgsql:host=a@b;dbname=a"), "host"));
    // A PDO DSN's password never shows, whatever is wrong with it.
    for (const char* dsn :
         {"pgsql:host=h;password=hunter2;bogus=1", "pgsql:host=h;password=hunter2;x",
          "mysql:host=h;password=hunter2;port=x;dbname=d", "pgsql:host=h/x;password=hunter2"}) {
        const auto message = refused(dsn);
        BOOST_TEST(!has(message, "hunter2"), message);
    }
    BOOST_TEST(has(refused("pgsql:host=h;password=hunter2;bogus=1"), "'bogus'"));
}

BOOST_AUTO_TEST_CASE(symfony_zookeeper_spellings) {
    is_store("zookeeper://localhost:2181", "zookeeper", {{"hosts", "localhost:2181"}});
    is_store("zookeeper://localhost01,localhost02:2181", "zookeeper",
             {{"hosts", "localhost01:2181,localhost02:2181"}});
    is_store("zookeeper://zk", "zookeeper", {{"hosts", "zk:2181"}});
    BOOST_TEST(has(refusal("zookeeper://zk:2181/app"), "root"));
    BOOST_TEST(has(refusal("zookeeper://zk:port"), "port"));
    BOOST_TEST(has(refusal("zookeeper://a,,b"), "empty host"));
}

BOOST_AUTO_TEST_CASE(unsupported_stores_are_refused_clearly) {
    BOOST_TEST(has(refusal("mongodb://u:hunter2@db/app?collection=lock"), "MongoDB"));
    BOOST_TEST(!has(refusal("mongodb://u:hunter2@db/app?collection=lock"), "hunter2"));
    BOOST_TEST(has(refusal("mongodb+srv://db/app"), "MongoDB"));
    // A misspelt scheme is not shown beyond it: its password could be anywhere.
    for (const char* dsn : {"pgsq:host=db;password=hunter2", "db2:DATABASE=x;PWD=hunter2",
                            "odbc:DSN=x;PWD=hunter2", "sqlsrv:Server=x;PWD=hunter2"}) {
        const auto message = refusal(dsn);
        BOOST_TEST(!has(message, "hunter2"), message);
    }
    BOOST_TEST(has(refusal("pgsq:host=db;password=hunter2"), "'pgsq:...'"));
    const auto unknown = refusal("consul://localhost");
    BOOST_TEST(has(unknown, "not a store"));
    BOOST_TEST(has(unknown, "flock"));
    BOOST_TEST(has(refusal(""), "not a store"));
}

// A message of no control character and of bounded size, that shows none of `secrets`.
void clear(const std::string& message, std::initializer_list<const char*> secrets = {}) {
    BOOST_TEST(message.size() < 1024u, message.substr(0, 200));
    for (const unsigned char c : message) BOOST_TEST((c >= 0x20 && c != 0x7f), message);
    for (const char* s : secrets) BOOST_TEST(!has(message, s), message);
}

// Issue 23: what a hostile or careless config can put in a store's DSN.
BOOST_AUTO_TEST_CASE(control_characters_anywhere_are_refused_without_showing_the_dsn) {
    // Each was taken before: a host, a Sentinel master, a user name or a path with a newline or
    // a terminal escape went into the options, and a parameter's name into the message as is.
    for (const std::string& dsn : std::vector<std::string>{
             "redis://h?\x1b[2J\nlog: forged=1", "redis://h?redis_sentinel=m\x1b[2J",
             "redis://h?redis_cluster=1&host[a\nb]", "redis://ho\nst:1", "redis://us\ner:hunter2@h",
             "memcached://h\x01:1", "memcached://h?\x1b[31mred=1", "zookeeper://a\x1b,b:2181",
             "flock:///tmp/a\nb", "pgsql:host=h\x7f;dbname=a;password=hunter2",
             std::string("zookeeper://a\0b:2181", 20), "sqlite:////tmp/a\tb"}) {
        const auto message = refusal(dsn);
        clear(message, {"hunter2", "forged"});
        BOOST_TEST(has(message, "control character"), message);
    }
    BOOST_TEST(has(refusal("redis://ho\nst:1"), "(0x0a) at byte 10"));
}

BOOST_AUTO_TEST_CASE(a_huge_dsn_is_refused_with_a_short_message) {
    // Before: a 10 MB parameter name made a 20 MB message; 200,000 host[...] entries or a 10 MB
    // Sentinel master name, ZooKeeper host or lock directory became options of that size.
    std::string hosts = "redis://h?redis_cluster=1";
    for (int i = 0; i < 200000; ++i) hosts += "&host[h" + std::to_string(i) + "]";
    const std::string big(10'000'000, 'a');
    for (const std::string& dsn : std::vector<std::string>{
             hosts, "redis://h?" + big + "=1", "redis://h?redis_sentinel=" + big,
             "zookeeper://" + big, "flock:///" + big, "pgsql+advisory://h/" + big}) {
        const auto message = refusal(dsn);
        clear(message);
        BOOST_TEST(has(message, "longer than 16384 bytes"), message);
    }
    // Within the bound, a long parameter name is counted, not quoted.
    const auto message = refusal("redis://h?" + std::string(1000, 'k') + "=1");
    clear(message);
    BOOST_TEST(has(message, "parameter of 1000 characters is not supported"), message);
    // 16 KiB is plenty for a real cluster: 500 nodes by name.
    std::string many = "redis://h?redis_cluster=1";
    for (int i = 0; i < 500; ++i) many += "&host[node" + std::to_string(i) + ".example:6379]";
    BOOST_TEST(parse_store_dsn(many).options.at("cluster").size() == 501u);
}

BOOST_AUTO_TEST_CASE(deeply_nested_json_in_a_query_is_text_or_a_clear_error) {
    // A DSN is never read as JSON: nesting is a string's characters, refused where a parameter
    // does not take it, carried as text where one does.
    const std::string deep = std::string(8000, '[') + std::string(8000, ']');
    clear(refusal("redis://h?" + deep + "=1"));
    clear(refusal("redis://h?dbindex=" + deep));
    clear(refusal("memcached://h?host[" + deep + "]"));
    const auto s = parse_store_dsn("redis://h?redis_sentinel=" + deep);
    BOOST_TEST(s.options.at("master_name").get<std::string>() == deep);
}

BOOST_AUTO_TEST_CASE(a_timeout_is_decimal_seconds) {
    // std::stod reads "0x10" as 16 s; PHP, whose DSN this is, reads it as 0.
    for (const char* value : {"0x10", "1e3", "inf", "nan", "-1", "+2", " 2"})
        BOOST_TEST(has(refusal(std::string("redis://h?timeout=") + value), "number of seconds"),
                   value);
    is_store("redis://h?timeout=2.5", "redis", {{"connect_timeout_s", 2.5}, {"url", "redis://h"}});
}

BOOST_AUTO_TEST_CASE(pdo_dsns_are_redacted) {
    BOOST_TEST(redact_url("pgsql:host=db;dbname=app;password=hunter2") ==
               "pgsql:host=db;dbname=app;password=***");
    BOOST_TEST(redact_url("mysql:host=db;port=3306;dbname=app;charset=utf8") ==
               "mysql:host=db;port=3306;dbname=app;charset=***");
    // Redacting again changes nothing; a stray '@' hides everything.
    BOOST_TEST(redact_url("pgsql:host=db;dbname=app;password=***") ==
               "pgsql:host=db;dbname=app;password=***");
    BOOST_TEST(redact_url("pgsql:password=a@b;host=db") == "pgsql:***");
    // memcached's user:password@host is not a PDO DSN.
    BOOST_TEST(!has(redact_url("user:pa=ss@host:11211"), "pa"));
}

BOOST_AUTO_TEST_CASE(a_config_store_pins_its_strategy) {
    const auto c = config::parse(R"({"store": "redis://cache:6379",
        "locks": {"invoice.*": {"store": "flock:///var/lock/app", "ttl_s": 30},
                  "report.*": {"require": "shared"}}})");
    BOOST_TEST(c.strategies.at("redis").options.dump() == R"({"url":"redis://cache:6379"})");
    BOOST_TEST(c.strategies.at("file").options.dump() == R"({"lock_dir":"/var/lock/app"})");
    BOOST_REQUIRE(c.locks.size() == 3u);
    BOOST_TEST(c.locks[0].pattern == "invoice.*");
    BOOST_TEST(*c.locks[0].strategy == "file");
    BOOST_TEST(!c.locks[1].strategy.has_value());
    // The config's store: every name no rule matches, after the rules.
    BOOST_TEST(c.locks[2].pattern == "*");
    BOOST_TEST(*c.locks[2].strategy == "redis");

    const auto m = config::parse(R"({"store": "in-memory"})");
    BOOST_TEST(*m.strategies.at("memory").enabled);
}

BOOST_AUTO_TEST_CASE(a_config_store_that_cannot_be_one_is_an_error) {
    auto problem = [](const std::string& text) -> config_error {
        const auto problems = config::check(text);
        BOOST_REQUIRE(problems.size() == 1u);
        return problems.front();
    };
    auto bad = problem(R"({"locks": {"a.*": {"store": "mongodb://db/x"}}})");
    BOOST_TEST(bad.id() == "config.store");
    BOOST_TEST(bad.pointer() == "/locks/a.*/store");
    BOOST_TEST(has(bad.what(), "MongoDB"));

    auto two = problem(R"({"store": "redis://a", "locks": {"b.*": {"store": "redis://b"}}})");
    BOOST_TEST(two.id() == "config.store");
    BOOST_TEST(has(two.what(), "one strategy, one server"));
    // The same store twice is one server: fine.
    BOOST_TEST(config::check(R"({"store": "redis://a", "locks": {"b.*": {"store": "redis://a"}}})")
                   .empty());

    auto both = problem(
        R"({"store": "redis://a", "strategies": {"redis": {"options": {"url": "redis://a"}}}})");
    BOOST_TEST(has(both.what(), "in one place"));

    auto pinned = problem(R"({"locks": {"b.*": {"strategy": "file", "store": "semaphore"}}})");
    BOOST_TEST(has(pinned.what(), "say one"));

    auto off = problem(R"({"store": "in-memory", "strategies": {"memory": {"enabled": false}}})");
    BOOST_TEST(has(off.what(), "disabled"));

    auto type = problem(R"({"store": 42})");
    BOOST_TEST(type.pointer() == "/store");

    // No password in any message.
    const auto secret = config::check(R"({"store": "redis://:hunter2@a?bogus=1"})");
    BOOST_REQUIRE(secret.size() == 1u);
    BOOST_TEST(!has(secret.front().what(), "hunter2"));
}
