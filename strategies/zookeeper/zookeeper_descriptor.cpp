// SPDX-License-Identifier: MIT
// The zookeeper strategy's registry entry. It is compiled into liblocksmith; the store itself
// is in the module liblocksmith_zookeeper.so, loaded on first use
// (include/locksmith/author/module.hpp), so that programs that never use it do not load the
// ZooKeeper client.
#include "zookeeper_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/zookeeper.hpp>

namespace locksmith::strategies {

strategy_descriptor zookeeper_metadata() {
    strategy_descriptor d;
    d.name = "zookeeper";
    d.description =
        "ZooKeeper ephemeral sequential nodes (Curator's recipe): fair, fenced, read/write";
    d.default_priority = 90;
    d.capabilities = zookeeper_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"hosts", "127.0.0.1:2181"}};
    d.warnings = &zookeeper_warnings;
    return d;
}

std::vector<std::string> zookeeper_warnings(const nlohmann::json& options) {
    if (options.is_object() &&
        (options.contains("auth") || options.contains("auth_file") || options.contains("auth_env")))
        return {};
    return {
        "zookeeper has no 'auth': its lock nodes are open (world:anyone), so any client of "
        "the ensemble can delete a holder's node and a second process gets the lock; give "
        "'auth', 'auth_file' or 'auth_env' (digest:USER:PASSWORD) so that only that identity can "
        "change or "
        "delete them"};
}

strategy_descriptor zookeeper_strategy() {
    return load_on_first_use(zookeeper_metadata());
}

}  // namespace locksmith::strategies
