// SPDX-License-Identifier: MIT
// The conformance suite, run for every entry of strategies_under_test() whose capabilities
// include what a case tests. It is one suite with the conformance kit that plugin authors get
// installed (conformance/: <locksmith/conformance.hpp>, locksmith-conformance): every case of the
// kit runs here for every built-in strategy, each as a test case of its own. A case that needs
// only the public API belongs in the kit, so that plugins get it too; this file keeps the cases
// that need the test rig, each group saying what of it: a store that delays or counts calls
// (forwarding_store), peers in other processes driven through pipes (lock_peer, fork_child),
// TTLs of a few of the entry's clock delays. Together they port Symfony's store test traits
// (shared/reference/symfony-lock.md §3.1-3.5) to locksmith's store interface:
//   save -> try_acquire(exclusive), saveRead -> try_acquire(shared), exists -> holds,
//   delete -> release, waitAndSave -> wait_acquire, putOffExpiration -> refresh,
// and add the lock-level cases every strategy must pass (bounded waits, mutual exclusion).
//
// Test names are <strategy>/<case>, so `--run_test=file/*` runs one strategy. An entry whose
// server is missing is skipped with the reason, and fails under CI=true.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/conformance.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>
#include <locksmith/registry.hpp>

#include "support/child_process.hpp"
#include "support/forwarding_store.hpp"
#include "support/lock_peer.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/strategies_under_test.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace locksmith::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// TTL passed to stores in cases that are not about expiry (ignored by non-expiring stores).
constexpr std::chrono::milliseconds long_ttl = 60s;

const auto ex = lock_mode::exclusive;
const auto sh = lock_mode::shared;

// What one case gets: the entry and a fresh store for it. A cross-process case gets its store
// at its first make_lock(), after it forked its peers: a store may run threads (a ZooKeeper
// session's), and a child forked beside them may hang on a lock one of them held at the fork
// (fork_child refuses to).
struct context {
    const strategy_under_test& entry;
    std::shared_ptr<store> s;  // null in a cross-process case until make_lock()
    capability caps = capability::none;

    context(const strategy_under_test& e, bool cross_process)
        : entry(e), s(cross_process ? nullptr : create_store(e)) {
        if (s) caps = s->capabilities();
    }

    std::shared_ptr<key> make_key(const std::string& resource) const {
        return std::make_shared<key>(resource);
    }
    named_lock make_lock(const std::string& resource, lock_options o = {}) {
        if (!s) s = create_store(entry);
        return named_lock(s, make_key(resource), std::move(o));
    }
    named_lock make_lock(std::shared_ptr<store> st, const std::string& resource,
                         lock_options o = {}) const {
        return named_lock(std::move(st), make_key(resource), std::move(o));
    }
    std::chrono::milliseconds delay() const { return entry.clock_delay; }
};

// ---------------------------------------------------------------------------------------------
// BlockingStoreTestTrait (§3.2) across processes; in one process, the kit's
// blocking_locks_across_threads and native_wait_times_out. The rig's: a peer forked by
// fork_child (which refuses to fork beside a store's threads) and pipes read with a bound.

// The child holds the lock and reports 'H'; the parent's try fails; the parent says 'G'; the
// child says 'U' and releases (50 ms later, so that the parent is waiting by then); the parent's
// blocking wait must return after that, not before: 'U' is in the pipe when it returns.
void test_blocking_locks_across_processes(context& c) {
    auto resource = unique_resource("blocking");
    byte_pipe to_parent, to_child;
    const auto entry = c.entry;  // copied before fork: the child builds its own store from it
    pid_t child = fork_child([&]() -> int {
        to_parent.close_read();
        to_child.close_write();
        auto own = create_store(entry);
        key k(resource);
        if (!own->try_acquire(k, ex, long_ttl)) {
            to_parent.put('F');
            return 1;
        }
        to_parent.put('H');
        if (to_child.get(10s) != 'G') return 2;
        std::this_thread::sleep_for(50ms);  // lets the parent block first; not a check
        to_parent.put('U');
        own->release(k);
        return 0;
    });
    to_parent.close_write();
    to_child.close_read();
    auto got = to_parent.get(10s);
    BOOST_REQUIRE_MESSAGE(got == 'H', "child did not report holding the lock");

    auto own = create_store(c.entry);  // the parent's own store, as Symfony's test does
    key k(resource);
    BOOST_TEST(!own->try_acquire(k, ex, long_ttl));
    BOOST_TEST(!own->holds(k));
    BOOST_REQUIRE(to_child.put('G'));
    BOOST_TEST(own->wait_acquire(k, ex, long_ttl, steady::now() + 10s));
    BOOST_TEST((to_parent.get(0ms) == 'U'), "the wait returned before the holder released");
    BOOST_TEST(own->holds(k));
    own->release(k);
    BOOST_TEST(wait_child(child) == 0);
}

// ---------------------------------------------------------------------------------------------
// ExpiringStoreTestTrait (§3.3). The rig's: TTLs of a few of the entry's clock delays (a kit
// cannot know how soon a server notices an expiry), a store that answers late
// (abort_after_expiration), a process of its own for a renewal thread (auto_refresh). What
// needs neither (remaining_lifetime, set_expiration) is the kit's.

void test_expiration(context& c) {
    key k(unique_resource("expiration"));
    auto d = c.delay();
    BOOST_REQUIRE(c.s->try_acquire(k, ex, 2 * d));
    BOOST_TEST(c.s->holds(k));
    std::this_thread::sleep_for(3 * d);
    BOOST_TEST(!c.s->holds(k));
}

// Symfony's testRefreshLock duplicates testExpiration; here refresh() really sets the TTL.
void test_refresh_lock(context& c) {
    key k(unique_resource("refresh"));
    auto d = c.delay();
    BOOST_REQUIRE(c.s->try_acquire(k, ex, 2 * d));
    std::this_thread::sleep_for(d);
    BOOST_TEST(c.s->refresh(k, 4 * d));  // now expires at 5d instead of 2d
    std::this_thread::sleep_for(2 * d);  // 3d: past the first TTL
    BOOST_TEST(c.s->holds(k));
    BOOST_TEST(c.s->refresh(k, 2 * d));  // shortening works too
    BOOST_TEST(c.s->holds(k));
    std::this_thread::sleep_for(3 * d);
    BOOST_TEST(!c.s->holds(k));
}

void test_refresh_of_a_lost_lock_fails(context& c) {
    auto resource = unique_resource("lost");
    auto d = c.delay();
    key k1(resource);
    key k2(resource);
    BOOST_REQUIRE(c.s->try_acquire(k1, ex, d));
    std::this_thread::sleep_for(2 * d);
    BOOST_REQUIRE(c.s->try_acquire(k2, ex, long_ttl));
    // With its own TTL (etcd: a keep-alive of its expired lease) and with another one.
    BOOST_TEST(!c.s->refresh(k1, d));  // must not steal k2's lock
    BOOST_TEST(!c.s->refresh(k1, long_ttl));
    BOOST_TEST(c.s->holds(k2));
    BOOST_TEST(!c.s->holds(k1));
    c.s->release(k1);  // not ours any more: a no-op
    BOOST_TEST(c.s->holds(k2));
    c.s->release(k2);
}

// testAbortAfterExpiration: the grant (or renewal) comes back after its TTL, so named_lock
// reports expired_error and removes what the store wrote.
void test_abort_after_expiration(context& c) {
    auto slow = std::make_shared<forwarding_store>(c.s);
    auto d = c.delay();
    lock_options o;
    o.ttl = d;
    auto resource = unique_resource("abort");
    auto lock = c.make_lock(slow, resource, o);
    slow->delay(2 * d);
    BOOST_CHECK_THROW(lock.acquire(), expired_error);
    slow->delay(0ms);
    BOOST_TEST(!c.s->holds(*lock.owner()));
    BOOST_TEST(!lock.is_acquired());
    auto next = c.make_lock(resource);
    BOOST_TEST(next.try_lock());

    // The same for a refresh that comes back too late.
    o.ttl = long_ttl;
    auto refreshed = c.make_lock(slow, unique_resource("abort_refresh"), o);
    BOOST_REQUIRE(refreshed.acquire());
    slow->delay(2 * d);
    BOOST_CHECK_THROW(refreshed.refresh(d), expired_error);
    slow->delay(0ms);
}

void test_expired_lock_cleaned(context& c) {
    auto resource = unique_resource("cleaned");
    auto d = c.delay();
    key k1(resource);
    key k2(resource);
    BOOST_REQUIRE(c.s->try_acquire(k1, ex, d));
    std::this_thread::sleep_for(2 * d);
    BOOST_TEST(!c.s->holds(k1));
    // Stale state must not block the next holder.
    BOOST_TEST(c.s->try_acquire(k2, ex, long_ttl));
    BOOST_TEST(c.s->holds(k2));
    BOOST_TEST(!c.s->holds(k1));
    c.s->release(k2);
}

// A waiter must get a lock whose holder let it expire, without a release to wake it: in the
// store's own wait where it has one, else in named_lock's polling wait (memcached).
void test_waiter_gets_an_expired_lock(context& c) {
    auto resource = unique_resource("expired_wait");
    auto d = c.delay();
    key holder(resource);
    BOOST_REQUIRE(c.s->try_acquire(holder, ex, 2 * d));
    // The deadline is only a safety net: how soon the waiter notices is the benchmark's.
    const auto until = steady::now() + 20 * d + 10s;
    if (has(c.caps, capability::native_wait)) {
        key waiter(resource);
        BOOST_TEST(c.s->wait_acquire(waiter, ex, long_ttl, until));
        BOOST_TEST(c.s->holds(waiter));
        c.s->release(waiter);
    } else {
        lock_options o;
        o.ttl = long_ttl;
        auto waiter = c.make_lock(resource, o);
        BOOST_TEST(waiter.try_lock_until(until));
        BOOST_TEST(c.s->holds(*waiter.owner()));
    }
    BOOST_TEST(!c.s->holds(holder));
}

void test_auto_refresh_keeps_the_lock(context& c) {
    // In a process of its own: the renewal thread it starts lives as long as its process, and
    // the cross-process cases after it could not fork their peers beside it.
    if (!running_alone()) {
        BOOST_TEST(run_alone_in_a_fresh_process() == 0);
        return;
    }
    auto d = c.delay();
    lock_options o;
    o.ttl = 3 * d;
    o.auto_refresh = true;
    auto resource = unique_resource("auto_refresh");
    auto lock = c.make_lock(resource, o);
    BOOST_REQUIRE(lock.acquire());
    // Past the TTL by two clock delays (the longest a backend keeps an expired grant beyond
    // its TTL is one: memcached's second, etcd's sweep), renewed four times meanwhile.
    std::this_thread::sleep_for(5 * d);
    BOOST_TEST(lock.is_acquired());
    BOOST_TEST(!lock.is_expired());
    key other(resource);
    BOOST_TEST(!c.s->try_acquire(other, ex, long_ttl));
    lock.unlock();
    BOOST_TEST(c.s->try_acquire(other, ex, long_ttl));
    c.s->release(other);
}

// ---------------------------------------------------------------------------------------------
// Lock-level cases (SharedLockStoreTestTrait §3.4 and the lock-level ones in one process are the
// kit's). The rig's: a store that counts calls; a waiter whose holder is another process.

void test_try_lock_for_zero_is_a_single_try(context& c) {
    auto counting = std::make_shared<forwarding_store>(c.s);
    auto resource = unique_resource("zero");
    auto holder = c.make_lock(resource);
    BOOST_REQUIRE(holder.try_lock());
    auto waiter = c.make_lock(counting, resource);
    BOOST_TEST(!waiter.try_lock_for(0ms));
    BOOST_TEST(counting->acquire_calls() == 1);
    holder.unlock();
    BOOST_TEST(waiter.try_lock_for(0ms));
    BOOST_TEST(counting->acquire_calls() == 2);
}

void test_lock_waits_for_another_process(context& c) {
    auto resource = unique_resource("lock_waits_process");
    byte_pipe to_parent, to_child;
    const auto entry = c.entry;
    pid_t child = fork_child([&]() -> int {
        to_parent.close_read();
        to_child.close_write();
        auto lock = named_lock(create_store(entry), std::make_shared<key>(resource));
        if (!lock.try_lock()) return 1;
        to_parent.put('H');
        if (to_child.get(10s) != 'G') return 2;
        std::this_thread::sleep_for(50ms);  // lets the parent block first; not a check
        to_parent.put('U');
        lock.unlock();
        return 0;
    });
    to_parent.close_write();
    to_child.close_read();
    BOOST_REQUIRE_MESSAGE(to_parent.get(10s) == 'H', "child did not report holding the lock");
    auto waiter = c.make_lock(resource);
    BOOST_TEST(!waiter.try_lock());
    BOOST_REQUIRE(to_child.put('G'));
    BOOST_TEST(waiter.try_lock_for(10s));
    BOOST_TEST((to_parent.get(0ms) == 'U'), "the wait returned before the holder released");
    BOOST_TEST(wait_child(child) == 0);
}

// ---------------------------------------------------------------------------------------------
// The same across processes: every holder and waiter is a lock_peer (a forked process driven
// through pipes), in both patterns: one long-lived lock object per process, and a fresh factory
// and lock object for every acquisition (what `locksmith run` does). Steps are ordered by the
// peers' answers; a peer that must still be waiting is checked by the absence of an answer
// (a wrong early grant shows up as an answer; a right wait never gives one).

// How long a waiting peer is watched for a wrong early answer. Not a time the lock must meet.
constexpr std::chrono::milliseconds still_waiting = 200ms;
// Safety net for an answer that must come.
constexpr std::chrono::milliseconds must_answer = 60s;

void xp_exclusion(context& c, lock_pattern p) {
    auto resource = unique_resource("xp_exclusion");
    lock_peer a(c.entry, resource, p), b(c.entry, resource, p);
    BOOST_TEST(a.try_lock());
    BOOST_TEST(!b.try_lock());
    BOOST_TEST(!b.try_lock_for(100ms));
    BOOST_TEST(a.try_lock());  // re-entry of the same owner
    BOOST_TEST(!b.unlock());   // b holds nothing; a keeps it
    BOOST_TEST(!b.try_lock());
    BOOST_TEST(a.unlock());
    BOOST_TEST(b.try_lock());
    BOOST_TEST(!a.try_lock());
    BOOST_TEST(a.is_acquired() == false);
    BOOST_TEST(b.is_acquired());
    BOOST_TEST(b.unlock());
    BOOST_TEST(a.try_lock());
    BOOST_TEST(a.unlock());
}

void xp_waiting(context& c, lock_pattern p) {
    auto resource = unique_resource("xp_waiting");
    lock_peer a(c.entry, resource, p), b(c.entry, resource, p);
    BOOST_REQUIRE(a.try_lock());
    b.start_lock();
    BOOST_TEST(!b.answer(still_waiting).has_value(), "lock() returned while another process held");
    BOOST_TEST(a.unlock());
    BOOST_TEST((b.answer(must_answer) == std::optional<bool>(true)));
    BOOST_TEST(!a.try_lock());
    // And back: a waits for b.
    a.start_lock();
    BOOST_TEST(!a.answer(still_waiting).has_value(), "lock() returned while another process held");
    BOOST_TEST(b.unlock());
    BOOST_TEST((a.answer(must_answer) == std::optional<bool>(true)));
    BOOST_TEST(a.unlock());
}

// A holder whose TTL ran out gives way to a waiter in another process, without a release; its
// late refresh fails and its late release leaves the new holder alone.
void xp_expiry(context& c, lock_pattern p) {
    auto resource = unique_resource("xp_expiry");
    lock_peer a(c.entry, resource, p, 2 * c.delay());
    lock_peer b(c.entry, resource, p, long_ttl);
    lock_peer probe(c.entry, resource, p, long_ttl);
    BOOST_REQUIRE(a.try_lock());
    b.start_lock();
    BOOST_TEST((b.answer(20 * c.delay() + must_answer) == std::optional<bool>(true)));
    // With the grant's own TTL (etcd: a keep-alive of the expired lease), and with another one.
    BOOST_TEST(!a.refresh(2 * c.delay()), "a refresh took the lock back from the new holder");
    BOOST_TEST(!a.refresh(long_ttl), "a refresh took the lock back from the new holder");
    a.unlock();  // a believes it may still hold it: its release must not free b's lock
    BOOST_TEST(!probe.try_lock(), "the expired holder's release freed the new holder's lock");
    BOOST_TEST(b.is_acquired());
    BOOST_TEST(b.unlock());
    BOOST_TEST(probe.try_lock());
    BOOST_TEST(probe.unlock());
}

// A refresh extends the grant: another process stays out after the first TTL has passed.
void xp_refresh(context& c, lock_pattern p) {
    auto resource = unique_resource("xp_refresh");
    // A first TTL long enough that the refresh right after the grant arrives before it ends,
    // even on a busy machine.
    auto first_ttl = std::max<std::chrono::milliseconds>(2 * c.delay(), 2s);
    lock_peer a(c.entry, resource, p, first_ttl);
    lock_peer b(c.entry, resource, p, long_ttl);
    BOOST_REQUIRE(a.try_lock());
    BOOST_REQUIRE(a.refresh(long_ttl));
    std::this_thread::sleep_for(first_ttl + 2 * c.delay());  // past the first TTL
    BOOST_TEST(!b.try_lock(), "the lock expired at its first TTL despite the refresh");
    BOOST_TEST(a.is_acquired());
    BOOST_TEST(a.unlock());
    BOOST_TEST(b.try_lock());
    BOOST_TEST(b.unlock());
}

void xp_shared(context& c, lock_pattern p) {
    auto resource = unique_resource("xp_shared");
    lock_peer r1(c.entry, resource, p), r2(c.entry, resource, p), w(c.entry, resource, p);
    BOOST_TEST(r1.try_lock_shared());
    BOOST_TEST(r2.try_lock_shared());
    BOOST_TEST(!w.try_lock());
    BOOST_TEST(!w.try_lock_for(100ms));
    w.start_lock();
    BOOST_TEST(!w.answer(still_waiting).has_value(), "a writer got in beside two readers");
    BOOST_TEST(r1.unlock());
    BOOST_TEST(!w.answer(still_waiting).has_value(), "a writer got in beside a reader");
    BOOST_TEST(r2.unlock());
    BOOST_TEST((w.answer(must_answer) == std::optional<bool>(true)));
    BOOST_TEST(!r1.try_lock_shared(), "a reader got in beside a writer");
    r1.start_lock(true);
    BOOST_TEST(!r1.answer(still_waiting).has_value(), "a reader got in beside a writer");
    BOOST_TEST(w.unlock());
    BOOST_TEST((r1.answer(must_answer) == std::optional<bool>(true)));
    BOOST_TEST(r2.try_lock_shared());
    BOOST_TEST(r1.unlock());
    BOOST_TEST(r2.unlock());
}

template <void (*run)(context&, lock_pattern)>
void long_lived(context& c) {
    run(c, lock_pattern::long_lived);
}
template <void (*run)(context&, lock_pattern)>
void fresh_objects(context& c) {
    run(c, lock_pattern::fresh_objects);
}

// ---------------------------------------------------------------------------------------------
// Counting semaphores (issue 27): every strategy with `counting` (the kit's counting_* cases,
// N + 2 processes counting on a shared page and waiters served in turn among them). The rig's: a
// holder killed with SIGKILL and the entry's clock delays, a forked child of the holder.

// A name for a counting case, whose kernel objects go when the suite ends.
std::string permit_resource(const std::string& label) {
    auto resource = unique_resource(label);
    note_permit_name(resource);
    return resource;
}

// A holder killed with SIGKILL: its permit comes back, at once where the kernel or server
// releases a dead holder's grants (crash_release), after its TTL where permits expire.
void test_counting_killed_holders_permit_comes_back(context& c) {
    const auto caps = default_registry().find(c.entry.name)->capabilities;
    const bool kernel = has(caps, capability::crash_release);
    if (!kernel && !has(caps, capability::expiring)) {
        BOOST_TEST_MESSAGE(c.entry.id() << ": a dead holder's permit is never given back");
        return;
    }
    const auto resource = permit_resource("count_crash");
    const auto ttl = kernel ? long_ttl : 4 * c.delay();
    const auto entry = c.entry;
    byte_pipe ready;
    pid_t holder = fork_child([&]() -> int {
        lock_options o;
        o.ttl = ttl;
        o.auto_refresh = false;
        auto permit = make_permit(create_store(entry), resource, 1, o);
        if (!permit.try_acquire()) return 1;
        ready.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready.close_write();
    BOOST_REQUIRE_MESSAGE(ready.get(30s).has_value(), "the holder did not take its permit");
    auto mine = make_permit(create_store(entry), resource, 1);
    BOOST_TEST(!mine.try_acquire());
    ::kill(holder, SIGKILL);
    wait_child(holder, 30s);
    const auto start = steady::now();
    // A server that learns of a death when the holder's session expires (zookeeper) gives the
    // permit back then.
    long long at_once = 1000;
    if (c.entry.options && c.entry.options->contains("session_timeout_ms"))
        at_once += (*c.entry.options)["session_timeout_ms"].get<long long>();
    BOOST_TEST(mine.try_acquire_for(kernel ? 10s : 20 * c.delay() + 10s));
    if (kernel)
        BOOST_TEST(ms_since(start) < at_once, "given back after " << ms_since(start) << " ms");
    mine.release();
}

// Only the owner gives a permit back: another owner's release does nothing, and neither does
// its holder's forked child (an error or nothing, never a free permit) — except on a strategy
// whose keys are `serializable`: there the key is the owner, wherever it travels (Symfony's
// rule), so a child that releases its copy releases as the owner. Nor where the store runs
// threads (a ZooKeeper session's): a child forked beside them may use none of its objects
// (named_lock.hpp), and fork_child refuses.
void test_counting_release_by_a_non_owner_is_impossible(context& c) {
    const auto resource = permit_resource("count_owner");
    auto holder = make_permit(c.s, resource, 1);
    BOOST_REQUIRE(holder.try_acquire());
    auto other = make_permit(c.s, resource, 1);
    other.release();  // holds nothing: nothing happens
    auto probe = make_permit(c.s, resource, 1);
    BOOST_TEST(!probe.try_acquire(), "another owner's release freed the permit");
    if (!c.entry.in_process_only && !has(c.s->capabilities(), capability::serializable) &&
        threads_of_this_process() == 1) {
        pid_t child = fork_child([&]() -> int {
            holder.set_auto_release(false);
            try {
                holder.release();
            } catch (const error&) {
            }
            return 0;
        });
        BOOST_TEST(wait_child(child) == 0);
        BOOST_TEST(!probe.try_acquire(), "a forked child's release freed its parent's permit");
    }
    BOOST_TEST(holder.is_acquired());
    holder.release();
    BOOST_TEST(probe.try_acquire());
    probe.release();
}

// ---------------------------------------------------------------------------------------------
// Registration

struct case_spec {
    const char* name;
    capability needs;         // every bit must be in the strategy's capabilities
    capability needs_absent;  // none of these bits may be there
    bool cross_process;       // skipped for in_process_only entries
    void (*run)(context&);
};

const capability exclusive = capability::exclusive;

const case_spec cases[] = {
    // §3.2 BlockingStoreTestTrait
    {"blocking_locks_across_processes", capability::native_wait, capability::none, true,
     test_blocking_locks_across_processes},
    // §3.3 ExpiringStoreTestTrait
    {"expiration", capability::expiring, capability::none, false, test_expiration},
    {"refresh_lock", capability::expiring, capability::none, false, test_refresh_lock},
    {"refresh_of_a_lost_lock_fails", capability::expiring, capability::none, false,
     test_refresh_of_a_lost_lock_fails},
    {"abort_after_expiration", capability::expiring, capability::none, false,
     test_abort_after_expiration},
    {"expired_lock_cleaned", capability::expiring, capability::none, false,
     test_expired_lock_cleaned},
    {"waiter_gets_an_expired_lock", capability::expiring, capability::none, false,
     test_waiter_gets_an_expired_lock},
    {"auto_refresh_keeps_the_lock", capability::expiring, capability::none, false,
     test_auto_refresh_keeps_the_lock},
    // named_lock on the real store
    {"try_lock_for_zero_is_a_single_try", exclusive, capability::none, false,
     test_try_lock_for_zero_is_a_single_try},
    {"lock_waits_for_another_process", exclusive, capability::none, true,
     test_lock_waits_for_another_process},
    // Across processes, in both patterns (in_process_only strategies excluded)
    {"processes_exclude_each_other__long_lived", exclusive, capability::none, true,
     long_lived<xp_exclusion>},
    {"processes_exclude_each_other__fresh_objects", exclusive, capability::none, true,
     fresh_objects<xp_exclusion>},
    {"waiter_in_another_process_gets_it_at_release__long_lived", exclusive, capability::none, true,
     long_lived<xp_waiting>},
    {"waiter_in_another_process_gets_it_at_release__fresh_objects", exclusive, capability::none,
     true, fresh_objects<xp_waiting>},
    {"expired_holder_in_another_process_gives_way__long_lived", capability::expiring,
     capability::none, true, long_lived<xp_expiry>},
    {"expired_holder_in_another_process_gives_way__fresh_objects", capability::expiring,
     capability::none, true, fresh_objects<xp_expiry>},
    {"refresh_keeps_out_another_process__long_lived", capability::expiring, capability::none, true,
     long_lived<xp_refresh>},
    {"refresh_keeps_out_another_process__fresh_objects", capability::expiring, capability::none,
     true, fresh_objects<xp_refresh>},
    {"readers_and_writer_in_processes__long_lived", capability::shared, capability::none, true,
     long_lived<xp_shared>},
    {"readers_and_writer_in_processes__fresh_objects", capability::shared, capability::none, true,
     fresh_objects<xp_shared>},
    // Counting semaphores
    {"counting_killed_holders_permit_comes_back", capability::counting, capability::none, true,
     test_counting_killed_holders_permit_comes_back},
    {"counting_release_by_a_non_owner_is_impossible", capability::counting, capability::none, false,
     test_counting_release_by_a_non_owner_is_impossible},
};

// Runs the kit's case `name` (<locksmith/conformance.hpp>) against the entry: through the public
// API, as a plugin's author runs it.
void run_kit_case(const strategy_under_test& entry, const std::string& name) {
    if (!entry.options) BOOST_FAIL(entry.id() << " is not available: " << entry.missing);
    const auto o = conformance::run_case({entry.name, *entry.options, {}}, name);
    if (o.result == conformance::outcome::verdict::skipped)
        BOOST_TEST_MESSAGE(entry.id() << "/" << name << " skipped: " << o.detail);
    BOOST_TEST((o.result != conformance::outcome::verdict::failed),
               entry.id() << "/" << name << ": " << o.detail);
}

// Runs one case, or explains why it cannot.
void run_case(const strategy_under_test& entry, const case_spec& spec) {
    if (!entry.options) {
        // Only reached under CI: locally the precondition skipped the case.
        BOOST_FAIL(entry.id() << " is not available: " << entry.missing);
    }
    BOOST_TEST_CONTEXT("strategy " << entry.id()) {
        context c(entry, spec.cross_process);
        spec.run(c);
    }
}

// Every strategy of this build has an entry in locksmith_add_strategy(TESTS ...), the list that
// makes the CTest entries and strategies_under_test(): a strategy without one would be built
// and never run here. `null` has none: it excludes no one, so there is nothing to conform to.
void test_every_strategy_has_an_entry() {
    const auto entries = strategies_under_test();
    for (const auto& name : default_registry().names()) {
        if (name == "null") continue;
        const bool listed = std::any_of(entries.begin(), entries.end(),
                                        [&](const auto& e) { return e.name == name; });
        BOOST_TEST(listed, name << " has no test entry: add one to the TESTS of its "
                                   "locksmith_add_strategy() call (and its entry_<id> to "
                                   "tests/support/entries/"
                                << name << ".cpp)");
    }
}

}  // namespace

// Found by tests/support/test_main.cpp.
bool init_unit_test() {
    using namespace boost::unit_test;
    auto& master = framework::master_test_suite();
    master.p_name.value = "conformance";
    auto* registration = BOOST_TEST_SUITE("registration");
    master.add(registration);
    registration->add(make_test_case(test_every_strategy_has_an_entry,
                                     "every_strategy_has_an_entry", __FILE__, __LINE__));
    static const std::vector<strategy_under_test> entries = strategies_under_test();
    if (entries.empty()) {
        master.add(make_test_case([] { BOOST_FAIL("strategies_under_test() is empty"); },
                                  "no_strategies", __FILE__, __LINE__));
        return true;
    }
    for (const auto& entry : entries) {
        auto descriptor = default_registry().find(entry.name);
        auto* suite = BOOST_TEST_SUITE(entry.id());
        master.add(suite);
        if (!descriptor) {
            suite->add(make_test_case(
                [name = entry.id()] { BOOST_FAIL(name << " is listed but not registered"); },
                "registered", __FILE__, __LINE__));
            continue;
        }
        const capability caps = expected_capabilities(*descriptor, entry);
        const strategy_under_test* e = &entry;
        auto add = [&](test_case* tc) {
            if (!entry.options && !running_in_ci()) {
                std::string why = entry.id() + " skipped: " + entry.missing;
                tc->add_precondition([why](test_unit_id) {
                    boost::test_tools::assertion_result r(false);
                    r.message() << why;
                    return r;
                });
            }
            suite->add(tc);
        };
        // The kit's cases first: the rig's cross-process cases below fork their peers, which
        // a case that leaves a thread behind (auto_refresh) would then refuse.
        // The exec case is the hostile suite's for every entry (tests/hostile): run once, there.
        for (const auto& name :
             conformance::case_names(caps, descriptor->spans_processes && !entry.in_process_only))
            if (name != "holder_passes_no_descriptor_to_an_exec")
                add(make_test_case([e, name] { run_kit_case(*e, name); }, name, __FILE__,
                                   __LINE__));
        for (const auto& spec : cases) {
            if (!has(caps, spec.needs)) continue;
            if ((caps & spec.needs_absent) != capability::none) continue;
            if (spec.cross_process && entry.in_process_only) continue;
            const case_spec* s = &spec;
            add(make_test_case([e, s] { run_case(*e, *s); }, spec.name, __FILE__, __LINE__));
        }
    }
    return true;
}

namespace {

// Removes the lock directories the entries created, once every case has run.
struct cleanup {
    ~cleanup() { remove_test_lock_dirs(); }
};
BOOST_TEST_GLOBAL_FIXTURE(cleanup);

}  // namespace
