// The JSON configuration.
//
//   lock_rule  what the config pins for lock names matching a pattern
//   config     the parsed, validated document: defaults, per-strategy settings, lock rules and
//              plugins; parse/load/from_environment build it, check() lists every problem
//
// Document shape (every key optional):
//   { "defaults":   { "ttl_s": 300, "auto_release": true, "fallback": false,
//                     "retry_initial_ms": 0.5, "retry_max_ms": 50 },
//     "strategies": { "<name>": { "enabled": true, "priority": 0..100, "options": {…} } },
//     "locks":      { "<glob>": { "require": "exclusive|distributed", "strategy": "<name>",
//                                 "ttl_s": 30, "fallback": false } },
//     "plugins":    [ "/absolute/path/libplugin.so" ] }
// Unknown keys, wrong types and out-of-range values are config_errors with a JSON pointer;
// syntax errors carry line and column.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/backoff.hpp>
#include <locksmith/capability.hpp>
#include <locksmith/errors.hpp>

namespace locksmith {

class strategy_registry;

struct lock_rule {
    // A glob: `*` matches any run of bytes, `?` one byte; everything else matches itself.
    std::string pattern;
    std::optional<capability> require;
    std::optional<std::string> strategy;
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<bool> fallback;
};

// Does `name` match the glob `pattern`?
bool glob_match(std::string_view pattern, std::string_view name) noexcept;

struct strategy_settings {
    std::optional<bool> enabled;
    std::optional<int> priority;
    nlohmann::json options;  // null when absent
};

struct config {
    std::chrono::milliseconds default_ttl{std::chrono::minutes(5)};
    bool auto_release = true;
    // Whether a lock may use the next candidate strategy when the chosen one cannot start.
    // Off by default: holders on two strategies do not exclude each other, so a process that
    // falls back (its server is unreachable from here) and one that does not would both hold
    // the name. Turn it on only where every user of the name falls back alike, or where
    // availability matters more than exclusion.
    bool fallback = false;
    retry_policy retry{};
    std::map<std::string, strategy_settings> strategies;
    std::vector<lock_rule> locks;  // in document order; the first match wins
    std::vector<std::string> plugins;
    // Where the document came from ("built-in defaults", "file /etc/x.json", "LOCKSMITH_CONFIG").
    std::string origin = "built-in defaults";

    // Throws the first config_error.
    static config parse(std::string_view json_text, std::string origin = "string");
    // Throws config_error ("config.io") when the file cannot be read, then as parse().
    static config load_file(const std::filesystem::path& path);
    // LOCKSMITH_CONFIG: a file path, or a JSON document when it starts with '{'. nullopt when
    // the variable is unset or empty.
    static std::optional<config> from_environment();
    // Every problem of a document (empty when it is valid), for `locksmith config check`.
    // Strategy names and options are checked against `registry` when given.
    static std::vector<config_error> check(std::string_view json_text,
                                           const strategy_registry* registry = nullptr);

    // The first rule whose pattern matches `name`, or null.
    const lock_rule* rule_for(std::string_view name) const noexcept;

    // Stores this config's strategy settings in `registry` as overrides (kept by name).
    void apply_to(strategy_registry& registry) const;
    // Throws config_error for a strategy name (in "strategies" or a lock rule) that `registry`
    // does not know, and for options its strategy rejects.
    void validate_against(const strategy_registry& registry) const;
};

}  // namespace locksmith
