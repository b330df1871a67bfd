// SPDX-License-Identifier: MIT
// Private to the library: the check of a plugin's entry point (registry/module_loader.cpp), which
// every module and plugin passes before any of its strategies is used. Declared here so that the
// fuzz target tests/fuzz/fuzz_plugin_info.cpp feeds it plugin structs of every shape.
#pragma once

#include <string>
#include <vector>

#include <locksmith/author/plugin.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::detail {

// What a plugin registered, or why it was refused.
struct entered {
    std::string name;
    std::string version;
    std::vector<strategy_descriptor> strategies;
    std::string failure;  // empty when accepted
};

// Checks the plugin behind `entry` (`where` names it: its file, or the module linked into this
// program) and runs its registration. Nothing but the API version is read before the version
// matches; nothing of the plugin's C++ runs before its ABI matches.
entered enter(const std::string& where, locksmith_plugin_entry entry);

}  // namespace locksmith::detail
