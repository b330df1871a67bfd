// SPDX-License-Identifier: MIT
#include "core/local_wake.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include <locksmith/author/strategy_support.hpp>

namespace locksmith::detail {

struct local_waiter::slot {
    std::atomic<std::uint32_t> releases;  // the futex word: bumped by each release with waiters
    std::atomic<std::uint32_t> sleepers;  // this host's waiters on this slot (a crashed one
                                          // stays counted: releases then pay a futex call)
};

namespace {

constexpr std::size_t slot_count = 4096;
constexpr std::size_t board_size = slot_count * sizeof(local_waiter::slot);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// Maps the board once per process (a fork()ed child shares the mapping); null when it cannot be
// used, and then every caller falls back to plain sleeps.
local_waiter::slot* board() noexcept {
    static local_waiter::slot* const mapped = []() -> local_waiter::slot* {
        const std::string path = "/dev/shm/locksmith-wake-" + std::to_string(::geteuid());
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) return nullptr;
        struct stat st {};
        void* base = MAP_FAILED;
        // Ours, private to us and linked once, or not used at all: another user's file could
        // feed us wake-ups (harmless) or watch our lock names' slots (not harmless); a file with
        // a second link is some other file of ours linked in at the name (a hard link another
        // user may plant where protected_hardlinks=0), into which the counters would write.
        // Its pages are reserved before it is mapped: touching a mapped page with no storage
        // behind it (a full /dev/shm) kills the process with SIGBUS. fallocate(2), not
        // posix_fallocate, whose fallback for file systems without it rewrites bytes that other
        // processes may be counting in; without it or without room, waits are the plain backoff.
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
            (st.st_mode & 077) == 0 && st.st_nlink == 1 &&
            ::fallocate(fd, 0, 0, off_t(board_size)) == 0)
            base = ::mmap(nullptr, board_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        return base == MAP_FAILED ? nullptr : static_cast<local_waiter::slot*>(base);
    }();
    return mapped;
}

local_waiter::slot* slot_of(std::string_view name) noexcept {
    auto* b = board();
    return b ? &b[stable_name_hash(name).low % slot_count] : nullptr;
}

}  // namespace

// Counted from before the first attempt, not only while asleep: a release that ends while an
// attempt is on its way then always sees the waiter and bumps the word, and the sleep after that
// attempt does not start.
local_waiter::local_waiter(std::string_view name) noexcept : slot_(slot_of(name)) {
    if (slot_) slot_->sleepers.fetch_add(1, std::memory_order_seq_cst);
}

local_waiter::~local_waiter() {
    if (slot_) slot_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void local_waiter::arm() noexcept {
    if (slot_) seen_ = slot_->releases.load(std::memory_order_seq_cst);
}

void local_waiter::sleep_until(std::chrono::steady_clock::time_point wake) noexcept {
    if (!slot_) {
        std::this_thread::sleep_until(wake);
        return;
    }
    // FUTEX_WAIT returns at once when a release bumped the word since arm(); its timeout is
    // relative (CLOCK_MONOTONIC, as steady_clock); a signal or a spurious wake ends it early,
    // which is only an earlier poll.
    const auto left = wake - std::chrono::steady_clock::now();
    if (left <= left.zero()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec rel{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
    ::syscall(SYS_futex, &slot_->releases, FUTEX_WAIT, seen_, &rel, nullptr, 0);
}

void notify_local_waiters(std::string_view name) noexcept {
    auto* s = slot_of(name);
    if (!s || s->sleepers.load(std::memory_order_seq_cst) == 0) return;
    s->releases.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &s->releases, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace locksmith::detail
