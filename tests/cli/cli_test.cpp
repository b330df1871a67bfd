// SPDX-License-Identifier: MIT
// `locksmith run`: locking, exit codes, environment, signals, crash release, lock loss.
#define BOOST_TEST_MODULE locksmith_cli
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/cli_sandbox.hpp"

using namespace std::chrono_literals;
using locksmith::test::cli_result;
using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using locksmith::test::wait_for_file;

namespace {

// "locksmith run --config C ARGS..."
std::vector<std::string> run_args(const cli_sandbox& box, std::vector<std::string> args) {
    return box.with_config("run", args);
}

std::size_t count(const std::string& text, const std::string& part) {
    std::size_t n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
}

// Waits until the file at `path` contains `text`; false after `timeout`.
bool wait_for_text(const std::string& path, const std::string& text,
                   std::chrono::milliseconds timeout = 10s) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
        std::ifstream in(path, std::ios::binary);
        std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (content.find(text) != std::string::npos) return true;
        std::this_thread::sleep_for(5ms);
    }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_command)

BOOST_AUTO_TEST_CASE(child_exit_status_is_passed_through) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"job", "--", "sh", "-c", "exit 42"}));
    BOOST_TEST(r.exit_code == 42, describe(r));
    r = box.run(run_args(box, {"job", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    // A child killed by a signal reports 128 + N, as a shell does.
    r = box.run(run_args(box, {"job", "--", "sh", "-c", "kill -KILL $$"}));
    BOOST_TEST(r.exit_code == 128 + SIGKILL, describe(r));
}

BOOST_AUTO_TEST_CASE(shell_command_form_and_flock_form) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"job", "-c", "echo hello; exit 5"}));
    BOOST_TEST(r.exit_code == 5, describe(r));
    BOOST_TEST(r.out == "hello\n");
    // flock(1)'s form without "--" is refused with a hint: the command's own options would
    // otherwise be read as locksmith's ("-n" here).
    r = box.run(run_args(box, {"job", "echo", "-n", "x"}));
    BOOST_TEST(r.exit_code == 64, describe(r));
    BOOST_TEST(r.err.find("Put -- before the command") != std::string::npos, r.err);
    BOOST_TEST(r.out.empty());
    // Words that are locksmith subcommands are the command's after "--".
    r = box.run(run_args(box, {"job", "--", "echo", "status", "--", "-x"}));
    BOOST_TEST(r.out == "status -- -x\n", describe(r));
}

BOOST_AUTO_TEST_CASE(environment_variables_reach_the_child) {
    cli_sandbox box;
    box.set_env("LOCKSMITH_FENCING_TOKEN", "999");  // from an enclosing run: must not leak
    auto r = box.run(run_args(
        box, {"my.lock", "--", "sh", "-c",
              "echo \"$LOCKSMITH_NAME|$LOCKSMITH_STRATEGY|${LOCKSMITH_FENCING_TOKEN-unset}\""}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    // The file strategy has no fencing, so no token.
    BOOST_TEST(r.out == "my.lock|file|unset\n");
}

BOOST_AUTO_TEST_CASE(require_selects_the_strategy_and_no_candidate_is_unavailable) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"--require", "expiring", "sel", "--", "true"}));
    BOOST_TEST(r.exit_code == EX_UNAVAILABLE, describe(r));
    BOOST_TEST(r.err.rfind("locksmith: ", 0) == 0, r.err);
    BOOST_TEST(r.err.find("memory") != std::string::npos, "names what was passed over: " + r.err);

    // file (75) lacks serializable; simple (50) has it.
    r = box.run(run_args(box, {"--require", "serializable|exclusive", "sel", "--", "sh", "-c",
                               "echo $LOCKSMITH_STRATEGY"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out == "simple\n");
}

BOOST_AUTO_TEST_CASE(two_concurrent_runs_serialise) {
    cli_sandbox box;
    std::string log = box.path("log");
    std::string script = "echo start >> " + log + "; sleep 0.3; echo end >> " + log;
    auto a = box.start(run_args(box, {"shared.name", "-c", script}));
    auto b = box.start(run_args(box, {"shared.name", "-c", script}));
    auto ra = box.wait(a);
    auto rb = box.wait(b);
    BOOST_TEST(ra.exit_code == 0, describe(ra));
    BOOST_TEST(rb.exit_code == 0, describe(rb));
    BOOST_TEST(box.read_file("log") == "start\nend\nstart\nend\n");
}

BOOST_AUTO_TEST_CASE(nonblock_on_a_held_name_exits_with_the_conflict_code_at_once) {
    cli_sandbox box;
    auto holder =
        box.start(run_args(box, {"busy", "-c", "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));

    auto r = box.run(run_args(box, {"-n", "busy", "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));  // 0 would mean it waited for the holder
    BOOST_TEST(r.err.empty(), "quiet without -v, as flock(1): " + r.err);

    r = box.run(run_args(box, {"-n", "-E", "7", "busy", "--", "true"}));
    BOOST_TEST(r.exit_code == 7, describe(r));

    // -w 0 means non-blocking too.
    r = box.run(run_args(box, {"-w", "0", "busy", "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));

    // -v says why.
    r = box.run(run_args(box, {"-n", "-v", "busy", "--", "true"}));
    BOOST_TEST(r.exit_code == 1);
    BOOST_TEST(r.err.find("locksmith: ") == 0, r.err);
    BOOST_TEST(r.err.find("busy is held") != std::string::npos, r.err);

    // A different name is not affected.
    r = box.run(run_args(box, {"-n", "other", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);
}

BOOST_AUTO_TEST_CASE(wait_gives_up_after_the_timeout) {
    cli_sandbox box;
    auto holder =
        box.start(run_args(box, {"slow", "-c", "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto r = box.run(run_args(box, {"-w", "0.3", "-v", "slow", "--", "true"}));
    BOOST_TEST(r.exit_code == 1, describe(r));
    BOOST_TEST(r.seconds >= 0.28, r.seconds);  // it waited, up to its timeout
    BOOST_TEST(r.err.find("gave up after") != std::string::npos, r.err);
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);

    // Once free, a bounded wait succeeds and runs the command.
    r = box.run(run_args(box, {"-w", "2", "slow", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
}

BOOST_AUTO_TEST_CASE(waiting_run_gets_the_lock_when_the_holder_ends) {
    cli_sandbox box;
    auto holder = box.start(run_args(
        box, {"q", "-c",
              "touch " + box.path("ready") + "; sleep 0.4; echo holder >> " + box.path("log")}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto r = box.run(run_args(box, {"-v", "q", "-c", "echo waiter >> " + box.path("log")}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    // The waiter's command ran after the holder's had finished: the order in the log, not a time.
    BOOST_TEST(box.read_file("log") == "holder\nwaiter\n");
    BOOST_TEST(r.err.find("acquired q") != std::string::npos, r.err);
    BOOST_TEST(box.wait(holder).exit_code == 0);
}

BOOST_AUTO_TEST_CASE(shared_holders_run_together_and_exclude_an_exclusive_one) {
    cli_sandbox box;
    // Each reader waits (up to 5 s) for the other to be inside too: if the two were serialised,
    // the first would give up and exit 1.
    auto reader = [&](const std::string& me, const std::string& other) {
        return "touch " + box.path(me) + "; i=0; while [ ! -e " + box.path(other) +
               " ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; [ -e " + box.path(other) +
               " ] || exit 1; sleep 1";
    };
    auto a = box.start(run_args(box, {"-s", "rw", "-c", reader("a", "b")}));
    auto b = box.start(run_args(box, {"-s", "rw", "-c", reader("b", "a")}));
    BOOST_REQUIRE(wait_for_file(box.path("a")));
    BOOST_REQUIRE(wait_for_file(box.path("b")));
    auto writer = box.run(run_args(box, {"-x", "-n", "rw", "--", "true"}));
    BOOST_TEST(writer.exit_code == 1, describe(writer));
    // A third reader gets in while the readers hold it.
    auto third = box.run(run_args(box, {"-s", "-n", "rw", "--", "true"}));
    BOOST_TEST(third.exit_code == 0, describe(third));
    auto ra = box.wait(a);
    auto rb = box.wait(b);
    BOOST_TEST(ra.exit_code == 0, describe(ra));
    BOOST_TEST(rb.exit_code == 0, describe(rb));
    // And a writer gets in afterwards.
    writer = box.run(run_args(box, {"-x", "-n", "rw", "--", "true"}));
    BOOST_TEST(writer.exit_code == 0, describe(writer));
}

BOOST_AUTO_TEST_CASE(sigterm_is_forwarded_and_the_lock_released) {
    cli_sandbox box;
    std::string script = "trap 'echo term > " + box.path("got") + "; exit 3' TERM; touch " +
                         box.path("ready") + "; while :; do sleep 0.05; done";
    auto holder = box.start(run_args(box, {"sig", "-c", script}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    ::kill(holder.pid, SIGTERM);
    auto r = box.wait(holder, 10s);
    BOOST_TEST(r.exit_code == 3, describe(r));  // the child's status, not locksmith's death
    BOOST_TEST(box.read_file("got") == "term\n");
    r = box.run(run_args(box, {"-n", "sig", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
}

BOOST_AUTO_TEST_CASE(sighup_and_sigint_are_forwarded) {
    cli_sandbox box;
    for (int sig : {SIGHUP, SIGINT}) {
        std::string ready = box.path("ready" + std::to_string(sig));
        std::string script =
            "trap 'exit 9' HUP INT; touch " + ready + "; while :; do sleep 0.05; done";
        auto holder = box.start(run_args(box, {"sig2", "-c", script}));
        BOOST_REQUIRE(wait_for_file(ready));
        ::kill(holder.pid, sig);
        auto r = box.wait(holder, 10s);
        BOOST_TEST(r.exit_code == 9, "signal " << sig << ": " << describe(r));
    }
}

BOOST_AUTO_TEST_CASE(kill_9_of_locksmith_releases_the_lock_and_stops_the_child) {
    cli_sandbox box;
    std::string script = "echo $$ > " + box.path("pid") + "; trap 'echo term > " + box.path("got") +
                         "; exit 0' TERM; touch " + box.path("ready") +
                         "; while :; do sleep 0.05; done";
    auto holder = box.start(run_args(box, {"crash", "-c", script}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto r = box.run(run_args(box, {"-n", "crash", "--", "true"}));
    BOOST_TEST(r.exit_code == 1, "held before the kill: " + describe(r));

    ::kill(holder.pid, SIGKILL);
    box.wait(holder);
    // file is crash_release: the kernel dropped the flock with locksmith's descriptor.
    r = box.run(run_args(box, {"-n", "crash", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    // The child no longer runs unprotected: it got SIGTERM when locksmith died.
    bool stopped = wait_for_file(box.path("got"), 5s);
    BOOST_TEST(stopped);
    if (!stopped) {
        std::string pid = box.read_file("pid");
        if (!pid.empty()) ::kill(std::stoi(pid), SIGKILL);
    }
}

BOOST_AUTO_TEST_CASE(the_lock_descriptor_is_not_inherited) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"fd", "--", "sh", "-c", "ls -l /proc/$$/fd/"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.out.find(box.lock_dir().string()) == std::string::npos, r.out);
    // ...so a background grandchild does not keep the lock after the run ends.
    r = box.run(run_args(box, {"bg", "-c", "sleep 3 >/dev/null 2>&1 &"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    r = box.run(run_args(box, {"-n", "bg", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
}

BOOST_AUTO_TEST_CASE(command_not_found_and_not_executable) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"x", "--", "/nonexistent/command"}));
    BOOST_TEST(r.exit_code == 127, describe(r));
    BOOST_TEST(r.err.find("locksmith: cannot run /nonexistent/command") == 0, r.err);
    r = box.run(run_args(box, {"x", "--", "no-such-command-locksmith-test"}));
    BOOST_TEST(r.exit_code == 127, describe(r));
    std::string plain = box.write_file("plain.txt", "not a program\n");
    r = box.run(run_args(box, {"x", "--", plain}));
    BOOST_TEST(r.exit_code == 126, describe(r));
    r = box.run(run_args(box, {"x", "--", box.dir().string()}));
    BOOST_TEST(r.exit_code == 126, describe(r));
    // The lock was released after the failed exec.
    r = box.run(run_args(box, {"-n", "x", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
}

// run --json: one line on stderr however the run ends, once the lock was asked for.
BOOST_AUTO_TEST_CASE(json_says_how_the_run_ended) {
    cli_sandbox box;
    auto summary = [](const cli_result& r) {
        BOOST_REQUIRE_MESSAGE(
            !r.err.empty() && r.err.back() == '\n' && r.err.find('\n') == r.err.size() - 1,
            "one line: " + r.err);
        return nlohmann::json::parse(r.err);
    };
    auto r = box.run(run_args(box, {"--json", "job", "--", "sh", "-c", "exit 3"}));
    BOOST_TEST(r.exit_code == 3, describe(r));
    auto j = summary(r);
    BOOST_TEST(j["name"] == "job");
    BOOST_TEST(!j["strategy"].get<std::string>().empty());
    BOOST_TEST(j["mode"] == "exclusive");
    BOOST_TEST(j["acquired"] == true);
    BOOST_TEST(j["waited_s"].get<double>() >= 0.0);
    BOOST_TEST(j["held_s"].get<double>() >= 0.0);
    BOOST_TEST(j["command_status"] == 3);
    BOOST_TEST(j["exit_status"] == 3);
    BOOST_TEST(j["lost"] == false);
    BOOST_TEST(j["released"] == true);

    // Held elsewhere: not acquired, no command, the conflict code.
    auto holder =
        box.start(run_args(box, {"busy", "-c", "touch " + box.path("ready") + "; sleep 60"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    r = box.run(run_args(box, {"--json", "-n", "-E", "9", "busy", "--", "true"}));
    BOOST_TEST(r.exit_code == 9, describe(r));
    j = summary(r);
    BOOST_TEST(j["acquired"] == false);
    BOOST_TEST(j["held_s"].is_null());
    BOOST_TEST(j["command_status"].is_null());
    BOOST_TEST(j["released"] == false);
    BOOST_TEST(j["exit_status"] == 9);
    ::kill(holder.pid, SIGTERM);
    box.wait(holder);

    // A command that cannot start: its line comes after the error.
    r = box.run(run_args(box, {"--json", "x", "--", "/nonexistent/command"}));
    BOOST_TEST(r.exit_code == 127, describe(r));
    BOOST_REQUIRE(r.err.find("\n{") == std::string::npos && r.err.front() == '{');
    j = nlohmann::json::parse(r.err.substr(0, r.err.find('\n')));
    BOOST_TEST(r.err.find("locksmith: cannot run /nonexistent/command") != std::string::npos);
    BOOST_TEST(j["released"] == true);
    BOOST_TEST(j["exit_status"] == 127);
    BOOST_TEST(j["command_status"].is_null());
    BOOST_TEST(j["acquired"] == true);

    // A name that is not UTF-8 comes back exactly, in base64.
    r = box.run(run_args(box, {"--json", "n\xff", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    j = summary(r);
    BOOST_TEST(j["name"].is_null());
    BOOST_TEST(j["name_base64"] == "bv8=");
}

BOOST_AUTO_TEST_CASE(verbose_says_which_strategy_and_why) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"-v", "v", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.err.find("locksmith: strategy file") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("acquired v") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("released v") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(misplaced_command_words_are_named_in_their_order) {
    cli_sandbox box;
    auto r = box.run(run_args(box, {"job", "echo", "hi", "there"}));
    BOOST_TEST(r.exit_code == 64, describe(r));
    BOOST_TEST(r.err.find("echo hi there") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(verbose_names_the_mode_actually_taken) {
    cli_sandbox box;
    // simple has no shared mode: -s takes the exclusive lock, said once, and reported as such.
    auto r = box.run(run_args(box, {"-v", "-s", "--strategy", "simple", "m", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(count(r.err, "no shared mode") == 1, r.err);
    BOOST_TEST(r.err.find("acquired m (exclusive") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("shared,") == std::string::npos, r.err);
    // file has one: shared it is, and nothing about a fallback.
    r = box.run(run_args(box, {"-v", "-s", "--strategy", "file", "m", "--", "true"}));
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(r.err.find("acquired m (shared") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("no shared mode") == std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(verbose_says_once_that_it_waits_and_for_whom) {
    cli_sandbox box;
    // The holder stays until the test has seen the waiter's note.
    auto holder = box.start(
        run_args(box, {"w", "-c",
                       "touch " + box.path("ready") + "; i=0; while [ ! -e " + box.path("go") +
                           " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done"}));
    BOOST_REQUIRE(wait_for_file(box.path("ready")));
    auto waiter = box.start(run_args(box, {"-v", "-w", "20", "w", "--", "true"}));
    const bool said = wait_for_text(waiter.err_path, "waiting");
    std::ofstream(box.path("go")) << "go";
    auto r = box.wait(waiter);
    BOOST_TEST(said, r.err);
    BOOST_TEST(r.exit_code == 0, describe(r));
    BOOST_TEST(count(r.err, "waiting") == 1, r.err);
    // file's status names the pid that holds the flock: the holder's locksmith.
    BOOST_TEST(r.err.find("pid " + std::to_string(holder.pid)) != std::string::npos, r.err);
    BOOST_TEST(r.err.find("w is held") != std::string::npos, r.err);
    BOOST_TEST(box.wait(holder).exit_code == 0);
}

// A lock taken away while the command ran (here its simple lock file removed, as another
// process does when it judges the lock stale) is a lost lock, not a successful release.
BOOST_AUTO_TEST_CASE(a_lock_removed_while_the_command_ran_is_reported_lost) {
    cli_sandbox box;
    std::string config = box.write_file(
        "simple.json",
        nlohmann::json{{"strategies", {{"simple", {{"options", {{"lock_dir", box.lock_dir()}}}}}}}}
            .dump());
    auto r = box.run({"run", "--config", config, "--strategy", "simple", "-v", "gone", "-c",
                      "rm " + box.lock_dir().string() + "/*.slock"});
    BOOST_TEST(r.exit_code == 75, describe(r));
    BOOST_TEST(r.err.find("no longer held") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("released gone") == std::string::npos, r.err);
}

// hold keeps NAME across the commands of a script (issue 26), as a bash script uses it: a
// coprocess says "held", other runs are excluded meanwhile, and closing its input or SIGTERM
// releases it (exit 0); -n on a held name exits with the conflict code; no command is taken.
BOOST_AUTO_TEST_CASE(hold_keeps_the_lock_across_a_scripts_commands) {
    cli_sandbox box;
    const std::string ls =
        "'" + locksmith::test::cli_binary() + "' --config '" + box.config_path().string() + "'";
    const auto script = box.write_file(
        "hold.sh", R"(
coproc HOLD { exec )" + ls +
                       R"( hold -w 10 deploy; }
read -r state token <&"${HOLD[0]}"
echo "state=$state"
)" + ls + R"( run -n deploy -- true; echo "other while held: $?"
exec {HOLD[1]}>&-
wait "$HOLD_PID"; echo "released by EOF: $?"
)" + ls + R"( run -n deploy -- true; echo "other after: $?"
coproc HOLD2 { exec )" +
                       ls + R"( hold deploy; }
read -r state <&"${HOLD2[0]}"
kill "$HOLD2_PID"; wait "$HOLD2_PID"; echo "released by SIGTERM: $?"
)" + ls + R"( run -n deploy -- true; echo "other after SIGTERM: $?"
)" + ls + R"( run deploy -- sh -c ')" +
                       ls + R"( hold -n deploy </dev/null; echo "hold -n on a held name: $?"'
)");
    FILE* p = ::popen(("bash '" + script + "' 2>&1").c_str(), "r");
    BOOST_REQUIRE(p);
    std::string out;
    char buffer[512];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) out.append(buffer, n);
    BOOST_TEST(::pclose(p) == 0, out);
    for (const char* line :
         {"state=held\n", "other while held: 1\n", "released by EOF: 0\n", "other after: 0\n",
          "released by SIGTERM: 0\n", "other after SIGTERM: 0\n", "hold -n on a held name: 1\n"})
        BOOST_TEST(out.find(line) != std::string::npos, line << " in:\n" << out);
    auto r = box.run_with_config("hold", {"deploy", "-c", "true"});
    BOOST_TEST(r.exit_code == EX_USAGE, describe(r));
}

BOOST_AUTO_TEST_SUITE_END()
