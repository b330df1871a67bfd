// SPDX-License-Identifier: MIT
// The `simple` strategy: exclusion across processes and threads, stale locks (dead owner, other
// boot, max_age), racing breakers, bad lock files, release by token, a key continued and
// released by another process, and counting semaphores' slot and limit files (issue 27).
#define BOOST_TEST_MODULE simple strategy
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/strategies/simple.hpp>

#include "local/fresh_objects.hpp"
#include "local/local_helpers.hpp"
#include "support/full_tmpfs.hpp"
#include "support/permit_helpers.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using namespace locksmith::test;
using namespace std::chrono_literals;

namespace {

std::string first_line(const char* path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

std::string start_time_of(pid_t pid) {
    std::string stat = first_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 22 && fields >> field; ++i)
        if (i == 22) return field;
    return {};
}

std::string host_name() {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return buf;
}

// A pid that belonged to a process that has exited (and been reaped).
pid_t dead_pid() {
    pid_t pid = fork_child([] { return 0; });
    wait_child(pid);
    return pid;
}

struct record_fields {
    std::string token = "0123456789abcdef0123456789abcdef";
    std::string host = host_name();
    pid_t pid = ::getpid();
    std::string start = start_time_of(::getpid());
    std::string boot = first_line("/proc/sys/kernel/random/boot_id");
    std::string pidns = std::filesystem::read_symlink("/proc/self/ns/pid").string();
    std::int64_t created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
};

std::string record_text(const record_fields& r) {
    return "locksmith-simple 1\ntoken=" + r.token + "\nhost=" + r.host +
           "\npid=" + std::to_string(r.pid) + "\nstart=" + r.start + "\nboot=" + r.boot +
           "\npidns=" + r.pidns + "\ncreated_ms=" + std::to_string(r.created_ms) + "\nend\n";
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

void age_file(const std::filesystem::path& path, std::chrono::seconds by) {
    timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= by.count();
    times[1] = times[0];
    ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

struct dir_fixture {
    temp_dir dir{"simple"};
    std::shared_ptr<store> make(std::chrono::milliseconds max_age = 0ms,
                                std::chrono::milliseconds write_grace = 2000ms) const {
        simple_options o;
        o.lock_dir = dir.path();
        o.max_age = max_age;
        o.write_grace = write_grace;
        return make_simple_store(o);
    }
    std::function<std::shared_ptr<store>()> maker() const {
        return [this] { return make(); };
    }
    std::filesystem::path path(const std::string& name) const {
        return simple_lock_path(dir.path(), name);
    }
    std::string config_json() const {
        return nlohmann::json{
            {"strategies", {{"simple", {{"options", {{"lock_dir", dir.path().string()}}}}}}}}
            .dump();
    }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(two_lock_objects_in_one_thread, dir_fixture) {
    auto s = make();
    auto first = make_lock(s, "same");
    auto second = make_lock(s, "same");
    BOOST_REQUIRE(first.try_lock());
    BOOST_TEST(first.try_lock());  // idempotent
    BOOST_TEST(!second.try_lock());
    BOOST_TEST(!second.try_lock_for(20ms));
    first.unlock();
    BOOST_TEST(second.try_lock());
}

BOOST_FIXTURE_TEST_CASE(holder_killed_with_sigkill_is_broken_on_the_next_attempt, dir_fixture) {
    auto s = make();
    pid_t holder = fork_holder(maker(), "crash");
    BOOST_REQUIRE(holder > 0);
    auto lock = make_lock(s, "crash");
    BOOST_TEST(!lock.try_lock());
    ::kill(holder, SIGKILL);
    wait_child(holder, 5s);
    BOOST_TEST(lock.try_lock());
    lock.unlock();
    BOOST_TEST(!std::filesystem::exists(path("crash")));
}

BOOST_FIXTURE_TEST_CASE(racing_breakers_never_both_win, dir_fixture) {
    constexpr int rounds = 10, breakers = 6;
    for (int round = 0; round < rounds; ++round) {
        const std::string name = "race." + std::to_string(round);
        record_fields stale;
        stale.pid = dead_pid();
        write_file(path(name), record_text(stale));
        byte_pipe go, results;
        std::vector<pid_t> children;
        for (int b = 0; b < breakers; ++b)
            children.push_back(fork_child([&] {
                auto lock = make_lock(make(), name);
                if (!go.get(10s)) return 2;
                const bool won = lock.try_lock();
                results.put(won ? '1' : '0');
                if (won) std::this_thread::sleep_for(300ms);  // hold past everybody's attempt
                return 0;
            }));
        go.close_read();
        results.close_write();
        for (int b = 0; b < breakers; ++b) go.put('g');
        int winners = 0;
        for (int b = 0; b < breakers; ++b) {
            auto r = results.get(10s);
            BOOST_REQUIRE(r.has_value());
            winners += *r == '1';
        }
        BOOST_TEST(winners == 1, "round " << round << ": " << winners << " breakers won");
        for (pid_t pid : children) BOOST_TEST(wait_child(pid) == 0);
    }
}

BOOST_FIXTURE_TEST_CASE(a_live_owner_is_never_broken_without_max_age, dir_fixture) {
    record_fields live;  // this very process, another token
    write_file(path("live"), record_text(live));
    BOOST_TEST(!make_lock(make(), "live").try_lock());
    record_fields remote;
    remote.host = "another-host.example";
    remote.pid = dead_pid();
    remote.created_ms -= 3'600'000;
    write_file(path("remote"), record_text(remote));
    BOOST_TEST(!make_lock(make(), "remote").try_lock());
    // With max_age, a lock older than that is stale on any host.
    BOOST_TEST(make_lock(make(1s), "remote").try_lock());
}

BOOST_FIXTURE_TEST_CASE(pids_of_another_pid_namespace_are_not_judged, dir_fixture) {
    record_fields other;  // a container sharing our host name: its pid means nothing here
    other.pidns = "pid:[1]";
    other.pid = dead_pid();
    write_file(path("ns"), record_text(other));
    BOOST_TEST(!make_lock(make(), "ns").try_lock());
}

BOOST_FIXTURE_TEST_CASE(a_fifo_at_the_lock_path_is_an_error_not_a_hang, dir_fixture) {
    BOOST_REQUIRE(::mkfifo(path("fifo").c_str(), 0600) == 0);
    BOOST_CHECK_THROW(make_lock(make(), "fifo").try_lock(), backend_error);
}

BOOST_FIXTURE_TEST_CASE(an_owner_of_an_earlier_boot_is_stale, dir_fixture) {
    record_fields old;
    old.boot = "00000000-0000-0000-0000-000000000000";
    write_file(path("boot"), record_text(old));
    BOOST_TEST(make_lock(make(), "boot").try_lock());
}

BOOST_FIXTURE_TEST_CASE(a_reused_pid_is_stale, dir_fixture) {
    record_fields reused;  // our pid, but another process's start time
    reused.start = "1";
    write_file(path("reused"), record_text(reused));
    BOOST_TEST(make_lock(make(), "reused").try_lock());
}

BOOST_FIXTURE_TEST_CASE(truncated_and_empty_files, dir_fixture) {
    auto s = make();
    // Young: a create in progress, so held.
    write_file(path("cut"), "locksmith-simple 1\ntoken=abc");
    BOOST_TEST(!make_lock(s, "cut").try_lock());
    BOOST_TEST(s->status("cut").held == lock_status::state::held_exclusive);
    // Old: the remains of a crash, so stale.
    age_file(path("cut"), 60s);
    BOOST_TEST(make_lock(s, "cut").try_lock());
    write_file(path("empty"), "");
    age_file(path("empty"), 60s);
    BOOST_TEST(make_lock(s, "empty").try_lock());
    write_file(path("prefix"), "locksmith-sim");
    age_file(path("prefix"), 60s);
    BOOST_TEST(make_lock(s, "prefix").try_lock());
}

BOOST_FIXTURE_TEST_CASE(a_foreign_file_is_an_error_and_is_kept, dir_fixture) {
    write_file(path("foreign"), "this is somebody else's file\n");
    auto lock = make_lock(make(), "foreign");
    try {
        lock.try_lock();
        BOOST_FAIL("a foreign file was taken as a lock");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find("not a locksmith lock file") != std::string::npos,
                   e.what());
    }
    BOOST_TEST(read_file(path("foreign")) == "this is somebody else's file\n");
    // Corrupt inside a valid header: a record without token or pid.
    write_file(path("corrupt"), "locksmith-simple 1\ngarbage\nend\n");
    BOOST_CHECK_THROW(make_lock(make(), "corrupt").try_lock(), backend_error);
    // Our header on a file far larger than any record: not ours either, even when old.
    write_file(path("huge"), "locksmith-simple 1\n" + std::string(10000, 'x'));
    age_file(path("huge"), 60s);
    BOOST_CHECK_THROW(make_lock(make(), "huge").try_lock(), backend_error);
    BOOST_TEST(std::filesystem::file_size(path("huge")) > 10000u);
}

BOOST_FIXTURE_TEST_CASE(a_symlink_at_the_lock_path_is_refused, dir_fixture) {
    const auto target = dir.path() / "target";
    write_file(target, "precious");
    std::filesystem::create_symlink(target, path("link"));
    BOOST_CHECK_THROW(make_lock(make(), "link").try_lock(), backend_error);
    BOOST_TEST(read_file(target) == "precious");
}

BOOST_FIXTURE_TEST_CASE(release_leaves_a_successors_file_alone, dir_fixture) {
    auto s = make();
    auto lock = make_lock(s, "succ");
    BOOST_REQUIRE(lock.try_lock());
    // As if our lock had been broken and taken by somebody else.
    record_fields successor;
    successor.token = "fedcba9876543210fedcba9876543210";
    const std::string text = record_text(successor);
    write_file(path("succ"), text);
    BOOST_TEST(!lock.is_acquired());
    lock.unlock();
    BOOST_TEST(read_file(path("succ")) == text);
}

BOOST_FIXTURE_TEST_CASE(a_serialized_key_is_continued_and_released_by_another_process,
                        dir_fixture) {
    const std::string cfg = config_json();
    // Process A takes the lock, hands its key over and exits without releasing.
    byte_pipe key_pipe;
    temp_dir exchange("simple-key");
    const auto key_file = exchange.path() / "key.json";
    pid_t a = fork_child([&] {
        lock_factory factory(config::parse(cfg));
        lock_request request;
        request.strategy = "simple";
        auto lock = factory.create_lock("handed", request);
        if (!lock.try_lock()) return 2;
        write_file(key_file, lock.serialize_key().dump());
        lock.set_auto_release(false);
        return 0;
    });
    BOOST_REQUIRE(wait_child(a) == 0);
    const std::string serialized = read_file(key_file);
    BOOST_REQUIRE(!serialized.empty());

    // Process B continues it: it holds it, acquire() records B as the owner, then B releases.
    byte_pipe adopted, finish;
    pid_t b = fork_child([&] {
        lock_factory factory(config::parse(cfg));
        auto lock = factory.create_lock_from_key(nlohmann::json::parse(serialized));
        if (!lock.is_acquired()) return 3;
        if (!lock.try_lock()) return 4;
        adopted.put('a');
        if (!finish.get(10s)) return 5;
        lock.release();
        return lock.is_acquired() ? 6 : 0;
    });
    adopted.close_write();
    finish.close_read();
    BOOST_REQUIRE(adopted.get(10s));
    // A is gone, but B owns the file now: not stale.
    auto c = make_lock(make(), "handed");
    BOOST_TEST(!c.try_lock());
    BOOST_TEST(read_file(path("handed")).find("pid=" + std::to_string(b)) != std::string::npos);
    finish.put('f');
    BOOST_TEST(wait_child(b) == 0);
    BOOST_TEST(!std::filesystem::exists(path("handed")));
    BOOST_TEST(c.try_lock());
}

BOOST_FIXTURE_TEST_CASE(ten_thousand_names_leave_only_the_guard_file, dir_fixture) {
    auto s = make();
    for (int i = 0; i < 10'000; ++i) {
        auto lock = make_lock(s, "leak." + std::to_string(i));
        BOOST_REQUIRE(lock.try_lock());
        lock.unlock();
    }
    // Bound: one file per lock held now (none) plus the guard file.
    BOOST_TEST(dir.entries() <= 1u);
}

BOOST_FIXTURE_TEST_CASE(status_names_the_holder, dir_fixture) {
    auto s = make();
    BOOST_TEST(s->status("st").held == lock_status::state::free);
    auto lock = make_lock(s, "st");
    BOOST_REQUIRE(lock.try_lock());
    auto st = s->status("st");
    BOOST_TEST(st.held == lock_status::state::held_exclusive);
    BOOST_REQUIRE(st.holders.size() == 1u);
    BOOST_TEST(st.holders[0].find("pid " + std::to_string(::getpid())) != std::string::npos);
}

// ---- counting semaphores (issue 27): slot files <prefix>.<hash>.permit-<i>.slock, .slimit ----

namespace {

std::filesystem::path slot_path(const dir_fixture& f, const std::string& name, int slot) {
    auto p = f.path(name).string();
    return p.substr(0, p.size() - 6) + ".permit-" + std::to_string(slot) + ".slock";
}

std::filesystem::path limit_path(const dir_fixture& f, const std::string& name) {
    auto p = f.path(name).string();
    return p.substr(0, p.size() - 6) + ".slimit";
}

}  // namespace

// Each permit is its slot's O_EXCL file (the limit in its record), the limit one file kept with
// the name; a release removes the slot, the limit file stays.
BOOST_FIXTURE_TEST_CASE(permits_are_slot_files_and_the_limit_file_stays, dir_fixture) {
    auto s = make();
    auto a = make_permit(s, "pool", 2), b = make_permit(s, "pool", 2),
         c = make_permit(s, "pool", 2);
    BOOST_REQUIRE(a.try_acquire());
    BOOST_REQUIRE(b.try_acquire());
    BOOST_TEST(!c.try_acquire());
    BOOST_TEST(a.permit() == "1");
    BOOST_TEST(b.permit() == "2");
    BOOST_TEST(read_file(slot_path(*this, "pool", 1)).find("\nlimit=2\n") != std::string::npos);
    BOOST_TEST(read_file(limit_path(*this, "pool")) == "locksmith-simple-limit 1\nlimit=2\nend\n");
    auto status = s->status("pool");
    BOOST_TEST(status.limit.value_or(0) == 2u);
    BOOST_TEST(status.permits_held.value_or(0) == 2u);
    a.release();
    BOOST_TEST(!std::filesystem::exists(slot_path(*this, "pool", 1)));
    BOOST_TEST(c.try_acquire());
    BOOST_TEST(c.permit() == "1");
    b.release();
    c.release();
    BOOST_TEST(std::filesystem::exists(limit_path(*this, "pool")));
    BOOST_TEST(!std::filesystem::exists(slot_path(*this, "pool", 2)));
}

// A holder killed with SIGKILL leaves its slot file; the next grant breaks it (dead pid), as a
// lock's.
BOOST_FIXTURE_TEST_CASE(a_killed_holders_slot_is_broken_by_the_next_grant, dir_fixture) {
    byte_pipe held;
    pid_t holder = fork_child([&] {
        auto p = make_permit(make(), "crashed", 1);
        if (!p.try_acquire()) return 2;
        held.put('h');
        ::pause();
        return 0;
    });
    held.close_write();
    BOOST_REQUIRE(held.get(10s));
    auto p = make_permit(make(), "crashed", 1);
    BOOST_TEST(!p.try_acquire());
    ::kill(holder, SIGKILL);
    wait_child(holder);
    BOOST_TEST(std::filesystem::exists(slot_path(*this, "crashed", 1)));
    BOOST_TEST(p.try_acquire());
}

// What another user of a shared directory (or a careless admin) can leave in the slots' and the
// limit's places is refused with backend_error naming it and left alone, never followed,
// removed or counted as a free permit.
BOOST_FIXTURE_TEST_CASE(foreign_files_and_symlinks_in_slots_and_limit_are_refused, dir_fixture) {
    auto s = make();
    // A foreign file in slot 1.
    write_file(slot_path(*this, "planted", 1), "somebody else's\n");
    try {
        make_permit(s, "planted", 2).try_acquire();
        BOOST_FAIL("a foreign slot file was taken or skipped");
    } catch (const backend_error& e) {
        BOOST_TEST(std::string(e.what()).find(slot_path(*this, "planted", 1).string()) !=
                       std::string::npos,
                   e.what());
    }
    BOOST_TEST(read_file(slot_path(*this, "planted", 1)) == "somebody else's\n");
    // A symlink in slot 1, to a file the attacker wants overwritten or removed.
    const auto target = dir.path() / "target";
    write_file(target, "precious");
    std::filesystem::create_symlink(target, slot_path(*this, "linked", 1));
    BOOST_CHECK_THROW(make_permit(s, "linked", 2).try_acquire(), backend_error);
    BOOST_TEST(read_file(target) == "precious");
    // A symlink, a garbage file and an out-of-range limit at the limit's place.
    std::filesystem::create_symlink(target, limit_path(*this, "limitlink"));
    BOOST_CHECK_THROW(make_permit(s, "limitlink", 2).try_acquire(), backend_error);
    BOOST_TEST(read_file(target) == "precious");
    write_file(limit_path(*this, "garbage"), "limit=2\n");
    BOOST_CHECK_THROW(make_permit(s, "garbage", 2).try_acquire(), backend_error);
    write_file(limit_path(*this, "zero"), "locksmith-simple-limit 1\nlimit=0\nend\n");
    BOOST_CHECK_THROW(make_permit(s, "zero", 2).try_acquire(), backend_error);
    BOOST_TEST(!std::filesystem::exists(slot_path(*this, "zero", 1)));
}

// The limit file keeps the name's limit after every permit was released: an owner of another
// limit is refused then too, naming both and the file.
BOOST_FIXTURE_TEST_CASE(a_second_limit_is_refused_while_no_permit_is_held, dir_fixture) {
    auto s = make();
    auto first = make_permit(s, "kept", 2);
    BOOST_REQUIRE(first.try_acquire());
    first.release();
    auto other = make_permit(s, "kept", 3);
    try {
        other.try_acquire();
        BOOST_FAIL("an owner of a second limit was granted");
    } catch (const invalid_argument_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("limit of 2") != std::string::npos, what);
        BOOST_TEST(what.find("asks for 3") != std::string::npos, what);
        BOOST_TEST(what.find(limit_path(*this, "kept").string()) != std::string::npos, what);
    }
    BOOST_TEST(!std::filesystem::exists(slot_path(*this, "kept", 1)));
}

// A limit file removed while permits are held (`rm` too early): an owner of another limit is
// still refused by the holders' records, never a share of a second semaphore.
BOOST_FIXTURE_TEST_CASE(a_removed_limit_file_does_not_let_a_second_limit_in, dir_fixture) {
    auto s = make();
    auto a = make_permit(s, "reset", 1);
    BOOST_REQUIRE(a.try_acquire());
    std::filesystem::remove(limit_path(*this, "reset"));
    auto b = make_permit(s, "reset", 2);
    try {
        b.try_acquire();
        BOOST_FAIL("an owner of a second limit was let in beside a holder of the first");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(std::string(e.what()).find("limit of 1") != std::string::npos, e.what());
    }
    BOOST_TEST(!b.is_acquired());
}

// Limits beyond the strategy's 1000 are refused by name.
BOOST_FIXTURE_TEST_CASE(a_limit_beyond_a_thousand_is_refused, dir_fixture) {
    BOOST_CHECK_THROW(make_permit(make(), "big", 1001).try_acquire(), invalid_argument_error);
    BOOST_TEST(!std::filesystem::exists(limit_path(*this, "big")));
}

// A full file system (any local user can fill /run/lock or /tmp): a permit is refused with a
// locksmith error naming the file, never granted on an empty slot file nor a crash, and leaves
// no slot, limit or temporary file behind.
BOOST_AUTO_TEST_CASE(a_full_file_system_refuses_a_permit_cleanly) {
    temp_dir where("simple-full");
    std::string why;
    const auto status = run_on_a_full_tmpfs(
        where.path(), 0700,
        [&]() -> int {
            simple_options o;
            o.lock_dir = where.path() / "locks";
            std::shared_ptr<store> s;
            try {
                s = make_simple_store(o);
            } catch (const error&) {
                return 3;  // no room for the directory: nothing to test
            }
            try {
                return make_permit(s, "full", 2).try_acquire() ? 1 : 2;
            } catch (const error& e) {
                if (std::string(e.what()).find(o.lock_dir.string()) == std::string::npos) return 4;
            }
            for (const auto& entry : std::filesystem::directory_iterator(o.lock_dir))
                if (entry.path().filename().string().find(".simple.guard") == std::string::npos &&
                    entry.path().filename().string() != ".locksmith-simple.guard")
                    return 5;
            return 0;
        },
        why);
    if (!status) {
        skip_case(why);
        return;
    }
    BOOST_TEST(*status == 0, "exit " << *status);
}

BOOST_AUTO_TEST_CASE(options_are_validated_strictly) {
    BOOST_CHECK_THROW(simple_options::from_json({{"max_age_s", -1}}), config_error);
    BOOST_CHECK_THROW(simple_options::from_json({{"lock_dir", ""}}), config_error);
    BOOST_CHECK_THROW(simple_options::from_json({{"lockdir", "/tmp"}}), config_error);
    auto o = simple_options::from_json({{"lock_dir", "/tmp/x"}, {"max_age_s", 1.5}});
    BOOST_TEST(o.lock_dir == "/tmp/x");
    BOOST_TEST(o.max_age.count() == 1500);
    BOOST_CHECK_THROW(make_simple_store(simple_options{"/nonexistent/locksmith"}),
                      invalid_argument_error);
    auto d = default_registry().find("simple");
    BOOST_REQUIRE(d.has_value());
    BOOST_TEST(d->default_priority == 50);
}

BOOST_AUTO_TEST_CASE(a_relative_lock_dir_is_refused) {
    // Two working directories would be two lock directories: two holders.
    for (const char* dir : {"locks", "./locks", "../locks"}) {
        try {
            (void)simple_options::from_json({{"lock_dir", dir}});
            BOOST_FAIL("relative lock_dir " << dir << " accepted");
        } catch (const config_error& e) {
            BOOST_TEST(e.pointer() == "/lock_dir");
            BOOST_TEST(std::string(e.what()).find("absolute") != std::string::npos, e.what());
        }
    }
}

BOOST_FIXTURE_TEST_CASE(fresh_lock_objects_in_four_processes_lose_no_update, dir_fixture) {
    counter_file counter(dir.path() / "counter");
    BOOST_TEST(increment_with_fresh_objects(config_json(), "simple", "fresh", counter, 4, 300) ==
               0);
    BOOST_TEST(counter.value() == 1200);
}

// The guard is held by another process (stopped, or not locksmith): release gives up after
// write_grace with release_error instead of waiting for ever, and the lock stays held.
BOOST_FIXTURE_TEST_CASE(release_waits_for_the_guard_only_so_long, dir_fixture) {
    const auto guard_path = dir.path() / ".locksmith-simple.guard";
    byte_pipe locked, done;
    pid_t blocker = fork_child([&] {
        int fd = ::open(guard_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;  // l_len 0: the whole file, every name's byte
        if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &fl) != 0) return 2;
        locked.put('l');
        return done.get(60s) ? 0 : 3;
    });
    locked.close_write();
    done.close_read();
    BOOST_REQUIRE(locked.get(10s));
    pid_t releaser = fork_child(
        [&] {
            auto lock = make_lock(make(0ms, 200ms), "guarded");
            if (!lock.try_lock()) return 2;
            try {
                lock.release();
                return 3;
            } catch (const release_error& e) {
                const std::string what = e.what();
                if (what.find(".locksmith-simple.guard") == std::string::npos) return 4;
            }
            return lock.is_acquired() ? 0 : 5;
        },
        20s);
    BOOST_TEST(wait_child(releaser, 30s) == 0);
    done.put('d');
    BOOST_TEST(wait_child(blocker) == 0);
}

// Another user shares the directory (shared_group): our guard file must not lock them out of
// releasing, and a guard they cannot open makes their release fail loudly.
BOOST_AUTO_TEST_CASE(another_user_of_a_shared_directory_can_release) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    const std::string group = ::getgrgid(user->gid)->gr_name;
    const auto base =
        std::filesystem::temp_directory_path() / run_unique("locksmith-simple-shared");
    std::filesystem::create_directory(base);
    ::chmod(base.c_str(), 0755);
    const auto shared = base / "locks";
    simple_options o;
    o.lock_dir = shared;
    o.shared_group = group;
    o.write_grace = 200ms;
    auto ours = make_lock(make_simple_store(o), "ours");  // creates the guard, 0660
    BOOST_REQUIRE(ours.try_lock());
    ours.release();
    auto release_as_other = [&](const std::string& name) {
        return wait_child(fork_child_as(*user, [&] {
            auto theirs = make_lock(make_simple_store(o), name);
            if (!theirs.try_lock()) return 2;
            try {
                theirs.release();
            } catch (const release_error&) {
                return 10;
            }
            return std::filesystem::exists(simple_lock_path(shared, name)) ? 3 : 0;
        }));
    };
    BOOST_TEST(release_as_other("theirs") == 0);
    // A guard left 0600 by one user (an older version, a hand-made file).
    ::chmod((shared / ".locksmith-simple.guard").c_str(), 0600);
    BOOST_TEST(release_as_other("blocked") == 10);
    std::filesystem::remove_all(base);
}
