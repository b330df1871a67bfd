// SPDX-License-Identifier: MIT
// Counting semaphores on the sql strategy (issue 27), on each driver: a SQLite file of the
// test's own and the PostgreSQL and MariaDB of scripts/services.sh (LOCKSMITH_TEST_POSTGRES_DSN,
// LOCKSMITH_TEST_MARIADB_DSN). Permits are rows `<prefix>/<slot>` beside the name's limit row
// (include/locksmith/strategies/sql.hpp); the hostile cases write rows as another program
// would. Each case names the path it guards (tests/mutants/faults.txt).
#define BOOST_TEST_MODULE sql_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/sql.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/entries/sql.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::endpoint;
using locksmith::test::make_permit;
using strategies::sql_options;

namespace {

using test::mariadb_variable;
using test::postgres_variable;
using test::sql_admin_exec;
using test::sql_now_ms;

std::string sqlite_dsn() {
    return test::sqlite_test_dsn("sem.db");
}

sql_options options_for(const std::string& dsn, const std::string& table) {
    return test::sql_test_options(dsn, table, 5s, 5s);  // a loaded CI machine
}

std::shared_ptr<store> store_for(const std::string& dsn,
                                 const std::string& table = "locksmith_sem_keys") {
    return strategies::make_sql_store(options_for(dsn, table));
}

// The name's permit rows: `<prefix>limit` and `<prefix><slot>` (sql.hpp, Counting).
std::string prefix_of(const std::string& name) {
    return strategies::sql_key_id(name).substr(0, 24) + "/";
}

// Guards: the permits' fencing tokens, ordered across the permits of a name and past a permit
// given back; a re-acquire keeps the permit. (The limit and the permits' numbers are the
// conformance suite's counting_limit_kept_and_permits_numbered.)
void permits_carry_ordered_fencing_tokens(const std::string& dsn) {
    const std::string name = test::unique_resource("three");
    auto s = store_for(dsn);
    auto a = make_permit(s, name, 3), b = make_permit(s, name, 3), c = make_permit(s, name, 3),
         d = make_permit(s, name, 3);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(c.try_acquire());
    const auto fa = a.fencing_token().value_or(0), fb = b.fencing_token().value_or(0),
               fc = c.fencing_token().value_or(0);
    BOOST_TEST((fa > 0 && fa < fb && fb < fc), fa << " " << fb << " " << fc);
    BOOST_TEST(a.try_acquire());  // held already: the same permit, renewed
    BOOST_TEST(a.permit() == "1");
    a.refresh(30s);
    BOOST_TEST(a.is_acquired());
    b.release();
    BOOST_TEST(d.try_acquire());
    BOOST_TEST(d.fencing_token().value_or(0) > fc);
    a.release();
    c.release();
    d.release();
}

// Guards: a second limit accepted while permits are held.
void a_second_limit_is_refused_naming_both(const std::string& dsn) {
    const std::string name = test::unique_resource("mismatch");
    auto s = store_for(dsn);
    auto three = make_permit(s, name, 3);
    BOOST_REQUIRE(three.try_acquire());
    auto five = make_permit(store_for(dsn), name, 5);
    try {
        (void)five.try_acquire();
        BOOST_ERROR("a second limit was accepted");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(contains(e.what(), "limit of 3"), e.what());
        BOOST_TEST(contains(e.what(), "asks for 5"), e.what());
        BOOST_TEST(contains(e.what(), "wait until no permit is held"), e.what());
    }
    BOOST_TEST(!five.held());
    BOOST_TEST(s->status(name).limit.value_or(0) == 3u);
    three.release();
    BOOST_TEST(five.try_acquire());  // none held: the limit changes
    BOOST_TEST(s->status(name).limit.value_or(0) == 5u);
    auto again = make_permit(s, name, 3);
    BOOST_CHECK_THROW((void)again.try_acquire(), invalid_argument_error);
    five.release();
    auto huge = make_permit(s, name, 5000);
    BOOST_CHECK_THROW((void)huge.try_acquire(), invalid_argument_error);
}

// Guards: an expired permit never reclaimed; a stale holder's refresh or release touching the
// new holder's row.
void an_expired_permit_is_reclaimed(const std::string& dsn) {
    const std::string name = test::unique_resource("expired");
    auto s = store_for(dsn);
    lock_options o;
    o.ttl = 300ms;
    o.auto_refresh = false;
    auto stale = make_permit(s, name, 1, o);
    BOOST_REQUIRE(stale.try_acquire());
    auto next = make_permit(store_for(dsn), name, 1);
    BOOST_TEST(!next.try_acquire());
    BOOST_TEST(next.try_acquire_for(10s));  // by the database's clock, after 300 ms
    BOOST_TEST(next.permit() == "1");
    BOOST_TEST(!stale.is_acquired());
    BOOST_CHECK_THROW(stale.refresh(30s), error);
    try {
        stale.release();
    } catch (const error&) {
    }
    auto probe = make_permit(s, name, 1);
    BOOST_TEST(!probe.try_acquire(), "the stale holder freed the new holder's permit");
    BOOST_TEST(next.is_acquired());
    next.release();
    BOOST_TEST(probe.try_acquire());
    probe.release();
}

// Rows another program wrote: a live row beyond the limit, an expired one, and a limit row of
// nonsense. Never N + 1 holders; a clear error naming the row and how to reset it.
void foreign_rows_never_make_room_for_more(const std::string& dsn) {
    const std::string name = test::unique_resource("hostile");
    const std::string table = "locksmith_sem_keys";
    const auto o = options_for(dsn, table);
    auto s = store_for(dsn, table);
    const auto p = prefix_of(name);
    {
        auto first = make_permit(s, name, 2);  // creates the limit row
        BOOST_REQUIRE(first.try_acquire());
        first.release();
    }
    const std::string far = sql_now_ms(o) + " + 3600000";
    // Slot 3 of a limit of 2, held for an hour; slot 1 "held" until an hour ago; a
    // negative expiry on slot 2.
    sql_admin_exec(o,
                   "INSERT INTO " + table + " VALUES ('" + p + "3', 'intruder', " + far + ", 1)");
    sql_admin_exec(o, "UPDATE " + table + " SET token = 'zombie', expires_ms = " + sql_now_ms(o) +
                          " - 3600000 WHERE key_id = '" + p + "1'");
    sql_admin_exec(o, "INSERT INTO " + table + " VALUES ('" + p + "2', 'ghost', -5, 7)");
    auto a = make_permit(s, name, 2), b = make_permit(s, name, 2), c = make_permit(s, name, 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(!c.try_acquire(), "a row beyond the limit made room for a third holder");
    BOOST_TEST(s->status(name).permits_held.value_or(0) == 2u);
    a.release();
    b.release();
    // A live foreign row inside the limit takes a slot: fewer holders, never more.
    sql_admin_exec(o, "UPDATE " + table + " SET token = 'squatter', expires_ms = " + far +
                          " WHERE key_id = '" + p + "1'");
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.permit() == "2");
    BOOST_TEST(!b.try_acquire());
    a.release();
    // Limit rows of nonsense: refused with the row, the table and the way out.
    for (const std::string& bad :
         {std::string("token = 'limit', expires_ms = 0"), std::string("expires_ms = -3"),
          std::string("token = 'limit', expires_ms = 99999999"),
          std::string("token = 'garbage', expires_ms = 2")}) {
        sql_admin_exec(o, "UPDATE " + table + " SET " + bad + " WHERE key_id = '" + p + "limit'");
        try {
            (void)c.try_acquire();
            BOOST_ERROR("a limit row with " << bad << " was accepted");
        } catch (const backend_error& e) {
            BOOST_TEST(!e.transient());
            BOOST_TEST(contains(e.what(), p + "limit"), e.what());
            BOOST_TEST(contains(e.what(), "DELETE FROM"), e.what());
        }
        BOOST_TEST(!c.held());
        BOOST_CHECK_THROW((void)s->status(name), backend_error);
    }
    sql_admin_exec(o, "DELETE FROM " + table + " WHERE key_id = '" + p + "limit'");
    BOOST_TEST(c.try_acquire());  // the limit row comes back with c's limit
    BOOST_TEST(s->status(name).limit.value_or(0) == 2u);
    c.release();
}

// A table another program created without NOT NULL: NULLs in a slot row keep that slot out of
// use (fewer holders), and in the limit row give a clear error.
void nulls_never_make_room_for_more(const std::string& dsn) {
    const std::string name = test::unique_resource("nulls");
    const std::string table = "locksmith_sem_nullable";
    const auto o = options_for(dsn, table);
    sql_admin_exec(o, "CREATE TABLE IF NOT EXISTS " + table +
                          " (key_id VARCHAR(32) PRIMARY KEY, token VARCHAR(32), expires_ms BIGINT, "
                          "fence BIGINT)");
    auto s = store_for(dsn, table);
    const auto p = prefix_of(name);
    sql_admin_exec(o, "INSERT INTO " + table + " VALUES ('" + p + "1', NULL, NULL, NULL)");
    auto a = make_permit(s, name, 2), b = make_permit(s, name, 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.permit() == "2");
    BOOST_TEST(!b.try_acquire(), "a slot row of NULLs made room for another holder");
    a.release();
    sql_admin_exec(o, "UPDATE " + table + " SET expires_ms = NULL WHERE key_id = '" + p + "limit'");
    BOOST_CHECK_THROW((void)b.try_acquire(), backend_error);
    sql_admin_exec(
        o, "UPDATE " + table + " SET expires_ms = 2, fence = NULL WHERE key_id = '" + p + "limit'");
    BOOST_CHECK_THROW((void)b.try_acquire(), backend_error);
    BOOST_TEST(!b.held());
    sql_admin_exec(o, "DELETE FROM " + table + " WHERE key_id = '" + p + "limit'");
    BOOST_TEST(b.try_acquire());
    b.release();
}

}  // namespace

#ifdef LOCKSMITH_TEST_SQLITE
BOOST_AUTO_TEST_SUITE(sqlite)
BOOST_AUTO_TEST_CASE(permits_carry_ordered_fencing_tokens) {
    ::permits_carry_ordered_fencing_tokens(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(a_second_limit_is_refused_naming_both) {
    ::a_second_limit_is_refused_naming_both(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(an_expired_permit_is_reclaimed) {
    ::an_expired_permit_is_reclaimed(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(foreign_rows_never_make_room_for_more) {
    ::foreign_rows_never_make_room_for_more(sqlite_dsn());
}
BOOST_AUTO_TEST_CASE(nulls_never_make_room_for_more) {
    ::nulls_never_make_room_for_more(sqlite_dsn());
}
BOOST_AUTO_TEST_SUITE_END()
#endif

#ifdef LOCKSMITH_TEST_POSTGRESQL
BOOST_AUTO_TEST_SUITE(postgresql,
                      *boost::unit_test::precondition(test::server_precondition{postgres_variable}))
BOOST_AUTO_TEST_CASE(permits_carry_ordered_fencing_tokens) {
    ::permits_carry_ordered_fencing_tokens(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(a_second_limit_is_refused_naming_both) {
    ::a_second_limit_is_refused_naming_both(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(an_expired_permit_is_reclaimed) {
    ::an_expired_permit_is_reclaimed(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(foreign_rows_never_make_room_for_more) {
    ::foreign_rows_never_make_room_for_more(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_CASE(nulls_never_make_room_for_more) {
    ::nulls_never_make_room_for_more(endpoint(postgres_variable));
}
BOOST_AUTO_TEST_SUITE_END()
#endif

#ifdef LOCKSMITH_TEST_MARIADB
BOOST_AUTO_TEST_SUITE(mariadb,
                      *boost::unit_test::precondition(test::server_precondition{mariadb_variable}))
BOOST_AUTO_TEST_CASE(permits_carry_ordered_fencing_tokens) {
    ::permits_carry_ordered_fencing_tokens(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(a_second_limit_is_refused_naming_both) {
    ::a_second_limit_is_refused_naming_both(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(an_expired_permit_is_reclaimed) {
    ::an_expired_permit_is_reclaimed(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(foreign_rows_never_make_room_for_more) {
    ::foreign_rows_never_make_room_for_more(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_CASE(nulls_never_make_room_for_more) {
    ::nulls_never_make_room_for_more(endpoint(mariadb_variable));
}
BOOST_AUTO_TEST_SUITE_END()
#endif

// The SQLite folder goes when the suite ends, so that runs leave nothing in /tmp.
namespace {
using test::remove_sqlite_test_dir;
BOOST_TEST_GLOBAL_FIXTURE(remove_sqlite_test_dir);
}  // namespace
