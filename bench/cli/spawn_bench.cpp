// SPDX-License-Identifier: MIT
// spawn_bench: how long whole runs of some commands take, measured in one go.
//
//   spawn_bench [--runs N] [--warmup N] -- LABEL CMD ARGS... [--- LABEL CMD ARGS...]...
//
// The commands are run in turn (A B A B ...), so that a change in machine load during the run
// hits every command alike. Each run is posix_spawn + waitpid, with stdout/stderr on /dev/null.
// Prints, per command, the mean, median, p10 and p90 time per run, and each command's median
// divided by the first command's. A run that exits non-zero is reported and stops the benchmark:
// a benchmark of a failing command measures nothing.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct command {
    std::string label;
    std::vector<std::string> argv;
    std::vector<double> seconds;
};

double run_once(const command& c, posix_spawn_file_actions_t* actions) {
    std::vector<char*> argv;
    for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    auto start = std::chrono::steady_clock::now();
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], actions, nullptr, argv.data(), environ);
    if (rc != 0) {
        std::fprintf(stderr, "spawn_bench: cannot run %s: %s\n", argv[0], std::strerror(rc));
        std::exit(1);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "spawn_bench: %s failed (status %d)\n", c.label.c_str(), status);
        std::exit(1);
    }
    return s;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    std::size_t i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[i];
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 1000;
    int warmup = 50;
    std::vector<command> commands;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--runs" && i + 1 < argc) {
            runs = std::atoi(argv[++i]);
        } else if (a == "--warmup" && i + 1 < argc) {
            warmup = std::atoi(argv[++i]);
        } else if (a == "--") {
            ++i;
            break;
        } else {
            std::fprintf(
                stderr,
                "usage: spawn_bench [--runs N] [--warmup N] -- LABEL CMD... [--- LABEL CMD...]\n");
            return 64;
        }
    }
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "---" || commands.empty()) {
            commands.push_back({});
            if (a == "---") continue;
        }
        if (commands.back().label.empty()) {
            commands.back().label = a;
        } else {
            commands.back().argv.push_back(a);
        }
    }
    if (commands.empty() || runs < 1 ||
        std::any_of(commands.begin(), commands.end(), [](auto& c) { return c.argv.empty(); })) {
        std::fprintf(stderr, "spawn_bench: give at least one LABEL CMD\n");
        return 64;
    }

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);

    for (int w = 0; w < warmup; ++w) {
        for (auto& c : commands) run_once(c, &actions);
    }
    for (int r = 0; r < runs; ++r) {
        for (auto& c : commands) c.seconds.push_back(run_once(c, &actions));
    }

    double base = percentile(commands.front().seconds, 0.5);
    std::printf("%-28s %10s %10s %10s %10s %8s\n", "command", "mean_us", "median_us", "p10_us",
                "p90_us", "ratio");
    for (const auto& c : commands) {
        double mean = std::accumulate(c.seconds.begin(), c.seconds.end(), 0.0) /
                      static_cast<double>(c.seconds.size());
        double median = percentile(c.seconds, 0.5);
        std::printf("%-28s %10.1f %10.1f %10.1f %10.1f %8.2f\n", c.label.c_str(), mean * 1e6,
                    median * 1e6, percentile(c.seconds, 0.1) * 1e6,
                    percentile(c.seconds, 0.9) * 1e6, median / base);
    }
    std::printf(
        "(%d runs each, interleaved, after %d warm-up rounds; ratio = median / first "
        "command's median)\n",
        runs, warmup);
    return 0;
}
