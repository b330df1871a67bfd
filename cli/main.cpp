// locksmith: run a command under a named lock on the best strategy, and explain the choice.
//
// main() parses the command line (CLI11), calls one command, and turns every failure into a
// one-line "locksmith: ..." message and a sysexits(3) code. Nothing escapes as a crash.
#include <sysexits.h>

#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <locksmith/errors.hpp>
#include <locksmith/version.hpp>

#include "cli_common.hpp"
#include "info_commands.hpp"
#include "run_command.hpp"

namespace {

using namespace locksmith;
using namespace locksmith::cli;

constexpr const char* run_footer = R"(Usage: locksmith run [OPTIONS] NAME -- COMMAND [ARGS...]
       locksmith run [OPTIONS] NAME -c 'SHELL COMMAND'
--config FILE (before or after "run") selects the configuration; see locksmith --help.

Exit status:
  the command's own status (128+N when signal N ended it);
  the conflict code (-E, default 1) when the lock is held (-n) or the wait (-w) ran out;
  the lost-lock code (--lost-exit-code, default 75) when the lock was lost while the command
  ran (not refreshed in time, or removed or taken over by another process);
  74 when the command ran but releasing the lock failed (it may still be held);
  126/127 when the command cannot be executed / is not found;
  64 bad usage, 66 config file missing or unreadable, 69 no strategy qualifies or the chosen
  one cannot start or its backend failed, 70 internal error, 71 fork/exec failure,
  78 configuration error.

The command gets LOCKSMITH_NAME, LOCKSMITH_STRATEGY and, for strategies with fencing,
LOCKSMITH_FENCING_TOKEN. SIGINT, SIGTERM and SIGHUP are forwarded to it. The lock is not
inherited by the command's descriptors, and is released when the command ends.)";

constexpr const char* main_footer =
    R"(Configuration: --config FILE, else $LOCKSMITH_CONFIG (a path, or JSON starting with '{'),
else $XDG_CONFIG_HOME/locksmith/config.json (~/.config/...), else /etc/locksmith/config.json,
else the built-in defaults (the file strategy, no server needed).

Examples:
  locksmith run backup -- rsync -a /src /dst
  locksmith run -n -E 0 cron.hourly -c 'run-parts /etc/cron.hourly'
  locksmith explain --require exclusive,distributed
  locksmith status backup)";

// The part of argv after the first "--" is the command of `run`, verbatim: CLI11 would otherwise
// read its words as locksmith's own options or subcommands ("locksmith run x -- status").
struct split_args {
    std::vector<std::string> front;  // program name excluded
    std::vector<std::string> command;
    bool had_separator = false;
};

split_args split_at_separator(int argc, char** argv) {
    split_args out;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (!out.had_separator && arg == "--") {
            out.had_separator = true;
            continue;
        }
        (out.had_separator ? out.command : out.front).push_back(std::move(arg));
    }
    return out;
}

int run_main(int argc, char** argv) {
    CLI::App app{"locksmith " + std::string(version) +
                     ": run commands under named locks, on the best available strategy",
                 "locksmith"};
    app.set_version_flag("--version", std::string("locksmith ") + version);
    app.require_subcommand(1);
    app.footer(main_footer);
    app.fallthrough();

    std::optional<std::string> config_flag;
    app.add_option("--config", config_flag, "Configuration file (see below)")->type_name("FILE");

    // --- run ---
    run_options run;
    auto* run_cmd = app.add_subcommand(
        "run", "Run a command while holding the lock NAME: run NAME -- COMMAND [ARGS...]");
    run_cmd->footer(run_footer);
    run_cmd->add_option("NAME", run.name, "Lock name (any bytes)")->required()->type_name("");
    bool exclusive_flag = false;  // the default; the flag exists for flock(1) compatibility
    auto* exclusive = run_cmd->add_flag("-x,-e,--exclusive", exclusive_flag,
                                        "Take the lock exclusively (default)");
    auto* shared = run_cmd->add_flag("-s,--shared", run.shared, "Take a shared (read) lock");
    exclusive->excludes(shared);
    auto* nonblock = run_cmd->add_flag("-n,--nonblock,--no-wait", run.nonblock,
                                       "Fail at once (conflict code) when the lock is held");
    auto* wait = run_cmd
                     ->add_option("-w,--wait,--timeout", run.wait_s,
                                  "Give up after SECONDS (fractions allowed; 0 = -n)")
                     ->type_name("SECONDS");
    nonblock->excludes(wait);
    run_cmd
        ->add_option("-E,--conflict-exit-code", run.conflict_exit_code,
                     "Exit code when the lock is held or the wait ran out (default 1)")
        ->check(CLI::Range(0, 255))
        ->type_name("N");
    run_cmd->add_option("--ttl", run.ttl_s, "Lifetime of the lock, for expiring strategies")
        ->type_name("SECONDS");
    run_cmd
        ->add_option("--kill-after", run.kill_after_s,
                     "After losing the lock: SIGTERM the command, then SIGKILL after SECONDS "
                     "(default 5)")
        ->type_name("SECONDS");
    run_cmd
        ->add_option("--lost-exit-code", run.lost_exit_code,
                     "Exit code when the lock was lost while the command ran (default 75)")
        ->check(CLI::Range(0, 255))
        ->type_name("N");
    auto* run_strategy = run_cmd
                             ->add_option("--strategy", run.selection.strategy,
                                          "Use this strategy (skips selection)")
                             ->type_name("NAME");
    auto* run_require = run_cmd
                            ->add_option("--require", run.selection.require,
                                         "Required capabilities, e.g. exclusive,distributed")
                            ->type_name("CAPS");
    run_strategy->excludes(run_require);
    run_cmd->add_option("-c,--command", run.shell, "Run this command with /bin/sh -c")
        ->type_name("'SHELL COMMAND'");
    run_cmd->add_flag("-v,--verbose", run.verbose,
                      "Say which strategy was chosen and why, and how long the wait took");

    // --- strategies ---
    bool json = false;
    auto* strategies_cmd =
        app.add_subcommand("strategies", "List every registered strategy and its settings");
    strategies_cmd->add_flag("--json", json, "One JSON document");

    // --- explain ---
    std::string explain_require;
    auto* explain_cmd =
        app.add_subcommand("explain", "Which strategy would serve CAPS, and why not the others");
    explain_cmd->add_option("--require", explain_require, "Required capabilities")
        ->required()
        ->type_name("CAPS");
    explain_cmd->add_flag("--json", json, "One JSON document");
    bool explain_start = false;
    explain_cmd->add_flag("--start", explain_start,
                          "Also start the chosen strategy (connect to its server), as run would");

    // --- config check ---
    std::string check_file;
    bool check_json = false;
    auto* config_cmd = app.add_subcommand("config", "Configuration files");
    config_cmd->require_subcommand(1);
    auto* check_cmd = config_cmd->add_subcommand(
        "check", "Validate FILE; print each error with its JSON pointer or line and column");
    check_cmd->add_option("file", check_file, "The configuration file")->required();
    check_cmd->add_flag("--json", check_json, "One JSON document");

    // --- status ---
    std::string status_name;
    selection_flags status_selection;
    auto* status_cmd = app.add_subcommand(
        "status", "Is NAME free or held, and by whom (exit 0 free, 1 held), without taking it");
    status_cmd->add_option("NAME", status_name, "Lock name")->required()->type_name("");
    auto* status_strategy =
        status_cmd->add_option("--strategy", status_selection.strategy, "Ask this strategy")
            ->type_name("NAME");
    auto* status_require = status_cmd
                               ->add_option("--require", status_selection.require,
                                            "Ask the strategy chosen for these capabilities")
                               ->type_name("CAPS");
    status_strategy->excludes(status_require);
    status_cmd->add_flag("--json", json, "One JSON document");

    split_args args = split_at_separator(argc, argv);
    // CLI11 reports an unknown subcommand as "a subcommand is required"; name the word instead.
    if (!args.front.empty() && args.front.front().rfind('-', 0) != 0) {
        const std::string& word = args.front.front();
        bool known = false;
        for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
            known = known || sub->check_name(word);
        }
        if (!known) {
            throw cli_error(EX_USAGE, "unknown command '" + word +
                                          "' (commands: run, strategies, explain, config, "
                                          "status; see locksmith --help)");
        }
    }
    try {
        // CLI11 takes the arguments reversed (it pops from the back).
        std::vector<std::string> reversed(args.front.rbegin(), args.front.rend());
        app.parse(reversed);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
            return app.exit(e);  // --help, --version
        }
        // CLI11 puts no "locksmith:" in front, and the whole help text is too much here.
        std::string message = e.what();
        std::string hint = "Run 'locksmith --help' for usage.";
        const bool missing = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
        const std::vector<std::string> extras = app.remaining(true);
        if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || (missing && !extras.empty())) {
            // CLI11 joins the unexpected words in reverse ("hi echo"); name them as given.
            message = extras.size() == 1 ? "unexpected argument:" : "unexpected arguments:";
            for (const auto& word : extras) message += " " + word;
        }
        if (run_cmd->parsed() && dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
            // "locksmith run NAME COMMAND": flock(1) allows it, but here the command's own
            // options would be read as locksmith's; "--" makes the boundary explicit.
            hint = "Put -- before the command: locksmith run [OPTIONS] NAME -- COMMAND [ARGS...]";
        } else if (missing && extras.empty()) {
            // CLI11 says "A subcommand is required" without naming one.
            if (app.get_subcommands().empty()) {
                message = "a command is required: run, strategies, explain, config or status";
            } else if (config_cmd->parsed() && !check_cmd->parsed()) {
                message = "config needs a subcommand: locksmith config check FILE [--json]";
            }
        }
        print_error(message + "\n" + hint);
        return EX_USAGE;
    }

    if (run_cmd->parsed()) {
        run.command = args.command;
        if (args.had_separator && run.command.empty()) {
            throw cli_error(EX_USAGE, "no command after --");
        }
        run.config = config_flag;
        return run_command(run);
    }
    if (args.had_separator) {
        throw cli_error(EX_USAGE, "-- is only used by run: locksmith run NAME -- COMMAND");
    }
    if (strategies_cmd->parsed()) return strategies_command(config_flag, json);
    if (explain_cmd->parsed()) return explain_command(config_flag, explain_require, json, explain_start);
    if (check_cmd->parsed()) return config_check_command(check_file, check_json);
    if (status_cmd->parsed()) {
        return status_command(config_flag, status_name, status_selection, json);
    }
    throw cli_error(EX_SOFTWARE, "no command was run");  // require_subcommand(1) prevents this
}

}  // namespace

#ifdef LOCKSMITH_CLI_LINKED_MODULES
namespace locksmith::cli {
void link_modules();  // generated by cli/CMakeLists.txt
}
#endif

int main(int argc, char** argv) {
    try {
#ifdef LOCKSMITH_CLI_LINKED_MODULES
        link_modules();
#endif
        return run_main(argc, argv);
    } catch (const std::exception& e) {
        print_error(message_for(e));
        return exit_code_for(e);
    } catch (...) {
        print_error("internal error: unknown exception");
        return EX_SOFTWARE;
    }
}
