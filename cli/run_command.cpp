#include "run_command.hpp"

#include <cstdlib>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/lock_factory.hpp>

#include "cli_common.hpp"
#include "supervisor.hpp"

namespace locksmith::cli {

namespace {

using clock = std::chrono::steady_clock;

// Why this strategy: the pin, the lock rule, or the selection report, as the factory decided.
void explain_choice(const lock_factory& factory, const std::string& name,
                    const lock_request& request, const std::string& chosen) {
    const lock_resolution r = factory.resolve(name, request);
    if (!r.strategy.empty()) {
        print_note("strategy " + chosen +
                   (r.strategy_from_request ? std::string(" (pinned by --strategy)")
                                            : " (pinned by the lock rule \"" + r.rule->pattern +
                                                  "\" in " + factory.settings().origin + ")"));
        return;
    }
    std::string source = r.require_from_request         ? "--require"
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
    std::string note = name + " is held";
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
    note += std::string("; waiting for the ") + (shared ? "shared" : "exclusive") + " lock (" +
            lock.strategy() + ")";
    note += wait ? " up to " + format_seconds(*wait) : " until it is free";
    return note;
}

void set_child_environment(const named_lock& lock) {
    ::setenv("LOCKSMITH_NAME", lock.name().c_str(), 1);
    ::setenv("LOCKSMITH_STRATEGY", lock.strategy().c_str(), 1);
    // Unset otherwise, so that a token from an enclosing `locksmith run` cannot be mistaken for
    // this grant's.
    if (auto token = lock.fencing_token()) {
        ::setenv("LOCKSMITH_FENCING_TOKEN", std::to_string(*token).c_str(), 1);
    } else {
        ::unsetenv("LOCKSMITH_FENCING_TOKEN");
    }
}

}  // namespace

int run_command(const run_options& options) {
    if (options.shell && !options.command.empty()) {
        throw cli_error(EX_USAGE,
                        "give either -c 'shell command' or -- COMMAND [ARGS...], not both");
    }
    if (!options.shell && options.command.empty()) {
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

    auto factory = make_factory(options.config);
    lock_request request = make_request(*factory, options.selection);
    if (options.ttl_s) {
        auto ttl = parse_seconds(*options.ttl_s, "--ttl", false);
        request.ttl = std::max(std::chrono::ceil<std::chrono::milliseconds>(ttl),
                               std::chrono::milliseconds(1));
    }
    request.on_error = [](const error& e) { print_error(e.what()); };
    // No slow-wait records: -v says before a wait that it waits (and for whom), and after it
    // how long it took.
    factory->set_logger(std::make_shared<stderr_sink>(options.verbose),
                        std::chrono::milliseconds(0));

    named_lock lock =
        starting_strategy([&] { return factory->create_lock(options.name, request); });
    // A strategy that excludes nothing (null) was said by the factory's locking_off warning.
    refuse_process_local(*factory, request, lock.strategy());
    // The mode actually requested: a strategy without a shared mode takes the lock exclusively.
    const bool shared = options.shared && has(lock.capabilities(), capability::shared);
    if (options.verbose) {
        explain_choice(*factory, options.name, request, lock.strategy());
        if (options.shared && !shared) {
            print_note("the " + lock.strategy() +
                       " strategy has no shared mode; taking the lock exclusively instead");
        }
    }

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
        return options.conflict_exit_code;
    }
    if (options.verbose) {
        std::string note = "acquired " + options.name + " (" +
                           (lock.held_mode() == lock_mode::shared ? "shared" : "exclusive") +
                           ", strategy " + lock.strategy() + ") after " + format_seconds(waited);
        if (auto token = lock.fencing_token()) note += ", fencing token " + std::to_string(*token);
        if (auto left = lock.remaining_lifetime()) note += ", ttl " + format_seconds(*left);
        print_note(note);
    }

    set_child_environment(lock);
    // -c runs /bin/sh, not $SHELL as flock(1) does: a script's meaning should not depend on the
    // login shell of whoever runs it.
    std::vector<std::string> argv =
        options.shell ? std::vector<std::string>{"/bin/sh", "-c", *options.shell} : options.command;
    return supervise_child(lock, argv, supervision);
}

}  // namespace locksmith::cli
