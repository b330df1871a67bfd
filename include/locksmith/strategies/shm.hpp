// SPDX-License-Identifier: MIT
// The `shm` strategy: a fixed table of robust, process-shared mutexes in one named shared-memory
// segment (/dev/shm/<segment>).
//
//   shm_options     segment name, slot count, permissions
//   make_shm_store  opens (or creates) the segment and returns the store
//
// Contract:
//  - Owner: the thread that acquired. Each lock name maps to a slot holding a pthread mutex with
//    PTHREAD_MUTEX_ROBUST | PTHREAD_PROCESS_SHARED | PTHREAD_MUTEX_ERRORCHECK. POSIX requires a
//    mutex to be unlocked by the thread that locked it, so a named_lock on this strategy must be
//    released by the thread that acquired it. Releasing from another thread (or from a forked
//    child) throws release_error naming the owning thread and leaves the lock held; it never
//    reaches undefined behaviour. Acquire and release in the same thread; do not move a held lock.
//  - Two lock objects for the same name exclude each other across processes and threads. In one
//    thread, a second object's try_lock returns false, a bounded wait waits out its deadline and
//    returns false, and an unbounded lock() throws acquire_error (it could only deadlock).
//  - Crash: when the holder dies, the kernel marks the mutex; the next locker gets EOWNERDEAD,
//    makes it consistent and holds the lock at once (crash_release). Data the dead holder was
//    protecting may be half-updated: that is the application's to check.
//  - Waiting: in the kernel (futex), bounded by pthread_mutex_clocklock on CLOCK_MONOTONIC.
//    The uncontended path makes no system call.
//  - Names: a 128-bit hash of the name picks a slot (linear probing). Distinct names whose hashes
//    collide would share a slot: that costs concurrency, never exclusion. A lock object keeps its
//    slot from its first acquire until it is destroyed (so lock+unlock on it touches nothing
//    else); a slot is freed when the last lock object for its name, in any process, goes away.
//    After any number of distinct names, the slots in use are the names that have a live lock
//    object somewhere, plus those of crashed processes until they are reclaimed.
//  - Full: when no slot is free, acquiring a new name first reclaims every slot whose mutex is
//    free (idle lock objects and crashed processes lose nothing but a table lookup); only when
//    every slot is held or waited for does it throw backend_error ("segment full").
//  - Left on the system: the segment /dev/shm/<segment> (about 80 bytes per slot). It is never
//    removed by locksmith (another process may use it); remove it with
//    shm_remove/`rm /dev/shm/<segment>` when no process has it open. A segment that already exists
//    keeps its slot count; the option only applies when the segment is created. Every page of
//    a new segment is reserved before it is mapped: in a full /dev/shm creating it throws
//    backend_error saying so, instead of a SIGBUS at the first touch of a page.
//  - Counting semaphores (`counting`, named_semaphore): one more segment per name,
//    /dev/shm/<segment>.permits.<hash of the name> (shm_permits_segment), holding the limit and
//    one robust mutex per permit; a permit is one of them, owned by the acquiring thread as a
//    lock is. Crash: the kernel gives a killed holder's permits back (EOWNERDEAD), at once.
//    Waiting: in futex_waitv(2) on every permit's lock word, woken by an unlock and by a holder's
//    death alike (Linux 5.16; older kernels poll with backoff). The limit is set when the segment
//    is created and never changes: another limit is invalid_argument_error naming both and the
//    file; at most 128 permits (futex_waitv's 128 words). The segment is checked as the lock
//    segment is (this user's, no mode beyond `mode`, no symlink, no second name) and its header
//    as read (magic, version, limit, size). It stays until removed (`rm`), one per name ever used
//    as a semaphore; removed while held, the holder's permit counts as lost (is_acquired, on_lost).
//  - Not offered: `shared` (there is no robust process-shared read/write lock in POSIX) and
//    `serializable` (a mutex belongs to a thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

struct shm_options {
    // Name of the POSIX shared-memory object (no '/'); empty = "locksmith-<uid>".
    std::string segment;
    // Number of lock slots, used when the segment is created: the most names that can be held
    // (or waited for) at the same time. 1..1,048,576.
    std::uint32_t slots = 4096;
    // Permission bits of a newly created segment (0600: only this user).
    std::uint32_t mode = 0600;

    // Reads {"segment": "name", "slots": 4096, "mode": 384}; throws config_error.
    static shm_options from_json(const nlohmann::json& options);
    // Where the locks live (strategy_descriptor::backends): the segment ("shm:name", the
    // object /dev/shm/name).
    std::vector<std::string> backends() const;
};

// "locksmith-<uid>".
std::string default_shm_segment();

// Opens or creates the segment. Throws backend_error when it cannot be created or mapped, or
// when an existing object of that name is not a locksmith segment.
std::shared_ptr<store> make_shm_store(const shm_options& options = {});

// Removes the segment's name (processes that have it mapped keep using it). For tests and
// administrators. Returns false when it did not exist.
bool remove_shm_segment(const std::string& segment);

// The segment that keeps the permits of the counting semaphore `name` (its limit and one robust
// mutex per permit): "<segment>.permits.<hash of the name>" in /dev/shm. For tests and
// administrators (remove_shm_segment removes it).
std::string shm_permits_segment(const std::string& segment, std::string_view name);

// How many slots of an existing segment are in use (held, waited for, or leaked by a crash and
// not yet reclaimed). For leak tests and `locksmith status`. Throws backend_error when the
// segment does not exist.
std::uint32_t shm_slots_in_use(const std::string& segment);

// How many slots a lookup of a name that is not in the table examines, on average over the home
// slots: 1 in an empty table. For tests of the table's upkeep; throws like shm_slots_in_use.
double shm_average_probes(const std::string& segment);

}  // namespace locksmith::strategies
