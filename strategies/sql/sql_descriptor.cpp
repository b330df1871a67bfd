// SPDX-License-Identifier: MIT
// The sql strategy's registry entry. It is compiled into liblocksmith; the store and its drivers
// are in the module liblocksmith_sql.so, loaded on first use (include/locksmith/author/module.hpp).
#include "sql_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/sql.hpp>

namespace locksmith::strategies {

capability sql_capabilities_for(const nlohmann::json& options) noexcept {
    // Only the scheme matters, and it must be known without loading the module: selection asks
    // before any store exists. A SQLite file is one host's.
    if (options.is_object()) {
        auto it = options.find("dsn");
        if (it != options.end() && it->is_string() &&
            it->get_ref<const std::string&>().rfind("sqlite:", 0) == 0)
            return sql_capabilities & ~capability::distributed;
    }
    return sql_capabilities;
}

strategy_descriptor sql_metadata() {
    strategy_descriptor d;
    d.name = "sql";
    d.description =
        "SQL table (SQLite file, PostgreSQL, MariaDB/MySQL): one-statement grants, expiry by the "
        "database's clock, fencing, counting semaphores (a row per permit)";
    d.default_priority = 80;
    d.capabilities = sql_capabilities;
    d.capabilities_for = sql_capabilities_for;
    d.needs_configuration = true;
    d.example_options = {{"dsn", "postgresql://user:password@127.0.0.1:5432/app"}};
    return d;
}

strategy_descriptor sql_strategy() {
    return load_on_first_use(sql_metadata());
}

}  // namespace locksmith::strategies
