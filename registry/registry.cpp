// SPDX-License-Identifier: MIT
#include <locksmith/registry.hpp>

#include <algorithm>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

#include "registry/lacks_reason.hpp"

namespace locksmith {

std::string not_configured_hint(const strategy_descriptor& d) {
    std::string hint =
        "not configured: give it its endpoint under strategies." + d.name + ".options";
    if (d.example_options.is_object() && !d.example_options.empty()) {
        const auto first = d.example_options.begin();
        hint += " (e.g. strategies." + d.name + ".options." + first.key() + " = " +
                first.value().dump() + ")";
    }
    return hint + " in the config";
}

std::string lacks_reason(const strategy_descriptor& d, capability missing) {
    // Only combined's counting: its capabilities are computed from its members', so a reader
    // expects counting over counting members; the quorum is what takes it away.
    if (d.name == "combined" && has(missing, capability::counting))
        return " (a majority quorum of counting members does not keep at most N holders: with "
               "3 members of 2 permits each, owners holding A+B, B+C and A+C are 3; see README, "
               "\"Why combined does not count\")";
    return "";
}

const selection_report::entry* selection_report::chosen() const noexcept {
    return !entries.empty() && entries.front().candidate ? &entries.front() : nullptr;
}

std::string selection_report::to_string() const {
    std::string out;
    if (auto* winner = chosen())
        out = "for '" + locksmith::to_string(requested) + "' the choice is '" + winner->strategy +
              "' (priority " + std::to_string(winner->priority) + ")" +
              (start_error.empty() ? "" : ", but it cannot start: " + start_error);
    else if (std::any_of(entries.begin(), entries.end(),
                         [](const entry& e) { return e.passed_over.rfind("lacks ", 0) != 0; }))
        // Some strategy has the capabilities but is disabled, unconfigured or unsupported here:
        // the fix is in the config or the system, not in the request.
        out = "no usable strategy for '" + locksmith::to_string(requested) +
              "' (the strategies that offer it are passed over below)";
    else
        out = "no strategy offers '" + locksmith::to_string(requested) + "'";
    for (const auto& e : entries) {
        if (&e == chosen()) continue;
        out += "\n  " + e.strategy + " (priority " + std::to_string(e.priority) + "): ";
        out += e.candidate ? "candidate with lower priority" : e.passed_over;
    }
    return out;
}

void strategy_registry::add(strategy_descriptor d) {
    if (!valid_strategy_name(d.name))
        throw invalid_argument_error("strategy name '" + d.name +
                                     "' must be 1-64 lowercase letters, digits or _");
    if (d.default_priority < min_priority || d.default_priority > max_priority)
        throw invalid_argument_error("strategy '" + d.name + "' has priority " +
                                     std::to_string(d.default_priority) +
                                     "; it must be in [0, 100]");
    if (d.capabilities == capability::none)
        throw invalid_argument_error("strategy '" + d.name + "' declares no capabilities");
    if (!d.create) throw invalid_argument_error("strategy '" + d.name + "' has no factory");
    std::lock_guard guard(mutex_);
    if (descriptors_.count(d.name))
        throw invalid_argument_error("strategy '" + d.name + "' is already registered");
    auto name = d.name;
    descriptors_.emplace(std::move(name), std::move(d));
}

bool strategy_registry::remove(std::string_view name) {
    std::lock_guard guard(mutex_);
    auto it = descriptors_.find(name);
    if (it == descriptors_.end()) return false;
    descriptors_.erase(it);
    support_cache_.erase(std::string(name));
    return true;
}

bool strategy_registry::contains(std::string_view name) const {
    std::lock_guard guard(mutex_);
    return descriptors_.find(name) != descriptors_.end();
}

std::optional<strategy_descriptor> strategy_registry::find(std::string_view name) const {
    std::lock_guard guard(mutex_);
    auto it = descriptors_.find(name);
    if (it == descriptors_.end()) return std::nullopt;
    return it->second;
}

std::vector<std::string> strategy_registry::names() const {
    std::lock_guard guard(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, d] : descriptors_) out.push_back(name);
    return out;
}

void strategy_registry::set_override(const std::string& name, strategy_settings settings) {
    std::lock_guard guard(mutex_);
    overrides_[name] = std::move(settings);
}

void strategy_registry::clear_overrides() {
    std::lock_guard guard(mutex_);
    overrides_.clear();
}

strategy_info strategy_registry::settings_locked(const strategy_descriptor& d) const {
    strategy_info info;
    info.descriptor = d;
    info.effective_priority = d.default_priority;
    info.priority_source = "default";
    info.enabled = d.enabled_by_default;
    info.capabilities = d.capabilities;
    if (auto it = overrides_.find(d.name); it != overrides_.end()) {
        const auto& o = it->second;
        if (o.priority) {
            info.effective_priority = *o.priority;
            info.priority_source = o.origin;
        }
        if (o.enabled) info.enabled = *o.enabled;
        info.options = o.options;
        info.configured = !o.options.is_null();
    }
    return info;
}

std::vector<strategy_info> strategy_registry::snapshot() const {
    std::lock_guard guard(mutex_);
    std::vector<strategy_info> out;
    for (const auto& [name, d] : descriptors_) out.push_back(settings_locked(d));
    return out;
}

// Outside the mutex: the descriptor's own code may use the registry (`combined` asks for its
// members' capabilities), and a probe may take a while.
void strategy_registry::complete(strategy_info& info, bool probe) const {
    const auto& d = info.descriptor;
    if (d.capabilities_for && info.configured) info.capabilities = d.capabilities_for(info.options);
    if (probe) info.support = probe_support(d);
}

support_status strategy_registry::probe_support(const strategy_descriptor& d) const {
    // A probe answers for the life of the process: whether SysV IPC or a kernel feature exists
    // does not change, and `locksmith run` should not pay for probing on every selection.
    {
        std::lock_guard guard(mutex_);
        if (auto it = support_cache_.find(d.name); it != support_cache_.end()) return it->second;
    }
    support_status status;
    try {
        status = d.supported ? d.supported() : support_status::yes();
    } catch (const std::exception& e) {
        status = support_status::no(std::string("its probe failed: ") + e.what());
    }
    std::lock_guard guard(mutex_);
    return support_cache_.emplace(d.name, status).first->second;
}

strategy_info strategy_registry::info(std::string_view name) const {
    strategy_info info;
    {
        std::lock_guard guard(mutex_);
        auto it = descriptors_.find(name);
        if (it == descriptors_.end())
            throw invalid_argument_error("unknown strategy '" + std::string(name) + "'");
        info = settings_locked(it->second);
    }
    complete(info, true);
    return info;
}

std::vector<strategy_info> strategy_registry::list() const {
    auto out = snapshot();
    for (auto& info : out) complete(info, true);
    return out;
}

strategy_registry::verdict strategy_registry::judge(const strategy_info& info,
                                                    capability required) const {
    if ((required & ~info.capabilities) != capability::none) return verdict::lacks;
    if (!info.enabled) return verdict::disabled;
    if (info.descriptor.needs_configuration && !info.configured) return verdict::not_configured;
    // Probed last: only the strategies that pass every other rule.
    if (!probe_support(info.descriptor).supported) return verdict::unsupported;
    return verdict::candidate;
}

// Highest effective priority first; ties by name (a snapshot is in name order).
static void by_priority(std::vector<strategy_info>& infos) {
    std::stable_sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) {
        return a.effective_priority > b.effective_priority;
    });
}

static void require_some(capability required) {
    if (required == capability::none)
        throw invalid_argument_error("a lock request must name at least one capability");
}

selection_report strategy_registry::explain(capability required) const {
    require_some(required);
    selection_report report;
    report.requested = required;
    auto infos = snapshot();
    for (auto& info : infos) complete(info, false);
    by_priority(infos);
    for (const auto& info : infos) {
        selection_report::entry e;
        e.strategy = info.descriptor.name;
        e.priority = info.effective_priority;
        switch (judge(info, required)) {
            case verdict::candidate:
                e.candidate = true;
                break;
            case verdict::lacks: {
                const capability missing = required & ~info.capabilities;
                e.passed_over =
                    "lacks " + to_string(missing) +
                    (has(info.descriptor.capabilities, missing) ? " with its options" : "") +
                    lacks_reason(info.descriptor, missing);
                break;
            }
            case verdict::disabled:
                e.passed_over = info.descriptor.enabled_by_default
                                    ? "disabled by the config"
                                    : "disabled by default (enable it in the config)";
                break;
            case verdict::not_configured:
                e.passed_over = not_configured_hint(info.descriptor);
                break;
            case verdict::unsupported:
                e.passed_over = "not supported here: " + probe_support(info.descriptor).reason;
                break;
        }
        report.entries.push_back(std::move(e));
    }
    // Candidates first (the rest keep their order: best first).
    std::stable_partition(report.entries.begin(), report.entries.end(),
                          [](const auto& e) { return e.candidate; });
    return report;
}

std::vector<strategy_info> strategy_registry::candidates(capability required) const {
    auto report = explain(required);
    std::vector<strategy_info> out;
    for (const auto& e : report.entries)
        if (e.candidate) out.push_back(info(e.strategy));
    if (out.empty()) throw no_strategy_error(report.to_string());
    return out;
}

strategy_info strategy_registry::best(capability required) const {
    require_some(required);
    auto infos = snapshot();
    for (auto& info : infos) complete(info, false);
    by_priority(infos);
    // Judged best first, so that the strategies below the winner are never probed (a probe
    // creates and removes a semaphore, a /dev/shm file: work on every `locksmith run`).
    for (auto& info : infos)
        if (judge(info, required) == verdict::candidate) {
            info.support = probe_support(info.descriptor);
            return info;
        }
    throw no_strategy_error(explain(required).to_string());
}

void strategy_registry::configure(const config& cfg) {
    for (auto [name, settings] : cfg.strategies) {
        if (settings.origin.empty()) settings.origin = cfg.origin;
        set_override(name, std::move(settings));
    }
}

std::vector<config_error> strategy_registry::problems(const config& cfg) const {
    std::vector<config_error> problems;
    auto known = [&] {
        std::string list;
        for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
        return list;
    };
    for (const auto& [name, s] : cfg.strategies) {
        auto d = find(name);
        if (!d) {
            problems.emplace_back("config.unknown_strategy",
                                  "/strategies/" + json_pointer_token(name),
                                  "unknown strategy '" + name + "' (registered: " + known() + ")");
            continue;
        }
        try {
            if (d->validate_options)
                d->validate_options(s.options);
            else
                options_reader(s.options).finish();
        } catch (const config_error& e) {
            problems.push_back(config::options_problem(name, e));
        }
    }
    for (const auto& rule : cfg.locks) {
        if (rule.strategy && !contains(*rule.strategy)) {
            problems.emplace_back(
                "config.unknown_strategy",
                "/locks/" + json_pointer_token(rule.pattern) + "/strategy",
                "unknown strategy '" + *rule.strategy + "' (registered: " + known() + ")");
            continue;
        }
        // A limit makes the rule's names counting semaphores: a pinned strategy must count.
        if (rule.strategy && rule.limit) {
            const auto d = find(*rule.strategy);
            if (d && !has(d->capabilities, capability::counting))
                problems.emplace_back(
                    "config.limit_without_counting",
                    "/locks/" + json_pointer_token(rule.pattern) + "/limit",
                    "the rule sets a limit (counting semaphores) and pins strategy '" +
                        *rule.strategy + "', which lacks counting" +
                        lacks_reason(*d, capability::counting));
        }
    }
    return problems;
}

void strategy_registry::validate(const config& cfg) const {
    if (auto found = problems(cfg); !found.empty()) cfg.throw_problems(found);
}

std::vector<config_error> strategy_registry::check(std::string_view json_text) const {
    std::optional<config> read;
    auto found = config::check(json_text, &read);
    if (read) {
        auto more = problems(*read);
        found.insert(found.end(), more.begin(), more.end());
    }
    return found;
}

strategy_registry& default_registry() {
    static strategy_registry* registry = [] {
        auto* r = new strategy_registry();  // never destroyed: stores may outlive static teardown
        register_builtin_strategies(*r);
        return r;
    }();
    return *registry;
}

}  // namespace locksmith
