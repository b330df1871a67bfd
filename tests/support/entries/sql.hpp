// SPDX-License-Identifier: MIT
// What the sql strategy's integration tests share, per driver: a SQLite folder of the test
// process's own, options with the test's timeouts, and statements run on the database directly
// as another program would. Header-only: a test that includes it defines LOCKSMITH_TEST_SQLITE,
// LOCKSMITH_TEST_POSTGRESQL and LOCKSMITH_TEST_MARIADB for the client libraries it links
// (tests/integration/CMakeLists.txt), after <boost/test/unit_test.hpp>.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>

#include <locksmith/strategies/sql.hpp>

#ifdef LOCKSMITH_TEST_SQLITE
#include <sqlite3.h>
#endif
#ifdef LOCKSMITH_TEST_POSTGRESQL
#include <libpq-fe.h>
#endif
#ifdef LOCKSMITH_TEST_MARIADB
#include <mysql.h>
#endif

namespace locksmith::test {

inline constexpr const char* postgres_variable = "LOCKSMITH_TEST_POSTGRES_DSN";
inline constexpr const char* mariadb_variable = "LOCKSMITH_TEST_MARIADB_DSN";

// A folder of this process's own for SQLite files (0700, as the strategy requires); a test's
// remove_sqlite_test_dir global fixture removes it.
inline const std::filesystem::path& sqlite_test_dir() {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() /
                 ("locksmith-sql-it-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        std::filesystem::permissions(d, std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::replace);
        return d;
    }();
    return dir;
}

// The SQLite file `file` in that folder, as a DSN.
inline std::string sqlite_test_dsn(const std::string& file) {
    return "sqlite://" + (sqlite_test_dir() / file).string();
}

// So that runs leave nothing in /tmp: a test's BOOST_TEST_GLOBAL_FIXTURE (of an unqualified name).
struct remove_sqlite_test_dir {
    ~remove_sqlite_test_dir() {
        std::error_code ec;
        std::filesystem::remove_all(sqlite_test_dir(), ec);
    }
};

inline strategies::sql_options sql_test_options(const std::string& dsn, const std::string& table,
                                                std::chrono::milliseconds connect_timeout,
                                                std::chrono::milliseconds command_timeout) {
    strategies::sql_options o;
    o.dsn = strategies::parse_sql_dsn(dsn);
    o.table = table;
    o.connect_timeout = connect_timeout;
    o.command_timeout = command_timeout;
    return o;
}

// The database's clock in ms, in each dialect (the drivers' own), for rows planted by hand.
inline std::string sql_now_ms(const strategies::sql_options& o) {
    switch (o.dsn.driver) {
        case strategies::sql_dsn::kind::sqlite:
            return "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
        case strategies::sql_dsn::kind::postgresql:
            return "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";
        case strategies::sql_dsn::kind::mysql:
            return "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";
    }
    return "0";
}

// Runs one statement on the database directly, as another program would (a failure fails the
// case).
inline void sql_admin_exec(const strategies::sql_options& o, const std::string& sql) {
    switch (o.dsn.driver) {
        case strategies::sql_dsn::kind::sqlite: {
#ifdef LOCKSMITH_TEST_SQLITE
            sqlite3* db = nullptr;
            BOOST_REQUIRE(sqlite3_open(o.dsn.path.c_str(), &db) == SQLITE_OK);
            sqlite3_busy_timeout(db, 5000);
            char* error = nullptr;
            int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
            std::string message = error ? error : "";
            sqlite3_free(error);
            sqlite3_close(db);
            BOOST_REQUIRE_MESSAGE(rc == SQLITE_OK, sql << ": " << message);
#endif
            return;
        }
        case strategies::sql_dsn::kind::postgresql: {
#ifdef LOCKSMITH_TEST_POSTGRESQL
            PGconn* c = PQconnectdb(o.dsn.text.c_str());
            BOOST_REQUIRE(PQstatus(c) == CONNECTION_OK);
            PGresult* r = PQexec(c, sql.c_str());
            const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
            std::string message = PQresultErrorMessage(r);
            PQclear(r);
            PQfinish(c);
            BOOST_REQUIRE_MESSAGE(ok, sql << ": " << message);
#endif
            return;
        }
        case strategies::sql_dsn::kind::mysql: {
#ifdef LOCKSMITH_TEST_MARIADB
            MYSQL* c = mysql_init(nullptr);
            BOOST_REQUIRE(mysql_real_connect(c, o.dsn.host.c_str(), o.dsn.user.c_str(),
                                             o.dsn.password.c_str(), o.dsn.database.c_str(),
                                             unsigned(o.dsn.port), nullptr, 0));
            const bool ok = mysql_query(c, sql.c_str()) == 0;
            std::string message = mysql_error(c);
            mysql_close(c);
            BOOST_REQUIRE_MESSAGE(ok, sql << ": " << message);
#endif
            return;
        }
    }
}

}  // namespace locksmith::test
