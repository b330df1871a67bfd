// SPDX-License-Identifier: MIT
// Small helpers shared by the conformance and multi-process suites.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <locksmith/author/store.hpp>
#include <locksmith/registry.hpp>

#include "support/strategies_under_test.hpp"

namespace locksmith::test {

// A new store of the strategy, built the way applications get one: through the default
// registry's descriptor and the entry's options.
// Requires: s.options has a value. Throws invalid_argument_error for a strategy this build lacks.
std::shared_ptr<store> create_store(const strategy_under_test& s);

// What a store of the entry offers: the descriptor's capabilities for the entry's options
// (strategy_descriptor::capabilities_for: `sql` on SQLite is not distributed).
capability expected_capabilities(const strategy_descriptor& d, const strategy_under_test& s);

// Whether `condition` became true within `limit`, checking it every millisecond: for what
// settles on another thread or process (a renewal, a roll-back that outlived its round).
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = std::chrono::seconds(2));

// A resource name no other test (or test process) uses: "<label>.<pid>.<counter>".
std::string unique_resource(std::string_view label);

// Removes the directories the entries' options name in "lock_dir"; for the end of a suite, so
// test runs do not leave directories behind in /tmp.
void remove_test_lock_dirs();

}  // namespace locksmith::test
