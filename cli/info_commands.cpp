// SPDX-License-Identifier: MIT
#include "info_commands.hpp"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <locksmith/author/module.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

#include "cli_common.hpp"
#include "command.hpp"

namespace locksmith::cli {

namespace {

using nlohmann::json;

json capability_list(capability set) {
    json out = json::array();
    for (capability bit : all_capabilities) {
        if (has(set, bit)) out.push_back(std::string(capability_name(bit)));
    }
    return out;
}

// The order selection tries strategies in, as `explain` shows it: the ones that could serve
// first, then by effective priority (highest first), ties by name.
void sort_as_selection_does(std::vector<strategy_info>& infos) {
    auto usable = [](const strategy_info& i) {
        return i.enabled && i.support.supported &&
               (!i.descriptor.needs_configuration || i.configured);
    };
    std::sort(infos.begin(), infos.end(), [&](const strategy_info& a, const strategy_info& b) {
        if (usable(a) != usable(b)) return usable(a);
        if (a.effective_priority != b.effective_priority) {
            return a.effective_priority > b.effective_priority;
        }
        return a.descriptor.name < b.descriptor.name;
    });
}

// A plain text table: columns padded to their widest cell, two spaces apart, no trailing blanks.
class text_table {
  public:
    explicit text_table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    void print(std::ostream& out) const {
        std::vector<std::size_t> width;
        for (const auto& row : rows_) {
            if (width.size() < row.size()) width.resize(row.size(), 0);
            for (std::size_t i = 0; i < row.size(); ++i)
                width[i] = std::max(width[i], row[i].size());
        }
        for (const auto& row : rows_) {
            std::string line;
            for (std::size_t i = 0; i < row.size(); ++i) {
                line += row[i];
                if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out << line << '\n';
        }
    }

  private:
    std::vector<std::vector<std::string>> rows_;
};

// Stable identifiers for scripts (the library's to_string is prose and may change).
std::string state_id(lock_status::state s) {
    switch (s) {
        case lock_status::state::free:
            return "free";
        case lock_status::state::held_exclusive:
            return "held_exclusive";
        case lock_status::state::held_shared:
            return "held_shared";
        case lock_status::state::unknown:
            break;
    }
    return "unknown";
}

// Where a strategy comes from: built in, a module, a plugin's file (set by the registry's loaders).
std::string origin_of(const strategy_descriptor& d) {
    return d.origin.empty() ? "the program" : d.origin;
}

std::string yes_no(bool b) {
    return b ? "yes" : "no";
}

std::string state_text(lock_status::state s) {
    switch (s) {
        case lock_status::state::free:
            return "free";
        case lock_status::state::held_exclusive:
            return "held exclusive";
        case lock_status::state::held_shared:
            return "held shared";
        case lock_status::state::unknown:
            break;
    }
    return "unknown";
}

}  // namespace

int strategies_command(const std::optional<std::string>& config_flag, bool json_output) {
    auto factory = make_factory(config_flag);
    auto infos = factory->registry().list();
    sort_as_selection_does(infos);
    if (json_output) {
        json list = json::array();
        for (const auto& info : infos) {
            list.push_back({
                {"name", info.descriptor.name},
                {"description", info.descriptor.description},
                {"default_priority", info.descriptor.default_priority},
                {"priority", info.effective_priority},
                {"priority_source", info.priority_source},
                {"capabilities", capability_list(info.capabilities)},
                {"enabled", info.enabled},
                {"enabled_by_default", info.descriptor.enabled_by_default},
                {"needs_configuration", info.descriptor.needs_configuration},
                {"configured", info.configured},
                {"supported", info.support.supported},
                {"reason", info.support.reason},
                {"origin", origin_of(info.descriptor)},
            });
        }
        json out{{"strategies", list}};
        put_bytes(out, "config", factory->settings().origin);
        std::cout << dump_line(out) << '\n';
        return 0;
    }
    std::cout << "config: " << factory->settings().origin << "\n\n";
    text_table table({"NAME", "PRIORITY", "DEFAULT", "PRIORITY FROM", "ENABLED", "SUPPORTED",
                      "CAPABILITIES", "FROM"});
    std::vector<std::string> notes;
    for (const auto& info : infos) {
        const auto& d = info.descriptor;
        std::string enabled = yes_no(info.enabled);
        if (d.needs_configuration && !info.configured) enabled += " (needs options)";
        table.add({d.name, std::to_string(info.effective_priority),
                   std::to_string(d.default_priority), info.priority_source, enabled,
                   yes_no(info.support.supported), to_string(info.capabilities), origin_of(d)});
        if (!info.support.reason.empty()) {
            notes.push_back(d.name + (info.support.supported ? ": " : ": not supported: ") +
                            info.support.reason);
        }
    }
    table.print(std::cout);
    if (!notes.empty()) {
        std::cout << '\n';
        for (const auto& note : notes) std::cout << note << '\n';
    }
    return 0;
}

int explain_command(const std::optional<std::string>& config_flag,
                    const std::optional<std::string>& name, const std::string& require,
                    bool json_output, bool start) {
    if (!name && require.empty())
        throw cli_error(EX_USAGE, "explain needs a lock NAME or --require CAPS");
    lock_request request;
    if (!require.empty()) request.require = parse_require(require);
    auto factory = make_factory(config_flag);
    // With a name, what run NAME would do: the rule's capabilities and pin.
    std::optional<lock_resolution> resolved;
    if (name) resolved = factory->resolve(*name, request);
    const lock_rule* rule = resolved ? resolved->rule : nullptr;
    // A name whose rule sets a limit is a counting semaphore: `run` asks for counting too.
    const bool counted = rule && rule->limit;
    const capability wanted = (resolved ? resolved->require : request.require) |
                              (counted ? capability::counting : capability::none);
    const std::string pinned = resolved ? resolved->strategy : std::string();
    selection_report report =
        start && pinned.empty() ? factory->explain_and_start(wanted) : factory->explain(wanted);
    if (start && !pinned.empty()) {
        try {
            (void)factory->store_for(pinned);
        } catch (const std::exception& e) {
            report.start_error = e.what();
        }
    }
    const auto* winner = report.chosen();
    const std::string chosen = !pinned.empty() ? pinned : winner ? winner->strategy : "";
    const std::string what =
        name ? "lock '" + *name + "'" : "locks that require " + to_string(wanted);
    const bool locking_off = !chosen.empty() && warn_if_locking_off(*factory, chosen, what);
    const auto warnings =
        chosen.empty() ? std::vector<std::string>() : warn_about_options(*factory, chosen);
    const char* require_from = !resolved || resolved->require_from_request ? "--require"
                               : rule && rule->require                     ? "rule"
                                                                           : "default";
    if (json_output) {
        json entries = json::array();
        for (const auto& e : report.entries) {
            entries.push_back({{"strategy", e.strategy},
                               {"priority", e.priority},
                               {"candidate", e.candidate},
                               {"passed_over", e.passed_over}});
        }
        json out{
            {"requested", capability_list(report.requested)},
            {"chosen", chosen.empty() ? json(nullptr) : json(chosen)},
            {"starts", start && !chosen.empty() ? json(report.start_error.empty()) : json(nullptr)},
            {"start_error", report.start_error.empty() ? json(nullptr) : json(report.start_error)},
            {"excludes_nothing", locking_off},
            {"warnings", warnings},
            {"entries", entries}};
        if (resolved) {
            put_bytes(out, "name", *name);
            out["rule"] = rule ? json(rule->pattern) : json(nullptr);
            out["require_from"] = require_from;
            out["pinned"] = pinned.empty() ? json(nullptr) : json(pinned);
            out["ttl_ms"] = resolved->ttl.count();
            out["fallback"] = resolved->fallback;
            out["limit"] = counted ? json(*rule->limit) : json(nullptr);
        }
        put_bytes(out, "config", factory->settings().origin);
        std::cout << dump_line(out) << '\n';
    } else {
        std::cout << "config: " << factory->settings().origin << '\n';
        if (resolved) {
            std::cout << "name: " << *name << '\n'
                      << "rule: " << (rule ? "'" + rule->pattern + "'" : std::string("none"))
                      << '\n'
                      << "requested: " << to_string(wanted) << " (from " << require_from
                      << (counted
                              ? "; counting: the rule's limit of " + std::to_string(*rule->limit)
                              : std::string())
                      << ")\n"
                      << "ttl: " << format_seconds(resolved->ttl)
                      << ", fallback: " << (resolved->fallback ? "yes" : "no") << '\n';
            if (!pinned.empty())
                std::cout << "strategy: " << pinned << " (pinned by "
                          << (resolved->strategy_from_request ? "the request" : "the rule")
                          << "; selection below is what it would be without the pin)\n";
        } else {
            std::cout << "requested: " << to_string(report.requested) << '\n';
        }
        std::string text = report.to_string();
        std::cout << text;
        if (!text.empty() && text.back() != '\n') std::cout << '\n';
        if (!pinned.empty() && !report.start_error.empty())
            std::cout << pinned << " cannot start: " << report.start_error << '\n';
    }
    return !chosen.empty() && report.start_error.empty() ? 0 : EX_UNAVAILABLE;
}

int config_check_command(const std::string& file, bool json_output) {
    std::string text = read_input_file(file, "config file");
    // Plugins load first, so that the checks know their strategies and options; a document
    // that does not parse loads none (check lists why).
    std::vector<config_error> plugin_problems;
    try {
        plugin_problems = load_plugins(config::parse(text, file), default_registry());
    } catch (const config_error&) {
    }
    std::vector<config_error> problems = default_registry().check(text);
    problems.insert(problems.end(), plugin_problems.begin(), plugin_problems.end());
    // A valid config may still leave a hole (strategy_descriptor::warnings): said, not an error.
    std::vector<std::pair<std::string, std::string>> warnings;  // pointer, message
    if (problems.empty()) {
        for (const auto& [name, settings] : config::parse(text, file).strategies) {
            const auto d = default_registry().find(name);
            if (!d || !d->warnings || settings.options.is_null() || settings.enabled == false)
                continue;
            for (auto& w : d->warnings(settings.options))
                warnings.emplace_back("/strategies/" + json_pointer_token(name) + "/options",
                                      std::move(w));
        }
    }
    if (json_output) {
        json list = json::array();
        for (const auto& p : problems) {
            json item{{"id", p.id()}, {"pointer", p.pointer()}, {"message", p.what()}};
            if (p.line() > 0) {
                item["line"] = p.line();
                item["column"] = p.column();
            }
            list.push_back(item);
        }
        json warning_list = json::array();
        for (const auto& [pointer, message] : warnings)
            warning_list.push_back({{"pointer", pointer}, {"message", message}});
        json out{{"valid", problems.empty()}, {"errors", list}, {"warnings", warning_list}};
        put_bytes(out, "file", file);
        std::cout << dump_line(out) << '\n';
    } else if (problems.empty()) {
        std::cout << file << ": OK\n";
        for (const auto& [pointer, message] : warnings)
            std::cout << file << ": " << pointer << ": warning: " << message << '\n';
    } else {
        // The compiler's "file:line:column: message" form, so editors can jump to the error;
        // errors about values carry their JSON pointer instead of a position.
        for (const auto& p : problems) {
            std::cout << file;
            if (p.line() > 0) std::cout << ':' << p.line() << ':' << p.column();
            if (!p.pointer().empty()) std::cout << ": " << p.pointer();
            std::cout << ": " << p.what() << " [" << p.id() << "]\n";
        }
    }
    return problems.empty() ? 0 : EX_CONFIG;
}

int status_command(const std::optional<std::string>& config_flag, const std::string& name,
                   const selection_flags& selection, bool json_output) {
    validate_lock_name(name);
    auto factory = make_factory(config_flag);
    lock_request request = make_request(*factory, selection);
    // A name whose lock rule sets a limit is a counting semaphore: ask the strategy `run` takes
    // its permits from.
    const lock_rule* rule = factory->settings().rule_for(name);
    if (request.require == capability::none && request.strategy.empty() && rule && rule->limit &&
        !rule->strategy)
        request.require = rule->require.value_or(capability::exclusive) | capability::counting;
    std::string strategy = factory->strategy_for(name, request);
    auto store = starting_strategy([&] { return factory->store_for(strategy); });
    lock_status status = store->status(name);
    warn_if_locking_off(*factory, strategy, "'" + name + "'");

    int code = 0;
    switch (status.held) {
        case lock_status::state::free:
            code = 0;
            break;
        case lock_status::state::held_exclusive:
        case lock_status::state::held_shared:
            code = exit_status_held;
            break;
        case lock_status::state::unknown:
            code = EX_UNAVAILABLE;
            break;
    }
    if (json_output) {
        json out{
            {"strategy", strategy}, {"state", state_id(status.held)}, {"holders", status.holders}};
        out["remaining_s"] = status.remaining
                                 ? json(std::chrono::duration<double>(*status.remaining).count())
                                 : json(nullptr);
        out["limit"] = status.limit ? json(*status.limit) : json(nullptr);
        out["permits_held"] = status.permits_held ? json(*status.permits_held) : json(nullptr);
        put_bytes(out, "name", name);
        std::cout << dump_line(out) << '\n';
    } else if (status.limit) {
        std::cout << name << ": " << status.permits_held.value_or(0) << " of " << *status.limit
                  << " permits held (strategy " << strategy << ")\n";
        for (const auto& holder : status.holders) std::cout << "  " << holder << '\n';
    } else {
        std::cout << name << ": " << state_text(status.held) << " (strategy " << strategy << ")\n";
        for (const auto& holder : status.holders) std::cout << "  holder: " << holder << '\n';
        if (status.remaining) {
            std::cout << "  remaining: " << format_seconds(*status.remaining) << '\n';
        }
        if (status.held == lock_status::state::unknown) {
            std::cout << "  the " << strategy
                      << " strategy cannot tell whether a lock is held without taking it\n";
        }
    }
    return code;
}

// --- the command line ---------------------------------------------------------------------

namespace {

class strategies_cli : public command {
  public:
    strategies_cli() : command(20) {}
    int run(const invocation& in) override { return strategies_command(in.config, json_); }

  protected:
    CLI::App* add_subcommand(CLI::App& app) override {
        return app.add_subcommand("strategies", "List every registered strategy and its settings");
    }
    void add_options(CLI::App& cmd) override { cmd.add_flag("--json", json_, "One JSON document"); }

  private:
    bool json_ = false;
};

class explain_cli : public command {
  public:
    explain_cli() : command(30) {}
    int run(const invocation& in) override {
        return explain_command(in.config, name_, require_, json_, start_);
    }

  protected:
    CLI::App* add_subcommand(CLI::App& app) override {
        return app.add_subcommand(
            "explain", "Which strategy would serve lock NAME or CAPS, and why not the others");
    }
    void add_options(CLI::App& cmd) override {
        cmd.add_option("name", name_,
                       "A lock name: as run NAME would decide (its lock rule, then selection)")
            ->type_name("NAME");
        cmd.add_option("--require", require_,
                       "Required capabilities (with NAME: instead of its rule's)")
            ->type_name("CAPS");
        cmd.add_flag("--json", json_, "One JSON document");
        cmd.add_flag("--start", start_,
                     "Also start the chosen strategy (connect to its server), as run would");
    }

  private:
    std::optional<std::string> name_;
    std::string require_;
    bool json_ = false;
    bool start_ = false;
};

class config_cli : public command {
  public:
    config_cli() : command(40) {}
    int run(const invocation&) override { return config_check_command(file_, json_); }
    void reword_usage_error(const CLI::ParseError& e, const std::vector<std::string>& extras,
                            std::string& message, std::string&) const override {
        // CLI11 says "A subcommand is required" without naming one.
        if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && extras.empty() &&
            !check_->parsed())
            message = "config needs a subcommand: locksmith config check FILE [--json]";
    }

  protected:
    CLI::App* add_subcommand(CLI::App& app) override {
        return app.add_subcommand("config", "Configuration files");
    }
    void add_options(CLI::App& cmd) override {
        cmd.require_subcommand(1);
        check_ = cmd.add_subcommand(
            "check", "Validate FILE; print each error with its JSON pointer or line and column");
        check_->add_option("file", file_, "The configuration file")->required();
        check_->add_flag("--json", json_, "One JSON document");
    }

  private:
    CLI::App* check_ = nullptr;
    std::string file_;
    bool json_ = false;
};

class status_cli : public command {
  public:
    status_cli() : command(50) {}
    int run(const invocation& in) override {
        return status_command(in.config, name_, selection_, json_);
    }

  protected:
    CLI::App* add_subcommand(CLI::App& app) override {
        return app.add_subcommand(
            "status",
            "Is NAME free or held, and by whom (exit 0 free, 1 held), without taking it; for a "
            "counting semaphore, how many of its permits are held (exit 1 when none is left)");
    }
    void add_options(CLI::App& cmd) override {
        cmd.add_option("NAME", name_, "Lock name")->required()->type_name("");
        auto* strategy = cmd.add_option("--strategy", selection_.strategy, "Ask this strategy")
                             ->type_name("NAME");
        auto* require = cmd.add_option("--require", selection_.require,
                                       "Ask the strategy chosen for these capabilities")
                            ->type_name("CAPS");
        strategy->excludes(require);
        cmd.add_flag("--json", json_, "One JSON document");
    }

  private:
    std::string name_;
    selection_flags selection_;
    bool json_ = false;
};

strategies_cli strategies_registration;
explain_cli explain_registration;
config_cli config_registration;
status_cli status_registration;

}  // namespace

}  // namespace locksmith::cli
