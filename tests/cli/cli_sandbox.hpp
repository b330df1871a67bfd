// SPDX-License-Identifier: MIT
// cli_sandbox: a private directory, lock directory and config file for one test, and the means
// to run the real `locksmith` binary in it (synchronously or in the background).
//
// The binary is LOCKSMITH_CLI (environment) or this build's (support/test_paths.hpp). Children get
// a clean environment: no LOCKSMITH_* from the caller, XDG_CONFIG_HOME inside the sandbox, so a
// developer's own $XDG_CONFIG_HOME/locksmith cannot stop the command (it is an error there).
// The user's ~/.config/locksmith/config.json comes from the passwd entry, not HOME, and is
// read: tests that rely on the built-in defaults expect none there (CI has none).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace locksmith::test {

struct cli_result {
    int exit_code = -1;  // 128 + N when signal N ended the process
    std::string out;
    std::string err;
    double seconds = 0;  // wall time from spawn to exit
};

struct cli_process {
    pid_t pid = -1;
    std::string out_path;
    std::string err_path;
    std::chrono::steady_clock::time_point started;
};

class cli_sandbox {
  public:
    // `extra_config` is merged into {"strategies":{"file":{"options":{"lock_dir":...}}}}.
    explicit cli_sandbox(const nlohmann::json& extra_config = nlohmann::json::object());
    ~cli_sandbox();
    cli_sandbox(const cli_sandbox&) = delete;
    cli_sandbox& operator=(const cli_sandbox&) = delete;

    const std::filesystem::path& dir() const { return dir_; }
    const std::filesystem::path& lock_dir() const { return lock_dir_; }
    const std::filesystem::path& config_path() const { return config_path_; }
    // A path inside the sandbox, as a string for shell commands.
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    // Extra environment for the next spawns (value nullopt = unset).
    void set_env(const std::string& name, std::optional<std::string> value);
    // The next spawns get `path` opened read-only as descriptor `fd` (3 or above), as a shell's
    // `fd<path` would pass it. Apart from these and 0, 1, 2 they get no descriptor of the test.
    void pass_fd(int fd, const std::string& path) { passed_fds_[fd] = path; }

    // Runs `locksmith ARGS...` and waits for it (killing it after `timeout`, which fails the test).
    cli_result run(const std::vector<std::string>& args,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));
    // The same with "--config <sandbox config>" inserted after the subcommand.
    cli_result run_with_config(const std::string& subcommand, const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout = std::chrono::seconds(30));
    std::vector<std::string> with_config(const std::string& subcommand,
                                         const std::vector<std::string>& args) const;

    cli_process start(const std::vector<std::string>& args);
    cli_result wait(cli_process& p, std::chrono::milliseconds timeout = std::chrono::seconds(30));

    // Writes `text` to a file in the sandbox and returns its path.
    std::string write_file(const std::string& name, const std::string& text) const;
    std::string read_file(const std::string& name) const;

  private:
    std::filesystem::path dir_;
    std::filesystem::path lock_dir_;
    std::filesystem::path config_path_;
    std::map<std::string, std::optional<std::string>> env_;
    std::map<int, std::string> passed_fds_;
    std::vector<pid_t> running_;
    int spawn_count_ = 0;
};

// "exit N, stdout [...], stderr [...]": a result, for the message of a failed check.
std::string describe(const cli_result& r);

// The locksmith binary under test.
std::string cli_binary();

// Waits until `path` exists; false after `timeout`.
bool wait_for_file(const std::filesystem::path& path,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace locksmith::test
