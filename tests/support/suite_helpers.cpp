// SPDX-License-Identifier: MIT
#include "support/suite_helpers.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <locksmith/errors.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::test {

std::shared_ptr<store> create_store(const strategy_under_test& s) {
    auto descriptor = default_registry().find(s.name);
    if (!descriptor) throw invalid_argument_error("strategy \"" + s.name + "\" is not built in");
    return descriptor->create(s.options.value());
}

capability expected_capabilities(const strategy_descriptor& d, const strategy_under_test& s) {
    return d.capabilities_for && s.options ? d.capabilities_for(*s.options) : d.capabilities;
}

std::string unique_resource(std::string_view label) {
    static std::atomic<int> counter{0};
    return std::string(label) + "." + std::to_string(::getpid()) + "." + std::to_string(++counter);
}

void remove_test_lock_dirs() {
    for (const auto& s : strategies_under_test()) {
        if (!s.options || !s.options->is_object()) continue;
        auto it = s.options->find("lock_dir");
        if (it == s.options->end() || !it->is_string()) continue;
        std::error_code ec;
        std::filesystem::remove_all(it->get<std::string>(), ec);
    }
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
        if (std::chrono::steady_clock::now() >= give_up) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

}  // namespace locksmith::test
