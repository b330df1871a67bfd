// SPDX-License-Identifier: MIT
// The `file` strategy beyond the conformance suite: lock files removed on release, fresh lock
// objects in several processes, and lock files that are not ours (planted content, hard links).
#define BOOST_TEST_MODULE file strategy
#include <boost/test/unit_test.hpp>

#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/file.hpp>

#include "local/fresh_objects.hpp"
#include "local/local_helpers.hpp"
#include "support/full_tmpfs.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using namespace locksmith::test;
using namespace std::chrono_literals;

namespace {

struct dir_fixture {
    temp_dir dir{"file"};
    std::shared_ptr<store> make() const {
        file_options o;
        o.lock_dir = dir.path();
        return make_file_store(o);
    }
    std::filesystem::path path(const std::string& name) const {
        return dir.path() / lock_file_name(name, ".lock");
    }
    std::string config_json() const {
        return nlohmann::json{
            {"strategies", {{"file", {{"options", {{"lock_dir", dir.path().string()}}}}}}}}
            .dump();
    }
};

}  // namespace

// Issue 11 point 20: the README says when a lock file goes. It stays while its owner object
// lives (the next grant reuses it) and goes with the last owner object.
BOOST_FIXTURE_TEST_CASE(the_lock_file_goes_with_its_last_owner_object, dir_fixture) {
    auto s = make();
    {
        auto lock = make_lock(s, "gone");
        BOOST_REQUIRE(lock.try_lock());
        lock.unlock();
        BOOST_TEST(std::filesystem::exists(path("gone")));  // kept for the next grant
        BOOST_REQUIRE(lock.try_lock());
        BOOST_TEST(!make_lock(s, "gone").try_lock());
        lock.unlock();
    }
    BOOST_TEST(dir.entries() == 0u);
}

BOOST_FIXTURE_TEST_CASE(the_last_reader_object_removes_the_file, dir_fixture) {
    auto s = make();
    auto writer = make_lock(s, "readers");
    {
        auto first = make_lock(s, "readers");
        {
            auto second = make_lock(s, "readers");
            BOOST_REQUIRE(first.try_lock_shared());
            BOOST_REQUIRE(second.try_lock_shared());
        }
        BOOST_TEST(std::filesystem::exists(path("readers")));  // first still reads
        BOOST_TEST(!writer.try_lock());
    }
    // The writer's own descriptor was opened on the old file, which the last reader removed:
    // its grant sees the file retired and takes the fresh one at the path.
    BOOST_TEST(writer.try_lock());
    BOOST_TEST(std::filesystem::exists(path("readers")));
    BOOST_TEST(!make_lock(s, "readers").try_lock());
}

BOOST_FIXTURE_TEST_CASE(fresh_lock_objects_in_four_processes_lose_no_update, dir_fixture) {
    counter_file counter(dir.path() / "counter");
    BOOST_TEST(increment_with_fresh_objects(config_json(), "file", "fresh", counter, 4, 300) == 0);
    BOOST_TEST(counter.value() == 1200);
    BOOST_TEST(!std::filesystem::exists(path("fresh")));
}

// The retired mark, step by step: A keeps its file open between grants; B's object goes away
// and removes the file; C creates a new one at the path and holds it. A's next grant is on the
// removed file and guards nothing: A must notice and find C's lock.
BOOST_FIXTURE_TEST_CASE(an_owner_that_kept_its_file_sees_it_retired, dir_fixture) {
    auto s = make();
    auto a = make_lock(s, "kept");
    BOOST_REQUIRE(a.try_lock());
    a.unlock();
    {
        auto b = make_lock(s, "kept");
        BOOST_REQUIRE(b.try_lock());
        b.unlock();
    }
    BOOST_TEST(!std::filesystem::exists(path("kept")));
    auto c = make_lock(s, "kept");
    BOOST_REQUIRE(c.try_lock());
    BOOST_TEST(!a.try_lock(), "two holders: a grant on a removed lock file");
    c.unlock();
    BOOST_TEST(a.try_lock());
}

// Long-lived objects keep their file open (and read its retired mark without a system call)
// while fresh objects remove and recreate it: each long-lived grant must see a retirement.
BOOST_FIXTURE_TEST_CASE(long_lived_and_fresh_lock_objects_together_lose_no_update, dir_fixture) {
    counter_file counter(dir.path() / "counter");
    BOOST_TEST(increment_with_fresh_objects(config_json(), "file", "mixed", counter, 4, 300, 2) ==
               0);
    BOOST_TEST(counter.value() == 1200);
}

BOOST_FIXTURE_TEST_CASE(long_lived_lock_objects_in_four_processes_lose_no_update, dir_fixture) {
    counter_file counter(dir.path() / "counter");
    BOOST_TEST(increment_in_processes([this] { return make(); }, "kept", counter, 4, 300) == 0);
    BOOST_TEST(counter.value() == 1200);
}

// A child with a safety limit: a lock that spins or hangs fails the test instead of ctest.
BOOST_FIXTURE_TEST_CASE(planted_content_in_a_lock_file_never_makes_it_spin, dir_fixture) {
    for (const std::string& content :
         {std::string("x"), std::string(1, '\1'), std::string("\1garbage", 8)}) {
        { std::ofstream(path("planted"), std::ios::binary) << content; }
        ::chmod(path("planted").c_str(), 0600);
        pid_t child = fork_child(
            [&] {
                auto s = make();
                auto lock = make_lock(s, "planted");
                if (!lock.try_lock()) return 2;
                lock.unlock();
                if (!lock.try_lock_for(100ms)) return 3;
                lock.unlock();
                lock.lock();
                lock.unlock();
                return 0;
            },
            20s);
        BOOST_TEST(wait_child(child, 30s) == 0, "content of " << content.size() << " bytes");
        std::filesystem::remove(path("planted"));
    }
}

BOOST_FIXTURE_TEST_CASE(a_hard_link_to_a_victim_is_refused_and_left_unchanged, dir_fixture) {
    const auto victim = dir.path() / "victim";
    { std::ofstream(victim, std::ios::binary) << "victim"; }
    std::filesystem::create_hard_link(victim, path("linked"));
    // In a child with a safety limit: a version that took the victim's first byte for a
    // "retired" mark spun for ever.
    pid_t child = fork_child(
        [&] {
            auto lock = make_lock(make(), "linked");
            try {
                (void)lock.try_lock();
                return 2;  // a hard-linked file was used as a lock file
            } catch (const backend_error& e) {
                const std::string what = e.what();
                if (what.find(path("linked").string()) == std::string::npos) return 3;
                if (what.find("hard links") == std::string::npos) return 4;
            }
            if (lock.is_acquired()) return 5;
            try {
                (void)lock.try_lock_for(50ms);
                return 6;
            } catch (const backend_error&) {
            }
            return 0;
        },
        20s);
    BOOST_TEST(wait_child(child, 30s) == 0);
    BOOST_TEST(read_file(victim) == "victim");
    BOOST_TEST(std::filesystem::hard_link_count(victim) == 2u);
}

// An owner object that found the lock busy never checked the file it opened (the check follows
// a grant); when it goes away and finds the file free, it must check it before it marks and
// removes it. Here the path is a hard link to a victim, which another process had locked.
BOOST_FIXTURE_TEST_CASE(an_owner_that_found_a_hard_linked_file_busy_leaves_it_unchanged,
                        dir_fixture) {
    const auto victim = dir.path() / "victim";
    { std::ofstream(victim, std::ios::binary) << "victim"; }
    std::filesystem::create_hard_link(victim, path("busy"));
    byte_pipe locked, done;
    pid_t other = fork_child([&] {
        locked.close_read();
        done.close_write();
        const int fd = ::open(victim.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 2;
        locked.put('l');
        (void)done.get(20s);  // EOF: the test saw it busy
        return 0;
    });
    locked.close_write();
    done.close_read();
    BOOST_REQUIRE(locked.get(10s) == 'l');
    {
        auto lock = make_lock(make(), "busy");
        BOOST_TEST(!lock.try_lock());
        done.close_write();
        BOOST_TEST(wait_child(other) == 0);
    }  // the owner object goes, the file is free now
    BOOST_TEST(read_file(victim) == "victim");
    BOOST_TEST(std::filesystem::hard_link_count(victim) == 2u);
}

// Issue 23 point 8: a full file system under the lock directory (any local user can fill
// Debian's /run/lock tmpfs). The lock file's page cannot be reserved, so it must not be mapped:
// touching it killed the owner with SIGBUS at its next grant or when it went away (the file
// left, `run`'s command status lost). Grants then read fstat, the owner that cannot write the
// retired mark leaves the file, and the next owner uses it.
BOOST_AUTO_TEST_CASE(a_full_file_system_is_no_crash) {
    temp_dir dir("file-full");
    file_options o;
    o.lock_dir = dir.path();
    std::string why;
    auto status = run_on_a_full_tmpfs(
        dir.path(), 0700,
        [&] {
            auto s = make_file_store(o);
            {
                auto lock = make_lock(s, "full");
                if (!lock.try_lock()) return 2;
                lock.unlock();
                if (!lock.try_lock()) return 3;  // a later grant reads the retired mark
                pid_t other = fork_child(
                    [&] { return make_lock(make_file_store(o), "full").try_lock() ? 1 : 0; });
                if (wait_child(other) != 0) return 4;  // two holders
                lock.unlock();
            }  // the owner object goes: it removes the file or leaves it
            auto next = make_lock(s, "full");
            if (!next.try_lock()) return 5;
            return 0;
        },
        why);
    expect_passed_on_a_full_tmpfs(status, why);
}

// A mapped page beyond the end of its file kills whoever touches it with SIGBUS too. In a shared
// directory the group's other users can cut a lock file short (a careless `: > file`): its mark
// is not mapped, and grants check it with fstat.
BOOST_AUTO_TEST_CASE(a_lock_file_cut_short_by_another_user_of_its_shared_directory_is_no_crash) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    const auto base = std::filesystem::temp_directory_path() / run_unique("locksmith-file-shared");
    std::filesystem::create_directory(base);
    ::chmod(base.c_str(), 0755);
    file_options o;
    o.lock_dir = base / "locks";
    o.shared_group = ::getgrgid(user->gid)->gr_name;
    const auto lock_file = o.lock_dir / lock_file_name("cut", ".lock");
    pid_t child = fork_child([&] {
        auto lock = make_lock(make_file_store(o), "cut");
        if (!lock.try_lock()) return 2;
        lock.unlock();
        if (wait_child(fork_child_as(*user, [&] { return ::truncate(lock_file.c_str(), 0); })) != 0)
            return 3;
        if (!lock.try_lock()) return 4;  // a later grant reads the retired mark
        lock.unlock();
        return 0;
    });
    BOOST_TEST(wait_child(child) == 0, "a failed step, or 201: a signal such as SIGBUS (above)");
    std::filesystem::remove_all(base);
}

BOOST_FIXTURE_TEST_CASE(a_fifo_or_directory_at_the_lock_path_is_an_error_not_a_hang, dir_fixture) {
    BOOST_REQUIRE(::mkfifo(path("fifo").c_str(), 0600) == 0);
    std::filesystem::create_directory(path("dir"));
    pid_t child = fork_child(
        [&] {
            auto s = make();
            for (const char* name : {"fifo", "dir"}) {
                try {
                    (void)make_lock(s, name).try_lock();
                    return 2;
                } catch (const backend_error&) {
                }
            }
            return 0;
        },
        20s);
    BOOST_TEST(wait_child(child, 30s) == 0);
}

BOOST_FIXTURE_TEST_CASE(a_file_of_another_user_is_refused, dir_fixture) {
    if (::geteuid() != 0) {
        BOOST_TEST_MESSAGE("skipped: needs root to give a file to another user");
        BOOST_TEST(!running_in_ci());
        return;
    }
    { std::ofstream(path("foreign")) << ""; }
    BOOST_REQUIRE(::chown(path("foreign").c_str(), 65534, 65534) == 0);
    BOOST_CHECK_THROW((void)make_lock(make(), "foreign").try_lock(), backend_error);
}

// A blocking waiter tries a few times without sleeping (brief_retries), but must then sleep in
// flock(2), where the kernel wakes it at the release: /proc/locks lists it as blocked ("->").
BOOST_FIXTURE_TEST_CASE(a_waiter_sleeps_in_flock_after_its_first_tries, dir_fixture) {
    auto s = make();
    auto lock = make_lock(s, "queued");
    BOOST_REQUIRE(lock.try_lock());
    pid_t waiter = fork_waiter([&] { return make(); }, "queued");
    auto blocked_in_flock = [&] {
        std::ifstream locks("/proc/locks");
        std::string line;
        while (std::getline(locks, line))
            if (line.find("-> FLOCK") != std::string::npos &&
                line.find(" " + std::to_string(waiter) + " ") != std::string::npos)
                return true;
        return false;
    };
    BOOST_TEST(eventually(blocked_in_flock, 5s), "the waiter never slept in flock(2)");
    lock.unlock();
    BOOST_TEST(wait_child(waiter, 30s) == 0);
}

// --- counting semaphores (issue 27): one permits file per name, a byte-range OFD lock per
// permit ---

namespace {

std::filesystem::path permits_path(const dir_fixture& f, const std::string& name) {
    return f.dir.path() / lock_file_name(name, ".permits");
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(permits_are_numbered_and_given_back, dir_fixture) {
    auto s = make();
    auto a = make_permit(s, "numbered", 2), b = make_permit(s, "numbered", 2),
         c = make_permit(s, "numbered", 2);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(a.try_acquire());  // again while held: no second permit
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(a.permit() == "1");
    BOOST_TEST(b.permit() == "2");
    BOOST_TEST(!c.try_acquire());
    auto status = s->status("numbered");
    BOOST_TEST(status.limit.value_or(0) == 2u);
    BOOST_TEST(status.permits_held.value_or(0) == 2u);
    a.release();
    BOOST_TEST(!a.is_acquired());
    BOOST_TEST(s->status("numbered").permits_held.value_or(0) == 1u);
    BOOST_TEST(c.try_acquire());
    BOOST_TEST(c.permit() == "1");
    // A lock of the same name is another object.
    auto lock = make_lock(s, "numbered");
    BOOST_TEST(lock.try_lock());
    lock.unlock();
}

BOOST_FIXTURE_TEST_CASE(a_killed_holders_permits_come_back_at_once, dir_fixture) {
    byte_pipe ready;
    pid_t holder = fork_child([&] {
        auto s = make();
        auto p = make_permit(s, "crash", 2), q = make_permit(s, "crash", 2);
        p.acquire();
        q.acquire();  // both permits, in one process
        ready.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready.close_write();
    BOOST_REQUIRE(ready.get(10s));
    auto s = make();
    auto mine = make_permit(s, "crash", 2), other = make_permit(s, "crash", 2);
    BOOST_TEST(!mine.try_acquire());
    ::kill(holder, SIGKILL);
    wait_child(holder, 30s);
    BOOST_TEST(mine.try_acquire());  // the kernel dropped the dead holder's locks
    BOOST_TEST(other.try_acquire());
}

// A waiter sleeps (no CPU spent while it waits), and is woken by a release and by a holder's
// death. The latency from release to grant is printed (bench material, not asserted).
BOOST_FIXTURE_TEST_CASE(a_waiter_sleeps_and_is_woken_by_a_release_and_by_a_death, dir_fixture) {
    struct times {
        std::atomic<std::int64_t> released{0};
        std::atomic<std::int64_t> granted{0};
    };
    auto* t = new (::mmap(nullptr, sizeof(times), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0)) times;
    auto now_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    };
    auto s = make();
    // The same hand-over on the file lock (flock), in the same run, as the baseline.
    auto hand_over = [&](bool permit) {
        std::vector<double> latencies;
        for (int round = 0; round < 20; ++round) {
            auto mine_permit = make_permit(s, "wake", 1);
            auto mine_lock = make_lock(s, "wake-lock");
            BOOST_REQUIRE(permit ? mine_permit.try_acquire() : mine_lock.try_lock());
            byte_pipe started;
            pid_t waiter = fork_child([&] {
                auto p = make_permit(make(), "wake", 1);
                auto l = make_lock(make(), "wake-lock");
                started.put('w');
                if (!(permit ? p.try_acquire_for(60s) : l.try_lock_for(60s))) return 1;
                t->granted = now_ns();
                return 0;
            });
            started.close_write();
            BOOST_REQUIRE(started.get(10s));
            if (round == 0 && permit) {
                const long before = cpu_ticks(waiter);
                std::this_thread::sleep_for(500ms);
                // A waiter that polled without sleeping would burn ~50 ticks here.
                BOOST_TEST(cpu_ticks(waiter) - before <= 5, "the waiter spent CPU while it waited");
            } else {
                std::this_thread::sleep_for(20ms);  // let it fall asleep
            }
            t->released = now_ns();
            if (permit)
                mine_permit.release();
            else
                mine_lock.unlock();
            BOOST_REQUIRE(wait_child(waiter, 30s) == 0);
            latencies.push_back(double(t->granted - t->released) / 1e3);
        }
        std::sort(latencies.begin(), latencies.end());
        BOOST_TEST_MESSAGE((permit ? "file permit" : "file lock (baseline)")
                           << " hand-over, release to grant across processes (us): median "
                           << latencies[latencies.size() / 2] << ", max " << latencies.back());
        BOOST_TEST(latencies.back() < 10e6);  // a lost wake-up would wait out the minute
    };
    hand_over(true);
    hand_over(false);

    // A holder's death wakes a sleeping waiter (its descriptor's close: IN_CLOSE_WRITE).
    byte_pipe ready;
    pid_t holder = fork_child([&] {
        auto p = make_permit(make(), "wake", 1);
        p.acquire();
        ready.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready.close_write();
    BOOST_REQUIRE(ready.get(10s));
    byte_pipe got;
    pid_t waiter = fork_child([&] {
        auto p = make_permit(make(), "wake", 1);
        if (!p.try_acquire_for(60s)) return 1;
        got.put('g');
        return 0;
    });
    got.close_write();
    BOOST_TEST(!got.get(200ms).has_value(), "the waiter got a permit its holder still had");
    const auto killed = std::chrono::steady_clock::now();
    ::kill(holder, SIGKILL);
    BOOST_TEST(got.get(30s).has_value());
    BOOST_TEST_MESSAGE("woken " << ms_since(killed) << " ms after the holder's SIGKILL");
    BOOST_TEST(ms_since(killed) < 10000);
    BOOST_TEST(wait_child(waiter, 30s) == 0);
    wait_child(holder, 30s);
    ::munmap(t, sizeof(times));
}

BOOST_FIXTURE_TEST_CASE(a_timed_wait_for_a_permit_ends_on_time_and_gets_one_given_back,
                        dir_fixture) {
    expect_timed_permit_waits([this] { return make(); }, "timed");
}

BOOST_FIXTURE_TEST_CASE(a_second_limit_for_one_name_is_refused, dir_fixture) {
    BOOST_REQUIRE(wait_child(fork_child([&] {
                      return make_permit(make(), "one-limit", 2).try_acquire() ? 0 : 1;
                  })) == 0);
    auto p = make_permit(make(), "one-limit", 3);
    try {
        (void)p.try_acquire();
        BOOST_FAIL("a limit of 3 was accepted for a name whose limit is 2");
    } catch (const invalid_argument_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("limit of 2") != std::string::npos, what);
        BOOST_TEST(what.find("asks for 3") != std::string::npos, what);
        BOOST_TEST(
            what.find("rm " + permits_path(*this, "one-limit").string()) != std::string::npos,
            what);
    }
    BOOST_TEST(!p.held());
    BOOST_TEST(make_permit(make(), "one-limit", 2).try_acquire());
    BOOST_CHECK_THROW((void)make_permit(make(), "big", 4097).try_acquire(), invalid_argument_error);
}

BOOST_FIXTURE_TEST_CASE(a_forked_child_cannot_release_its_parents_permit, dir_fixture) {
    auto s = make();
    auto p = make_permit(s, "forked", 1);
    BOOST_REQUIRE(p.try_acquire());
    BOOST_TEST(wait_child(fork_child([&] {
                   p.set_auto_release(false);
                   try {
                       p.release();
                       return 1;
                   } catch (const release_error&) {
                       return 0;
                   }
               })) == 0);
    BOOST_TEST(p.is_acquired());
    BOOST_TEST(!make_permit(s, "forked", 1).try_acquire());
}

// `rm` of the permits file while a permit is held: the holder hears that its permit is gone.
BOOST_FIXTURE_TEST_CASE(a_permits_file_removed_by_an_administrator_ends_the_grant, dir_fixture) {
    auto s = make();
    int lost = 0;
    auto k = std::make_shared<key>("removed");
    k->set_limit(1);
    lock_options options;
    options.on_lost = [&](const error&) { ++lost; };
    named_semaphore p(s, k, options);
    BOOST_REQUIRE(p.try_acquire());
    std::filesystem::remove(permits_path(*this, "removed"));
    BOOST_TEST(!p.is_acquired());
    BOOST_TEST(lost == 1);
    BOOST_TEST(p.try_acquire());
    BOOST_TEST(!make_permit(s, "removed", 1).try_acquire());
}

// What is found at a permits file's name must be ours, unwritable by others, not a symlink,
// with a valid header: otherwise an error naming it, and nothing written into it.
BOOST_FIXTURE_TEST_CASE(a_permits_file_not_to_be_trusted_is_refused, dir_fixture) {
    auto s = make();
    BOOST_REQUIRE(make_permit(s, "model", 2).try_acquire());
    std::string bytes;
    {
        std::ifstream in(permits_path(*this, "model"), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    auto plant = [&](const std::string& name, const std::string& content, mode_t mode) {
        const auto path = permits_path(*this, name);
        { std::ofstream(path, std::ios::binary) << content; }
        ::chmod(path.c_str(), mode);
        return path;
    };
    auto refused = [&](const std::string& name, const std::string& expected) {
        try {
            (void)make_permit(make(), name, 2).try_acquire();
            return std::string("accepted");
        } catch (const backend_error& e) {
            const std::string what = e.what();
            return what.find(expected) != std::string::npos ? std::string() : what;
        }
    };
    plant("open", bytes, 0666);
    BOOST_TEST(refused("open", "writable by others") == "");
    plant("garbage", std::string(64, 'x'), 0600);
    BOOST_TEST(refused("garbage", "corrupted") == "");
    std::string too_big = bytes;
    const std::uint32_t huge = 1u << 30;
    std::memcpy(too_big.data() + 12, &huge, sizeof huge);
    plant("huge", too_big, 0600);
    BOOST_TEST(refused("huge", "corrupted") == "");
    const auto victim = dir.path() / "victim";
    { std::ofstream(victim) << "precious"; }
    std::filesystem::create_symlink(victim, permits_path(*this, "link"));
    BOOST_TEST(refused("link", "symbolic link") == "");
    BOOST_TEST(read_file(victim) == "precious");
    if (::geteuid() == 0) {
        const auto path = plant("theirs", bytes, 0600);
        BOOST_REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
        BOOST_TEST(refused("theirs", "belongs to uid 65534") == "");
    }
}

// Another user cannot plant a permits file in our lock directory, nor use ours.
BOOST_FIXTURE_TEST_CASE(another_user_cannot_reach_our_permits, dir_fixture) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    BOOST_REQUIRE(make_permit(make(), "private", 1).try_acquire());
    const auto path = permits_path(*this, "private").string();
    const int rc = wait_child(fork_child_as(*user, [&] {
        if (::open(path.c_str(), O_RDWR) >= 0) return 1;
        const auto planted = permits_path(*this, "planted").string();
        if (::open(planted.c_str(), O_RDWR | O_CREAT, 0666) >= 0) return 2;
        return 0;
    }));
    BOOST_TEST(rc == 0);
}
