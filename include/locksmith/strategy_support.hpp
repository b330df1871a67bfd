// Helpers for strategy authors: what several strategies need and must do alike.
//
//   name_hash / stable_name_hash  a 128-bit hash of a lock name that every build and version
//                                 computes alike, for mapping names to files, slots, semaphores
//   lock_file_name                a safe single path component for a lock name
//   fork_generation / current_pid per-process facts cached without a system call, and
//                                 refreshed in a fork()ed child
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace locksmith {

// Not cryptographic: a crafted collision makes two names share one lock (less concurrency),
// never breaks mutual exclusion. Changing the function would make two versions of locksmith
// map one name to two locks, so it never changes.
struct name_hash {
    std::uint64_t high = 0;
    std::uint64_t low = 0;
    bool operator==(const name_hash&) const = default;
    // 32 lowercase hex digits.
    std::string hex() const;
};

name_hash stable_name_hash(std::string_view name) noexcept;

// "<readable prefix>.<hash hex><suffix>": the prefix (up to 32 characters of [A-Za-z0-9._-] from
// the name) helps an admin who lists the directory; the hash makes any name (with '/', "..",
// NUL, any length) one safe path component.
std::string lock_file_name(std::string_view name, std::string_view suffix);

// A counter that changes in the child at every fork(): a cache tagged with it knows when it
// was filled by the parent.
std::uint64_t fork_generation() noexcept;

// getpid(), cached per thread (a lock+unlock fast path should make no extra system call).
pid_t current_pid() noexcept;

}  // namespace locksmith
