// SPDX-License-Identifier: MIT
#include "run_command.hpp"

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/named_semaphore.hpp>

#include "cli_common.hpp"
#include "command.hpp"
#include "supervisor.hpp"

namespace locksmith::cli {

namespace {

using clock = std::chrono::steady_clock;

// Why this strategy: the pin, the lock rule, or the selection report, as the factory decided.
void explain_choice(const lock_factory& factory, const std::string& name,
                    const lock_request& request, const std::string& chosen, bool counting) {
    lock_resolution r = factory.resolve(name, request);
    if (counting) r.require |= capability::counting;
    if (!r.strategy.empty()) {
        print_note("strategy " + chosen +
                   (r.strategy_from_request ? std::string(" (pinned by --strategy)")
                                            : " (pinned by the lock rule \"" + r.rule->pattern +
                                                  "\" in " + factory.settings().origin + ")"));
        return;
    }
    std::string source = r.require_from_request        ? "--require"
                         : (r.rule && r.rule->require) ? "the lock rule \"" + r.rule->pattern + "\""
                                                       : "the default";
    print_note("strategy " + chosen + " for " + to_string(r.require) + " (from " + source +
               "; config: " + factory.settings().origin + ")");
    print_note(factory.explain(r.require).to_string());
}

// A strategy whose locks exclude each other only inside one process (`memory`) would let two
// runs hold NAME at once: refuse it, whether --strategy, a lock rule or selection chose it.
void refuse_process_local(const lock_factory& factory, const lock_request& request,
                          const std::string& strategy) {
    const auto descriptor = factory.registry().find(strategy);
    if (!descriptor || descriptor->spans_processes) return;
    throw cli_error(request.strategy.empty() ? EX_CONFIG : EX_USAGE,
                    "strategy '" + strategy +
                        "' holds locks inside one process only: two runs would both hold the "
                        "lock. Choose a strategy that spans processes (locksmith strategies)");
}

// "NAME is held (exclusive by pid 42); waiting up to 5.000 s": what the wait is for, said once.
// The holders are what the strategy's status can tell; nothing when it cannot.
std::string waiting_note(lock_factory& factory, const named_lock& lock, const std::string& name,
                         bool shared, const std::optional<clock::duration>& wait) {
    const std::uint32_t limit = lock.owner()->limit();
    std::string note = limit != 0 ? "every permit of " + name + " is held" : name + " is held";
    try {
        lock_status status = factory.store_for(lock.strategy())->status(name);
        std::string holders;
        for (const auto& holder : status.holders) {
            holders += (holders.empty() ? "" : "; ") + holder;
        }
        if (!holders.empty()) note += " (" + holders + ")";
    } catch (const std::exception&) {
        // Who holds it is a courtesy; the wait does not depend on it.
    }
    note += limit != 0 ? "; waiting for one of its " + std::to_string(limit) + " permits (" +
                             lock.strategy() + ")"
                       : std::string("; waiting for the ") + (shared ? "shared" : "exclusive") +
                             " lock (" + lock.strategy() + ")";
    note += wait ? " up to " + format_seconds(*wait) : " until it is free";
    return note;
}

void set_child_environment(const named_lock& lock, const named_semaphore* permit) {
    ::setenv("LOCKSMITH_NAME", lock.name().c_str(), 1);
    ::setenv("LOCKSMITH_STRATEGY", lock.strategy().c_str(), 1);
    // Unset for a lock, as the token below, so that an enclosing run's permit is not taken for
    // this one.
    if (permit) {
        ::setenv("LOCKSMITH_PERMIT", permit->permit().c_str(), 1);
    } else {
        ::unsetenv("LOCKSMITH_PERMIT");
    }
    // Unset otherwise, so that a token from an enclosing `locksmith run` cannot be mistaken for
    // this grant's.
    if (auto token = lock.fencing_token()) {
        ::setenv("LOCKSMITH_FENCING_TOKEN", std::to_string(*token).c_str(), 1);
    } else {
        ::unsetenv("LOCKSMITH_FENCING_TOKEN");
    }
}

}  // namespace

// What run --json says at the end, one line on stderr: for scripts and log collectors, which
// should not parse -v's sentences. Written however the run ends once the lock was asked for.
struct json_summary {
    json_summary(const run_options& o, std::string lock_strategy, std::string lock_mode)
        : options(o), strategy(std::move(lock_strategy)), mode(std::move(lock_mode)) {}

    const run_options& options;
    std::string strategy;
    std::string mode;  // "exclusive", "shared" or "permit"
    bool acquired = false;
    clock::duration waited{};
    std::optional<clock::time_point> granted_at;
    std::optional<std::uint64_t> token;
    supervise_options::outcome outcome;

    void print(int exit_status) const {
        if (!options.json) return;
        nlohmann::json line = nlohmann::json::object();
        put_bytes(line, "name", options.name);
        line["strategy"] = strategy;
        line["mode"] = mode;
        line["acquired"] = acquired;
        line["waited_s"] = std::chrono::duration<double>(waited).count();
        line["held_s"] = nullptr;
        if (granted_at)
            line["held_s"] = std::chrono::duration<double>(clock::now() - *granted_at).count();
        line["fencing_token"] = nullptr;
        if (token) line["fencing_token"] = *token;
        line["command_status"] = nullptr;
        if (outcome.command_status) line["command_status"] = *outcome.command_status;
        line["lost"] = outcome.lost;
        line["released"] = acquired && !outcome.release_failed;
        line["exit_status"] = exit_status;
        std::fprintf(stderr, "%s\n", dump_line(line).c_str());
    }
};

int hold_and_supervise(const run_options& options, named_lock& lock, named_semaphore* permit,
                       std::uint32_t limit, clock::duration waited, supervise_options& supervision,
                       const json_summary& summary);

int run_command(const run_options& options) {
    if (options.hold && (options.shell || !options.command.empty()))
        throw cli_error(EX_USAGE,
                        "hold takes no command: it holds NAME until its input ends or it gets "
                        "SIGTERM; use run NAME -- COMMAND to run one");
    if (options.shell && !options.command.empty()) {
        throw cli_error(EX_USAGE,
                        "give either -c 'shell command' or -- COMMAND [ARGS...], not both");
    }
    if (!options.hold && !options.shell && options.command.empty()) {
        throw cli_error(EX_USAGE,
                        "no command to run: use locksmith run NAME -- COMMAND [ARGS...] or "
                        "locksmith run NAME -c 'shell command'");
    }
    if (options.shell && options.shell->empty()) throw cli_error(EX_USAGE, "-c needs a command");
    validate_lock_name(options.name);

    std::optional<clock::duration> wait;
    if (options.wait_s) wait = parse_seconds(*options.wait_s, "-w/--wait", true);
    const bool nonblocking = options.nonblock || (wait && *wait == clock::duration::zero());

    supervise_options supervision;
    supervision.kill_after = parse_seconds(options.kill_after_s, "--kill-after", true);
    supervision.lost_exit_code = options.lost_exit_code;
    supervision.verbose = options.verbose;

    // Before any plugin is loaded or store made: their threads inherit the blocked signals.
    stop_requests stops;
    supervision.command_mask = &stops.original_mask();
    auto factory = make_factory(options.config);
    lock_request request = make_request(*factory, options.selection);
    if (options.ttl_s) {
        auto ttl = parse_seconds(*options.ttl_s, "--ttl", false);
        request.ttl = std::max(std::chrono::ceil<std::chrono::milliseconds>(ttl),
                               std::chrono::milliseconds(1));
    }
    request.on_error = [](const error& e) { print_error(e.what()); };
    // Renewed by the library, not by the supervision's own calls: a renewal stuck on a dead
    // network then holds no one up, and the lease's end makes lock.loss_fd() readable, at which
    // the command is stopped before the server can grant the name to another (issue 25).
    request.auto_refresh = true;
    // No slow-wait records: -v says before a wait that it waits (and for whom), and after it
    // how long it took.
    factory->set_logger(std::make_shared<stderr_sink>(options.verbose),
                        std::chrono::milliseconds(0));

    // A permit instead of the lock: --limit, else the matching lock rule's limit.
    const lock_rule* rule = factory->settings().rule_for(options.name);
    const std::uint32_t limit = options.limit         ? *options.limit
                                : rule && rule->limit ? *rule->limit
                                                      : 0;
    if (limit != 0 && options.shared)
        throw cli_error(EX_USAGE, "a counting semaphore has no shared mode: -s/--shared and " +
                                      std::string(options.limit ? "--limit"
                                                                : "the lock rule's "
                                                                  "\"limit\"") +
                                      " exclude each other");
    std::optional<named_semaphore> permit;
    std::optional<named_lock> plain;
    if (limit != 0) {
        permit.emplace(starting_strategy(
            [&] { return factory->create_semaphore(options.name, limit, request); }));
    } else {
        plain.emplace(
            starting_strategy([&] { return factory->create_lock(options.name, request); }));
    }
    // A permit is held, waited for and supervised through the lock behind it.
    named_lock& lock = permit ? permit->as_lock() : *plain;
    // A strategy that excludes nothing (null) was said by the factory's locking_off warning.
    refuse_process_local(*factory, request, lock.strategy());
    // The mode actually requested: a strategy without a shared mode takes the lock exclusively.
    const bool shared = options.shared && has(lock.capabilities(), capability::shared);
    if (options.verbose) {
        explain_choice(*factory, options.name, request, lock.strategy(), limit != 0);
        if (options.shared && !shared) {
            print_note("the " + lock.strategy() +
                       " strategy has no shared mode; taking the lock exclusively instead");
        }
    }

    json_summary summary(options, lock.strategy(),
                         permit   ? "permit"
                         : shared ? "shared"
                                  : "exclusive");
    const auto started = clock::now();
    // One attempt first, so that -v can say that (and for whom) it waits before it does.
    bool acquired = shared ? lock.try_lock_shared() : lock.try_lock();
    if (!acquired && !nonblocking) {
        if (options.verbose) {
            print_note(waiting_note(*factory, lock, options.name, shared, wait));
        }
        if (wait) {
            const auto left = *wait - (clock::now() - started);
            acquired = shared ? lock.try_lock_shared_for(left) : lock.try_lock_for(left);
        } else {
            if (shared) {
                lock.lock_shared();
            } else {
                lock.lock();
            }
            acquired = true;
        }
    }
    const auto waited = clock::now() - started;
    if (!acquired) {
        if (options.verbose) {
            print_note(nonblocking ? options.name + " is held; not waiting (-n)"
                                   : options.name + " is still held; gave up after " +
                                         format_seconds(waited));
        }
        summary.waited = waited;
        summary.print(options.conflict_exit_code);
        return options.conflict_exit_code;
    }
    stops.hand_over();
    summary.acquired = true;
    summary.waited = waited;
    summary.granted_at = clock::now();
    if (options.json) summary.token = lock.fencing_token();
    supervision.report = &summary.outcome;
    // A command that cannot start (127, 126) still ends the run with its line.
    try {
        return hold_and_supervise(options, lock, permit ? &*permit : nullptr, limit, waited,
                                  supervision, summary);
    } catch (const std::exception& e) {
        // Released here, not by the destructor during unwinding, so that the line can say so.
        if (options.json) {
            try {
                lock.release();
            } catch (const std::exception&) {
                summary.outcome.release_failed = true;
            }
        }
        summary.print(exit_code_for(e));
        throw;
    }
}

int hold_and_supervise(const run_options& options, named_lock& lock, named_semaphore* permit,
                       std::uint32_t limit, clock::duration waited, supervise_options& supervision,
                       const json_summary& summary) {
    if (options.verbose) {
        std::string note =
            permit ? "acquired a permit of " + options.name + " (limit " + std::to_string(limit) +
                         ", strategy " + lock.strategy() + ") after " + format_seconds(waited)
                   : "acquired " + options.name + " (" +
                         (lock.held_mode() == lock_mode::shared ? "shared" : "exclusive") +
                         ", strategy " + lock.strategy() + ") after " + format_seconds(waited);
        if (auto token = lock.fencing_token()) note += ", fencing token " + std::to_string(*token);
        if (auto left = lock.remaining_lifetime()) note += ", ttl " + format_seconds(*left);
        print_note(note);
    }

    set_child_environment(lock, permit);
    if (options.hold) {
        // The script that started us waits for this line (with the token, for fencing), then
        // does its work. The lock is held by this process, kept honest by the same supervision
        // as run's, with a child that waits for the end of our input; a stop request reaches it
        // as a forwarded signal and is a normal end here.
        const auto token = lock.fencing_token();
        supervision.started = [&] {
            // A reader that went away must not kill the holder (SIGPIPE) with the lock held.
            std::signal(SIGPIPE, SIG_IGN);
            std::printf("held%s\n", token ? (" " + std::to_string(*token)).c_str() : "");
            std::fflush(stdout);
        };
        int status = supervise_child(lock, {"/bin/sh", "-c", "exec cat >/dev/null"}, supervision);
        for (int stop : {SIGTERM, SIGINT, SIGHUP})
            if (status == 128 + stop) status = 0;
        summary.print(status);
        return status;
    }
    // -c runs /bin/sh, not $SHELL as flock(1) does: a script's meaning should not depend on the
    // login shell of whoever runs it.
    std::vector<std::string> argv =
        options.shell ? std::vector<std::string>{"/bin/sh", "-c", *options.shell} : options.command;
    const int status = supervise_child(lock, argv, supervision);
    summary.print(status);
    return status;
}

// --- the command line ---------------------------------------------------------------------

namespace {

constexpr const char* run_footer = R"(Usage: locksmith run [OPTIONS] NAME -- COMMAND [ARGS...]
       locksmith run [OPTIONS] NAME -c 'SHELL COMMAND'
--config FILE (before or after "run") selects the configuration; see locksmith --help.

Exit status:
  the command's own status (128+N when signal N ended it);
  the conflict code (-E, default 1) when the lock is held (-n) or the wait (-w) ran out;
  the lost-lock code (--lost-exit-code, default 75) when the lock was lost while the command
  ran (not refreshed in time, or removed or taken over by another process);
  74 when the command ran but releasing the lock failed (it may still be held; a release the
  server could not be reached for is tried again for up to 10 s first);
  126/127 when the command cannot be executed / is not found;
  64 bad usage, 66 config file missing or unreadable, 69 no strategy qualifies or the chosen
  one cannot start or its backend failed, 70 internal error, 71 fork/exec failure,
  78 configuration error.

The command gets LOCKSMITH_NAME, LOCKSMITH_STRATEGY, with --limit LOCKSMITH_PERMIT (which
permit it holds) and, for strategies with fencing, LOCKSMITH_FENCING_TOKEN. SIGINT, SIGTERM and
SIGHUP are forwarded to it. The lock is not inherited by the command's descriptors, and is
released when the command ends.

--limit N runs the command while holding one of N permits of the counting semaphore NAME
(at most N such commands at once, on strategies with capability counting); a lock rule's
"limit" does the same without --limit.)";

constexpr const char* hold_footer = R"(Usage: locksmith hold [OPTIONS] NAME
--config FILE (before or after "hold") selects the configuration; see locksmith --help.

Holds the lock NAME across several commands of a script: prints "held" (and the fencing token,
for strategies with fencing) once granted, then keeps the lock until its standard input ends or
it gets SIGTERM, SIGINT or SIGHUP, and releases it:
  coproc HOLD { exec locksmith hold -w 30 deploy; }
  read -r state token <&"${HOLD[0]}" && [ "$state" = held ] || exit 1
  ...the commands...
  exec {HOLD[1]}>&-; wait "$HOLD_PID"
With --limit N it holds one of N permits of NAME instead. A release that fails because the
server cannot be reached is tried again for up to 10 s, as run does.

Exit status: 0 released; the conflict code (-E, default 1) when the lock is held (-n) or the
wait (-w) ran out; the lost-lock code (--lost-exit-code, default 75) when the lock was lost
meanwhile; 74 when releasing failed; the other codes as for run.)";

// `run` and `hold` share their options and their code; hold has no command.
class run_cli : public command {
  public:
    run_cli(const char* word, int help_position, bool hold) : command(help_position), word_(word) {
        options_.hold = hold;
    }

    int run(const invocation& in) override {
        options_.command = in.command;
        if (in.had_separator && options_.command.empty())
            throw cli_error(EX_USAGE, "no command after --");
        options_.config = in.config;
        return run_command(options_);
    }
    bool takes_command_line() const override { return !options_.hold; }
    void reword_usage_error(const CLI::ParseError& e, const std::vector<std::string>&, std::string&,
                            std::string& hint) const override {
        // "locksmith run NAME COMMAND": flock(1) allows it, but here the command's own options
        // would be read as locksmith's; "--" makes the boundary explicit.
        if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
            hint = "Put -- before the command: locksmith run [OPTIONS] NAME -- COMMAND [ARGS...]";
    }

  protected:
    CLI::App* add_subcommand(CLI::App& app) override {
        auto* cmd = options_.hold ? app.add_subcommand(word_,
                                                       "Hold the lock NAME across several commands "
                                                       "of a script, until its input ends or it "
                                                       "gets SIGTERM")
                                  : app.add_subcommand(word_,
                                                       "Run a command while holding the lock "
                                                       "NAME: run NAME -- COMMAND [ARGS...]");
        cmd->footer(options_.hold ? hold_footer : run_footer);
        return cmd;
    }
    void add_options(CLI::App& cmd) override {
        CLI::App* run_cmd = &cmd;
        run_cmd->add_option("NAME", options_.name, "Lock name (any bytes)")
            ->required()
            ->type_name("");
        auto* exclusive = run_cmd->add_flag("-x,-e,--exclusive", exclusive_flag_,
                                            "Take the lock exclusively (default)");
        auto* shared =
            run_cmd->add_flag("-s,--shared", options_.shared, "Take a shared (read) lock");
        exclusive->excludes(shared);
        auto* nonblock = run_cmd->add_flag("-n,--nonblock,--no-wait", options_.nonblock,
                                           "Fail at once (conflict code) when the lock is held");
        auto* wait = run_cmd
                         ->add_option("-w,--wait,--timeout", options_.wait_s,
                                      "Give up after SECONDS (fractions allowed; 0 = -n)")
                         ->type_name("SECONDS");
        nonblock->excludes(wait);
        run_cmd
            ->add_option("-E,--conflict-exit-code", options_.conflict_exit_code,
                         "Exit code when the lock is held or the wait ran out (default 1)")
            ->check(CLI::Range(0, 255))
            ->type_name("N");
        run_cmd
            ->add_option("--ttl", options_.ttl_s, "Lifetime of the lock, for expiring strategies")
            ->type_name("SECONDS");
        run_cmd
            ->add_option("--limit", options_.limit,
                         "Hold one of N permits of the counting semaphore NAME instead of the "
                         "lock")
            ->check(CLI::Range(std::uint32_t(1), max_semaphore_limit))
            ->type_name("N");
        run_cmd
            ->add_option("--kill-after", options_.kill_after_s,
                         "After losing the lock: SIGTERM the command, then SIGKILL after SECONDS "
                         "(default 5)")
            ->type_name("SECONDS");
        run_cmd
            ->add_option("--lost-exit-code", options_.lost_exit_code,
                         "Exit code when the lock was lost while the command ran (default 75)")
            ->check(CLI::Range(0, 255))
            ->type_name("N");
        auto* run_strategy = run_cmd
                                 ->add_option("--strategy", options_.selection.strategy,
                                              "Use this strategy (skips selection)")
                                 ->type_name("NAME");
        auto* run_require = run_cmd
                                ->add_option("--require", options_.selection.require,
                                             "Required capabilities, e.g. exclusive,distributed")
                                ->type_name("CAPS");
        run_strategy->excludes(run_require);
        if (!options_.hold)
            run_cmd->add_option("-c,--command", options_.shell, "Run this command with /bin/sh -c")
                ->type_name("'SHELL COMMAND'");
        run_cmd->add_flag("-v,--verbose", options_.verbose,
                          "Say which strategy was chosen and why, and how long the wait took");
        run_cmd->add_flag("--json", options_.json,
                          "At the end, one JSON line on stderr: strategy, waited, held, fencing "
                          "token, exit status, lost or not");
    }

  private:
    const char* word_;
    run_options options_;
    bool exclusive_flag_ = false;  // the default; the flag exists for flock(1) compatibility
};

run_cli run_registration("run", 10, false);
run_cli hold_registration("hold", 15, true);

}  // namespace

}  // namespace locksmith::cli
