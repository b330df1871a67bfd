// The `file` strategy: flock(2) on <lock_dir>/<prefix>.<hash>.lock. See
// include/locksmith/strategies/file.hpp for the contract.
//
// Removal protocol (why lock files do not pile up, and why removing them is safe):
//  - A file is only ever unlinked by an owner holding LOCK_EX on it, and that owner first sets
//    the file's first byte (its "retired" mark) to 1.
//  - After every grant the owner reads the mark: a grant on a retired file is worthless (a
//    newcomer would create a fresh file at the path), so the owner drops it and opens the path
//    again. The mark is read through a shared mapping of the file, so the check costs no system
//    call and lock+unlock costs exactly the two flock(2) calls of a hand-written loop. Where a
//    file cannot be mapped, fstat()'s link count does the same job with one more call.
//  - An owner keeps its descriptor between grants and retires the file when the owner goes
//    away, if nobody holds it then.
#include <locksmith/strategies/file.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <locksmith/backoff.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/strategy_support.hpp>

namespace locksmith::strategies {
namespace {

constexpr const char* strategy_name = "file";

struct file_owner_state final : key_local_state {
    std::shared_ptr<const lock_directory> dir;
    std::string file_name;
    int fd = -1;
    unsigned char* retired_mark = nullptr;  // the file's first byte, mapped; null if unmappable
    std::optional<lock_mode> held;

    ~file_owner_state() override { close_and_clean(); }

    // Whether the file we hold was retired (unlinked) by its last owner. Requires a grant.
    bool retired() const {
        if (retired_mark != nullptr) return __atomic_load_n(retired_mark, __ATOMIC_ACQUIRE) != 0;
        struct stat st;
        if (::fstat(fd, &st) != 0) throw_errno("file", "fstat", errno);
        return st.st_nlink == 0;
    }

    void close_file() noexcept {
        if (retired_mark != nullptr) ::munmap(retired_mark, 1);
        retired_mark = nullptr;
        if (fd >= 0) ::close(fd);
        fd = -1;
        held.reset();
    }

    // Removes the file when nobody holds it: we take LOCK_EX without waiting, and retire and
    // unlink it only while holding that (see the protocol above).
    void close_and_clean() noexcept {
        if (fd < 0) return;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            bool already = true;
            try {
                already = retired();
            } catch (const std::exception&) {
            }
            if (!already) {
                if (retired_mark != nullptr) __atomic_store_n(retired_mark, 1, __ATOMIC_RELEASE);
                ::unlinkat(dir->fd(), file_name.c_str(), 0);
            }
        }
        close_file();
    }
};

class file_store final : public store {
public:
    explicit file_store(std::shared_ptr<const lock_directory> dir)
        : store(strategy_name, capability::exclusive | capability::shared | capability::noblock |
                                   capability::native_wait | capability::crash_release),
          dir_(std::move(dir)) {}

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

    void open_file(file_owner_state& state) const {
        const auto path = [&] { return (dir_->path() / state.file_name).string(); };
        int fd = ::openat(dir_->fd(), state.file_name.c_str(),
                          O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            int err = errno;
            if (err == ELOOP)
                throw backend_error(strategy_name, "errno " + std::to_string(err),
                                    "file: lock file " + path() +
                                        " is a symbolic link; refusing to follow it");
            throw_errno(strategy_name, "cannot open lock file " + path(), err);
        }
        state.fd = fd;
        // Give the file its one byte (the retired mark, 0 = live) and map it. Extending to the
        // same size twice is harmless, so racing openers need no coordination.
        struct stat st;
        if (::fstat(fd, &st) != 0) {
            int err = errno;
            state.close_file();
            throw_errno(strategy_name, "fstat " + path(), err);
        }
        if (!S_ISREG(st.st_mode)) {
            state.close_file();
            throw backend_error(strategy_name, "", "file: " + path() + " is not a regular file");
        }
        if (st.st_size == 0 && ::ftruncate(fd, 1) != 0) return;  // unmappable: fstat fallback
        void* mapped = ::mmap(nullptr, 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mapped != MAP_FAILED) state.retired_mark = static_cast<unsigned char*>(mapped);
    }

    // One grant attempt (or a blocking one). Converts an existing grant in place.
    bool acquire(key& k, lock_mode mode, bool blocking) {
        auto& state = state_for(k);
        if (state.held == mode) return true;
        const int op = (mode == lock_mode::exclusive ? LOCK_EX : LOCK_SH) | (blocking ? 0 : LOCK_NB);
        if (state.held) return convert(k, state, mode, op);
        while (true) {
            if (state.fd < 0) open_file(state);
            if (!flock_retrying(state.fd, op)) return false;
            bool retired;
            try {
                retired = state.retired();
            } catch (const std::exception&) {
                ::flock(state.fd, LOCK_UN);
                throw;
            }
            if (!retired) break;
            // The file was retired after we opened it: this grant guards nothing. Start over.
            state.close_file();
        }
        state.held = mode;
        return true;
    }

    bool convert(key& k, file_owner_state& state, lock_mode mode, int op) {
        if (flock_retrying(state.fd, op)) {
            state.held = mode;
            return true;
        }
        // The kernel dropped our old lock before failing; take the read lock back if we can.
        const lock_mode previous = *state.held;
        if (previous == lock_mode::shared && flock_retrying(state.fd, LOCK_SH | LOCK_NB))
            return false;
        state.held.reset();
        throw acquire_error("file: converting lock '" + k.resource() + "' from " +
                            std::string(to_string(previous)) + " to " + std::string(to_string(mode)) +
                            " failed and the lock was lost (flock(2) does not convert atomically)");
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
    std::ifstream locks("/proc/locks");
    if (!locks) return status;  // unknown
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
    if (auto dir = reader.string("lock_dir")) {
        if (dir->empty() || dir->front() != '/')
            throw config_error("config.path", "/lock_dir",
                               "lock_dir '" + *dir + "' must be an absolute path");
        options.lock_dir = *dir;
    }
    reader.finish();
    return options;
}


std::shared_ptr<store> make_file_store(const file_options& options) {
    return std::make_shared<file_store>(open_lock_directory(options.lock_dir, strategy_name));
}

strategy_descriptor file_strategy() {
    strategy_descriptor d;
    d.name = strategy_name;
    d.description = "flock(2) on one file per lock name (TYPO3 FileLockStrategy, Symfony FlockStore)";
    d.default_priority = 75;
    d.capabilities = capability::exclusive | capability::shared | capability::noblock |
                     capability::native_wait | capability::crash_release;
    d.validate_options = [](const nlohmann::json& o) { (void)file_options::from_json(o); };
    d.create = [](const nlohmann::json& o) { return make_file_store(file_options::from_json(o)); };
    return d;
}

}  // namespace locksmith::strategies
