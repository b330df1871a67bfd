// SPDX-License-Identifier: MIT
// The redis strategy's registry entry. It is compiled into liblocksmith; the store itself is in
// the module liblocksmith_redis.so, loaded on first use (include/locksmith/author/module.hpp).
#include "redis_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/redis.hpp>

namespace locksmith::strategies {

strategy_descriptor redis_metadata() {
    strategy_descriptor d;
    d.name = "redis";
    d.description = "Redis server (hiredis): SET NX PX with scripts, pub/sub waiting, fencing";
    d.default_priority = 85;
    d.capabilities = redis_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"url", "redis://127.0.0.1:6379/0"}};
    d.warnings = &redis_warnings;
    return d;
}

std::vector<std::string> redis_warnings(const nlohmann::json& options) {
    if (!options.is_object() || !options.contains("cluster")) return {};
    const auto wait = options.find("wait_replicas");
    if (wait == options.end() || !wait->is_number() || *wait != 0) return {};
    return {
        "redis has 'cluster' with 'wait_replicas' 0: a grant is reported before any replica "
        "has it, so a master's failover can lose it and give the name to a second holder; "
        "keep wait_replicas at the number of replicas of each master (0 only for a cluster "
        "without replicas)"};
}

strategy_descriptor redis_strategy() {
    return load_on_first_use(redis_metadata());
}

}  // namespace locksmith::strategies
