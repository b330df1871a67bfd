#include "cli_common.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>

namespace locksmith::cli {

std::chrono::nanoseconds parse_seconds(double seconds, std::string_view what, bool allow_zero) {
    // A year is far beyond any sensible wait or TTL and keeps the nanosecond count in range.
    constexpr double max_seconds = 365.0 * 24 * 3600;
    if (!std::isfinite(seconds) || seconds < 0 || (!allow_zero && seconds == 0) ||
        seconds > max_seconds) {
        char shown[64];
        std::snprintf(shown, sizeof shown, "%g", seconds);
        throw cli_error(EX_USAGE, std::string(what) + " must be " +
                                      (allow_zero ? "0 or more" : "more than 0") +
                                      " seconds, at most a year (got " + shown + ")");
    }
    return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(seconds * 1e9)));
}

std::string format_seconds(std::chrono::nanoseconds d) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3f s", std::chrono::duration<double>(d).count());
    return text;
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

}  // namespace locksmith::cli
