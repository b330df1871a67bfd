// Strategies built as their own shared library and loaded on first use.
//
//   strategy_implementation  the parts of a descriptor that need the backend's client library
//   load_on_first_use        wraps a descriptor's metadata so that its probe, validator and
//                            factory load liblocksmith_<name>.so only when first called
//   module_directory         where those libraries are looked for
//   link_module              declares a module whose code is linked into the program, so that
//                            it is used without dlopen (the static locksmith command does this)
//
// Why: a program that locks with `file` should not load a backend's client library (hiredis;
// later libpq, libzookeeper, ...) at every start. The descriptor's data
// (name, capabilities, priority) is compiled into the library, so selection and `locksmith
// strategies` know the strategy without loading it; its code loads when it is first probed or
// used.
//
// A module defines, with C linkage:
//   std::uint32_t locksmith_module_<name>(locksmith::strategy_implementation& out);
// filling `out` and returning module_api_version.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <locksmith/registry.hpp>

namespace locksmith {

inline constexpr std::uint32_t module_api_version = 1;

struct strategy_implementation {
    std::function<support_status()> supported;  // empty = always supported
    std::function<void(const nlohmann::json& options)> validate_options;
    std::function<std::shared_ptr<store>(const nlohmann::json& options)> create;
};

// `metadata` with probe, validator and factory that load the module on first use. When the
// module cannot be loaded, the probe says so (with the loader's message) and the strategy is
// passed over; the validator then accepts any options (there is nothing to check them with).
strategy_descriptor load_on_first_use(strategy_descriptor metadata);

// $LOCKSMITH_MODULE_DIR when set, else the folder locksmith-modules beside liblocksmith.so.
std::filesystem::path module_directory();

// The entry point every module defines (see above).
using module_entry = std::uint32_t (*)(strategy_implementation& out);

// Uses `entry` for the module `name` instead of loading liblocksmith_<name>.so. Call it before
// the strategy is first used; a module already loaded stays as it is.
void link_module(const std::string& name, module_entry entry);

}  // namespace locksmith
