// SPDX-License-Identifier: MIT
// Uncontended lock+unlock pairs per second: the `file` strategy through named_lock, beside the
// raw flock(2) loop it is built on, measured in one run, alternating, 7 rounds each.
//
//   bench_file [iterations per round]     (default 200000)
//
// Prints min/median/max pairs/s for both and the ratio of the medians (goal: >= 0.8).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/file.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double pairs_per_second(long iterations, F&& body) {
    auto start = clock_type::now();
    for (long i = 0; i < iterations; ++i) body();
    std::chrono::duration<double> took = clock_type::now() - start;
    return double(iterations) / took.count();
}

struct summary {
    double min, median, max;
};

summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v.front(), v[v.size() / 2], v.back()};
}

}  // namespace

int main(int argc, char** argv) {
    const long iterations = argc > 1 ? std::atol(argv[1]) : 200000;
    const int rounds = 7;
    auto dir =
        std::filesystem::temp_directory_path() / ("locksmith-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);

    // Baseline: the two flock(2) calls on a file opened once.
    int fd = ::open((dir / "raw.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return 1;

    locksmith::strategies::file_options options;
    options.lock_dir = dir;
    auto store = locksmith::strategies::make_file_store(options);
    locksmith::named_lock lock(store, std::make_shared<locksmith::key>("bench"));

    std::vector<double> raw, ours;
    for (int r = 0; r < rounds; ++r) {
        raw.push_back(pairs_per_second(iterations, [&] {
            ::flock(fd, LOCK_EX);
            ::flock(fd, LOCK_UN);
        }));
        ours.push_back(pairs_per_second(iterations, [&] {
            lock.lock();
            lock.unlock();
        }));
    }
    ::close(fd);
    auto a = summarize(raw), b = summarize(ours);
    std::printf("file strategy, uncontended lock+unlock, %ld pairs x %d rounds\n", iterations,
                rounds);
    std::printf("%-28s %12s %12s %12s\n", "", "min/s", "median/s", "max/s");
    std::printf("%-28s %12.0f %12.0f %12.0f\n", "raw flock(2) loop", a.min, a.median, a.max);
    std::printf("%-28s %12.0f %12.0f %12.0f\n", "locksmith file (named_lock)", b.min, b.median,
                b.max);
    std::printf("ratio of medians: %.2f (goal >= 0.80)\n", b.median / a.median);
    std::filesystem::remove_all(dir);
    return 0;
}
