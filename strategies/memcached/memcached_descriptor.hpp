// SPDX-License-Identifier: MIT
// The memcached strategy's metadata (name, capabilities, priority, example options), shared by
// the registry entry in liblocksmith (memcached_strategy, loaded on first use) and the module's
// registration, which adds the validator and the factory.
#pragma once

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor memcached_metadata();

}  // namespace locksmith::strategies
