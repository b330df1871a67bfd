#include "factory_setup.hpp"

#include <cstdlib>
#include <system_error>

#include "cli_common.hpp"

namespace locksmith::cli {

namespace fs = std::filesystem;

std::vector<fs::path> default_config_locations() {
    std::vector<fs::path> out;
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    const char* home = std::getenv("HOME");
    // The XDG base-directory spec says a relative XDG_CONFIG_HOME is invalid and is ignored.
    if (xdg != nullptr && xdg[0] == '/') {
        out.push_back(fs::path(xdg) / "locksmith" / "config.json");
    } else if (home != nullptr && home[0] == '/') {
        out.push_back(fs::path(home) / ".config" / "locksmith" / "config.json");
    }
    out.emplace_back("/etc/locksmith/config.json");
    return out;
}

std::string read_input_file(const fs::path& path, std::string_view /*role*/) {
    // The library's reader: regular files only (a FIFO would block, /dev/zero never end), at
    // most 1 MiB. Its errors are config_errors: "config.io" exits EX_NOINPUT, others EX_CONFIG.
    return config::read_file(path);
}

namespace {

config load_named_file(const fs::path& path, const std::string& origin) {
    // Reading here first separates "no such file" (EX_NOINPUT) from "bad content" (EX_CONFIG),
    // which config::load_file reports alike.
    std::string text = read_input_file(path, "config file");
    return config::parse(text, origin);
}

}  // namespace

config resolve_config(const std::optional<std::string>& config_flag) {
    if (config_flag) {
        if (config_flag->empty()) throw cli_error(EX_USAGE, "--config needs a file name");
        return load_named_file(*config_flag, "file " + *config_flag);
    }
    if (const char* env = std::getenv("LOCKSMITH_CONFIG"); env != nullptr && env[0] != '\0') {
        std::string_view value(env);
        auto first = value.find_first_not_of(" \t\r\n");
        if (first != std::string_view::npos && value[first] == '{') {
            return config::parse(value, "LOCKSMITH_CONFIG");
        }
        return load_named_file(std::string(value),
                               "file " + std::string(value) + " (LOCKSMITH_CONFIG)");
    }
    for (const auto& path : default_config_locations()) {
        std::error_code ec;
        // Only a location that is certainly absent is skipped: one this user cannot search
        // may hold the config everyone else uses, and the built-in defaults would then pick
        // another strategy for the same names.
        const bool absent =
            !fs::exists(path, ec) &&
            (!ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory);
        if (!absent) return load_named_file(path, "file " + path.string());
    }
    return config{};
}

}  // namespace locksmith::cli

namespace locksmith::cli {

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

bool warn_if_locking_off(const lock_factory& factory, const std::string& strategy,
                         const std::string& what) {
    const auto descriptor = factory.registry().find(strategy);
    if (!descriptor || !descriptor->excludes_nothing) return false;
    print_note("warning: strategy '" + strategy + "' excludes nothing: locking is off for " + what +
               " (enabled by " + factory.settings().origin + ")");
    return true;
}

capability effective_requirement(const lock_factory& factory, std::string_view name,
                                 const lock_request& request) {
    if (request.require != capability::none) return request.require;
    if (const lock_rule* rule = factory.settings().rule_for(name); rule && rule->require) {
        return *rule->require;
    }
    return capability::exclusive;
}

}  // namespace locksmith::cli
