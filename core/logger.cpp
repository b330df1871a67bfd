// SPDX-License-Identifier: MIT
#include <locksmith/logger.hpp>

#include <cstdio>

#include "core/logging.hpp"

namespace locksmith {

std::string_view to_string(log_level level) noexcept {
    switch (level) {
        case log_level::debug:
            return "debug";
        case log_level::info:
            return "info";
        case log_level::warning:
            return "warning";
        case log_level::error:
            break;
    }
    return "error";
}

void emit(const std::shared_ptr<log_sink>& sink, const log_record& record) noexcept {
    if (!sink) return;
    try {
        sink->log(record);
    } catch (...) {
        // See log_sink::log: the operation that logged goes on.
    }
}

std::string seconds_text(std::chrono::nanoseconds d) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3f s", std::chrono::duration<double>(d).count());
    return text;
}

}  // namespace locksmith
