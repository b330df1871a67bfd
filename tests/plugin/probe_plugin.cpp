// SPDX-License-Identifier: MIT
// A plugin for the loader's tests, built in several variants (tests/plugin/CMakeLists.txt):
// for another API version, with another C++ ABI, registering a taken name, or failing. Its
// registration leaves a mark ($LOCKSMITH_TEST_PLUGIN_MARK, a file it creates), and so does its
// loading ($LOCKSMITH_TEST_PLUGIN_LOADED_MARK, from a constructor), so that a test can tell
// whether any of its code ran.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <locksmith/author/plugin.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/memory.hpp>

#ifndef PROBE_STRATEGY
#define PROBE_STRATEGY "plugin_probe"
#endif

namespace {

void leave_mark(const char* variable = "LOCKSMITH_TEST_PLUGIN_MARK") {
    if (const char* mark = std::getenv(variable); mark && *mark) {
        int fd = ::open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) ::close(fd);
    }
}

// Any library's constructors run when dlopen loads it, before the loader can look at it: the
// checks of the plugin's path must come first (issue 23 point 11).
[[gnu::constructor]] void loaded() {
    leave_mark("LOCKSMITH_TEST_PLUGIN_LOADED_MARK");
}

void add_probe(locksmith::plugin_registrar& registrar) {
    leave_mark();
#ifdef PROBE_THROWS
    throw std::runtime_error("the probe plugin refuses to register (PROBE_THROWS)");
#endif
    locksmith::strategy_descriptor d;
    d.name = PROBE_STRATEGY;
    d.description = "the loader tests' probe: memory locks";
    d.default_priority = 5;
    d.capabilities = locksmith::capability::exclusive | locksmith::capability::noblock;
    d.spans_processes = false;
#ifndef PROBE_OLD_ABI  // options_reader takes std::string: no such symbol in the old ABI
    d.validate_options = [](const nlohmann::json& options) {
        locksmith::options_reader r(options);
        (void)r.boolean("flag");
        r.finish();
    };
#endif
    d.create = [](const nlohmann::json&) { return locksmith::strategies::make_memory_store(); };
    d.origin = "whatever the plugin claims";  // the loader replaces it
    registrar.add(d);
}

}  // namespace

LOCKSMITH_PLUGIN(probe, "probe", "0.0.1", add_probe)
