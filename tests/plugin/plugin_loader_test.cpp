// The config's `plugins`: loading, refusing (API version, C++ ABI, unsafe files, taken names,
// failing registration), and what the command shows of them.
#define BOOST_TEST_MODULE plugin_loader
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <boost/test/unit_test.hpp>

#include <locksmith/author/module.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>

#include "support/child_process.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"

namespace fs = std::filesystem;
using namespace locksmith;

namespace {

// A private folder (0700, under /tmp) with copies of the probe plugins: the build tree's
// folders may be writable by a group, which the loader rightly refuses.
struct plugin_folder {
    fs::path dir;
    plugin_folder() {
        std::string tmpl = (fs::temp_directory_path() / "locksmith-plugin-test-XXXXXX").string();
        BOOST_REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
        for (const auto& e : fs::directory_iterator(PROBE_PLUGIN_DIR))
            fs::copy_file(e.path(), dir / e.path().filename());
        ::setenv("LOCKSMITH_TEST_PLUGIN_MARK", mark().c_str(), 1);
    }
    ~plugin_folder() {
        ::unsetenv("LOCKSMITH_TEST_PLUGIN_MARK");
        std::error_code ec;
        fs::permissions(dir, fs::perms::owner_all, ec);
        fs::remove_all(dir, ec);
    }
    fs::path plugin(const std::string& variant) const {
        return dir / ("libprobe_plugin_" + variant + ".so");
    }
    fs::path mark() const { return dir / "registration-ran"; }
    bool registration_ran() const { return fs::exists(mark()); }
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

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
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

#ifdef LOCKSMITH_CLI
namespace {
std::string run_cli(const std::string& args) {
    std::string out;
    FILE* p = ::popen((std::string(LOCKSMITH_CLI) + " " + args + " 2>&1").c_str(), "r");
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
#endif

BOOST_AUTO_TEST_SUITE_END()
