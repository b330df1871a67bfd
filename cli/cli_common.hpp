// SPDX-License-Identifier: MIT
// What every part of the `locksmith` command shares.
//
//   exit codes   sysexits(3) for locksmith's own errors, plus the codes of `run`
//   cli_error    an error that already knows its exit code and its one-line message
//   exit_code_for / message_for
//                the one mapping from any error to an exit code and a message
//   starting_strategy
//                runs the step that starts a strategy, so that its failure is "unavailable"
//   stderr_sink  where the library's log records go: stderr, as notes
//   parse_seconds / format_seconds
//                "0.3" on the command line to a duration, and back for messages
//   put_bytes / dump_line
//                JSON output (--json) of text that may not be UTF-8
#pragma once

#include <sysexits.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include <locksmith/errors.hpp>
#include <locksmith/logger.hpp>

namespace locksmith::cli {

// flock(1)'s default for "the lock was held" and "the wait timed out".
inline constexpr int exit_conflict_default = 1;
// `run`: the lock was lost while the child ran (an expiring lock could not be refreshed).
// EX_TEMPFAIL says what a script should do: try again later.
inline constexpr int exit_lock_lost_default = EX_TEMPFAIL;
// `run`: the command ran and ended, but releasing the lock afterwards failed, so it may still be
// held. Not the lost-lock code: that one tells a script to try again later, and the command has
// already done its work; not EX_UNAVAILABLE either, which means the command never ran.
inline constexpr int exit_release_failed = EX_IOERR;
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

// The exit code for an error that ends a command: cli_error's own; EX_NOINPUT for a config file
// that cannot be read and EX_CONFIG for any other config_error; EX_USAGE for an invalid
// argument; EX_UNAVAILABLE when no strategy qualifies or the backend failed (starting,
// acquiring, releasing); EX_OSERR when memory ran out; EX_SOFTWARE for anything else.
int exit_code_for(const std::exception& e);
// Its one-line message (a config error's JSON pointer added when the text lacks it).
std::string message_for(const std::exception& e);

// The command's log sink (lock_factory::set_logger): warnings always ("locksmith: warning: ..."),
// since a fallback or a strategy that excludes nothing is worth a line even without -v; debug and
// info records only with -v. Never errors: the command reports each error itself, once (its exit
// message, the error handler of unlock, the lost-lock message).
class stderr_sink : public log_sink {
  public:
    explicit stderr_sink(bool verbose) : verbose_(verbose) {}
    void log(const log_record& record) override;

  private:
    bool verbose_;
};

// Runs `start`, the step that creates a strategy's store or lock, and returns its result.
// A strategy that cannot start (an unusable lock_dir, a server that is down) is unavailable,
// whichever error it reported: throws cli_error(EX_UNAVAILABLE) for an invalid_argument_error,
// and lets every other error through (config_error stays a config problem).
// Requires: the arguments the caller passes on (name, TTL) were checked before, so that an
// invalid_argument_error here can only come from the strategy.
template <class Start>
decltype(auto) starting_strategy(Start&& start);

// A number of seconds, fractions allowed ("0.3", "2", "1e-3"), as a steady-clock duration.
// Throws cli_error(EX_USAGE) naming `what` and quoting `text` as given when it is not a number,
// is negative, not finite, or longer than a year, or is zero while `allow_zero` is false.
std::chrono::nanoseconds parse_seconds(std::string_view text, std::string_view what,
                                       bool allow_zero);

// "0.304 s", for messages.
std::string format_seconds(std::chrono::nanoseconds d);

// Writes "locksmith: <message>" to stderr; each further line of `message` is indented so that a
// multi-line library explanation stays readable and still starts with the prefix.
void print_error(std::string_view message);
// The same with "locksmith: " for -v output.
void print_note(std::string_view message);

template <class Start>
decltype(auto) starting_strategy(Start&& start) {
    try {
        return std::forward<Start>(start)();
    } catch (const invalid_argument_error& e) {
        throw cli_error(EX_UNAVAILABLE, e.what());
    }
}

// Lock names, paths and the messages that quote them are any bytes; a JSON string is UTF-8
// (nlohmann's dump throws on anything else). put_bytes writes `bytes` under `key` as it is when
// it is UTF-8, else null there and its exact bytes, base64, under `key`_base64: a reader always
// gets the bytes back. Used for what identifies something (a lock name, a file); other text
// that is not UTF-8 (prose quoting such a name) goes out with U+FFFD for each bad byte (dump_line).
void put_bytes(nlohmann::json& object, const std::string& key, const std::string& bytes);

// One document on one line, for scripts.
std::string dump_line(const nlohmann::json& document);

}  // namespace locksmith::cli
