// SPDX-License-Identifier: MIT
// The lock directory that `file` and `simple` use (core/strategy_support.cpp): one default per
// user whatever the environment, configured directories that only the caller (and root) can
// write to unless deliberately shared with a group, and what another local user can and cannot
// do to our locks through them.
#define BOOST_TEST_MODULE lock directory
#include <boost/test/unit_test.hpp>

#include <grp.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/file.hpp>
#include <locksmith/strategies/simple.hpp>

#include "local/local_helpers.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using namespace locksmith::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A store of `strategy` built from JSON options, as the config gives them.
std::shared_ptr<store> make_store(const std::string& strategy, const nlohmann::json& options) {
    if (strategy == "file") return make_file_store(file_options::from_json(options));
    return make_simple_store(simple_options::from_json(options));
}

std::shared_ptr<store> make_in(const std::string& strategy, const fs::path& dir,
                               const std::string& group = "") {
    nlohmann::json options{{"lock_dir", dir.string()}};
    if (!group.empty()) options["shared_group"] = group;
    return make_store(strategy, options);
}

// The message of the invalid_argument_error that building the store throws, or "" if none.
std::string refusal(const std::function<std::shared_ptr<store>()>& make) {
    try {
        (void)make();
    } catch (const invalid_argument_error& e) {
        return e.what();
    }
    return {};
}

// A directory under /tmp that other users can enter (0755, root's), removed at the end.
struct public_dir {
    fs::path path = fs::temp_directory_path() / run_unique("locksmith-lockdir");
    public_dir() {
        fs::create_directory(path);
        ::chmod(path.c_str(), 0755);
    }
    ~public_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

const char* const both_strategies[] = {"file", "simple"};

}  // namespace

BOOST_AUTO_TEST_CASE(the_default_does_not_depend_on_the_session) {
    temp_dir runtime("xdg");
    ::setenv("XDG_RUNTIME_DIR", runtime.path().c_str(), 1);
    const fs::path with = default_lock_dir();
    ::unsetenv("XDG_RUNTIME_DIR");
    const fs::path without = default_lock_dir();
    BOOST_TEST(with == without);
    if (::geteuid() == 0) BOOST_TEST(without == fs::path("/run/locksmith"));

    // A holder whose session has XDG_RUNTIME_DIR (a login shell) excludes one that has not
    // (cron).
    byte_pipe held, done;
    const std::string name = run_unique("session");
    pid_t login = fork_child([&] {
        ::setenv("XDG_RUNTIME_DIR", runtime.path().c_str(), 1);
        auto lock = make_lock(make_file_store(), name);
        if (!lock.try_lock()) return 2;
        held.put('h');
        return done.get(20s) ? 0 : 3;
    });
    held.close_write();
    done.close_read();
    BOOST_REQUIRE(held.get(10s));
    auto cron = make_lock(make_file_store(), name);
    BOOST_TEST(!cron.try_lock());
    done.put('d');
    BOOST_TEST(wait_child(login) == 0);
    BOOST_TEST(cron.try_lock());
}

BOOST_AUTO_TEST_CASE(a_default_directory_made_by_someone_else_is_refused_with_the_fix) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    // The other user's default, pre-created by us (root): for that user, "someone else".
    fs::path theirs;
    {
        byte_pipe path_pipe;
        pid_t child = fork_child_as(*user, [&] {
            for (char c : default_lock_dir().string()) path_pipe.put(c);
            return 0;
        });
        path_pipe.close_write();
        while (auto c = path_pipe.get(10s)) theirs += std::string(1, *c);
        BOOST_REQUIRE(wait_child(child) == 0);
    }
    if (fs::exists(theirs)) {
        BOOST_TEST_MESSAGE("skipped: " << theirs << " exists already; not touching it");
        return;
    }
    BOOST_REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);
    std::string message;
    byte_pipe message_pipe;
    pid_t child = fork_child_as(*user, [&] {
        for (char c : refusal([] { return make_file_store(); })) message_pipe.put(c);
        return 0;
    });
    message_pipe.close_write();
    while (auto c = message_pipe.get(10s)) message += *c;
    BOOST_TEST(wait_child(child) == 0);
    fs::remove(theirs);
    BOOST_TEST(contains(message, theirs.string()), message);
    BOOST_TEST(contains(message, "rm -r " + theirs.string()), message);
}

// Issue 23 point 14: the default lock directory is one user's, mode 0700. With shared_group and
// no lock_dir, locksmith made it 2770 and then refused it as made by someone else: a lockout
// until root removed it. Now a config error, and nothing is created.
BOOST_AUTO_TEST_CASE(shared_group_without_lock_dir_is_a_config_error_and_creates_nothing) {
    const struct group* ours = ::getgrgid(::getegid());
    BOOST_REQUIRE(ours != nullptr);
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            try {
                (void)make_store(strategy, {{"shared_group", ours->gr_name}});
                BOOST_ERROR("accepted");
            } catch (const config_error& e) {
                BOOST_TEST(e.pointer() == "/shared_group");
                BOOST_TEST(contains(e.what(), "shared_group needs a lock_dir"), e.what());
            }
        }
    }
    // Options written in code do not pass the reader: open_lock_directory refuses them itself,
    // before it creates anything. As another user, whose default directory may not exist yet
    // (root's, /run/locksmith, exists as soon as any test has used it).
    auto user = another_local_user_or_skip();
    if (!user) return;
    const struct group* theirs = ::getgrgid(user->gid);
    BOOST_REQUIRE(theirs != nullptr);
    file_options options;
    options.shared_group = theirs->gr_name;
    std::string message;
    byte_pipe message_pipe;
    pid_t child = fork_child_as(*user, [&] {
        const fs::path dir = default_lock_dir();
        const bool existed = fs::exists(dir);
        for (char c : refusal([&] { return make_file_store(options); })) message_pipe.put(c);
        if (!existed && fs::exists(dir)) {
            ::rmdir(dir.c_str());  // the lockout, undone for the next tests
            return 2;
        }
        return 0;
    });
    message_pipe.close_write();
    while (auto c = message_pipe.get(10s)) message += *c;
    BOOST_TEST(wait_child(child) == 0, "the default directory was created");
    BOOST_TEST(contains(message, "shared_group needs a lock_dir"), message);
}

BOOST_AUTO_TEST_CASE(a_missing_configured_directory_is_created_private) {
    temp_dir base("create");
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            const auto dir = base.path() / strategy;
            auto s = make_in(strategy, dir);
            struct stat st;
            BOOST_REQUIRE(::lstat(dir.c_str(), &st) == 0);
            BOOST_TEST(S_ISDIR(st.st_mode));
            BOOST_TEST((st.st_mode & 07777) == 0700u);
            BOOST_TEST(make_lock(s, "x").try_lock());
        }
    }
}

BOOST_AUTO_TEST_CASE(a_trailing_slash_does_not_get_past_the_symlink_check) {
    temp_dir base("slash");
    fs::create_directory(base.path() / "real");
    fs::permissions(base.path() / "real", fs::perms::owner_all, fs::perm_options::replace);
    fs::create_directory_symlink(base.path() / "real", base.path() / "link");
    for (const char* strategy : both_strategies)
        for (const std::string suffix : {"", "/", "//"}) {
            BOOST_TEST_CONTEXT(strategy << " link" << suffix) {
                auto why = refusal(
                    [&] { return make_in(strategy, (base.path() / "link").string() + suffix); });
                BOOST_TEST(contains(why, "symbolic link"), why);
            }
        }
}

BOOST_AUTO_TEST_CASE(a_directory_others_can_write_to_is_refused_unless_shared) {
    temp_dir base("modes");
    const auto group = base.path() / "group";
    fs::create_directory(group);
    ::chmod(group.c_str(), 0770);
    const auto sticky = base.path() / "sticky";
    fs::create_directory(sticky);
    ::chmod(sticky.c_str(), 01777);
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            auto why = refusal([&] { return make_in(strategy, group); });
            BOOST_TEST(contains(why, "writable by group"), why);
            BOOST_TEST(contains(why, "shared_group"), why);
            why = refusal([&] { return make_in(strategy, sticky); });
            BOOST_TEST(contains(why, "writable by everyone"), why);
        }
    }
    // Deliberately shared with its group: accepted.
    const struct group* gr = ::getgrgid(::getegid());
    BOOST_REQUIRE(gr != nullptr);
    BOOST_TEST(refusal([&] { return make_in("file", group, gr->gr_name); }).empty());
    BOOST_TEST(contains(refusal([&] { return make_in("file", group, "no-such-group-x"); }),
                        "no such group"));
}

BOOST_AUTO_TEST_CASE(a_parent_that_others_can_write_to_is_refused) {
    temp_dir base("parent");
    const auto open = base.path() / "open";
    fs::create_directory(open);
    ::chmod(open.c_str(), 0777);  // no sticky bit: anyone could rename our directory away
    fs::create_directory(open / "locks");
    ::chmod((open / "locks").c_str(), 0700);
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            auto why = refusal([&] { return make_in(strategy, open / "locks"); });
            BOOST_TEST(contains(why, open.string()), why);
            why = refusal([&] { return make_in(strategy, open / "new"); });
            BOOST_TEST(contains(why, open.string()), why);
            BOOST_TEST(!fs::exists(open / "new"));
        }
    }
}

BOOST_AUTO_TEST_CASE(a_directory_made_by_another_user_is_refused_for_root) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    public_dir base;
    const auto sticky = base.path / "sticky";
    fs::create_directory(sticky);
    ::chmod(sticky.c_str(), 01777);
    const auto theirs = sticky / "theirs";
    pid_t child = fork_child_as(*user, [&] { return ::mkdir(theirs.c_str(), 0700) == 0 ? 0 : 2; });
    BOOST_REQUIRE(wait_child(child) == 0);
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            auto why = refusal([&] { return make_in(strategy, theirs); });
            BOOST_TEST(contains(why, "owned by uid " + std::to_string(user->uid)), why);
        }
    }
    // And under a parent they own, even a directory of ours: they could rename it away.
    const auto their_parent = sticky / "parent";
    child = fork_child_as(*user, [&] { return ::mkdir(their_parent.c_str(), 0755) == 0 ? 0 : 2; });
    BOOST_REQUIRE(wait_child(child) == 0);
    BOOST_REQUIRE(::mkdir((their_parent / "ours").c_str(), 0700) == 0);
    auto why = refusal([&] { return make_in("file", their_parent / "ours"); });
    BOOST_TEST(contains(why, their_parent.string()), why);
}

BOOST_AUTO_TEST_CASE(another_user_cannot_remove_or_replace_our_lock_files) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    public_dir base;
    const auto configured = base.path / "locks";
    for (const char* strategy : both_strategies)
        for (bool is_default : {true, false}) {
            BOOST_TEST_CONTEXT(strategy << (is_default ? " default" : " configured")) {
                auto s = is_default ? make_store(strategy, nlohmann::json::object())
                                    : make_in(strategy, configured);
                const fs::path dir = is_default ? default_lock_dir() : configured;
                const std::string name = run_unique("ours");
                auto holder = make_lock(s, name);
                BOOST_REQUIRE(holder.try_lock());
                const fs::path file =
                    dir /
                    lock_file_name(name, std::string(strategy) == "file" ? ".lock" : ".slock");
                BOOST_REQUIRE(fs::exists(file));
                pid_t child = fork_child_as(*user, [&] {
                    int failures = 0;
                    failures += ::unlink(file.c_str()) == 0;
                    failures += ::rename(file.c_str(), (base.path / "moved").c_str()) == 0;
                    failures += ::open(file.c_str(), O_RDONLY) >= 0;
                    failures += ::open((dir / "planted").c_str(), O_CREAT | O_WRONLY, 0666) >= 0;
                    failures += ::rename(dir.c_str(), (base.path / "moved-dir").c_str()) == 0;
                    // Using the directory as theirs is refused too.
                    failures += refusal([&] { return make_in(strategy, dir); }).empty();
                    return failures;
                });
                BOOST_TEST(wait_child(child) == 0);
                BOOST_TEST(fs::exists(file));
                BOOST_TEST(!make_lock(s, name).try_lock());  // still one holder
                holder.unlock();
            }
        }
}

BOOST_AUTO_TEST_CASE(a_shared_directory_lets_its_group_share_locks_and_nobody_else) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    const struct group* gr = ::getgrgid(user->gid);
    BOOST_REQUIRE(gr != nullptr);
    const std::string group = gr->gr_name;
    public_dir base;
    const auto shared = base.path / "shared";
    const mode_t old_umask = ::umask(077);  // the modes below must not depend on it
    for (const char* strategy : both_strategies) {
        BOOST_TEST_CONTEXT(strategy) {
            auto s = make_in(strategy, shared, group);
            struct stat st;
            BOOST_REQUIRE(::stat(shared.c_str(), &st) == 0);
            BOOST_TEST((st.st_mode & 07777) == 02770u);
            BOOST_TEST(st.st_gid == user->gid);
            const std::string name = run_unique("shared");
            const fs::path file =
                shared / lock_file_name(name, std::string(strategy) == "file" ? ".lock" : ".slock");

            // The group's user is excluded while we hold, then holds and releases in its turn.
            // (Forked before we lock: a child would share our open file and its flock.)
            byte_pipe step, answer;
            pid_t child = fork_child_as(*user, [&] {
                auto theirs = make_lock(make_in(strategy, shared, group), name);
                if (!step.get(20s)) return 2;
                answer.put(theirs.try_lock() ? 'H' : 'f');
                if (!step.get(20s)) return 3;
                if (!theirs.try_lock()) return 4;
                answer.put('H');
                if (!step.get(20s)) return 5;
                theirs.release();
                answer.put('r');
                return 0;
            });
            step.close_read();
            answer.close_write();
            auto ours = make_lock(s, name);
            BOOST_REQUIRE(ours.try_lock());
            BOOST_REQUIRE(::stat(file.c_str(), &st) == 0);
            BOOST_TEST((st.st_mode & 0777) == 0660u);
            BOOST_TEST(st.st_gid == user->gid);
            step.put('s');
            BOOST_TEST(answer.get(10s).value_or('-') == 'f');
            ours.unlock();
            step.put('s');
            BOOST_TEST(answer.get(10s).value_or('-') == 'H');
            BOOST_TEST(!ours.try_lock());
            step.put('s');
            BOOST_TEST(answer.get(10s).value_or('-') == 'r');
            BOOST_TEST(wait_child(child) == 0);
            BOOST_TEST(ours.try_lock());
            ours.unlock();

            // A user outside the group can neither plant a file nor use the directory.
            local_user outsider{1, 1};  // daemon
            child = fork_child_as(outsider, [&] {
                if (::open((shared / "planted").c_str(), O_CREAT | O_WRONLY, 0666) >= 0) return 2;
                return refusal([&] { return make_in(strategy, shared, group); }).empty() ? 3 : 0;
            });
            BOOST_TEST(wait_child(child) == 0);
        }
    }
    ::umask(old_umask);
}
