#include <locksmith/lock_factory.hpp>

#include <cstdio>

#include <locksmith/errors.hpp>
#include <locksmith/module.hpp>

namespace locksmith {

namespace {

config config_from_environment_or_defaults() {
    if (auto c = config::from_environment()) return std::move(*c);
    return config{};
}

}  // namespace

lock_factory::lock_factory() : lock_factory(config_from_environment_or_defaults()) {}

lock_factory::lock_factory(config cfg, strategy_registry& registry)
    : config_(std::move(cfg)), registry_(&registry) {
    // Plugins first: their strategies are selected, configured and checked like built-in ones.
    load_plugins_or_throw(config_, *registry_);
    config_.apply_to(*registry_);
    config_.validate_against(*registry_);
    fallback_handler_ = [](const std::string& message) {
        std::fprintf(stderr, "locksmith: %s\n", message.c_str());
    };
}

void lock_factory::on_fallback(std::function<void(const std::string&)> handler) {
    std::lock_guard guard(mutex_);
    fallback_handler_ = std::move(handler);
}

lock_factory::resolved lock_factory::resolve(std::string_view name,
                                             const lock_request& request) const {
    validate_lock_name(name);
    const lock_rule* rule = config_.rule_for(name);
    resolved r;
    r.require = request.require != capability::none ? request.require
                : rule && rule->require            ? *rule->require
                                                   : capability::exclusive;
    r.strategy = !request.strategy.empty() ? request.strategy
                 : rule && rule->strategy && request.require == capability::none ? *rule->strategy
                                                                                 : std::string();
    r.ttl = request.ttl ? *request.ttl : rule && rule->ttl ? *rule->ttl : config_.default_ttl;
    validate_ttl(r.ttl);
    r.auto_release = request.auto_release.value_or(config_.auto_release);
    r.fallback = request.fallback ? *request.fallback
                 : rule && rule->fallback ? *rule->fallback
                                          : config_.fallback;
    return r;
}

std::shared_ptr<store> lock_factory::store_for(const std::string& strategy) {
    std::lock_guard guard(mutex_);
    if (auto it = stores_.find(strategy); it != stores_.end()) return it->second;
    auto info = registry_->info(strategy);  // throws for an unknown name
    if (!info.support.supported)
        throw no_strategy_error("strategy '" + strategy + "' is not supported here: " +
                                info.support.reason);
    if (info.descriptor.needs_configuration && !info.configured)
        throw no_strategy_error("strategy '" + strategy + "' is " +
                                not_configured_hint(info.descriptor));
    std::shared_ptr<store> s;
    try {
        s = info.descriptor.create(info.options);
    } catch (const config_error& e) {
        throw config_.options_error(strategy, e);
    }
    if (!s) throw backend_error(strategy, "", "strategy '" + strategy + "' returned no store");
    stores_.emplace(strategy, s);
    return s;
}

std::shared_ptr<store> lock_factory::select_store(capability required, bool fallback) {
    auto candidates = registry_->candidates(required);
    const auto& winner = candidates.front().descriptor.name;
    if (!fallback) {
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
    const bool distributed = has(candidates.front().descriptor.capabilities, capability::distributed);
    std::string failures;
    for (const auto& candidate : candidates) {
        // Never fall back across scopes: a local lock cannot stand in for a distributed one,
        // and the admin who ranked a local strategy first did not ask for a remote one.
        if (has(candidate.descriptor.capabilities, capability::distributed) != distributed) continue;
        try {
            auto s = store_for(candidate.descriptor.name);
            if (!failures.empty()) {
                std::function<void(const std::string&)> handler;
                {
                    std::lock_guard guard(mutex_);
                    handler = fallback_handler_;
                }
                if (handler)
                    handler("falling back to strategy '" + candidate.descriptor.name +
                            "' for '" + to_string(required) + "':" + failures);
            }
            return s;
        } catch (const config_error&) {
            throw;  // a broken config is the admin's to fix, not a reason to fall back
        } catch (const std::exception& e) {
            failures += " '" + candidate.descriptor.name + "' failed to start (" + e.what() + ");";
        }
    }
    if (!failures.empty() && failures.back() == ';') failures.pop_back();
    throw no_strategy_error("no strategy for '" + to_string(required) +
                            "' could start:" + failures);
}

named_lock lock_factory::create_lock(std::string name, const lock_request& request) {
    auto r = resolve(name, request);
    std::shared_ptr<store> s;
    if (!r.strategy.empty()) {
        const auto info = registry_->info(r.strategy);
        if (!info.enabled)
            throw no_strategy_error(
                "strategy '" + r.strategy + "', pinned for lock '" + name + "', is disabled" +
                (info.descriptor.enabled_by_default ? " by the config"
                                                    : " by default (enable it in the config)"));
        s = store_for(r.strategy);
        const capability missing = r.require & ~s->capabilities();
        if (missing != capability::none)
            throw no_strategy_error("strategy '" + r.strategy + "' lacks " + to_string(missing) +
                                    " required for lock '" + name + "'");
    } else {
        s = select_store(r.require, r.fallback);
    }
    lock_options options;
    options.ttl = r.ttl;
    options.auto_release = r.auto_release;
    options.retry = config_.retry;
    options.on_error = request.on_error;
    return named_lock(std::move(s), std::make_shared<key>(std::move(name)), std::move(options));
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
        throw not_serializable_error("strategy '" + strategy +
                                     "' binds its locks to one process; its keys cannot be continued");
    auto r = resolve(owner->resource(), request);
    lock_options options;
    options.ttl = r.ttl;
    options.auto_release = request.auto_release.value_or(false);
    options.retry = config_.retry;
    options.on_error = request.on_error;
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
    return registry_->candidates(r.require).front().descriptor.name;
}

}  // namespace locksmith
