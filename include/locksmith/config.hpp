// SPDX-License-Identifier: MIT
// The JSON configuration.
//
//   lock_rule          what the config pins for lock names matching a pattern
//   strategy_settings  what the config says about one strategy (enabled, priority, options)
//   config             the parsed, validated document: defaults, per-strategy settings, lock
//                      rules and plugins; parse/load/from_environment build it, check() lists
//                      every problem
// The config knows nothing of the registry: strategy_registry reads a config (configure,
// problems, check), the config never writes into a registry.
//
// Document shape (every key optional):
//   { "defaults":   { "ttl_s": 300, "auto_release": true, "fallback": false,
//                     "retry_initial_ms": 0.5, "retry_max_ms": 50 },
//     "strategies": { "<name>": { "enabled": true, "priority": 0..100, "options": {…} } },
//     "locks":      { "<glob>": { "require": "exclusive|distributed", "strategy": "<name>",
//                                 "ttl_s": 30, "fallback": false, "limit": 3 } },
//     "plugins":    [ "/absolute/path/libplugin.so", "libname.so" ] }
// (a plugin named without a path is in the module folder; lock_factory loads them, see
// <locksmith/author/module.hpp>)
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
#include <locksmith/key.hpp>

namespace locksmith {

inline constexpr int min_priority = 0;
inline constexpr int max_priority = 100;

// Is `name` a strategy name: 1-64 lowercase letters, digits or `_`?
bool valid_strategy_name(std::string_view name) noexcept;

struct lock_rule {
    // A glob: `*` matches any run of bytes, `?` one byte; everything else matches itself.
    std::string pattern;
    std::optional<capability> require;
    std::optional<std::string> strategy;
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<bool> fallback;
    // The limit of counting semaphores of matching names (1..max_semaphore_limit), used where the
    // caller gives none (lock_factory::create_semaphore with limit 0; `locksmith run` without
    // --limit then takes a permit instead of the lock). Locks ignore it.
    std::optional<std::uint32_t> limit;
};

// Does `name` match the glob `pattern`?
bool glob_match(std::string_view pattern, std::string_view name) noexcept;

// A store as Symfony Lock's StoreFactory::createStore() spells it, as one of our strategies.
struct store_spelling {
    std::string strategy;
    nlohmann::json options;  // the strategy's options, as under strategies.<name>.options
    bool enable = false;     // the strategy is off by default (memory, null) and this turns it on
};

// Reads Symfony's spellings: `flock` (file), `flock:///dir` (file, lock_dir), `semaphore`,
// `in-memory` (memory), `null`, `redis://[pass@]host[:port][/db]` and `rediss://` (redis's url;
// `?redis_cluster=1` and `?redis_sentinel=MASTER` with more servers as `host[h:p]` parameters,
// also in the `redis:?host[h:p]&...` form; `dbindex`, `timeout`, `read_timeout`; the PHP
// client's tuning parameters ignored), `memcached://host[:port]` and `memcached:?host[...]...`,
// the SQL spellings of normalize_sql_dsn (sql), `pgsql+advisory:...` and
// `postgresql+advisory://...` (pg_advisory) and `zookeeper://host[,host][:port]`.
// Throws invalid_argument_error naming what is not supported (MongoDB, SQL Server, Oracle, a
// RedisArray of independent servers, server weights, Memcached SASL, ...), and a DSN longer
// than 16 KiB or with a control character (without showing it); messages show the DSN only
// through redact_url, at most its first 200 bytes.
store_spelling parse_store_dsn(std::string_view dsn);

// What a config says about one strategy; unset fields keep the strategy's defaults. The
// registry keeps one per strategy name (strategy_registry::set_override).
struct strategy_settings {
    std::optional<bool> enabled;
    std::optional<int> priority;  // in [min_priority, max_priority]
    nlohmann::json options;       // null when the config gives none
    // Where it came from, e.g. "file /etc/locksmith/config.json" (the config's origin; parse
    // sets it). Empty in a config a program builds: strategy_registry::configure then uses the
    // config's origin.
    std::string origin;
};

struct config {
    // Bounds on a document, whatever its source (file, LOCKSMITH_CONFIG, string): a config is
    // written by hand, and a hostile or broken one must not crash, hang or exhaust memory.
    static constexpr std::size_t max_bytes = std::size_t(1) << 20;  // 1 MiB
    static constexpr std::size_t max_depth = 64;  // nesting of objects and arrays; root = 1

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

    // Throws one config_error for every problem (as throw_problems); "config.too_large" and
    // "config.too_deep" for a document beyond max_bytes or max_depth.
    static config parse(std::string_view json_text, std::string origin = "string");
    // The text of a config file: a regular file (never a FIFO, socket or device, which could
    // block or never end) of at most max_bytes, that no other user can change: it, every
    // folder and symlink on its path (as written and as resolved) are owned by the caller or
    // root, and none is writable by group or others, except a sticky folder of root's (/tmp)
    // above the file's own folder. Throws config_error "config.io" when it does not exist,
    // cannot be read or is not a regular file, "config.unsafe" when another user could change
    // it, "config.too_large" beyond max_bytes.
    static std::string read_file(const std::filesystem::path& path);
    // read_file, then parse() with the file as origin.
    static config load_file(const std::filesystem::path& path);
    // LOCKSMITH_CONFIG: a file path, or a JSON document when its first character other than a
    // blank (space, tab, CR, LF) is '{'. nullopt when the variable is unset or empty. Throws
    // config_error ("config.io" when the file it names is missing or unreadable).
    static std::optional<config> from_environment();
    // Where discover() looks after LOCKSMITH_CONFIG, in order: ~/.config/locksmith/config.json,
    // ~ being the home directory of the caller's passwd entry (geteuid; left out when there is
    // none), then /etc/locksmith/config.json. Never $HOME or $XDG_CONFIG_HOME: a service, a cron
    // job and a login shell of one user must find the same file.
    static std::vector<std::filesystem::path> default_locations();
    // The configuration of a program that names none (lock_factory(), and the locksmith command
    // without --config): the first that applies of from_environment(), the first of `locations`
    // that is present, and the built-in defaults. A location is skipped only when it certainly
    // does not exist: one this user cannot check (a directory on its path it may not search)
    // may hold the config everyone else uses, and the built-in defaults would then choose
    // another strategy for the same names. For the same reason, a config of the caller's at
    // $XDG_CONFIG_HOME/locksmith/config.json that is none of `locations` is an error, not
    // ignored: processes without XDG_CONFIG_HOME would not see it. Throws config_error:
    // "config.io" for a file that LOCKSMITH_CONFIG names and that is missing, and for a
    // location that cannot be checked or read or is not a regular file; "config.unsafe" (see
    // read_file); "config.xdg" for a config in $XDG_CONFIG_HOME; the document's own errors
    // otherwise.
    static config discover(
        const std::vector<std::filesystem::path>& locations = default_locations());
    // Every problem of a document (empty when it is valid), for `locksmith config check`:
    // each error's what() is the problem alone; its pointer (or line and column) are fields,
    // and the caller names the document, so that each is said once. When `read` is given, it
    // receives the document as far as it is valid, or nullopt when it cannot be read at all
    // (syntax, size, depth), so that a caller can check it further (strategy_registry::check
    // checks strategy names and options).
    static std::vector<config_error> check(std::string_view json_text,
                                           std::optional<config>* read = nullptr);

    // The first rule whose pattern matches `name`, or null.
    const lock_rule* rule_for(std::string_view name) const noexcept;

    // `e`, thrown by strategy `strategy` for its options (pointer relative to them), with its
    // pointer into the document ("/strategies/<strategy>/options..."): how the registry's check
    // and the factory report rejected options.
    static config_error options_problem(const std::string& strategy, const config_error& e);
    // Throws `problems` (bare, as check() lists them; not empty) as one config_error: one line
    // per problem, each "<origin>[, line L, column C][: <pointer>]: <problem>"; id, pointer,
    // line and column are the first problem's.
    [[noreturn]] void throw_problems(const std::vector<config_error>& problems) const;
};

}  // namespace locksmith
