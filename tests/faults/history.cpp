// SPDX-License-Identifier: MIT
#include "faults/history.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>

namespace locksmith::faults {

std::int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

history_log::history_log(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
}

history_log::~history_log() {
    if (fd_ >= 0) ::close(fd_);
}

void history_log::record(long pid, int worker, long seq, char kind, std::int64_t a, std::int64_t b,
                         std::int64_t c) {
    char line[160];
    const int n = std::snprintf(line, sizeof line, "%lld %ld %d %ld %c %lld %lld %lld\n",
                                static_cast<long long>(monotonic_ns()), pid, worker, seq, kind,
                                static_cast<long long>(a), static_cast<long long>(b),
                                static_cast<long long>(c));
    // One write of a short line to an O_APPEND descriptor: atomic against other writers. A
    // failed write would silently weaken the checker, so it ends the process.
    if (::write(fd_, line, std::size_t(n)) != n) std::abort();
}

namespace {

// Holds the register's flock for one operation: the storage's own concurrency control.
struct storage_lock {
    int fd;
    storage_lock(int f, int how) : fd(f) {
        while (::flock(fd, how) != 0)
            if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "flock");
    }
    ~storage_lock() { ::flock(fd, LOCK_UN); }
};

constexpr int register_width = 48;

}  // namespace

resource::resource(const std::string& register_path, history_log& log, bool fenced)
    : log_(log), fenced_(fenced) {
    fd_ = ::open(register_path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open " + register_path);
}

resource::~resource() {
    if (fd_ >= 0) ::close(fd_);
}

void resource::initialise(const std::string& register_path) {
    int fd = ::open(register_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + register_path);
    char buf[register_width];
    const int n = std::snprintf(buf, sizeof buf, "%020lld %020lld\n", 0LL, -1LL);
    const bool ok = ::pwrite(fd, buf, std::size_t(n), 0) == n;
    ::close(fd);
    if (!ok) throw std::runtime_error("cannot write " + register_path);
}

resource::state resource::load() const {
    char buf[register_width] = {};
    if (::pread(fd_, buf, sizeof buf - 1, 0) <= 0) throw std::runtime_error("register unreadable");
    state s;
    char* end = nullptr;
    s.value = std::strtoll(buf, &end, 10);
    s.highest_token = std::strtoll(end, nullptr, 10);
    return s;
}

std::int64_t resource::read(int worker, long seq, long pid) {
    storage_lock held(fd_, LOCK_SH);
    const auto s = load();
    log_.record(pid ? pid : ::getpid(), worker, seq, 'R', s.value);
    return s.value;
}

bool resource::write(int worker, long seq, std::int64_t token, std::int64_t value, long pid) {
    if (pid == 0) pid = ::getpid();
    storage_lock held(fd_, LOCK_EX);
    auto s = load();
    // Logged while the storage lock is held: the log's order of W records is the register's.
    if (fenced_ && token < s.highest_token) {
        log_.record(pid, worker, seq, 'V', token, value, s.value);
        return false;
    }
    const auto before = s.value;
    s.value = value;
    if (token > s.highest_token) s.highest_token = token;
    char buf[register_width];
    const int n =
        std::snprintf(buf, sizeof buf, "%020lld %020lld\n", static_cast<long long>(s.value),
                      static_cast<long long>(s.highest_token));
    if (::pwrite(fd_, buf, std::size_t(n), 0) != n) throw std::runtime_error("register write");
    log_.record(pid, worker, seq, 'W', token, value, before);
    return true;
}

}  // namespace locksmith::faults
