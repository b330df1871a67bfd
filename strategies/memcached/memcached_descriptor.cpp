// SPDX-License-Identifier: MIT
// The memcached strategy's registry entry. It is compiled into liblocksmith; the store itself is
// in the module liblocksmith_memcached.so, loaded on first use
// (include/locksmith/author/module.hpp).
#include "memcached_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/memcached.hpp>

namespace locksmith::strategies {

strategy_descriptor memcached_metadata() {
    strategy_descriptor d;
    d.name = "memcached";
    d.description =
        "Memcached server (meta protocol, >= 1.6.10): add with expiry, delete by CAS; eviction "
        "drops locks";
    d.default_priority = 78;
    d.capabilities = memcached_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"servers", "127.0.0.1:11211"}};
    return d;
}

strategy_descriptor memcached_strategy() {
    return load_on_first_use(memcached_metadata());
}

}  // namespace locksmith::strategies
