// Helpers for strategy authors: what several strategies need and must do alike.
//
//   name_hash / stable_name_hash  a 128-bit hash of a lock name that every build and version
//                                 computes alike, for mapping names to files, slots, semaphores
//   lock_file_name                a safe single path component for a lock name
//   fork_generation / current_pid per-process facts cached without a system call, and
//                                 refreshed in a fork()ed child
//   lock_directory                the checked, open directory of a file-based strategy
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
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

// The directory of a file-based strategy's lock files, opened once with O_NOFOLLOW so that lock
// files are created relative to it (openat) and a symlink swapped in later cannot redirect them.
class lock_directory {
public:
    lock_directory(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
    ~lock_directory();
    lock_directory(const lock_directory&) = delete;
    lock_directory& operator=(const lock_directory&) = delete;
    int fd() const noexcept { return fd_; }
    const std::filesystem::path& path() const noexcept { return path_; }

private:
    int fd_;
    std::filesystem::path path_;
};

// $XDG_RUNTIME_DIR/locksmith when XDG_RUNTIME_DIR is set, else /tmp/locksmith-<uid>.
std::filesystem::path default_lock_dir();

// Opens `configured`, or default_lock_dir() (created 0700) when it is empty, and checks it: a
// directory, not a symlink, writable, not writable by everyone unless sticky; the default must
// also be owned by this user and private.
// Throws invalid_argument_error naming `strategy` and what is wrong.
std::shared_ptr<const lock_directory> open_lock_directory(const std::filesystem::path& configured,
                                                          std::string_view strategy);

}  // namespace locksmith
