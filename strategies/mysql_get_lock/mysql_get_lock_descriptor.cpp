// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy's registry entry. It is compiled into liblocksmith; the store
// itself is in the module liblocksmith_mysql_get_lock.so, loaded on first use
// (include/locksmith/author/module.hpp), so that programs that never use it do not load
// libmariadb.
#include "mysql_get_lock_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/mysql_get_lock.hpp>

namespace locksmith::strategies {

strategy_descriptor mysql_get_lock_metadata() {
    strategy_descriptor d;
    d.name = "mysql_get_lock";
    d.description = "MariaDB/MySQL user-level locks (GET_LOCK): session locks, waits in the server";
    d.default_priority = 81;
    d.capabilities = mysql_get_lock_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"dsn", "mysql://user:password@127.0.0.1:3306/app"}};
    return d;
}

strategy_descriptor mysql_get_lock_strategy() {
    return load_on_first_use(mysql_get_lock_metadata());
}

}  // namespace locksmith::strategies
