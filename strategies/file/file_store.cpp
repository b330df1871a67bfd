// SPDX-License-Identifier: MIT
// The `file` strategy: flock(2) on <lock_dir>/<prefix>.<hash>.lock. See
// include/locksmith/strategies/file.hpp for the contract.
//
// Removal protocol (why lock files do not pile up, and why removing them is safe):
//  - An owner keeps its descriptor between grants, so that lock+unlock is two flock(2) calls,
//    and removes the file when the owner object goes away, if nobody holds it then. Removing it
//    at every release (Symfony's FlockStore) would cost a create and an unlink per pair: 0.04x
//    the raw flock loop instead of 0.9x (bench/file/RESULTS.md).
//  - A lock file is only ever unlinked by an owner holding LOCK_EX on it, which first sets the
//    file's first byte, the "retired" mark, to 1. It unlinks, then closes. When it cannot set
//    the mark it leaves the file.
//  - After every grant (conversions included) the owner checks whether the file was unlinked
//    after it opened it ("retired": link count 0): such a grant guards nothing, since a
//    newcomer creates a fresh file at the path, so the owner closes it and opens the path
//    again. The unlinker held LOCK_EX from its own check to the unlink, so a grant never sees
//    a file that is about to be unlinked.
//  - The first grant on a descriptor fstat()s it and refuses a file that is not a lock file of
//    ours (lock_directory::refusal: not a regular file, hard-linked — a victim file linked in
//    at the path, or a second name that would survive the unlink — or owned by a stranger).
//    Only then is the mark mapped (its page reserved first, which extends an empty file to one
//    byte; not on a full file system, nor where others may write to the file): nothing is written
//    into a file that failed that check. Later grants read the mapped mark, no system call;
//    0 means live, since every unlinker sets it first. Any other value is confirmed by fstat's
//    link count, so content someone else wrote into the file never reads as retired.
//  - A first acquisition therefore costs open + flock + fstat (+ fallocate and mmap), a later
//    one flock, and a release one flock.
#include <locksmith/strategies/file.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <tuple>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/backoff.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
namespace {

constexpr const char* strategy_name = "file";
// What the store offers and the registry entry says (one statement of both).
constexpr capability file_capabilities = capability::exclusive | capability::shared |
                                         capability::noblock | capability::native_wait |
                                         capability::crash_release | capability::counting;

// Whether the file behind a granted descriptor was unlinked after we opened it.
bool retired(const struct stat& st) {
    return st.st_nlink == 0;
}

struct file_owner_state final : key_local_state {
    std::shared_ptr<const lock_directory> dir;
    std::string file_name;
    int fd = -1;
    bool checked = false;                   // the file passed lock_directory::refusal
    unsigned char* retired_mark = nullptr;  // its first byte, mapped; null when not mapped
    std::optional<lock_mode> held;
    // Before a blocking flock sleeps: few, since a release wakes sleepers to compete (not
    // FIFO), so a sleeper costs one wake-up and not every grant after it.
    brief_retries retries{16, 16};

    ~file_owner_state() override { close_and_clean(); }

    void close_file() noexcept {
        if (retired_mark != nullptr) ::munmap(retired_mark, 1);
        retired_mark = nullptr;
        if (fd >= 0) ::close(fd);
        fd = -1;
        checked = false;
        held.reset();
    }

    // After a grant on a checked file: whether it was retired (see the protocol above).
    bool retired_since_opened() const {
        if (retired_mark != nullptr && __atomic_load_n(retired_mark, __ATOMIC_ACQUIRE) == 0)
            return false;
        struct stat st;
        if (::fstat(fd, &st) != 0) throw_errno("file", "fstat", errno);
        return retired(st);
    }

    // Requires: we hold LOCK_EX on a checked file that was linked at our grant, so it is the
    // file at the path. Without the mark set, the file stays (a valid lock file).
    void remove_and_close() noexcept {
        const unsigned char one = 1;
        bool marked = false;
        if (retired_mark != nullptr) {
            __atomic_store_n(retired_mark, 1, __ATOMIC_RELEASE);
            marked = true;
        } else {
            marked = ::pwrite(fd, &one, 1, 0) == 1;
        }
        if (marked) ::unlinkat(dir->fd(), file_name.c_str(), 0);
        close_file();
    }

    // Removes the file when nobody holds it: LOCK_EX without waiting, then the protocol above.
    void close_and_clean() noexcept {
        if (fd < 0) return;
        bool remove = checked && held == lock_mode::exclusive;
        if (!remove && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            struct stat st;
            try {
                remove = ::fstat(fd, &st) == 0 && !retired(st) && dir->refusal(st).empty();
            } catch (const std::exception&) {
            }
        }
        if (remove)
            remove_and_close();
        else
            close_file();
    }
};

// ---- Counting semaphores: <lock_dir>/<prefix>.<hash>.permits ----
//
// One file per name; permit i is an OFD write lock (fcntl F_OFD_SETLK) on byte 64 + i. Why byte
// ranges under OFD locks rather than N flock'ed slot files: one file keeps the limit beside its
// permits and is one inotify watch for a waiter, and an OFD lock, like flock, belongs to the open
// file description (two owners in one process exclude each other; closing another descriptor of
// the file drops nothing, unlike classic POSIX locks) and the kernel drops it when its holder's
// descriptor closes, a killed holder's too (crash_release).
//
// Layout: bytes 0..15 the header ("lksmprmt", version 1, the limit, written before the file is
// linked at its name, never changed); byte 16 the wake byte (written by a release that a waiter
// waits for); byte 17 the waiting byte (read-locked by each waiter while it waits); 64 + i permit i
// (locked, never written).
//
// Waiting, without spinning: a waiter read-locks the waiting byte, then tries every permit, then
// sleeps in poll(2) on an inotify watch of the file (IN_MODIFY | IN_CLOSE_WRITE) until its
// deadline. A release unlocks its byte and, when a waiter's read lock is on the waiting byte
// (F_OFD_GETLK), writes the wake byte: IN_MODIFY. A killed holder's descriptor closes:
// IN_CLOSE_WRITE. The kernel reports a close before it drops the closed file's locks, so after a
// close that freed nothing yet the waiter tries a few more times over ~100 ms. Every waiter of the
// name wakes and tries (no queue: not fair). The owner object keeps its inotify instance between
// waits: closing one costs milliseconds. Without inotify (no instance left: the per-user limit)
// a waiter polls with backoff.
constexpr char permits_magic[8] = {'l', 'k', 's', 'm', 'p', 'r', 'm', 't'};
constexpr std::uint32_t permits_version = 1;
constexpr std::uint32_t max_file_permits = 4096;  // a round of tries is one fcntl per permit
constexpr off_t wake_byte = 16;
constexpr off_t waiting_byte = 17;
constexpr off_t first_permit = 64;

struct permits_header {
    char magic[8];
    std::uint32_t version;
    std::uint32_t limit;
};
static_assert(sizeof(permits_header) == 16);

// An OFD lock of `type` (F_WRLCK, F_RDLCK, F_UNLCK) on byte `at`, without waiting: false when
// another holds it.
bool ofd_lock(int fd, short type, off_t at) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    while (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EACCES) return false;
        throw_errno(strategy_name, "fcntl(F_OFD_SETLK) on a permits file", errno);
    }
    return true;
}

// Whether another open file description holds a lock on byte `at` that a `type` lock would
// conflict with.
bool ofd_conflict(int fd, short type, off_t at) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_GETLK, &fl) != 0)
        throw_errno(strategy_name, "fcntl(F_OFD_GETLK) on a permits file", errno);
    return fl.l_type != F_UNLCK;
}

struct file_permit_state final : key_local_state {
    int fd = -1;
    std::uint32_t limit = 0;  // the file's
    std::optional<std::uint32_t> held;
    pid_t owner_pid = 0;
    // The inotify instance watching `fd`'s file, made at the first wait of process
    // `inotify_pid` and kept: closing one costs milliseconds (the kernel waits for a grace
    // period), which every hand-over paid before.
    int inotify = -1;
    pid_t inotify_pid = 0;
    ~file_permit_state() override {
        if (fd >= 0) ::close(fd);  // drops a permit still held (the owner object went away)
        forget_watch();
    }
    void forget_watch() {
        if (inotify >= 0) ::close(inotify);
        inotify = -1;
    }
};

// While a waiter waits: the key's inotify watch on the permits file and its read lock on the
// waiting byte (without inotify, neither: the waiter polls).
class permit_waiter {
  public:
    explicit permit_waiter(file_permit_state& st) : fd_(st.fd) {
        // A forked child shares its parent's instance (and would read its events): its own.
        if (st.inotify >= 0 && st.inotify_pid != current_pid()) st.forget_watch();
        if (st.inotify < 0) {
            st.inotify = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
            st.inotify_pid = current_pid();
            // The descriptor's own file, whatever is at its name now.
            const std::string self = "/proc/self/fd/" + std::to_string(st.fd);
            if (st.inotify >= 0 &&
                ::inotify_add_watch(st.inotify, self.c_str(), IN_MODIFY | IN_CLOSE_WRITE) < 0)
                st.forget_watch();
        }
        if (st.inotify < 0 || !ofd_lock(st.fd, F_RDLCK, waiting_byte)) return;
        inotify_ = st.inotify;
        // What happened before this wait, the next round of tries sees; but a close may not
        // have dropped its locks yet.
        if (drain()) after_close_ = 7;
    }
    ~permit_waiter() {
        if (inotify_ < 0) return;
        try {
            ofd_lock(fd_, F_UNLCK, waiting_byte);
        } catch (...) {
            // The descriptor stays valid; an unlock of our own lock does not fail.
        }
    }
    permit_waiter(const permit_waiter&) = delete;
    permit_waiter& operator=(const permit_waiter&) = delete;

    // Sleeps until the file changed or a descriptor of it closed, or `until`. Returns false
    // when the deadline passed.
    bool sleep(deadline until) {
        if (inotify_ < 0) return polls_.sleep(until);
        if (after_close_ > 0) {
            // A close was reported; the kernel may not have dropped its locks yet.
            const auto pause = std::chrono::milliseconds(1 << (7 - after_close_));
            --after_close_;
            const auto now = deadline::clock::now();
            if (now >= until) return false;
            std::this_thread::sleep_until(std::min(until, now + pause));
            return true;
        }
        for (;;) {
            int timeout = -1;
            if (until != deadline::max()) {
                const auto left = until - deadline::clock::now();
                if (left <= deadline::duration::zero()) return false;
                timeout =
                    static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
            }
            pollfd p{inotify_, POLLIN, 0};
            const int rc = ::poll(&p, 1, timeout);
            if (rc < 0 && errno == EINTR) continue;
            if (rc < 0) throw_errno(strategy_name, "poll on an inotify watch", errno);
            if (rc == 0) return false;
            if (drain()) after_close_ = 7;  // 1+2+..+64 ms
            return true;
        }
    }

  private:
    // Reads every queued event. Returns whether a descriptor of the file was closed.
    bool drain() {
        alignas(inotify_event) char events[4096];
        bool closed = false;
        ssize_t n;
        while ((n = ::read(inotify_, events, sizeof events)) > 0)
            for (ssize_t at = 0; at < n;) {
                const auto* e = reinterpret_cast<const inotify_event*>(events + at);
                if ((e->mask & IN_CLOSE_WRITE) != 0) closed = true;
                at += ssize_t(sizeof(inotify_event) + e->len);
            }
        return closed;
    }

    int fd_;
    int inotify_ = -1;
    int after_close_ = 0;
    backoff polls_;
};

class file_store final : public store {
  public:
    explicit file_store(std::shared_ptr<const lock_directory> dir)
        : store(strategy_name, file_capabilities), dir_(std::move(dir)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds) override {
        if (k.limit() != 0) return acquire_permit(k, true, deadline{});
        return acquire(k, mode, false);
    }

    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds,
                         deadline until) override {
        if (k.limit() != 0) return acquire_permit(k, false, until);
        if (until == deadline::max()) return acquire(k, mode, true);
        // flock(2) has no timeout and a signal would disturb the caller: poll until `until`.
        backoff delays;
        while (!acquire(k, mode, false))
            if (!delays.sleep(until)) return false;
        return true;
    }

    // Keeps the descriptor for the next grant; the file goes with the owner object.
    void do_release(key& k) override {
        if (k.limit() != 0) return release_permit(k);
        auto* state = state_of(k);
        if (state == nullptr || !state->held) return;
        state->held.reset();
        if (::flock(state->fd, LOCK_UN) != 0) throw_errno(strategy_name, "unlock", errno);
    }

    bool do_holds(const key& k) override {
        if (k.limit() != 0) return holds_permit(k);
        auto* state = state_of(k);
        return state != nullptr && state->held.has_value();
    }

    lock_status do_status(std::string_view resource) override;

  private:
    file_owner_state* state_of(const key& k) const {
        return k.local_state_of<file_owner_state>(instance_id());
    }

    file_owner_state& state_for(key& k) {
        if (auto* state = state_of(k)) return *state;
        auto fresh = std::make_unique<file_owner_state>();
        fresh->dir = dir_;
        fresh->file_name = lock_file_name(k.resource(), ".lock");
        auto& ref = *fresh;
        k.set_local_state(instance_id(), std::move(fresh));
        return ref;
    }

    std::string path_of(const file_owner_state& state) const {
        return (dir_->path() / state.file_name).string();
    }

    void open_file(file_owner_state& state) const {
        // O_NONBLOCK keeps a FIFO planted at the path from blocking the open (the check after
        // the grant refuses it). Writable, for the retired mark; a file we may only read (not
        // ours: the check refuses it) is opened read-only, so the error says why.
        const int flags = O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
        int fd = ::openat(dir_->fd(), state.file_name.c_str(), O_RDWR | flags, dir_->file_mode());
        if (fd < 0 && errno == EACCES)
            fd = ::openat(dir_->fd(), state.file_name.c_str(), O_RDONLY | flags, dir_->file_mode());
        if (fd < 0) {
            int err = errno;
            if (err == ELOOP)
                throw backend_error(strategy_name, "errno " + std::to_string(err),
                                    "file: lock file " + path_of(state) +
                                        " is a symbolic link; refusing to follow it (remove it)");
            throw_errno(strategy_name, "cannot open lock file " + path_of(state), err);
        }
        state.fd = fd;
    }

    // After a grant on state.fd. Returns true when the grant holds; false when the file was
    // retired (state closed: open the path again). Throws, with the state closed, when the file
    // must not be used.
    bool check_grant(file_owner_state& state) const {
        if (state.checked) {
            bool gone;
            try {
                gone = state.retired_since_opened();
            } catch (...) {
                state.close_file();
                throw;
            }
            if (gone) state.close_file();
            return !gone;
        }
        struct stat st;
        if (::fstat(state.fd, &st) != 0) {
            int err = errno;
            state.close_file();
            throw_errno(strategy_name, "fstat " + path_of(state), err);
        }
        if (retired(st)) {
            state.close_file();
            return false;
        }
        try {
            if (auto why = dir_->refusal(st); !why.empty())
                throw backend_error(strategy_name, "unsafe lock file",
                                    "file: refusing lock file " + path_of(state) + ": it " + why);
            dir_->share(state.fd, st, state.file_name, strategy_name);
        } catch (...) {
            state.close_file();
            throw;
        }
        state.checked = true;
        map_retired_mark(state, st);
        return true;
    }

    // Maps the checked file's first byte, where that cannot kill us: touching a mapped page
    // beyond the end of its file, or with no storage behind it (a hole, on a full file system),
    // raises SIGBUS. So only a file nobody but its owner (and root) may write to: in a shared
    // directory the group's users could cut it short. And only once its page is reserved
    // (posix_fallocate, which also extends an empty file to one byte). Otherwise (shared, no
    // space, a read-only descriptor, no memory) grants fall back to fstat, and an owner that
    // cannot write the mark leaves the file (see remove_and_close).
    void map_retired_mark(file_owner_state& state, const struct stat& st) const {
        if (dir_->shared_group() || (st.st_mode & 022) != 0) return;
        if (::posix_fallocate(state.fd, 0, 1) != 0) return;
        void* mapped = ::mmap(nullptr, 1, PROT_READ | PROT_WRITE, MAP_SHARED, state.fd, 0);
        if (mapped != MAP_FAILED) state.retired_mark = static_cast<unsigned char*>(mapped);
    }

    // One grant attempt (or a blocking one). Converts an existing grant in place.
    bool acquire(key& k, lock_mode mode, bool blocking) {
        auto& state = state_for(k);
        if (state.held == mode) return true;
        const int op =
            (mode == lock_mode::exclusive ? LOCK_EX : LOCK_SH) | (blocking ? 0 : LOCK_NB);
        if (state.held) return convert(k, state, mode, op);
        return grant_fresh(state, mode, op);
    }

    bool grant_fresh(file_owner_state& state, lock_mode mode, int op) {
        // Each retired file we meet was locked and released by someone else since we opened
        // it, so this loop only turns while others make progress; without waiting, give up
        // after a few rounds (contention).
        for (int round = 0; (op & LOCK_NB) == 0 || round < 16; ++round) {
            if (state.fd < 0) open_file(state);
            if (!flock_trying_first(state, op)) return false;
            if (check_grant(state)) {
                state.held = mode;
                return true;
            }
        }
        return false;
    }

    bool convert(key& k, file_owner_state& state, lock_mode mode, int op) {
        const lock_mode previous = *state.held;
        if (flock_retrying(state.fd, op)) {
            if (check_grant(state)) {
                state.held = mode;
                return true;
            }
            // flock(2) unlocks before it converts: meanwhile a writer took the file and removed
            // it. Our old grant is gone; a fresh one is all we can offer.
            if (grant_fresh(state, mode, op)) return true;
        } else if (previous == lock_mode::shared && flock_retrying(state.fd, LOCK_SH | LOCK_NB) &&
                   check_grant(state)) {
            // The kernel dropped our old lock before failing; we took the read lock back.
            return false;
        }
        state.close_file();
        throw acquire_error("file: converting lock '" + k.resource() + "' from " +
                            std::string(to_string(previous)) + " to " +
                            std::string(to_string(mode)) +
                            " failed and the lock was lost (flock(2) does not convert atomically)");
    }

    // flock_retrying, but a blocking `op` first tries a few times without sleeping: a release
    // wakes every sleeper, and each wake-up is a context switch (brief_retries).
    static bool flock_trying_first(file_owner_state& state, int op) {
        if ((op & LOCK_NB) == 0) {
            const int rc = state.retries.run(
                [&] { return ::flock(state.fd, op | LOCK_NB) == 0 ? 0 : errno; }, deadline::max());
            if (rc == 0) return true;
            if (rc != EAGAIN) throw_errno(strategy_name, "flock", rc);
        }
        return flock_retrying(state.fd, op);
    }

    // true when granted, false on contention; retries EINTR; throws other errors.
    static bool flock_retrying(int fd, int op) {
        while (::flock(fd, op) != 0) {
            if (errno == EINTR) continue;
            if (errno == EWOULDBLOCK) return false;
            throw_errno(strategy_name, "flock", errno);
        }
        return true;
    }

    // ---- permits ----

    file_permit_state* permit_state_of(const key& k) const {
        return k.local_state_of<file_permit_state>(instance_id());
    }

    std::string permits_path(std::string_view name) const {
        return (dir_->path() / lock_file_name(name, ".permits")).string();
    }

    // Opens the permits file of `name`, creating it with `limit` when absent; checks what it
    // finds. Returns the descriptor and the file's limit. Throws backend_error.
    std::pair<int, std::uint32_t> open_permits(std::string_view name, std::uint32_t limit,
                                               bool create) const {
        const std::string file_name = lock_file_name(name, ".permits");
        const std::string path = (dir_->path() / file_name).string();
        for (int attempt = 0;; ++attempt) {
            const int fd = ::openat(dir_->fd(), file_name.c_str(),
                                    O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
            if (fd >= 0) {
                try {
                    return {fd, check_permits(fd, path)};
                } catch (...) {
                    ::close(fd);
                    throw;
                }
            }
            const int err = errno;
            if (err == ELOOP)
                throw backend_error(strategy_name, "errno " + std::to_string(err),
                                    "file: permits file " + path +
                                        " is a symbolic link; refusing to follow it (remove it)");
            if (err != ENOENT || !create || attempt >= 10)
                throw_errno(strategy_name, "cannot open permits file " + path, err);
            if (const int made = publish_permits(file_name, path, limit); made >= 0)
                return {made, limit};
            // Another process linked its file first: use that one.
        }
    }

    // The limit of the permits file open at `fd`, once it passed the lock files' checks, is
    // writable by nobody else, and has a valid header.
    std::uint32_t check_permits(int fd, const std::string& path) const {
        struct stat st;
        if (::fstat(fd, &st) != 0) throw_errno(strategy_name, "fstat " + path, errno);
        auto why = dir_->refusal(st);
        if (why.empty() && (st.st_mode & (dir_->shared_group() ? 0002 : 0022)) != 0)
            why = "is writable by others (anyone who can write it could change its limit)";
        if (!why.empty())
            throw backend_error(strategy_name, "unsafe lock file",
                                "file: refusing permits file " + path + ": it " + why);
        permits_header h{};
        if (::pread(fd, &h, sizeof h, 0) != ssize_t(sizeof h) ||
            std::memcmp(h.magic, permits_magic, sizeof h.magic) != 0 ||
            h.version != permits_version || h.limit < 1 || h.limit > max_file_permits)
            throw backend_error(strategy_name, "bad permits file",
                                "file: " + path + " is not a locksmith permits file of version " +
                                    std::to_string(permits_version) +
                                    " (or is corrupted); remove it when no process uses it");
        return h.limit;
    }

    // Writes a complete permits file in an unnamed file and links it at its name, so that no
    // process reads a header half written. Returns the descriptor, or -1 when a file is there.
    int publish_permits(const std::string& file_name, const std::string& path,
                        std::uint32_t limit) const {
        int fd = ::openat(dir_->fd(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, dir_->file_mode());
        std::string temp;  // where the file system has no O_TMPFILE: a temporary name
        if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
            temp = "." + file_name + "." + random_token() + ".tmp";
            fd = ::openat(dir_->fd(), temp.c_str(),
                          O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, dir_->file_mode());
        }
        if (fd < 0) throw_errno(strategy_name, "creating permits file " + path, errno);
        auto fail = [&](const std::string& what, int err) {
            ::close(fd);
            if (!temp.empty()) ::unlinkat(dir_->fd(), temp.c_str(), 0);
            throw_errno(strategy_name, what + " " + path, err);
        };
        permits_header h{};
        std::memcpy(h.magic, permits_magic, sizeof h.magic);
        h.version = permits_version;
        h.limit = limit;
        char bytes[first_permit] = {};
        std::memcpy(bytes, &h, sizeof h);
        if (::pwrite(fd, bytes, sizeof bytes, 0) != ssize_t(sizeof bytes))
            fail("writing permits file", errno);
        struct stat st;
        if (::fstat(fd, &st) != 0) fail("fstat of new permits file", errno);
        try {
            dir_->share(fd, st, file_name, strategy_name);
        } catch (...) {
            ::close(fd);
            if (!temp.empty()) ::unlinkat(dir_->fd(), temp.c_str(), 0);
            throw;
        }
        int rc;
        if (temp.empty()) {
            const std::string self = "/proc/self/fd/" + std::to_string(fd);
            rc = ::linkat(AT_FDCWD, self.c_str(), dir_->fd(), file_name.c_str(), AT_SYMLINK_FOLLOW);
        } else {
            rc = ::renameat2(dir_->fd(), temp.c_str(), dir_->fd(), file_name.c_str(),
                             RENAME_NOREPLACE);
        }
        if (rc == 0) return fd;
        const int err = errno;
        if (err != EEXIST) fail("linking permits file", err);
        ::close(fd);
        if (!temp.empty()) ::unlinkat(dir_->fd(), temp.c_str(), 0);
        return -1;
    }

    bool acquire_permit(key& k, bool try_only, deadline until) {
        auto* st = permit_state_of(k);
        if (st == nullptr) {
            auto fresh = std::make_unique<file_permit_state>();
            st = fresh.get();
            k.set_local_state(instance_id(), std::move(fresh));
        }
        if (st->held && st->owner_pid == current_pid()) return true;
        if (st->held) {  // inherited through fork: the parent's permit, on the parent's file
            st->held.reset();
            ::close(st->fd);
            st->fd = -1;
            st->forget_watch();
        }
        if (k.limit() > max_file_permits)
            throw invalid_argument_error("file: a limit of " + std::to_string(k.limit()) +
                                         " for '" + k.resource() + "' exceeds the strategy's " +
                                         std::to_string(max_file_permits) +
                                         " (a round of tries costs one fcntl per permit)");
        if (st->fd < 0) {
            auto [fd, limit] = open_permits(k.resource(), k.limit(), true);
            st->fd = fd;
            st->limit = limit;
        }
        if (st->limit != k.limit())
            throw invalid_argument_error(
                "file semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(st->limit) + ", kept in " + permits_path(k.resource()) +
                " since its first user created it; this owner asks for " +
                std::to_string(k.limit()) + ". One name has one limit: ask for " +
                std::to_string(st->limit) + ", or remove the file when no process uses it (rm " +
                permits_path(k.resource()) + ") so that the next user sets the limit anew");
        auto take = [&] {
            for (std::uint32_t i = 0; i < st->limit; ++i) {
                if (!ofd_lock(st->fd, F_WRLCK, first_permit + off_t(i))) continue;
                st->held = i;
                st->owner_pid = current_pid();
                set_permit_number(k, i + 1);
                return true;
            }
            return false;
        };
        if (take()) return true;
        if (try_only) return false;
        permit_waiter waiter(*st);  // announced before the next round: no release is missed
        for (;;) {
            if (take()) return true;
            if (!waiter.sleep(until)) return take();
        }
    }

    void release_permit(key& k) {
        auto* st = permit_state_of(k);
        if (st == nullptr || !st->held) return;
        if (st->owner_pid != current_pid())
            throw release_error("file: the permit of '" + k.resource() +
                                "' was acquired in process " + std::to_string(st->owner_pid) +
                                "; a forked child cannot release it (disable auto-release in the "
                                "child)");
        ofd_lock(st->fd, F_UNLCK, first_permit + off_t(*st->held));
        st->held.reset();
        // Wake the waiters, if any: a read lock on the waiting byte says one sleeps.
        if (ofd_conflict(st->fd, F_WRLCK, waiting_byte)) {
            const char one = 1;
            if (::pwrite(st->fd, &one, 1, wake_byte) != 1)
                throw_errno(strategy_name, "waking the waiters of '" + k.resource() + "'", errno);
        }
    }

    bool holds_permit(const key& k) {
        auto* st = permit_state_of(k);
        if (st == nullptr || !st->held || st->owner_pid != current_pid()) return false;
        struct stat s;
        if (::fstat(st->fd, &s) != 0 || s.st_nlink > 0) return true;
        // An administrator removed the file: its permits no longer exclude anyone who opens the
        // name anew. The grant is lost; the next acquire opens the new file.
        st->held.reset();
        ::close(st->fd);
        st->fd = -1;
        st->forget_watch();
        return false;
    }

    std::optional<lock_status> permit_status(std::string_view resource) const {
        int fd;
        std::uint32_t limit;
        try {
            std::tie(fd, limit) = open_permits(resource, 0, false);
        } catch (const backend_error&) {
            return std::nullopt;  // none, or not one to trust
        }
        lock_status status;
        std::uint32_t held = 0;
        try {
            for (std::uint32_t i = 0; i < limit; ++i)
                if (ofd_conflict(fd, F_WRLCK, first_permit + off_t(i))) ++held;
        } catch (...) {
            ::close(fd);
            throw;
        }
        ::close(fd);
        status.limit = limit;
        status.permits_held = held;
        status.held = held < limit ? lock_status::state::free : lock_status::state::held_exclusive;
        return status;
    }

    std::shared_ptr<const lock_directory> dir_;
};

// Reads /proc/locks for flock locks on the file's inode: the kernel knows every holder.
lock_status file_store::do_status(std::string_view resource) {
    // A name used as a semaphore has a permits file: that is what the name is.
    if (auto permits = permit_status(resource)) return *permits;
    lock_status status;
    const std::string file_name = lock_file_name(resource, ".lock");
    struct stat st;
    if (::fstatat(dir_->fd(), file_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) throw_errno(strategy_name, "stat " + file_name, errno);
        status.held = lock_status::state::free;
        return status;
    }
    // "e": close-on-exec, which std::ifstream cannot ask for (another thread's fork and exec
    // would pass the descriptor on).
    FILE* proc_locks = std::fopen("/proc/locks", "re");
    if (!proc_locks) return status;  // unknown
    std::string text;
    char chunk[4096];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, proc_locks)) > 0;)
        text.append(chunk, n);
    std::fclose(proc_locks);
    std::istringstream locks(text);
    char wanted[64];
    std::snprintf(wanted, sizeof wanted, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                  (unsigned long long)st.st_ino);
    status.held = lock_status::state::free;
    std::string line;
    while (std::getline(locks, line)) {
        std::istringstream in(line);
        std::string id, kind, advisory, type, pid, where;
        in >> id >> kind;
        if (kind == "->") continue;  // a waiter, not a holder
        in >> advisory >> type >> pid >> where;
        if (kind != "FLOCK" || where != wanted) continue;
        const bool write = type == "WRITE";
        status.held = write ? lock_status::state::held_exclusive : lock_status::state::held_shared;
        status.holders.push_back(std::string(write ? "exclusive" : "shared") + " by pid " + pid);
    }
    return status;
}

}  // namespace

file_options file_options::from_json(const nlohmann::json& json) {
    options_reader reader(json);
    file_options options;
    read_lock_dir_options(reader, options.lock_dir, options.shared_group);
    reader.finish();
    return options;
}

std::shared_ptr<store> make_file_store(const file_options& options) {
    return std::make_shared<file_store>(
        open_lock_directory(options.lock_dir, options.shared_group, strategy_name));
}

strategy_descriptor file_strategy() {
    strategy_descriptor d;
    d.name = strategy_name;
    d.description =
        "flock(2) on one file per lock name (TYPO3 FileLockStrategy, Symfony FlockStore)";
    d.default_priority = 75;
    d.capabilities = file_capabilities;
    set_factory<file_options>(d, make_file_store);
    return d;
}

std::vector<std::string> file_options::backends() const {
    const auto dir = lock_dir.empty() ? default_lock_dir() : lock_dir;
    return {"dir:" + std::filesystem::weakly_canonical(dir).string()};
}

}  // namespace locksmith::strategies
