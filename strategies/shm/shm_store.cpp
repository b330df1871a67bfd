// SPDX-License-Identifier: MIT
// The `shm` strategy: robust process-shared mutexes in a POSIX shared-memory segment.
//
// The segment and its slot bookkeeping are in shm_segment.hpp; this file is the store: a lock
// is a slot's robust mutex, and a key keeps its reference on the slot.
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
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/backoff.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

#include "shm_permits.hpp"
#include "shm_segment.hpp"

namespace locksmith::strategies {
namespace {

using namespace shm;

// What the store offers and the registry entry says (one statement of both).
constexpr capability shm_capabilities = capability::exclusive | capability::noblock |
                                        capability::native_wait | capability::crash_release |
                                        capability::counting;

// This thread's pid and tid, cached: getpid() and gettid() are system calls, and the fast path
// makes none. Initial-exec TLS: a plain %fs-relative load, where the default model for a shared
// library calls __tls_get_addr on every access (measured at ≈ 10 % of a lock+unlock pair). A
// fork()ed child has only the forking thread, whose copy the atfork handler clears, so the child
// reads its own ids.
struct thread_identity {
    pid_t pid = 0;  // 0: not read yet in this process
    std::int32_t tid = 0;
};

[[gnu::tls_model("initial-exec")]] thread_local thread_identity this_thread;

const bool identity_reset_at_fork = [] {
    ::pthread_atfork(nullptr, nullptr, [] { this_thread.pid = 0; });
    return true;
}();

const thread_identity& self() {
    if (this_thread.pid == 0) [[unlikely]] {
        (void)identity_reset_at_fork;
        this_thread = {::getpid(), static_cast<std::int32_t>(::syscall(SYS_gettid))};
    }
    return this_thread;
}

bool process_alive(std::int32_t pid) {
    return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

// What a key holds. The key keeps its reference on the slot between grants (until the key is
// destroyed), so a lock+unlock pair on a known name touches only the slot mutex: no table
// lookup, no allocation, no system call.
struct shm_key_state : key_local_state {
    std::shared_ptr<segment> seg;
    name_hash hash{};
    // A reference on slot `index` (at `slot`, cached so that a grant makes no lookup) in
    // `generation`, taken by process `ref_pid`.
    bool has_ref = false;
    pid_t ref_pid = 0;
    std::uint32_t index = 0;
    shm_slot* slot = nullptr;
    std::uint64_t generation = 0;
    // The grant: held by thread `owner_tid` of process `owner_pid` (a tid is unique among the
    // live threads of the system, so it identifies the owning thread as pthread_self() would).
    bool held = false;
    pid_t owner_pid = 0;
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

// ---- Counting semaphores (shm_permits.hpp): a permit is one of the name's robust mutexes ----

// Every permit segment this process mapped, by path, for the life of the process: a mapping must
// outlive every mutex in it that a thread of ours may hold (glibc links a held robust mutex into
// the thread's list through the mutex itself), and a process uses few names as semaphores.
class permit_files {
  public:
    std::shared_ptr<permit_file> open(const std::string& path, std::uint32_t limit,
                                      std::uint32_t mode) {
        std::lock_guard lock(mutex_);
        auto& slot = files_[path];
        if (!slot) slot = std::make_shared<permit_file>(path, limit, mode, true);
        return slot;
    }
    // After an administrator removed the segment: the next open maps the new one. The old
    // mapping stays (see above).
    void forget(const std::shared_ptr<permit_file>& file) {
        std::lock_guard lock(mutex_);
        if (auto it = files_.find(file->path()); it != files_.end() && it->second == file) {
            retired_.push_back(std::move(it->second));
            files_.erase(it);
        }
    }

  private:
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<permit_file>> files_;
    std::vector<std::shared_ptr<permit_file>> retired_;
};

permit_files& process_permit_files() {
    static auto* files = new permit_files;  // never destroyed: see permit_files
    return *files;
}

struct permit_key_state : key_local_state {
    std::shared_ptr<permit_file> file;
    std::uint32_t index = 0;
    // Held by thread `owner_tid` of process `owner_pid`, as an shm lock.
    bool held = false;
    pid_t owner_pid = 0;
    std::int32_t owner_tid = 0;
};

std::uint64_t permit_state_tag() {
    static const std::uint64_t tag = new_local_state_tag();
    return tag;
}

class shm_store final : public store {
  public:
    shm_store(std::shared_ptr<segment> seg, std::uint32_t mode)
        : store(strategy_name, shm_capabilities), segment_(std::move(seg)), mode_(mode) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        if (k.limit() != 0) return acquire_permit(k, true, deadline{});
        return acquire(k, true, deadline{});
    }

    bool do_wait_acquire(key& k, lock_mode, std::chrono::milliseconds, deadline until) override {
        if (k.limit() != 0) return acquire_permit(k, false, until);
        return acquire(k, false, until);
    }

    void do_release(key& k) override {
        if (k.limit() != 0) return release_permit(k);
        auto* st = k.local_state_of<shm_key_state>(instance_id());
        if (st == nullptr || !st->held) return;
        const thread_identity& me = self();
        if (st->owner_pid != me.pid)
            throw release_error("shm: lock '" + k.resource() + "' was acquired in process " +
                                std::to_string(st->owner_pid) +
                                "; a forked child cannot release it (disable auto-release in "
                                "the child)");
        if (st->owner_tid != me.tid)
            throw release_error(
                "shm: lock '" + k.resource() + "' is a robust mutex owned by thread " +
                std::to_string(st->owner_tid) + " and must be released by it (this is thread " +
                std::to_string(me.tid) + ")");
        shm_slot& s = *st->slot;
        s.holder_pid.store(0, std::memory_order_relaxed);
        s.holder_tid.store(0, std::memory_order_relaxed);
        st->held = false;
        const int rc = unlock_robust(&s.mutex);
        if (rc != 0)
            throw_errno(strategy_name, "unlocking the mutex of '" + k.resource() + "'", rc);
    }

    bool do_holds(const key& k) override {
        if (k.limit() != 0) return holds_permit(k);
        auto* st = k.local_state_of<shm_key_state>(instance_id());
        if (st == nullptr || !st->held || st->owner_pid != self().pid) return false;
        shm_slot& s = *st->slot;
        return s.generation.load() == st->generation && s.holder_tid.load() == st->owner_tid;
    }

    lock_status do_status(std::string_view resource) override {
        // A name used as a semaphore has a permits segment: that is what the name is.
        if (auto permits = permit_status(resource)) return *permits;
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
                st.slot = &segment_->slot(index);
                st.generation = generation;
                st.ref_pid = me.pid;
                st.has_ref = true;
            }
            shm_slot& s = *st.slot;
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
                unlock_robust(&s.mutex);
                st.has_ref = false;
                continue;
            }
            st.held = true;
            st.owner_pid = me.pid;
            st.owner_tid = me.tid;
            s.holder_pid.store(me.pid, std::memory_order_relaxed);
            s.holder_tid.store(me.tid, std::memory_order_relaxed);
            return true;
        }
    }

    // ---- permits ----

    bool acquire_permit(key& k, bool try_only, deadline until) {
        const thread_identity& me = self();
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr) {
            auto fresh = std::make_unique<permit_key_state>();
            st = fresh.get();
            k.set_local_state(permit_state_tag(), std::move(fresh));
        }
        if (st->held && st->owner_pid != me.pid) st->held = false;  // the parent's grant
        if (st->held) {
            if (!st->file->unlinked()) return true;
            give_back_lost(*st, me);
        }
        if (k.limit() > max_permits)
            throw invalid_argument_error("shm: a limit of " + std::to_string(k.limit()) + " for '" +
                                         k.resource() + "' exceeds the strategy's " +
                                         std::to_string(max_permits) +
                                         " (a waiter sleeps on every permit at once: "
                                         "futex_waitv takes 128 words)");
        // The segment of this owner's last grant, else the process's mapping of the name's.
        auto file = st->file ? st->file
                             : process_permit_files().open(
                                   permits_path(segment_->name(), k.resource()), k.limit(), mode_);
        if (file->limit() != k.limit())
            throw invalid_argument_error(
                "shm semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(file->limit()) + ", kept in " + file->path() +
                " since its first user created it; this owner asks for " +
                std::to_string(k.limit()) + ". One name has one limit: ask for " +
                std::to_string(file->limit()) +
                ", or remove the segment when no process uses it (rm " + file->path() +
                ") so that the next user sets the limit anew");
        backoff polls;  // only where the kernel has no futex_waitv
        const std::uint32_t permits = file->limit();
        bool waited = false;
        for (;;) {
            std::uint32_t mine = 0;  // permits this thread holds through other owners
            for (std::uint32_t i = 0; i < permits; ++i) {
                permit_slot& s = file->slot(i);
                const lock_result r = lock_robust(&s.mutex, true, deadline{});
                if (r == lock_result::self_deadlock) ++mine;
                // recovered: its holder died; the permit is ours now, as a free one would be.
                const bool taken = r == lock_result::acquired || r == lock_result::recovered;
                if (!taken) continue;
                st->file = file;
                st->index = i;
                st->held = true;
                st->owner_pid = me.pid;
                st->owner_tid = me.tid;
                s.holder_pid.store(me.pid, std::memory_order_relaxed);
                s.holder_tid.store(me.tid, std::memory_order_relaxed);
                set_permit_number(k, i + 1);
                // Other sleepers may be queued on this word still: our unlock must wake one.
                if (waited) file->keep_waking(i);
                return true;
            }
            if (try_only) return false;
            if (mine == permits) {
                // Every permit is this thread's: nobody else can give one back.
                if (until == deadline::max())
                    throw acquire_error("shm: every permit of '" + k.resource() +
                                        "' is held by this thread through other owners; "
                                        "waiting for one would never end");
                std::this_thread::sleep_until(until);
                return false;
            }
            if (deadline::clock::now() >= until) {
                if (waited) file->pass_on_wake_ups();
                return false;
            }
            waited = true;
            if (!file->wait(until) && !polls.sleep(until)) return false;
        }
    }

    // The permit's segment was removed: the grant guards nothing. Its mutex is unlocked when
    // this is its thread (else it stays held in the old mapping, which nobody opens any more).
    void give_back_lost(permit_key_state& st, const thread_identity& me) {
        st.held = false;
        if (st.owner_tid == me.tid) {
            permit_slot& s = st.file->slot(st.index);
            s.holder_pid.store(0, std::memory_order_relaxed);
            s.holder_tid.store(0, std::memory_order_relaxed);
            unlock_robust(&s.mutex);
        }
        process_permit_files().forget(st.file);
        st.file.reset();
    }

    void release_permit(key& k) {
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr || !st->held) return;
        const thread_identity& me = self();
        if (st->owner_pid != me.pid)
            throw release_error("shm: the permit of '" + k.resource() +
                                "' was acquired in process " + std::to_string(st->owner_pid) +
                                "; a forked child cannot release it (disable auto-release in "
                                "the child)");
        if (st->owner_tid != me.tid)
            throw release_error(
                "shm: the permit of '" + k.resource() + "' is a robust mutex owned by thread " +
                std::to_string(st->owner_tid) + " and must be released by it (this is thread " +
                std::to_string(me.tid) + ")");
        permit_slot& s = st->file->slot(st->index);
        s.holder_pid.store(0, std::memory_order_relaxed);
        s.holder_tid.store(0, std::memory_order_relaxed);
        st->held = false;
        if (const int rc = unlock_robust(&s.mutex); rc != 0)
            throw_errno(strategy_name, "unlocking a permit of '" + k.resource() + "'", rc);
    }

    bool holds_permit(const key& k) {
        auto* st = k.local_state_of<permit_key_state>(permit_state_tag());
        if (st == nullptr || !st->held) return false;
        const thread_identity& me = self();
        if (st->owner_pid != me.pid) return false;
        if (st->file->slot(st->index).holder_tid.load() != st->owner_tid) return false;
        if (!st->file->unlinked()) return true;
        give_back_lost(*st, me);
        return false;
    }

    std::optional<lock_status> permit_status(std::string_view resource) {
        const std::string path = permits_path(segment_->name(), resource);
        if (::access(path.c_str(), F_OK) != 0) return std::nullopt;
        std::shared_ptr<permit_file> file;
        try {
            file = std::make_shared<permit_file>(path, 0, mode_, false);
        } catch (const backend_error&) {
            return std::nullopt;  // not ours, or not a permits segment: it says nothing
        }
        lock_status status;
        status.limit = file->limit();
        status.permits_held = file->held();
        status.held = *status.permits_held < file->limit() ? lock_status::state::free
                                                           : lock_status::state::held_exclusive;
        for (std::uint32_t i = 0; i < file->limit(); ++i) {
            const std::int32_t pid = file->slot(i).holder_pid.load();
            if (pid == 0) continue;
            std::string who = "permit " + std::to_string(i + 1) + ": pid " + std::to_string(pid) +
                              " thread " + std::to_string(file->slot(i).holder_tid.load());
            if (!process_alive(pid)) who += " (dead; the next acquire recovers the permit)";
            status.holders.push_back(std::move(who));
        }
        return status;
    }

    std::shared_ptr<segment> segment_;
    const std::uint32_t mode_;
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
    return std::make_shared<shm_store>(std::make_shared<segment>(name, options.slots, options.mode),
                                       options.mode);
}

bool remove_shm_segment(const std::string& name) {
    return ::unlink((std::string(shm_dir) + "/" + name).c_str()) == 0;
}

std::string shm_permits_segment(const std::string& segment, std::string_view name) {
    return permits_path(segment, name).substr(std::string(shm_dir).size() + 1);
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

std::vector<std::string> shm_options::backends() const {
    return {"shm:" + (segment.empty() ? default_shm_segment() : segment)};
}

}  // namespace locksmith::strategies
