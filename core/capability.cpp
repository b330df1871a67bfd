// SPDX-License-Identifier: MIT
#include <locksmith/capability.hpp>

#include <charconv>

#include <locksmith/errors.hpp>

namespace locksmith {

std::string_view capability_name(capability bit) noexcept {
    switch (bit) {
        case capability::none:
            return "none";
#define LOCKSMITH_CAPABILITY_CASE(name, value) \
    case capability::name:                     \
        return #name;
            LOCKSMITH_CAPABILITIES(LOCKSMITH_CAPABILITY_CASE)
#undef LOCKSMITH_CAPABILITY_CASE
    }
    return "unknown";
}

std::string to_string(capability set) {
    std::string out;
    for (capability bit : all_capabilities) {
        if (!has(set, bit)) continue;
        if (!out.empty()) out += '|';
        out += capability_name(bit);
    }
    return out.empty() ? "none" : out;
}

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string known_names() {
    std::string out;
    for (capability bit : all_capabilities) {
        if (!out.empty()) out += ", ";
        out += capability_name(bit);
    }
    return out;
}

}  // namespace

capability parse_capabilities(std::string_view text) {
    if (trim(text).empty()) throw invalid_argument_error("empty capability list");
    capability result = capability::none;
    while (true) {
        auto end = text.find_first_of("|,");
        std::string_view word = trim(text.substr(0, end));
        if (word.empty())
            throw invalid_argument_error("empty capability name in '" + std::string(text) + "'");
        std::uint32_t number = 0;
        auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), number);
        if (ec == std::errc() && ptr == word.data() + word.size()) {
            if ((number & ~std::uint32_t(~capability::none)) != 0)
                throw invalid_argument_error("capability mask " + std::string(word) +
                                             " has bits that name no capability");
            result |= capability(number);
        } else {
            bool found = false;
            for (capability bit : all_capabilities) {
                if (capability_name(bit) == word) {
                    result |= bit;
                    found = true;
                    break;
                }
            }
            if (!found)
                throw invalid_argument_error("unknown capability '" + std::string(word) +
                                             "' (known: " + known_names() + ")");
        }
        if (end == std::string_view::npos) break;
        text.remove_prefix(end + 1);
    }
    return result;
}

}  // namespace locksmith
