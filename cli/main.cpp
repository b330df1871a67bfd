// SPDX-License-Identifier: MIT
// locksmith: run a command under a named lock on the best strategy, and explain the choice.
//
// main() parses the command line (CLI11) with the commands that register themselves from their
// own files (command.hpp), runs the one given, and turns every failure into a
// one-line "locksmith: ..." message and a sysexits(3) code. Nothing escapes as a crash.
#include <sysexits.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <locksmith/author/plugin.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/version.hpp>

#include "cli_common.hpp"
#include "command.hpp"
#include "inherited_fds.hpp"

namespace {

using namespace locksmith;
using namespace locksmith::cli;

constexpr const char* main_footer =
    R"(Configuration: --config FILE, else $LOCKSMITH_CONFIG (a path, or JSON starting with '{'),
else ~/.config/locksmith/config.json (~ from the passwd entry), else /etc/locksmith/config.json,
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

// --version: the version, the plugin API a plugin must be built for, and the strategies this
// build has (built in, or modules opened at first use).
std::string version_text() {
    strategy_registry registry;
    register_builtin_strategies(registry);
    std::string built_in, modules;
    for (const auto& name : registry.names()) {
        const auto d = registry.find(name);
        auto& list = d && d->origin.rfind("module", 0) == 0 ? modules : built_in;
        list += (list.empty() ? "" : " ") + name;
    }
    return "locksmith " + std::string(version) + "\nplugin API " +
           std::to_string(LOCKSMITH_PLUGIN_API_VERSION) + "\nbuilt-in strategies: " + built_in +
           "\nstrategy modules: " + (modules.empty() ? "none" : modules);
}

int run_main(int argc, char** argv) {
    CLI::App app{"locksmith " + std::string(version) +
                     ": run commands under named locks, on the best available strategy",
                 "locksmith"};
    app.set_version_flag("--version", version_text);
    app.require_subcommand(1);
    app.footer(main_footer);
    app.fallthrough();

    std::optional<std::string> config_flag;
    app.add_option("--config", config_flag, "Configuration file (see below)")->type_name("FILE");
    // Each command registers itself from its own file (command.hpp).
    for (command* c : commands()) c->attach(app);

    split_args args = split_at_separator(argc, argv);
    // CLI11 reports an unknown subcommand as "a subcommand is required"; name the word instead.
    if (!args.front.empty() && args.front.front().rfind('-', 0) != 0) {
        const std::string& word = args.front.front();
        bool known = false;
        for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
            known = known || sub->check_name(word);
        }
        if (!known) {
            throw cli_error(EX_USAGE, "unknown command '" + word + "' (commands: " +
                                          command_names(", ") + "; see locksmith --help)");
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
        if (app.get_subcommands().empty()) {
            // CLI11 says "A subcommand is required" without naming one.
            if (missing && extras.empty())
                message = "a command is required: " + command_names(" or ");
        } else {
            for (const command* c : commands())
                if (c->parsed()) c->reword_usage_error(e, extras, message, hint);
        }
        print_error(message + "\n" + hint);
        return EX_USAGE;
    }

    for (command* c : commands()) {
        if (!c->parsed()) continue;
        if (args.had_separator && !c->takes_command_line()) {
            throw cli_error(EX_USAGE, "-- is only used by run: locksmith run NAME -- COMMAND");
        }
        return c->run(invocation{config_flag, args.command, args.had_separator});
    }
    throw cli_error(EX_SOFTWARE, "no command was run");  // require_subcommand(1) prevents this
}

}  // namespace

#ifdef LOCKSMITH_CLI_LINKED_MODULES
namespace locksmith::cli {
void link_modules();  // generated by cli/CMakeLists.txt
}
#endif

namespace {

int guarded_main(int argc, char** argv) {
    try {
#ifdef LOCKSMITH_CLI_LINKED_MODULES
        locksmith::cli::link_modules();
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

}  // namespace

int main(int argc, char** argv) {
    // Before anything opens a descriptor: what `run` passes on to its command.
    locksmith::cli::remember_inherited_fds();
    const int code = guarded_main(argc, argv);
    // Leaves without exit handlers and library finalizers. `combined` answers once a quorum
    // has, and a slower member's request goes on, on a thread of its own, inside its client
    // library: CI saw `run` abort in GSSAPI's finalizer (krb5int_key_delete) while a member was
    // still connecting through libpq. Every lock is released by now; only output is left.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
    __lsan_do_leak_check();  // LeakSanitizer checks at exit, which _Exit skips
#endif
    std::_Exit(code);
}
