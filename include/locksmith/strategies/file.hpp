// The `file` strategy: flock(2) on one file per lock name.
//
// Contract:
//  - Owner: the open file description. Two named_lock objects exclude each other even in one
//    thread; the kernel, not the process, arbitrates, so threads and processes are alike. A lock
//    object may move between threads.
//  - Crash: the kernel drops the lock when the holder's last descriptor closes (crash_release).
//    The descriptor is O_CLOEXEC, so child processes do not inherit it.
//  - Waiting: an unbounded wait blocks in flock(2); a bounded wait polls with the lock's
//    backoff (flock has no timeout, and signals would disturb the caller).
//  - Promotion and demotion convert the flock in place. The kernel does not convert atomically:
//    a failed non-blocking promotion re-takes the read lock, and if a writer slipped in between,
//    the read lock is lost and acquire_error says so.
//  - Files: `<lock_dir>/<readable prefix>.<sha1 of the name>.lock`, mode 0600, opened with
//    O_NOFOLLOW. A file is removed by the last owner that frees it; holders check after every
//    grant that their file is still linked, so removal never breaks mutual exclusion. A holder
//    killed while holding leaves its file until the next use of that name frees it.
//  - lock_dir: must be a directory (not a symlink), writable, and not writable by others unless
//    sticky. The default, $XDG_RUNTIME_DIR/locksmith or else /tmp/locksmith-<uid>, is created
//    0700 and must be owned by the user.
#pragma once

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include <locksmith/store.hpp>

namespace locksmith::strategies {

struct file_options {
    // Directory of the lock files; empty = locksmith::default_lock_dir() (strategy_support.hpp).
    std::filesystem::path lock_dir;

    // Reads {"lock_dir": "/path"}; throws config_error.
    static file_options from_json(const nlohmann::json& options);
};

// Throws invalid_argument_error naming what is wrong with lock_dir.
std::shared_ptr<store> make_file_store(const file_options& options = {});

}  // namespace locksmith::strategies
