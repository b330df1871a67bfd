// SPDX-License-Identifier: MIT
#include "support/thread_signals.hpp"

#include <pthread.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

namespace locksmith::test {

std::vector<std::uint64_t> masks_of_threads_started_by(const std::function<void()>& start) {
    auto tasks = [] {
        std::set<std::string> ids;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
            ids.insert(e.path().filename().string());
        return ids;
    };
#ifdef __SANITIZE_THREAD__
    // ThreadSanitizer starts a background thread of its own beside the process's first thread
    // and never ends it: have it started before counting, so that only `start`'s threads count.
    std::thread([] {}).join();
#endif
    const auto before = tasks();
    start();
    std::vector<std::uint64_t> masks;
    for (const auto& id : tasks()) {
        if (before.count(id)) continue;
        std::ifstream status("/proc/self/task/" + id + "/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("SigBlk:", 0) == 0)
                masks.push_back(std::stoull(line.substr(7), nullptr, 16));
    }
    return masks;
}

void block_sigpipe_in_this_thread() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

}  // namespace locksmith::test
