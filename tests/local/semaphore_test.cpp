// SPDX-License-Identifier: MIT
// The `semaphore` strategy: exclusion across processes and threads, SEM_UNDO crash release, a
// bounded number of kernel objects, hash collisions, and a set removed by an administrator.
#define BOOST_TEST_MODULE semaphore strategy
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

#include <locksmith/errors.hpp>
#include <locksmith/named_semaphore.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/strategies/semaphore.hpp>

#include "local/local_helpers.hpp"
#include "support/test_environment.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using namespace locksmith::test;
using namespace std::chrono_literals;

namespace {

// Sets in /proc/sysvipc/sem: all of them, or those with `key`.
std::size_t count_sets(std::optional<int> key = std::nullopt) {
    std::ifstream in("/proc/sysvipc/sem");
    std::string line;
    std::getline(in, line);  // header
    std::size_t n = 0;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        long long k = 0;
        fields >> k;
        if (!key || k == *key) ++n;
    }
    return n;
}

// A semaphore set private to one test case, removed at its end.
struct set_fixture {
    int key = [] {
        std::uint32_t h = 2166136261u;
        for (unsigned char c : run_unique("locksmith-test-sem")) h = (h ^ c) * 16777619u;
        return int(h & 0x7fffffffu) | 1;
    }();
    std::uint32_t semaphores = 32;
    ~set_fixture() { remove(); }
    void remove() const {
        int id = ::semget(key, 0, 0);
        if (id >= 0) ::semctl(id, 0, IPC_RMID);
    }
    std::shared_ptr<store> make() const {
        semaphore_options o;
        o.key = key;
        o.semaphores = semaphores;
        return make_semaphore_store(o);
    }
    std::function<std::shared_ptr<store>()> maker() const {
        return [this] { return make(); };
    }
};

std::string hex_key(int key) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", unsigned(key));
    return text;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(threads_with_their_own_lock_objects_exclude_each_other, set_fixture) {
    BOOST_TEST(increment_in_threads(make(), "threads", 4, 500) == 2000);
}

BOOST_FIXTURE_TEST_CASE(ten_thousand_names_use_one_kernel_set, set_fixture) {
    auto s = make();
    for (int i = 0; i < 10'000; ++i) {
        auto lock = make_lock(s, "leak." + std::to_string(i));
        BOOST_REQUIRE(lock.try_lock());
        lock.unlock();
    }
    // Bound: exactly one set per IPC key, whatever the number of names.
    BOOST_TEST(count_sets(key) == 1u);
}

BOOST_FIXTURE_TEST_CASE(colliding_names_cost_concurrency_not_exclusion_or_deadlock, set_fixture) {
    semaphores = 1;  // every name shares the one semaphore
    auto s = make();
    auto a = make_lock(s, "a");
    auto b = make_lock(s, "b");
    // Nested in one thread: no self-deadlock.
    BOOST_REQUIRE(a.try_lock());
    BOOST_TEST(b.try_lock_for(1s));
    // Same name, second object, same process: excluded.
    auto a2 = make_lock(s, "a");
    BOOST_TEST(!a2.try_lock());
    // Another process cannot take "a", nor "c" (it shares the semaphore).
    auto child_try = [&](const std::string& name) {
        return wait_child(fork_child([&] { return make_lock(make(), name).try_lock() ? 1 : 0; }));
    };
    BOOST_TEST(child_try("a") == 0);
    BOOST_TEST(child_try("c") == 0);
    a.unlock();
    BOOST_TEST(child_try("c") == 0);  // "b" still holds the process's grant
    b.unlock();
    BOOST_TEST(child_try("c") == 1);
}

BOOST_FIXTURE_TEST_CASE(a_lock_may_be_released_by_another_thread, set_fixture) {
    auto s = make();
    auto lock = make_lock(s, "moved");
    BOOST_REQUIRE(lock.try_lock());
    std::thread([&] { lock.release(); }).join();
    auto other = make_lock(s, "moved");
    BOOST_TEST(other.try_lock());
}

BOOST_FIXTURE_TEST_CASE(timed_wait_gets_the_lock_when_another_process_releases, set_fixture) {
    auto s = make();
    byte_pipe ready, go;
    pid_t holder = fork_child([&] {
        go.close_write();
        auto lock = make_lock(make(), "handover");
        lock.lock();
        ready.put('h');
        (void)go.get(30s);  // EOF: release
        lock.unlock();
        return 0;
    });
    ready.close_write();
    go.close_read();
    BOOST_REQUIRE(ready.get(30s));
    auto lock = make_lock(s, "handover");
    BOOST_TEST(!lock.try_lock_for(10ms));  // held: the wait ends at its deadline
    go.close_write();                      // now the holder releases, while we wait
    BOOST_TEST(lock.try_lock_for(30s));
    BOOST_TEST(wait_child(holder) == 0);
}

// A waiter retries for a few microseconds before it sleeps (kernel_acquire), but it must then
// queue in the kernel: that queue is what keeps a waiter from starving while others take turns.
BOOST_FIXTURE_TEST_CASE(a_waiter_queues_in_the_kernel_after_its_first_tries, set_fixture) {
    semaphores = 1;  // the waiter's semaphore is number 0
    auto s = make();
    auto lock = make_lock(s, "queued");
    BOOST_REQUIRE(lock.try_lock());
    pid_t waiter = fork_waiter(maker(), "queued");
    const int id = ::semget(key, 0, 0);
    BOOST_TEST(eventually([&] { return ::semctl(id, 0, GETNCNT) == 1; }, 5s),
               "the waiter never slept in the kernel's queue");
    lock.unlock();
    BOOST_TEST(wait_child(waiter, 30s) == 0);
}

BOOST_FIXTURE_TEST_CASE(set_removed_by_an_administrator_while_held, set_fixture) {
    semaphores = 1;  // the waiter's semaphore is number 0
    auto s = make();
    auto lock = make_lock(s, "removed");
    BOOST_REQUIRE(lock.try_lock());
    // A process waiting without bound for the same lock must not hang when the set goes away.
    byte_pipe started;
    pid_t waiter = fork_child([&] {
        auto lock = make_lock(make(), "removed");
        started.put('w');
        try {
            lock.lock();
            return 1;
        } catch (const backend_error& e) {
            return std::string(e.what()).find("removed") != std::string::npos ? 0 : 2;
        }
    });
    started.close_write();
    BOOST_REQUIRE(started.get(30s));
    // Remove the set only once the waiter sleeps in semop (the kernel counts it in GETNCNT).
    const int id = ::semget(key, 0, 0);
    BOOST_REQUIRE(eventually([&] { return ::semctl(id, 0, GETNCNT) == 1; }, 30s));
    remove();
    BOOST_TEST(wait_child(waiter, 30s) == 0);
    try {
        lock.release();
        BOOST_FAIL("release after removal did not report it");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("removed") != std::string::npos, e.what());
    }
    // The next acquire makes a fresh set.
    auto again = make_lock(s, "removed");
    BOOST_TEST(again.try_lock());
    BOOST_TEST(count_sets(key) == 1u);
}

// A lock object caches its name's table entry and semaphore slot between grants; the caches must
// not outlive a release (the name stays exclusive in the process) nor the set (a new set starts
// with fresh slots).
BOOST_FIXTURE_TEST_CASE(a_lock_object_reused_across_grants_and_sets_still_excludes, set_fixture) {
    auto s = make();
    auto a = make_lock(s, "reused");
    auto b = make_lock(s, "reused");
    for (int round = 0; round < 3; ++round) {
        BOOST_REQUIRE(a.try_lock());
        BOOST_TEST(!b.try_lock());
        a.unlock();
    }
    BOOST_REQUIRE(b.try_lock());
    BOOST_TEST(!a.try_lock());
    b.unlock();
    remove();  // nobody holds anything: the next acquire reports it and the one after opens anew
    BOOST_CHECK_THROW(a.try_lock(), backend_error);
    BOOST_REQUIRE(a.try_lock());
    BOOST_TEST(!b.try_lock());
    const int other =
        wait_child(fork_child([&] { return make_lock(make(), "reused").try_lock(); }));
    BOOST_TEST(other == 0);
    a.unlock();
    BOOST_TEST(b.try_lock());
}

BOOST_FIXTURE_TEST_CASE(an_existing_set_keeps_its_size, set_fixture) {
    semaphores = 3;
    auto first = make();
    semaphores = 50;
    auto second = make();  // same key: uses the three-semaphore set
    int id = ::semget(key, 0, 0);
    semid_ds ds{};
    ::semctl(id, 0, IPC_STAT, &ds);
    BOOST_TEST(ds.sem_nsems == 3u);
    auto a = make_lock(second, "x");
    BOOST_TEST(a.try_lock());
}

BOOST_AUTO_TEST_CASE(options_are_validated_strictly) {
    BOOST_CHECK_THROW(semaphore_options::from_json({{"semaphores", 0}}), config_error);
    BOOST_CHECK_THROW(semaphore_options::from_json({{"key", -5}}), config_error);
    BOOST_CHECK_THROW(semaphore_options::from_json({{"keys", 5}}), config_error);
    auto o = semaphore_options::from_json({{"key", 77}, {"semaphores", 16}});
    BOOST_TEST(o.key == 77);
    BOOST_TEST(o.semaphores == 16u);
    auto d = default_registry().find("semaphore");
    BOOST_REQUIRE(d.has_value());
    BOOST_TEST(d->default_priority == 25);
    BOOST_TEST(d->supported().supported, d->supported().reason);
}

// Hardening (issue 11 point 5): a set that another user created at our key, open to everyone,
// would let that user release our locks (semop +1) or block them; it is refused, naming the key
// and the command that removes it.
BOOST_FIXTURE_TEST_CASE(a_set_created_by_another_user_at_our_key_is_refused, set_fixture) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    const int created = wait_child(fork_child_as(*user, [&] {
        semaphore_options o;
        o.key = key;
        o.semaphores = semaphores;
        o.mode = 0666;
        (void)make_semaphore_store(o);  // creates and initialises the set
        return ::semget(key, 0, 0) >= 0 ? 0 : 1;
    }));
    BOOST_REQUIRE(created == 0);
    try {
        auto s = make();
        auto lock = make_lock(s, "victim");
        (void)lock.try_lock();
        BOOST_FAIL("a set created by another user with mode 0666 was used");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find(hex_key(key)) != std::string::npos, what);
        BOOST_TEST(what.find("ipcrm -S " + hex_key(key)) != std::string::npos, what);
        BOOST_TEST(what.find("uid " + std::to_string(user->uid)) != std::string::npos, what);
    }
}

// ...and a set of ours, open to us only, is refused to another user, who can neither take nor
// give back its semaphores.
BOOST_FIXTURE_TEST_CASE(another_user_can_neither_use_nor_release_our_set, set_fixture) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    semaphores = 1;  // every name on the one semaphore, so any grant would collide with ours
    auto s = make();
    auto lock = make_lock(s, "ours");
    BOOST_REQUIRE(lock.try_lock());
    const int rc = wait_child(fork_child_as(*user, [&] {
        // The raw attack: give the semaphore back, then take it.
        const int id = ::semget(key, 0, 0);
        if (id >= 0) {
            sembuf up{0, 1, IPC_NOWAIT};
            if (::semop(id, &up, 1) == 0) return 2;
            sembuf down{0, -1, IPC_NOWAIT};
            if (::semop(id, &down, 1) == 0) return 3;
        }
        try {
            semaphore_options o;
            o.key = key;
            auto theirs = make_lock(make_semaphore_store(o), "ours");
            return theirs.try_lock() ? 4 : 0;
        } catch (const error&) {
            return 0;  // refused: what we want
        }
    }));
    BOOST_TEST(rc == 0);
    // Still ours alone: another process of ours cannot take it.
    BOOST_TEST(
        wait_child(fork_child([&] { return make_lock(make(), "ours").try_lock() ? 1 : 0; })) == 0);
}

// --- counting semaphores (issue 27) ---

namespace {

// A set_fixture whose permit sets (one per name) are removed at its end too.
struct permits_fixture : set_fixture {
    std::vector<std::string> names;
    ~permits_fixture() {
        for (const auto& n : names) {
            const int id = ::semget(semaphore_permit_key(key, n), 0, 0);
            if (id >= 0) ::semctl(id, 0, IPC_RMID);
        }
    }
    std::string name(const std::string& label) {
        names.push_back(label);
        return label;
    }
};

union test_semun {
    int val;
    semid_ds* buf;
    unsigned short* array;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_released_permit_is_free_for_the_next_owner, permits_fixture) {
    const auto n = name("handover");
    auto s = make();
    auto a = make_permit(s, n, 1), b = make_permit(s, n, 1);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.try_acquire());  // again while held: no second permit
    BOOST_TEST(!b.try_acquire());
    a.release();
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(b.try_acquire());
    b.release();
    // A process that took and gave back its permit, then ended, leaves the limit as it was: the
    // kernel's undo for the grant was cancelled by the release, not applied on top of it.
    BOOST_TEST(wait_child(fork_child([&] {
                   auto p = make_permit(make(), n, 1);
                   if (!p.try_acquire()) return 1;
                   p.release();
                   return 0;
               })) == 0);
    auto x = make_permit(s, n, 1), y = make_permit(s, n, 1);
    BOOST_TEST(x.try_acquire());
    BOOST_TEST(!y.try_acquire());
}

BOOST_FIXTURE_TEST_CASE(a_killed_holders_permits_come_back_at_once, permits_fixture) {
    const auto n = name("crash");
    byte_pipe ready;
    pid_t holder = fork_child([&] {
        auto s = make();
        auto p = make_permit(s, n, 2), q = make_permit(s, n, 2);
        p.acquire();
        q.acquire();  // both permits, in one process
        ready.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready.close_write();
    BOOST_REQUIRE(ready.get(10s));
    auto s = make();
    auto mine = make_permit(s, n, 2), other = make_permit(s, n, 2);
    BOOST_TEST(!mine.try_acquire());
    BOOST_TEST(make()->status(n).permits_held.value_or(0) == 2u);
    ::kill(holder, SIGKILL);
    BOOST_TEST(mine.try_acquire_for(30s));  // at once; the bound is only a safety net
    BOOST_TEST(other.try_acquire());        // both came back
    wait_child(holder, 30s);
}

BOOST_FIXTURE_TEST_CASE(a_second_limit_for_one_name_is_refused, permits_fixture) {
    const auto n = name("one-limit");
    BOOST_REQUIRE(wait_child(fork_child([&] {
                      auto p = make_permit(make(), n, 2);
                      return p.try_acquire() ? 0 : 1;
                  })) == 0);
    auto s = make();
    auto p = make_permit(s, n, 3);
    try {
        (void)p.try_acquire();
        BOOST_FAIL("a limit of 3 was accepted for a name whose limit is 2");
    } catch (const invalid_argument_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("limit of 2") != std::string::npos, what);
        BOOST_TEST(what.find("asks for 3") != std::string::npos, what);
        BOOST_TEST(
            what.find("ipcrm -S " + hex_key(semaphore_permit_key(key, n))) != std::string::npos,
            what);
    }
    BOOST_TEST(!p.held());
    auto same = make_permit(s, n, 2);
    BOOST_TEST(same.try_acquire());
    auto status = s->status(n);
    BOOST_TEST(status.limit.value_or(0) == 2u);
    BOOST_TEST(status.permits_held.value_or(0) == 1u);
    auto big = make_permit(s, name("big"), 40000);
    BOOST_CHECK_THROW((void)big.try_acquire(), invalid_argument_error);
}

// Another user plants a well-formed permit set, open to all, at the key of one of our names,
// hoping that we use it: they could then give permits back (more holders than the limit) or
// take them all. It is refused, as a planted lock set is.
BOOST_FIXTURE_TEST_CASE(a_permit_set_planted_by_another_user_is_refused, permits_fixture) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    const auto n = name("planted");
    const int pk = semaphore_permit_key(key, n);
    const int created = wait_child(fork_child_as(*user, [&] {
        const int id = ::semget(pk, 2, IPC_CREAT | IPC_EXCL | 0666);
        if (id < 0) return 1;
        unsigned short values[2] = {2, 2};
        test_semun arg{};
        arg.array = values;
        if (::semctl(id, 0, SETALL, arg) != 0) return 2;
        sembuf touch[2] = {{0, -1, 0}, {0, 1, 0}};
        return ::semop(id, touch, 2) == 0 ? 0 : 3;
    }));
    BOOST_REQUIRE(created == 0);
    auto p = make_permit(make(), n, 2);
    try {
        (void)p.try_acquire();
        BOOST_FAIL("a permit set created by another user with mode 0666 was used");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find(hex_key(pk)) != std::string::npos, what);
        BOOST_TEST(what.find("uid " + std::to_string(user->uid)) != std::string::npos, what);
    }
    BOOST_TEST(!p.held());
}

// The creator of a set died between semget and initialising it: its values are undefined, so
// nobody uses it (no permit is handed out of garbage), and the error says how to clean up.
BOOST_FIXTURE_TEST_CASE(a_permit_set_never_initialised_is_refused, permits_fixture) {
    const auto n = name("half-made");
    const int pk = semaphore_permit_key(key, n);
    BOOST_REQUIRE(::semget(pk, 2, IPC_CREAT | IPC_EXCL | 0600) >= 0);
    auto p = make_permit(make(), n, 2);
    try {
        (void)p.try_acquire();
        BOOST_FAIL("an uninitialised permit set was used");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("never initialised") != std::string::npos, what);
        BOOST_TEST(what.find("ipcrm -S " + hex_key(pk)) != std::string::npos, what);
    }
}

BOOST_FIXTURE_TEST_CASE(a_timed_wait_for_a_permit_ends_on_time_and_gets_one_given_back,
                        permits_fixture) {
    expect_timed_permit_waits(maker(), name("timed"));
}

// `ipcrm -S` on a name's permit set while a permit is held: the holder hears that its permit
// is gone (is_acquired, on_lost), and a later acquire makes a new set instead of believing the
// old grant.
BOOST_FIXTURE_TEST_CASE(a_permit_set_removed_by_an_administrator_ends_the_grant, permits_fixture) {
    const auto n = name("removed");
    auto s = make();
    int lost = 0;
    auto k = std::make_shared<locksmith::key>(n);  // `key` is the fixture's IPC key here
    k->set_limit(1);
    lock_options options;
    options.on_lost = [&](const error&) { ++lost; };
    named_semaphore p(s, k, options);
    BOOST_REQUIRE(p.try_acquire());
    BOOST_REQUIRE(::semctl(::semget(semaphore_permit_key(key, n), 0, 0), 0, IPC_RMID) == 0);
    BOOST_TEST(!p.is_acquired());
    BOOST_TEST(lost == 1);
    BOOST_TEST(p.try_acquire());
    BOOST_TEST(p.is_acquired());
    BOOST_TEST(s->status(n).permits_held.value_or(0) == 1u);
    auto other = make_permit(s, n, 1);
    BOOST_TEST(!other.try_acquire());
}
