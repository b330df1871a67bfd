// SPDX-License-Identifier: MIT
// The `simple` strategy: a lock file created with O_CREAT|O_EXCL (TYPO3's SimpleLockStrategy),
// with an owner record, stale-owner detection and safe breaking.
//
//   simple_options     lock directory, max_age, grace for half-written files
//   make_simple_store  checks the directory and returns the store
//
// Contract:
//  - Owner: the key's token, written into the lock file with host name, process id, the
//    process's start time and the boot id. Whoever has the token owns the lock, so a serialized
//    key can be continued and released by another process (serializable), and a lock object may
//    move between threads. Two lock objects for the same name exclude each other everywhere.
//  - Waiting: none in the backend; named_lock polls with backoff (no native_wait).
//  - Release removes the file only if it still holds our token, so a lock broken as stale and
//    taken by somebody else is never removed by its old owner.
//  - Crash: nothing releases a dead holder's file (no crash_release), but the next attempt breaks
//    it: a lock whose owner process is gone (same host, boot and pid namespace: pid dead, or
//    reused, which the process start time tells; same host, other boot: always) is stale. With
//    `max_age`, a lock older than that is stale on any host, even if its owner lives: choose it
//    longer than any critical section. Locks of other hosts are otherwise never broken.
//  - Breaking is serialised by an fcntl OFD lock on one byte (picked by the name's hash) of the
//    guard file `<lock_dir>/.locksmith-simple.guard`; a breaker re-reads the file under that lock
//    and removes it only if it still is the stale owner's, and release does its token check
//    under the same lock. Acquisition is always the O_EXCL create, so two processes racing to
//    break the same stale lock can never both hold it.
//  - Continuing a serialized key in another process: call acquire() (try_lock) there; it finds
//    its own token and records the new process as the owner, so the lock does not look stale
//    when the first process exits. Until then the first process must stay alive, and it must not
//    release: set_auto_release(false) there, since the token is all that identifies the owner.
//  - Bad files: a file that is empty or cut short is a create in progress while it is younger
//    than `write_grace` (held), and the remains of a crash afterwards (stale). A file that is not
//    a locksmith lock file is never removed: acquire throws backend_error naming it.
//  - Files: `<lock_dir>/<readable prefix>.<128-bit hash of the name>.slock`, mode 0600, opened
//    with O_NOFOLLOW, present only while held; plus the one guard file. After any number of
//    names, the directory holds (locks and permits currently held) + 1 entries, plus a limit file
//    per name used as a semaphore, and a temporary `.<hash>.<token>.tmp` per process that died
//    during a takeover or a limit file's write (rare).
//  - Works on NFS (O_EXCL and rename are atomic on NFSv3+); the guard needs working fcntl locks.
//  - lock_dir: must be absolute; checked as for `file` (open_lock_directory() in
//    strategy_support.hpp), default default_lock_dir(), shared with `file` (`.slock` files do
//    not clash with its `.lock` files). With shared_group, lock and guard files are made 0660 so
//    that the group's users can judge and remove each other's locks.
//  - Release waits at most write_grace for the guard, then throws release_error, as it does when
//    the lock file cannot be removed (the lock then stays held).
//  - Counting semaphores (`counting`, named_semaphore): permit i (1..N, at most 1000) of a name
//    is a lock file of its own, `<prefix>.<hash>.permit-<i>.slock`, taken and released exactly
//    as a lock file (O_EXCL create, token checked under the guard, stale slots broken by the
//    next grant: a killed holder's permit comes back then, not at once), its record also naming
//    the limit. A grant tries slots 1..N in order, so only those can be held, on NFS too. The
//    limit is kept in `<prefix>.<hash>.slimit`, written under a temporary name and linked at its
//    name by the name's first user (link(2) fails when another first user won; atomic on NFS)
//    and never changed; an owner of another limit is invalid_argument_error naming both and the
//    file, and so is one that finds a live slot whose record names another limit (a limit file
//    removed while permits are held lets no second limit in). It stays until removed (`rm`
//    while no permit is held). A limit file that is not one (a symlink, another file type or
//    content, a limit outside 1..1000) is backend_error naming it, never followed or replaced;
//    a slot file that is not a record, as a lock file. Waiting: polled by named_lock, as locks
//    (a release on this host wakes the waiters); not fair. A semaphore's key cannot be
//    serialized (named_semaphore has no serialize_key).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

struct simple_options {
    // Directory of the lock files; empty = the default (see above).
    std::filesystem::path lock_dir;
    // Locks older than this are stale on any host; 0 = never break a lock by age.
    std::chrono::milliseconds max_age{0};
    // How long an empty or truncated lock file counts as a create in progress. > 0.
    // Also bounds the wait for the guard file (release throws release_error after it).
    std::chrono::milliseconds write_grace{2000};
    // A group to share lock_dir with (locks between users); empty = private to the user.
    std::string shared_group;

    // Reads {"lock_dir": "/path", "shared_group": "name", "max_age_s": 3600,
    // "write_grace_s": 2}; throws config_error.
    static simple_options from_json(const nlohmann::json& options);
    // Where the locks live (strategy_descriptor::backends): the lock directory ("dir:/path").
    std::vector<std::string> backends() const;
};

// Throws invalid_argument_error naming what is wrong with lock_dir.
std::shared_ptr<store> make_simple_store(const simple_options& options = {});

// The lock file a name maps to in `lock_dir` (for tests and `locksmith status`).
std::filesystem::path simple_lock_path(const std::filesystem::path& lock_dir,
                                       std::string_view name);

}  // namespace locksmith::strategies
