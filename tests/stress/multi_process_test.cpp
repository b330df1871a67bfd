// SPDX-License-Identifier: MIT
// Multi-process tests, run for every entry of strategies_under_test() that works across
// processes (in_process_only entries such as `memory` are skipped):
//  - counter: several processes increment a counter file under the lock, with a delay between
//    read and write to provoke lost updates; the final value must be exact;
//  - the same with a fresh factory and lock object for every increment (as `locksmith run`);
//  - crash: a holder killed with SIGKILL releases at once (strategies with crash_release), or
//    after its TTL, while other processes keep counting (expiring strategies without it);
//  - fencing: tokens increase strictly in grant order across processes (strategies with fencing);
//  - shared: readers in several processes coexist and exclude a writer (strategies with shared);
//  - `locksmith run --limit 3`: 8 processes x 100 runs, at most 3 at once (strategies with
//    counting; in a build with the command).
// Processes are forked; they synchronise through pipes, never through sleeps.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/named_lock.hpp>
#include <locksmith/registry.hpp>

#include "support/child_process.hpp"
#include "support/forwarding_store.hpp"
#include "support/lock_peer.hpp"
#include "support/strategies_under_test.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_paths.hpp"

using namespace locksmith;
using namespace locksmith::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr int process_count = 4;
constexpr int increments = 200;

named_lock make_lock(const strategy_under_test& entry, const std::string& resource) {
    return named_lock(create_store(entry), std::make_shared<key>(resource));
}

// The counter lives in a plain file, read and written with separate system calls so that two
// processes inside the critical section at once lose an update.
class counter_file {
  public:
    explicit counter_file(std::filesystem::path path) : path_(std::move(path)) {}
    long read() const {
        int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        char buf[32] = {};
        ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
        ::close(fd);
        if (n <= 0) return -1;
        return std::strtol(buf, nullptr, 10);
    }
    bool write(long value) const {
        int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) return false;
        char buf[32];
        int len = std::snprintf(buf, sizeof buf, "%020ld\n", value);  // fixed width
        bool ok = ::pwrite(fd, buf, size_t(len), 0) == len;
        ::close(fd);
        return ok;
    }

  private:
    std::filesystem::path path_;
};

std::filesystem::path scratch_dir() {
    auto dir =
        std::filesystem::temp_directory_path() / ("locksmith-stress-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

// ---------------------------------------------------------------------------------------------

void test_counter(const strategy_under_test& entry) {
    auto resource = unique_resource("counter");
    counter_file counter(scratch_dir() / (entry.id() + ".counter"));
    BOOST_REQUIRE(counter.write(0));

    byte_pipe go;  // closing its write end starts every child at once
    byte_pipe ready;
    std::vector<pid_t> children;
    for (int p = 0; p < process_count; ++p) {
        // The limit the other counter cases have: 800 grants one after another took a
        // three-member etcd cluster over TLS 30 s, fork_child's default, on a loaded machine.
        children.push_back(fork_child(
            [&]() -> int {
                go.close_write();
                ready.close_read();
                auto lock = make_lock(entry, resource);
                ready.put('R');
                (void)go.get(20s);  // EOF: go
                for (int i = 0; i < increments; ++i) {
                    lock.lock();
                    long value = counter.read();
                    if (value < 0) return 3;
                    std::this_thread::sleep_for(50us);  // widen the race window
                    if (!counter.write(value + 1)) return 4;
                    lock.unlock();
                }
                return 0;
            },
            120s));
    }
    ready.close_write();
    for (int p = 0; p < process_count; ++p)
        BOOST_REQUIRE_MESSAGE(ready.get(20s) == 'R', "child " << p << " did not get ready");
    go.close_write();
    for (auto pid : children) {
        const int status = wait_child(pid, 120s);
        BOOST_TEST(status == 0, "child " << pid << ": " << exit_text(status));
    }
    BOOST_TEST(counter.read() == long(process_count) * increments);
}

// The same with a fresh factory and lock object for every increment, as short-lived processes
// (`locksmith run`) take the lock: each acquisition opens what the strategy needs (a lock file,
// a connection) anew, and a strategy that removes or recreates its state on release must still
// never let two processes in at once.
void test_counter_with_fresh_lock_objects(const strategy_under_test& entry) {
    auto resource = unique_resource("fresh_counter");
    counter_file counter(scratch_dir() / (entry.id() + ".fresh_counter"));
    BOOST_REQUIRE(counter.write(0));
    constexpr int fresh_increments = 150;

    byte_pipe go;
    byte_pipe ready;
    std::vector<pid_t> children;
    for (int p = 0; p < process_count; ++p) {
        children.push_back(fork_child(
            [&]() -> int {
                go.close_write();
                ready.close_read();
                ready.put('R');
                (void)go.get(20s);
                for (int i = 0; i < fresh_increments; ++i) {
                    fresh_lock fresh(entry, resource);
                    fresh.lock->lock();
                    long value = counter.read();
                    if (value < 0) return 3;
                    std::this_thread::sleep_for(50us);  // widen the race window
                    if (!counter.write(value + 1)) return 4;
                    fresh.lock->unlock();
                }
                return 0;
            },
            120s));
    }
    ready.close_write();
    for (int p = 0; p < process_count; ++p)
        BOOST_REQUIRE_MESSAGE(ready.get(20s) == 'R', "child " << p << " did not get ready");
    go.close_write();
    for (auto pid : children) {
        const int status = wait_child(pid, 120s);
        BOOST_TEST(status == 0, "child " << pid << ": " << exit_text(status));
    }
    BOOST_TEST(counter.read() == long(process_count) * fresh_increments,
               "lost updates: " << long(process_count) * fresh_increments - counter.read());
}

void test_sigkill_releases(const strategy_under_test& entry) {
    auto resource = unique_resource("crash");
    byte_pipe to_parent;
    pid_t child = fork_child([&]() -> int {
        to_parent.close_read();
        auto lock = make_lock(entry, resource);
        lock.lock();
        to_parent.put('H');
        for (;;) ::pause();  // hold until killed
    });
    to_parent.close_write();
    BOOST_REQUIRE_MESSAGE(to_parent.get(10s) == 'H', "child did not report holding the lock");

    auto lock = make_lock(entry, resource);
    BOOST_TEST(!lock.try_lock());
    BOOST_REQUIRE(::kill(child, SIGKILL) == 0);
    BOOST_TEST(wait_child(child, 10s) == 128 + SIGKILL);
    // crash_release: the kernel or server frees it with the process, not a TTL (minutes by
    // default). The bound is a safety net; how soon is the benchmark's recovery table.
    BOOST_TEST(lock.try_lock_for(10s));
}

// The counter run again, with one more process that takes the lock (with a short TTL) midway and
// is killed with SIGKILL while holding it. The others must get the lock back — at once with
// crash_release, after that TTL for expiring strategies without it — and lose no update.
void test_counter_with_a_holder_killed_midway(const strategy_under_test& entry) {
    auto resource = unique_resource("killed_holder");
    counter_file counter(scratch_dir() / (entry.id() + ".killed_counter"));
    BOOST_REQUIRE(counter.write(0));
    const auto victim_ttl = std::max<std::chrono::milliseconds>(4 * entry.clock_delay, 1s);

    byte_pipe go;
    byte_pipe ready;
    byte_pipe progress;  // each worker reports once it is halfway
    std::vector<pid_t> workers;
    for (int p = 0; p < process_count; ++p) {
        workers.push_back(fork_child(
            [&]() -> int {
                go.close_write();
                ready.close_read();
                progress.close_read();
                auto lock = make_lock(entry, resource);
                ready.put('R');
                (void)go.get(20s);
                for (int i = 0; i < increments; ++i) {
                    lock.lock();
                    long value = counter.read();
                    if (value < 0) return 3;
                    std::this_thread::sleep_for(50us);
                    if (!counter.write(value + 1)) return 4;
                    lock.unlock();
                    if (i == increments / 2) progress.put('P');
                }
                return 0;
            },
            120s));
    }
    ready.close_write();
    progress.close_write();
    for (int p = 0; p < process_count; ++p)
        BOOST_REQUIRE_MESSAGE(ready.get(20s) == 'R', "worker " << p << " did not get ready");
    go.close_write();
    BOOST_REQUIRE_MESSAGE(progress.get(60s) == 'P', "no worker got halfway");

    byte_pipe held;
    pid_t victim = fork_child([&]() -> int {
        held.close_read();
        lock_options o;
        o.ttl = victim_ttl;
        named_lock lock(create_store(entry), std::make_shared<key>(resource), o);
        lock.lock();
        held.put('H');
        for (;;) ::pause();  // hold until killed
    });
    held.close_write();
    BOOST_REQUIRE_MESSAGE(held.get(60s) == 'H', "the victim did not get the lock");
    BOOST_REQUIRE(::kill(victim, SIGKILL) == 0);
    BOOST_TEST(wait_child(victim, 10s) == 128 + SIGKILL);
    for (auto pid : workers) {
        const int status = wait_child(pid, 120s);
        BOOST_TEST(status == 0, "worker " << pid << ": " << exit_text(status));
    }
    BOOST_TEST(counter.read() == long(process_count) * increments,
               "lost updates: " << long(process_count) * increments - counter.read());
}

// Fencing tokens strictly increase in grant order across processes: each process, holding the
// lock, checks its token against the last one written by any process and writes its own.
void test_fencing_tokens_across_processes(const strategy_under_test& entry) {
    auto resource = unique_resource("fencing");
    counter_file last(scratch_dir() / (entry.id() + ".last_token"));
    BOOST_REQUIRE(last.write(0));
    constexpr int grants = 250;  // x process_count = 1,000 grants

    byte_pipe go;
    byte_pipe ready;
    std::vector<pid_t> children;
    for (int p = 0; p < process_count; ++p) {
        children.push_back(fork_child(
            [&]() -> int {
                go.close_write();
                ready.close_read();
                auto lock = make_lock(entry, resource);
                ready.put('R');
                (void)go.get(20s);
                for (int i = 0; i < grants; ++i) {
                    lock.lock();
                    const auto token = lock.fencing_token();
                    if (!token) return 5;
                    const long previous = last.read();
                    if (previous < 0) return 3;
                    if (long(*token) <= previous) return 6;  // not larger than an earlier grant's
                    if (!last.write(long(*token))) return 4;
                    lock.unlock();
                }
                return 0;
            },
            120s));
    }
    ready.close_write();
    for (int p = 0; p < process_count; ++p)
        BOOST_REQUIRE_MESSAGE(ready.get(20s) == 'R', "child " << p << " did not get ready");
    go.close_write();
    for (auto pid : children) {
        const int status = wait_child(pid, 120s);
        BOOST_TEST(status == 0, "child " << pid << ": " << exit_text(status)
                                         << " (exit 6: a token not larger than the one before)");
    }
    BOOST_TEST(last.read() >= long(process_count) * grants);
}

void test_shared_holders(const strategy_under_test& entry) {
    auto resource = unique_resource("shared");
    constexpr int readers = 3;
    byte_pipe reports;
    byte_pipe release;  // closing its write end tells every reader to unlock
    std::vector<pid_t> children;
    for (int r = 0; r < readers; ++r) {
        children.push_back(fork_child([&]() -> int {
            reports.close_read();
            release.close_write();
            auto lock = make_lock(entry, resource);
            if (!lock.try_lock_shared_for(10s)) {
                reports.put('F');
                return 1;
            }
            reports.put('S');
            (void)release.get(20s);
            lock.unlock_shared();
            reports.put('U');  // tells a reader slow to unlock from one slow to exit
            return 0;
        }));
    }
    reports.close_write();
    // Every reader reports while holding, and none releases before `release` closes: three
    // 'S' mean three processes held the shared lock at the same time.
    int holding = 0;
    for (int r = 0; r < readers; ++r) {
        auto c = reports.get(10s);
        if (c == 'S') ++holding;
    }
    BOOST_TEST(holding == readers);

    // The readers of the last steps, forked now, before this process makes a store whose threads
    // (a ZooKeeper session's) would be beside the fork; each starts at its byte. Each closes its
    // copy of `release`'s write end: else the readers would see its end only when these exit,
    // and unlock at their 20 s safety net instead.
    byte_pipe go_probe, go_after;
    pid_t probe = fork_child([&]() -> int {
        release.close_write();
        if (!go_probe.get(60s)) return 2;
        auto lock = make_lock(entry, resource);
        return lock.try_lock_shared() ? 1 : 0;
    });
    pid_t after = fork_child([&]() -> int {
        release.close_write();
        if (!go_after.get(60s)) return 2;
        auto lock = make_lock(entry, resource);
        return lock.try_lock_shared() ? 0 : 1;
    });

    auto writer = make_lock(entry, resource);
    BOOST_TEST(!writer.try_lock());
    BOOST_TEST(!writer.try_lock_for(50ms));
    // One more reader in this process still gets in.
    auto reader = make_lock(entry, resource);
    BOOST_TEST(reader.try_lock_shared());
    reader.unlock_shared();

    release.close_write();
    for (auto pid : children) {
        const int status = wait_child(pid, 20s);
        BOOST_TEST(status == 0, "reader " << pid << ": exit " << status << " (-1: still running)");
    }
    int unlocked = 0;
    while (reports.get(0ms) == 'U') ++unlocked;
    BOOST_TEST(unlocked == readers, "readers that returned from unlock_shared");
    BOOST_TEST(writer.try_lock_for(5s));

    // And the writer, now holding, excludes a reader in another process.
    go_probe.put('g');
    BOOST_TEST(wait_child(probe, 10s) == 0, "a reader got in while a writer held the lock");
    writer.unlock();
    go_after.put('g');
    BOOST_TEST(wait_child(after, 10s) == 0, "a reader was refused after the writer left");
}

// A store that reports, once, that an attempt came back (refused, while the lock is held).
class reporting_store : public forwarding_store {
  public:
    reporting_store(std::shared_ptr<store> inner, byte_pipe& out)
        : forwarding_store(std::move(inner)), out_(out) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) override {
        const bool granted = forwarding_store::do_try_acquire(k, mode, ttl);
        if (!reported_) out_.put(granted ? 'g' : 'T');
        reported_ = true;
        return granted;
    }

  private:
    byte_pipe& out_;
    bool reported_ = false;
};

// A strategy that cannot wait natively polls; a release by a process on the same host wakes
// its waiters at once instead of at their next poll (core/local_wake.hpp). The waiter's poll
// delay is an hour: only the wake-up can grant it while the test waits.
void test_a_release_on_this_host_wakes_a_polling_waiter(const strategy_under_test& entry) {
    auto resource = unique_resource("woken");
    byte_pipe held;
    byte_pipe go;
    pid_t holder = fork_child([&]() -> int {
        held.close_read();
        go.close_write();
        auto lock = make_lock(entry, resource);
        lock.lock();
        held.put('H');
        (void)go.get(60s);  // EOF: release
        lock.unlock();
        return 0;
    });
    held.close_write();
    go.close_read();
    BOOST_REQUIRE_MESSAGE(held.get(10s) == 'H', "the holder did not report holding the lock");

    byte_pipe from_waiter;
    pid_t waiter = fork_child([&]() -> int {
        from_waiter.close_read();
        go.close_write();  // the holder's EOF must come from the parent alone
        lock_options o;
        o.retry.initial = o.retry.max = std::chrono::hours(1);
        o.retry.jitter = 0;
        named_lock lock(std::make_shared<reporting_store>(create_store(entry), from_waiter),
                        std::make_shared<key>(resource), o);
        lock.lock();
        from_waiter.put('G');
        lock.unlock();
        return 0;
    });
    from_waiter.close_write();
    // Its first attempt was refused: from here it sleeps its hour unless a release wakes it.
    BOOST_REQUIRE(from_waiter.get(10s) == 'T');
    go.close_write();
    const bool woken = from_waiter.get(20s) == 'G';  // a safety net, not a measurement
    BOOST_TEST(woken, "the waiter slept through the release");
    if (!woken) ::kill(waiter, SIGKILL);
    BOOST_TEST(wait_child(waiter, 10s) == (woken ? 0 : 128 + SIGKILL));
    BOOST_TEST(wait_child(holder, 10s) == 0);
}

// The torture through the command (issue 27): 8 processes, each running `locksmith run
// --strategy <entry> --limit 3` 100 times; every command counts the commands inside with it
// (marker files; shell builtins but one rm). Never more than 3 inside at once, and 3 at some
// point under load: each loop's first command stays 0.5 s, so while the first three granted
// stay, the third sees the other two and the others queue behind them.
void test_run_limit_torture(const strategy_under_test& entry) {
    const std::string name = unique_resource("torture");
    note_permit_name(name);
    const auto dir = scratch_dir() / (entry.id() + ".torture");
    std::filesystem::create_directories(dir / "inside");
    const std::string config = (dir / "config.json").string();
    {
        const nlohmann::json c = {{"strategies", {{entry.name, {{"options", *entry.options}}}}}};
        std::FILE* f = std::fopen(config.c_str(), "we");
        BOOST_REQUIRE(f != nullptr);
        const std::string text = c.dump();
        BOOST_REQUIRE(std::fwrite(text.data(), 1, text.size(), f) == text.size());
        std::fclose(f);
    }
    const std::string inside = (dir / "inside").string(), counts = (dir / "counts").string();
    const std::string count =
        "echo > " + inside + "/$$; set -- " + inside + "/*; echo $# >> " + counts + "; ";
    const auto descriptor = default_registry().find(entry.name);
    BOOST_REQUIRE(descriptor);
    const bool expiring = has(expected_capabilities(*descriptor, entry), capability::expiring);
    const std::string run = "'" + cli_path() + "' run --config '" + config + "' --strategy " +
                            entry.name + (expiring ? " --ttl 30" : "") + " --limit 3 " + name +
                            " -c ";
    const std::string loop = run + "'" + count + "sleep 0.5; rm " + inside + "/$$' || exit 1; " +
                             "i=1; while [ $i -lt 100 ]; do i=$((i+1)); " + run + "'" + count +
                             "rm " + inside + "/$$' || exit 1; done";
    const auto started = steady::now();
    std::vector<pid_t> loops;
    for (int i = 0; i < 8; ++i)
        loops.push_back(fork_child(
            [&]() -> int {
                ::execl("/bin/sh", "sh", "-c", loop.c_str(), static_cast<char*>(nullptr));
                return 127;
            },
            300s));
    for (auto pid : loops) {
        const int status = wait_child(pid, 300s);
        BOOST_TEST(status == 0, "loop " << pid << ": " << exit_text(status));
    }
    BOOST_TEST_MESSAGE(
        entry.id()
        << ": 800 runs of `locksmith run --limit 3` in "
        << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - started).count()
        << " ms");
    std::FILE* f = std::fopen(counts.c_str(), "re");
    BOOST_REQUIRE(f != nullptr);
    int most = 0, lines = 0;
    for (int n; std::fscanf(f, "%d", &n) == 1; ++lines) most = std::max(most, n);
    std::fclose(f);
    BOOST_TEST(lines == 800);
    BOOST_TEST(most <= 3);
    BOOST_TEST(most == 3);
}

// ---------------------------------------------------------------------------------------------

struct case_spec {
    const char* name;
    capability needs;
    void (*run)(const strategy_under_test&);
    capability needs_absent = capability::none;
};

const case_spec cases[] = {
    {"counter_under_lock", capability::exclusive, test_counter},
    {"counter_with_fresh_lock_objects", capability::exclusive,
     test_counter_with_fresh_lock_objects},
    {"sigkill_releases_at_once", capability::exclusive | capability::crash_release,
     test_sigkill_releases},
    {"counter_with_a_holder_killed_midway", capability::exclusive | capability::crash_release,
     test_counter_with_a_holder_killed_midway},
    {"counter_with_a_holder_killed_midway", capability::exclusive | capability::expiring,
     test_counter_with_a_holder_killed_midway, capability::crash_release},
    {"fencing_tokens_increase_across_processes", capability::exclusive | capability::fencing,
     test_fencing_tokens_across_processes},
    {"shared_holders_coexist_and_exclude_a_writer", capability::shared, test_shared_holders},
    {"a_release_on_this_host_wakes_a_polling_waiter", capability::exclusive,
     test_a_release_on_this_host_wakes_a_polling_waiter, capability::native_wait},
    {"run_limit_3_eight_loops_of_a_hundred", capability::counting, test_run_limit_torture},
};

}  // namespace

// Found by tests/support/test_main.cpp.
bool init_unit_test() {
    using namespace boost::unit_test;
    auto& master = framework::master_test_suite();
    master.p_name.value = "multi_process";
    static const std::vector<strategy_under_test> entries = strategies_under_test();
    int registered = 0;
    for (const auto& entry : entries) {
        if (entry.in_process_only) continue;
        auto descriptor = default_registry().find(entry.name);
        if (!descriptor) continue;
        auto* suite = BOOST_TEST_SUITE(entry.id());
        master.add(suite);
        const capability caps = expected_capabilities(*descriptor, entry);
        for (const auto& spec : cases) {
            if (!has(caps, spec.needs)) continue;
            if ((caps & spec.needs_absent) != capability::none) continue;
            if (spec.run == test_run_limit_torture && cli_path().empty()) continue;  // no CLI
            const strategy_under_test* e = &entry;
            auto run = spec.run;
            auto* tc = make_test_case(
                [e, run] {
                    if (!e->options) BOOST_FAIL(e->id() << " is not available: " << e->missing);
                    // Each case in a process of its own, which forks its children before it
                    // makes a store: the threads of an earlier case's stores (a ZooKeeper
                    // session's) would be beside the fork.
                    if (!running_alone()) {
                        BOOST_TEST(run_alone_in_a_fresh_process(std::chrono::seconds(600)) == 0);
                        return;
                    }
                    run(*e);
                },
                spec.name, __FILE__, __LINE__);
            if (!entry.options && !running_in_ci()) {
                std::string why = entry.id() + " skipped: " + entry.missing;
                tc->add_precondition([why](test_unit_id) {
                    boost::test_tools::assertion_result r(false);
                    r.message() << why;
                    return r;
                });
            }
            suite->add(tc);
            ++registered;
        }
    }
    if (registered == 0)
        master.add(make_test_case([] { BOOST_FAIL("no cross-process strategy under test"); },
                                  "no_strategies", __FILE__, __LINE__));
    return true;
}

namespace {

struct cleanup {
    ~cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(scratch_dir(), ec);
        remove_test_lock_dirs();
    }
};
BOOST_TEST_GLOBAL_FIXTURE(cleanup);

}  // namespace
