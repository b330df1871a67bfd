// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy's metadata (name, capabilities, priority, example options), shared
// by the registry entry in liblocksmith (mysql_get_lock_strategy, loaded on first use) and the
// module's registration, which adds the validator and the factory.
#pragma once

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor mysql_get_lock_metadata();

}  // namespace locksmith::strategies
