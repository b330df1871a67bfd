// SPDX-License-Identifier: MIT
// The config's `plugins`: loading, refusing (API version, C++ ABI, unsafe files, taken names,
// failing registration), and what the command shows of them.
#define BOOST_TEST_MODULE plugin_loader
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <locksmith/author/module.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>

#include "support/child_process.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace locksmith;
using locksmith::test::contains;

namespace {

// A private folder (0700, under /tmp) with copies of the probe plugins: the build tree's
// folders may be writable by a group, which the loader rightly refuses.
struct plugin_folder {
    fs::path dir;
    plugin_folder() {
        std::string tmpl = (fs::temp_directory_path() / "locksmith-plugin-test-XXXXXX").string();
        BOOST_REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
        for (const auto& e : fs::directory_iterator(test::build_path("tests/plugin/plugins")))
            fs::copy_file(e.path(), dir / e.path().filename());
        ::setenv("LOCKSMITH_TEST_PLUGIN_MARK", mark().c_str(), 1);
        ::setenv("LOCKSMITH_TEST_PLUGIN_LOADED_MARK", (dir / "loaded").c_str(), 1);
    }
    ~plugin_folder() {
        ::unsetenv("LOCKSMITH_TEST_PLUGIN_MARK");
        ::unsetenv("LOCKSMITH_TEST_PLUGIN_LOADED_MARK");
        std::error_code ec;
        fs::permissions(dir, fs::perms::owner_all, ec);
        fs::remove_all(dir, ec);
    }
    fs::path plugin(const std::string& variant) const {
        return dir / ("libprobe_plugin_" + variant + ".so");
    }
    fs::path mark() const { return dir / "registration-ran"; }
    bool registration_ran() const { return fs::exists(mark()); }
    // Whether dlopen loaded it (its constructor ran).
    bool loaded() const { return fs::exists(dir / "loaded"); }
};

config with_plugins(const std::string& plugins_json, const std::string& more = "") {
    return config::parse("{\"plugins\": " + plugins_json + more + "}", "test config");
}

std::string quoted(const fs::path& p) {
    return "\"" + p.string() + "\"";
}

// The config_error a factory on a fresh registry (built-ins included) throws for `cfg`.
config_error factory_error(const config& cfg) {
    strategy_registry registry;
    register_builtin_strategies(registry);
    try {
        lock_factory factory(cfg, registry);
    } catch (const config_error& e) {
        return e;
    }
    BOOST_FAIL("the factory accepted the config");
    throw;  // unreachable
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plugins)

BOOST_AUTO_TEST_CASE(a_plugin_for_another_api_version_is_refused_before_any_of_it_runs) {
    plugin_folder f;
    auto e = factory_error(with_plugins("[" + quoted(f.plugin("api999")) + "]"));
    const std::string m = e.what();
    BOOST_TEST(e.pointer() == "/plugins/0");
    BOOST_TEST(contains(m, "test config: /plugins/0: plugin " + f.plugin("api999").string()), m);
    BOOST_TEST(contains(m, "plugin API 999"), m);
    BOOST_TEST(contains(m, "loads plugin API " + std::to_string(LOCKSMITH_PLUGIN_API_VERSION)), m);
    BOOST_TEST(!f.registration_ran());
}

// The API changes in both directions: a plugin built against an older locksmith may lack what
// this one calls.
BOOST_AUTO_TEST_CASE(a_plugin_for_an_older_api_version_is_refused_before_any_of_it_runs) {
    plugin_folder f;
    auto e = factory_error(with_plugins("[" + quoted(f.plugin("older")) + "]"));
    const std::string m = e.what();
    BOOST_TEST(e.pointer() == "/plugins/0");
    BOOST_TEST(contains(m, "plugin API " + std::to_string(PROBE_OLDER_API) + ", but"), m);
    BOOST_TEST(contains(m, "rebuild the plugin against this locksmith"), m);
    BOOST_TEST(!f.registration_ran());
}

BOOST_AUTO_TEST_CASE(a_plugin_built_with_another_cxx_abi_is_refused_before_any_of_it_runs) {
    plugin_folder f;
    auto e = factory_error(with_plugins("[" + quoted(f.plugin("oldabi")) + "]"));
    const std::string m = e.what();
    BOOST_TEST(contains(m, f.plugin("oldabi").string()), m);
    BOOST_TEST(contains(m, "another C++ ABI"), m);
    BOOST_TEST(contains(m, "libstdc++ with the old std::string ABI"), m);
    BOOST_TEST(contains(m, "libstdc++ with the C++11 ABI"), m);
    BOOST_TEST(!f.registration_ran());
}

BOOST_AUTO_TEST_CASE(a_plugins_strategy_is_selected_and_configured_like_a_built_in_one) {
    plugin_folder f;
    strategy_registry registry;
    register_builtin_strategies(registry);
    auto cfg = with_plugins("[" + quoted(f.plugin("ok")) + "]",
                            R"(, "strategies": {"plugin_probe": {"priority": 100}})");
    lock_factory factory(cfg, registry);
    BOOST_TEST(f.registration_ran());
    auto info = registry.info("plugin_probe");
    BOOST_TEST(info.effective_priority == 100);
    BOOST_TEST(info.descriptor.origin ==
               "plugin " + fs::canonical(f.plugin("ok")).string() + " (probe 0.0.1)");
    lock_request in_process;
    BOOST_TEST(factory.explain(capability::exclusive).chosen()->strategy == "plugin_probe");
    auto lock = factory.create_lock("plugin-test", capability::exclusive);
    BOOST_TEST(lock.try_lock());
    lock.release();

    // A second factory on the same registry: the plugin is there already, no duplicate.
    lock_factory again(cfg, registry);
    BOOST_TEST(registry.contains("plugin_probe"));
}

BOOST_AUTO_TEST_CASE(a_plugins_options_are_checked_by_the_plugin) {
    plugin_folder f;
    auto e = factory_error(
        with_plugins("[" + quoted(f.plugin("ok")) + "]",
                     R"(, "strategies": {"plugin_probe": {"options": {"bogus": 1}}})"));
    BOOST_TEST(e.pointer() == "/strategies/plugin_probe/options/bogus", e.what());
}

BOOST_AUTO_TEST_CASE(a_plugin_that_registers_a_taken_name_is_refused_whole) {
    plugin_folder f;
    auto e = factory_error(
        with_plugins("[" + quoted(f.plugin("ok")) + ", " + quoted(f.plugin("duplicate")) + "]"));
    const std::string m = e.what();
    BOOST_TEST(e.pointer() == "/plugins/1");
    BOOST_TEST(contains(m, f.plugin("duplicate").string()), m);
    BOOST_TEST(contains(m, "registers strategy 'file', which is already registered (built in)"), m);
}

BOOST_AUTO_TEST_CASE(a_failing_registration_is_a_config_error_with_its_reason) {
    plugin_folder f;
    auto e = factory_error(with_plugins("[" + quoted(f.plugin("throws")) + "]"));
    BOOST_TEST(contains(e.what(), "failed to register its strategies: the probe plugin refuses"),
               e.what());
}

BOOST_AUTO_TEST_CASE(a_missing_plugin_names_the_entry_and_the_file) {
    plugin_folder f;
    auto e = factory_error(with_plugins("[\"/nonexistent/libx.so\"]"));
    BOOST_TEST(contains(e.what(), "/plugins/0: plugin /nonexistent/libx.so does not exist"),
               e.what());
    // A bare name is a file in the module folder.
    ::setenv("LOCKSMITH_MODULE_DIR", f.dir.c_str(), 1);
    auto ok = with_plugins(R"(["libprobe_plugin_ok.so"])");
    strategy_registry registry;
    BOOST_CHECK_NO_THROW(lock_factory(ok, registry));
    auto missing = factory_error(with_plugins(R"(["libnone.so"])"));
    ::unsetenv("LOCKSMITH_MODULE_DIR");
    BOOST_TEST(registry.contains("plugin_probe"));
    BOOST_TEST(contains(missing.what(), "plugin 'libnone.so' (" + (f.dir / "libnone.so").string() +
                                            ") does not exist"),
               missing.what());
}

BOOST_AUTO_TEST_CASE(a_plugin_others_can_write_or_replace_is_refused) {
    plugin_folder f;
    const auto plugin = f.plugin("ok");
    const auto cfg = with_plugins("[" + quoted(plugin) + "]");
    fs::permissions(plugin, fs::perms::group_write, fs::perm_options::add);
    BOOST_TEST(
        contains(factory_error(cfg).what(), plugin.string() + " is writable by group or others"));
    fs::permissions(plugin, fs::perms::group_write, fs::perm_options::remove);
    fs::permissions(f.dir, fs::perms::others_write, fs::perm_options::add);
    BOOST_TEST(contains(factory_error(cfg).what(),
                        f.dir.string() + " is writable by group or others (mode 0702)"));
    fs::permissions(f.dir, fs::perms::others_write, fs::perm_options::remove);
    BOOST_TEST(!f.registration_ran());

    auto other = test::another_local_user_or_skip();  // also needs root, to chown
    if (!other) return;
    BOOST_REQUIRE(::chown(plugin.c_str(), other->uid, other->gid) == 0);
    BOOST_TEST(contains(factory_error(cfg).what(),
                        plugin.string() + " is owned by uid " + std::to_string(other->uid)));
    BOOST_TEST(!f.registration_ran());
}

// Issue 23 point 11: a symlink planted in a folder others can write names whatever library its
// planter likes, one the resolved path's checks accept; dlopen runs its constructors. Every
// component of the path as written is checked, before dlopen.
BOOST_AUTO_TEST_CASE(a_plugin_behind_a_symlink_in_a_folder_others_can_write_is_never_loaded) {
    plugin_folder f;
    const fs::path open = f.dir / "open";
    fs::create_directory(open);
    fs::permissions(open, fs::perms::all, fs::perm_options::replace);  // 0777, not sticky
    const fs::path planted = open / "libplanted.so";
    fs::create_symlink(f.plugin("ok"), planted);  // a safe file in a safe folder
    auto e = factory_error(with_plugins("[" + quoted(planted) + "]"));
    BOOST_TEST(
        contains(e.what(), "plugin " + planted.string() + " is not safe to load: " + open.string() +
                               " is writable by group or others (mode 0777)"),
        e.what());
    BOOST_TEST(!f.loaded());
    BOOST_TEST(!f.registration_ran());

    // The same through a folder symlink: <safe>/via -> open, the plugin under it.
    fs::remove(planted);
    fs::copy_file(f.plugin("ok"), open / "libprobe.so");
    fs::create_symlink(open, f.dir / "via");
    e = factory_error(with_plugins("[" + quoted(f.dir / "via" / "libprobe.so") + "]"));
    BOOST_TEST(contains(e.what(), open.string() + " is writable by group or others"), e.what());
    BOOST_TEST(!f.loaded());

    // A symlink of another user's, in a folder of the caller's.
    auto other = test::another_local_user_or_skip();  // also needs root, to lchown
    if (!other) return;
    const fs::path theirs = f.dir / "libtheirs.so";
    fs::create_symlink(f.plugin("ok"), theirs);
    BOOST_REQUIRE(::lchown(theirs.c_str(), other->uid, other->gid) == 0);
    e = factory_error(with_plugins("[" + quoted(theirs) + "]"));
    BOOST_TEST(
        contains(e.what(), theirs.string() + " is owned by uid " + std::to_string(other->uid)),
        e.what());
    BOOST_TEST(!f.loaded());
}

// Whoever can write to any folder on the way can rename the plugin's folder away and put
// another in its place, not only whoever can write to the plugin's own folder.
BOOST_AUTO_TEST_CASE(folders_above_a_plugins_own_folder_are_checked) {
    plugin_folder f;
    const fs::path above = f.dir / "above";
    const fs::path own = above / "own";
    fs::create_directories(own);
    fs::permissions(own, fs::perms::owner_all, fs::perm_options::replace);
    fs::copy_file(f.plugin("ok"), own / "libprobe.so");
    const auto cfg = with_plugins("[" + quoted(own / "libprobe.so") + "]");
    fs::permissions(above, fs::perms::owner_all | fs::perms::others_all, fs::perm_options::replace);
    BOOST_TEST(contains(factory_error(cfg).what(),
                        above.string() + " is writable by group or others (mode 0707)"));
    BOOST_TEST(!f.loaded());
    BOOST_TEST(!f.registration_ran());

    auto other = test::another_local_user_or_skip();  // also needs root, to chown
    if (!other) return;
    fs::permissions(above, fs::perms::owner_all, fs::perm_options::replace);
    BOOST_REQUIRE(::chown(above.c_str(), other->uid, other->gid) == 0);
    BOOST_TEST(contains(factory_error(cfg).what(),
                        above.string() + " is owned by uid " + std::to_string(other->uid)));
    BOOST_TEST(!f.loaded());
    // Root's sticky folder above (as /tmp) is the one exception: others cannot rename what is
    // not theirs in it.
    BOOST_REQUIRE(::chown(above.c_str(), 0, 0) == 0);
    fs::permissions(above, fs::perms::all | fs::perms::sticky_bit, fs::perm_options::replace);
    strategy_registry registry;
    BOOST_CHECK_NO_THROW(lock_factory(cfg, registry));
    BOOST_TEST(registry.contains("plugin_probe"));
}

#ifdef LOCKSMITH_TEST_WITH_CLI
namespace {
std::string run_cli(const std::string& args) {
    std::string out;
    FILE* p = ::popen((test::cli_path() + " " + args + " 2>&1").c_str(), "r");
    BOOST_REQUIRE(p != nullptr);
    std::array<char, 4096> buffer{};
    while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), p))
        out.append(buffer.data(), n);
    const int status = ::pclose(p);
    return std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "\n" + out;
}
}  // namespace

// The command is linked statically: the plugin, linked to liblocksmith.so, registers through
// the host handle into the command's own registry.
BOOST_AUTO_TEST_CASE(the_command_loads_plugins_shows_their_origin_and_checks_them) {
    plugin_folder f;
    const auto config_file = f.dir / "config.json";
    std::ofstream(config_file) << "{\"plugins\": [" << quoted(f.plugin("ok"))
                               << "], \"strategies\": {\"plugin_probe\": {\"priority\": 99}}}";
    auto out = run_cli("strategies --config " + config_file.string());
    BOOST_TEST(out.rfind("0\n", 0) == 0u, out);
    BOOST_TEST(contains(out, "plugin " + fs::canonical(f.plugin("ok")).string() + " (probe 0.0.1)"),
               out);
    BOOST_TEST(contains(out, "built in"), out);
    out = run_cli("config check " + config_file.string());
    BOOST_TEST(out == "0\n" + config_file.string() + ": OK\n", out);

    std::ofstream(config_file, std::ios::trunc)
        << "{\"plugins\": [" << quoted(f.plugin("api999")) << "]}";
    out = run_cli("config check " + config_file.string());
    BOOST_TEST(out.rfind("78\n", 0) == 0u, out);
    BOOST_TEST(contains(out, ": /plugins/0: plugin " + f.plugin("api999").string() +
                                 " was built for locksmith plugin API 999"),
               out);
    out = run_cli("run --config " + config_file.string() + " x -- true");
    BOOST_TEST(out.rfind("78\n", 0) == 0u, out);
}

// A plugin whose threads block no signal (tests/plugin/thread_plugin.cpp): a SIGTERM or SIGINT
// sent to `run` while its command runs is forwarded to the command, whose status run returns
// after releasing the lock; the kernel handing the signal to the plugin's thread would end
// locksmith by the default action instead (exit by the signal, the command orphaned). Before the
// lock is granted a stop request still ends a waiting run.
BOOST_AUTO_TEST_CASE(a_stop_request_reaches_the_command_whatever_threads_a_plugin_started) {
    plugin_folder f;
    fs::create_directory(f.dir / "locks", f.dir);
    const auto config_file = f.dir / "config.json";
    std::ofstream(config_file) << "{\"plugins\": [" << quoted(f.plugin("thread_probe"))
                               << "], \"strategies\": {\"thread_probe\": {\"options\": "
                                  "{\"lock_dir\": "
                               << quoted(f.dir / "locks") << "}}}}";
    const auto started = f.dir / "started";
    auto start_run = [&](const std::string& name, const std::string& command,
                         const std::vector<std::string>& more = {}) {
        std::vector<std::string> args = {test::cli_path(), "run",        "--config",
                                         config_file,      "--strategy", "thread_probe"};
        args.insert(args.end(), more.begin(), more.end());
        args.insert(args.end(), {name, "-c", command});
        return test::fork_child([args] {
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            return 127;
        });
    };
    auto wait_for = [](const fs::path& p) {
        for (int i = 0; i < 1000 && !fs::exists(p); ++i) ::usleep(10'000);
        return fs::exists(p);
    };
    const std::string command =
        "trap 'exit 7' TERM INT; touch " + started.string() + "; while :; do sleep 0.05; done";
    for (const int sig : {SIGTERM, SIGINT}) {
        BOOST_TEST_CONTEXT("signal " << sig) {
            fs::remove(started);
            const pid_t run = start_run("stopped", command);
            BOOST_REQUIRE(wait_for(started));
            ::kill(run, sig);
            const int status = test::wait_child(run, std::chrono::seconds(20));
            BOOST_TEST(status == 7, "run ended with " << test::exit_text(status));
            // Released: another run takes the name at once.
            const pid_t next = start_run("stopped", "exit 0", {"-n"});
            BOOST_TEST(test::wait_child(next, std::chrono::seconds(20)) == 0);
        }
    }
    // A command that is no shell (dash unblocks every signal when it starts): it starts with
    // the caller's signal mask, not run's, so the forwarded SIGTERM ends it.
    {
        std::vector<std::string> args = {
            test::cli_path(), "run",         "--config", config_file, "--strategy",
            "thread_probe",   "not-a-shell", "--",       "sleep",     "60"};
        const pid_t run = test::fork_child([args] {
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            return 127;
        });
        // Started when run has a child.
        const auto children =
            "/proc/" + std::to_string(run) + "/task/" + std::to_string(run) + "/children";
        std::string pids;
        for (int i = 0; i < 1000 && pids.empty(); ++i) {
            ::usleep(10'000);
            std::ifstream(children) >> pids;
        }
        BOOST_REQUIRE(!pids.empty());
        ::kill(run, SIGTERM);
        const int status = test::wait_child(run, std::chrono::seconds(20));
        BOOST_TEST(status == 128 + SIGTERM, "run ended with " << test::exit_text(status));
    }
    // Waiting for the lock (nothing held yet): the stop request ends the run as before.
    fs::remove(started);
    const pid_t holder = start_run("waited", command);
    BOOST_REQUIRE(wait_for(started));
    const pid_t waiter = start_run("waited", "exit 0", {"-w", "60"});
    ::usleep(300'000);
    ::kill(waiter, SIGTERM);
    const int waited = test::wait_child(waiter, std::chrono::seconds(20));
    BOOST_TEST(waited == 128 + SIGTERM, "the waiting run ended with " << test::exit_text(waited));
    ::kill(holder, SIGTERM);
    BOOST_TEST(test::wait_child(holder, std::chrono::seconds(20)) == 7);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
