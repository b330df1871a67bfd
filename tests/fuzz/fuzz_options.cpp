// SPDX-License-Identifier: MIT
// Every strategy's options, as the registry validates them for `locksmith config check` and
// before a store is made (validate_options: each strategy's from_json, its URL, DSN, server list
// and endpoint parsers, combined's members). The input is "<strategy>\n<options as JSON>".
// Properties:
//  - validation throws nothing but config_error (what registry::check reports);
//  - no message gives away the value of a "password" (or "sentinel_password") option, at any
//    depth.
#include <locksmith/config.hpp>
#include <locksmith/registry.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

const strategy_registry& registry() {
    static strategy_registry* r = [] {
        fuzz::link_modules();
        auto* made = new strategy_registry();
        register_builtin_strategies(*made);
        return made;
    }();
    return *r;
}

// "password" and the redis strategy's "sentinel_password".
bool is_password_key(const std::string& key) {
    return key == "password" || key == "sentinel_password";
}

void collect_passwords(const nlohmann::json& j, std::vector<std::string>& out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (is_password_key(it.key()) && it->is_string()) out.push_back(it->get<std::string>());
            collect_passwords(*it, out);
        }
    } else if (j.is_array()) {
        for (const auto& e : j) collect_passwords(e, out);
    }
}

void replace_passwords(nlohmann::json& j) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (is_password_key(it.key()) && it->is_string()) *it = "replaced-password";
            replace_passwords(*it);
        }
    } else if (j.is_array()) {
        for (auto& e : j) replace_passwords(e);
    }
}

// The message validation gives, or "" when the options are valid.
std::string problem(const strategy_descriptor& d, const nlohmann::json& options) {
    try {
        if (d.validate_options) d.validate_options(options);
        return {};
    } catch (const config_error& e) {
        return e.what();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto text = fuzz::as_text(data, size);
    const auto end = text.find('\n');
    if (end == std::string_view::npos) return 0;
    const auto d = registry().find(text.substr(0, end));
    if (!d) return 0;
    text.remove_prefix(end + 1);
    // Options come from a config, which refuses nesting beyond config::max_depth.
    const auto depth = fuzz::json_depth(text);
    if (!depth || *depth > config::max_depth) return 0;
    const auto options = nlohmann::json::parse(text);

    const auto message = problem(*d, options);
    std::vector<std::string> passwords;
    collect_passwords(options, passwords);
    if (message.empty() || passwords.empty()) return 0;
    auto replaced = options;
    replace_passwords(replaced);
    // What the message says whatever the password is: its wording, names, other values.
    const auto wording = problem(*d, replaced);
    for (const auto& password : passwords)
        check(!fuzz::reveals(message, text, password, wording), "a message shows the password",
              message);
    return 0;
}
