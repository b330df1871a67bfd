// SPDX-License-Identifier: MIT
#include "cli_sandbox.hpp"

#include "support/test_paths.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace locksmith::test {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

std::string cli_binary() {
    if (const char* env = std::getenv("LOCKSMITH_CLI"); env != nullptr && *env != '\0') return env;
    return cli_path();
}

std::string describe(const cli_result& r) {
    return "exit " + std::to_string(r.exit_code) + ", stdout [" + r.out + "], stderr [" + r.err +
           "]";
}

bool wait_for_file(const fs::path& path, std::chrono::milliseconds timeout) {
    auto until = clock::now() + timeout;
    while (clock::now() < until) {
        std::error_code ec;
        if (fs::exists(path, ec)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

cli_sandbox::cli_sandbox(const nlohmann::json& extra_config) {
    std::string pattern = (fs::temp_directory_path() / "locksmith-cli-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    lock_dir_ = dir_ / "locks";
    fs::create_directory(lock_dir_);
    fs::permissions(lock_dir_, fs::perms::owner_all, fs::perm_options::replace);
    fs::create_directory(dir_ / "xdg");

    nlohmann::json config = {
        {"strategies", {{"file", {{"options", {{"lock_dir", lock_dir_.string()}}}}}}}};
    config.merge_patch(extra_config);
    config_path_ = write_file("config.json", config.dump(2));
}

cli_sandbox::~cli_sandbox() {
    for (pid_t pid : running_) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

void cli_sandbox::set_env(const std::string& name, std::optional<std::string> value) {
    env_[name] = std::move(value);
}

std::string cli_sandbox::write_file(const std::string& name, const std::string& text) const {
    fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out << text;
    return p.string();
}

std::string cli_sandbox::read_file(const std::string& name) const {
    std::ifstream in(dir_ / name, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> cli_sandbox::with_config(const std::string& subcommand,
                                                  const std::vector<std::string>& args) const {
    std::vector<std::string> all{subcommand, "--config", config_path_.string()};
    all.insert(all.end(), args.begin(), args.end());
    return all;
}

cli_result cli_sandbox::run_with_config(const std::string& subcommand,
                                        const std::vector<std::string>& args,
                                        std::chrono::milliseconds timeout) {
    return run(with_config(subcommand, args), timeout);
}

cli_process cli_sandbox::start(const std::vector<std::string>& args) {
    cli_process p;
    int n = spawn_count_++;
    p.out_path = (dir_ / ("out." + std::to_string(n))).string();
    p.err_path = (dir_ / ("err." + std::to_string(n))).string();

    std::string binary = cli_binary();
    std::vector<char*> argv;
    argv.push_back(binary.data());
    std::vector<std::string> copies(args);
    for (auto& a : copies) argv.push_back(a.data());
    argv.push_back(nullptr);

    // The environment: the caller's without LOCKSMITH_*, XDG_CONFIG_HOME in the sandbox, then
    // the test's own settings.
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string entry(*e);
        auto eq = entry.find('=');
        if (eq == std::string::npos) continue;
        std::string name = entry.substr(0, eq);
        if (name.rfind("LOCKSMITH_", 0) == 0) continue;
        env[name] = entry.substr(eq + 1);
    }
    env["XDG_CONFIG_HOME"] = (dir_ / "xdg").string();
    for (const auto& [name, value] : env_) {
        if (value) {
            env[name] = *value;
        } else {
            env.erase(name);
        }
    }
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    for (const auto& [fd, path] : passed_fds_)
        posix_spawn_file_actions_addopen(&actions, fd, path.c_str(), O_RDONLY, 0);
    // Default dispositions and no blocked signals: a test runner started in the background by a
    // non-interactive shell has SIGINT ignored, and sh cannot trap a signal ignored on entry.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGCHLD, SIGPIPE}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    p.started = clock::now();
    int rc = ::posix_spawn(&p.pid, binary.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        throw std::runtime_error("cannot spawn " + binary + ": " + std::strerror(rc));
    }
    running_.push_back(p.pid);
    return p;
}

cli_result cli_sandbox::wait(cli_process& p, std::chrono::milliseconds timeout) {
    cli_result r;
    auto until = clock::now() + timeout;
    int status = 0;
    auto slurp = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        return text.str();
    };
    for (;;) {
        pid_t done = ::waitpid(p.pid, &status, WNOHANG);
        if (done == p.pid) break;
        if (clock::now() >= until) {
            ::kill(p.pid, SIGKILL);
            ::waitpid(p.pid, &status, 0);
            std::erase(running_, p.pid);
            // What it had printed says where it stood.
            throw std::runtime_error("locksmith did not finish within " +
                                     std::to_string(timeout.count()) + " ms; stdout: [" +
                                     slurp(p.out_path) + "] stderr: [" + slurp(p.err_path) + "]");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    r.seconds = std::chrono::duration<double>(clock::now() - p.started).count();
    std::erase(running_, p.pid);
    if (WIFEXITED(status)) {
        r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.exit_code = 128 + WTERMSIG(status);
    }
    r.out = slurp(p.out_path);
    r.err = slurp(p.err_path);
    return r;
}

cli_result cli_sandbox::run(const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout) {
    cli_process p = start(args);
    return wait(p, timeout);
}

}  // namespace locksmith::test
