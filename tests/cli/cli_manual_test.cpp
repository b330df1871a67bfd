// SPDX-License-Identifier: MIT
// The manual page and the bash, zsh and fish completions (issue 12 item 9, issue 26) against
// --help: each command's options in doc/locksmith.1, doc/locksmith.bash, doc/_locksmith and
// doc/locksmith.fish are exactly those its --help lists, so that an option added, renamed or
// removed in cli/main.cpp fails here until all of them follow.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_sandbox.hpp"
#include "support/skip_report.hpp"
#include "support/test_paths.hpp"

using locksmith::test::cli_sandbox;
using options = std::set<std::string>;

namespace {

const std::string doc_dir = locksmith::test::source_path("doc");

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

std::string join(const options& set) {
    std::string out;
    for (const auto& o : set) out += (out.empty() ? "" : " ") + o;
    return out;
}

// The lines of `command`'s --help under `heading` ("Options:", "Subcommands:"), up to the next
// blank line.
std::vector<std::string> help_section(const std::vector<std::string>& command,
                                      const std::string& heading) {
    cli_sandbox box;
    auto args = command;
    args.push_back("--help");
    auto r = box.run(args);
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::vector<std::string> out;
    bool inside = false;
    for (const auto& line : lines_of(r.out)) {
        if (line == heading) {
            inside = true;
            continue;
        }
        if (inside && line.empty()) break;
        if (inside) out.push_back(line);
    }
    BOOST_REQUIRE(!out.empty());
    return out;
}

// The options CLI11's help lists: the first word of each "  -..." line under "Options:",
// split at commas ("-x,-e,--exclusive").
options from_help(const std::vector<std::string>& command) {
    options out;
    for (const auto& line : help_section(command, "Options:")) {
        if (line.rfind("  -", 0) != 0) continue;
        std::string first = line.substr(2, line.find(' ', 2) - 2);
        std::istringstream parts(first);
        for (std::string part; std::getline(parts, part, ',');) out.insert(part);
    }
    BOOST_REQUIRE(!out.empty());
    return out;
}

// The options of one part of the man page: the tag line after each .TP in the section that
// `heading` (".SH OPTIONS", ".SS run") opens, up to the next heading.
options from_manual(const std::string& heading) {
    const auto lines = lines_of(read_text(doc_dir + "/locksmith.1"));
    options out;
    bool inside = false, tag = false;
    const std::regex option(R"((^|[\s"])(--?[A-Za-z][A-Za-z0-9-]*))");
    for (const auto& raw : lines) {
        if (raw == heading) {
            inside = true;
            continue;
        }
        if (inside && (raw.rfind(".SH", 0) == 0 || raw.rfind(".SS", 0) == 0)) break;
        if (!inside) continue;
        if (raw == ".TP") {
            tag = true;
            continue;
        }
        if (!tag) continue;
        tag = false;
        // Unescape roff: \- is a hyphen, \fB \fI \fR switch fonts.
        std::string line = std::regex_replace(raw, std::regex(R"(\\-)"), "-");
        line = std::regex_replace(line, std::regex(R"(\\f[BIRP])"), " ");
        for (std::sregex_iterator it(line.begin(), line.end(), option), end; it != end; ++it)
            out.insert((*it)[2]);
    }
    BOOST_REQUIRE_MESSAGE(inside, heading << " is missing from the manual");
    return out;
}

// What the completion offers for "-" after `words`.
options from_completion(const std::vector<std::string>& words) {
    std::string script = "source '" + doc_dir + "/locksmith.bash'; COMP_WORDS=(locksmith";
    for (const auto& w : words) script += " '" + w + "'";
    script += " -); COMP_CWORD=" + std::to_string(words.size() + 1) +
              "; _locksmith; printf '%s\\n' \"${COMPREPLY[@]}\"";
    FILE* pipe = ::popen(
        ("bash -c '" + std::regex_replace(script, std::regex("'"), "'\\''") + "'").c_str(), "r");
    BOOST_REQUIRE(pipe != nullptr);
    std::string output;
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
    BOOST_REQUIRE(::pclose(pipe) == 0);
    options out;
    for (const auto& line : lines_of(output))
        if (!line.empty()) out.insert(line);
    return out;
}

// The output of `shell` -c `script`, or nullopt when that shell is not installed.
std::optional<std::string> shell_output(const std::string& shell, const std::string& script) {
    if (std::system(("command -v " + shell + " >/dev/null 2>&1").c_str()) != 0) return std::nullopt;
    FILE* pipe = ::popen(
        (shell + " -c '" + std::regex_replace(script, std::regex("'"), "'\\''") + "' 2>&1").c_str(),
        "r");
    BOOST_REQUIRE(pipe != nullptr);
    std::string output;
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
    BOOST_REQUIRE_MESSAGE(::pclose(pipe) == 0, shell << ": " << output);
    return output;
}

std::string quoted_words(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += " '" + w + "'";
    return out;
}

// The options zsh's completion (doc/_locksmith) gives _arguments after `words`: the function
// runs in zsh with _arguments and its helpers replaced by ones that print what they are given,
// and the option of each spec is read ("(-x -e)-x[...]", "--wait=[...]:seconds:").
std::optional<options> from_zsh_completion(const std::vector<std::string>& words) {
    const auto output = shell_output(
        "zsh",
        "_arguments() { print -rl -- \"$@\" }; _describe() { : }; _values() { : }; "
        "_files() { : }; _normal() { : }; _call_program() { : }; words=(locksmith" +
            quoted_words(words) + " -); CURRENT=${#words}; source '" + doc_dir + "/_locksmith'");
    if (!output) return std::nullopt;
    options out;
    const std::regex spec(R"(^(\([^)]*\))?\*?(--?[A-Za-z][A-Za-z0-9-]*))");
    std::smatch m;
    for (const auto& line : lines_of(*output))
        if (std::regex_search(line, m, spec)) out.insert(m[2]);
    return out;
}

// What fish offers for "-" after `words` (doc/locksmith.fish, asked with `complete -C`).
std::optional<options> from_fish_completion(const std::vector<std::string>& words) {
    std::string line = "locksmith";
    for (const auto& w : words) line += " " + w;
    const auto output = shell_output(
        "fish", "source '" + doc_dir + "/locksmith.fish'; complete -C '" + line + " -'");
    if (!output) return std::nullopt;
    options out;
    for (const auto& l : lines_of(*output))
        if (!l.empty()) out.insert(l.substr(0, l.find('\t')));
    return out;
}

struct command_case {
    std::vector<std::string> words;  // after "locksmith"
    std::string heading;             // its part of the man page
};

const std::vector<command_case> commands = {
    {{}, ".SH OPTIONS"},
    {{"run"}, ".SS run"},
    {{"hold"}, ".SS hold"},
    {{"strategies"}, ".SS strategies"},
    {{"explain"}, ".SS explain"},
    {{"status"}, ".SS status"},
    {{"config", "check"}, ".SS config check"},
};

}  // namespace

BOOST_AUTO_TEST_SUITE(manual)

BOOST_AUTO_TEST_CASE(man_page_options_are_the_help_options) {
    for (const auto& c : commands) {
        BOOST_TEST_CONTEXT(c.heading) {
            options help = from_help(c.words);
            // -h/--help is described once, under OPTIONS.
            if (!c.words.empty()) help.erase("-h"), help.erase("--help");
            options manual = from_manual(c.heading);
            BOOST_TEST(join(manual) == join(help));
        }
    }
}

BOOST_AUTO_TEST_CASE(completion_offers_the_help_options) {
    for (const auto& c : commands) {
        BOOST_TEST_CONTEXT(c.heading) {
            BOOST_TEST(join(from_completion(c.words)) == join(from_help(c.words)));
        }
    }
}

// zsh's and fish's completions follow the same list as bash's: --help (Debian: zsh, fish).
BOOST_AUTO_TEST_CASE(zsh_and_fish_completions_offer_the_help_options) {
    for (const auto& c : commands) {
        BOOST_TEST_CONTEXT(c.heading) {
            const auto help = join(from_help(c.words));
            const auto zsh = from_zsh_completion(c.words);
            const auto fish = from_fish_completion(c.words);
            if (!zsh || !fish) {
                locksmith::test::skip_case(
                    "zsh or fish is not installed (apt-get install zsh fish): their "
                    "completions are not checked");
                return;
            }
            BOOST_TEST(join(*zsh) == help);
            BOOST_TEST(join(*fish) == help);
        }
    }
    // The commands each offers where a command goes.
    const auto fish_commands =
        shell_output("fish", "source '" + doc_dir + "/locksmith.fish'; complete -C 'locksmith '");
    options offered;
    for (const auto& l : lines_of(*fish_commands))
        if (!l.empty()) offered.insert(l.substr(0, l.find('\t')));
    BOOST_TEST(join(offered) == "config explain hold run status strategies");
}

// The commands --help lists, in its order, joined by spaces.
std::string help_commands() {
    std::string out;
    for (const auto& line : help_section({}, "Subcommands:"))
        out += (out.empty() ? "" : " ") + line.substr(2, line.find(' ', 2) - 2);
    return out;
}

// The commands each registers itself (cli/command.hpp); the messages that list them, the
// completion and the manual follow --help.
BOOST_AUTO_TEST_CASE(every_list_of_commands_is_the_help_list) {
    const std::string help = help_commands();
    cli_sandbox box;
    auto unknown = box.run({"no_such_command"});
    BOOST_TEST(unknown.err.find("(commands: " + std::regex_replace(help, std::regex(" "), ", ") +
                                ";") != std::string::npos,
               unknown.err);
    std::string last_or = std::regex_replace(help, std::regex(" "), ", ");
    last_or = std::regex_replace(last_or, std::regex(", ([a-z]+)$"), " or $1");
    auto none = box.run({});
    BOOST_TEST(none.err.find("a command is required: " + last_or + "\n") != std::string::npos,
               none.err);
    std::smatch m;
    const std::string script = read_text(doc_dir + "/locksmith.bash");
    BOOST_REQUIRE(std::regex_search(script, m, std::regex("_locksmith_commands=\"([^\"]*)\"")));
    BOOST_TEST(m[1].str() == help);
    std::istringstream words(help);
    for (std::string word; words >> word;)
        (void)from_manual(".SS " + (word == "config" ? std::string("config check") : word));
}

BOOST_AUTO_TEST_SUITE_END()
