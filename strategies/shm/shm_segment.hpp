// SPDX-License-Identifier: MIT
// The shared-memory segment of the `shm` strategy (private to strategies/shm/).
//
//   shm_slot, shm_table  what the segment holds: one table (header and table mutex), then slots
//   lock_robust          locks one of its robust mutexes, recovering one whose owner died
//   segment              one mapping: creates or opens and checks the segment, and keeps the
//                        slots' bookkeeping (references, tombstones, reclaiming a full table)
//
// Layout: the segment (/dev/shm/<name>) holds one shm_table followed by an array of shm_slot. A
// name's 128-bit hash picks a home slot; linear probing finds the slot that holds that hash, or a
// free one. The table mutex guards slot bookkeeping (state, hash, refs) and is held only for a
// few loads and stores; the slot mutex is the lock itself (shm_store.cpp).
#pragma once

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <locksmith/author/store.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>

namespace locksmith::strategies::shm {

inline constexpr const char* strategy_name = "shm";
inline constexpr std::uint64_t table_magic = 0x6c6f636b736d7368ull;  // "locksmsh"
inline constexpr std::uint32_t table_version = 2;  // 1: inside a Boost.Interprocess segment
inline constexpr std::uint32_t max_slots = 1u << 20;

enum class slot_state : std::uint32_t { empty = 0, used = 1, tombstone = 2 };

struct shm_slot {
    pthread_mutex_t mutex;
    // Guarded by the table mutex.
    slot_state state = slot_state::empty;
    std::uint32_t refs = 0;  // owners holding or about to wait for this slot
    name_hash hash{};
    // Changes under the table mutex, and only while the slot mutex is held or nobody holds it in
    // this generation (see shm_store.cpp). Read without the table mutex by lockers.
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

// Where glibc's shm_open keeps POSIX shared memory objects. The segment is opened as a file there
// so that it can be created complete under a temporary identity and published atomically.
inline constexpr const char* shm_dir = "/dev/shm";

// Closes a descriptor on every path out.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// A segment just created and linked at its name: its descriptor and mapping, the caller's.
struct new_segment {
    int fd;
    void* base;
};

// Creates the segment of `size` bytes at `path` (in shm_dir), complete before anyone can open
// it: built in an unnamed file (O_TMPFILE) of mode `mode`, every page reserved, mapped, filled
// by `init(base)`, and only then linked at `path`. Nobody finds a half-initialised segment, and a
// creator that dies leaves nothing behind. `what` names the segment in errors; `when_full` says
// what to do about a full shm_dir.
// Returns nullopt when another process linked one at `path` first (use that one).
// Throws backend_error.
std::optional<new_segment> publish_new_segment(const std::string& path, std::size_t size,
                                               std::uint32_t mode, const std::string& what,
                                               const std::string& when_full,
                                               const std::function<void(void*)>& init);

// Every mutex in a segment: process-shared (it lives in shared memory), robust (a dead owner is
// reported, not inherited forever) and error-checking (relocking or unlocking from the wrong
// thread returns an error instead of deadlocking or corrupting the mutex).
void init_robust_mutex(pthread_mutex_t* m);

std::string octal_mode(unsigned mode);

// Why a file found at a segment's name, `st` being its fstat, must not be used: it has another
// name (a hard link), belongs to another user or grants more than `mode` (anyone who can map it
// can unlock or hold every mutex in it). "" when it may be used.
std::string foreign_file_refusal(const struct stat& st, std::uint32_t mode);

enum class lock_result { acquired, recovered, busy, timed_out, self_deadlock };

// Locks a robust mutex: one try (`try_only`), or waiting until the monotonic deadline `until`
// (deadline::max() = without bound).
lock_result lock_robust(pthread_mutex_t* m, bool try_only, deadline until);

// Unlocks a mutex that lock_robust locked; returns pthread_mutex_unlock's result.
int unlock_robust(pthread_mutex_t* m);

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
            bool create = true);
    ~segment();
    segment(const segment&) = delete;
    segment& operator=(const segment&) = delete;

    const std::string& name() const noexcept { return name_; }
    std::uint32_t slot_count() const noexcept { return table_->slot_count; }
    shm_slot& slot(std::uint32_t i) noexcept { return slots_[i]; }
    pthread_mutex_t* table_mutex() noexcept { return &table_->mutex; }

    // Takes a reference on the slot of `h`, allocating one when no slot holds it.
    // Returns the slot index and its generation. Throws backend_error when the table is full.
    std::pair<std::uint32_t, std::uint64_t> reference(const name_hash& h);

    // Drops a reference taken by reference(); frees the slot with the last one. Safe without the
    // slot mutex: a holder has a reference of its own, so the count cannot reach 0 under it.
    void unreference(std::uint32_t index, std::uint64_t generation);

    // After EOWNERDEAD: the dead holder's reference is gone with it.
    void drop_dead_holder(std::uint32_t index);

    // Slots in use (for leak tests).
    std::uint32_t in_use();

    // Slots examined by a lookup of an absent name, averaged over the home slots: the distance to
    // the first empty slot, plus one (the whole table when none is empty).
    double average_probes();

    // The slot of `h`, if one is in use; for status().
    std::optional<std::uint32_t> find(const name_hash& h);

  private:
    void free_locked(std::uint32_t index);

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
    void clean_tombstones_locked();

    // The table is full: frees every used slot whose mutex nobody holds. Its references belong
    // to idle lock objects or waiters that have not locked yet (they notice the new generation
    // and start over), or to processes that died. Returns how many slots were freed.
    std::uint32_t reclaim_locked();

    [[noreturn]] void fail(const std::string& code, const std::string& what) const;

    // Checks what was found at the name, then maps it.
    void map_existing(int fd, std::uint32_t mode);

    // Creates the segment (publish_new_segment). Returns false when another process linked one
    // there first.
    bool create_and_publish(std::uint32_t slots, std::uint32_t mode);

    void map(void* base, std::size_t size);

    std::string name_;
    std::string path_;
    shm_table* table_ = nullptr;
    shm_slot* slots_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace locksmith::strategies::shm
