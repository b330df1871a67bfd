// SPDX-License-Identifier: MIT
// The pg_advisory strategy against a real PostgreSQL: the shared server of scripts/services.sh
// (LOCKSMITH_TEST_POSTGRES_DSN) and, for the fault cases, a private server this test starts,
// stops and restarts with the same script (its own state folder and port).
#define BOOST_TEST_MODULE pg_advisory_integration
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <libpq-fe.h>

#include <locksmith/locksmith.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/pg_advisory.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::endpoint;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* dsn_variable = "LOCKSMITH_TEST_POSTGRES_DSN";
// The safety net of cases that wait for something that must happen; never a speed check.
const auto must_happen = test::patience(30s);

strategies::pg_advisory_options options_for(const std::string& dsn) {
    strategies::pg_advisory_options o;
    o.dsn = dsn;
    o.connect_timeout = 2s;
    o.command_timeout = 5s;
    return o;
}

std::shared_ptr<store> store_for(const std::string& dsn) {
    return strategies::make_pg_advisory_store(options_for(dsn));
}

// Sessions of this test process carry their own application_name, so that checks on
// pg_stat_activity see them only, not those of tests running beside this one.
const std::string application_name = "locksmith-it-" + std::to_string(::getpid());

std::shared_ptr<store> shared_store() {
    const auto dsn = endpoint(dsn_variable);
    return store_for(dsn + (dsn.find('?') == std::string::npos ? "?" : "&") +
                     "application_name=" + application_name);
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name, lock_options o = {}) {
    return named_lock(std::move(s), std::make_shared<key>(name), std::move(o));
}

using test::ms_since;

// A connection of the test's own, to look at the server from outside the strategy.
class admin {
  public:
    explicit admin(const std::string& dsn) : conn_(PQconnectdb(dsn.c_str())) {
        BOOST_REQUIRE_MESSAGE(PQstatus(conn_) == CONNECTION_OK,
                              "admin connection failed: " << PQerrorMessage(conn_));
    }
    ~admin() { PQfinish(conn_); }
    admin(const admin&) = delete;
    admin& operator=(const admin&) = delete;

    // The first column of every row.
    std::vector<std::string> column(const std::string& sql) {
        PGresult* r = PQexec(conn_, sql.c_str());
        const auto status = PQresultStatus(r);
        BOOST_REQUIRE_MESSAGE(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK,
                              sql << ": " << PQresultErrorMessage(r));
        std::vector<std::string> out;
        for (int i = 0; i < PQntuples(r); ++i) out.emplace_back(PQgetvalue(r, i, 0));
        PQclear(r);
        return out;
    }
    long count(const std::string& sql) { return std::stol(column(sql).at(0)); }

  private:
    PGconn* conn_;
};

// "classid = .. AND objid = .. AND objsubid = 1": the pg_locks rows of `name`.
std::string lock_rows(const std::string& name) {
    const auto k = std::uint64_t(strategies::pg_advisory_lock_key(name));
    return "locktype = 'advisory' AND classid = " + std::to_string(k >> 32) +
           " AND objid = " + std::to_string(k & 0xffffffffu) + " AND objsubid = 1";
}

// Waits until `sql` counts at least `n` (the server shows a waiter); false after must_happen.
bool eventually_counts(admin& a, const std::string& sql, long n) {
    const auto until = clock_type::now() + must_happen;
    while (clock_type::now() < until) {
        if (a.count(sql) >= n) return true;
        std::this_thread::sleep_for(5ms);
    }
    return false;
}

}  // namespace

// No server needed: a DSN is checked before anything connects.
BOOST_AUTO_TEST_CASE(bad_dsns_are_refused_without_the_password) {
    const std::string secret = "s3cret-PW%21";
    for (const std::string bad :
         {"mysql://u:" + secret + "@h/db", "postgresql://u:" + secret + "@h:99999/db",
          "postgresql://u:" + secret + "@h:5432/db?nonsense=1", "postgresql://u:" + secret + "@h",
          "postgresql://u:" + secret + "@h:5432/db?sslmode=%zz"}) {
        try {
            store_for(bad);
            BOOST_FAIL("accepted " << bad);
        } catch (const error& e) {
            BOOST_TEST_MESSAGE(e.what());
            BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
            BOOST_TEST(std::string(e.what()).find("pg_advisory: ") == 0, e.what());
        }
    }
    try {
        strategies::pg_advisory_options::from_json({{"dsn", "mysql://u:" + secret + "@h/db"}});
        BOOST_FAIL("accepted a mysql dsn");
    } catch (const config_error& e) {
        BOOST_TEST(e.pointer() == "/dsn");
        BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
    }
    BOOST_CHECK_THROW(strategies::pg_advisory_options::from_json(
                          {{"dsn", "postgresql://h/db"}, {"pool_size", 0}}),
                      config_error);
    BOOST_CHECK_THROW(
        strategies::pg_advisory_options::from_json({{"dsn", "postgresql://h/db"}, {"typo", 1}}),
        config_error);
    // A user without password stays readable; a password never does.
    const auto message = [](const std::string& dsn) {
        try {
            store_for(dsn);
        } catch (const error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    BOOST_TEST(
        message("postgresql://alice@127.0.0.1:1/db").find("postgresql://alice@127.0.0.1:1/db") !=
        std::string::npos);
    BOOST_TEST(message("postgresql://alice:pw@127.0.0.1:1/db")
                   .find("postgresql://alice:***@127.0.0.1:1/db") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE(
    pg_server, *boost::unit_test::precondition(locksmith::test::server_precondition{dsn_variable}))

BOOST_AUTO_TEST_CASE(registry_and_factory_build_the_store_from_json_options) {
    auto d = default_registry().find("pg_advisory");
    BOOST_REQUIRE(d);
    BOOST_TEST(d->needs_configuration);
    BOOST_TEST(d->default_priority == 82);
    auto s = d->create(nlohmann::json{{"dsn", endpoint(dsn_variable)}});
    auto lock = make_lock(s, test::unique_resource("registry"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    BOOST_CHECK_THROW(
        d->validate_options(nlohmann::json{{"dsn", endpoint(dsn_variable)}, {"pool_size", 0}}),
        config_error);
    BOOST_CHECK_THROW(d->validate_options(nlohmann::json::object()), config_error);

    const nlohmann::json doc = {
        {"strategies", {{"pg_advisory", {{"options", {{"dsn", endpoint(dsn_variable)}}}}}}}};
    strategy_registry registry;
    register_builtin_strategies(registry);
    lock_factory factory(config::parse(doc.dump()), registry);
    lock_request request;
    request.require = capability::shared | capability::distributed | capability::crash_release |
                      capability::native_wait;
    auto chosen = factory.create_lock(test::unique_resource("factory"), request);
    BOOST_TEST(chosen.strategy() == "pg_advisory");
    BOOST_TEST(chosen.try_lock_shared());
    chosen.unlock();
}

BOOST_AUTO_TEST_CASE(waiter_sleeps_in_the_server_and_wakes_at_release) {
    const auto name = test::unique_resource("server_wait");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    auto got = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    // The wait is a backend blocked on the lock, not a client polling.
    BOOST_TEST(eventually_counts(
        a, "SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) + " AND NOT granted", 1));
    const auto released = clock_type::now();
    holder.unlock();
    BOOST_TEST(got.get());
    BOOST_TEST_MESSAGE("hand-over " << ms_since(released) << " ms");
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) +
                       " AND granted AND mode = 'ExclusiveLock'") == 1);
    waiter.unlock();
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name)) == 0);
}

BOOST_AUTO_TEST_CASE(bounded_wait_times_out_with_false_and_leaves_no_waiter) {
    const auto name = test::unique_resource("bounded");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    BOOST_TEST(!waiter.try_lock_for(200ms));  // false, not an exception
    BOOST_TEST(!waiter.try_lock_shared_for(100ms));
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) +
                       " AND NOT granted") == 0);
    // Every session of this process is idle: none is left waiting or in a transaction.
    BOOST_TEST(a.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                       application_name + "' AND (state <> 'idle' OR wait_event_type = 'Lock')") ==
               0);
    BOOST_TEST(a.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                       application_name + "'") >= 2);
    holder.unlock();
    BOOST_TEST(waiter.try_lock_for(must_happen));
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(one_session_per_held_lock_and_none_left_after_unlock) {
    const auto name = test::unique_resource("sessions");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto r1 = make_lock(s, name);
    auto r2 = make_lock(s, name);
    BOOST_REQUIRE(r1.try_lock_shared());
    BOOST_REQUIRE(r2.try_lock_shared());
    // Two readers in one process are two backends, each with its own ShareLock.
    BOOST_TEST(a.count("SELECT count(DISTINCT pid) FROM pg_locks WHERE " + lock_rows(name) +
                       " AND mode = 'ShareLock' AND granted") == 2);
    r1.unlock();
    r2.unlock();
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name)) == 0);
}

BOOST_AUTO_TEST_CASE(promote_and_demote_hold_one_mode_at_a_time_and_never_none) {
    const auto name = test::unique_resource("promote");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto lock = make_lock(s, name);
    auto other = make_lock(s, name);
    const auto modes = "SELECT mode FROM pg_locks WHERE " + lock_rows(name) + " AND granted";
    BOOST_REQUIRE(lock.try_lock_shared());
    BOOST_TEST(lock.try_lock());  // sole reader: promoted
    BOOST_TEST(a.column(modes) == std::vector<std::string>{"ExclusiveLock"});
    BOOST_TEST(!other.try_lock_shared());
    BOOST_TEST(lock.try_lock_shared());  // demoted
    BOOST_TEST(a.column(modes) == std::vector<std::string>{"ShareLock"});
    BOOST_TEST(other.try_lock_shared());
    // Another reader present: the promotion fails and keeps the read lock.
    BOOST_TEST(!lock.try_lock());
    BOOST_TEST(!lock.try_lock_for(100ms));
    BOOST_TEST(lock.held_mode() == std::optional(lock_mode::shared));
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) +
                       " AND mode = 'ShareLock' AND granted") == 2);
    // A waiting promotion gets the write lock once the other reader leaves.
    auto promoted = std::async(std::launch::async, [&] { return lock.try_lock_for(must_happen); });
    BOOST_TEST(eventually_counts(
        a, "SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) + " AND NOT granted", 1));
    other.unlock();
    BOOST_TEST(promoted.get());
    BOOST_TEST(a.column(modes) == std::vector<std::string>{"ExclusiveLock"});
    lock.unlock();
}

BOOST_AUTO_TEST_CASE(two_waiting_promotions_deadlock_and_one_is_told) {
    // Both readers wait to promote: each waits for the other's read lock. The server's deadlock
    // detector cancels one wait, which throws acquire_error and keeps its read lock; once that
    // reader lets go, the other promotes.
    const auto name = test::unique_resource("deadlock");
    auto s = shared_store();
    auto r1 = make_lock(s, name);
    auto r2 = make_lock(s, name);
    BOOST_REQUIRE(r1.try_lock_shared());
    BOOST_REQUIRE(r2.try_lock_shared());
    std::promise<named_lock*> loser;
    auto promote = [&](named_lock& l) {
        try {
            return l.try_lock_for(must_happen);
        } catch (const acquire_error& e) {
            BOOST_TEST(std::string(e.what()).find("deadlock") != std::string::npos);
            BOOST_TEST(l.held_mode() == std::optional(lock_mode::shared));
            loser.set_value(&l);
            return false;
        }
    };
    auto p1 = std::async(std::launch::async, [&] { return promote(r1); });
    auto p2 = std::async(std::launch::async, [&] { return promote(r2); });
    auto f = loser.get_future();
    BOOST_REQUIRE(f.wait_for(must_happen) == std::future_status::ready);
    f.get()->unlock();
    const bool w1 = p1.get(), w2 = p2.get();
    BOOST_TEST(w1 != w2);
    (w1 ? r1 : r2).unlock();
}

BOOST_AUTO_TEST_CASE(terminated_session_is_reported_lost_and_never_regranted) {
    const auto name = test::unique_resource("terminated");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(s, name, o);
    BOOST_REQUIRE(holder.try_lock());
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(a.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks "
                       "WHERE " +
                       lock_rows(name) + ") t") == 1);
    // Whether or not the server's goodbye arrived yet, the owner hears the lock is gone.
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(!holder.held_mode().has_value());
    BOOST_TEST(lost == 1);
    auto next = make_lock(s, name);
    BOOST_TEST(next.try_lock());
    // The old owner's next try is a fresh request, refused while `next` holds.
    BOOST_TEST(!holder.try_lock());
    BOOST_TEST(!holder.is_acquired());
    holder.unlock();  // nothing held: no error
    BOOST_TEST(next.is_acquired());
    next.unlock();
}

// Issue 23, point 2: the holder learns of the end of its session from the server's goodbye on
// the socket (loss_fd), without asking. `tls`: the session must be a TLS one.
void loss_fd_wakes_the_holder(std::shared_ptr<store> s, const char* label, bool tls) {
    const auto name = test::unique_resource(label);
    admin a(endpoint(dsn_variable));
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(std::move(s), name, o);
    BOOST_TEST(!holder.loss_fd().has_value());  // not held: nothing to watch
    BOOST_REQUIRE(holder.try_lock());
    if (tls)
        BOOST_TEST(a.count("SELECT count(*) FROM pg_stat_ssl s JOIN pg_locks l ON l.pid = s.pid "
                           "WHERE s.ssl AND " +
                           lock_rows(name)) == 1);
    const auto fd = holder.loss_fd();
    BOOST_REQUIRE(fd.has_value());
    BOOST_REQUIRE(*fd >= 0);
    pollfd p{*fd, POLLIN, 0};
    BOOST_TEST(::poll(&p, 1, 0) == 0);  // quiet while the session lives
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(::poll(&p, 1, 0) == 0);  // asking leaves it quiet
    const auto terminated = clock_type::now();
    BOOST_REQUIRE(a.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks "
                          "WHERE " +
                          lock_rows(name) + ") t") == 1);
    BOOST_TEST(::poll(&p, 1, int(std::chrono::milliseconds(must_happen).count())) == 1);
    BOOST_TEST_MESSAGE("loss_fd readable " << ms_since(terminated)
                                           << " ms after pg_terminate_backend");
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(lost == 1);
    BOOST_TEST(!holder.loss_fd().has_value());
}

BOOST_AUTO_TEST_CASE(loss_fd_wakes_the_holder_when_the_server_ends_its_session) {
    loss_fd_wakes_the_holder(shared_store(), "loss-fd", false);
}

// The store's side of point 17: an acquire for a key whose session the server ended is refused
// loudly until the key is released, never granted afresh in its place.
BOOST_AUTO_TEST_CASE(the_store_never_grants_afresh_in_place_of_an_ended_session) {
    const auto name = test::unique_resource("store-regrant");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    key k(name);
    BOOST_REQUIRE(s->try_acquire(k, lock_mode::exclusive, 0ms));
    const auto fd = s->loss_fd(k);
    BOOST_REQUIRE(fd.has_value());
    BOOST_REQUIRE(*fd >= 0);
    BOOST_REQUIRE(a.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks "
                          "WHERE " +
                          lock_rows(name) + ") t") == 1);
    pollfd p{*fd, POLLIN, 0};
    BOOST_REQUIRE(::poll(&p, 1, int(std::chrono::milliseconds(must_happen).count())) == 1);
    // The first news on the socket is enough: the server's FATAL goodbye comes before its end.
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, 0ms), acquire_error);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::shared, 0ms), acquire_error);
    BOOST_CHECK_THROW(s->wait_acquire(k, lock_mode::exclusive, 0ms, deadline::max()),
                      acquire_error);
    BOOST_TEST(!s->holds(k));
    BOOST_TEST(s->loss_fd(k).value_or(0) == -1);
    s->release(k);  // drops the ended grant, without an error
    BOOST_TEST(s->try_acquire(k, lock_mode::exclusive, 0ms));  // a fresh request now
    s->release(k);
}

// Issue 23, point 17: a holder (another process) that does not ask is_acquired() and acquires
// again after its session was ended hears of the loss first (on_lost), and does not believe it
// holds while another process does.
BOOST_AUTO_TEST_CASE(a_lost_lock_is_reported_before_the_owner_acquires_again) {
    const auto name = test::unique_resource("reacquire");
    const auto dsn = endpoint(dsn_variable);
    admin a(dsn);
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        int lost = 0;
        lock_options o;
        o.on_lost = [&](const error&) { ++lost; };
        auto lock = make_lock(store_for(dsn), name, o);
        if (!lock.try_lock()) return 2;
        to_parent.put('H');
        if (to_child.get(must_happen) != 'A') return 3;
        const bool again = lock.try_lock();
        // 'L': told, and not held; 'T' would be a second holder; 'N': not told.
        to_parent.put(again ? 'T' : lost == 1 && !lock.held_mode() ? 'L' : 'N');
        return 0;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    BOOST_REQUIRE(a.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks "
                          "WHERE " +
                          lock_rows(name) + ") t") == 1);
    auto mine = make_lock(shared_store(), name);
    BOOST_TEST(mine.try_lock_for(must_happen));
    to_child.put('A');
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'L');
    BOOST_TEST(test::wait_child(child, must_happen) == 0);
    BOOST_TEST(mine.is_acquired());
    mine.unlock();
}

BOOST_AUTO_TEST_CASE(holder_killed_frees_the_lock_at_once) {
    // SIGKILL: the kernel closes the holder's socket and the backend ends at once; the waiter,
    // asleep in the server, is granted. The time is printed (the README's figure), not checked.
    const auto name = test::unique_resource("sigkill");
    const auto dsn = endpoint(dsn_variable);
    admin a(dsn);
    test::byte_pipe ready;
    pid_t child = test::fork_child([&] {
        auto lock = make_lock(store_for(dsn), name);
        if (!lock.try_lock()) return 2;
        ready.put('H');
        for (;;) ::pause();
    });
    BOOST_REQUIRE(ready.get(must_happen) == 'H');
    auto waiter = make_lock(shared_store(), name);
    clock_type::time_point killed_at;
    auto got = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    BOOST_REQUIRE(eventually_counts(
        a, "SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) + " AND NOT granted", 1));
    killed_at = clock_type::now();
    ::kill(child, SIGKILL);
    BOOST_TEST(got.get());
    BOOST_TEST_MESSAGE("granted " << ms_since(killed_at) << " ms after SIGKILL of the holder");
    test::wait_child(child, 5s);
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(a_forked_child_never_touches_the_parents_session) {
    // The child inherits the lock object and its session's socket. Unlocking there (or its
    // destructor doing so) must leave the parent's session alone: a statement or a close on
    // that socket would end or confuse the parent's session, and free its lock.
    const auto name = test::unique_resource("fork");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    pid_t child = test::fork_child([&] {
        holder.unlock();
        auto other = make_lock(s, name);  // the inherited store, used in the child
        return other.try_lock() ? 1 : 0;
    });
    BOOST_TEST(test::wait_child(child, must_happen) == 0, "the child got the parent's lock");
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) + " AND granted") ==
               1);
    holder.unlock();
}

BOOST_AUTO_TEST_CASE(a_forked_child_never_takes_the_parents_idle_session) {
    // The pool holds an idle session of the parent's when the child starts. Advisory locks are
    // re-entrant per session: a child that used that session, and the parent that takes it
    // next, would both be granted one name.
    const auto name = test::unique_resource("fork-idle");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    {
        auto warm = make_lock(s, name);  // takes the pooled session and gives it back
        BOOST_REQUIRE(warm.try_lock());
    }
    test::byte_pipe to_parent, to_child;
    pid_t child = test::fork_child([&] {
        auto lock = make_lock(s, name);
        if (!lock.try_lock()) return 2;
        to_parent.put('H');
        return to_child.get(must_happen) == 'D' ? 0 : 3;
    });
    BOOST_REQUIRE(to_parent.get(must_happen) == 'H');
    auto mine = make_lock(s, name);
    BOOST_TEST(!mine.try_lock(), "the parent and its child both hold the name");
    BOOST_TEST(a.count("SELECT count(DISTINCT pid) FROM pg_locks WHERE " + lock_rows(name) +
                       " AND granted") == 1);
    to_child.put('D');
    BOOST_TEST(test::wait_child(child, must_happen) == 0);
    BOOST_TEST(mine.try_lock_for(must_happen));
}

BOOST_AUTO_TEST_CASE(any_name_is_a_key_and_never_sql) {
    auto s = shared_store();
    admin a(endpoint(dsn_variable));
    const std::vector<std::string> names = {
        "quote's \"double\" `back`",    "'; DROP TABLE pg_locks; --",
        std::string("nul\0inside", 10), std::string("nul\0other", 9),
        std::string(1024 * 1024, 'x'),  std::string(1024 * 1024 - 1, 'x') + "y",
    };
    for (const auto& name : names) {
        auto first = make_lock(s, name);
        auto second = make_lock(s, name);
        BOOST_TEST(first.try_lock());
        BOOST_TEST(!second.try_lock());
        BOOST_TEST(a.count("SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) +
                           " AND granted") == 1);
        first.unlock();
        BOOST_TEST(second.try_lock());
        second.unlock();
    }
    // Names that differ only after a NUL, or in their last byte, are different locks.
    auto l0 = make_lock(s, names[2]);
    auto l1 = make_lock(s, names[3]);
    BOOST_TEST(l0.try_lock());
    BOOST_TEST(l1.try_lock());
    auto big0 = make_lock(s, names[4]);
    auto big1 = make_lock(s, names[5]);
    BOOST_TEST(big0.try_lock());
    BOOST_TEST(big1.try_lock());
    BOOST_CHECK_THROW(make_lock(s, std::string(1024 * 1024 + 1, 'x')), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(unknown_role_and_unknown_database_are_named_without_the_password) {
    const std::string secret = "s3cret-PW%21";  // %21 is '!': both spellings must stay hidden
    const std::string dsn = endpoint(dsn_variable);
    // postgresql://postgres@127.0.0.1:PORT/locktest -> host part and path.
    const auto at = dsn.find('@');
    const auto slash = dsn.rfind('/');
    BOOST_REQUIRE(at != std::string::npos && slash != std::string::npos);
    const auto host = dsn.substr(at + 1, slash - at - 1);
    auto check = [&](const std::string& url, const std::string& must_name, error_kind kind) {
        try {
            store_for(url);
            BOOST_FAIL("connected with " << url);
        } catch (const backend_error& e) {
            const std::string what = e.what();
            BOOST_TEST_MESSAGE(e.native_code() << ": " << what);
            BOOST_TEST(what.find(must_name) != std::string::npos, what);
            BOOST_TEST(what.find("s3cret") == std::string::npos, what);
            BOOST_TEST(what.find("PW!") == std::string::npos, what);
            BOOST_TEST(e.backend() == "pg_advisory");
            BOOST_TEST((e.kind() == kind), what);
        }
    };
    // A wrong setting: someone must act.
    check("postgresql://no_such_role:" + secret + "@" + host + "/locktest", "no_such_role",
          error_kind::permanent);
    check("postgresql://postgres:" + secret + "@" + host + "/no_such_db", "no_such_db",
          error_kind::permanent);
    // Nobody listens on port 1: the server may be up later.
    check("postgresql://postgres:" + secret + "@127.0.0.1:1/locktest", "127.0.0.1:1",
          error_kind::transient);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// TLS, as the role of scripts/services.sh that may connect only over TLS
// (postgresql://locktest_tls:PW@127.0.0.1:PORT/locktest_tls?sslmode=verify-full&sslrootcert=..).

constexpr const char* tls_variable = "LOCKSMITH_TEST_POSTGRES_TLS_DSN";

BOOST_AUTO_TEST_SUITE(tls, *boost::unit_test::precondition(test::server_precondition{tls_variable}))

// Plain TCP (pg_hba.conf rejects it), a CA that did not sign the server's certificate, a host
// name the certificate lacks (libpq checks `host`, connects to `hostaddr`), with sslmode given
// and left out: refused for good, naming the endpoint, never the password.
BOOST_AUTO_TEST_CASE(plain_wrong_ca_and_wrong_host_are_refused_for_good) {
    const auto dsn = endpoint(tls_variable);
    auto replaced = [](std::string text, const std::string& from, const std::string& to) {
        const auto at = text.find(from);
        BOOST_REQUIRE(at != std::string::npos);
        return text.replace(at, from.size(), to);
    };
    const auto wrong_host = replaced(dsn, "@127.0.0.1:", "@wrong.invalid:") + "&hostaddr=127.0.0.1";
    const std::vector<std::pair<std::string, std::string>> refused = {
        {dsn.substr(0, dsn.find('?')) + "?sslmode=disable", "127.0.0.1:"},
        {replaced(dsn, "/ca.pem", "/other-ca.pem"), "127.0.0.1:"},
        {wrong_host, "wrong.invalid"},
        {replaced(wrong_host, "sslmode=verify-full&", ""), "wrong.invalid"},
    };
    for (const auto& [url, shown] : refused) {
        BOOST_TEST_CONTEXT(redact_url(url)) {
            try {
                store_for(url);
                BOOST_ERROR("connected");
            } catch (const backend_error& e) {
                const std::string what = e.what();
                BOOST_TEST_MESSAGE(e.native_code() << ": " << what);
                BOOST_TEST(e.backend() == "pg_advisory");
                BOOST_TEST((e.kind() == error_kind::permanent), what);
                BOOST_TEST(what.find(shown) != std::string::npos, what);
                BOOST_TEST(what.find("locktest-tls-pw") == std::string::npos, what);
            }
        }
    }
}

// The end of a TLS session reaches the holder through loss_fd as over plain TCP.
BOOST_AUTO_TEST_CASE(loss_fd_wakes_the_holder_over_tls) {
    pg_server::loss_fd_wakes_the_holder(store_for(endpoint(tls_variable)), "tls-loss-fd", true);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Faults: a private PostgreSQL, started and stopped with scripts/services.sh in a state folder
// and on a port of this test's own.

using test::private_postgres;

BOOST_AUTO_TEST_SUITE(
    pg_faults, *boost::unit_test::precondition(locksmith::test::server_precondition{dsn_variable}))

BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_back) {
    private_postgres server;
    auto o = options_for(server.dsn());
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    auto s = strategies::make_pg_advisory_store(o);
    const auto name = test::unique_resource("fault");
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    auto waited = std::async(std::launch::async, [&]() -> std::string {
        try {
            return waiter.try_lock_for(must_happen) ? "granted" : "timed out";
        } catch (const backend_error& e) {
            return std::string("backend_error: ") + e.what();
        }
    });
    {
        admin a(server.dsn());
        BOOST_REQUIRE(eventually_counts(
            a, "SELECT count(*) FROM pg_locks WHERE " + lock_rows(name) + " AND NOT granted", 1));
    }
    const auto stopped = clock_type::now();
    server.stop();
    BOOST_REQUIRE(waited.wait_for(must_happen) == std::future_status::ready);
    const auto outcome = waited.get();
    BOOST_TEST_MESSAGE("waiter: " << outcome << " (" << ms_since(stopped) << " ms after stop)");
    BOOST_TEST(outcome.find("backend_error: pg_advisory: ") == 0, outcome);
    BOOST_TEST(outcome.find(server.dsn().substr(0, 20)) != std::string::npos, outcome);
    // The holder's session ended with the server: the lock is reported lost, not held.
    BOOST_TEST(!holder.is_acquired());
    // While the server is down, new requests fail with a clear error, within the timeouts.
    auto fresh = make_lock(s, name);
    const auto asked = clock_type::now();
    try {
        (void)fresh.try_lock();
        BOOST_FAIL("granted while the server is down");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE("while down: " << e.what());
        BOOST_TEST(e.native_code() == "connect");
        BOOST_TEST(std::string(e.what()).find("127.0.0.1") != std::string::npos);
    }
    BOOST_TEST(ms_since(asked) < 30000.0);  // safety net: an answer, not a hang
    server.start();
    // Same process, same store: new locks work, exclusion too.
    BOOST_TEST(fresh.try_lock());
    BOOST_TEST(!waiter.try_lock());
    BOOST_TEST(!holder.try_lock());
    fresh.unlock();
    BOOST_TEST(holder.try_lock_for(must_happen));
    holder.unlock();
}

// A server that stops answering (here: the holder's backend, SIGSTOPped) says nothing about the
// lock: asking whether it is still held is an error naming the timeout, not a loss. (It was
// reported as lost, and `locksmith run` said another process had removed or taken it over.)
// Once our side has closed the session, the lock is gone, and that is a loss.
BOOST_AUTO_TEST_CASE(a_stalled_server_is_no_answer_not_a_loss) {
    private_postgres server;
    auto o = options_for(server.dsn());
    o.command_timeout = 1s;
    auto s = strategies::make_pg_advisory_store(o);
    const auto name = test::unique_resource("stalled");
    int lost = 0;
    lock_options lo;
    lo.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(s, name, lo);
    BOOST_REQUIRE(holder.try_lock());
    admin a(server.dsn());
    const auto backend = std::stoi(
        a.column("SELECT pid FROM pg_locks WHERE " + lock_rows(name) + " AND granted").at(0));
    BOOST_REQUIRE(::kill(backend, SIGSTOP) == 0);
    try {
        (void)holder.is_acquired();
        BOOST_ERROR("a server that did not answer gave an answer");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST(e.native_code() == "timeout");
        BOOST_TEST((e.kind() == error_kind::transient));
    }
    BOOST_TEST(lost == 0);
    ::kill(backend, SIGCONT);
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(lost == 1);
}

BOOST_AUTO_TEST_SUITE_END()
