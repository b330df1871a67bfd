// SPDX-License-Identifier: MIT
// The strategy registry and selection.
//
//   support_status       a probe's answer: usable here or not, and why
//   strategy_descriptor  a registry entry: data plus two functions (probe, factory)
//   strategy_info        one row of `locksmith strategies`: descriptor plus effective settings
//   selection_report     which strategy serves a capability request, and why each other one
//                        was passed over (`locksmith explain`)
//   strategy_registry    the entries and the config's settings for them (kept by name, see
//                        strategy_settings in <locksmith/config.hpp>); thread-safe; registries
//                        are instances
//   default_registry()   the process registry, holding the built-in strategies
#pragma once

#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/capability.hpp>
#include <locksmith/config.hpp>

namespace locksmith {

struct support_status {
    bool supported = true;
    std::string reason;  // why not (or a note when supported)
    static support_status yes() { return {}; }
    static support_status no(std::string why) { return {false, std::move(why)}; }
};

struct strategy_descriptor {
    std::string name;         // [a-z0-9_]+
    std::string description;  // one line
    int default_priority = 50;
    capability capabilities = capability::none;
    // For a strategy whose scope depends on its options (`sql` on a SQLite file is host-local):
    // the capabilities a store built from the configured options has, a subset of
    // `capabilities`. Selection and fallback go by it. Empty = always `capabilities`. Cheap,
    // no I/O; must not throw.
    std::function<capability(const nlohmann::json& options)> capabilities_for;
    // Disabled strategies are never selected unless a config enables them (`memory`).
    bool enabled_by_default = true;
    // A remote strategy: a candidate only when the config gives it options (its endpoint).
    bool needs_configuration = false;
    // For a strategy that needs configuration: the least options that configure it, shown in
    // the "not configured" hint, e.g. {"url": "redis://127.0.0.1:6379/0"}.
    nlohmann::json example_options;
    // False for a strategy whose locks exclude each other only inside one process (`memory`):
    // it cannot serve a caller that spans processes, such as the locksmith command.
    bool spans_processes = true;
    // True only for a strategy that grants every request and excludes nothing (`null`): tools
    // warn that locking is off wherever it is chosen.
    bool excludes_nothing = false;
    // Cautions about options that work but leave a hole (zookeeper without auth: any client of
    // the ensemble can delete a lock): `config check` and `explain` print each as a warning.
    // Cheap, no I/O; must not throw. Empty = none.
    std::function<std::vector<std::string>(const nlohmann::json& options)> warnings;
    // The servers (or local objects) a store built from these options keeps its locks on, one
    // identity each ("127.0.0.1:6379", "unix:/run/redis.sock", "dir:/run/lock/app"), so that
    // `combined` can refuse two members on one of them: a restart or flush of that server takes
    // both votes, and the quorum holds with fewer backends than it says. The identities come
    // from the options alone (server_identities() in strategy_support.hpp: "localhost" is both
    // loopback addresses; no name is resolved), so two names of one server are not caught.
    // Throws config_error as validate_options does. Empty = unknown (only members with equal
    // options are refused). set_factory() fills it from Options::backends() when there is one.
    std::function<std::vector<std::string>(const nlohmann::json& options)> backends;
    // Whether the strategy works on this system. Empty = always. Called at most once per
    // registry (the answer is cached), so it should be cheap and leave nothing behind.
    std::function<support_status()> supported;
    // Validates options without touching the backend (config check). Throws config_error with a
    // pointer relative to the options. Empty = options must be null or {}.
    std::function<void(const nlohmann::json& options)> validate_options;
    // Builds a store. May throw (server down); selection then falls back.
    std::function<std::shared_ptr<store>(const nlohmann::json& options)> create;
    // Where the strategy comes from, for `locksmith strategies`: "built in", "module <file>",
    // "plugin <file>". Set by whoever registers it (a plugin's own value is replaced); empty
    // for a strategy a program adds itself.
    std::string origin;
};

// "not configured: give it its endpoint under strategies.redis.options (e.g. ...)": why a remote
// strategy without options is passed over, naming the config key that fixes it.
std::string not_configured_hint(const strategy_descriptor& d);

// Fills d.validate_options and d.create for a strategy whose options type reads itself
// (`static Options from_json(const nlohmann::json&)`, throwing config_error) and whose store
// `make(const Options&)` builds: both read the options by the same code.
template <class Options, class Make>
void set_factory(strategy_descriptor& d, Make make) {
    d.validate_options = [](const nlohmann::json& o) { (void)Options::from_json(o); };
    if constexpr (requires(const Options& o) {
                      { o.backends() } -> std::convertible_to<std::vector<std::string>>;
                  })
        d.backends = [](const nlohmann::json& o) { return Options::from_json(o).backends(); };
    d.create = [make](const nlohmann::json& o) -> std::shared_ptr<store> {
        return make(Options::from_json(o));
    };
}

struct strategy_info {
    strategy_descriptor descriptor;
    // What a store with the effective options offers (descriptor.capabilities_for).
    capability capabilities = capability::none;
    int effective_priority = 0;
    std::string priority_source;  // "default" or the settings' origin
    bool enabled = true;
    bool configured = false;  // the config gives options
    support_status support;
    nlohmann::json options;  // effective options (null when none)
};

struct selection_report {
    struct entry {
        std::string strategy;
        int priority = 0;
        bool candidate = false;   // passes every rule; candidates come first, best first
        std::string passed_over;  // why not a candidate (empty for candidates)
    };
    capability requested = capability::none;
    std::vector<entry> entries;
    // Set by lock_factory::explain_and_start when the winner's store cannot start.
    std::string start_error;
    // The winner, if any.
    const entry* chosen() const noexcept;
    // A readable explanation: the winner, then one line per strategy passed over.
    std::string to_string() const;
};

class strategy_registry {
  public:
    strategy_registry() = default;
    strategy_registry(const strategy_registry&) = delete;
    strategy_registry& operator=(const strategy_registry&) = delete;

    // Throws invalid_argument_error for a duplicate or malformed name, a priority outside
    // [min_priority, max_priority], no capabilities, or no factory.
    void add(strategy_descriptor descriptor);
    bool remove(std::string_view name);
    bool contains(std::string_view name) const;
    std::optional<strategy_descriptor> find(std::string_view name) const;
    std::vector<std::string> names() const;

    // Overrides are kept by name, so they also apply to a strategy registered later (a plugin
    // loaded after the config was read). Replaces any earlier override for the name.
    void set_override(const std::string& name, strategy_settings settings);
    void clear_overrides();

    // A config read against this registry (the config itself knows no registry):
    // configure: every strategy setting of `cfg` as an override (set_override; a setting with
    // no origin gets cfg.origin).
    void configure(const config& cfg);
    // Strategy names of `cfg` (in "strategies" or a lock rule) this registry does not know, and
    // options their strategy rejects: bare problems, as config::check lists them.
    std::vector<config_error> problems(const config& cfg) const;
    // Throws problems(cfg), if any, as one config_error (config::throw_problems).
    void validate(const config& cfg) const;
    // Every problem of a config document (`locksmith config check`): config::check's, then
    // problems() of the document as far as it could be read.
    std::vector<config_error> check(std::string_view json_text) const;

    strategy_info info(std::string_view name) const;  // throws invalid_argument_error if unknown
    std::vector<strategy_info> list() const;          // by name

    // Selection: a candidate has every requested bit, is enabled, configured when it needs to
    // be, and supported here; the highest effective priority wins, ties go by name.
    // Throws invalid_argument_error for an empty request.
    selection_report explain(capability required) const;
    // The candidates of explain(), best first. Throws no_strategy_error (with the report's
    // explanation) when there is none.
    std::vector<strategy_info> candidates(capability required) const;
    // The first of candidates(), probing no strategy below it. Throws as candidates() does.
    strategy_info best(capability required) const;

  private:
    enum class verdict { candidate, lacks, disabled, not_configured, unsupported };
    // The first selection rule `info` fails for `required`; probes only when every other
    // rule passes.
    verdict judge(const strategy_info& info, capability required) const;
    // Under the mutex: the descriptor and its settings; the rest is computed after, outside it.
    strategy_info settings_locked(const strategy_descriptor& d) const;
    std::vector<strategy_info> snapshot() const;
    void complete(strategy_info& info, bool probe) const;
    support_status probe_support(const strategy_descriptor& d) const;
    mutable std::mutex mutex_;
    mutable std::map<std::string, support_status, std::less<>> support_cache_;
    std::map<std::string, strategy_descriptor, std::less<>> descriptors_;
    std::map<std::string, strategy_settings, std::less<>> overrides_;
};

// The process-wide registry, created on first use with every built-in strategy.
strategy_registry& default_registry();

// Adds every built-in strategy of this build (the list is generated by CMake).
void register_builtin_strategies(strategy_registry& registry);

}  // namespace locksmith
