// SPDX-License-Identifier: MIT
// config::discover (issue 12 item 7): library users find the configuration as the command does —
// LOCKSMITH_CONFIG, then ~/.config/locksmith/config.json (~ from the passwd entry), then
// /etc/locksmith/config.json, then the built-in defaults — with the command's rules: a named
// file must exist, a default location is used only when present, and one that cannot be checked
// or that another user could change is an error, not "absent".
#define BOOST_TEST_MODULE config_discovery
#include <boost/test/unit_test.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>

#include "support/child_process.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using locksmith::test::contains;
using locksmith::test::scoped_env;
namespace fs = std::filesystem;

namespace {

// A private directory with two candidate locations, "first" and "second", neither present yet.
struct places {
    fs::path dir;
    fs::path first, second;
    scoped_env no_env{"LOCKSMITH_CONFIG", std::nullopt};
    scoped_env no_xdg{"XDG_CONFIG_HOME", std::nullopt};
    places() {
        std::string pattern = (fs::temp_directory_path() / "locksmith-discover-XXXXXX").string();
        BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        dir = pattern;
        first = dir / "xdg" / "locksmith" / "config.json";
        second = dir / "etc" / "locksmith" / "config.json";
    }
    ~places() {
        std::error_code ec;
        fs::permissions(dir / "locked", fs::perms::owner_all, ec);
        fs::remove_all(dir, ec);
    }
    static void write(const fs::path& path, const std::string& text) {
        fs::create_directories(path.parent_path());
        std::ofstream(path) << text;
    }
    std::vector<fs::path> both() const { return {first, second}; }
};

std::chrono::milliseconds ttl_of(const config& c) {
    return c.default_ttl;
}

struct caught {
    bool thrown = false;
    std::string id;
    std::string message;
};

template <class F>
caught config_error_of(F&& f) {
    caught c;
    try {
        f();
    } catch (const config_error& e) {
        c.thrown = true;
        c.id = e.id();
        c.message = e.what();
    }
    return c;
}

}  // namespace

// Issue 23 point 5: a systemd service (no HOME), a cron job or shell (HOME set) and `sudo -E`
// (the invoking user's HOME) of one user must read one config, or they lock in different
// places. The user's location comes from its passwd entry, whatever HOME and XDG_CONFIG_HOME say.
BOOST_AUTO_TEST_CASE(default_locations_come_from_the_passwd_entry) {
    const passwd* pw = ::getpwuid(::geteuid());
    BOOST_REQUIRE(pw != nullptr);
    const std::vector<fs::path> expected{fs::path(pw->pw_dir) / ".config/locksmith/config.json",
                                         "/etc/locksmith/config.json"};
    for (const auto& home : {std::optional<std::string>("/home/u"), std::optional<std::string>()})
        for (const auto& xdg :
             {std::optional<std::string>("/x/conf"), std::optional<std::string>("relative/conf"),
              std::optional<std::string>()}) {
            scoped_env h("HOME", home);
            scoped_env x("XDG_CONFIG_HOME", xdg);
            BOOST_TEST(config::default_locations() == expected, "HOME " << home.value_or("unset")
                                                                        << ", XDG_CONFIG_HOME "
                                                                        << xdg.value_or("unset"));
        }
}

// ...so a config in $XDG_CONFIG_HOME would be seen by the shell that has the variable and not
// by the service that lacks it. Where it is not one of the locations, it is an error, not
// ignored; XDG_CONFIG_HOME without a config of this user's in it changes nothing.
BOOST_AUTO_TEST_CASE(a_config_in_xdg_config_home_is_an_error_not_ignored) {
    places p;
    places::write(p.first, R"({"defaults": {"ttl_s": 1}})");  // <dir>/xdg/locksmith/config.json
    places::write(p.second, R"({"defaults": {"ttl_s": 2}})");
    scoped_env xdg("XDG_CONFIG_HOME", (p.dir / "xdg").string());
    auto e = config_error_of([&] { (void)config::discover({p.second}); });
    BOOST_TEST(e.thrown);
    BOOST_TEST(e.id == "config.xdg");
    BOOST_TEST(contains(e.message, p.first.string() + " ($XDG_CONFIG_HOME) is not read"),
               e.message);
    BOOST_TEST(contains(e.message, "/.config/locksmith/config.json"), e.message);
    // The same file as a location (XDG_CONFIG_HOME=~/.config, or a link): used.
    BOOST_TEST(ttl_of(config::discover(p.both())).count() == 1000);
    fs::create_directories(p.dir / "home");
    fs::create_symlink(p.first, p.dir / "home" / "config.json");
    BOOST_TEST(ttl_of(config::discover({p.dir / "home" / "config.json"})).count() == 1000);
    // LOCKSMITH_CONFIG decides before any location.
    {
        scoped_env named("LOCKSMITH_CONFIG", p.second.string());
        BOOST_TEST(ttl_of(config::discover({})).count() == 2000);
    }
    // Nothing there: nothing to say.
    {
        scoped_env elsewhere("XDG_CONFIG_HOME", (p.dir / "empty").string());
        BOOST_TEST(config::discover({p.second}).origin == "file " + p.second.string());
    }
    // Another user's (root after `sudo -E`, with the invoking user's XDG_CONFIG_HOME): not this
    // user's config, and not read either.
    auto other = locksmith::test::another_local_user_or_skip();
    if (!other) return;
    BOOST_REQUIRE(::chown(p.first.c_str(), other->uid, other->gid) == 0);
    BOOST_TEST(config::discover({p.second}).origin == "file " + p.second.string());
}

// Issue 23 point 6: a config decides where root's locks are kept (and which plugins it loads),
// so one that another user can change is refused, wherever it comes from — the rule plugins
// obey: the file, every folder and symlink on its path owned by the caller or root, none
// writable by group or others (but root's sticky /tmp above the file's own folder).
BOOST_AUTO_TEST_CASE(a_config_file_others_can_change_is_refused) {
    places p;
    const fs::path file = p.dir / "conf" / "config.json";
    places::write(file, R"({"defaults": {"ttl_s": 3}})");
    auto refused = [&](const fs::path& path, const std::string& why) {
        for (int source = 0; source < 3; ++source) {
            auto e = config_error_of([&] {
                if (source == 0) (void)config::load_file(path);  // as --config
                if (source == 1) {
                    scoped_env named("LOCKSMITH_CONFIG", path.string());
                    (void)config::discover({});
                }
                if (source == 2) (void)config::discover({path});  // a default location
            });
            BOOST_TEST(e.thrown, path << " from source " << source);
            BOOST_TEST(e.id == "config.unsafe", e.message);
            BOOST_TEST(contains(e.message, path.string()), e.message);
            BOOST_TEST(contains(e.message, why), e.message);
        }
    };
    BOOST_TEST(ttl_of(config::load_file(file)).count() == 3000);

    fs::permissions(file, fs::perms::others_write, fs::perm_options::add);
    refused(file, file.string() + " is writable by group or others (mode 0646)");
    fs::permissions(file, fs::perms::others_write, fs::perm_options::remove);

    // Its folder, and a folder above that (not sticky).
    fs::permissions(file.parent_path(), fs::perms::all, fs::perm_options::replace);
    refused(file, file.parent_path().string() + " is writable by group or others (mode 0777)");
    fs::permissions(file.parent_path(), fs::perms::owner_all, fs::perm_options::replace);
    const fs::path deeper = p.dir / "open" / "private" / "config.json";
    places::write(deeper, "{}");
    fs::permissions(p.dir / "open", fs::perms::all, fs::perm_options::replace);
    refused(deeper, (p.dir / "open").string() + " is writable by group or others (mode 0777)");

    // Directly in a sticky folder every user can write to, as /tmp: sticky lets another user
    // plant a file of that name before ours exists (only a folder above the file's own may be).
    const fs::path in_sticky = p.dir / "sticky" / "config.json";
    places::write(in_sticky, "{}");
    fs::permissions(in_sticky.parent_path(), fs::perms::all | fs::perms::sticky_bit,
                    fs::perm_options::replace);
    refused(in_sticky,
            in_sticky.parent_path().string() + " is writable by group or others (mode 1777)");

    // A symlink planted in a folder others can write, to a config that is safe itself: checked
    // as written, not only where it leads.
    fs::create_symlink(file, p.dir / "open" / "planted.json");
    refused(p.dir / "open" / "planted.json",
            (p.dir / "open").string() + " is writable by group or others");
    BOOST_TEST(ttl_of(config::load_file(file)).count() == 3000);

    // Another user's file (a config reached through an inherited HOME or LOCKSMITH_CONFIG after
    // `sudo -E`), and another user's folder.
    auto other = locksmith::test::another_local_user_or_skip();
    if (!other) return;
    BOOST_REQUIRE(::chown(file.c_str(), other->uid, other->gid) == 0);
    refused(file, file.string() + " is owned by uid " + std::to_string(other->uid));
    BOOST_REQUIRE(::chown(file.c_str(), 0, 0) == 0);
    BOOST_REQUIRE(::chown(file.parent_path().c_str(), other->uid, other->gid) == 0);
    refused(file, file.parent_path().string() + " is owned by uid " + std::to_string(other->uid));
    BOOST_REQUIRE(::chown(file.parent_path().c_str(), 0, 0) == 0);
    // A symlink of another user's, even in a folder of the caller's.
    const fs::path theirs = p.dir / "theirs.json";
    fs::create_symlink(file, theirs);
    BOOST_REQUIRE(::lchown(theirs.c_str(), other->uid, other->gid) == 0);
    refused(theirs, theirs.string() + " is owned by uid " + std::to_string(other->uid));
    BOOST_TEST(ttl_of(config::load_file(file)).count() == 3000);
}

BOOST_AUTO_TEST_CASE(order_first_present_location_wins) {
    places p;
    BOOST_TEST(config::discover(p.both()).origin == "built-in defaults");
    places::write(p.second, R"({"defaults": {"ttl_s": 2}})");
    auto c = config::discover(p.both());
    BOOST_TEST(ttl_of(c).count() == 2000);
    BOOST_TEST(c.origin == "file " + p.second.string());
    places::write(p.first, R"({"defaults": {"ttl_s": 1}})");
    BOOST_TEST(ttl_of(config::discover(p.both())).count() == 1000);
}

BOOST_AUTO_TEST_CASE(locksmith_config_comes_before_the_locations) {
    places p;
    places::write(p.first, R"({"defaults": {"ttl_s": 1}})");
    auto named = p.dir / "named.json";
    places::write(named, R"({"defaults": {"ttl_s": 3}})");
    {
        scoped_env e("LOCKSMITH_CONFIG", named.string());
        auto c = config::discover(p.both());
        BOOST_TEST(ttl_of(c).count() == 3000);
        BOOST_TEST(c.origin == "file " + named.string() + " (LOCKSMITH_CONFIG)");
    }
    {
        // The command and the library agree on what starts a document: any blank, \r included.
        scoped_env e("LOCKSMITH_CONFIG", std::string("\r\n\t {\"defaults\": {\"ttl_s\": 4}}"));
        auto c = config::discover(p.both());
        BOOST_TEST(ttl_of(c).count() == 4000);
        BOOST_TEST(c.origin == "LOCKSMITH_CONFIG");
    }
    {
        // Empty is unset.
        scoped_env e("LOCKSMITH_CONFIG", std::string());
        BOOST_TEST(ttl_of(config::discover(p.both())).count() == 1000);
    }
}

BOOST_AUTO_TEST_CASE(a_named_file_must_exist_a_location_need_not) {
    places p;
    {
        scoped_env e("LOCKSMITH_CONFIG", (p.dir / "gone.json").string());
        auto c = config_error_of([&] { (void)config::discover(p.both()); });
        BOOST_TEST(c.thrown);
        BOOST_TEST(c.id == "config.io");
        BOOST_TEST(contains(c.message, "gone.json"), c.message);
    }
    // A location under a regular file (ENOTDIR) is absent too.
    places::write(p.dir / "plain", "x");
    BOOST_TEST(config::discover({p.dir / "plain" / "config.json"}).origin == "built-in defaults");
}

BOOST_AUTO_TEST_CASE(a_present_but_broken_location_is_an_error_not_skipped) {
    places p;
    places::write(p.second, R"({"defaults": {"ttl_s": 2}})");
    // Invalid content in the first location: its error, not the second file.
    places::write(p.first, R"({"defaults": {"ttl_s": 0}})");
    auto bad = config_error_of([&] { (void)config::discover(p.both()); });
    BOOST_TEST(bad.thrown);
    BOOST_TEST(contains(bad.message, p.first.string()), bad.message);
    // A directory where the file should be.
    fs::remove(p.first);
    fs::create_directory(p.first);
    auto dir = config_error_of([&] { (void)config::discover(p.both()); });
    BOOST_TEST(dir.id == "config.io");
    BOOST_TEST(contains(dir.message, "directory"), dir.message);
    // A FIFO: refused at once, never waited on.
    fs::remove(p.first);
    BOOST_REQUIRE(::mkfifo(p.first.c_str(), 0600) == 0);
    auto fifo = config_error_of([&] { (void)config::discover(p.both()); });
    BOOST_TEST(fifo.id == "config.io");
    BOOST_TEST(contains(fifo.message, "not a regular file"), fifo.message);
    // A pipe through a /proc link (`--config <(...)`), which names no path to check: said as
    // what it is, not "does not exist".
    int fds[2];
    BOOST_REQUIRE(::pipe(fds) == 0);
    const std::string through_proc = "/proc/self/fd/" + std::to_string(fds[0]);
    auto piped = config_error_of([&] { (void)config::discover({through_proc}); });
    ::close(fds[0]);
    ::close(fds[1]);
    BOOST_TEST(piped.id == "config.io");
    BOOST_TEST(contains(piped.message, "not a regular file"), piped.message);
}

// One this user cannot search may hold the config everyone else uses: taking the built-in
// defaults instead would pick another strategy for the same names.
BOOST_AUTO_TEST_CASE(a_location_that_cannot_be_checked_is_an_error) {
    places p;
    const fs::path hidden = p.dir / "locked" / "locksmith" / "config.json";
    places::write(hidden, "{}");
    places::write(p.second, "{}");
    fs::permissions(p.dir / "locked", fs::perms::owner_all, fs::perm_options::replace);
    fs::permissions(p.dir, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec,
                    fs::perm_options::replace);
    std::string why;
    auto result = locksmith::test::run_unprivileged(
        [&] {
            try {
                (void)config::discover({hidden, p.second});
                return 2;  // took the second location, or the defaults
            } catch (const config_error& e) {
                const std::string message = e.what();
                return e.id() == "config.io" && contains(message, hidden.string()) &&
                               contains(message, "ermission denied")
                           ? 0
                           : 3;
            }
        },
        &why);
    if (!result) {
        locksmith::test::skip_case(why);
        return;
    }
    BOOST_TEST(*result == 0);
}

// The library's default constructor uses the same discovery.
BOOST_AUTO_TEST_CASE(lock_factory_default_constructor_discovers) {
    places p;
    places::write(p.first, R"({"defaults": {"ttl_s": 5}})");
    scoped_env named("LOCKSMITH_CONFIG", p.first.string());
    lock_factory factory;
    BOOST_TEST(factory.settings().default_ttl.count() == 5000);
    BOOST_TEST(factory.settings().origin == "file " + p.first.string() + " (LOCKSMITH_CONFIG)");
}
