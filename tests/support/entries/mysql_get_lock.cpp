// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

strategy_under_test entry_mysql_get_lock() {
    if (auto dsn = env("LOCKSMITH_TEST_MARIADB_DSN"))
        return {"mysql_get_lock", nlohmann::json{{"dsn", *dsn}}, ""};
    return unavailable("mysql_get_lock", "LOCKSMITH_TEST_MARIADB_DSN");
}

// Over TLS, as a user that may connect only so (scripts/services.sh: REQUIRE SSL,
// sslmode=verify-full against the rig's CA).
strategy_under_test entry_mysql_get_lock_tls() {
    if (auto dsn = env("LOCKSMITH_TEST_MARIADB_TLS_DSN"))
        return {"mysql_get_lock", nlohmann::json{{"dsn", *dsn}}, ""};
    return unavailable("mysql_get_lock", "LOCKSMITH_TEST_MARIADB_TLS_DSN");
}

}  // namespace locksmith::test
