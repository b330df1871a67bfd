// SPDX-License-Identifier: MIT
// Loading strategies from shared libraries: the built-in modules, on first use, and the
// config's plugins. Both are plugins in the sense of <locksmith/author/plugin.hpp>: one entry
// point, locksmith_plugin_info, whose API version and C++ ABI are checked before anything else in
// the library is used.
//
//   load_on_first_use  wraps a built-in module's metadata so that its probe, validator and
//                      factory load liblocksmith_<name>.so only when first called
//   module_directory   where modules, and plugins named without a path, are looked for
//   link_module        declares a module whose code is linked into the program, so that it is
//                      used without dlopen (the static locksmith command does this)
//   load_plugins       loads the config's `plugins` into a registry (lock_factory calls it)
//
// Why modules: a program that locks with `file` should not load a backend's client library
// (hiredis; later libpq, libzookeeper, ...) at every start. The descriptor's data (name,
// capabilities, priority) is compiled into the library, so selection and `locksmith strategies`
// know the strategy without loading it; its code loads when it is first probed or used.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <locksmith/author/plugin.hpp>
#include <locksmith/config.hpp>
#include <locksmith/registry.hpp>

namespace locksmith {

// `metadata` with probe, validator and factory taken from the module `metadata.name` on first
// use (the descriptor of that name its registration adds). When the module cannot be loaded or
// is refused, the probe says so and the strategy is passed over; the validator then accepts any
// options (there is nothing to check them with).
strategy_descriptor load_on_first_use(strategy_descriptor metadata);

// $LOCKSMITH_MODULE_DIR when set, else the folder locksmith-modules beside liblocksmith.so (or
// beside the program that links the library statically).
std::filesystem::path module_directory();

// Uses `entry` for the module `name` instead of loading liblocksmith_<name>.so. Call it before
// the strategy is first used; a module already loaded stays as it is.
void link_module(const std::string& name, locksmith_plugin_entry entry);

// Loads every plugin `cfg` names into `registry`, in order, and returns the problems, each a
// config_error whose pointer is the entry (/plugins/<i>) and whose message names the file: it
// is missing, unsafe (it or its folder writable by others than you or root), not loadable, not
// a plugin, built for another API version or C++ ABI, failed to register, or registers a
// strategy name the registry already has. A plugin with a problem adds nothing. Loading the
// same file into the same registry again adds nothing and is no problem. Plugins stay loaded.
std::vector<config_error> load_plugins(const config& cfg, strategy_registry& registry);

// load_plugins, throwing one config_error for all problems, each line
// "<config origin>: /plugins/<i>: <problem>".
void load_plugins_or_throw(const config& cfg, strategy_registry& registry);

}  // namespace locksmith
