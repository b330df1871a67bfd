// config::discover (issue 12 item 7): library users find the configuration as the command does —
// LOCKSMITH_CONFIG, then $XDG_CONFIG_HOME/locksmith/config.json (~/.config/...), then
// /etc/locksmith/config.json, then the built-in defaults — with the command's rules: a named
// file must exist, a default location is used only when present, and one that cannot be checked
// is an error, not "absent".
#define BOOST_TEST_MODULE config_discovery
#include <boost/test/unit_test.hpp>

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

using namespace locksmith;
using locksmith::test::scoped_env;
namespace fs = std::filesystem;

namespace {

// A private directory with two candidate locations, "first" and "second", neither present yet.
struct places {
    fs::path dir;
    fs::path first, second;
    scoped_env no_env{"LOCKSMITH_CONFIG", std::nullopt};
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

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(default_locations_follow_xdg) {
    {
        scoped_env xdg("XDG_CONFIG_HOME", std::string("/x/conf"));
        scoped_env home("HOME", std::string("/home/u"));
        BOOST_TEST(
            config::default_locations() ==
            (std::vector<fs::path>{"/x/conf/locksmith/config.json", "/etc/locksmith/config.json"}));
    }
    {
        // The XDG spec: a relative XDG_CONFIG_HOME is invalid and ignored.
        scoped_env xdg("XDG_CONFIG_HOME", std::string("relative/conf"));
        scoped_env home("HOME", std::string("/home/u"));
        BOOST_TEST(config::default_locations() ==
                   (std::vector<fs::path>{"/home/u/.config/locksmith/config.json",
                                          "/etc/locksmith/config.json"}));
    }
    {
        scoped_env xdg("XDG_CONFIG_HOME", std::nullopt);
        scoped_env home("HOME", std::nullopt);
        BOOST_TEST(config::default_locations() ==
                   (std::vector<fs::path>{"/etc/locksmith/config.json"}));
    }
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
    places::write(p.dir / "xdg" / "locksmith" / "config.json", R"({"defaults": {"ttl_s": 5}})");
    scoped_env xdg("XDG_CONFIG_HOME", (p.dir / "xdg").string());
    lock_factory factory;
    BOOST_TEST(factory.settings().default_ttl.count() == 5000);
    BOOST_TEST(factory.settings().origin ==
               "file " + (p.dir / "xdg" / "locksmith" / "config.json").string());
}
