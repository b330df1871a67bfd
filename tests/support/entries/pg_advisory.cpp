// SPDX-License-Identifier: MIT
#include <cstdlib>
#include <stdexcept>

#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {
namespace {

// The name the entries' sessions carry (application_name), so that a test ends only the
// holding sessions of this process tree.
std::string pg_application() {
    return "locksmith-test-" + local_ipc_id();
}

std::string with_pg_application(const std::string& dsn) {
    return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") +
           "application_name=" + pg_application();
}

// Ends, through the superuser DSN `admin_dsn` (psql), every session of this process tree that
// holds an advisory lock: the waiting ones are left alone.
std::function<void(pid_t)> pg_terminate_holders(const std::string& admin_dsn) {
    return [admin_dsn](pid_t) {
        const auto sql =
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON "
            "a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND a.application_name "
            "= '" +
            pg_application() + "'";
        const auto command = "psql '" + admin_dsn + "' -Atc \"" + sql + "\" >/dev/null 2>&1";
        if (std::system(command.c_str()) != 0)
            throw std::runtime_error("psql could not end the holding sessions");
    };
}

}  // namespace

strategy_under_test entry_pg_advisory() {
    const auto dsn = env("LOCKSMITH_TEST_POSTGRES_DSN");
    if (!dsn) return unavailable("pg_advisory", "LOCKSMITH_TEST_POSTGRES_DSN");
    strategy_under_test e{"pg_advisory", nlohmann::json{{"dsn", with_pg_application(*dsn)}}, ""};
    e.end_session = pg_terminate_holders(*dsn);
    return e;
}

// Over TLS, as a role that may connect only so (scripts/services.sh: sslmode=verify-full against
// the rig's CA).
strategy_under_test entry_pg_advisory_tls() {
    const auto dsn = env("LOCKSMITH_TEST_POSTGRES_TLS_DSN");
    if (!dsn) return unavailable("pg_advisory", "LOCKSMITH_TEST_POSTGRES_TLS_DSN");
    strategy_under_test e{"pg_advisory", nlohmann::json{{"dsn", with_pg_application(*dsn)}}, ""};
    if (const auto admin = env("LOCKSMITH_TEST_POSTGRES_DSN"))
        e.end_session = pg_terminate_holders(*admin);
    return e;
}

}  // namespace locksmith::test
