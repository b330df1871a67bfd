// SPDX-License-Identifier: MIT
// The zookeeper strategy's metadata, shared by the registry entry in liblocksmith
// (zookeeper_strategy, loaded on first use) and the module's registration, which adds the
// validator and the factory.
#pragma once

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor zookeeper_metadata();

}  // namespace locksmith::strategies
