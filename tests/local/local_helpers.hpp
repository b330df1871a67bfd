// SPDX-License-Identifier: MIT
// Helpers shared by the tests of the local strategies (simple, semaphore, shm): a counter file
// that several processes increment under a lock, a private temporary directory, and lock
// construction with a fast polling schedule (and, from support/permit_helpers.hpp, permits).
#pragma once

#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/author/store.hpp>
#include <locksmith/key.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>

#include "support/child_process.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/skip_report.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_helpers.hpp"

namespace locksmith::test {

// A run-unique suffix: pid plus a counter, so parallel test processes never share objects.
inline std::string run_unique(const std::string& label) {
    static std::atomic<int> counter{0};
    return label + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

// A directory under the temp dir, mode 0700, removed with everything in it on destruction.
class temp_dir {
  public:
    explicit temp_dir(const std::string& label)
        : path_(std::filesystem::temp_directory_path() / run_unique("locksmith-" + label)) {
        std::filesystem::create_directories(path_);
        std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::replace);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    const std::filesystem::path& path() const noexcept { return path_; }
    std::size_t entries() const {
        std::size_t n = 0;
        for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(path_)) ++n;
        return n;
    }

  private:
    std::filesystem::path path_;
};

// A lock with a short polling schedule, so contended tests of polling strategies run quickly.
inline named_lock make_lock(const std::shared_ptr<store>& s, const std::string& name) {
    lock_options options;
    options.retry.initial = std::chrono::microseconds(100);
    options.retry.max = std::chrono::microseconds(2000);
    return named_lock(s, std::make_shared<key>(name), options);
}

// An 8-byte counter in a file, read and written with separate calls so that increments made
// without mutual exclusion get lost (a yield between the read and the write widens the window).
class counter_file {
  public:
    explicit counter_file(std::filesystem::path path) : path_(std::move(path)) {
        int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        std::int64_t zero = 0;
        if (fd >= 0) {
            (void)::pwrite(fd, &zero, sizeof zero, 0);
            ::close(fd);
        }
    }
    // Returns false on an I/O error.
    bool increment() const {
        int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) return false;
        std::int64_t value = 0;
        bool ok = ::pread(fd, &value, sizeof value, 0) == sizeof value;
        std::this_thread::yield();
        ++value;
        ok = ok && ::pwrite(fd, &value, sizeof value, 0) == sizeof value;
        ::close(fd);
        return ok;
    }
    std::int64_t value() const {
        int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        std::int64_t value = -1;
        if (fd >= 0) {
            if (::pread(fd, &value, sizeof value, 0) != sizeof value) value = -1;
            ::close(fd);
        }
        return value;
    }

  private:
    std::filesystem::path path_;
};

// Forks `processes` children; each builds its own store with `make_store` and increments the
// counter `iterations` times under the lock `name`. Returns the sum of the children's exit
// codes (0 when every child succeeded).
inline int increment_in_processes(const std::function<std::shared_ptr<store>()>& make_store,
                                  const std::string& name, const counter_file& counter,
                                  int processes, int iterations) {
    // The children start together (when the parent closes the gate), so they contend.
    byte_pipe gate;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p)
        children.push_back(fork_child(
            [&] {
                gate.close_write();
                auto s = make_store();
                auto lock = make_lock(s, name);
                (void)gate.get(std::chrono::seconds(30));  // EOF: go
                for (int i = 0; i < iterations; ++i) {
                    lock.lock();
                    if (!counter.increment()) return 3;
                    lock.unlock();
                }
                return 0;
            },
            std::chrono::seconds(120)));
    gate.close_write();
    int failures = 0;
    for (pid_t pid : children) failures += wait_child(pid, std::chrono::seconds(120)) != 0;
    return failures;
}

// `threads` threads of this process, each with its own lock object on `name`, increment a plain
// integer `iterations` times. Returns the final value.
inline std::int64_t increment_in_threads(const std::shared_ptr<store>& s, const std::string& name,
                                         int threads, int iterations) {
    std::int64_t value = 0;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&] {
            auto lock = make_lock(s, name);
            for (int i = 0; i < iterations; ++i) {
                lock.lock();
                std::int64_t v = value;
                std::this_thread::yield();
                value = v + 1;
                lock.unlock();
            }
        });
    for (auto& w : workers) w.join();
    return value;
}

// Forks a child that waits for `name` with its own store (lock(), then exits 0); returns once the
// child is about to call lock().
inline pid_t fork_waiter(const std::function<std::shared_ptr<store>()>& make_store,
                         const std::string& name) {
    byte_pipe started;
    pid_t pid = fork_child([&] {
        auto lock = make_lock(make_store(), name);
        started.put('w');
        lock.lock();
        return 0;
    });
    started.close_write();
    if (!started.get(std::chrono::seconds(30))) throw std::runtime_error("waiter did not start");
    return pid;
}

// Forks a child that takes `name` with its own store and then blocks until it is killed; waits
// until it holds the lock. Returns its pid, or -1 when it did not report holding in 10 s.
inline pid_t fork_holder(const std::function<std::shared_ptr<store>()>& make_store,
                         const std::string& name) {
    byte_pipe ready;
    pid_t pid = fork_child([&] {
        auto s = make_store();
        auto lock = make_lock(s, name);
        lock.lock();
        ready.put('h');
        for (;;) ::pause();
        return 0;
    });
    ready.close_write();
    if (!ready.get(std::chrono::seconds(10))) {
        wait_child(pid, std::chrono::milliseconds(1));
        return -1;
    }
    return pid;
}

// CPU time (user + system) that process `pid` used so far, in clock ticks.
inline long cpu_ticks(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream in(line.substr(line.rfind(')') + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
        if (i == 14) utime = std::stol(field);
        if (i == 15) stime = std::stol(field);
    }
    return utime + stime;
}

// A timed wait for a permit of `name` (of 1) that a child process holds for 600 ms: it ends on
// time while the permit is held, and a longer one gets the permit when the child gives it back.
inline void expect_timed_permit_waits(const std::function<std::shared_ptr<store>()>& make_store,
                                      const std::string& name) {
    using namespace std::chrono_literals;
    byte_pipe ready;
    pid_t holder = fork_child([&] {
        auto p = make_permit(make_store(), name, 1);
        p.acquire();
        ready.put('h');
        std::this_thread::sleep_for(600ms);
        p.release();
        return 0;
    });
    ready.close_write();
    BOOST_REQUIRE(ready.get(10s));
    auto mine = make_permit(make_store(), name, 1);
    auto start = std::chrono::steady_clock::now();
    BOOST_TEST(!mine.try_acquire_for(100ms));
    BOOST_TEST(ms_since(start) >= 100);
    BOOST_TEST(ms_since(start) < 500);
    BOOST_TEST(mine.try_acquire_for(30s));  // when the holder gives it back
    BOOST_TEST(wait_child(holder, 30s) == 0);
}

// The end of a run_on_a_full_tmpfs case: skipped (`why`) where the mount is not permitted, else
// the child must have passed every step.
inline void expect_passed_on_a_full_tmpfs(const std::optional<int>& status,
                                          const std::string& why) {
    if (!status) return skip_case(why);
    BOOST_TEST(*status == 0,
               "the child ended with "
                   << *status
                   << " (a failed step, or 201: a signal such as SIGBUS, reported above)");
}

}  // namespace locksmith::test
