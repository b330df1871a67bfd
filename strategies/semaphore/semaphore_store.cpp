// SPDX-License-Identifier: MIT
// The `semaphore` strategy: one System V semaphore set, names hashed onto its semaphores.
//
// Two layers, because a SysV semaphore has no owner:
//  - Between processes, semaphore i of the set (value 1 = free, SEM_UNDO) excludes every process
//    but one from the names hashed to i.
//  - Inside a process, a table (one per IPC key, shared by every store of that key) excludes
//    lock objects of the same name from each other, and lets names that share semaphore i share
//    the process's kernel grant. Without it, a thread holding name A and then asking for name B
//    on the same semaphore would wait for itself forever.
// Only one thread per process waits in the kernel for a given semaphore; the others wait on a
// condition variable for it, so a kernel grant is never taken twice by one process.
#include <locksmith/strategies/semaphore.hpp>

#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
namespace {

constexpr const char* strategy_name = "semaphore";
// What the store offers and the registry entry says (one statement of both).
constexpr capability semaphore_capabilities = capability::exclusive | capability::noblock |
                                              capability::native_wait | capability::crash_release |
                                              capability::counting;
constexpr std::uint32_t max_semaphores = 32000;  // SEMMSL's usual ceiling

// glibc leaves this union to the caller (semctl(2)).
union semun {
    int val;
    semid_ds* buf;
    unsigned short* array;
};

[[noreturn]] void throw_removed(int semid, int err, const std::string& what) {
    throw backend_error(strategy_name, std::string(err == EIDRM ? "EIDRM" : "EINVAL"),
                        "semaphore: " + what + ": the semaphore set (id " + std::to_string(semid) +
                            ") was removed (by an administrator?); locks it held are lost. The "
                            "next acquire creates a new set. (errno " +
                            std::to_string(err) + ")");
}

std::string hex_key(key_t key) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(key));
    return text;
}

std::string octal_mode(unsigned mode) {
    char text[8];
    std::snprintf(text, sizeof text, "0%03o", mode & 0777u);
    return text;
}

// A set is ours when this user created it and owns it, and it lets nobody in beyond what `mode`
// grants. Anyone who can operate on the set can release or block every lock in it (a SysV
// semaphore has no owner), so a set that another user created at our key -- even with the
// permissions we would have chosen, since its creator keeps full control -- is refused.
void check_set_is_ours(const semid_ds& ds, key_t key, std::uint32_t mode) {
    const uid_t me = ::geteuid();
    const auto perms = static_cast<unsigned>(ds.sem_perm.mode) & 0777u;
    if (ds.sem_perm.uid == me && ds.sem_perm.cuid == me && (perms & ~mode) == 0) return;
    throw backend_error(
        strategy_name, "foreign",
        "semaphore: the semaphore set with key " + hex_key(key) + " belongs to uid " +
            std::to_string(ds.sem_perm.uid) + " (created by uid " +
            std::to_string(ds.sem_perm.cuid) + ") with mode " + octal_mode(perms) +
            "; locksmith only uses a set that this user (uid " + std::to_string(me) +
            ") created, with at most mode " + octal_mode(mode) +
            ", since anyone else with access could release or block its locks. Remove it when no "
            "process of yours uses it: ipcrm -S " +
            hex_key(key));
}

// Creates the set with `initial` values (one per semaphore), or opens an existing one of ours and
// waits for its creator to initialise it. Returns {semid, number of semaphores}.
std::pair<int, std::uint32_t> open_set(key_t key, std::vector<unsigned short> initial,
                                       std::uint32_t mode) {
    const auto wanted = static_cast<std::uint32_t>(initial.size());
    const int perms = static_cast<int>(mode & 0777);
    // IPC_EXCL: only the set we create ourselves is initialised here; any other is checked first.
    int id = ::semget(key, static_cast<int>(wanted), IPC_CREAT | IPC_EXCL | perms);
    if (id >= 0) {
        // A new set's values are undefined until set. sem_otime stays 0 until the first semop,
        // which is how other openers know the values are ready (Stevens' recipe).
        semun arg{};
        arg.array = initial.data();
        if (::semctl(id, 0, SETALL, arg) != 0) {
            int err = errno;
            ::semctl(id, 0, IPC_RMID);
            throw_errno(strategy_name, "initialising semaphore set", err);
        }
        sembuf touch[2] = {{0, -1, 0}, {0, 1, 0}};
        if (::semop(id, touch, 2) != 0)
            throw_errno(strategy_name, "initialising semaphore set", errno);
        return {id, wanted};
    }
    if (errno != EEXIST)
        throw_errno(strategy_name,
                    "creating a semaphore set of " + std::to_string(wanted) +
                        " semaphores with key " + hex_key(key) +
                        " (kernel limits: /proc/sys/kernel/sem)",
                    errno);
    id = ::semget(key, 0, 0);
    if (id < 0) throw_errno(strategy_name, "opening semaphore set with key " + hex_key(key), errno);
    for (int i = 0; i < 2000; ++i) {
        semid_ds ds{};
        semun arg{};
        arg.buf = &ds;
        if (::semctl(id, 0, IPC_STAT, arg) != 0)
            throw_errno(strategy_name,
                        "reading semaphore set with key " + hex_key(key) +
                            " (another user's set? `ipcs -s -i " + std::to_string(id) +
                            "` shows its owner)",
                        errno);
        check_set_is_ours(ds, key, mode);
        if (ds.sem_otime != 0) return {id, static_cast<std::uint32_t>(ds.sem_nsems)};
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Re-initialising here could reset a semaphore somebody already holds; an admin must decide.
    throw backend_error(strategy_name, "uninitialised",
                        "semaphore: the set with key " + hex_key(key) +
                            " was never initialised (its creator died); remove it with `ipcrm -S " +
                            hex_key(key) + "`");
}

// Takes semaphore `index` of `semid` for this process (SEM_UNDO gives it back if we die).
// Returns 0, EAGAIN (busy or timed out) or the errno of a failure. A wait first tries a few
// times without sleeping (`retries`): the kernel hands each release to its oldest sleeper.
int kernel_acquire(int semid, std::uint32_t index, bool try_only, deadline until,
                   brief_retries& retries) {
    const sembuf take{static_cast<unsigned short>(index), -1, SEM_UNDO};
    sembuf take_now = take;
    take_now.sem_flg |= IPC_NOWAIT;
    auto try_now = [&] { return ::semop(semid, &take_now, 1) == 0 ? 0 : errno; };
    if (try_only) {
        int rc;
        while ((rc = try_now()) == EINTR) {
        }
        return rc;
    }
    if (const int rc = retries.run(try_now, until); rc != EAGAIN) return rc;
    for (;;) {
        sembuf op = take;
        int rc;
        if (until == deadline::max()) {
            rc = ::semop(semid, &op, 1);
        } else {
            // semtimedop takes a relative timeout; recomputed after every EINTR.
            auto left = until - deadline::clock::now();
            if (left <= deadline::duration::zero()) {
                rc = ::semop(semid, &take_now, 1);
            } else {
                auto secs = std::chrono::duration_cast<std::chrono::seconds>(left);
                timespec ts{};
                ts.tv_sec = static_cast<time_t>(secs.count());
                ts.tv_nsec = static_cast<long>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(left - secs).count());
                rc = ::semtimedop(semid, &op, 1, &ts);
            }
        }
        if (rc == 0) return 0;
        if (errno == EINTR) continue;
        return errno;
    }
}

class semaphore_set;

// Every semaphore store of the process shares the per-key state (a key granted by one store of an
// IPC key is known to the others), so the state has one tag for the whole strategy.
std::uint64_t semaphore_state_tag() {
    static const std::uint64_t tag = new_local_state_tag();
    return tag;
}

// The name's entry in a set's table of names held in this process (semaphore_set::names_).
using name_table = std::unordered_map<std::string, const key*>;

struct semaphore_key_state : key_local_state {
    std::shared_ptr<semaphore_set> set;
    std::uint32_t index = 0;
    std::uint64_t epoch = 0;  // the opening of the set the grant belongs to
    bool held = false;
    // Cached so that a grant of a known name makes no hash, allocation or map lookup: the name's
    // hash, the table entry taken out at release (put back at the next grant), and the slot of
    // `index` in the table of `slot_set` while that set is at `slot_epoch`.
    bool hashed = false;
    std::uint64_t hash = 0;
    name_table::node_type name_entry;
    const semaphore_set* slot_set = nullptr;
    std::uint64_t slot_epoch = 0;
    void* slot = nullptr;
};

// The process-wide state of one IPC key.
class semaphore_set : public std::enable_shared_from_this<semaphore_set> {
  public:
    semaphore_set(key_t key, std::uint32_t wanted, std::uint32_t mode)
        : key_(key),
          wanted_(wanted),
          mode_(mode),
          pid_(current_pid()),
          fork_generation_(fork_generation()) {
        std::lock_guard lock(mutex_);
        open_locked();
    }

    key_t ipc_key() const noexcept { return key_; }
    // The process this table belongs to. A forked child inherits a copy of the table, with the
    // parent's grants (which SEM_UNDO does not give the child): it must build its own.
    pid_t pid() const noexcept { return pid_; }
    // Whether this table belongs to the calling process (cheaper than comparing pids).
    bool this_process() const noexcept { return fork_generation_ == fork_generation(); }

    bool acquire(key& k, bool try_only, deadline until) {
        std::unique_lock lock(mutex_);
        semaphore_key_state& st = state_of(k);
        if (st.held && st.set.get() == this && st.epoch == epoch_) return true;
        if (semid_ < 0) open_locked();

        // 1. This process's other owners of the same name.
        const std::string& name = k.resource();
        while (names_.count(name) != 0) {
            if (!wait(lock, try_only, until) && names_.count(name) != 0) return false;
        }
        if (!st.name_entry.empty() && st.name_entry.key() == name) {
            st.name_entry.mapped() = &k;
            names_.insert(std::move(st.name_entry));
        } else {
            names_.emplace(name, &k);
        }
        st.name_entry = {};
        auto give_up_name = [&] {
            names_.erase(name);
            cv_.notify_all();
        };

        // 2. The kernel semaphore, or a share of this process's grant of it.
        if (!st.hashed) {
            st.hash = stable_name_hash(name).low;
            st.hashed = true;
        }
        const std::uint64_t h = st.hash;
        for (;;) {
            if (semid_ < 0) {
                try {
                    open_locked();
                } catch (...) {
                    give_up_name();
                    throw;
                }
            }
            const std::uint32_t index = static_cast<std::uint32_t>(h % nsems_);
            slot& s = slot_of(st, index);
            if (s.kernel_held) {
                ++s.users;
                grant(k, index);
                return true;
            }
            if (!s.acquiring) {
                s.acquiring = true;
                const int semid = semid_;
                const std::uint64_t epoch = epoch_;
                brief_retries retries = s.retries;
                lock.unlock();
                const int rc = kernel_acquire(semid, index, try_only, until, retries);
                lock.lock();
                if (epoch != epoch_) {
                    // The set was found removed by another thread meanwhile.
                    give_up_name();
                    throw_removed(semid, rc == 0 ? EIDRM : rc, "acquiring '" + name + "'");
                }
                slot& t = slot_of(st, index);
                t.acquiring = false;
                t.retries = retries;
                cv_.notify_all();
                if (rc == 0) {
                    t.kernel_held = true;
                    t.users = 1;
                    grant(k, index);
                    return true;
                }
                give_up_name();
                if (rc == EAGAIN) return false;
                if (rc == EIDRM || rc == EINVAL) {
                    forget_set_locked();
                    throw_removed(semid, rc, "acquiring '" + name + "'");
                }
                throw_errno(strategy_name, "semop on semaphore " + std::to_string(index), rc);
            }
            // Another thread of this process is waiting in the kernel for this semaphore.
            if (!wait(lock, try_only, until)) {
                slot& t = slot_of(st, index);
                if (t.acquiring || !t.kernel_held) {
                    give_up_name();
                    return false;
                }
            }
        }
    }

    void release(key& k) {
        std::lock_guard lock(mutex_);
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        if (st == nullptr || !st->held) return;
        st->held = false;
        if (auto it = names_.find(k.resource()); it != names_.end() && it->second == &k)
            st->name_entry = names_.extract(it);
        cv_.notify_all();
        if (st->epoch != epoch_) throw_removed(semid_, EIDRM, "releasing '" + k.resource() + "'");
        slot& s = slot_of(*st, st->index);
        if (s.users > 0) --s.users;
        if (s.users > 0) return;  // other names of this process still use the grant
        s.kernel_held = false;
        sembuf op{static_cast<unsigned short>(st->index), 1, SEM_UNDO};
        if (::semop(semid_, &op, 1) == 0) return;
        const int err = errno;
        const int semid = semid_;
        if (err == EIDRM || err == EINVAL) {
            forget_set_locked();
            throw_removed(semid, err, "releasing '" + k.resource() + "'");
        }
        throw_errno(strategy_name, "releasing semaphore " + std::to_string(st->index), err);
    }

    bool holds(const key& k) {
        std::lock_guard lock(mutex_);
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        return st != nullptr && st->held && st->epoch == epoch_;
    }

    lock_status status(std::string_view resource) {
        std::lock_guard lock(mutex_);
        lock_status result;
        if (names_.count(std::string(resource)) != 0) {
            result.held = lock_status::state::held_exclusive;
            result.holders.push_back("pid " + std::to_string(current_pid()) + " (this process)");
            return result;
        }
        if (semid_ < 0) return result;
        const auto index = static_cast<int>(stable_name_hash(resource).low % nsems_);
        const int value = ::semctl(semid_, index, GETVAL);
        if (value < 0) return result;
        if (value > 0) {
            result.held = lock_status::state::free;
            return result;
        }
        // Taken, but maybe for another name that shares the semaphore: we cannot tell.
        const int pid = ::semctl(semid_, index, GETPID);
        result.held = lock_status::state::unknown;
        result.holders.push_back("semaphore " + std::to_string(index) +
                                 " is taken (last semop by pid " + std::to_string(pid) +
                                 "), by this name or another one sharing the semaphore");
        return result;
    }

  private:
    struct slot {
        int users = 0;             // this process's owners sharing the kernel grant
        bool kernel_held = false;  // this process holds the kernel semaphore
        bool acquiring = false;    // a thread of this process waits for it in the kernel
        // This process's tries before it sleeps in the kernel: many, yielding after the first
        // few, because a sleeper gets every release (FIFO) and each is a context switch.
        brief_retries retries{64, 8};
    };

    // Waits on the condition variable. Returns false when the wait is over (no wait allowed, or
    // the deadline passed).
    bool wait(std::unique_lock<std::mutex>& lock, bool try_only, deadline until) {
        if (try_only) return false;
        if (until == deadline::max()) {
            cv_.wait(lock);
            return true;
        }
        return cv_.wait_until(lock, until) == std::cv_status::no_timeout;
    }

    semaphore_key_state& state_of(key& k) {
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        if (st == nullptr) {
            auto fresh = std::make_unique<semaphore_key_state>();
            st = fresh.get();
            k.set_local_state(semaphore_state_tag(), std::move(fresh));
        }
        return *st;
    }

    // slots_[index], through the key's cache: slots_ only loses elements when the epoch changes
    // (clear), and an unordered_map keeps its elements where they are otherwise.
    slot& slot_of(semaphore_key_state& st, std::uint32_t index) {
        if (st.slot == nullptr || st.slot_set != this || st.slot_epoch != epoch_ ||
            st.index != index) {
            st.slot = &slots_[index];
            st.slot_set = this;
            st.slot_epoch = epoch_;
            st.index = index;
        }
        return *static_cast<slot*>(st.slot);
    }

    void grant(key& k, std::uint32_t index) {
        semaphore_key_state& st = state_of(k);
        if (st.set.get() != this) st.set = shared_from_this();
        st.index = index;
        st.epoch = epoch_;
        st.held = true;
    }

    void open_locked() {
        auto [id, n] = open_set(key_, std::vector<unsigned short>(wanted_, 1), mode_);
        semid_ = id;
        nsems_ = n;
        slots_.clear();
        ++epoch_;
    }

    // The set is gone: grants of this epoch are void; the next acquire opens a new set.
    void forget_set_locked() {
        semid_ = -1;
        slots_.clear();
        ++epoch_;
        cv_.notify_all();
    }

    const key_t key_;
    const std::uint32_t wanted_;
    const std::uint32_t mode_;
    const pid_t pid_;
    const std::uint64_t fork_generation_;
    std::mutex mutex_;
    std::condition_variable cv_;
    int semid_ = -1;
    std::uint32_t nsems_ = 1;
    std::uint64_t epoch_ = 0;
    // resource -> the key that holds it (or is taking it) in this process; only compared.
    name_table names_;
    std::unordered_map<std::uint32_t, slot> slots_;
};

// One semaphore_set per IPC key in this process, shared by all stores of that key: the local
// table only works if every lock object of the process goes through it.
std::shared_ptr<semaphore_set> set_for(key_t key, std::uint32_t wanted, std::uint32_t mode) {
    static std::mutex mutex;
    static std::map<key_t, std::weak_ptr<semaphore_set>> sets;
    std::lock_guard lock(mutex);
    if (auto existing = sets[key].lock(); existing && existing->pid() == current_pid())
        return existing;
    auto created = std::make_shared<semaphore_set>(key, wanted, mode);
    sets[key] = created;
    return created;
}

// ---- Counting semaphores: one set of two semaphores per name ----
// Semaphore 0 holds the permits left (initialised to the limit; taken and given back with
// SEM_UNDO, so that the kernel gives back the permits of a holder that dies); semaphore 1 holds
// the limit, set with the values when the set is created (before sem_otime says it is ready) and
// never changed: every later opener compares it with its own (one name, one limit). A set per
// name, not a slot of the lock set: a counting semaphore cannot share a kernel semaphore with
// another name, as locks do on a hash collision.
constexpr unsigned short permits_left = 0;
constexpr unsigned short kept_limit = 1;
constexpr std::uint32_t max_kernel_limit = 32767;  // SEMVMX

// The IPC key of `name`'s permit set: derived from the lock set's key, so that a configured
// `key` moves the permit sets too, and from the name. Two names whose keys collide share one set
// (and so one limit, or a mismatch error): fewer holders, never more.
key_t permit_set_key(key_t base, std::string_view name) {
    std::string text = "locksmith.permits." + std::to_string(base) + ".";
    text.append(name);
    auto k = static_cast<key_t>(stable_name_hash(text).low & 0x7fffffffu);
    if (k == IPC_PRIVATE || k == base) k = (k + 1) & 0x7fffffff;
    return k == IPC_PRIVATE ? 1 : k;
}

std::uint64_t permit_state_tag() {
    static const std::uint64_t tag = new_local_state_tag();
    return tag;
}

struct permit_key_state : key_local_state {
    int semid = -1;
    bool held = false;
    pid_t pid = 0;                      // the holder process (for messages)
    std::uint64_t fork_generation = 0;  // a forked child holds nothing (no SEM_UNDO for it)
    brief_retries retries{64, 8};
};

// The permit sets this store has opened (name's IPC key -> set and limit), shared by its threads.
class permit_sets {
  public:
    permit_sets(key_t base, std::uint32_t mode) : base_(base), mode_(mode) {}

    bool acquire(key& k, bool try_only, deadline until) {
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr) {
            auto fresh = std::make_unique<permit_key_state>();
            st = fresh.get();
            k.set_local_state(permit_state_tag(), std::move(fresh));
        }
        if (st->held && st->fork_generation == fork_generation()) return true;
        st->held = false;
        const int semid = open(k.resource(), k.limit());
        const int rc = kernel_acquire(semid, permits_left, try_only, until, st->retries);
        if (rc == 0) {
            st->semid = semid;
            st->held = true;
            st->pid = current_pid();
            st->fork_generation = fork_generation();
            return true;
        }
        if (rc == EAGAIN) return false;
        if (rc == EIDRM || rc == EINVAL) {
            forget(semid);
            throw_removed(semid, rc, "acquiring a permit of '" + k.resource() + "'");
        }
        throw_errno(strategy_name, "semop on the permits of '" + k.resource() + "'", rc);
    }

    void release(key& k) {
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr || !st->held) return;
        if (st->fork_generation != fork_generation())
            throw release_error("semaphore: the permit of '" + k.resource() +
                                "' was acquired in process " + std::to_string(st->pid) +
                                "; a forked child cannot release it (disable auto-release in the "
                                "child)");
        // SEM_UNDO here too: it cancels the adjustment the grant recorded for this process. The
        // permit counts as held until it is given back (or its set is gone), so that a release
        // that failed can be tried again.
        sembuf give{permits_left, 1, SEM_UNDO};
        if (::semop(st->semid, &give, 1) == 0) {
            st->held = false;
            return;
        }
        const int err = errno;
        if (err == EIDRM || err == EINVAL) {
            st->held = false;
            forget(st->semid);
            throw_removed(st->semid, err, "releasing the permit of '" + k.resource() + "'");
        }
        throw_errno(strategy_name, "releasing the permit of '" + k.resource() + "'", err);
    }

    bool holds(const key& k) {
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr || !st->held || st->fork_generation != fork_generation()) return false;
        if (::semctl(st->semid, permits_left, GETVAL) >= 0) return true;
        // An administrator removed the set (ipcrm): the grant is gone with it, and the next
        // acquire opens a new set instead of taking this one for still held.
        st->held = false;
        forget(st->semid);
        return false;
    }

    // Holders and limit of `name`'s permit set; nullopt when it has none (no semaphore of that
    // name was used since the set was last removed).
    std::optional<lock_status> status(std::string_view name) {
        const key_t pk = permit_set_key(base_, name);
        const int id = ::semget(pk, 0, 0);
        if (id < 0) return std::nullopt;
        semid_ds ds{};
        semun arg{};
        arg.buf = &ds;
        // Only a set of ours (as open_set checks) says anything about the name.
        if (::semctl(id, 0, IPC_STAT, arg) != 0 || ds.sem_nsems != 2 || ds.sem_otime == 0 ||
            ds.sem_perm.uid != ::geteuid() || ds.sem_perm.cuid != ::geteuid())
            return std::nullopt;
        const int left = ::semctl(id, permits_left, GETVAL);
        const int limit = ::semctl(id, kept_limit, GETVAL);
        if (left < 0 || limit <= 0) return std::nullopt;
        lock_status result;
        result.limit = static_cast<std::uint32_t>(limit);
        result.permits_held = static_cast<std::uint32_t>(limit > left ? limit - left : 0);
        result.held = left > 0 ? lock_status::state::free : lock_status::state::held_exclusive;
        const int waiting = ::semctl(id, permits_left, GETNCNT);
        if (waiting > 0) result.holders.push_back(std::to_string(waiting) + " waiting");
        return result;
    }

  private:
    // The set of `name` with its limit checked against `limit`. Throws invalid_argument_error
    // for a limit the kernel cannot count to, or one that differs from the set's.
    int open(const std::string& name, std::uint32_t limit) {
        if (limit > max_kernel_limit)
            throw invalid_argument_error("semaphore: a limit of " + std::to_string(limit) +
                                         " for '" + name + "' exceeds System V's " +
                                         std::to_string(max_kernel_limit) + " (SEMVMX)");
        const key_t pk = permit_set_key(base_, name);
        std::lock_guard lock(mutex_);
        auto it = sets_.find(pk);
        if (it == sets_.end()) {
            const auto n = static_cast<unsigned short>(limit);
            auto [id, nsems] = open_set(pk, {n, n}, mode_);
            if (nsems != 2)
                throw backend_error(strategy_name, "foreign",
                                    "semaphore: the set with key " + hex_key(pk) + " has " +
                                        std::to_string(nsems) +
                                        " semaphores, not the 2 of a locksmith semaphore: "
                                        "another program's set? (`ipcs -s -i " +
                                        std::to_string(id) + "`)");
            const int kept = ::semctl(id, kept_limit, GETVAL);
            if (kept < 0) throw_errno(strategy_name, "reading the limit of '" + name + "'", errno);
            it = sets_.emplace(pk, std::pair{id, static_cast<std::uint32_t>(kept)}).first;
        }
        const auto [id, kept] = it->second;
        if (kept != limit)
            throw invalid_argument_error(
                "semaphore '" + name + "' has a limit of " + std::to_string(kept) +
                ", kept by its System V set (key " + hex_key(pk) +
                ") since its first user created it; this owner asks for " + std::to_string(limit) +
                ". One name has one limit: ask for " + std::to_string(kept) +
                ", or remove the set when no process uses it (ipcrm -S " + hex_key(pk) +
                ") so that the next user sets the limit anew");
        return id;
    }

    void forget(int semid) {
        std::lock_guard lock(mutex_);
        for (auto it = sets_.begin(); it != sets_.end(); ++it)
            if (it->second.first == semid) {
                sets_.erase(it);
                return;
            }
    }

    const key_t base_;
    const std::uint32_t mode_;
    std::mutex mutex_;
    std::map<key_t, std::pair<int, std::uint32_t>> sets_;
};

class semaphore_store final : public store {
  public:
    semaphore_store(key_t key, std::uint32_t wanted, std::uint32_t mode)
        : store(strategy_name, semaphore_capabilities),
          key_(key),
          wanted_(wanted),
          mode_(mode),
          set_(set_for(key, wanted, mode)),
          permits_(key, mode) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        if (k.limit() != 0) return permits_.acquire(k, true, deadline{});
        return set_for_key(k).acquire(k, true, deadline{});
    }
    bool do_wait_acquire(key& k, lock_mode, std::chrono::milliseconds, deadline until) override {
        if (k.limit() != 0) return permits_.acquire(k, false, until);
        return set_for_key(k).acquire(k, false, until);
    }
    void do_release(key& k) override {
        if (k.limit() != 0) return permits_.release(k);
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        if (st == nullptr || !st->held) return;
        if (!st->set->this_process())
            throw release_error("semaphore: lock '" + k.resource() + "' was acquired in process " +
                                std::to_string(st->set->pid()) +
                                "; a forked child cannot release it (disable auto-release in the "
                                "child)");
        st->set->release(k);
    }
    bool do_holds(const key& k) override {
        if (k.limit() != 0) return permits_.holds(k);
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        return st != nullptr && st->set != nullptr && st->set->this_process() && st->set->holds(k);
    }
    lock_status do_status(std::string_view resource) override {
        // A name used as a semaphore has a permit set; its lock semaphore may be shared by
        // other names' locks, so the permit set, where there is one, is what the name is.
        if (auto permits = permits_.status(resource)) return *permits;
        return current_set().status(resource);
    }

  private:
    // A key granted by another store of the same IPC key keeps using that store's table; a key
    // inherited from the parent process does not count as held here.
    semaphore_set& set_for_key(const key& k) {
        auto* st = k.local_state_of<semaphore_key_state>(semaphore_state_tag());
        if (st != nullptr && st->held && st->set->this_process()) return *st->set;
        return current_set();
    }

    semaphore_set& current_set() {
        std::lock_guard lock(mutex_);
        if (!set_->this_process()) set_ = set_for(key_, wanted_, mode_);
        return *set_;
    }

    const key_t key_;
    const std::uint32_t wanted_;
    const std::uint32_t mode_;
    std::mutex mutex_;  // guards set_ (replaced after fork)
    std::shared_ptr<semaphore_set> set_;
    permit_sets permits_;
};

}  // namespace

semaphore_options semaphore_options::from_json(const nlohmann::json& options) {
    options_reader reader(options);
    semaphore_options result;
    if (auto v = reader.integer("key", 1, 0x7fffffff)) result.key = static_cast<std::int32_t>(*v);
    if (auto v = reader.integer("semaphores", 1, max_semaphores))
        result.semaphores = static_cast<std::uint32_t>(*v);
    if (auto v = reader.integer("mode", 0, 0777)) result.mode = static_cast<std::uint32_t>(*v);
    reader.finish();
    return result;
}

std::int32_t default_semaphore_key() {
    auto key = static_cast<std::int32_t>(
        stable_name_hash("locksmith.semaphore." + std::to_string(::getuid())).low & 0x7fffffffu);
    return key == IPC_PRIVATE ? 1 : key;
}

std::int32_t semaphore_permit_key(std::int32_t key, std::string_view name) {
    return permit_set_key(key == 0 ? default_semaphore_key() : key, name);
}

std::shared_ptr<store> make_semaphore_store(const semaphore_options& options) {
    if (options.key < 0) throw invalid_argument_error("semaphore: key must be positive");
    if (options.semaphores < 1 || options.semaphores > max_semaphores)
        throw invalid_argument_error("semaphore: semaphores must be in 1.." +
                                     std::to_string(max_semaphores));
    const key_t key = options.key == 0 ? default_semaphore_key() : options.key;
    return std::make_shared<semaphore_store>(key, options.semaphores, options.mode);
}

strategy_descriptor semaphore_strategy() {
    strategy_descriptor d;
    d.name = strategy_name;
    d.description =
        "System V semaphores with SEM_UNDO, one bounded set (TYPO3 SemaphoreLockStrategy, Symfony "
        "SemaphoreStore)";
    d.default_priority = 25;
    d.capabilities = semaphore_capabilities;
    d.supported = [] {
        // Kernels built without CONFIG_SYSVIPC, or containers that hide IPC, fail here.
        const int id = ::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
        if (id < 0)
            return support_status::no(std::string("System V semaphores are unavailable: ") +
                                      std::strerror(errno));
        ::semctl(id, 0, IPC_RMID);
        return support_status::yes();
    };
    set_factory<semaphore_options>(d, make_semaphore_store);
    return d;
}

}  // namespace locksmith::strategies
