// SPDX-License-Identifier: MIT
// A subcommand of `locksmith`, registered from the file that implements it.
//
//   invocation  what main() hands every command: --config and the words after "--"
//   command     one subcommand: its CLI11 wiring, how it runs, how it rewords usage errors;
//               constructing one (a static object in its file) registers it
//   commands()  every registered command, in --help order
//
// Adding a command is a new file with one static `command` object in it, listed in
// cli/CMakeLists.txt; main() and its messages ("commands: ...") come from commands(). The files
// are compiled into the executable itself (not a static library), so no registration is dropped
// by the linker, and the list is a function-local static, so static initialisation order does
// not matter.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace locksmith::cli {

struct invocation {
    std::optional<std::string> config;  // --config FILE (before or after the command word)
    std::vector<std::string> command;   // the words after "--", verbatim
    bool had_separator = false;         // whether there was a "--"
};

class command {
  public:
    // Registers this command; --help lists commands by `help_position` (one per command).
    // Requires: a static object, living as long as the program.
    explicit command(int help_position);
    virtual ~command() = default;
    command(const command&) = delete;
    command& operator=(const command&) = delete;

    // Adds the subcommand to `app`. Its options (bound to members of the command) are added when
    // CLI11 meets the command's word (its pre-parse callback): building every command's options
    // at every start was a third of `locksmith run`'s instructions (bench/cli/RESULTS.md).
    void attach(CLI::App& app) {
        app_ = add_subcommand(app);
        app_->preparse_callback([this](std::size_t) { add_options(*app_); });
    }
    // Whether CLI11 parsed this command (after attach).
    bool parsed() const { return app_ != nullptr && app_->parsed(); }
    const std::string& name() const { return app_->get_name(); }
    int help_position() const noexcept { return help_position_; }

    // Runs the parsed command; returns the exit code. Throws cli_error or a library error
    // (main() maps both to a message and an exit code).
    virtual int run(const invocation& in) = 0;
    // Whether the command takes a command line after "--" (`run`); for the others "--" is a
    // usage error.
    virtual bool takes_command_line() const { return false; }
    // Rewords a usage error that CLI11 reported while this command was parsed: may replace
    // `message` (what is wrong) and `hint` (what to do). `e` is CLI11's error, `extras` the
    // words it did not expect. Default: both stay.
    virtual void reword_usage_error(const CLI::ParseError& e,
                                    const std::vector<std::string>& extras, std::string& message,
                                    std::string& hint) const;

  protected:
    // Adds the subcommand (word, description, footer) to `app` and returns it.
    virtual CLI::App* add_subcommand(CLI::App& app) = 0;
    // Adds its options, positionals and nested subcommands to `cmd` (what add_subcommand returned).
    virtual void add_options(CLI::App& cmd) = 0;

  private:
    int help_position_;
    CLI::App* app_ = nullptr;
};

// Every registered command, by help position.
const std::vector<command*>& commands();

// Their names, joined by ", " and, before the last one, `last_separator` (", " or " or ").
std::string command_names(const std::string& last_separator);

}  // namespace locksmith::cli
