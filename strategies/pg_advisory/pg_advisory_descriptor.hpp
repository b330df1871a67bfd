// SPDX-License-Identifier: MIT
// The pg_advisory strategy's metadata (name, capabilities, priority, example options), shared by
// the registry entry in liblocksmith (pg_advisory_strategy, loaded on first use) and the
// module's registration, which adds the validator and the factory.
#pragma once

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor pg_advisory_metadata();

}  // namespace locksmith::strategies
