// SPDX-License-Identifier: MIT
// The `file` strategy: flock(2) on one file per lock name; OFD locks on one file per counting
// semaphore.
//
// Contract:
//  - Owner: the open file description. Two named_lock objects exclude each other even in one
//    thread; the kernel, not the process, arbitrates, so threads and processes are alike. A lock
//    object may move between threads.
//  - Crash: the kernel drops the lock when the holder's last descriptor closes (crash_release).
//    The descriptor is O_CLOEXEC, so child processes do not inherit it.
//  - Waiting: an unbounded wait tries a few times without sleeping (brief_retries: a release
//    wakes every sleeper, a context switch each), then blocks in flock(2); a bounded wait polls
//    with the lock's backoff (flock has no timeout, and signals would disturb the caller).
//  - Promotion and demotion convert the flock in place. The kernel does not convert atomically:
//    a failed non-blocking promotion re-takes the read lock, and if a writer slipped in between,
//    the read lock is lost and acquire_error says so.
//  - Files: `<lock_dir>/<readable prefix>.<hash of the name>.lock`, mode 0600 (0660 in a shared
//    directory), opened with O_NOFOLLOW; only their first byte is ever written (the mark set
//    before the file is removed), and only in a file that passed the checks below. The owner
//    object's end removes the file when this owner was its last (an exclusive owner always, the
//    last reader too), as Symfony's FlockStore does, so a file exists only while someone holds
//    or waits for it; holders check after every grant that their file is still linked, so
//    removal never breaks mutual exclusion. A holder killed while holding leaves its file until
//    the next use of that name; so does an owner that cannot write the mark (a full file
//    system). A later grant reads the mark through a mapping, without a system call, only in a
//    file that nobody else may write (a shared directory's group could cut it short) and whose
//    page could be reserved; otherwise it calls fstat(2): never a SIGBUS.
//    A file at the lock path that is not a regular file, has more than one hard link, or
//    belongs to another user (and, in a shared directory, not to the shared group) is refused
//    with backend_error naming it.
//  - lock_dir: see open_lock_directory() in strategy_support.hpp for the checks (a directory
//    that only the caller and root can write to, or a deliberately shared one). The default is
//    default_lock_dir(): /run/locksmith for root, /run/lock/locksmith-<uid> (or
//    /tmp/locksmith-<uid> where there is no /run/lock) for other users, created 0700.
//    A configured lock_dir that does not exist is created (0700, or 2770 when shared).
//  - Counting semaphores (`counting`, named_semaphore): one more file per name,
//    `<lock_dir>/<readable prefix>.<hash>.permits`, whose header keeps the limit (written before
//    the file is linked at its name; another limit is invalid_argument_error naming both and the
//    file); permit i is an OFD write lock (F_OFD_SETLK) on byte 64 + i, so a permit belongs to
//    the owner object's open file description, as a flock does: numbered 1..N, at most 4096.
//    Crash: the kernel drops a dead holder's locks when its descriptor closes. Waiting: in
//    poll(2) on an inotify watch of the file, never spinning: a release writes the file's wake
//    byte when a waiter announced itself (a read lock on its waiting byte), and a holder's closed
//    descriptor is reported too (after it, a waiter retries a few times over ~100 ms: the kernel
//    reports the close before it drops the locks). Every waiter wakes (no queue: not fair).
//    Without an inotify instance (the per-user limit) a waiter polls with backoff. The permits
//    file is checked as a lock file is (not a symlink, one link, ours or the shared group's) and
//    must be writable by nobody else, its header as read. It stays until removed (`rm`); removed
//    while held, the holder's permit counts as lost. A forked child cannot release its parent's
//    permit (release_error).
//  - shared_group: share lock_dir with that group's users: the directory must belong to the
//    group (mode 2770 is what locksmith creates) and lock files are made 0660.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

struct file_options {
    // Directory of the lock files; empty = locksmith::default_lock_dir() (strategy_support.hpp).
    std::filesystem::path lock_dir;
    // A group to share lock_dir with (locks between users); empty = private to the user.
    std::string shared_group;

    // Reads {"lock_dir": "/path", "shared_group": "name"}; throws config_error.
    static file_options from_json(const nlohmann::json& options);
    // Where the locks live, for combined's check that no two members share it
    // (strategy_descriptor::backends): the lock directory ("dir:/path").
    std::vector<std::string> backends() const;
};

// Throws invalid_argument_error naming what is wrong with lock_dir.
std::shared_ptr<store> make_file_store(const file_options& options = {});

}  // namespace locksmith::strategies
