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

// `locksmith explain --require CAPS [--start]`: the winner and why each other strategy was passed
// over; with `start`, also whether the winner starts (connects to its server).
// Exit 0 when a strategy would be chosen (and starts), EX_UNAVAILABLE otherwise.
int explain_command(const std::optional<std::string>& config_flag, const std::string& require,
                    bool json, bool start);

// `locksmith config check FILE`: every problem, each with its JSON pointer or line and column.
// Exit 0 for a valid file, EX_CONFIG otherwise, EX_NOINPUT when it cannot be read.
int config_check_command(const std::string& file, bool json);

// `locksmith status NAME`: exit 0 free, 1 held, EX_UNAVAILABLE when the strategy cannot tell.
int status_command(const std::optional<std::string>& config_flag, const std::string& name,
                   const selection_flags& selection, bool json);

}  // namespace locksmith::cli
