// SPDX-License-Identifier: MIT
// How the library sends records to a log_sink (include/locksmith/logger.hpp). Private.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <locksmith/logger.hpp>

namespace locksmith {

// Sends `record` to `sink` when there is one. An exception from the sink is dropped: a lock
// operation never fails, and a noexcept one never terminates, because logging did.
void emit(const std::shared_ptr<log_sink>& sink, const log_record& record) noexcept;

// "1.250 s", for the sentences of records.
std::string seconds_text(std::chrono::nanoseconds d);

}  // namespace locksmith
