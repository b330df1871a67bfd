// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy against a real MariaDB: the shared server of scripts/services.sh
// (LOCKSMITH_TEST_MARIADB_DSN, and its TLS-only user, LOCKSMITH_TEST_MARIADB_TLS_DSN) and, for
// the fault cases, a private server this test starts, stops and restarts with the same script.
// The cases are pg_advisory's (tests/integration/pg_advisory_integration_test.cpp), with KILL
// CONNECTION where those use pg_terminate_backend, and those of GET_LOCK's own traps: names over
// 64 characters, and a session that is granted a name it holds already.
#define BOOST_TEST_MODULE mysql_get_lock_integration
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mysql.h>

#include <locksmith/locksmith.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/mysql_get_lock.hpp>
#include <locksmith/strategies/sql.hpp>

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

constexpr const char* dsn_variable = "LOCKSMITH_TEST_MARIADB_DSN";
constexpr const char* tls_variable = "LOCKSMITH_TEST_MARIADB_TLS_DSN";
// The safety net of cases that wait for something that must happen; never a speed check.
const auto must_happen = test::patience(30s);

strategies::mysql_get_lock_options options_for(const std::string& dsn) {
    strategies::mysql_get_lock_options o;
    o.dsn = dsn;
    o.connect_timeout = 2s;
    o.command_timeout = 5s;
    return o;
}

std::shared_ptr<store> store_for(const std::string& dsn) {
    return strategies::make_mysql_get_lock_store(options_for(dsn));
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(dsn_variable));
}

named_lock make_lock(std::shared_ptr<store> s, const std::string& name, lock_options o = {}) {
    return named_lock(std::move(s), std::make_shared<key>(name), std::move(o));
}

using test::ms_since;

// A connection of the test's own (same user as the DSN, TLS as it asks), to look at the server
// from outside the strategy and to KILL the strategy's sessions (a user may kill its own).
class admin {
  public:
    explicit admin(const std::string& dsn) : db_(mysql_init(nullptr)) {
        const auto d = strategies::parse_sql_dsn(dsn);
        if (!d.tls_ca.empty()) {
            my_bool on = 1;
            mysql_options(db_, MYSQL_OPT_SSL_ENFORCE, &on);
            mysql_options(db_, MYSQL_OPT_SSL_CA, d.tls_ca.c_str());
        }
        BOOST_REQUIRE_MESSAGE(
            mysql_real_connect(db_, d.host.c_str(), d.user.c_str(), d.password.c_str(),
                               d.database.c_str(), unsigned(d.port), nullptr, 0),
            "admin connection failed: " << mysql_error(db_));
    }
    ~admin() { mysql_close(db_); }
    admin(const admin&) = delete;
    admin& operator=(const admin&) = delete;

    // The first column of the first row ("" for NULL or no row).
    std::string value(const std::string& sql) {
        BOOST_REQUIRE_MESSAGE(mysql_query(db_, sql.c_str()) == 0, sql << ": " << mysql_error(db_));
        MYSQL_RES* r = mysql_store_result(db_);
        std::string out;
        if (r) {
            if (MYSQL_ROW row = mysql_fetch_row(r); row && row[0]) out = row[0];
            mysql_free_result(r);
        }
        return out;
    }
    // The connection that holds `name` (a lock name as the strategy maps it), 0 for none.
    long holder(const std::string& name) {
        const auto v =
            value("SELECT IS_USED_LOCK('" + escaped(strategies::mysql_get_lock_name(name)) + "')");
        return v.empty() ? 0 : std::stol(v);
    }
    // Sessions waiting for a user-level lock (any test's: `at least`, never `exactly`).
    long waiting() {
        return std::stol(
            value("SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'"));
    }
    // Ends the session that holds `name`; true when one did.
    bool kill_holder(const std::string& name) {
        const long id = holder(name);
        if (id == 0) return false;
        value("KILL CONNECTION " + std::to_string(id));
        return true;
    }

  private:
    std::string escaped(const std::string& text) {
        std::string out(text.size() * 2 + 1, '\0');
        out.resize(mysql_real_escape_string(db_, out.data(), text.data(), text.size()));
        return out;
    }
    MYSQL* db_;
};

}  // namespace

// No server needed: the names, and options checked before anything connects.
BOOST_AUTO_TEST_CASE(names_fit_64_characters_and_never_meet) {
    using strategies::mysql_get_lock_name;
    const std::string readable(54, 'r');
    BOOST_TEST(mysql_get_lock_name("invoice.42") == "locksmith:invoice.42");
    BOOST_TEST(mysql_get_lock_name(readable) == "locksmith:" + readable);
    BOOST_TEST(mysql_get_lock_name(readable).size() == 64u);
    // One character more, a byte outside printable ASCII, a NUL: the hash form.
    for (const std::string name :
         {readable + "r", std::string("caf\xc3\xa9"), std::string("tab\there"),
          std::string("nul\0x", 5), std::string(1024 * 1024, 'x')}) {
        const auto mapped = mysql_get_lock_name(name);
        BOOST_TEST(mapped.size() == 42u, mapped);
        BOOST_TEST(mapped.rfind("locksmith#", 0) == 0, mapped);
    }
    // The two forms never meet: a readable name that spells a hash form is another lock.
    const auto hashed = mysql_get_lock_name(readable + "r");
    BOOST_TEST(mysql_get_lock_name(hashed.substr(10)) != hashed);
    BOOST_TEST(mysql_get_lock_name(std::string("nul\0x", 5)) !=
               mysql_get_lock_name(std::string("nul\0y", 5)));
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_without_the_password) {
    const std::string secret = "s3cret-PW%21";
    for (const std::string bad :
         {"postgresql://u:" + secret + "@h/db", "mysql://u:" + secret + "@h:99999/db",
          "mysql://u:" + secret + "@h:3306/db?nonsense=1", "mysql://u:" + secret + "@h:3306",
          "mysql://u:" + secret + "@h:3306/db?sslmode=prefer",
          std::string("sqlite:///tmp/locks.db"), "redis://u:" + secret + "@h/0"}) {
        try {
            store_for(bad);
            BOOST_FAIL("accepted " << bad);
        } catch (const error& e) {
            BOOST_TEST_MESSAGE(e.what());
            BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
            BOOST_TEST(std::string(e.what()).find("mysql_get_lock: ") == 0, e.what());
        }
        try {
            strategies::mysql_get_lock_options::from_json({{"dsn", bad}});
            BOOST_FAIL("accepted " << bad);
        } catch (const config_error& e) {
            BOOST_TEST(e.pointer() == "/dsn");
            BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
        }
    }
    using strategies::mysql_get_lock_options;
    BOOST_CHECK_THROW(
        mysql_get_lock_options::from_json({{"dsn", "mysql://h/db"}, {"pool_size", 0}}),
        config_error);
    BOOST_CHECK_THROW(mysql_get_lock_options::from_json({{"dsn", "mysql://h/db"}, {"typo", 1}}),
                      config_error);
    BOOST_CHECK_THROW(
        mysql_get_lock_options::from_json({{"dsn", "mysql://h/db"}, {"command_timeout_s", 0}}),
        config_error);
    try {
        mysql_get_lock_options::from_json(
            {{"dsn", "mysql://u:" + secret + "@h/db"}, {"password_file", "/nonexistent"}});
        BOOST_FAIL("accepted a password twice");
    } catch (const config_error& e) {
        BOOST_TEST(e.pointer() == "/password_file");
        BOOST_TEST(std::string(e.what()).find("s3cret") == std::string::npos, e.what());
    }
    const auto o = mysql_get_lock_options::from_json(
        {{"dsn", "mariadb://u@h:3306/db"}, {"password_file", "/run/pw"}, {"pool_size", 2}});
    BOOST_TEST(o.password_from.file == "/run/pw");
    BOOST_TEST(o.pool_size == 2u);
}

BOOST_AUTO_TEST_SUITE(mariadb_server,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          dsn_variable}))

BOOST_AUTO_TEST_CASE(registry_and_factory_build_the_store_from_json_options) {
    auto d = default_registry().find("mysql_get_lock");
    BOOST_REQUIRE(d);
    BOOST_TEST(d->needs_configuration);
    BOOST_TEST(d->default_priority == 81);
    BOOST_TEST(!has(d->capabilities, capability::shared));
    BOOST_TEST(!has(d->capabilities, capability::fencing));
    auto s = d->create(nlohmann::json{{"dsn", endpoint(dsn_variable)}});
    auto lock = make_lock(s, test::unique_resource("registry"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    BOOST_CHECK_THROW(d->validate_options(nlohmann::json::object()), config_error);

    const nlohmann::json doc = {
        {"strategies", {{"mysql_get_lock", {{"options", {{"dsn", endpoint(dsn_variable)}}}}}}}};
    strategy_registry registry;
    register_builtin_strategies(registry);
    lock_factory factory(config::parse(doc.dump()), registry);
    lock_request request;
    request.require = capability::exclusive | capability::distributed | capability::crash_release |
                      capability::native_wait;
    const auto name = test::unique_resource("factory");
    auto chosen = factory.create_lock(name, request);
    BOOST_TEST(chosen.strategy() == "mysql_get_lock");
    BOOST_TEST(chosen.try_lock_shared());  // a shared request takes the exclusive lock
    auto other = factory.create_lock(name, request);
    BOOST_TEST(!other.try_lock_shared());
    chosen.unlock();
}

BOOST_AUTO_TEST_CASE(waiter_sleeps_in_the_server_and_wakes_at_release) {
    const auto name = test::unique_resource("server_wait");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    const long before = a.waiting();
    auto got = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    // The wait is a session blocked in GET_LOCK, not a client polling.
    BOOST_TEST(test::eventually([&] { return a.waiting() > before; }, must_happen));
    const auto released = clock_type::now();
    holder.unlock();
    BOOST_TEST(got.get());
    BOOST_TEST_MESSAGE("hand-over " << ms_since(released) << " ms");
    BOOST_TEST(a.holder(name) != 0);
    waiter.unlock();
    BOOST_TEST(a.holder(name) == 0);
}

// A wait longer than a slice (half the command timeout) is several GET_LOCKs: it still ends at
// the caller's deadline with false, and is granted across a slice's end.
BOOST_AUTO_TEST_CASE(waits_span_slices_and_keep_the_deadline) {
    const auto name = test::unique_resource("slices");
    auto o = options_for(endpoint(dsn_variable));
    o.command_timeout = 1s;  // slices of 500 ms
    auto s = strategies::make_mysql_get_lock_store(o);
    // A slice longer than the read timeout would end in "Lost connection", which the wait rides
    // out as an outage: a healthy wait must meet no server error at all.
    struct outage_counter : log_sink {
        std::atomic<int> outages{0};
        void log(const log_record& r) override { outages += r.event == "wait_outage"; }
    };
    auto outages = std::make_shared<outage_counter>();
    lock_options lo;
    lo.logger = outages;
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name, lo);
    BOOST_REQUIRE(holder.try_lock());
    // A bounded wait of several read timeouts: a slice too long then overruns the read timeout
    // by seconds, not by a margin a loaded machine's scheduling could hide (a 1.3 s wait let a
    // mutation of the slice through in a loaded CI run).
    auto started = clock_type::now();
    BOOST_TEST(!waiter.try_lock_for(3300ms));  // false, not an exception
    const auto waited = ms_since(started);
    BOOST_TEST(waited >= 3300.0);
    BOOST_TEST(waited < 3300.0 + 1000.0 * test::patience(2s).count(), waited);
    auto got = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    std::this_thread::sleep_for(1200ms);  // two slices and more
    holder.unlock();
    BOOST_TEST(got.get());
    waiter.unlock();
    BOOST_TEST(outages->outages.load() == 0);
}

BOOST_AUTO_TEST_CASE(bounded_wait_times_out_with_false_and_leaves_no_waiter) {
    const auto name = test::unique_resource("bounded");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    const long holder_id = a.holder(name);
    BOOST_TEST(!waiter.try_lock_for(200ms));
    BOOST_TEST(!waiter.try_lock());
    BOOST_TEST(a.holder(name) == holder_id);
    holder.unlock();
    BOOST_TEST(waiter.try_lock_for(must_happen));
    BOOST_TEST(a.holder(name) != 0);
    waiter.unlock();
}

// GET_LOCK is re-entrant per session: two lock objects of one process must never share a session
// (nor a session that still holds a name go back to the pool), in one thread or in two, through
// many grants and releases on few pooled sessions.
BOOST_AUTO_TEST_CASE(two_lock_objects_of_one_process_exclude_each_other) {
    const auto name = test::unique_resource("one-process");
    admin a(endpoint(dsn_variable));
    auto o = options_for(endpoint(dsn_variable));
    o.pool_size = 1;
    auto s = strategies::make_mysql_get_lock_store(o);
    for (int round = 0; round < 20; ++round) {
        auto first = make_lock(s, name);
        auto second = make_lock(s, name);
        BOOST_REQUIRE(first.try_lock());
        BOOST_TEST(!second.try_lock());
        BOOST_TEST(!second.try_lock_for(10ms));
        first.unlock();
        BOOST_TEST(second.try_lock());
        BOOST_TEST(!first.try_lock());
        second.unlock();
        BOOST_TEST(a.holder(name) == 0);
    }
    // Held names are held by sessions of their own.
    auto l1 = make_lock(s, name + "-1");
    auto l2 = make_lock(s, name + "-2");
    BOOST_REQUIRE(l1.try_lock());
    BOOST_REQUIRE(l2.try_lock());
    BOOST_TEST(a.holder(name + "-1") != a.holder(name + "-2"));
    // Threads: a counter that only the holder touches loses no update.
    int counter = 0;
    auto work = [&] {
        auto l = make_lock(s, name);
        for (int i = 0; i < 30; ++i) {
            BOOST_REQUIRE(l.try_lock_for(must_happen));
            const int seen = counter;
            std::this_thread::yield();
            counter = seen + 1;
            l.unlock();
        }
    };
    std::thread t1(work), t2(work);
    t1.join();
    t2.join();
    BOOST_TEST(counter == 60);
}

BOOST_AUTO_TEST_CASE(killed_connection_is_reported_lost_and_never_regranted) {
    const auto name = test::unique_resource("killed");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(s, name, o);
    BOOST_REQUIRE(holder.try_lock());
    BOOST_TEST(holder.is_acquired());
    BOOST_REQUIRE(a.kill_holder(name));
    // Whether or not the server's goodbye arrived yet, the owner hears the lock is gone.
    BOOST_TEST(!holder.is_acquired());
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
// the socket (loss_fd), without asking.
void loss_fd_wakes_the_holder(const std::string& dsn, const char* label) {
    const auto name = test::unique_resource(label);
    admin a(dsn);
    int lost = 0;
    lock_options o;
    o.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(store_for(dsn), name, o);
    BOOST_TEST(!holder.loss_fd().has_value());  // not held: nothing to watch
    BOOST_REQUIRE(holder.try_lock());
    const auto fd = holder.loss_fd();
    BOOST_REQUIRE(fd.has_value());
    BOOST_REQUIRE(*fd >= 0);
    pollfd p{*fd, POLLIN, 0};
    BOOST_TEST(::poll(&p, 1, 0) == 0);  // quiet while the session lives
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(::poll(&p, 1, 0) == 0);  // asking leaves it quiet
    const auto killed = clock_type::now();
    BOOST_REQUIRE(a.kill_holder(name));
    BOOST_TEST(::poll(&p, 1, int(std::chrono::milliseconds(must_happen).count())) == 1);
    BOOST_TEST_MESSAGE("loss_fd readable " << ms_since(killed) << " ms after KILL CONNECTION");
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(lost == 1);
    BOOST_TEST(!holder.loss_fd().has_value());
}

BOOST_AUTO_TEST_CASE(loss_fd_wakes_the_holder_when_the_server_kills_its_session) {
    loss_fd_wakes_the_holder(endpoint(dsn_variable), "loss-fd");
}

BOOST_AUTO_TEST_CASE(the_store_never_grants_afresh_in_place_of_a_killed_session) {
    const auto name = test::unique_resource("store-regrant");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    key k(name);
    BOOST_REQUIRE(s->try_acquire(k, lock_mode::exclusive, 0ms));
    const auto fd = s->loss_fd(k);
    BOOST_REQUIRE(fd.has_value());
    BOOST_REQUIRE(*fd >= 0);
    BOOST_REQUIRE(a.kill_holder(name));
    pollfd p{*fd, POLLIN, 0};
    BOOST_REQUIRE(::poll(&p, 1, int(std::chrono::milliseconds(must_happen).count())) == 1);
    BOOST_CHECK_THROW(s->try_acquire(k, lock_mode::exclusive, 0ms), acquire_error);
    BOOST_CHECK_THROW(s->wait_acquire(k, lock_mode::exclusive, 0ms, deadline::max()),
                      acquire_error);
    BOOST_TEST(!s->holds(k));
    BOOST_TEST(s->loss_fd(k).value_or(0) == -1);
    s->release(k);  // drops the ended grant, without an error
    BOOST_TEST(s->try_acquire(k, lock_mode::exclusive, 0ms));  // a fresh request now
    s->release(k);
}

// Issue 23, point 17: a holder (another process) that does not ask is_acquired() and acquires
// again after its session was killed hears of the loss first (on_lost), and does not believe it
// holds while another process does.
BOOST_AUTO_TEST_CASE(a_lost_lock_is_reported_before_the_owner_acquires_again) {
    const auto name = test::unique_resource("reacquire");
    const auto dsn = endpoint(dsn_variable);
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
    {
        admin a(dsn);
        BOOST_REQUIRE(a.kill_holder(name));
    }
    auto mine = make_lock(shared_store(), name);
    BOOST_TEST(mine.try_lock_for(must_happen));
    to_child.put('A');
    BOOST_TEST(to_parent.get(must_happen).value_or('?') == 'L');
    BOOST_TEST(test::wait_child(child, must_happen) == 0);
    BOOST_TEST(mine.is_acquired());
    mine.unlock();
}

BOOST_AUTO_TEST_CASE(holder_killed_frees_the_lock_at_once) {
    // SIGKILL: the kernel closes the holder's socket and the server ends its session at once;
    // the waiter, asleep in the server, is granted. The time is printed, not checked.
    const auto name = test::unique_resource("sigkill");
    const auto dsn = endpoint(dsn_variable);
    test::byte_pipe ready;
    pid_t child = test::fork_child([&] {
        auto lock = make_lock(store_for(dsn), name);
        if (!lock.try_lock()) return 2;
        ready.put('H');
        for (;;) ::pause();
    });
    BOOST_REQUIRE(ready.get(must_happen) == 'H');
    admin a(dsn);
    const long before = a.waiting();
    auto waiter = make_lock(shared_store(), name);
    auto got = std::async(std::launch::async, [&] { return waiter.try_lock_for(must_happen); });
    BOOST_REQUIRE(test::eventually([&] { return a.waiting() > before; }, must_happen));
    const auto killed_at = clock_type::now();
    ::kill(child, SIGKILL);
    BOOST_TEST(got.get());
    BOOST_TEST_MESSAGE("granted " << ms_since(killed_at) << " ms after SIGKILL of the holder");
    test::wait_child(child, 5s);
    waiter.unlock();
}

BOOST_AUTO_TEST_CASE(a_forked_child_never_touches_the_parents_session) {
    const auto name = test::unique_resource("fork");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    const long id = a.holder(name);
    pid_t child = test::fork_child([&] {
        holder.unlock();
        auto other = make_lock(s, name);  // the inherited store, used in the child
        return other.try_lock() ? 1 : 0;
    });
    BOOST_TEST(test::wait_child(child, must_happen) == 0, "the child got the parent's lock");
    BOOST_TEST(holder.is_acquired());
    BOOST_TEST(a.holder(name) == id);
    holder.unlock();
}

BOOST_AUTO_TEST_CASE(a_forked_child_never_takes_the_parents_idle_session) {
    // GET_LOCK is re-entrant per session: a child that used the parent's pooled session, and
    // the parent that takes it next, would both be granted one name.
    const auto name = test::unique_resource("fork-idle");
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
    to_child.put('D');
    BOOST_TEST(test::wait_child(child, must_happen) == 0);
    BOOST_TEST(mine.try_lock_for(must_happen));
}

// Names of any length and bytes: MySQL refuses lock names over 64 characters, and MariaDB
// would take them as they are; either way each name is one lock of its own, and no name reaches
// SQL text.
BOOST_AUTO_TEST_CASE(any_name_is_a_lock_and_never_sql) {
    auto s = shared_store();
    admin a(endpoint(dsn_variable));
    const auto unique = test::unique_resource("names");
    const std::vector<std::string> names = {
        unique + "quote's \"double\" `back`",
        unique + "'; DO RELEASE_ALL_LOCKS(); --",
        unique + std::string(54 - unique.size(), 'n'),  // the longest readable name
        unique + std::string(55 - unique.size(), 'n'),  // one more: hashed
        unique + std::string(200, 'L'),
        std::string("nul\0inside", 10) + unique,
        std::string("nul\0other", 9) + unique,
        unique + "caf\xc3\xa9 \xff\xfe",
        std::string(1024 * 1024 - unique.size(), 'x') + unique,
        std::string(1024 * 1024 - 1 - unique.size(), 'x') + unique + "y",
    };
    for (const auto& name : names) {
        BOOST_TEST_CONTEXT(name.substr(0, 80)) {
            auto first = make_lock(s, name);
            auto second = make_lock(s, name);
            BOOST_TEST(first.try_lock());
            BOOST_TEST(!second.try_lock());
            BOOST_TEST(a.holder(name) != 0);
            first.unlock();
            BOOST_TEST(second.try_lock());
            second.unlock();
            BOOST_TEST(a.holder(name) == 0);
        }
    }
    // All held at once: no two of them are one lock.
    std::vector<named_lock> held;
    for (const auto& name : names) {
        held.push_back(make_lock(s, name));
        BOOST_TEST(held.back().try_lock());
    }
    std::set<long> sessions;
    for (const auto& name : names) sessions.insert(a.holder(name));
    BOOST_TEST(sessions.size() == names.size());
    BOOST_CHECK_THROW(make_lock(s, std::string(1024 * 1024 + 1, 'x')), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(status_names_the_holding_connection) {
    const auto name = test::unique_resource("status");
    admin a(endpoint(dsn_variable));
    auto s = shared_store();
    BOOST_TEST((s->status(name).held == lock_status::state::free));
    auto holder = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    const auto st = s->status(name);
    BOOST_TEST((st.held == lock_status::state::held_exclusive));
    BOOST_REQUIRE(st.holders.size() == 1u);
    BOOST_TEST(st.holders[0] == "connection id " + std::to_string(a.holder(name)));
    holder.unlock();
}

BOOST_AUTO_TEST_CASE(password_file_instead_of_the_password_in_the_dsn) {
    const auto dsn = endpoint(dsn_variable);
    auto d = strategies::parse_sql_dsn(dsn);
    BOOST_REQUIRE(!d.password.empty());
    const std::string dir = "/tmp/locksmith-mysql-pw-" + std::to_string(::getpid());
    const std::string file = dir + "/password";
    BOOST_REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    std::ofstream(file) << d.password << "\n";
    ::chmod(file.c_str(), 0600);
    const auto colon = dsn.find(':', dsn.find("://") + 3);
    const auto without = dsn.substr(0, colon) + dsn.substr(dsn.find('@'));
    auto o = options_for(without);
    o.password_from.file = file;
    auto lock = make_lock(strategies::make_mysql_get_lock_store(o), test::unique_resource("pwf"));
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    // Readable by others: refused, without the password.
    ::chmod(file.c_str(), 0644);
    try {
        strategies::make_mysql_get_lock_store(o);
        BOOST_ERROR("a password file readable by all was used");
    } catch (const std::exception& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST(std::string(e.what()).find(d.password) == std::string::npos, e.what());
    }
    // A wrong password from the file: refused for good, without it.
    std::ofstream(file) << "wrong-" << d.password;
    ::chmod(file.c_str(), 0600);
    try {
        strategies::make_mysql_get_lock_store(o);
        BOOST_ERROR("a wrong password was accepted");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what());
        BOOST_TEST((e.kind() == error_kind::permanent));
        BOOST_TEST(std::string(e.what()).find(d.password) == std::string::npos, e.what());
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
}

BOOST_AUTO_TEST_CASE(unknown_user_and_unknown_database_are_named_without_the_password) {
    const std::string secret = "s3cret-PW%21";  // %21 is '!': both spellings must stay hidden
    const std::string dsn = endpoint(dsn_variable);
    const auto at = dsn.find('@');
    const auto slash = dsn.rfind('/');
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
            BOOST_TEST(e.backend() == "mysql_get_lock");
            BOOST_TEST((e.kind() == kind), what);
        }
    };
    check("mysql://no_such_user:" + secret + "@" + host + "/locktest", "no_such_user",
          error_kind::permanent);
    check("mysql://locktest:locktest-pw@" + host + "/no_such_db", "no_such_db",
          error_kind::permanent);
    check("mysql://locktest:" + secret + "@127.0.0.1:1/locktest", "127.0.0.1:1",
          error_kind::transient);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// TLS, as the user of scripts/services.sh that may connect only over TLS (REQUIRE SSL).

BOOST_AUTO_TEST_SUITE(tls, *boost::unit_test::precondition(test::server_precondition{tls_variable}))

// Plain TCP (refused by the server), a CA that did not sign the server's certificate, a host
// name the certificate lacks ("127.1" reaches 127.0.0.1 but is no IP address to the check):
// refused for good, naming the endpoint, never the password.
BOOST_AUTO_TEST_CASE(plain_wrong_ca_and_wrong_host_are_refused_for_good) {
    const auto dsn = endpoint(tls_variable);
    auto replaced = [](std::string text, const std::string& from, const std::string& to) {
        const auto at = text.find(from);
        BOOST_REQUIRE(at != std::string::npos);
        return text.replace(at, from.size(), to);
    };
    const auto wrong_host = replaced(dsn, "@127.0.0.1:", "@127.1:");
    const std::vector<std::pair<std::string, std::string>> refused = {
        {dsn.substr(0, dsn.find('?')), "127.0.0.1:"},
        {replaced(dsn, "/ca.pem", "/other-ca.pem"), "127.0.0.1:"},
        {wrong_host, "127.1:"},
        {replaced(wrong_host, "sslmode=verify-full&", ""), "127.1:"},
    };
    for (const auto& [url, shown] : refused) {
        BOOST_TEST_CONTEXT(redact_url(url)) {
            try {
                store_for(url);
                BOOST_ERROR("connected");
            } catch (const backend_error& e) {
                const std::string what = e.what();
                BOOST_TEST_MESSAGE(e.native_code() << ": " << what);
                BOOST_TEST(e.backend() == "mysql_get_lock");
                BOOST_TEST((e.kind() == error_kind::permanent), what);
                BOOST_TEST(what.find(shown) != std::string::npos, what);
                BOOST_TEST(what.find("locktest-tls-pw") == std::string::npos, what);
            }
        }
    }
}

// The session is a TLS one, and its end reaches the holder through loss_fd as over plain TCP.
BOOST_AUTO_TEST_CASE(loss_fd_wakes_the_holder_over_tls) {
    const auto dsn = endpoint(tls_variable);
    auto holder = make_lock(store_for(dsn), test::unique_resource("tls-cipher"));
    BOOST_REQUIRE(holder.try_lock());
    admin a(dsn);
    BOOST_TEST(!a.value("SHOW SESSION STATUS LIKE 'Ssl_cipher'").empty());
    holder.unlock();
    mariadb_server::loss_fd_wakes_the_holder(dsn, "tls-loss-fd");
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Faults: a private MariaDB, started and stopped with scripts/services.sh in a state folder and
// on a port of this test's own.

BOOST_AUTO_TEST_SUITE(mariadb_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          dsn_variable}))

BOOST_AUTO_TEST_CASE(server_stopped_while_held_and_while_waiting_then_back) {
    test::private_mariadb server;
    auto o = options_for(server.dsn());
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    auto s = strategies::make_mysql_get_lock_store(o);
    const auto name = test::unique_resource("fault");
    int lost = 0;
    lock_options lo;
    lo.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(s, name, lo);
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
        BOOST_REQUIRE(test::eventually([&] { return a.waiting() >= 1; }, must_happen));
    }
    const auto fd = holder.loss_fd();
    BOOST_REQUIRE(fd.value_or(-1) >= 0);
    const auto stopped = clock_type::now();
    server.stop();
    BOOST_REQUIRE(waited.wait_for(must_happen) == std::future_status::ready);
    const auto outcome = waited.get();
    BOOST_TEST_MESSAGE("waiter: " << outcome << " (" << ms_since(stopped) << " ms after stop)");
    BOOST_TEST(outcome.find("backend_error: mysql_get_lock: ") == 0, outcome);
    BOOST_TEST(outcome.find("127.0.0.1:" + std::to_string(server.port())) != std::string::npos,
               outcome);
    // The holder's session ended with the server: its socket says so, and the lock is reported
    // lost, not held.
    pollfd p{*fd, POLLIN, 0};
    BOOST_TEST(::poll(&p, 1, 0) == 1);
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(lost == 1);
    // While the server is down, new requests fail with a clear error, within the timeouts.
    auto fresh = make_lock(s, name);
    const auto asked = clock_type::now();
    try {
        (void)fresh.try_lock();
        BOOST_FAIL("granted while the server is down");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE("while down: " << e.what());
        BOOST_TEST((e.kind() == error_kind::transient), e.what());
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

// A server that stops answering (SIGSTOP) says nothing about the lock: asking whether it is
// still held is an error, not a loss, and a wait for the lock rides the silence out (a stalled
// server may be one that restarts) until its deadline, then ends with the server's error.
BOOST_AUTO_TEST_CASE(a_stalled_server_is_no_answer_not_a_loss) {
    test::private_mariadb server;
    auto o = options_for(server.dsn());
    o.command_timeout = 1s;
    auto s = strategies::make_mysql_get_lock_store(o);
    const auto name = test::unique_resource("stalled");
    int lost = 0;
    lock_options lo;
    lo.on_lost = [&](const error&) { ++lost; };
    auto holder = make_lock(s, name, lo);
    auto waiter = make_lock(s, name);
    BOOST_REQUIRE(holder.try_lock());
    // The server's pid, from its pid file.
    int pid = 0;
    std::ifstream(admin(server.dsn()).value("SELECT @@pid_file")) >> pid;
    BOOST_REQUIRE(pid > 0);
    BOOST_REQUIRE(::kill(pid, SIGSTOP) == 0);
    const auto asked = clock_type::now();
    try {
        (void)holder.is_acquired();
        BOOST_ERROR("a server that did not answer gave an answer");
    } catch (const backend_error& e) {
        BOOST_TEST_MESSAGE(e.what() << " after " << ms_since(asked) << " ms");
        BOOST_TEST((e.kind() == error_kind::transient));
    }
    BOOST_TEST(lost == 0);
    const auto waiting = clock_type::now();
    try {
        (void)waiter.try_lock_for(3s);
        BOOST_ERROR("a wait on a stalled server was granted");
    } catch (const backend_error& e) {
        BOOST_TEST((e.kind() == error_kind::transient));
    }
    BOOST_TEST(ms_since(waiting) > 1500.0);  // tried again, not given up at the first silence
    // By its deadline, plus the command timeout of the try under way and a slice.
    BOOST_TEST(ms_since(waiting) < 3000.0 + 2000.0 * test::patience(1s).count());
    ::kill(pid, SIGCONT);
    BOOST_TEST(!holder.is_acquired());
    BOOST_TEST(lost == 1);
}

BOOST_AUTO_TEST_SUITE_END()
