// SPDX-License-Identifier: MIT
// The `locksmith` command under unusual input and surroundings: names and paths that are not
// UTF-8 in --json output, exit codes that do not depend on which strategy failed, a release that
// fails while `run` holds the lock, a config behind a directory the caller may not search, and
// numbers and orders in messages and tables.
//
// Some cases act as another local user (nobody): root may search and write anything, so a
// permission problem only shows as someone else.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/cli_sandbox.hpp"
#include "support/child_process.hpp"
#include "support/full_tmpfs.hpp"
#include "support/skip_report.hpp"
#include "support/test_environment.hpp"
#include "support/test_helpers.hpp"

namespace fs = std::filesystem;
using locksmith::test::another_local_user_or_skip;
using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::contains;
using locksmith::test::describe;
using locksmith::test::local_user;
using locksmith::test::read_file;
using nlohmann::json;

namespace {

std::string base64_decode(const std::string& text) {
    static const std::string alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    unsigned bits = 0;
    int count = 0;
    for (char c : text) {
        if (c == '=') break;
        auto value = alphabet.find(c);
        if (value == std::string::npos) throw std::runtime_error("not base64: " + text);
        bits = (bits << 6) | static_cast<unsigned>(value);
        count += 6;
        if (count >= 8) {
            count -= 8;
            out += static_cast<char>((bits >> count) & 0xff);
        }
    }
    return out;
}

// The exact bytes of the string field `key` of `object`, under the documented encoding: the
// string itself when it is UTF-8, else null and the bytes in `key`_base64.
std::string bytes_of(const json& object, const std::string& key) {
    const json& value = object.at(key);
    if (value.is_string()) {
        BOOST_TEST(!object.contains(key + "_base64"), object.dump());
        return value.get<std::string>();
    }
    BOOST_TEST(value.is_null(), object.dump());
    return base64_decode(object.at(key + "_base64").get<std::string>());
}

// A directory for runs as `user`: a copy of the locksmith binary any user can execute (the
// build tree may lie under a directory only root can search; the command is linked statically)
// and home/, owned by `user`, for its files and its stdout and stderr.
class user_box {
  public:
    explicit user_box(const local_user& user) : user_(user) {
        std::string pattern = (fs::temp_directory_path() / "locksmith-cli-user-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir_ = pattern;
        fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
        fs::copy_file(locksmith::test::cli_binary(), binary());
        fs::create_directory(home());
        give(home());
    }
    ~user_box() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    user_box(const user_box&) = delete;
    user_box& operator=(const user_box&) = delete;

    const fs::path& dir() const { return dir_; }
    fs::path home() const { return dir_ / "home"; }
    fs::path binary() const { return dir_ / "locksmith"; }
    // Hands `path` to the user, mode 0700 for a directory, 0600 for a file.
    void give(const fs::path& path) const {
        if (::chown(path.c_str(), user_.uid, user_.gid) != 0) throw std::runtime_error("chown");
        ::chmod(path.c_str(), fs::is_directory(path) ? 0700 : 0600);
    }

    // Runs `locksmith ARGS...` as the user, in home/, with a minimal environment plus `env`.
    cli_result run(const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& env = {}) {
        const int n = runs_++;
        const fs::path out = home() / ("out." + std::to_string(n));
        const fs::path err = home() / ("err." + std::to_string(n));
        std::vector<std::string> argv_text{binary().string()};
        argv_text.insert(argv_text.end(), args.begin(), args.end());
        std::map<std::string, std::string> all{{"PATH", "/usr/bin:/bin"},
                                               {"HOME", home().string()},
                                               {"XDG_CONFIG_HOME", (home() / "xdg").string()}};
        for (const auto& [k, v] : env) all[k] = v;
        std::vector<std::string> env_text;
        for (const auto& [k, v] : all) env_text.push_back(k + "=" + v);
        std::vector<char*> argv, envp;
        for (auto& a : argv_text) argv.push_back(a.data());
        argv.push_back(nullptr);
        for (auto& e : env_text) envp.push_back(e.data());
        envp.push_back(nullptr);

        pid_t pid = locksmith::test::fork_child_as(user_, [&] {
            int in_fd = ::open("/dev/null", O_RDONLY);
            int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (in_fd < 0 || out_fd < 0 || err_fd < 0 || ::chdir(home().c_str()) != 0) return 122;
            ::dup2(in_fd, 0);
            ::dup2(out_fd, 1);
            ::dup2(err_fd, 2);
            ::execve(argv[0], argv.data(), envp.data());
            return 123;
        });
        cli_result r;
        r.exit_code = locksmith::test::wait_child(pid);
        r.out = read_file(out);
        r.err = read_file(err);
        BOOST_REQUIRE_MESSAGE(r.exit_code != 122 && r.exit_code != 123,
                              "could not start locksmith as the other user: " + describe(r));
        return r;
    }

  private:
    local_user user_;
    fs::path dir_;
    int runs_ = 0;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(cli_robustness)

// --- JSON output of names and paths that are not UTF-8 (issue 11, point 13) ---

BOOST_AUTO_TEST_CASE(status_json_encodes_a_name_that_is_not_utf8_losslessly) {
    cli_sandbox box;
    const std::string raw = std::string("a\xff\xfe") + "b";  // "\xfeb" would be one escape
    auto r = box.run_with_config("status", {raw, "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(doc.at("name").is_null(), r.out);
    BOOST_TEST(bytes_of(doc, "name") == raw);

    // Valid UTF-8 is printed as it is.
    const std::string utf8 = "z\xc3\xbcrich";
    r = box.run_with_config("status", {utf8, "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    doc = json::parse(r.out);
    BOOST_TEST(doc.at("name") == utf8);
    BOOST_TEST(!doc.contains("name_base64"), r.out);
}

BOOST_AUTO_TEST_CASE(every_json_output_survives_a_config_path_that_is_not_utf8) {
    cli_sandbox box;
    const std::string path = box.path("conf\xff.json");
    fs::copy_file(box.config_path(), path);

    auto r = box.run({"strategies", "--config", path, "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(contains(bytes_of(doc, "config"), path), r.out);
    // The priority source names the file too.
    for (const auto& s : doc.at("strategies")) BOOST_TEST(s.at("priority_source").is_string());

    r = box.run({"explain", "--config", path, "--require", "exclusive", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    doc = json::parse(r.out);
    BOOST_TEST(contains(bytes_of(doc, "config"), path), r.out);

    r = box.run({"config", "check", path, "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    doc = json::parse(r.out);
    BOOST_TEST(bytes_of(doc, "file") == path);

    r = box.run({"status", "--config", path, "free-name", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(json::parse(r.out).at("name") == "free-name");
}

BOOST_AUTO_TEST_CASE(config_check_json_survives_bytes_that_are_not_utf8_in_the_file) {
    cli_sandbox box;
    // The parser quotes the text around the error, invalid bytes included.
    std::string file = box.write_file("bad.json", "{\"strategies\": {\"x\xff\": 1}}");
    auto r = box.run({"config", "check", file, "--json"});
    BOOST_TEST(r.exit_code == EX_CONFIG, describe(r));
    json doc = json::parse(r.out);
    BOOST_TEST(doc.at("valid") == false);
    BOOST_TEST(!doc.at("errors").empty());
}

// --- one exit code for a strategy that cannot start (issue 11, point 19) ---

// A lock_dir that cannot be used is the strategy's problem, not bad usage: the same code
// whether the strategy was pinned or selected, and whichever strategy it is.
BOOST_AUTO_TEST_CASE(an_unusable_lock_dir_exits_unavailable_for_every_strategy) {
    cli_sandbox probe;
    const std::string not_a_dir = probe.write_file("plain", "x");
    const std::string lock_dir = not_a_dir + "/locks";
    cli_sandbox box(json{{"strategies",
                          {{"file", {{"options", {{"lock_dir", lock_dir}}}}},
                           {"simple", {{"options", {{"lock_dir", lock_dir}}}}}}}});
    for (const std::vector<std::string>& how : {std::vector<std::string>{"--strategy", "file"},
                                                {"--strategy", "simple"},
                                                {"--require", "exclusive,serializable"}}) {
        auto args = how;
        args.insert(args.end(), {"job", "--", "true"});
        auto r = box.run_with_config("run", args);
        BOOST_TEST(r.exit_code == EX_UNAVAILABLE, how.at(1) << ": " << describe(r));
        BOOST_TEST(contains(r.err, lock_dir), r.err);
    }
    auto r = box.run_with_config("status", {"--strategy", "file", "job"});
    BOOST_TEST(r.exit_code == EX_UNAVAILABLE, describe(r));
}

BOOST_AUTO_TEST_CASE(an_unwritable_lock_dir_exits_unavailable_for_another_user) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    user_box ubox(*user);
    // Root's directory: the other user may read it, not write it.
    const fs::path lock_dir = ubox.dir() / "roots-locks";
    fs::create_directory(lock_dir);
    fs::permissions(lock_dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
    const fs::path config = ubox.home() / "config.json";
    std::ofstream(config) << json{{"strategies",
                                   {{"file", {{"options", {{"lock_dir", lock_dir}}}}},
                                    {"simple", {{"options", {{"lock_dir", lock_dir}}}}}}}}
                                 .dump();
    for (const char* strategy : {"file", "simple"}) {
        auto r = ubox.run(
            {"run", "--config", config.string(), "--strategy", strategy, "job", "--", "true"});
        BOOST_TEST(r.exit_code == EX_UNAVAILABLE, strategy << ": " << describe(r));
        BOOST_TEST(contains(r.err, lock_dir.string()), r.err);
    }
}

// --- a config the caller may not reach is not "missing" (issue 11, point 19) ---

BOOST_AUTO_TEST_CASE(a_config_in_an_unsearchable_directory_is_reported_as_unreadable) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    user_box ubox(*user);
    // Root's private directory, with a config in it that the other user cannot reach.
    const fs::path private_dir = ubox.dir() / "private";
    fs::create_directory(private_dir);
    fs::permissions(private_dir, fs::perms::owner_all, fs::perm_options::replace);
    const fs::path config = private_dir / "config.json";
    std::ofstream(config) << "{}";

    auto r = ubox.run({"strategies", "--config", config.string()});
    BOOST_TEST(r.exit_code == EX_NOINPUT, describe(r));
    BOOST_TEST(contains(r.err, config.string()), r.err);
    BOOST_TEST(contains(r.err, "cannot be read"), r.err);
    BOOST_TEST(contains(r.err, "Permission denied"), r.err);
    BOOST_TEST(!contains(r.err, "does not exist"), r.err);

    r = ubox.run({"config", "check", config.string()});
    BOOST_TEST(r.exit_code == EX_NOINPUT, describe(r));
    BOOST_TEST(contains(r.err, "Permission denied"), r.err);

    // A config in $XDG_CONFIG_HOME that cannot be checked is not skipped in silence (one there
    // is an error: processes without the variable would not read it).
    fs::create_directory(private_dir / "locksmith");
    std::ofstream(private_dir / "locksmith" / "config.json") << "{}";
    r = ubox.run({"strategies"}, {{"XDG_CONFIG_HOME", private_dir.string()}});
    BOOST_TEST(r.exit_code == EX_NOINPUT, describe(r));
    BOOST_TEST(contains(r.err, "Permission denied"), r.err);
}

// --- a failed release of the lock `run` holds (issue 11, point 15) ---

// Removing the lock file needs write access to the lock directory. The command takes it away
// (as an admin's chmod or a deploy script might), so the release that follows fails: locksmith
// must neither exit 0 nor say "released".
BOOST_AUTO_TEST_CASE(a_failed_release_changes_the_exit_status_and_is_not_reported_as_done) {
    auto user = another_local_user_or_skip();
    if (!user) return;
    user_box ubox(*user);
    const fs::path lock_dir = ubox.home() / "locks";
    fs::create_directory(lock_dir);
    ubox.give(lock_dir);
    const fs::path config = ubox.home() / "config.json";
    std::ofstream(config)
        << json{{"strategies", {{"simple", {{"options", {{"lock_dir", lock_dir}}}}}}}}.dump();
    ubox.give(config);

    auto r = ubox.run({"run", "--config", config.string(), "--strategy", "simple", "-v", "job",
                       "-c", "chmod 500 " + lock_dir.string()});
    BOOST_TEST(r.exit_code == 74, describe(r));
    BOOST_TEST(!contains(r.err, "released job"), r.err);
    BOOST_TEST(contains(r.err, "releasing the lock job failed"), r.err);
    BOOST_TEST(contains(r.err, "exited with status 0"), r.err);
    // The command's own failure is still reported, and the release failure still decides.
    fs::permissions(lock_dir, fs::perms::owner_all);
    auto files = std::distance(fs::directory_iterator(lock_dir), fs::directory_iterator());
    BOOST_TEST(files >= 1, "the lock file was left behind");
    r = ubox.run({"run", "--config", config.string(), "--strategy", "simple", "job2", "-c",
                  "chmod 500 " + lock_dir.string() + "; exit 3"});
    BOOST_TEST(r.exit_code == 74, describe(r));
    BOOST_TEST(contains(r.err, "exited with status 3"), r.err);
}

// --- a full file system (issue 23, point 8) ---

// Any local user can fill a shared tmpfs: Debian's 5 MiB /run/lock (the default lock directory's
// parent) or /dev/shm. A page mapped without storage behind it kills whoever touches it with
// SIGBUS: `run` exited 135, the command's status lost. In a child of `run_on_a_full_tmpfs`:
// returns 0 when every run ended as `expected` says, else prints what went wrong.
namespace {
int runs_end_as_expected(cli_sandbox& box, const std::vector<std::vector<std::string>>& runs,
                         const std::vector<int>& expected) {
    std::vector<locksmith::test::cli_process> started;
    for (const auto& args : runs) {
        started.push_back(box.start(args));
        // The first holds the name when the next starts: the next one waits.
        if (started.size() == 1 && runs.size() > 1 &&
            !locksmith::test::wait_for_file(box.path("holding")))
            return 1;
    }
    std::ofstream(box.path("go")) << "go";
    int failed = 0;
    for (std::size_t i = 0; i < started.size(); ++i) {
        const cli_result r = box.wait(started[i]);
        if (r.exit_code == expected[i]) continue;
        std::fprintf(stderr, "run %zu: expected exit %d, got %s\n", i, expected[i],
                     describe(r).c_str());
        failed = 2;
    }
    return failed;
}
}  // namespace

// `file` with its lock directory on the full tmpfs: the command's status survives.
BOOST_AUTO_TEST_CASE(run_on_file_keeps_the_commands_status_on_a_full_file_system) {
    cli_sandbox box;
    std::string why;
    auto status = locksmith::test::run_on_a_full_tmpfs(
        box.lock_dir(), 0700,
        [&] {
            return runs_end_as_expected(
                box, {box.with_config("run", {"--strategy", "file", "full", "-c", "exit 3"})}, {3});
        },
        why);
    if (!status) return locksmith::test::skip_case(why);
    BOOST_TEST(*status == 0, "a run ended otherwise than expected (above; 135 is SIGBUS)");
}

// `simple` polls, and its holder's release and its waiter's sleep use the wake-up board in
// /dev/shm: with /dev/shm full, both fall back to polling and end with their commands' status.
BOOST_AUTO_TEST_CASE(run_on_simple_keeps_the_commands_status_with_a_full_dev_shm) {
    cli_sandbox box;
    const std::string config = box.write_file(
        "simple.json",
        json{{"strategies", {{"simple", {{"options", {{"lock_dir", box.lock_dir()}}}}}}}}.dump());
    const std::string wait_for_go = "touch " + box.path("holding") + "; while [ ! -e " +
                                    box.path("go") + " ]; do sleep 0.01; done; exit 3";
    std::string why;
    auto status = locksmith::test::run_on_a_full_tmpfs(
        "/dev/shm", 01777,
        [&] {
            return runs_end_as_expected(
                box,
                {{"run", "--config", config, "--strategy", "simple", "board", "-c", wait_for_go},
                 {"run", "--config", config, "--strategy", "simple", "-w", "20", "board", "-c",
                  "exit 4"}},
                {3, 4});
        },
        why);
    if (!status) return locksmith::test::skip_case(why);
    BOOST_TEST(*status == 0, "a run ended otherwise than expected (above; 135 is SIGBUS)");
}

// `shm` cannot create its segment in a full /dev/shm: an error that says so, not a signal.
BOOST_AUTO_TEST_CASE(run_on_shm_with_a_full_dev_shm_is_a_clear_error) {
    cli_sandbox box;
    std::string why;
    auto status = locksmith::test::run_on_a_full_tmpfs(
        "/dev/shm", 01777,
        [&] {
            const cli_result r =
                box.run(box.with_config("run", {"--strategy", "shm", "full", "-c", "exit 3"}));
            if (r.exit_code == EX_UNAVAILABLE && contains(r.err, "/dev/shm") &&
                contains(r.err, std::strerror(ENOSPC)))
                return 0;
            std::fprintf(stderr, "%s\n", describe(r).c_str());
            return 1;
        },
        why);
    if (!status) return locksmith::test::skip_case(why);
    BOOST_TEST(*status == 0, "a run ended otherwise than expected (above; 135 is SIGBUS)");
}

// --- messages and tables (issue 11, point 19) ---

BOOST_AUTO_TEST_CASE(config_alone_names_its_subcommand) {
    cli_sandbox box;
    auto r = box.run({"config"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(contains(r.err, "config check FILE"), r.err);
}

BOOST_AUTO_TEST_CASE(strategies_are_listed_in_the_order_selection_uses) {
    // simple raised above file: by name it would stay behind file; by priority it leads.
    cli_sandbox box(json::parse(R"({"strategies": {"simple": {"priority": 99}}})"));
    auto r = box.run_with_config("strategies", {"--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    std::vector<std::string> listed;
    json doc = json::parse(r.out);
    for (const auto& s : doc.at("strategies")) listed.push_back(s.at("name"));

    r = box.run_with_config("explain", {"--require", "exclusive", "--json"});
    BOOST_TEST(r.exit_code == 0, describe(r));
    std::vector<std::string> explained;
    doc = json::parse(r.out);
    for (const auto& e : doc.at("entries")) explained.push_back(e.at("strategy"));
    BOOST_TEST(listed == explained, boost::test_tools::per_element());
    BOOST_REQUIRE(!listed.empty());
    BOOST_TEST(listed.front() == "simple");

    // The text table too: simple's row comes before file's.
    r = box.run_with_config("strategies", {});
    BOOST_TEST(r.out.find("\nsimple ") < r.out.find("\nfile "), r.out);
}

BOOST_AUTO_TEST_CASE(out_of_range_numbers_are_quoted_exactly) {
    cli_sandbox box;
    // Just above a year: "%g" printed it as 3.1536e+07, the bound itself.
    auto r = box.run_with_config("run", {"-w", "31536001", "job", "--", "true"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(contains(r.err, "31536001"), r.err);
    BOOST_TEST(contains(r.err, "31536000"), "names the bound: " + r.err);

    r = box.run_with_config("run", {"--ttl", "18446744073709551615", "job", "--", "true"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(contains(r.err, "18446744073709551615"), r.err);

    r = box.run_with_config("run", {"--kill-after", "-1", "job", "--", "true"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(contains(r.err, "got -1"), r.err);

    r = box.run_with_config("run", {"-w", "soon", "job", "--", "true"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
    BOOST_TEST(contains(r.err, "soon"), r.err);
}

BOOST_AUTO_TEST_SUITE_END()
