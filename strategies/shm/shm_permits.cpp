// SPDX-License-Identifier: MIT
#include "shm_permits.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include <locksmith/errors.hpp>

namespace locksmith::strategies::shm {

namespace {

std::size_t permits_offset() {
    return (sizeof(permit_header) + alignof(permit_slot) - 1) & ~(alignof(permit_slot) - 1);
}

// glibc's lock word of a mutex: the owner's tid, FUTEX_WAITERS and FUTEX_OWNER_DIED (the layout
// the kernel's robust-list clean-up reads, so it cannot change).
std::atomic<std::uint32_t>& lock_word(pthread_mutex_t* m) {
    static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0);
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(m->__data.__lock));
    return *reinterpret_cast<std::atomic<std::uint32_t>*>(&m->__data.__lock);
}

}  // namespace

std::string permits_path(const std::string& segment, std::string_view name) {
    return std::string(shm_dir) + "/" + segment + ".permits." + stable_name_hash(name).hex();
}

std::size_t permits_size(std::uint32_t limit) {
    return permits_offset() + sizeof(permit_slot) * std::size_t(limit);
}

permit_file::permit_file(std::string path, std::uint32_t limit, std::uint32_t mode, bool create)
    : path_(std::move(path)) {
    for (int attempt = 0;; ++attempt) {
        const int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) {
            fd_ = fd;
            try {
                map_existing(fd, mode);
            } catch (...) {
                ::close(fd_);
                fd_ = -1;
                throw;
            }
            return;
        }
        const int err = errno;
        if (err == ELOOP) fail("ELOOP", "is a symbolic link, which locksmith does not follow");
        if (err != ENOENT || !create || attempt >= 10)
            fail("errno " + std::to_string(err),
                 std::string("cannot be opened: ") + std::strerror(err));
        if (create_and_publish(limit, mode)) return;
        // Another process published its segment first: use that one.
    }
}

permit_file::~permit_file() {
    if (base_ != nullptr) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
}

void permit_file::fail(const std::string& code, const std::string& what) const {
    const error_kind kind = code.rfind("errno ", 0) == 0 ? errno_kind(std::atoi(code.c_str() + 6))
                                                         : error_kind::permanent;
    throw backend_error(strategy_name, code,
                        "shm: the permits segment " + path_ + " " + what +
                            ". Remove it when no process of yours uses it: rm " + path_,
                        kind);
}

void permit_file::map_existing(int fd, std::uint32_t mode) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("errno " + std::to_string(errno), "cannot be examined");
    if (!S_ISREG(st.st_mode)) fail("not a file", "is not a regular file");
    if (auto why = foreign_file_refusal(st, mode); !why.empty()) fail("foreign", why);
    permit_header header;
    if (st.st_size < off_t(sizeof header) ||
        ::pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) ||
        header.magic != permits_magic || header.version != permits_version || header.limit < 1 ||
        header.limit > max_permits || st.st_size < off_t(permits_size(header.limit)))
        fail("bad segment", "is not a locksmith permits segment of version " +
                                std::to_string(permits_version) + " (or is corrupted)");
    limit_ = header.limit;
    const std::size_t size = permits_size(limit_);
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) fail("errno " + std::to_string(errno), "cannot be mapped");
    map(base, size);
}

bool permit_file::create_and_publish(std::uint32_t limit, std::uint32_t mode) {
    const auto made = publish_new_segment(
        path_, permits_size(limit), mode, "the permits segment " + path_, "free space there",
        [limit](void* base) {
            (new (base) permit_header)->limit = limit;
            auto* first =
                reinterpret_cast<permit_slot*>(static_cast<char*>(base) + permits_offset());
            for (std::uint32_t i = 0; i < limit; ++i)
                init_robust_mutex(&(new (&first[i]) permit_slot)->mutex);
        });
    if (!made) return false;
    fd_ = made->fd;
    limit_ = limit;
    map(made->base, permits_size(limit));
    return true;
}

void permit_file::map(void* base, std::size_t size) {
    base_ = base;
    slots_ = reinterpret_cast<permit_slot*>(static_cast<char*>(base) + permits_offset());
    size_ = size;
}

bool permit_file::wait(deadline until) {
    futex_waitv words[max_permits];
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < limit_; ++i) {
        auto& word = lock_word(&slots_[i].mutex);
        std::uint32_t v = word.load();
        for (;;) {
            // Free, or its holder died: no need to sleep.
            if ((v & FUTEX_TID_MASK) == 0 || (v & FUTEX_OWNER_DIED) != 0) return true;
            if ((v & FUTEX_WAITERS) != 0) break;
            // The holder's unlock (glibc) and its death (the kernel) wake a sleeper only when
            // this bit is set; when the CAS fails the word changed: look again.
            if (word.compare_exchange_weak(v, v | FUTEX_WAITERS)) {
                v |= FUTEX_WAITERS;
                break;
            }
        }
        words[n++] = futex_waitv{v, reinterpret_cast<std::uintptr_t>(&word), FUTEX_32, 0};
    }
    // glibc's unlock wakes one sleeper per word, and only while FUTEX_WAITERS is set: a permit
    // taken after a wait sets it again (keep_waking), a waiter that leaves passes its wake-up
    // on (pass_on_wake_ups); without the first, cli_test's six runs over three permits hung 1
    // time in 5. The slice is a safety net against a miss we did not think of: a wait, never a
    // hang (a test's 1 s bound on a wake-up tells a miss from a wake-up).
    const auto slice_end = deadline::clock::now() + std::chrono::seconds(2);
    if (until > slice_end) until = slice_end;
    timespec ts{};
    timespec* timeout = nullptr;
    {
        auto since_epoch = until.time_since_epoch();
        if (since_epoch.count() < 0) since_epoch = {};
        auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
        ts.tv_sec = static_cast<time_t>(secs.count());
        ts.tv_nsec = static_cast<long>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - secs).count());
        timeout = &ts;
    }
    // Shared futexes (no FUTEX_PRIVATE_FLAG): the words are in a shared mapping. The deadline is
    // on CLOCK_MONOTONIC, steady_clock's. EAGAIN (a word changed), EINTR, ETIMEDOUT and a wake-up
    // all mean: try again (the caller checks the deadline).
    if (::syscall(SYS_futex_waitv, words, n, 0, timeout, CLOCK_MONOTONIC) < 0 && errno == ENOSYS)
        return false;
    return true;
}

void permit_file::keep_waking(std::uint32_t i) {
    auto& word = lock_word(&slots_[i].mutex);
    std::uint32_t v = word.load();
    while ((v & FUTEX_WAITERS) == 0 && !word.compare_exchange_weak(v, v | FUTEX_WAITERS)) {
    }
}

void permit_file::pass_on_wake_ups() {
    for (std::uint32_t i = 0; i < limit_; ++i) {
        auto& word = lock_word(&slots_[i].mutex);
        if ((word.load() & FUTEX_WAITERS) != 0)
            ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, 1, nullptr,
                      nullptr, 0);
    }
}

bool permit_file::unlinked() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && st.st_nlink == 0;
}

std::uint32_t permit_file::held() const {
    std::uint32_t count = 0;
    for (std::uint32_t i = 0; i < limit_; ++i) {
        const std::uint32_t v = lock_word(&slots_[i].mutex).load();
        if ((v & FUTEX_TID_MASK) != 0 && (v & FUTEX_OWNER_DIED) == 0) ++count;
    }
    return count;
}

}  // namespace locksmith::strategies::shm
