// SPDX-License-Identifier: MIT
// Counting semaphores of the `shm` strategy (private to strategies/shm/): one small segment per
// name, /dev/shm/<segment>.permits.<hash of the name>, holding the limit and one robust mutex per
// permit.
//
// Why a mutex per permit, not a counter: a counter is not robust. A holder killed with its
// permit would leave the count raised for ever, and telling a dead holder from a live one by its
// pid fails for a zombie and for a reused pid. A robust mutex is given back by the kernel when its
// owner dies (the next locker gets EOWNERDEAD), so a killed holder's permit comes back at once,
// as a killed holder's shm lock does.
//
// Waiting: a waiter that finds every permit held sleeps in futex_waitv(2) (Linux 5.16) on the
// lock words of all of them, after setting their FUTEX_WAITERS bit, the bit glibc's own waiters
// set. Both ways a permit comes free then wake it: an unlock by its holder (glibc wakes a waiter
// when the bit is set), and the death of its holder (the kernel's robust-list clean-up wakes one
// too). futex_waitv takes at most 128 words, hence at most 128 permits per name. On an older
// kernel (ENOSYS) the waiter polls with backoff instead.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "shm_segment.hpp"

namespace locksmith::strategies::shm {

inline constexpr std::uint64_t permits_magic = 0x706d74736d6b636cull;  // "lckmstmp"
inline constexpr std::uint32_t permits_version = 1;
// futex_waitv(2) waits on at most 128 words (FUTEX_WAITV_MAX), one per permit.
inline constexpr std::uint32_t max_permits = 128;

struct permit_slot {
    pthread_mutex_t mutex;
    // Written by the holder while it holds the mutex; cleared before it unlocks (for status).
    std::atomic<std::int32_t> holder_pid{0};
    std::atomic<std::int32_t> holder_tid{0};
};

struct permit_header {
    std::uint64_t magic = permits_magic;
    std::uint32_t version = permits_version;
    // The name's one limit, set when the segment is created and never changed.
    std::uint32_t limit = 0;
};

// The file of `name`'s permits in segment `segment`: /dev/shm/<segment>.permits.<hash hex>.
std::string permits_path(const std::string& segment, std::string_view name);

// Bytes of a permit segment of `limit` permits.
std::size_t permits_size(std::uint32_t limit);

// One mapping of a name's permit segment. Created as the lock segment is (publish_new_segment:
// complete in an unnamed file, then linked at its name); what is found at the name must be a
// regular file of this user's granting nothing beyond `mode`, with a valid header (magic, version,
// 1 <= limit <= 128) and room for its permits. Never unmapped while the process may hold one of its
// mutexes (the store keeps every mapping it made).
class permit_file {
  public:
    // Opens the segment at `path`, creating it with `limit` permits when `create` and absent.
    // The limit found may differ from `limit`: the caller compares. Throws backend_error.
    permit_file(std::string path, std::uint32_t limit, std::uint32_t mode, bool create);
    ~permit_file();
    permit_file(const permit_file&) = delete;
    permit_file& operator=(const permit_file&) = delete;

    const std::string& path() const noexcept { return path_; }
    std::uint32_t limit() const noexcept { return limit_; }
    permit_slot& slot(std::uint32_t i) noexcept { return slots_[i]; }

    // Sleeps until a permit may have come free (a holder unlocked or died), `until` passes or
    // a slice of 2 s ends. Returns immediately when one is free already. Returns false when
    // the kernel has no futex_waitv (the caller polls).
    bool wait(deadline until);
    // For the permit `i` this thread took after waiting: sets FUTEX_WAITERS on its lock word, so
    // that its unlock wakes the next sleeper (glibc's rule for a lock taken after a wait).
    void keep_waking(std::uint32_t i);
    // For a waiter that leaves without a permit: wakes one sleeper of each permit that has
    // some, since the wake-up this waiter may have taken was meant for whoever comes next.
    void pass_on_wake_ups();

    // Whether the segment was removed from /dev/shm since it was opened (an administrator's rm):
    // its permits no longer exclude anyone who opens the name anew.
    bool unlinked() const;

    // Permits held now (by a live holder).
    std::uint32_t held() const;

  private:
    [[noreturn]] void fail(const std::string& code, const std::string& what) const;
    void map_existing(int fd, std::uint32_t mode);
    bool create_and_publish(std::uint32_t limit, std::uint32_t mode);
    void map(void* base, std::size_t size);

    std::string path_;
    int fd_ = -1;
    void* base_ = nullptr;
    std::size_t size_ = 0;
    std::uint32_t limit_ = 0;  // read once: later writes to the file by its owner change nothing
    permit_slot* slots_ = nullptr;
};

}  // namespace locksmith::strategies::shm
