// SPDX-License-Identifier: MIT
#include <locksmith/lock_factory.hpp>

#include <locksmith/author/module.hpp>
#include <locksmith/errors.hpp>

#include "core/logging.hpp"
#include "registry/lacks_reason.hpp"

namespace locksmith {

lock_factory::lock_factory() : lock_factory(config::discover()) {}

lock_factory::lock_factory(config cfg, strategy_registry& registry)
    : config_(std::move(cfg)), registry_(&registry) {
    // Plugins first: their strategies are selected, configured and checked like built-in ones.
    load_plugins_or_throw(config_, *registry_);
    registry_->configure(config_);
    registry_->validate(config_);
}

void lock_factory::set_logger(std::shared_ptr<log_sink> sink, std::chrono::milliseconds slow_wait) {
    std::lock_guard guard(mutex_);
    logger_ = std::move(sink);
    slow_wait_ = slow_wait;
}

void lock_factory::log(log_level level, const char* event, std::string message,
                       const std::string& name, const std::string& strategy, std::string error) {
    std::shared_ptr<log_sink> sink;
    {
        std::lock_guard guard(mutex_);
        sink = logger_;
    }
    if (!sink) return;
    log_record record;
    record.level = level;
    record.event = event;
    record.message = std::move(message);
    record.name = name;
    record.strategy = strategy;
    record.error = std::move(error);
    emit(sink, record);
}

lock_options lock_factory::options_for(const lock_resolution& r, const lock_request& request,
                                       bool auto_release) {
    lock_options options;
    options.ttl = r.ttl;
    options.auto_release = auto_release;
    options.retry = config_.retry;
    options.on_error = request.on_error;
    options.auto_refresh = request.auto_refresh;
    std::lock_guard guard(mutex_);
    options.logger = logger_;
    options.slow_wait = slow_wait_;
    return options;
}

lock_resolution lock_factory::resolve(std::string_view name, const lock_request& request) const {
    validate_lock_name(name);
    const lock_rule* rule = config_.rule_for(name);
    lock_resolution r;
    r.rule = rule;
    r.require_from_request = request.require != capability::none;
    r.require = r.require_from_request  ? request.require
                : rule && rule->require ? *rule->require
                                        : capability::exclusive;
    r.strategy_from_request = !request.strategy.empty();
    // A rule's pin yields to a request that names its own capabilities.
    r.strategy = r.strategy_from_request                                         ? request.strategy
                 : rule && rule->strategy && request.require == capability::none ? *rule->strategy
                                                                                 : std::string();
    r.ttl = request.ttl ? *request.ttl : rule && rule->ttl ? *rule->ttl : config_.default_ttl;
    validate_ttl(r.ttl);
    r.auto_release = request.auto_release.value_or(config_.auto_release);
    r.fallback = request.fallback         ? *request.fallback
                 : rule && rule->fallback ? *rule->fallback
                                          : config_.fallback;
    return r;
}

std::shared_ptr<store> lock_factory::store_for(const std::string& strategy) {
    std::lock_guard guard(mutex_);
    if (auto it = stores_.find(strategy); it != stores_.end()) return it->second;
    auto info = registry_->info(strategy);  // throws for an unknown name
    if (!info.support.supported)
        throw no_strategy_error("strategy '" + strategy +
                                "' is not supported here: " + info.support.reason);
    if (info.descriptor.needs_configuration && !info.configured)
        throw no_strategy_error("strategy '" + strategy + "' is " +
                                not_configured_hint(info.descriptor));
    std::shared_ptr<store> s;
    try {
        s = info.descriptor.create(info.options);
    } catch (const config_error& e) {
        config_.throw_problems({config::options_problem(strategy, e)});
    }
    if (!s) throw backend_error(strategy, "", "strategy '" + strategy + "' returned no store");
    stores_.emplace(strategy, s);
    return s;
}

std::shared_ptr<store> lock_factory::select_store(capability required, bool fallback) {
    if (!fallback) {
        const auto winner = registry_->best(required).descriptor.name;
        // One name, one mechanism: a process that cannot start the winner must not lock the
        // name somewhere the others do not look.
        try {
            return store_for(winner);
        } catch (const config_error&) {
            throw;
        } catch (const std::exception& e) {
            throw no_strategy_error(
                "strategy '" + winner + "', chosen for '" + to_string(required) +
                "', cannot start: " + e.what() +
                ". Not falling back to another strategy: holders on two strategies do not "
                "exclude each other. Start its server, or pin one strategy for every user of "
                "the name (--strategy, or a lock rule's \"strategy\"); \"fallback\": true in "
                "the config's defaults or lock rule allows falling back");
        }
    }
    const auto candidates = registry_->candidates(required);
    const bool distributed = has(candidates.front().capabilities, capability::distributed);
    std::string failures;  // for the sentence
    std::string errors;    // the errors alone, for the log record's `error`
    for (const auto& candidate : candidates) {
        // Never fall back across scopes: a local lock cannot stand in for a distributed one,
        // and the admin who ranked a local strategy first did not ask for a remote one.
        if (has(candidate.capabilities, capability::distributed) != distributed) continue;
        try {
            auto s = store_for(candidate.descriptor.name);
            if (!failures.empty()) {
                failures.pop_back();  // the last ';'
                log(log_level::warning, "fallback",
                    "falling back to strategy '" + candidate.descriptor.name + "' for '" +
                        to_string(required) + "':" + failures,
                    "", candidate.descriptor.name, errors);
            }
            return s;
        } catch (const config_error&) {
            throw;  // a broken config is the admin's to fix, not a reason to fall back
        } catch (const std::exception& e) {
            failures += " '" + candidate.descriptor.name + "' failed to start (" + e.what() + ");";
            errors += (errors.empty() ? "" : "; ") + std::string(e.what());
        }
    }
    if (!failures.empty() && failures.back() == ';') failures.pop_back();
    throw no_strategy_error("no strategy for '" + to_string(required) +
                            "' could start:" + failures);
}

std::shared_ptr<store> lock_factory::store_for_resolution(const lock_resolution& r,
                                                          const std::string& what) {
    if (r.strategy.empty()) return select_store(r.require, r.fallback);
    const auto info = registry_->info(r.strategy);
    if (!info.enabled)
        throw no_strategy_error(
            "strategy '" + r.strategy + "', pinned for " + what + ", is disabled" +
            (info.descriptor.enabled_by_default ? " by the config"
                                                : " by default (enable it in the config)"));
    auto s = store_for(r.strategy);
    const capability missing = r.require & ~s->capabilities();
    if (missing != capability::none)
        throw no_strategy_error("strategy '" + r.strategy + "' lacks " + to_string(missing) +
                                " required for " + what + lacks_reason(info.descriptor, missing));
    return s;
}

void lock_factory::warn_if_excludes_nothing(const lock_options& options, const store& s,
                                            const std::string& name) {
    // Only with a logger: finding the descriptor copies it, on every create_lock.
    if (options.logger)
        if (const auto d = registry_->find(s.strategy()); d && d->excludes_nothing)
            log(log_level::warning, "locking_off",
                "lock '" + name + "' uses strategy '" + s.strategy() +
                    "', which excludes nothing: locking is off for it (enabled by " +
                    config_.origin + ")",
                name, s.strategy());
}

named_lock lock_factory::create_lock(std::string name, const lock_request& request) {
    auto r = resolve(name, request);
    auto s = store_for_resolution(r, "lock '" + name + "'");
    auto options = options_for(r, request, r.auto_release);
    warn_if_excludes_nothing(options, *s, name);
    return named_lock(std::move(s), std::make_shared<key>(std::move(name)), std::move(options));
}

named_semaphore lock_factory::create_semaphore(std::string name, std::uint32_t limit,
                                               const lock_request& request) {
    auto r = resolve(name, request);
    if (limit == 0) {
        if (!r.rule || !r.rule->limit)
            throw invalid_argument_error("semaphore '" + name +
                                         "' has no limit: give one, or set \"limit\" in a lock "
                                         "rule of the config that matches the name");
        limit = *r.rule->limit;
    }
    validate_semaphore_limit(limit);
    // Only strategies that declare `counting` are candidates; a pin without it is refused.
    r.require |= capability::counting;
    auto s = store_for_resolution(r, "semaphore '" + name + "'");
    auto options = options_for(r, request, r.auto_release);
    warn_if_excludes_nothing(options, *s, name);
    auto owner = std::make_shared<key>(std::move(name));
    owner->set_limit(limit);
    return named_semaphore(std::move(s), std::move(owner), std::move(options));
}

named_lock lock_factory::create_lock(std::string name, capability required) {
    lock_request request;
    request.require = required;
    return create_lock(std::move(name), request);
}

named_lock lock_factory::create_lock_from_key(const nlohmann::json& serialized_key,
                                              const lock_request& request) {
    if (!serialized_key.is_object() || !serialized_key.contains("strategy") ||
        !serialized_key["strategy"].is_string())
        throw invalid_argument_error("serialized key: 'strategy' is missing or not a string");
    auto owner = std::make_shared<key>(key::from_json(serialized_key));
    const auto strategy = serialized_key["strategy"].get<std::string>();
    auto s = store_for(strategy);
    if (!has(s->capabilities(), capability::serializable))
        throw not_serializable_error(
            "strategy '" + strategy +
            "' binds its locks to one process; its keys cannot be continued");
    if (owner->limit() != 0)
        throw invalid_argument_error("serialized key: it holds a permit of semaphore '" +
                                     owner->resource() + "', not a lock");
    auto r = resolve(owner->resource(), request);
    auto options = options_for(r, request, request.auto_release.value_or(false));
    return named_lock(std::move(s), std::move(owner), std::move(options));
}

selection_report lock_factory::explain(capability required) const {
    return registry_->explain(required);
}

selection_report lock_factory::explain_and_start(capability required) {
    auto report = registry_->explain(required);
    if (auto* winner = report.chosen()) {
        try {
            (void)store_for(winner->strategy);
        } catch (const std::exception& e) {
            report.start_error = e.what();
        }
    }
    return report;
}

std::string lock_factory::strategy_for(std::string_view name, const lock_request& request) const {
    auto r = resolve(name, request);
    if (!r.strategy.empty()) return r.strategy;
    return registry_->best(r.require).descriptor.name;
}

}  // namespace locksmith
