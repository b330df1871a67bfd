// What every part of the `locksmith` command shares.
//
//   exit codes   sysexits(3) for locksmith's own errors, plus the two codes of `run`
//   cli_error    an error that already knows its exit code and its one-line message
//   parse_seconds / format_seconds
//                "0.3" on the command line to a duration, and back for messages
#pragma once

#include <sysexits.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace locksmith::cli {

// flock(1)'s default for "the lock was held" and "the wait timed out".
inline constexpr int exit_conflict_default = 1;
// `run`: the lock was lost while the child ran (an expiring lock could not be refreshed).
// EX_TEMPFAIL says what a script should do: try again later.
inline constexpr int exit_lock_lost_default = EX_TEMPFAIL;
// `status`: the name is held by someone else.
inline constexpr int exit_status_held = 1;
// A shell's codes for a command that cannot be run, so `locksmith run` reads like `sh -c`.
inline constexpr int exit_not_found = 127;
inline constexpr int exit_not_executable = 126;

class cli_error : public std::runtime_error {
  public:
    cli_error(int exit_code, const std::string& message)
        : std::runtime_error(message), exit_code_(exit_code) {}
    int exit_code() const noexcept { return exit_code_; }

  private:
    int exit_code_;
};

// A number of seconds, fractions allowed ("0.3", "2", "1e-3"), as a steady-clock duration.
// Throws cli_error(EX_USAGE) naming `what` when the value is negative, not finite, or too large
// to wait for, or is zero while `allow_zero` is false.
std::chrono::nanoseconds parse_seconds(double seconds, std::string_view what, bool allow_zero);

// "0.304 s", for messages.
std::string format_seconds(std::chrono::nanoseconds d);

// Writes "locksmith: <message>" to stderr; each further line of `message` is indented so that a
// multi-line library explanation stays readable and still starts with the prefix.
void print_error(std::string_view message);
// The same with "locksmith: " for -v output.
void print_note(std::string_view message);

}  // namespace locksmith::cli
