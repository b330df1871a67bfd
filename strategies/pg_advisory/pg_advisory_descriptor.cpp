// SPDX-License-Identifier: MIT
// The pg_advisory strategy's registry entry. It is compiled into liblocksmith; the store itself
// is in the module liblocksmith_pg_advisory.so, loaded on first use
// (include/locksmith/author/module.hpp), so that programs that never use it do not load libpq.
#include "pg_advisory_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/pg_advisory.hpp>

namespace locksmith::strategies {

strategy_descriptor pg_advisory_metadata() {
    strategy_descriptor d;
    d.name = "pg_advisory";
    d.description = "PostgreSQL session advisory locks (libpq): 64-bit keys, waits in the server";
    d.default_priority = 82;
    d.capabilities = pg_advisory_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"dsn", "postgresql://user:password@127.0.0.1:5432/app"}};
    return d;
}

strategy_descriptor pg_advisory_strategy() {
    return load_on_first_use(pg_advisory_metadata());
}

}  // namespace locksmith::strategies
