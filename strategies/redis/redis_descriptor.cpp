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
    return d;
}

strategy_descriptor redis_strategy() {
    return load_on_first_use(redis_metadata());
}

}  // namespace locksmith::strategies
