// SPDX-License-Identifier: MIT
#include "support/test_strategy.hpp"

#include <mutex>

#include <locksmith/errors.hpp>

namespace locksmith::test {

struct test_strategy::state {
    mutable std::mutex mutex;
    std::string unsupported_reason;
    std::string construction_failure;
    int probes = 0;
    int constructions = 0;
    int failed_constructions = 0;
    nlohmann::json last_options;
    std::shared_ptr<recording_store> last_store;
};

test_strategy::test_strategy(std::string name, int priority, capability caps)
    : name_(std::move(name)), priority_(priority), caps_(caps), state_(std::make_shared<state>()) {}

test_strategy& test_strategy::disabled_by_default() {
    enabled_by_default_ = false;
    return *this;
}

test_strategy& test_strategy::needs_configuration() {
    needs_configuration_ = true;
    return *this;
}

test_strategy& test_strategy::reject_option(std::string forbidden) {
    forbidden_option_ = std::move(forbidden);
    return *this;
}

test_strategy& test_strategy::unsupported(std::string reason) {
    std::lock_guard lock(state_->mutex);
    state_->unsupported_reason = std::move(reason);
    return *this;
}

test_strategy& test_strategy::fail_construction(std::string message) {
    std::lock_guard lock(state_->mutex);
    state_->construction_failure = std::move(message);
    return *this;
}

strategy_descriptor test_strategy::descriptor() const {
    strategy_descriptor d;
    d.name = name_;
    d.description = "test double " + name_;
    d.default_priority = priority_;
    d.capabilities = caps_;
    d.enabled_by_default = enabled_by_default_;
    d.needs_configuration = needs_configuration_;
    auto st = state_;
    d.supported = [st]() {
        std::lock_guard lock(st->mutex);
        ++st->probes;
        if (st->unsupported_reason.empty()) return support_status::yes();
        return support_status::no(st->unsupported_reason);
    };
    auto forbidden = forbidden_option_;
    d.validate_options = [forbidden](const nlohmann::json& options) {
        if (!options.is_null() && !options.is_object())
            throw config_error("config.type", "", "test strategy options must be an object");
        if (!forbidden.empty() && options.is_object() && options.contains(forbidden))
            throw config_error("config.unknown_key", "/" + forbidden,
                               "test strategy rejects option \"" + forbidden + "\"");
    };
    auto name = name_;
    auto caps = caps_;
    d.create = [st, name, caps](const nlohmann::json& options) -> std::shared_ptr<store> {
        std::lock_guard lock(st->mutex);
        st->last_options = options;
        if (!st->construction_failure.empty()) {
            ++st->failed_constructions;
            throw backend_error(name, "test", st->construction_failure);
        }
        ++st->constructions;
        st->last_store = std::make_shared<recording_store>(caps, name);
        return st->last_store;
    };
    return d;
}

int test_strategy::probes() const {
    std::lock_guard lock(state_->mutex);
    return state_->probes;
}
int test_strategy::constructions() const {
    std::lock_guard lock(state_->mutex);
    return state_->constructions;
}
int test_strategy::failed_constructions() const {
    std::lock_guard lock(state_->mutex);
    return state_->failed_constructions;
}
nlohmann::json test_strategy::last_options() const {
    std::lock_guard lock(state_->mutex);
    return state_->last_options;
}
std::shared_ptr<recording_store> test_strategy::last_store() const {
    std::lock_guard lock(state_->mutex);
    return state_->last_store;
}

}  // namespace locksmith::test
