// SPDX-License-Identifier: MIT
#include "factory_setup.hpp"

#include "cli_common.hpp"

namespace locksmith::cli {

namespace fs = std::filesystem;

std::string read_input_file(const fs::path& path, std::string_view /*role*/) {
    // The library's reader: regular files only (a FIFO would block, /dev/zero never end), at
    // most 1 MiB. Its errors are config_errors: "config.io" exits EX_NOINPUT, others EX_CONFIG.
    return config::read_file(path);
}

config resolve_config(const std::optional<std::string>& config_flag) {
    if (!config_flag) return config::discover();
    if (config_flag->empty()) throw cli_error(EX_USAGE, "--config needs a file name");
    // read_file's errors are "config.io" (exit EX_NOINPUT); the document's are EX_CONFIG.
    return config::parse(read_input_file(*config_flag, "config file"), "file " + *config_flag);
}

std::unique_ptr<lock_factory> make_factory(const std::optional<std::string>& config_flag) {
    return std::make_unique<lock_factory>(resolve_config(config_flag), default_registry());
}

capability parse_require(const std::string& text) {
    try {
        capability caps = parse_capabilities(text);
        if (caps == capability::none) {
            throw cli_error(EX_USAGE, "--require needs at least one capability");
        }
        return caps;
    } catch (const invalid_argument_error& e) {
        std::string known;
        for (capability bit : all_capabilities) {
            if (!known.empty()) known += ", ";
            known += capability_name(bit);
        }
        std::string message = e.what();
        // The library's message may already list the names.
        if (message.find("known") == std::string::npos) message += " (capabilities: " + known + ")";
        throw cli_error(EX_USAGE, message);
    }
}

lock_request make_request(const lock_factory& factory, const selection_flags& flags) {
    lock_request request;
    if (flags.strategy) {
        if (!factory.registry().contains(*flags.strategy)) {
            std::string known;
            for (const auto& name : factory.registry().names()) {
                if (!known.empty()) known += ", ";
                known += name;
            }
            throw cli_error(EX_USAGE, "unknown strategy '" + *flags.strategy +
                                          "' (strategies in this build: " + known + ")");
        }
        request.strategy = *flags.strategy;
    }
    if (flags.require) request.require = parse_require(*flags.require);
    return request;
}

std::vector<std::string> warn_about_options(const lock_factory& factory,
                                            const std::string& strategy) {
    const auto info = factory.registry().info(strategy);
    if (!info.descriptor.warnings || !info.configured) return {};
    auto warnings = info.descriptor.warnings(info.options);
    for (const auto& w : warnings) print_note("warning: strategy '" + strategy + "': " + w);
    return warnings;
}

bool warn_if_locking_off(const lock_factory& factory, const std::string& strategy,
                         const std::string& what) {
    const auto descriptor = factory.registry().find(strategy);
    if (!descriptor || !descriptor->excludes_nothing) return false;
    print_note("warning: strategy '" + strategy + "' excludes nothing: locking is off for " + what +
               " (enabled by " + factory.settings().origin + ")");
    return true;
}

}  // namespace locksmith::cli
