// SPDX-License-Identifier: MIT
// sql, once per driver: SQLite in the private lock directory, the servers from the environment,
// each in a table of its own so that a test run never meets a user's table.
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {
namespace {

strategy_under_test sql_entry(const std::optional<std::string>& dsn, const char* variable) {
    if (!dsn) return unavailable("sql", variable);
    return {"sql", nlohmann::json{{"dsn", *dsn}, {"table", "locksmith_test_keys"}}, ""};
}

}  // namespace

strategy_under_test entry_sql_sqlite() {
    return sql_entry("sqlite://" + private_lock_dir() + "/sql-test.db", "");
}
strategy_under_test entry_sql_postgresql() {
    return sql_entry(env("LOCKSMITH_TEST_POSTGRES_DSN"), "LOCKSMITH_TEST_POSTGRES_DSN");
}
strategy_under_test entry_sql_mariadb() {
    return sql_entry(env("LOCKSMITH_TEST_MARIADB_DSN"), "LOCKSMITH_TEST_MARIADB_DSN");
}
strategy_under_test entry_sql_postgresql_tls() {
    return sql_entry(env("LOCKSMITH_TEST_POSTGRES_TLS_DSN"), "LOCKSMITH_TEST_POSTGRES_TLS_DSN");
}
strategy_under_test entry_sql_mariadb_tls() {
    return sql_entry(env("LOCKSMITH_TEST_MARIADB_TLS_DSN"), "LOCKSMITH_TEST_MARIADB_TLS_DSN");
}

}  // namespace locksmith::test
