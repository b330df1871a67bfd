// SPDX-License-Identifier: MIT
// lock_factory: the entry point. Turns a name and required capabilities into a named_lock on
// the best strategy, following the config; and a name and a limit into a named_semaphore.
//
//   lock_request  what a caller asks for beyond the name
//   lock_factory  selection, fallback, one store per strategy (shared by its locks)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <locksmith/capability.hpp>
#include <locksmith/config.hpp>
#include <locksmith/logger.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>
#include <locksmith/registry.hpp>

namespace locksmith {

struct lock_request {
    // Required capabilities; none = the matching lock rule's, else exclusive.
    capability require = capability::none;
    // Pin a strategy by name (skips selection). Empty = the rule's, else selection.
    std::string strategy;
    // Overrides the rule's and the config's default TTL.
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<bool> auto_release;
    // May the next candidate strategy be used when the chosen one cannot start? Unset = the
    // lock rule's `fallback`, else the config's `defaults.fallback` (false).
    std::optional<bool> fallback;
    error_handler on_error{};
    // lock_options::auto_refresh: renewed from the library's renewal threads while held, and
    // told of a loss at the lease's end even while a renewal is stuck (`locksmith run` does).
    bool auto_refresh = false;
};

// How create_lock(name, request) decides, and from where (lock_factory::resolve).
struct lock_resolution {
    capability require = capability::exclusive;
    std::string strategy;  // pinned, or empty: selection among the candidates decides
    std::chrono::milliseconds ttl{};
    bool auto_release = true;
    bool fallback = false;
    const lock_rule* rule = nullptr;     // the config's lock rule for the name, if one matches
    bool require_from_request = false;   // else from `rule` when it has `require`, else default
    bool strategy_from_request = false;  // else, when `strategy` is set, from `rule`
};

class lock_factory {
  public:
    // The config config::discover() finds (LOCKSMITH_CONFIG, ~/.config/locksmith/config.json,
    // /etc/locksmith/config.json, else built-in defaults); the default registry.
    lock_factory();
    // Loads `cfg`'s plugins into `registry` (load_plugins, <locksmith/author/module.hpp>), applies
    // `cfg` to it (overrides by name) and validates its strategy names.
    // Throws config_error. `registry` must outlive the factory.
    explicit lock_factory(config cfg, strategy_registry& registry = default_registry());

    // A new owner of `name`. Throws invalid_argument_error (bad name or TTL), no_strategy_error
    // (nothing matches, or the chosen strategy cannot start and fallback is off), config_error.
    named_lock create_lock(std::string name, const lock_request& request = {});
    // TYPO3's createLocker($id, $capabilities).
    named_lock create_lock(std::string name, capability required);
    // A new owner of a permit of the counting semaphore `name` (named_semaphore.hpp): at most
    // `limit` owners hold one at once. `limit` 0 = the matching lock rule's `limit`. Selection
    // as for create_lock, with capability::counting added to what is required: only strategies
    // that declare it are candidates, and a pinned one without it is refused.
    // Throws invalid_argument_error (bad name, TTL or limit; no limit given and no rule sets
    // one), no_strategy_error (no strategy offers counting and the rest of `require`, or the
    // chosen one cannot start and fallback is off), config_error.
    named_semaphore create_semaphore(std::string name, std::uint32_t limit,
                                     const lock_request& request = {});
    // Continues an owner serialized by named_lock::serialize_key() (possibly in another
    // process). The strategy comes from the key. Auto-release defaults to off here.
    named_lock create_lock_from_key(const nlohmann::json& serialized_key,
                                    const lock_request& request = {});

    // Which strategy create_lock would choose for `required`, and why (no store is created).
    selection_report explain(capability required) const;
    // The same, and then starts the winner's store (connects to its server), so that the
    // report says whether create_lock would succeed: `start_error` is set when it cannot.
    selection_report explain_and_start(capability required);
    // The strategy create_lock(name, request) would use, following rules and pins.
    std::string strategy_for(std::string_view name, const lock_request& request = {}) const;
    // What create_lock(name, request) resolves the request to, and where each part came from
    // (the request, the matching lock rule, the defaults). Throws invalid_argument_error for a
    // bad name or TTL. The rule pointer lives as long as the factory.
    lock_resolution resolve(std::string_view name, const lock_request& request = {}) const;

    // The store of one strategy, created on first use and shared afterwards.
    std::shared_ptr<store> store_for(const std::string& strategy);

    // Where the factory and the locks it creates from now on log (logger.hpp): fallbacks, a
    // lock on a strategy that excludes nothing, acquire/release/refresh failures, renewals and
    // lost locks, and waits that last longer than `slow_wait` (0 = never). Default: nowhere.
    // Null `sink` stops logging.
    void set_logger(std::shared_ptr<log_sink> sink,
                    std::chrono::milliseconds slow_wait = std::chrono::seconds(1));

    const config& settings() const noexcept { return config_; }
    strategy_registry& registry() const noexcept { return *registry_; }

  private:
    std::shared_ptr<store> select_store(capability required, bool fallback);
    // The pinned store (checked: enabled, has r.require) or the selected one; `what` names
    // the lock or semaphore in messages.
    std::shared_ptr<store> store_for_resolution(const lock_resolution& r, const std::string& what);
    void warn_if_excludes_nothing(const lock_options& options, const store& s,
                                  const std::string& name);
    lock_options options_for(const lock_resolution& r, const lock_request& request,
                             bool auto_release);
    void log(log_level level, const char* event, std::string message, const std::string& name,
             const std::string& strategy, std::string error = {});

    config config_;
    strategy_registry* registry_;
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<store>, std::less<>> stores_;
    // Passed on to every new lock (set_logger); guarded by mutex_.
    std::shared_ptr<log_sink> logger_;
    std::chrono::milliseconds slow_wait_{std::chrono::seconds(1)};
};

}  // namespace locksmith
