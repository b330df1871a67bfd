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
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

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
                                         capability::crash_release;

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

class file_store final : public store {
  public:
    explicit file_store(std::shared_ptr<const lock_directory> dir)
        : store(strategy_name, file_capabilities), dir_(std::move(dir)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds) override {
        return acquire(k, mode, false);
    }

    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds,
                         deadline until) override {
        if (until == deadline::max()) return acquire(k, mode, true);
        // flock(2) has no timeout and a signal would disturb the caller: poll until `until`.
        backoff delays;
        while (!acquire(k, mode, false))
            if (!delays.sleep(until)) return false;
        return true;
    }

    // Keeps the descriptor for the next grant; the file goes with the owner object.
    void do_release(key& k) override {
        auto* state = state_of(k);
        if (state == nullptr || !state->held) return;
        state->held.reset();
        if (::flock(state->fd, LOCK_UN) != 0) throw_errno(strategy_name, "unlock", errno);
    }

    bool do_holds(const key& k) override {
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

    std::shared_ptr<const lock_directory> dir_;
};

// Reads /proc/locks for flock locks on the file's inode: the kernel knows every holder.
lock_status file_store::do_status(std::string_view resource) {
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
