// SPDX-License-Identifier: MIT
// The redis strategy's metadata (name, capabilities, priority, example options), shared by
// the registry entry in liblocksmith (redis_strategy, loaded on first use) and the module's
// registration, which adds the validator and the factory.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/registry.hpp>

namespace locksmith::strategies {

strategy_descriptor redis_metadata();

// What `config check` and `explain` warn of in the options (a cluster without WAIT).
std::vector<std::string> redis_warnings(const nlohmann::json& options);

}  // namespace locksmith::strategies
