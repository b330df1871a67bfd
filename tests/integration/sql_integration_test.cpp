// SPDX-License-Identifier: MIT
// The sql strategy against real databases: a SQLite file of the test's own, the shared
// PostgreSQL and MariaDB of scripts/services.sh (LOCKSMITH_TEST_POSTGRES_DSN,
// LOCKSMITH_TEST_MARIADB_DSN) and, for the fault and password cases, a private PostgreSQL this
// test initialises, starts and stops itself.
#define BOOST_TEST_MODULE sql_integration
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <tuple>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/sql.hpp>
#ifdef LOCKSMITH_TEST_PG_ADVISORY
#include <locksmith/strategies/pg_advisory.hpp>
#endif

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/entries/sql.hpp"
#include "support/forwarding_store.hpp"
#include "support/printers.hpp"
#include "support/skip_report.hpp"
#include "support/suite_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using strategies::sql_options;

namespace {

using test::mariadb_variable;
using test::postgres_variable;
using test::sql_admin_exec;
using test::sqlite_test_dir;

sql_options options_for(const std::string& dsn, const std::string& table = "locksmith_it_keys") {
    return test::sql_test_options(dsn, table, 1000ms, 2000ms);
}

std::string sqlite_dsn() {
    return test::sqlite_test_dsn("it.db");
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name,
                     std::chrono::milliseconds ttl = 30s) {
    lock_options o;
    o.ttl = ttl;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

// The message of the backend_error `f` throws ("" and a test failure when it throws none).
template <class F>
std::string backend_error_of(F f) {
    try {
        f();
    } catch (const backend_error& e) {
        BOOST_TEST(e.backend() == "sql");
        return e.what();
    }
    BOOST_ERROR("no backend_error");
    return "";
}

// Whether retrying may help, by the backend_error `f` throws (and a test failure when none).
template <class F>
error_kind kind_of(F f) {
    try {
        f();
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.native_code() << ": " << e.what());
        return e.kind();
    }
    BOOST_ERROR("no backend_error");
    return error_kind::unknown;
}

std::string unique_table(const char* what) {
    return std::string("locksmith_") + what + "_" + std::to_string(::getpid());
}

// ---------------------------------------------------------------------------------------------
// Cases every driver runs.

// Issue 25: a refresh whose server stalls gives up at the lease's end. MariaDB's client has no
// per-call deadline: its socket is shut down then.
void stuck_refresh_gives_up_at_the_lease_end(const std::string& dsn) {
    const auto o = options_for(dsn);
    test::stuck_refresh_gives_up_at_the_lease_end(
        o.dsn.host, o.dsn.port, [&](const test::tcp_fault_proxy& proxy) {
            // The DSN's text (which libpq reads) with the proxy's port.
            const std::string port = ":" + std::to_string(o.dsn.port) + "/";
            const auto at = o.dsn.text.find(port);
            BOOST_REQUIRE(at != std::string::npos);
            auto proxied = o;
            proxied.dsn = strategies::parse_sql_dsn(o.dsn.text.substr(0, at) + ":" +
                                                    std::to_string(proxy.port()) + "/" +
                                                    o.dsn.text.substr(at + port.size()));
            proxied.command_timeout = 30s;
            return strategies::make_sql_store(proxied);
        });
}

void odd_names(const std::string& dsn) {
    auto s = strategies::make_sql_store(options_for(dsn));
    const std::string pid = std::to_string(::getpid());
    const std::vector<std::string> names = {
        "quote ' and \" and ` and \\ " + pid,
        "'; DROP TABLE locksmith_it_keys; -- " + pid,
        std::string("nul\0byte", 8) + pid,
        std::string("nul\0other", 9) + pid,
        "ünïcödé ✓ " + pid,
        std::string(max_name_length, 'x'),
    };
    for (const auto& name : names) {
        BOOST_TEST_CONTEXT("name of " << name.size() << " bytes") {
            auto a = make_lock(s, name);
            auto b = make_lock(s, name);
            BOOST_TEST(a.try_lock());
            BOOST_TEST(!b.try_lock());
            a.unlock();
            BOOST_TEST(b.try_lock());
            b.unlock();
        }
    }
    // Names that differ only after a NUL are different locks.
    auto first = make_lock(s, names[2]);
    auto second = make_lock(s, names[3]);
    BOOST_TEST(first.try_lock());
    BOOST_TEST(second.try_lock());
    first.unlock();
    second.unlock();
    // The table survived the name that tried to drop it.
    auto after = make_lock(s, "after." + pid);
    BOOST_TEST(after.try_lock());
    after.unlock();
}

void bad_ttls(const std::string& dsn) {
    auto s = strategies::make_sql_store(options_for(dsn));
    key k(test::unique_resource("ttl"));
    // Below the database clock's resolution (1 ms): refused, never a lock without expiry.
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, 0ms), invalid_argument_error);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, -5ms), invalid_argument_error);
    BOOST_TEST(!s->holds(k));
    // 1 ms is honoured: the grant expires, and another owner gets it with a larger token.
    BOOST_REQUIRE(s->try_acquire(k, lock_mode::exclusive, 1ms));
    const auto first = s->fencing_token(k);
    BOOST_CHECK_THROW(s->refresh(k, 0ms), invalid_argument_error);
    key other(k.resource());
    bool granted = false;
    for (int i = 0; i < 1000 && !granted; ++i) {
        granted = s->try_acquire(other, lock_mode::exclusive, 30s);
        if (!granted) std::this_thread::sleep_for(2ms);
    }
    BOOST_TEST(granted);
    BOOST_TEST(*s->fencing_token(other) > *first);
    BOOST_TEST(!s->refresh(k, 30s));
    s->release(other);
}

// Release keeps the row: its fence survives, and a later grant's token is larger.
void release_keeps_the_counter(const std::string& dsn) {
    auto s = strategies::make_sql_store(options_for(dsn));
    const auto name = test::unique_resource("counter");
    std::uint64_t previous = 0;
    for (int i = 0; i < 5; ++i) {
        auto lock = make_lock(s, name);
        BOOST_REQUIRE(lock.try_lock());
        const auto token = lock.fencing_token();
        BOOST_REQUIRE(token.has_value());
        BOOST_TEST(*token > previous);
        previous = *token;
        BOOST_TEST(s->status(name).held == lock_status::state::held_exclusive);
        lock.unlock();
        BOOST_TEST(s->status(name).held == lock_status::state::free);
    }
}

void missing_table(const std::string& dsn) {
    auto o = options_for(dsn, unique_table("missing"));
    o.create_table = false;
    const auto message = backend_error_of([&] { strategies::make_sql_store(o); });
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find(o.table) != std::string::npos);
    BOOST_TEST(message.find("create_table") != std::string::npos);
    BOOST_TEST((kind_of([&] { strategies::make_sql_store(o); }) == error_kind::permanent));
    if (!o.dsn.password.empty()) BOOST_TEST(message.find(o.dsn.password) == std::string::npos);
    // With create_table (the default) the same table is made on first use.
    o.create_table = true;
    auto s = strategies::make_sql_store(o);
    auto lock = make_lock(s, test::unique_resource("created"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    sql_admin_exec(o, "DROP TABLE " + o.table);
}

void wrong_shape(const std::string& dsn) {
    auto o = options_for(dsn, unique_table("shape"));
    sql_admin_exec(
        o, "CREATE TABLE " + o.table + " (key_id VARCHAR(64) PRIMARY KEY, owner VARCHAR(10))");
    const auto message = backend_error_of([&] {
        auto s = strategies::make_sql_store(o);
        key k(test::unique_resource("shape"));
        s->try_acquire(k, lock_mode::exclusive, 30s);
    });
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find(o.table) != std::string::npos);
    BOOST_TEST(message.find("does not have the columns") != std::string::npos);
    if (!o.dsn.password.empty()) BOOST_TEST(message.find(o.dsn.password) == std::string::npos);
    BOOST_TEST((kind_of([&] {
                    auto s = strategies::make_sql_store(o);
                    key k(test::unique_resource("shape"));
                    s->try_acquire(k, lock_mode::exclusive, 30s);
                }) == error_kind::permanent));
    sql_admin_exec(o, "DROP TABLE " + o.table);
}

// `dsn` with its database replaced.
std::string with_database(const std::string& dsn, const std::string& database) {
    return dsn.substr(0, dsn.rfind('/') + 1) + database;
}
// `dsn` with its password (which must be there) replaced.
std::string with_password(const std::string& dsn, const std::string& password) {
    const auto start = dsn.find(':', dsn.find("://") + 3) + 1;
    return dsn.substr(0, start) + password + dsn.substr(dsn.rfind('@'));
}

void unknown_database(const std::string& dsn) {
    auto o = options_for(with_database(dsn, "locksmith_no_such_db"));
    const auto message = backend_error_of([&] { strategies::make_sql_store(o); });
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find("locksmith_no_such_db") != std::string::npos);
    if (!o.dsn.password.empty()) BOOST_TEST(message.find(o.dsn.password) == std::string::npos);
    // Someone must create it: trying again does not help.
    BOOST_TEST((kind_of([&] { strategies::make_sql_store(o); }) == error_kind::permanent));
}

void wrong_password(const std::string& dsn) {
    const std::string wrong = "wr0ng-Secret-pw";
    auto o = options_for(with_password(dsn, wrong));
    const auto message = backend_error_of([&] { strategies::make_sql_store(o); });
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find(wrong) == std::string::npos);
    BOOST_TEST(message.find("***") != std::string::npos);  // the DSN, redacted
    BOOST_TEST((kind_of([&] { strategies::make_sql_store(o); }) == error_kind::permanent));
}

// ---------------------------------------------------------------------------------------------
// TLS, against the users of scripts/services.sh that may connect only over TLS: DSNs
// scheme://user:password@127.0.0.1:PORT/db?sslmode=verify-full&sslrootcert=DIR/ca.pem.

std::string replaced(std::string text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, "the TLS DSN has no " << from);
    return text.replace(at, from.size(), to);
}

// `dsn` refused at connection, for good, in a message that names `shown` (the endpoint) and
// not the password; returns the message.
std::string refused_for_good(const std::string& dsn, const std::string& password,
                             const std::string& shown) {
    try {
        strategies::make_sql_store(options_for(dsn));
        BOOST_ERROR("connected: " << shown);
    } catch (const backend_error& e) {
        const std::string message = e.what();
        BOOST_TEST_MESSAGE(e.native_code() << ": " << message);
        BOOST_TEST((e.kind() == error_kind::permanent), message);
        BOOST_TEST(message.find(shown) != std::string::npos, message);
        BOOST_TEST(message.find(password) == std::string::npos, message);
        return message;
    }
    return "";
}

// `wrong_host`: the DSN through a host name the server's certificate does not name (127.0.0.1
// and localhost), which still reaches the server.
void tls_refusals(const std::string& dsn, const std::string& password, const std::string& plain,
                  const std::string& wrong_host, const std::string& wrong_host_shown) {
    const std::string where =
        dsn.substr(dsn.find('@') + 1, dsn.find('/', dsn.find('@')) - dsn.find('@') - 1);
    BOOST_TEST_CONTEXT("without TLS") {
        refused_for_good(plain, password, where);
    }
    BOOST_TEST_CONTEXT("a CA that did not sign the server's certificate") {
        refused_for_good(replaced(dsn, "/ca.pem", "/other-ca.pem"), password, where);
    }
    BOOST_TEST_CONTEXT("a host name the certificate does not have") {
        refused_for_good(wrong_host, password, wrong_host_shown);
    }
    // Naming the CA without sslmode verifies the host too.
    BOOST_TEST_CONTEXT("a host name the certificate does not have, sslmode left out") {
        refused_for_good(replaced(wrong_host, "sslmode=verify-full&", ""), password,
                         wrong_host_shown);
    }
    BOOST_TEST_CONTEXT("over TLS, verified") {
        auto s = strategies::make_sql_store(options_for(dsn));
        auto a = make_lock(s, test::unique_resource("tls"));
        BOOST_TEST(a.try_lock());
        a.unlock();
    }
}

// The password of `dsn` (user:PASSWORD@) kept out of the config: a DSN without it and the
// password from a file of its owner's alone, or from an environment variable, connects; a wrong
// one is refused without being shown; a DSN with a password and a password option is refused.
// With `strategy` "pg_advisory" the same through that strategy's options.
void password_from_outside(const std::string& dsn, const std::string& password,
                           const std::string& strategy) {
    const auto without = replaced(dsn, ":" + password + "@", "@");
    const std::string dir = "/tmp/locksmith-sql-secret-" + std::to_string(::getpid());
    const std::string file = dir + "/password";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    std::ofstream(file) << password << "\n";
    BOOST_REQUIRE(::chmod(file.c_str(), 0600) == 0);
    const auto connect = [&](const nlohmann::json& secret, const std::string& with_dsn) {
        auto options = secret;
        options["dsn"] = with_dsn;
#ifdef LOCKSMITH_TEST_PG_ADVISORY
        if (strategy == "pg_advisory") {
            auto lock = make_lock(strategies::make_pg_advisory_store(
                                      strategies::pg_advisory_options::from_json(options)),
                                  test::unique_resource("secret"));
            BOOST_TEST(lock.try_lock());
            return;
        }
#endif
        options["table"] = "locksmith_it_keys";
        auto lock =
            make_lock(strategies::make_sql_store(strategies::sql_options::from_json(options)),
                      test::unique_resource("secret"));
        BOOST_TEST(lock.try_lock());
    };
    BOOST_TEST_CONTEXT("password_file") {
        connect({{"password_file", file}}, without);
    }
    BOOST_TEST_CONTEXT("password_env") {
        ::setenv("LOCKSMITH_TEST_SECRET", password.c_str(), 1);
        connect({{"password_env", "LOCKSMITH_TEST_SECRET"}}, without);
    }
    BOOST_TEST_CONTEXT("a wrong password from the environment") {
        ::setenv("LOCKSMITH_TEST_SECRET", "Wr0ng-Secret", 1);
        try {
            connect({{"password_env", "LOCKSMITH_TEST_SECRET"}}, without);
            BOOST_ERROR("a wrong password was accepted");
        } catch (const backend_error& e) {
            BOOST_TEST((e.kind() == error_kind::permanent), e.what());
            BOOST_TEST(std::string(e.what()).find("Wr0ng-Secret") == std::string::npos, e.what());
        }
    }
    ::unsetenv("LOCKSMITH_TEST_SECRET");
    BOOST_TEST_CONTEXT("a password in the DSN and in a file") {
        BOOST_CHECK_THROW(connect({{"password_file", file}}, dsn), invalid_argument_error);
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
}

void unreachable_server(const std::string& scheme) {
    // A closed port: refused at once; the password never shows.
    const std::string dsn =
        scheme + "://user:Sup3r-Secret@127.0.0.1:" + std::to_string(test::free_port()) + "/db";
    const auto message = backend_error_of([&] { strategies::make_sql_store(options_for(dsn)); });
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find("Sup3r-Secret") == std::string::npos);
    BOOST_TEST(message.find("127.0.0.1") != std::string::npos);
    // The server may be up later: worth trying again.
    BOOST_TEST(
        (kind_of([&] { strategies::make_sql_store(options_for(dsn)); }) == error_kind::transient));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(options)

BOOST_AUTO_TEST_CASE(dsn_forms_and_errors_without_the_password) {
    auto pg =
        strategies::parse_sql_dsn("postgresql://u%40x:p%2Fw@db.example:6543/app?sslmode=disable");
    BOOST_TEST(int(pg.driver) == int(strategies::sql_dsn::kind::postgresql));
    BOOST_TEST(pg.user == "u@x");
    BOOST_TEST(pg.password == "p/w");
    BOOST_TEST(pg.host == "db.example");
    BOOST_TEST(pg.port == 6543);
    BOOST_TEST(pg.database == "app");
    BOOST_TEST(pg.redacted().find("p%2Fw") == std::string::npos);
    auto my = strategies::parse_sql_dsn("mysql://u:pw@[::1]:3306/app");
    BOOST_TEST(my.host == "::1");
    BOOST_TEST(my.database == "app");
    // TLS: libpq's names; a certificate without sslmode means verify-full.
    using tls = strategies::sql_dsn::tls_mode;
    BOOST_TEST(int(my.tls) == int(tls::disable));
    auto verified = strategies::parse_sql_dsn("mysql://u:pw@h:3306/app?sslrootcert=/etc/c%20a.pem");
    BOOST_TEST(int(verified.tls) == int(tls::verify_full));
    BOOST_TEST(verified.tls_ca == "/etc/c a.pem");
    auto client = strategies::parse_sql_dsn(
        "mysql://u:pw@h/app?sslmode=require&sslcert=/c.pem&sslkey=/c.key");
    BOOST_TEST(int(client.tls) == int(tls::require));
    BOOST_TEST(client.tls_cert == "/c.pem");
    BOOST_TEST(client.tls_key == "/c.key");
    auto lite = strategies::parse_sql_dsn("sqlite:///var/lib/app/locks.db");
    BOOST_TEST(lite.path == "/var/lib/app/locks.db");
    for (const char* bad :
         {"sqlite://relative.db", "sqlite:///dir/", "oracle://u:Hidden-pw1@h/db",
          "mysql://u:Hidden-pw1@h:99999/db", "mysql://u:Hidden-pw1@h/db?ssl=1",
          "mysql://u:Hidden-pw1@h/db?sslmode=verify-ca",
          "mysql://u:Hidden-pw1@h/db?sslmode=disable&sslrootcert=/ca.pem",
          "mysql://u:Hidden-pw1@h/db?sslcert=/c.pem",
          "mysql://u:Hidden-pw1@h/db?sslmode=require&sslmode=require",
          "mysql://u:Hidden-pw1@h/db?sslrootcert=", "mysql://u:Hidden-pw1@h/db#x",
          "mysql://u:Hidden-pw1@h/db?sslrootcert=/a%00b", "mysql://u:Hidden-pw1@h:3306",
          "postgresql://u:Hidden-pw1@h:x/db", "postgresql://u:Hidden%2-pw1@h/db",
          // An IPv6 address without brackets: host "fe80:" on port 1.
          "mysql://u:Hidden-pw1@fe80::1/db", "mysql://u:Hidden-pw1@a]b/db"}) {
        BOOST_TEST_CONTEXT(bad) {
            try {
                strategies::parse_sql_dsn(bad);
                BOOST_ERROR("accepted");
            } catch (const invalid_argument_error& e) {
                BOOST_TEST(std::string(e.what()).find("Hidden") == std::string::npos, e.what());
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(table_and_schema_must_be_plain_identifiers) {
    for (const char* bad : {"x; DROP TABLE y", "a.b", "1abc", "", "quote\"d", "a b",
                            "x123456789012345678901234567890123456789012345678901234567890123"}) {
        BOOST_TEST_CONTEXT(bad) {
            BOOST_CHECK_THROW(
                sql_options::from_json({{"dsn", "sqlite:///tmp/x/l.db"}, {"table", bad}}),
                config_error);
        }
    }
    auto o = sql_options::from_json({{"dsn", "sqlite:///tmp/x/l.db"}, {"table", "_Locks_2"}});
    BOOST_TEST(o.table == "_Locks_2");
    BOOST_TEST(o.schema == "");
    // schema.table, each part plain; never a schema that is one per session or connection.
    const std::string pg = "postgresql://u@h/db", my = "mysql://u@h/db", lite = "sqlite:///t/l.db";
    for (const auto& [dsn, bad] :
         std::vector<std::pair<std::string, std::string>>{{lite, "temp.locks"},
                                                          {lite, "other.locks"},
                                                          {pg, "pg_temp.locks"},
                                                          {pg, "pg_catalog.locks"},
                                                          {pg, ".locks"},
                                                          {pg, "app."},
                                                          {pg, "a.b.c"},
                                                          {my, "a-b.locks"},
                                                          {my, "app.lo\"cks"}}) {
        BOOST_TEST_CONTEXT(dsn << " " << bad) {
            BOOST_CHECK_THROW(sql_options::from_json({{"dsn", dsn}, {"table", bad}}), config_error);
        }
    }
    o = sql_options::from_json({{"dsn", pg}, {"table", "app.Locks"}});
    BOOST_TEST(o.schema == "app");
    BOOST_TEST(o.table == "Locks");
    BOOST_TEST(sql_options::from_json({{"dsn", lite}, {"table", "main.locks"}}).schema == "main");
    BOOST_TEST(sql_options::from_json({{"dsn", my}, {"table", "other_db.locks"}}).schema ==
               "other_db");
    // Options built in code are checked by the store too: the names go into statements.
    auto coded = options_for(sqlite_dsn());
    coded.table = "x\"; DROP TABLE y; --";
    BOOST_CHECK_THROW(strategies::make_sql_store(coded), invalid_argument_error);
    coded = options_for(sqlite_dsn());
    coded.schema = "temp";
    BOOST_CHECK_THROW(strategies::make_sql_store(coded), invalid_argument_error);
    BOOST_CHECK_THROW(sql_options::from_json({{"table", "t"}}), config_error);  // no dsn
    BOOST_CHECK_THROW(sql_options::from_json({{"dsn", "sqlite:///tmp/x/l.db"}, {"nope", 1}}),
                      config_error);
}

// A SQLite-backed sql is host-local: selection neither picks it for a distributed request nor
// falls back from it to a remote strategy, while a server-backed one is distributed.
BOOST_AUTO_TEST_CASE(sqlite_is_local_servers_are_distributed) {
    auto explain = [](const std::string& dsn, capability c) {
        auto cfg = config::parse(
            nlohmann::json{{"strategies", {{"sql", {{"options", {{"dsn", dsn}}}}}}}}.dump());
        lock_factory f(cfg);
        return f.explain(c);
    };
    const auto local = test::sqlite_test_dsn("scope.db");
    auto r = explain(local, capability::exclusive | capability::distributed);
    bool sql_passed_over = false;
    for (const auto& e : r.entries)
        if (e.strategy == "sql")
            sql_passed_over =
                !e.candidate && e.passed_over.find("distributed") != std::string::npos;
    BOOST_TEST(sql_passed_over, r.to_string());
    r = explain(local, capability::exclusive | capability::fencing);
    BOOST_TEST(r.chosen() != nullptr);
    auto remote = explain("postgresql://u:p@127.0.0.1:1/db",
                          capability::exclusive | capability::distributed | capability::fencing);
    BOOST_REQUIRE(remote.chosen() != nullptr);
    BOOST_TEST(remote.chosen()->strategy == "sql");
    // The store agrees with the descriptor.
    auto s = strategies::make_sql_store(options_for(local));
    BOOST_TEST(!has(s->capabilities(), capability::distributed));
    BOOST_TEST(has(s->capabilities(), capability::fencing));
}

#ifdef LOCKSMITH_TEST_POSTGRESQL
// libpq would fill what the DSN leaves out from PGHOST, PGPORT, ...: a process with another
// environment would lock on another server (issue 23). Refused, naming the variable; a DSN that
// names the part is not affected by the variable.
BOOST_AUTO_TEST_CASE(a_dsn_that_leaves_the_server_to_the_environment_is_refused) {
    for (const auto& [variable, value, dsn] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"PGPORT", "1", "postgresql://u@127.0.0.1/db"},
             {"PGHOST", "127.0.0.2", "postgresql://u@:1/db"},
             {"PGHOSTADDR", "127.0.0.2", "postgresql://u@127.0.0.1:1/db"},
             {"PGUSER", "other", "postgresql://127.0.0.1:1/db"},
             {"PGSERVICE", "elsewhere", "postgresql://u@127.0.0.1:1/db"}}) {
        BOOST_TEST_CONTEXT(variable << " " << dsn) {
            ::setenv(variable.c_str(), value.c_str(), 1);
            auto o = options_for(dsn);
            o.connect_timeout = 50ms;
            const auto message = [&]() -> std::string {
                try {
                    (void)strategies::make_sql_store(o);
                } catch (const invalid_argument_error& e) {
                    return e.what();
                } catch (const backend_error&) {
                }
                return "";
            }();
            BOOST_TEST(message.find(variable) != std::string::npos, message);
#ifdef LOCKSMITH_TEST_PG_ADVISORY
            strategies::pg_advisory_options p;
            p.dsn = dsn;
            p.connect_timeout = 50ms;
            BOOST_CHECK_THROW((void)strategies::make_pg_advisory_store(p), invalid_argument_error);
#endif
            ::unsetenv(variable.c_str());
        }
    }
    // Written in the DSN, the variable changes nothing: the server is unreachable, not refused.
    ::setenv("PGPORT", "1", 1);
    auto o = options_for("postgresql://u@127.0.0.1:2/db");
    o.connect_timeout = 50ms;
    BOOST_CHECK_THROW((void)strategies::make_sql_store(o), backend_error);
    ::unsetenv("PGPORT");
}
#endif

BOOST_AUTO_TEST_CASE(unreachable_servers_give_clear_errors) {
    unreachable_server("postgresql");
    unreachable_server("mysql");
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(sqlite)

BOOST_AUTO_TEST_CASE(odd_names_work) {
    odd_names(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(ttls_below_resolution) {
    bad_ttls(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(release_keeps_the_fencing_counter) {
    release_keeps_the_counter(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(missing_table_without_create_table) {
    missing_table(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(table_of_the_wrong_shape) {
    wrong_shape(sqlite_dsn());
}
// Processes that meet a new file at once all set it up: one of them turns on WAL and creates the
// table while the others wait for it. A connection whose read of the schema went stale while it
// waited gets SQLITE_BUSY at once, not after its busy timeout; that failed the set-up of some of
// them (the multi_process counter saw a child die before it got ready, under load).
BOOST_AUTO_TEST_CASE(processes_setting_up_a_new_file_at_once_all_succeed) {
#ifdef LOCKSMITH_TEST_SQLITE
    constexpr int children_count = 12;
    for (int round = 0; round < 5; ++round) {
        const auto dsn = test::sqlite_test_dsn("new-" + std::to_string(round) + ".db");
        test::byte_pipe go;
        std::vector<pid_t> children;
        for (int p = 0; p < children_count; ++p)
            children.push_back(test::fork_child([&]() -> int {
                go.close_write();
                (void)go.get(20s);  // EOF: everyone starts at once
                auto s = strategies::make_sql_store(options_for(dsn));
                key k("setup-" + std::to_string(::getpid()));
                return s->try_acquire(k, lock_mode::exclusive, 30s) ? 0 : 2;
            }));
        go.close_write();
        for (auto pid : children)
            BOOST_TEST(test::wait_child(pid, 60s) == 0, "round " << round << ", child " << pid);
    }
#else
    test::skip_case("built without SQLite");
#endif
}

// A file another connection keeps locked past command_timeout fails, but may work later.
BOOST_AUTO_TEST_CASE(a_database_locked_by_another_writer_is_transient) {
#ifdef LOCKSMITH_TEST_SQLITE
    auto o = options_for(test::sqlite_test_dsn("busy.db"));
    o.command_timeout = 100ms;
    auto s = strategies::make_sql_store(o);  // creates the file and the table
    sqlite3* db = nullptr;
    BOOST_REQUIRE(sqlite3_open(o.dsn.path.c_str(), &db) == SQLITE_OK);
    BOOST_REQUIRE(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK);
    key k(test::unique_resource("busy"));
    BOOST_TEST(
        (kind_of([&] { s->try_acquire(k, lock_mode::exclusive, 30s); }) == error_kind::transient));
    BOOST_REQUIRE(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    BOOST_TEST(s->try_acquire(k, lock_mode::exclusive, 30s));
    s->release(k);
#else
    test::skip_case("built without SQLite");
#endif
}

BOOST_AUTO_TEST_CASE(file_and_folder_follow_the_lock_file_rules) {
    // The folder is created private; the file 0600.
    auto dir = sqlite_test_dir() / "made";
    auto s = strategies::make_sql_store(options_for("sqlite://" + (dir / "l.db").string()));
    struct stat st {};
    BOOST_REQUIRE(::stat(dir.c_str(), &st) == 0);
    BOOST_TEST((st.st_mode & 0777) == 0700);
    BOOST_REQUIRE(::stat((dir / "l.db").c_str(), &st) == 0);
    BOOST_TEST((st.st_mode & 0077) == 0);
    // A symlink in place of the file is refused, not followed.
    std::filesystem::create_symlink(dir / "l.db", dir / "link.db");
    BOOST_CHECK_THROW(
        strategies::make_sql_store(options_for("sqlite://" + (dir / "link.db").string())), error);
    // A folder others may write to is refused.
    auto open_dir = sqlite_test_dir() / "open";
    std::filesystem::create_directories(open_dir);
    std::filesystem::permissions(open_dir, std::filesystem::perms::all,
                                 std::filesystem::perm_options::replace);
    BOOST_CHECK_THROW(
        strategies::make_sql_store(options_for("sqlite://" + (open_dir / "l.db").string())),
        invalid_argument_error);
    BOOST_TEST(!std::filesystem::exists(open_dir / "l.db"));
}

// Issue 23 point 15: the advice for a folder others could change must be one that works for
// sql, which has no shared_group option (the file strategy's advice recommended it).
BOOST_AUTO_TEST_CASE(a_folder_others_can_change_is_refused_with_advice_that_works_for_sql) {
    auto refusal = [](const std::filesystem::path& dir) {
        try {
            (void)strategies::make_sql_store(options_for("sqlite://" + (dir / "l.db").string()));
        } catch (const invalid_argument_error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    auto check = [](const std::string& m, const std::filesystem::path& dir) {
        BOOST_TEST(m.find("sql strategy: the folder of the SQLite file " + dir.string()) == 0u, m);
        BOOST_TEST(m.find("chmod 700") != std::string::npos, m);
        BOOST_TEST(m.find("only among processes of one user") != std::string::npos, m);
        BOOST_TEST(m.find("set the option shared_group") == std::string::npos, m);
        BOOST_TEST(m.find("lock_dir") == std::string::npos, m);  // sql has no such option
    };
    const auto open_dir = sqlite_test_dir() / "open-advice";
    std::filesystem::create_directories(open_dir);
    std::filesystem::permissions(open_dir, std::filesystem::perms::all,
                                 std::filesystem::perm_options::replace);
    check(refusal(open_dir), open_dir);

    auto other = test::another_local_user_or_skip();  // also needs root, to chown
    if (!other) return;
    const auto theirs = sqlite_test_dir() / "theirs";
    std::filesystem::create_directories(theirs);
    BOOST_REQUIRE(::chown(theirs.c_str(), other->uid, other->gid) == 0);
    const std::string m = refusal(theirs);
    check(m, theirs);
    BOOST_TEST(m.find("is owned by uid " + std::to_string(other->uid)) != std::string::npos, m);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(postgresql,
                      *boost::unit_test::precondition(test::server_precondition{postgres_variable}))

BOOST_AUTO_TEST_CASE(odd_names_work) {
    odd_names(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(ttls_below_resolution) {
    bad_ttls(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(release_keeps_the_fencing_counter) {
    release_keeps_the_counter(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(missing_table_without_create_table) {
    missing_table(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(table_of_the_wrong_shape) {
    wrong_shape(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(unknown_database_is_named) {
    unknown_database(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(a_refresh_on_a_dead_network_gives_up_at_the_lease_end) {
    stuck_refresh_gives_up_at_the_lease_end(endpoint(postgres_variable));
}
// `dsn` (postgresql://[user@]host...) connecting as `user`, without password (the test server
// trusts 127.0.0.1).
std::string as_role(const std::string& dsn, const std::string& user) {
    const auto start = dsn.find("://") + 3;
    const auto at = dsn.find('@', start);
    return dsn.substr(0, start) + user + "@" + dsn.substr(at == std::string::npos ? start : at + 1);
}

// Two login roles of the shared server, each with a schema of its own first on its search path
// (PostgreSQL's secure-schema pattern: CREATE SCHEMA alice AUTHORIZATION alice, search_path
// "$user", public) and allowed to create tables in public (as before PostgreSQL 15). Dropped
// with everything they own when the test ends, whatever its outcome.
struct two_roles {
    explicit two_roles(std::string dsn) : admin(options_for(std::move(dsn))) {
        for (const auto& role : {alice, bob})
            sql_admin_exec(admin, "CREATE ROLE " + role + " LOGIN; CREATE SCHEMA " + role +
                                      " AUTHORIZATION " + role +
                                      "; GRANT CREATE ON SCHEMA public TO " + role);
    }
    ~two_roles() {
        for (const auto& role : {alice, bob})
            sql_admin_exec(admin, "SET client_min_messages = warning; DROP SCHEMA IF EXISTS " +
                                      role + " CASCADE; DROP OWNED BY " + role +
                                      " CASCADE; DROP ROLE " + role);
    }
    const std::string suffix = std::to_string(::getpid());
    const std::string alice = "locksmith_alice_" + suffix;
    const std::string bob = "locksmith_bob_" + suffix;
    sql_options admin;
};

// One table per database, whoever connects: alice creates it (in public, not in her own
// schema), the administrator grants bob its use, and bob, in another process, finds alice's
// lock held. (MariaDB has no schema per user: an unqualified table is the DSN's database's for
// every user. SQLite's only per-connection schema, temp, is refused: options case.) Before, each
// role created and used a table of its own in its own schema, and both held the name.
BOOST_AUTO_TEST_CASE(roles_with_schemas_of_their_own_share_one_table) {
    const auto dsn = endpoint(postgres_variable);
    two_roles roles(dsn);
    const auto table = unique_table("roles");
    const auto alice = options_for(as_role(dsn, roles.alice), table);
    const auto bob = options_for(as_role(dsn, roles.bob), table);
    const auto name = test::unique_resource("roles");
    auto held = make_lock(strategies::make_sql_store(alice), name);
    BOOST_REQUIRE(held.try_lock());
    // Until an administrator lets bob use alice's table, bob is told what to do, and holds
    // nothing.
    const auto message = backend_error_of([&] { strategies::make_sql_store(bob); });
    BOOST_TEST(message.find("public." + table) != std::string::npos, message);
    BOOST_TEST(message.find("GRANT SELECT, INSERT, UPDATE") != std::string::npos, message);
    // (Before the fix there was no public table to grant: the block then does nothing.)
    sql_admin_exec(roles.admin, "DO $$ BEGIN IF to_regclass('public." + table +
                                    "') IS NOT NULL THEN GRANT SELECT, INSERT, UPDATE ON public." +
                                    table + " TO " + roles.bob + "; END IF; END $$");
    const auto child = test::fork_child([&] {
        auto lock = make_lock(strategies::make_sql_store(bob), name);
        return lock.try_lock() ? 1 : 0;
    });
    BOOST_TEST(test::wait_child(child, 60s) == 0, "bob held a name alice holds");
    held.unlock();
    sql_admin_exec(roles.admin,
                   "SET client_min_messages = warning; DROP TABLE IF EXISTS public." + table);
}

// "schema.table" names the schema; the search path plays no part.
BOOST_AUTO_TEST_CASE(a_named_schema_is_used) {
    const auto dsn = endpoint(postgres_variable);
    auto o = options_for(dsn, unique_table("named"));
    o.schema = o.table + "_schema";
    sql_admin_exec(o, "CREATE SCHEMA " + o.schema);
    {
        auto lock = make_lock(strategies::make_sql_store(o), test::unique_resource("named"));
        BOOST_TEST(lock.try_lock());
    }
    // The table is there, and not in public: dropping it by its full name succeeds.
    sql_admin_exec(o, "DROP TABLE " + o.schema + "." + o.table);
    sql_admin_exec(o, "DROP SCHEMA " + o.schema);
}

// sql and pg_advisory both link the libpq layer; in one program (both modules linked, so in one
// symbol scope) each keeps its own copy and both work on one server, side by side.
BOOST_AUTO_TEST_CASE(beside_pg_advisory_in_one_program) {
#ifdef LOCKSMITH_TEST_PG_ADVISORY
    const auto dsn = endpoint(postgres_variable);
    strategies::pg_advisory_options po;
    po.dsn = dsn;
    auto advisory = strategies::make_pg_advisory_store(po);
    auto table = strategies::make_sql_store(options_for(dsn));
    const auto name = test::unique_resource("beside");
    auto a = make_lock(advisory, name);
    auto b = make_lock(table, name);
    BOOST_TEST(a.try_lock());
    BOOST_TEST(b.try_lock());  // two strategies: two different locks
    BOOST_TEST(!make_lock(advisory, name).try_lock());
    BOOST_TEST(!make_lock(table, name).try_lock());
    a.unlock();
    b.unlock();
    // A refused connection reads the same through either.
    const std::string closed =
        "postgresql://u@127.0.0.1:" + std::to_string(test::free_port()) + "/db";
    po.dsn = closed;
    BOOST_TEST((kind_of([&] { strategies::make_pg_advisory_store(po); }) == error_kind::transient));
    BOOST_TEST((kind_of([&] { strategies::make_sql_store(options_for(closed)); }) ==
                error_kind::transient));
#else
    test::skip_case("built without pg_advisory");
#endif
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mariadb,
                      *boost::unit_test::precondition(test::server_precondition{mariadb_variable}))

BOOST_AUTO_TEST_CASE(odd_names_work) {
    odd_names(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(ttls_below_resolution) {
    bad_ttls(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(release_keeps_the_fencing_counter) {
    release_keeps_the_counter(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(missing_table_without_create_table) {
    missing_table(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(table_of_the_wrong_shape) {
    wrong_shape(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(unknown_database_is_named) {
    unknown_database(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(a_refresh_on_a_dead_network_gives_up_at_the_lease_end) {
    stuck_refresh_gives_up_at_the_lease_end(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(wrong_password_is_refused_without_showing_it) {
    wrong_password(endpoint(mariadb_variable));
}
// localhost:PORT is that port over TCP, the server 127.0.0.1:PORT is: a lock taken through one
// spelling excludes the other, in another process. libmariadb took "localhost" for its Unix
// socket and dropped the port: the connection failed, or reached whatever server listens on the
// default socket, and both holders held.
BOOST_AUTO_TEST_CASE(localhost_with_a_port_is_that_port) {
    const auto dsn = endpoint(mariadb_variable);
    const auto host = dsn.find("@127.0.0.1:");
    BOOST_REQUIRE_MESSAGE(host != std::string::npos, mariadb_variable << " names 127.0.0.1:PORT");
    const auto localhost = dsn.substr(0, host) + "@localhost:" + dsn.substr(host + 11);
    const auto name = test::unique_resource("localhost");
    auto held = make_lock(strategies::make_sql_store(options_for(dsn)), name);
    BOOST_REQUIRE(held.try_lock());
    const auto child = test::fork_child([&] {
        try {
            auto lock = make_lock(strategies::make_sql_store(options_for(localhost)), name);
            return lock.try_lock() ? 1 : 0;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "through localhost: %s\n", e.what());
            return 2;
        }
    });
    BOOST_TEST(test::wait_child(child, 60s) == 0, "1: both held; 2: localhost was not reached");
    held.unlock();
}
BOOST_AUTO_TEST_SUITE_END()

constexpr const char* postgres_tls_variable = "LOCKSMITH_TEST_POSTGRES_TLS_DSN";
constexpr const char* mariadb_tls_variable = "LOCKSMITH_TEST_MARIADB_TLS_DSN";

BOOST_AUTO_TEST_SUITE(postgresql_tls, *boost::unit_test::precondition(test::server_precondition{
                                          postgres_tls_variable}))

// libpq checks the certificate against the host and connects to hostaddr: a wrong name that
// reaches the server.
BOOST_AUTO_TEST_CASE(plain_wrong_ca_and_wrong_host_are_refused_for_good) {
    const auto dsn = endpoint(postgres_tls_variable);
    const auto plain = dsn.substr(0, dsn.find('?')) + "?sslmode=disable";
    const auto wrong_host = replaced(dsn, "@127.0.0.1:", "@wrong.invalid:") + "&hostaddr=127.0.0.1";
    tls_refusals(dsn, "locktest-tls-pw", plain, wrong_host, "wrong.invalid");
}
BOOST_AUTO_TEST_CASE(the_password_from_a_file_or_the_environment) {
    password_from_outside(endpoint(postgres_tls_variable), "locktest-tls-pw", "sql");
#ifdef LOCKSMITH_TEST_PG_ADVISORY
    password_from_outside(endpoint(postgres_tls_variable), "locktest-tls-pw", "pg_advisory");
#endif
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mariadb_tls, *boost::unit_test::precondition(test::server_precondition{
                                       mariadb_tls_variable}))

// "127.1" reaches 127.0.0.1 (inet_aton) but is not an IP address to the certificate check
// (inet_pton): a host name the certificate lacks.
BOOST_AUTO_TEST_CASE(plain_wrong_ca_and_wrong_host_are_refused_for_good) {
    const auto dsn = endpoint(mariadb_tls_variable);
    const auto plain = dsn.substr(0, dsn.find('?'));
    const auto wrong_host = replaced(dsn, "@127.0.0.1:", "@127.1:");
    tls_refusals(dsn, "locktest-tls-pw", plain, wrong_host, "127.1:");
}
BOOST_AUTO_TEST_CASE(the_password_from_a_file_or_the_environment) {
    password_from_outside(endpoint(mariadb_tls_variable), "locktest-tls-pw", "sql");
}
// A client certificate is sent when asked for (the server does not require one: this checks
// that sslcert/sslkey load), and sslmode=require connects without checking the CA.
BOOST_AUTO_TEST_CASE(client_certificate_and_require) {
    const auto dsn = endpoint(mariadb_tls_variable);
    const auto dir = dsn.substr(dsn.find("sslrootcert=") + 12,
                                dsn.rfind("/ca.pem") - dsn.find("sslrootcert=") - 12);
    const auto with_client = dsn + "&sslcert=" + dir + "/client.pem&sslkey=" + dir + "/client.key";
    BOOST_TEST(make_lock(strategies::make_sql_store(options_for(with_client)),
                         test::unique_resource("tls-client"))
                   .try_lock());
    const auto require = dsn.substr(0, dsn.find('?')) + "?sslmode=require";
    BOOST_TEST(make_lock(strategies::make_sql_store(options_for(require)),
                         test::unique_resource("tls-require"))
                   .try_lock());
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Faults, on a private PostgreSQL: initialised with password authentication in a folder of the
// test's own, stopped (fast shutdown) and started again on the same data.

namespace {

std::string postgres_bin_dir() {
    std::string best;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec))
        if (std::filesystem::exists(e.path() / "bin/postgres") && e.path().string() > best)
            best = e.path().string();
    return best.empty() ? "" : best + "/bin";
}

bool postgres_installed_or_skip() {
    if (!postgres_bin_dir().empty()) return true;
    test::skip_case(
        "the PostgreSQL server is not installed (package postgresql; "
        "scripts/install-deps.sh)");
    return false;
}

class private_postgres {
  public:
    static constexpr const char* password = "Pg-Private-Secret-7";

    private_postgres() : port_(test::free_port()) {
        const auto bin = postgres_bin_dir();
        if (bin.empty()) BOOST_FAIL("PostgreSQL is not installed (package postgresql)");
        char templ[] = "/tmp/locksmith-pg-XXXXXX";
        BOOST_REQUIRE(::mkdtemp(templ));
        dir_ = templ;
        std::ofstream(dir_ / "pw") << password << "\n";
        // As root, the server runs as postgres (it refuses root).
        std::vector<std::string> as;
        if (::getuid() == 0) {
            const std::string chown = "chown -R postgres: " + dir_.string();
            BOOST_REQUIRE(std::system(chown.c_str()) == 0);
            as = {"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"};
        }
        std::string prefix;
        for (const auto& a : as) prefix += a + " ";
        const std::string initdb =
            prefix + bin + "/initdb -D " + (dir_ / "data").string() +
            " -U postgres -A scram-sha-256 --pwfile=" + (dir_ / "pw").string() +
            " --no-sync -E UTF8 --locale=C >" + (dir_ / "initdb.log").string() + " 2>&1";
        BOOST_REQUIRE_MESSAGE(std::system(initdb.c_str()) == 0, "initdb failed: " << initdb);
        std::vector<std::string> argv = as;
        for (std::string a :
             {bin + "/postgres", std::string("-D"), (dir_ / "data").string(), std::string("-c"),
              std::string("listen_addresses=127.0.0.1"), std::string("-c"),
              "port=" + std::to_string(port_), std::string("-c"),
              std::string("unix_socket_directories="), std::string("-c"), std::string("fsync=off")})
            argv.push_back(a);
        server_ = std::make_unique<test::private_server>(argv, port_, SIGINT);
        wait_ready();
    }
    ~private_postgres() {
        server_.reset();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string dsn(const std::string& pw = password) const {
        return "postgresql://postgres:" + pw + "@127.0.0.1:" + std::to_string(port_) + "/postgres";
    }
    void stop() { server_->stop(); }
    void start() {
        server_->start();
        wait_ready();
    }

  private:
    // The port accepts connections before the server takes them ("the database system is
    // starting up"); PQping tells when it does.
    void wait_ready() const {
#ifdef LOCKSMITH_TEST_POSTGRESQL
        for (int i = 0; i < 400; ++i) {
            if (PQping(dsn().c_str()) == PQPING_OK) return;
            std::this_thread::sleep_for(25ms);
        }
        BOOST_FAIL("the private PostgreSQL did not accept connections within 10 s");
#endif
    }

    int port_;
    std::filesystem::path dir_;
    std::unique_ptr<test::private_server> server_;
};

}  // namespace

// The database stops while a lock is held and a waiter polls for it: the holder's refresh and
// release get a backend_error (within connect_timeout + command_timeout; the bound here is only
// a safety net), the waiter rides the outage out (named_lock's wait), and once the server is
// back the same store grants new locks without restarting the process, and the holder's
// release hands the name to the waiter.
template <class Server>
void stopped_while_held_and_waiting(Server& server, const std::string& password) {
    auto inner = strategies::make_sql_store(options_for(server.dsn()));
    auto counted = std::make_shared<test::forwarding_store>(inner);
    const auto name = test::unique_resource("fault");
    auto holder = make_lock(inner, name);
    auto waiter = make_lock(counted, name);
    BOOST_REQUIRE(holder.try_lock());

    auto waiting = std::async(std::launch::async, [&]() -> std::string {
        try {
            if (!waiter.try_lock_for(60s)) return "timed out";
            waiter.unlock();
            return "granted";
        } catch (const backend_error& e) {
            return e.what();
        }
    });
    // Ordered by the waiter's own attempts, not by time: two mean it is in its polling loop.
    for (int i = 0; counted->try_calls() < 2 && i < 600000; ++i) std::this_thread::yield();
    BOOST_REQUIRE(counted->try_calls() >= 2);
    server.stop();

    // The holder: refresh and release report the failure instead of hanging.
    try {
        holder.refresh();
        BOOST_ERROR("a refresh on a stopped server succeeded");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("sql: ") == 0, e.what());
        BOOST_TEST(std::string(e.what()).find(password) == std::string::npos, e.what());
    }
    BOOST_CHECK_THROW(holder.release(), backend_error);
    BOOST_TEST((waiting.wait_for(1s) == std::future_status::timeout), "the waiter gave up");

    // Back again, same data: the old grant is there until its TTL or its owner's release.
    server.start();
    auto fresh = make_lock(inner, test::unique_resource("after"));
    BOOST_TEST(fresh.try_lock());
    BOOST_TEST(fresh.fencing_token().has_value());
    fresh.unlock();
    key again(name);
    BOOST_TEST(!inner->try_acquire(again, lock_mode::exclusive, 30s));
    holder.release();  // still its owner
    BOOST_REQUIRE(waiting.wait_for(60s) == std::future_status::ready);
    BOOST_TEST(waiting.get() == "granted");
}

BOOST_AUTO_TEST_SUITE(postgresql_faults)

BOOST_AUTO_TEST_CASE(wrong_password_is_refused_without_showing_it) {
    if (!postgres_installed_or_skip()) return;
    private_postgres pg;
    wrong_password(pg.dsn());
    // The right one works.
    auto s = strategies::make_sql_store(options_for(pg.dsn()));
    auto lock = make_lock(s, test::unique_resource("pw"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_restarted) {
    if (!postgres_installed_or_skip()) return;
    private_postgres pg;
    stopped_while_held_and_waiting(pg, private_postgres::password);
}

BOOST_AUTO_TEST_SUITE_END()

using test::private_mariadb;

BOOST_AUTO_TEST_SUITE(mariadb_faults)

BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_restarted) {
    if (std::system("command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd") != 0) {
        test::skip_case(
            "the MariaDB server is not installed (package mariadb-server; "
            "scripts/install-deps.sh)");
        return;
    }
    private_mariadb db;
    stopped_while_held_and_waiting(db, "locktest-pw");
}

BOOST_AUTO_TEST_SUITE_END()

// The SQLite folder goes when the suite ends, so that runs leave nothing in /tmp.
namespace {
using test::remove_sqlite_test_dir;
BOOST_TEST_GLOBAL_FIXTURE(remove_sqlite_test_dir);
}  // namespace
