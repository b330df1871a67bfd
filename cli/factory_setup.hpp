// SPDX-License-Identifier: MIT
// Which configuration the command uses, and the library objects built from it.
//
//   resolve_config   the configuration, found as below
//   make_factory     a lock_factory on the default registry with that configuration
//   selection_flags  --strategy / --require as typed; make_request checks and converts them
//
// Configuration: --config FILE, else what the library finds (config::discover: LOCKSMITH_CONFIG,
// ~/.config/locksmith/config.json with ~ from the passwd entry, /etc/locksmith/config.json, the
// built-in defaults), so that a program and the command lock alike.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/lock_factory.hpp>

namespace locksmith::cli {

// Reads the whole file with config::read_file's bounds (a regular file, at most 1 MiB).
// Throws config_error: "config.io" (exit EX_NOINPUT) when it is missing, unreadable or not a
// regular file, "config.too_large" (EX_CONFIG) beyond the limit.
std::string read_input_file(const std::filesystem::path& path, std::string_view role);

// Loads the configuration: --config FILE, else config::discover().
// Throws cli_error(EX_NOINPUT) for a named file that cannot be read, config_error otherwise.
config resolve_config(const std::optional<std::string>& config_flag);

// A factory with the resolved configuration applied to the default registry.
// Throws as resolve_config, and config_error for strategy names the registry does not know.
std::unique_ptr<lock_factory> make_factory(const std::optional<std::string>& config_flag);

struct selection_flags {
    std::optional<std::string> strategy;  // --strategy NAME
    std::optional<std::string> require;   // --require CAPS
};

// The request for `name`'s strategy. Throws cli_error(EX_USAGE) for an unknown strategy name (the
// message lists the known ones) and for capability text that does not parse.
lock_request make_request(const lock_factory& factory, const selection_flags& flags);

// When `strategy` excludes nothing (`null`), says so on stderr: "warning: ... locking is off for
// <what> ...", naming the config that enabled it. Returns whether it warned.
bool warn_if_locking_off(const lock_factory& factory, const std::string& strategy,
                         const std::string& what);

// The cautions of `strategy`'s descriptor about its effective options (strategy_descriptor::
// warnings), each said on stderr as "warning: strategy '<name>': ...". Returns them.
std::vector<std::string> warn_about_options(const lock_factory& factory,
                                            const std::string& strategy);

// Parses --require text. Throws cli_error(EX_USAGE) naming the unknown word and listing the known
// capability names.
capability parse_require(const std::string& text);

}  // namespace locksmith::cli
