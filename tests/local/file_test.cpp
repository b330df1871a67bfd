// SPDX-License-Identifier: MIT
// The `file` strategy beyond the conformance suite: lock files removed on release, fresh lock
// objects in several processes, and lock files that are not ours (planted content, hard links).
#define BOOST_TEST_MODULE file strategy
#include <boost/test/unit_test.hpp>

#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <fstream>

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
    if (!status) return skip_case(why);
    BOOST_TEST(*status == 0,
               "the child ended with "
                   << *status
                   << " (a failed step, or 201: a signal such as SIGBUS, reported above)");
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
