// SPDX-License-Identifier: MIT
// The commands that look and never lock: strategies, explain, config check, status.
//
// Each returns the process exit code and writes its report to stdout (text, or JSON with
// `json` = true, one document on one line for scripts).
#pragma once

#include <optional>
#include <string>

#include "factory_setup.hpp"

namespace locksmith::cli {

// `locksmith strategies`: every registered strategy with default and effective priority.
int strategies_command(const std::optional<std::string>& config_flag, bool json);

// `locksmith explain [NAME] [--require CAPS] [--start]`: the winner and why each other strategy
// was passed over; with NAME, as `run NAME` would decide: the lock rule that matches it and what
// it sets (capabilities, a pinned strategy, TTL, fallback), --require overriding the rule's
// capabilities as in run; with `start`, also whether the strategy starts (connects to its server).
// Exit 0 when a strategy would be chosen (and starts), EX_UNAVAILABLE otherwise; EX_USAGE without
// NAME or --require.
int explain_command(const std::optional<std::string>& config_flag,
                    const std::optional<std::string>& name, const std::string& require, bool json,
                    bool start);

// `locksmith config check FILE`: every problem, each with its JSON pointer or line and column.
// Exit 0 for a valid file, EX_CONFIG otherwise, EX_NOINPUT when it cannot be read.
int config_check_command(const std::string& file, bool json);

// `locksmith status NAME`: exit 0 free, 1 held, EX_UNAVAILABLE when the strategy cannot tell.
int status_command(const std::optional<std::string>& config_flag, const std::string& name,
                   const selection_flags& selection, bool json);

}  // namespace locksmith::cli
