// SPDX-License-Identifier: MIT
// The sql strategy's metadata (name, capabilities, priority, example options, scope by DSN),
// shared by the registry entry in liblocksmith (sql_strategy, loaded on first use) and the
// module's registration, which adds the validator and the factory.
#pragma once

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor sql_metadata();

}  // namespace locksmith::strategies
