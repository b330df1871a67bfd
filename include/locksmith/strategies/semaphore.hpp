// SPDX-License-Identifier: MIT
// The `semaphore` strategy: System V semaphores with SEM_UNDO.
//
//   semaphore_options     IPC key, number of semaphores, permissions
//   make_semaphore_store  opens (or creates and initialises) the semaphore set
//
// Contract:
//  - Kernel objects: ONE semaphore set of `semaphores` semaphores per IPC key, created on first
//    use and never removed by locksmith, so `ipcs -s` shows exactly one set per key however many
//    names are used. A name's hash picks one semaphore of the set. Two names that share a
//    semaphore cost each other concurrency (one waits while the other is held), never mutual
//    exclusion. Within one process, names sharing a semaphore do not block each other (a local
//    table hands the kernel semaphore on), so nesting two such names cannot self-deadlock.
//  - Owner: the process. Across processes the kernel arbitrates; inside a process a local table
//    makes two lock objects for the same name exclude each other, in one thread or several. A
//    lock object may move between threads of its process (SEM_UNDO is per process).
//  - Crash: SEM_UNDO makes the kernel give the semaphore back when the holder process dies
//    (crash_release): the next waiter wakes at once.
//  - Waiting: a few tries with IPC_NOWAIT first (brief_retries: the kernel hands each release to
//    its oldest sleeper, a context switch per grant), then in the kernel with semtimedop
//    (native_wait); IPC_NOWAIT for try_lock.
//  - Fork: a child does not inherit SEM_UNDO adjustments; it must not release its parent's locks
//    (disable auto-release in the child).
//  - Set removed by an administrator (`ipcrm -s`) while locks are held or waited for: every
//    waiter and the next release get backend_error (EIDRM/EINVAL), nobody hangs; the next
//    acquire creates a fresh set.
//  - Never removes a semaphore under a waiter: the set lives until an administrator removes it
//    (`ipcrm -S <key>`) or the machine reboots.
//  - An existing set keeps its size: every process uses the set's actual number of semaphores,
//    so a configuration that differs cannot break exclusion.
//  - Counting semaphores (capability counting, named_semaphore): one more set per name, of two
//    semaphores, at semaphore_permit_key(): the permits left (initialised to the limit, taken
//    and given back with SEM_UNDO, so that the kernel gives back the permits of a holder that
//    dies, at once) and the limit, written with the values before the set is marked ready
//    (sem_otime, as for the lock set). An owner whose limit differs from the set's gets
//    invalid_argument_error naming both and the `ipcrm -S` that resets it; limits up to 32767
//    (SEMVMX). The set is checked as the lock set is (created and owned by this user, no mode
//    beyond `mode`). Waiting as for locks (a few tries, then semtimedop; the kernel serves its
//    sleepers in order). A semaphore and a lock of one name are separate. Two names whose keys
//    collide share one set: one limit for both (or a mismatch error), never more holders.
//    Owner: the process; a permit object may move between threads; any number of permits may be
//    held by one process. Not serializable; no TTL, no fencing.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

struct semaphore_options {
    // The System V IPC key of the set; 0 = default_semaphore_key() (derived from the user id).
    // Must not be IPC_PRIVATE. 1..2^31-1.
    std::int32_t key = 0;
    // Semaphores in the set when it is created: how many names can be held at once without
    // sharing one. 1..32000 (the kernel's SEMMSL may be lower).
    std::uint32_t semaphores = 128;
    // Permission bits of a newly created set (0600: only this user).
    std::uint32_t mode = 0600;

    // Reads {"key": 123, "semaphores": 128, "mode": 384}; throws config_error.
    static semaphore_options from_json(const nlohmann::json& options);
};

// A key derived from "locksmith" and the user id, so users do not share a set by accident.
std::int32_t default_semaphore_key();

// The IPC key of the set that holds the permits of the counting semaphore `name`, for the store
// whose `key` option is `key` (0 = default_semaphore_key()): for `ipcs -s -k` and `ipcrm -S`.
std::int32_t semaphore_permit_key(std::int32_t key, std::string_view name);

// Opens or creates the set. Throws backend_error (limits reached, permission denied, a set of
// that key that another program created with a different shape).
std::shared_ptr<store> make_semaphore_store(const semaphore_options& options = {});

}  // namespace locksmith::strategies
