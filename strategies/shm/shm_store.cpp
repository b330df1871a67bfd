// The `shm` strategy: robust process-shared mutexes in a POSIX shared-memory segment.
//
// Layout: the segment (/dev/shm/<name>) holds one shm_table (header plus a table mutex) followed
// by an array of shm_slot. A name's 128-bit hash picks a home slot; linear probing finds the slot
// that holds that hash, or a free one. The table mutex guards slot bookkeeping (state, hash, refs)
// and is held only for a few loads and stores; the slot mutex is the lock itself.
//
// Why a generation counter: a slot can be freed and reused for another name while a process is
// between finding the slot and locking its mutex (a waiter's slot may even be reclaimed when the
// table is full). Every locker therefore re-checks the slot's generation once it holds the slot
// mutex and starts over when it changed. The generation only changes while the slot mutex is
// held or the slot is not in use, so a verified holder cannot lose its slot. Reference counts
// only decide when a slot is freed: every lock object (key) that used a name keeps one reference
// until it is destroyed, so a holder always has one. A count leaked by a crash costs a slot until
// the table is full (then reclaim() frees every slot whose mutex is free), never exclusion.
#include <locksmith/strategies/shm.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/author/strategy_support.hpp>

namespace locksmith::strategies {
namespace {

constexpr const char* strategy_name = "shm";
// What the store offers and the registry entry says (one statement of both).
constexpr capability shm_capabilities =
    capability::exclusive | capability::noblock | capability::native_wait | capability::crash_release;
constexpr std::uint64_t table_magic = 0x6c6f636b736d7368ull;  // "locksmsh"
constexpr std::uint32_t table_version = 2;  // 1: inside a Boost.Interprocess segment
constexpr std::uint32_t max_slots = 1u << 20;

enum class slot_state : std::uint32_t { empty = 0, used = 1, tombstone = 2 };

struct shm_slot {
    pthread_mutex_t mutex;
    // Guarded by the table mutex.
    slot_state state = slot_state::empty;
    std::uint32_t refs = 0;  // owners holding or about to wait for this slot
    name_hash hash{};
    // Changes under the table mutex, and only while the slot mutex is held or nobody holds it in
    // this generation (see the file comment). Read without the table mutex by lockers.
    std::atomic<std::uint64_t> generation{0};
    // Written by the holder while it holds the slot mutex; cleared before it unlocks. A non-zero
    // pid after EOWNERDEAD identifies the dead holder.
    std::atomic<std::int32_t> holder_pid{0};
    std::atomic<std::int32_t> holder_tid{0};
};

struct shm_table {
    std::uint64_t magic = table_magic;
    std::uint32_t version = table_version;
    std::uint32_t slot_count;
    // Guarded by the mutex: slots freed since the last clean-up of tombstones (see
    // segment::clean_tombstones_locked).
    std::uint32_t freed_since_clean = 0;
    pthread_mutex_t mutex;
    explicit shm_table(std::uint32_t n) : slot_count(n) {}
};

// Every mutex in the segment: process-shared (it lives in shared memory), robust (a dead owner is
// reported, not inherited forever) and error-checking (relocking or unlocking from the wrong
// thread returns an error instead of deadlocking or corrupting the mutex).
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

// This thread's pid and tid, cached: getpid() and gettid() are system calls, and the fast path
// makes none. In a fork()ed child the generation differs, so the child reads its own ids.

struct thread_identity {
    pid_t pid = 0;
    std::int32_t tid = 0;
    std::uint64_t generation = ~std::uint64_t(0);
};

const thread_identity& self() {
    thread_local thread_identity id;
    const std::uint64_t generation = fork_generation();
    if (id.generation != generation)
        id = {current_pid(), static_cast<std::int32_t>(::syscall(SYS_gettid)), generation};
    return id;
}

bool process_alive(std::int32_t pid) {
    return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

enum class lock_result { acquired, recovered, busy, timed_out, self_deadlock };

// Locks a robust mutex: one try (`try_only`), or waiting until the monotonic deadline `until`
// (deadline::max() = without bound).
lock_result lock_robust(pthread_mutex_t* m, bool try_only, deadline until) {
    int rc;
    if (try_only) {
        rc = pthread_mutex_trylock(m);
    } else if (until == deadline::max()) {
        rc = pthread_mutex_lock(m);
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
        rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
    }
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
    ~table_guard() { pthread_mutex_unlock(m_); }
    table_guard(const table_guard&) = delete;
    table_guard& operator=(const table_guard&) = delete;

  private:
    pthread_mutex_t* m_;
};

// Where glibc's shm_open keeps POSIX shared memory objects. The segment is opened as a file there
// so that it can be created complete under a temporary identity and published atomically.
constexpr const char* shm_dir = "/dev/shm";

std::string octal_mode(unsigned mode) {
    char text[8];
    std::snprintf(text, sizeof text, "0%03o", mode & 0777u);
    return text;
}

// Closes a descriptor on every path out.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

std::size_t slots_offset() {
    return (sizeof(shm_table) + alignof(shm_slot) - 1) & ~(alignof(shm_slot) - 1);
}

std::size_t segment_size(std::uint32_t slots) {
    return slots_offset() + sizeof(shm_slot) * std::size_t(slots);
}

// One mapping of the segment; shared by the store and by the keys it has granted, so that a key
// can still release after its store is gone.
//
// The segment is built in an unnamed file (O_TMPFILE) and only then linked at its name, so every
// process that opens the name finds a complete table: there is no half-initialised state to wait
// for, and a creator that dies leaves nothing behind. Whatever is found at the name must be a
// regular file (O_NOFOLLOW), created by this user and open to nobody beyond `mode`: anyone who can
// map the segment can unlock or hold every slot in it.
class segment {
  public:
    // Opens the segment, creating it when `create` and it does not exist.
    segment(const std::string& name, std::uint32_t wanted_slots, std::uint32_t mode,
            bool create = true)
        : name_(name), path_(std::string(shm_dir) + "/" + name) {
        for (int attempt = 0;; ++attempt) {
            const int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0) {
                fd_guard guard{fd};
                map_existing(fd, mode);
                return;
            }
            const int err = errno;
            if (err == ELOOP)
                fail("ELOOP", "is a symbolic link, which locksmith does not follow");
            if (err != ENOENT || !create || attempt >= 10)
                fail("errno " + std::to_string(err), std::string("cannot be opened: ") +
                                                         std::strerror(err));
            if (create_and_publish(wanted_slots, mode)) return;
            // Another process published its segment first: use that one.
        }
    }
    ~segment() {
        if (table_ != nullptr) ::munmap(table_, size_);
    }
    segment(const segment&) = delete;
    segment& operator=(const segment&) = delete;

    const std::string& name() const noexcept { return name_; }
    std::uint32_t slot_count() const noexcept { return table_->slot_count; }
    shm_slot& slot(std::uint32_t i) noexcept { return slots_[i]; }
    pthread_mutex_t* table_mutex() noexcept { return &table_->mutex; }

    // Takes a reference on the slot of `h`, allocating one when no slot holds it.
    // Returns the slot index and its generation. Throws backend_error when the table is full.
    std::pair<std::uint32_t, std::uint64_t> reference(const name_hash& h) {
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
                if (s.hash == h) {
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
                                "segment with more `slots`");
    }

    // Drops a reference taken by reference(); frees the slot with the last one. Safe without the
    // slot mutex: a holder has a reference of its own, so the count cannot reach 0 under it.
    void unreference(std::uint32_t index, std::uint64_t generation) {
        table_guard guard(table_mutex());
        shm_slot& s = slots_[index];
        if (s.state != slot_state::used || s.generation.load() != generation) return;
        if (s.refs > 0) --s.refs;
        if (s.refs == 0) free_locked(index);
    }

    // After EOWNERDEAD: the dead holder's reference is gone with it.
    void drop_dead_holder(std::uint32_t index) {
        table_guard guard(table_mutex());
        shm_slot& s = slots_[index];
        if (s.holder_pid.load() != 0 && s.state == slot_state::used && s.refs > 0) --s.refs;
        s.holder_pid = 0;
        s.holder_tid = 0;
    }

    // Slots in use (for leak tests).
    std::uint32_t in_use() {
        table_guard guard(table_mutex());
        std::uint32_t count = 0;
        for (std::uint32_t i = 0; i < slot_count(); ++i)
            if (slots_[i].state == slot_state::used) ++count;
        return count;
    }

    // Slots examined by a lookup of an absent name, averaged over the home slots: the distance to
    // the first empty slot, plus one (the whole table when none is empty).
    double average_probes() {
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

    // The slot of `h`, if one is in use; for status().
    std::optional<std::uint32_t> find(const name_hash& h) {
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

  private:
    void free_locked(std::uint32_t index) {
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

    // A clean-up costs one pass over the table, so it waits for an eighth of the table's slots
    // to be freed: a free costs O(1) on average, and lookups wade through at most that many
    // tombstones beyond those that live slots' probe paths still need.
    void clean_tombstones_if_due_locked() {
        if (table_->freed_since_clean > slot_count() / 8) clean_tombstones_locked();
    }

    // Once the table has been full there is no empty slot after the freed ones, so the rule in
    // free_locked() never applies and every lookup of a new name would scan the whole table.
    // A tombstone can become empty when no used slot's probe path (its home slot up to the slot)
    // crosses it: no lookup needs to walk past it. No used slot moves, so every process keeps
    // finding its name where it was, and references and holders are untouched.
    void clean_tombstones_locked() {
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

    // The table is full: frees every used slot whose mutex nobody holds. Its references belong
    // to idle lock objects or waiters that have not locked yet (they notice the new generation
    // and start over), or to processes that died. Returns how many slots were freed.
    std::uint32_t reclaim_locked() {
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
            pthread_mutex_unlock(&s.mutex);
            ++freed;
        }
        return freed;
    }

    [[noreturn]] void fail(const std::string& code, const std::string& what) const {
        throw backend_error(strategy_name, code,
                            "shm: the shared memory segment " + path_ + " " + what +
                                ". Remove it when no process of yours uses it: rm " + path_);
    }

    // Checks what was found at the name, then maps it.
    void map_existing(int fd, std::uint32_t mode) {
        struct stat st {};
        if (::fstat(fd, &st) != 0) fail("errno " + std::to_string(errno), "cannot be examined");
        if (!S_ISREG(st.st_mode)) fail("not a file", "is not a regular file");
        const uid_t me = ::geteuid();
        const auto perms = static_cast<unsigned>(st.st_mode) & 0777u;
        if (st.st_uid != me || (perms & ~mode) != 0)
            fail("foreign", "belongs to uid " + std::to_string(st.st_uid) + " with mode " +
                                octal_mode(perms) + "; locksmith only uses a segment that this "
                                "user (uid " + std::to_string(me) + ") created, with at most "
                                "mode " + octal_mode(mode) + ", since anyone else with access "
                                "could release or block its locks");
        shm_table header{0};
        if (st.st_size < off_t(sizeof header) ||
            ::pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) ||
            header.magic != table_magic || header.version != table_version ||
            header.slot_count < 1 || header.slot_count > max_slots ||
            st.st_size < off_t(segment_size(header.slot_count)))
            fail("bad segment", "is not a locksmith shm segment of version " +
                                    std::to_string(table_version) + " (or is corrupted)");
        map(fd, segment_size(header.slot_count));
    }

    // Builds a complete segment in an unnamed file and links it at the name. Returns false when
    // another process linked one there first.
    bool create_and_publish(std::uint32_t slots, std::uint32_t mode) {
        const int fd = ::open(shm_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode & 0777u);
        if (fd < 0)
            throw_errno(strategy_name, std::string("creating a shared memory file in ") + shm_dir,
                        errno);
        fd_guard guard{fd};
        const std::size_t size = segment_size(slots);
        if (::fchmod(fd, mode & 0777u) != 0 || ::ftruncate(fd, off_t(size)) != 0)
            throw_errno(strategy_name, "sizing a new shm segment of " + std::to_string(size) +
                                           " bytes", errno);
        map(fd, size);
        table_ = new (table_) shm_table(slots);
        init_robust_mutex(&table_->mutex);
        for (std::uint32_t i = 0; i < slots; ++i) init_robust_mutex(&(new (&slots_[i]) shm_slot)->mutex);
        const std::string self_link = "/proc/self/fd/" + std::to_string(fd);
        if (::linkat(AT_FDCWD, self_link.c_str(), AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) == 0)
            return true;
        const int err = errno;
        ::munmap(table_, size_);
        table_ = nullptr;
        slots_ = nullptr;
        if (err == EEXIST) return false;
        fail("errno " + std::to_string(err),
             std::string("cannot be created (linking the new segment at its name: ") +
                 std::strerror(err) + ")");
    }

    void map(int fd, std::size_t size) {
        void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) fail("errno " + std::to_string(errno), "cannot be mapped");
        table_ = static_cast<shm_table*>(base);
        slots_ = reinterpret_cast<shm_slot*>(static_cast<char*>(base) + slots_offset());
        size_ = size;
    }

    std::string name_;
    std::string path_;
    shm_table* table_ = nullptr;
    shm_slot* slots_ = nullptr;
    std::size_t size_ = 0;
};

// What a key holds. The key keeps its reference on the slot between grants (until the key is
// destroyed), so a lock+unlock pair on a known name touches only the slot mutex: no table
// lookup, no allocation, no system call.
struct shm_key_state : key_local_state {
    std::shared_ptr<segment> seg;
    name_hash hash{};
    // A reference on slot `index` in `generation`, taken by process `ref_pid`.
    bool has_ref = false;
    pid_t ref_pid = 0;
    std::uint32_t index = 0;
    std::uint64_t generation = 0;
    // The grant: held by thread `owner_tid` of process `owner_pid`.
    bool held = false;
    pid_t owner_pid = 0;
    pthread_t owner_thread{};
    std::int32_t owner_tid = 0;

    ~shm_key_state() override {
        // A key destroyed while held leaves its reference to the holder: the mutex stays locked
        // until its thread dies, and the recoverer then drops the reference (drop_dead_holder).
        // A reference inherited through fork is the parent's to drop.
        if (!has_ref || held || ref_pid != self().pid) return;
        try {
            seg->unreference(index, generation);
        } catch (...) {
            // Destructors do not throw; at worst the slot stays in use until reclaimed.
        }
    }
};

class shm_store final : public store {
  public:
    explicit shm_store(std::shared_ptr<segment> seg)
        : store(strategy_name, shm_capabilities),
          segment_(std::move(seg)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        return acquire(k, true, deadline{});
    }

    bool do_wait_acquire(key& k, lock_mode, std::chrono::milliseconds, deadline until) override {
        return acquire(k, false, until);
    }

    void do_release(key& k) override {
        auto* st = k.local_state_of<shm_key_state>(instance_id());
        if (st == nullptr || !st->held) return;
        const thread_identity& me = self();
        if (st->owner_pid != me.pid)
            throw release_error("shm: lock '" + k.resource() + "' was acquired in process " +
                                std::to_string(st->owner_pid) +
                                "; a forked child cannot release it (disable auto-release in "
                                "the child)");
        if (!pthread_equal(st->owner_thread, pthread_self()))
            throw release_error(
                "shm: lock '" + k.resource() + "' is a robust mutex owned by thread " +
                std::to_string(st->owner_tid) + " and must be released by it (this is thread " +
                std::to_string(me.tid) + ")");
        shm_slot& s = st->seg->slot(st->index);
        s.holder_pid.store(0, std::memory_order_relaxed);
        s.holder_tid.store(0, std::memory_order_relaxed);
        st->held = false;
        const int rc = pthread_mutex_unlock(&s.mutex);
        if (rc != 0)
            throw_errno(strategy_name, "unlocking the mutex of '" + k.resource() + "'", rc);
    }

    bool do_holds(const key& k) override {
        auto* st = k.local_state_of<shm_key_state>(instance_id());
        if (st == nullptr || !st->held || st->owner_pid != self().pid) return false;
        shm_slot& s = st->seg->slot(st->index);
        return s.generation.load() == st->generation && s.holder_tid.load() == st->owner_tid;
    }

    lock_status do_status(std::string_view resource) override {
        lock_status status;
        auto index = segment_->find(stable_name_hash(resource));
        status.held = lock_status::state::free;
        if (!index) return status;
        shm_slot& s = segment_->slot(*index);
        const std::int32_t pid = s.holder_pid.load();
        if (pid == 0) return status;
        status.held = lock_status::state::held_exclusive;
        std::string who =
            "pid " + std::to_string(pid) + " thread " + std::to_string(s.holder_tid.load());
        if (!process_alive(pid)) who += " (dead; the next locker recovers the lock)";
        status.holders.push_back(std::move(who));
        return status;
    }

  private:
    shm_key_state& state_for(key& k, const thread_identity& me) {
        auto* st = k.local_state_of<shm_key_state>(instance_id());
        if (st == nullptr || st->seg != segment_) {
            // New key, or one used with another segment (its destructor drops its reference).
            auto fresh = std::make_unique<shm_key_state>();
            fresh->seg = segment_;
            fresh->hash = stable_name_hash(k.resource());
            st = fresh.get();
            k.set_local_state(instance_id(), std::move(fresh));
        }
        if (st->held && st->owner_pid != me.pid) st->held = false;      // the parent's grant
        if (st->has_ref && st->ref_pid != me.pid) st->has_ref = false;  // the parent's reference
        return *st;
    }

    bool acquire(key& k, bool try_only, deadline until) {
        const thread_identity& me = self();
        shm_key_state& st = state_for(k, me);
        if (st.held) return true;
        for (;;) {
            if (!st.has_ref) {
                auto [index, generation] = segment_->reference(st.hash);
                st.index = index;
                st.generation = generation;
                st.ref_pid = me.pid;
                st.has_ref = true;
            }
            shm_slot& s = segment_->slot(st.index);
            const lock_result r = lock_robust(&s.mutex, try_only, until);
            if (r == lock_result::busy || r == lock_result::timed_out) return false;
            if (r == lock_result::self_deadlock) {
                // This thread holds the name through another key: nobody can free it before the
                // deadline, and an unbounded wait could never end.
                if (try_only) return false;
                if (until == deadline::max())
                    throw acquire_error("shm: lock '" + k.resource() +
                                        "' is already held by this thread through another lock "
                                        "object; waiting for it would never end");
                std::this_thread::sleep_until(until);
                return false;
            }
            if (r == lock_result::recovered) segment_->drop_dead_holder(st.index);
            if (s.generation.load() != st.generation) {
                // The slot was freed or reclaimed, and maybe reused, since we referenced it; our
                // reference went with it. Start over.
                pthread_mutex_unlock(&s.mutex);
                st.has_ref = false;
                continue;
            }
            st.held = true;
            st.owner_pid = me.pid;
            st.owner_thread = pthread_self();
            st.owner_tid = me.tid;
            s.holder_pid.store(me.pid, std::memory_order_relaxed);
            s.holder_tid.store(me.tid, std::memory_order_relaxed);
            return true;
        }
    }

    std::shared_ptr<segment> segment_;
};

std::uint32_t to_u32(std::int64_t v) {
    return static_cast<std::uint32_t>(v);
}

}  // namespace

shm_options shm_options::from_json(const nlohmann::json& options) {
    options_reader reader(options);
    shm_options result;
    if (auto v = reader.string("segment")) {
        if (v->empty() || v->size() > 200 || v->find('/') != std::string::npos ||
            v->find('\0') != std::string::npos)
            throw config_error("config.value", "/segment",
                               "shm: \"segment\" must be 1..200 characters without '/' or NUL");
        result.segment = *v;
    }
    if (auto v = reader.integer("slots", 1, max_slots)) result.slots = to_u32(*v);
    if (auto v = reader.integer("mode", 0, 0777)) result.mode = to_u32(*v);
    reader.finish();
    return result;
}

std::string default_shm_segment() {
    return "locksmith-" + std::to_string(::getuid());
}

std::shared_ptr<store> make_shm_store(const shm_options& options) {
    if (options.slots < 1 || options.slots > max_slots)
        throw invalid_argument_error("shm: slots must be in 1.." + std::to_string(max_slots));
    const std::string name = options.segment.empty() ? default_shm_segment() : options.segment;
    return std::make_shared<shm_store>(
        std::make_shared<segment>(name, options.slots, options.mode));
}

bool remove_shm_segment(const std::string& name) {
    return ::unlink((std::string(shm_dir) + "/" + name).c_str()) == 0;
}

std::uint32_t shm_slots_in_use(const std::string& name) {
    // Any mode: this only reads, and the segment must still be this user's.
    return segment(name, 1, 0777, false).in_use();
}

double shm_average_probes(const std::string& name) {
    return segment(name, 1, 0777, false).average_probes();
}

strategy_descriptor shm_strategy() {
    strategy_descriptor d;
    d.name = strategy_name;
    d.description =
        "robust process-shared mutexes in a POSIX shared-memory segment (fastest local strategy)";
    d.default_priority = 60;
    d.capabilities = shm_capabilities;
    d.supported = [] {
        // POSIX shared memory needs a writable tmpfs /dev/shm (often missing in minimal
        // containers); an unnamed file there leaves nothing behind.
        const int fd = ::open(shm_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return support_status::no(std::string("POSIX shared memory is unavailable: ") +
                                      shm_dir + ": " + std::strerror(errno));
        ::close(fd);
        return support_status::yes();
    };
    set_factory<shm_options>(d, make_shm_store);
    return d;
}

}  // namespace locksmith::strategies
