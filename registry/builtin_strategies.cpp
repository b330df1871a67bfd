// SPDX-License-Identifier: MIT
// Registers the strategies built into this library, from the list CMake generates (one
// LOCKSMITH_STRATEGY(name) line per strategy folder that was built).
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
#define LOCKSMITH_STRATEGY(name) strategy_descriptor name##_strategy();
#include "locksmith_builtin_strategies.inc"
#undef LOCKSMITH_STRATEGY
}  // namespace locksmith::strategies

namespace locksmith {

void register_builtin_strategies(strategy_registry& registry) {
#define LOCKSMITH_STRATEGY(name)                     \
    {                                                \
        auto d = strategies::name##_strategy();      \
        if (d.origin.empty()) d.origin = "built in"; \
        registry.add(std::move(d));                  \
    }
#include "locksmith_builtin_strategies.inc"
#undef LOCKSMITH_STRATEGY
}

}  // namespace locksmith
