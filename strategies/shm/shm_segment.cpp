// SPDX-License-Identifier: MIT
#include "shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include <locksmith/errors.hpp>

#ifdef __SANITIZE_THREAD__
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>
#endif

namespace locksmith::strategies::shm {

namespace {

// What ThreadSanitizer is told of the segment's mutexes. It cannot see what they were made for:
// they are process-shared, and a slot's mutex is the lock the caller holds between calls, taken
// while the lock handle's own mutex is held and released under it again. Its lock-order graph
// takes that for a cycle (named_lock's mutex, then the slot's; the slot's, then named_lock's),
// which cannot deadlock: a thread that holds the handle's mutex waits for the slot only when the
// handle does not hold it. (conformance.shm and multi_process.shm failed so.) And its runtime
// (gcc 12) does not intercept pthread_mutex_clocklock, so an unlock after a timed wait was "an
// unlock of an unlocked mutex". So under ThreadSanitizer the mutexes are locked through glibc
// itself, past the interceptors, and announced with TSan's annotations as try-locks: the
// happens-before of a lock and its unlock stays, the order graph gets no edge into them.
#ifdef __SANITIZE_THREAD__
template <class Function>
Function glibc(const char* name) {
    static void* const libc = ::dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    return reinterpret_cast<Function>(::dlsym(libc, name));
}

int mutex_trylock(pthread_mutex_t* m) {
    static const auto f = glibc<int (*)(pthread_mutex_t*)>("pthread_mutex_trylock");
    return f(m);
}
int mutex_lock(pthread_mutex_t* m) {
    static const auto f = glibc<int (*)(pthread_mutex_t*)>("pthread_mutex_lock");
    return f(m);
}
int mutex_clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* until) {
    static const auto f =
        glibc<int (*)(pthread_mutex_t*, clockid_t, const timespec*)>("pthread_mutex_clocklock");
    return f(m, clock, until);
}
#else
int mutex_trylock(pthread_mutex_t* m) {
    return pthread_mutex_trylock(m);
}
int mutex_lock(pthread_mutex_t* m) {
    return pthread_mutex_lock(m);
}
int mutex_clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* until) {
    return pthread_mutex_clocklock(m, clock, until);
}
#endif

std::size_t slots_offset() {
    return (sizeof(shm_table) + alignof(shm_slot) - 1) & ~(alignof(shm_slot) - 1);
}

std::size_t segment_size(std::uint32_t slots) {
    return slots_offset() + sizeof(shm_slot) * std::size_t(slots);
}

// The table mutex is held for a handful of loads and stores, so a blocking lock is fine.
class table_guard {
  public:
    explicit table_guard(pthread_mutex_t* m) : m_(m) {
        // lock_result::recovered: a process died inside a bookkeeping update. Every update leaves
        // the table usable in any intermediate state (at worst a leaked reference or slot, which
        // reclaim() recovers), so there is nothing to repair.
        const lock_result r = lock_robust(m_, false, deadline::max());
        if (r == lock_result::self_deadlock)
            throw backend_error(strategy_name, "EDEADLK", "shm: table mutex relocked by its owner");
    }
    ~table_guard() { unlock_robust(m_); }
    table_guard(const table_guard&) = delete;
    table_guard& operator=(const table_guard&) = delete;

  private:
    pthread_mutex_t* m_;
};

}  // namespace

void init_robust_mutex(pthread_mutex_t* m) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    int rc = pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) throw_errno(strategy_name, "pthread_mutex_init", rc);
}

std::string octal_mode(unsigned mode) {
    char text[8];
    std::snprintf(text, sizeof text, "0%03o", mode & 0777u);
    return text;
}

std::string foreign_file_refusal(const struct stat& st, std::uint32_t mode) {
    const uid_t me = ::geteuid();
    const auto perms = static_cast<unsigned>(st.st_mode) & 0777u;
    // A second name (a hard link, which another user may make to a file of ours where
    // protected_hardlinks is off): what the locks write would be written to that file too.
    if (st.st_nlink > 1)
        return "has " + std::to_string(st.st_nlink) +
               " names (hard links): another user may have linked a file of ours here, and "
               "locksmith would write its locks into that file";
    if (st.st_uid == me && (perms & ~mode) == 0) return {};
    return "belongs to uid " + std::to_string(st.st_uid) + " with mode " + octal_mode(perms) +
           "; locksmith only uses a segment that this user (uid " + std::to_string(me) +
           ") created, with at most mode " + octal_mode(mode) +
           ", since anyone else with access could release or block its locks";
}

lock_result lock_robust(pthread_mutex_t* m, bool try_only, deadline until) {
#ifdef __SANITIZE_THREAD__
    __tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
#endif
    int rc;
    if (try_only) {
        rc = mutex_trylock(m);
    } else if (until == deadline::max()) {
        rc = mutex_lock(m);
    } else {
        // steady_clock is CLOCK_MONOTONIC in libstdc++; clocklock (glibc 2.30) waits on it, so
        // a wall-clock jump neither shortens nor stretches the wait.
        auto since_epoch = until.time_since_epoch();
        if (since_epoch.count() < 0) since_epoch = {};
        auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
        timespec ts{};
        ts.tv_sec = static_cast<time_t>(secs.count());
        ts.tv_nsec = static_cast<long>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - secs).count());
        rc = mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
    }
#ifdef __SANITIZE_THREAD__
    __tsan_mutex_post_lock(m,
                           rc == 0 || rc == EOWNERDEAD
                               ? __tsan_mutex_try_lock
                               : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed,
                           0);
#endif
    switch (rc) {
        case 0:
            return lock_result::acquired;
        case EOWNERDEAD:
            // The previous owner died holding it: we own it now; make it usable again.
            pthread_mutex_consistent(m);
            return lock_result::recovered;
        case EBUSY:
            return lock_result::busy;
        case ETIMEDOUT:
            return lock_result::timed_out;
        case EDEADLK:
            return lock_result::self_deadlock;
        case ENOTRECOVERABLE:
            throw backend_error(strategy_name, "errno " + std::to_string(rc),
                                "shm: a lock mutex is not recoverable (a program unlocked it after "
                                "its owner died without making it consistent); remove the "
                                "segment when no process uses it");
        default:
            throw_errno(strategy_name, "locking a slot mutex", rc);
    }
}

int unlock_robust(pthread_mutex_t* m) {
#ifdef __SANITIZE_THREAD__
    __tsan_mutex_pre_unlock(m, 0);
    static const auto unlock = glibc<int (*)(pthread_mutex_t*)>("pthread_mutex_unlock");
    const int rc = unlock(m);
    __tsan_mutex_post_unlock(m, 0);
    return rc;
#else
    return pthread_mutex_unlock(m);
#endif
}

segment::segment(const std::string& name, std::uint32_t wanted_slots, std::uint32_t mode,
                 bool create)
    : name_(name), path_(std::string(shm_dir) + "/" + name) {
    for (int attempt = 0;; ++attempt) {
        const int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            fd_guard guard{fd};
            map_existing(fd, mode);
            return;
        }
        const int err = errno;
        if (err == ELOOP) fail("ELOOP", "is a symbolic link, which locksmith does not follow");
        if (err != ENOENT || !create || attempt >= 10)
            fail("errno " + std::to_string(err),
                 std::string("cannot be opened: ") + std::strerror(err));
        if (create_and_publish(wanted_slots, mode)) return;
        // Another process published its segment first: use that one.
    }
}

segment::~segment() {
    if (table_ != nullptr) ::munmap(table_, size_);
}

std::pair<std::uint32_t, std::uint64_t> segment::reference(const name_hash& h) {
    table_guard guard(table_mutex());
    for (int pass = 0; pass < 2; ++pass) {
        const std::uint32_t n = slot_count();
        const std::uint32_t home = static_cast<std::uint32_t>(h.low % n);
        std::uint32_t free_slot = n;
        for (std::uint32_t i = 0; i < n; ++i) {
            const std::uint32_t j = (home + i) % n;
            shm_slot& s = slots_[j];
            if (s.state == slot_state::empty) {
                if (free_slot == n) free_slot = j;
                break;  // linear probing: the name is not further on
            }
            if (s.state == slot_state::tombstone) {
                if (free_slot == n) free_slot = j;
                continue;
            }
            // Only a used slot is the name's: a state that is none of the three (what a
            // broken process of the user wrote) is skipped, as find() skips it (found by
            // tests/fuzz/fuzz_shm_segment).
            if (s.state == slot_state::used && s.hash == h) {
                ++s.refs;
                return {j, s.generation.load()};
            }
        }
        if (free_slot != n) {
            shm_slot& s = slots_[free_slot];
            s.hash = h;
            s.refs = 1;
            s.generation.fetch_add(1);
            s.state = slot_state::used;
            return {free_slot, s.generation.load()};
        }
        if (pass == 0 && reclaim_locked() == 0) break;
        clean_tombstones_if_due_locked();
    }
    throw backend_error(strategy_name, "full",
                        "shm: segment '" + name_ + "' is full: all " +
                            std::to_string(slot_count()) +
                            " slots hold locks that are held or waited for; create the "
                            "segment with more `slots`",
                        error_kind::transient);
}

void segment::unreference(std::uint32_t index, std::uint64_t generation) {
    table_guard guard(table_mutex());
    shm_slot& s = slots_[index];
    if (s.state != slot_state::used || s.generation.load() != generation) return;
    if (s.refs > 0) --s.refs;
    if (s.refs == 0) free_locked(index);
}

void segment::drop_dead_holder(std::uint32_t index) {
    table_guard guard(table_mutex());
    shm_slot& s = slots_[index];
    if (s.holder_pid.load() != 0 && s.state == slot_state::used && s.refs > 0) --s.refs;
    s.holder_pid = 0;
    s.holder_tid = 0;
}

std::uint32_t segment::in_use() {
    table_guard guard(table_mutex());
    std::uint32_t count = 0;
    for (std::uint32_t i = 0; i < slot_count(); ++i)
        if (slots_[i].state == slot_state::used) ++count;
    return count;
}

double segment::average_probes() {
    table_guard guard(table_mutex());
    const std::uint32_t n = slot_count();
    std::uint32_t start = n;
    for (std::uint32_t i = 0; i < n && start == n; ++i)
        if (slots_[i].state == slot_state::empty) start = i;
    if (start == n) return n;
    // Walking backwards from an empty slot, each slot's count is its successor's plus one.
    double total = 0;
    std::uint32_t probes = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
        const std::uint32_t j = (start + n - k) % n;
        probes = slots_[j].state == slot_state::empty ? 1 : probes + 1;
        total += probes;
    }
    return total / n;
}

std::optional<std::uint32_t> segment::find(const name_hash& h) {
    table_guard guard(table_mutex());
    const std::uint32_t n = slot_count();
    const std::uint32_t home = static_cast<std::uint32_t>(h.low % n);
    for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t j = (home + i) % n;
        if (slots_[j].state == slot_state::empty) break;
        if (slots_[j].state == slot_state::used && slots_[j].hash == h) return j;
    }
    return std::nullopt;
}

void segment::free_locked(std::uint32_t index) {
    shm_slot& s = slots_[index];
    s.generation.fetch_add(1);
    s.refs = 0;
    s.state = slot_state::tombstone;
    ++table_->freed_since_clean;
    // Keep probe chains short: a tombstone followed by an empty slot ends no chain, so it and
    // the tombstones right before it can become empty again.
    const std::uint32_t n = slot_count();
    if (slots_[(index + 1) % n].state == slot_state::empty) {
        std::uint32_t j = index;
        for (std::uint32_t k = 0; k < n && slots_[j].state == slot_state::tombstone; ++k) {
            slots_[j].state = slot_state::empty;
            j = (j + n - 1) % n;
        }
    }
    clean_tombstones_if_due_locked();
}

void segment::clean_tombstones_locked() {
    const std::uint32_t n = slot_count();
    std::vector<std::int32_t> starts(std::size_t(n) + 1, 0);  // path starts minus path ends
    for (std::uint32_t i = 0; i < n; ++i) {
        if (slots_[i].state != slot_state::used) continue;
        const auto home = static_cast<std::uint32_t>(slots_[i].hash.low % n);
        ++starts[home];
        --starts[i + 1];
        if (home > i) {  // the path wraps around the end of the table
            --starts[n];
            ++starts[0];
        }
    }
    std::int32_t paths = 0;  // probe paths crossing slot i
    for (std::uint32_t i = 0; i < n; ++i) {
        paths += starts[i];
        if (slots_[i].state == slot_state::tombstone && paths == 0)
            slots_[i].state = slot_state::empty;
    }
    table_->freed_since_clean = 0;
}

std::uint32_t segment::reclaim_locked() {
    std::uint32_t freed = 0;
    for (std::uint32_t i = 0; i < slot_count(); ++i) {
        shm_slot& s = slots_[i];
        if (s.state != slot_state::used) continue;
        lock_result r;
        try {
            r = lock_robust(&s.mutex, true, deadline{});
        } catch (const error&) {
            continue;
        }
        if (r != lock_result::acquired && r != lock_result::recovered) continue;
        s.holder_pid = 0;
        s.holder_tid = 0;
        s.generation.fetch_add(1);
        s.refs = 0;
        s.state = slot_state::tombstone;
        ++table_->freed_since_clean;
        unlock_robust(&s.mutex);
        ++freed;
    }
    return freed;
}

void segment::fail(const std::string& code, const std::string& what) const {
    // Only a failed system call may pass; what was found at the name stays until it is removed.
    const error_kind kind = code.rfind("errno ", 0) == 0 ? errno_kind(std::atoi(code.c_str() + 6))
                                                         : error_kind::permanent;
    throw backend_error(strategy_name, code,
                        "shm: the shared memory segment " + path_ + " " + what +
                            ". Remove it when no process of yours uses it: rm " + path_,
                        kind);
}

void segment::map_existing(int fd, std::uint32_t mode) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("errno " + std::to_string(errno), "cannot be examined");
    if (!S_ISREG(st.st_mode)) fail("not a file", "is not a regular file");
    if (auto why = foreign_file_refusal(st, mode); !why.empty()) fail("foreign", why);
    shm_table header{0};
    if (st.st_size < off_t(sizeof header) ||
        ::pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) ||
        header.magic != table_magic || header.version != table_version || header.slot_count < 1 ||
        header.slot_count > max_slots || st.st_size < off_t(segment_size(header.slot_count)))
        fail("bad segment", "is not a locksmith shm segment of version " +
                                std::to_string(table_version) + " (or is corrupted)");
    const std::size_t size = segment_size(header.slot_count);
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) fail("errno " + std::to_string(errno), "cannot be mapped");
    map(base, size);
}

bool segment::create_and_publish(std::uint32_t slots, std::uint32_t mode) {
    const auto made = publish_new_segment(
        path_, segment_size(slots), mode, "a new segment of " + std::to_string(slots) + " slots",
        "free space there, or use fewer `slots`", [slots](void* base) {
            auto* table = new (base) shm_table(slots);
            init_robust_mutex(&table->mutex);
            auto* first = reinterpret_cast<shm_slot*>(static_cast<char*>(base) + slots_offset());
            for (std::uint32_t i = 0; i < slots; ++i)
                init_robust_mutex(&(new (&first[i]) shm_slot)->mutex);
        });
    if (!made) return false;
    ::close(made->fd);
    map(made->base, segment_size(slots));
    return true;
}

void segment::map(void* base, std::size_t size) {
    table_ = static_cast<shm_table*>(base);
    slots_ = reinterpret_cast<shm_slot*>(static_cast<char*>(base) + slots_offset());
    size_ = size;
}

std::optional<new_segment> publish_new_segment(const std::string& path, std::size_t size,
                                               std::uint32_t mode, const std::string& what,
                                               const std::string& when_full,
                                               const std::function<void(void*)>& init) {
    const int fd = ::open(shm_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode & 0777u);
    if (fd < 0)
        throw_errno(strategy_name, std::string("creating a shared memory file in ") + shm_dir,
                    errno);
    fd_guard guard{fd};
    if (::fchmod(fd, mode & 0777u) != 0)
        throw_errno(strategy_name, "setting the mode of " + what, errno);
    // Every page reserved before it is mapped (which also sizes the file): a page with no
    // storage behind it (a full /dev/shm) kills whoever touches it with SIGBUS, here or in any
    // process that maps the segment later.
    if (const int err = ::posix_fallocate(fd, 0, off_t(size)); err != 0)
        throw_errno(strategy_name,
                    "reserving " + std::to_string(size) + " bytes in " + shm_dir + " for " + what +
                        (err == ENOSPC ? " (" + when_full + ")" : std::string()),
                    err);
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) throw_errno(strategy_name, "mapping " + what, errno);
    struct mapping_guard {
        void* base;
        std::size_t size;
        ~mapping_guard() {
            if (base != nullptr) ::munmap(base, size);
        }
    } mapped{base, size};
    init(base);
    const std::string self_link = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, self_link.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        if (errno == EEXIST) return std::nullopt;
        throw_errno(strategy_name, "linking " + what + " at " + path, errno);
    }
    mapped.base = nullptr;
    guard.fd = -1;
    return new_segment{fd, base};
}

}  // namespace locksmith::strategies::shm
