// SPDX-License-Identifier: MIT
#include "cli_common.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>

namespace locksmith::cli {

std::chrono::nanoseconds parse_seconds(std::string_view text, std::string_view what,
                                       bool allow_zero) {
    // A year is far beyond any sensible wait or TTL and keeps the nanosecond count in range.
    constexpr double max_seconds = 365.0 * 24 * 3600;
    const std::string given(text);
    char* end = nullptr;
    errno = 0;
    const double seconds = given.empty() ? 0 : std::strtod(given.c_str(), &end);
    if (given.empty() || end != given.c_str() + given.size() || std::isspace(given[0])) {
        throw cli_error(EX_USAGE, std::string(what) + ": '" + given +
                                      "' is not a number of seconds (e.g. 5, 0.3, 1e-3)");
    }
    if (!std::isfinite(seconds) || errno == ERANGE || seconds < 0 ||
        (!allow_zero && seconds == 0) || seconds > max_seconds) {
        // The text as given: "%g" would print 31536001 as 3.1536e+07, the bound itself.
        throw cli_error(EX_USAGE, std::string(what) + " must be " +
                                      (allow_zero ? "0 or more" : "more than 0") +
                                      " seconds and at most a year (31536000); got " + given);
    }
    return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(seconds * 1e9)));
}

std::string format_seconds(std::chrono::nanoseconds d) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3f s", std::chrono::duration<double>(d).count());
    return text;
}

int exit_code_for(const std::exception& e) {
    if (const auto* cli = dynamic_cast<const cli_error*>(&e)) return cli->exit_code();
    if (const auto* config = dynamic_cast<const config_error*>(&e)) {
        return config->id() == "config.io" ? EX_NOINPUT : EX_CONFIG;
    }
    if (dynamic_cast<const invalid_argument_error*>(&e) != nullptr) return EX_USAGE;
    if (dynamic_cast<const error*>(&e) != nullptr) return EX_UNAVAILABLE;
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return EX_OSERR;
    return EX_SOFTWARE;
}

std::string message_for(const std::exception& e) {
    std::string message = e.what();
    if (const auto* config = dynamic_cast<const config_error*>(&e)) {
        // A pointer or position makes the message actionable; add it when what() lacks it.
        if (!config->pointer().empty() && message.find(config->pointer()) == std::string::npos) {
            message = config->pointer() + ": " + message;
        }
        return message;
    }
    if (dynamic_cast<const cli_error*>(&e) != nullptr ||
        dynamic_cast<const error*>(&e) != nullptr) {
        return message;
    }
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return "out of memory";
    return "internal error: " + message;
}

namespace {

void print_prefixed(std::string_view message) {
    std::string out = "locksmith: ";
    for (char c : message) {
        out += c;
        if (c == '\n') out += "  ";
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
    out += '\n';
    // One write, so that lines from concurrent locksmith processes do not interleave mid-line.
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
}

}  // namespace

void print_error(std::string_view message) {
    print_prefixed(message);
}
void print_note(std::string_view message) {
    print_prefixed(message);
}

void stderr_sink::log(const log_record& record) {
    // run and hold say these themselves, with the wait, the token and the TTL (-v).
    if (record.event == "acquired" || record.event == "released") return;
    switch (record.level) {
        case log_level::debug:
        case log_level::info:
            if (verbose_) print_note(record.message);
            break;
        case log_level::warning:
            print_note("warning: " + record.message);
            break;
        case log_level::error:
            break;
    }
}

using nlohmann::json;

namespace {

bool is_utf8(const std::string& bytes) {
    try {
        (void)json(bytes).dump();
        return true;
    } catch (const json::type_error&) {
        return false;
    }
}

std::string base64(const std::string& bytes) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        const unsigned n = (static_cast<unsigned char>(bytes[i]) << 16) |
                           (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                           static_cast<unsigned char>(bytes[i + 2]);
        for (int shift : {18, 12, 6, 0}) out += alphabet[(n >> shift) & 63];
    }
    if (i < bytes.size()) {
        unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
        if (i + 1 < bytes.size()) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
        out += alphabet[(n >> 18) & 63];
        out += alphabet[(n >> 12) & 63];
        out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

}  // namespace

void put_bytes(json& object, const std::string& key, const std::string& bytes) {
    if (is_utf8(bytes)) {
        object[key] = bytes;
    } else {
        object[key] = nullptr;
        object[key + "_base64"] = base64(bytes);
    }
}

std::string dump_line(const json& document) {
    return document.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace locksmith::cli
