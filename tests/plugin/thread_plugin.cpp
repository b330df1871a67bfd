// SPDX-License-Identifier: MIT
// A plugin for plugin_loader_test: the file strategy under the name `thread_probe`, whose plugin
// starts a thread when it is loaded and another with each store, both asleep in poll() and
// blocking no signal, as a client library's event loop may. The kernel hands a signal sent to
// the process to any thread that does not block it; a stop request that reached one of these
// would end locksmith by the default action, the lock held and its command orphaned, unless
// locksmith blocked the signal before the plugin could start a thread (issue 23).
#include <poll.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include <locksmith/author/plugin.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/file.hpp>

namespace {

void sleep_forever() {
    for (;;) ::poll(nullptr, 0, -1);
}

// From dlopen, before locksmith has looked at the config's strategies.
[[gnu::constructor]] void loaded() {
    std::thread(sleep_forever).detach();
}

void add(locksmith::plugin_registrar& registrar) {
    locksmith::strategy_descriptor d;
    d.name = "thread_probe";
    d.description = "file locks, with threads that block no signal";
    d.default_priority = 1;
    d.capabilities = locksmith::capability::exclusive | locksmith::capability::noblock;
    d.validate_options = [](const nlohmann::json& options) {
        locksmith::options_reader r(options);
        (void)r.string("lock_dir");
        r.finish();
    };
    d.create = [](const nlohmann::json& options) {
        std::thread(sleep_forever).detach();
        locksmith::strategies::file_options o;
        o.lock_dir = options.at("lock_dir").get<std::string>();
        return locksmith::strategies::make_file_store(o);
    };
    registrar.add(d);
}

}  // namespace

LOCKSMITH_PLUGIN(thread_probe, "thread_probe", "0.0.1", add)
