// SPDX-License-Identifier: MIT
// The check of a plugin's entry point (detail::enter, registry/plugin_entry.hpp), which every
// module and plugin passes: its struct (API version, ABI, name, version, registration function)
// and what its registration hands over (descriptors, failures), then the registry's own check of
// each descriptor, as load_plugin does, and the listing that shows them. The input drives a
// plugin of any shape. Properties:
//  - nothing but invalid_argument_error is thrown (by the registry, for a bad descriptor);
//  - a plugin built for another API version or C++ ABI is refused before any of its code runs;
//  - a plugin is accepted exactly when it reports no failure, and then hands over what it added.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstring>
#include <iterator>

#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "registry/plugin_entry.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

FuzzedDataProvider* input = nullptr;
locksmith_plugin plugin{};
locksmith_cxx_abi abi{};
std::string name, version;
bool registration_ran = false;
std::size_t strategies_added = 0;

const locksmith_plugin* entry() {
    return input->ConsumeBool() ? &plugin : nullptr;
}

strategy_descriptor descriptor() {
    strategy_descriptor d;
    d.name = input->ConsumeRandomLengthString(80);
    d.description = input->ConsumeRandomLengthString(80);
    d.default_priority = input->ConsumeIntegral<int>();
    d.capabilities = capability(input->ConsumeIntegral<std::uint32_t>());
    if (input->ConsumeBool())
        d.create = [](const nlohmann::json&) -> std::shared_ptr<store> { return nullptr; };
    if (input->ConsumeBool()) d.validate_options = [](const nlohmann::json&) {};
    d.needs_configuration = input->ConsumeBool();
    return d;
}

int register_strategies(locksmith_host* host) {
    registration_ran = true;
    for (int i = input->ConsumeIntegralInRange(0, 4); i > 0; --i) {
        switch (input->ConsumeIntegralInRange(0, 3)) {
            case 0:
            case 1: {
                const auto d = descriptor();
                if (host->add_strategy(host, &d) == 0) ++strategies_added;
                break;
            }
            case 2:
                host->fail(host, nullptr);
                break;
            case 3:
                host->fail(host, input->ConsumeRandomLengthString(80).c_str());
                break;
        }
    }
    return input->ConsumeBool() ? 0 : input->ConsumeIntegral<int>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider provider(data, size);
    input = &provider;
    registration_ran = false;
    strategies_added = 0;

    plugin.api_version = provider.ConsumeBool() ? LOCKSMITH_PLUGIN_API_VERSION
                                                : provider.ConsumeIntegral<std::uint32_t>();
    abi = this_cxx_abi();
    const int abi_change = provider.ConsumeIntegralInRange(0, 10);
    if (abi_change > 0) {
        std::uint32_t fields[sizeof abi / sizeof(std::uint32_t)];
        std::memcpy(fields, &abi, sizeof abi);
        fields[std::size_t(abi_change - 1) % std::size(fields)] =
            provider.ConsumeIntegral<std::uint32_t>();
        std::memcpy(&abi, fields, sizeof abi);
    }
    const locksmith_cxx_abi mine = this_cxx_abi();
    const bool abi_matches = std::memcmp(&abi, &mine, sizeof abi) == 0;
    plugin.abi = provider.ConsumeBool() ? &abi : nullptr;
    name = provider.ConsumeRandomLengthString(80);
    version = provider.ConsumeRandomLengthString(80);
    plugin.name = provider.ConsumeBool() ? name.c_str() : nullptr;
    plugin.version = provider.ConsumeBool() ? version.c_str() : nullptr;
    plugin.register_strategies = provider.ConsumeBool() ? &register_strategies : nullptr;

    const auto e = detail::enter("fuzz plugin", &entry);
    const bool compatible =
        plugin.api_version == LOCKSMITH_PLUGIN_API_VERSION && plugin.abi != nullptr && abi_matches;
    if (!compatible)
        check(!registration_ran && !e.failure.empty(),
              "a plugin of another API version or ABI was not refused before its code ran");
    if (e.failure.empty()) {
        check(registration_ran, "a plugin was accepted without registering");
        check(e.strategies.size() == strategies_added, "the strategies added were not kept");
    } else {
        check(e.strategies.empty(), "a refused plugin hands over strategies");
    }

    strategy_registry scratch;
    for (const auto& d : e.strategies) {
        try {
            scratch.add(d);
        } catch (const invalid_argument_error&) {
        }
    }
    for (const auto& info : scratch.list()) (void)to_string(info.descriptor.capabilities);
    input = nullptr;
    return 0;
}
