// SPDX-License-Identifier: MIT
// supervise_child: runs a command while a lock is held, and keeps the lock honest meanwhile.
//
// Signals: SIGINT, SIGTERM and SIGHUP are blocked and read from a signalfd, together with
// SIGCHLD, so no work happens in a signal handler and none is lost between checks. Each is
// forwarded to the child, except one the terminal sent to the whole foreground process group
// (the child already has it; sending it twice would, e.g., abort a shell's cleanup trap).
// Expiring locks are renewed by the library (the lock must have auto_refresh), and their
// loss_fd() turns readable at the lease's end unless a renewal was confirmed by then, however long
// a renewal is stuck on a dead network; a lock whose backend can end the grant (pg_advisory,
// mysql_get_lock, zookeeper: named_lock::loss_fd) is checked when the backend's notice arrives.
// When the lease ran out unrenewed, a renewal found the lock gone, or the backend ended the grant,
// the child gets SIGTERM and, after `kill_after`, SIGKILL, and the lost-lock code is returned. If
// locksmith itself dies (even by SIGKILL), the kernel sends the child SIGTERM (PR_SET_PDEATHSIG):
// the lock is gone then, so the child must not go on unprotected.
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/named_lock.hpp>

namespace locksmith::cli {

struct supervise_options {
    // Between SIGTERM and SIGKILL when the lock is lost (consul lock's 5 s).
    std::chrono::nanoseconds kill_after = std::chrono::seconds(5);
    int lost_exit_code = 75;
    bool verbose = false;
    // Called once the child runs and SIGINT, SIGTERM and SIGHUP are read by the supervision
    // (`hold` says "held" only then, so that a stop request never kills it holding the lock).
    std::function<void()> started;
    // Filled, when not null, with how it ended (run --json): the command's exit status (128 + N
    // for signal N; unset when it never started), whether the lock was lost, and whether the
    // release failed with the lock not known lost.
    struct outcome {
        std::optional<int> command_status;
        bool lost = false;
        bool release_failed = false;
    };
    outcome* report = nullptr;
    // The signal mask the command starts with (stop_requests::original_mask()); null: this
    // thread's mask before supervise_child blocked its signals.
    const sigset_t* command_mask = nullptr;
};

// Stop requests (SIGINT, SIGTERM, SIGHUP) from before the lock is asked for until
// supervise_child reads them: blocked in this thread from construction, so that every thread
// started afterwards — a plugin's, a client library's — inherits the block. The kernel hands a
// signal sent to the process to any thread that does not block it, and there the default action
// would end locksmith, the lock held and its command orphaned (issue 23). Until hand_over(), a
// thread of this object's own takes them from a signalfd and ends the process as the default
// action would (nothing is held yet: a waiting run stops, as before); a signal the caller left
// ignored stays ignored. From hand_over() they wait in the queue for supervise_child.
class stop_requests {
  public:
    // Throws cli_error(EX_OSERR) when the signals cannot be blocked or watched.
    stop_requests();
    ~stop_requests() { hand_over(); }
    stop_requests(const stop_requests&) = delete;
    stop_requests& operator=(const stop_requests&) = delete;

    // Stops ending the process on a stop request: one taken meanwhile is queued again.
    void hand_over() noexcept;
    // This thread's mask before the constructor blocked the stop requests.
    const sigset_t& original_mask() const noexcept { return original_mask_; }

  private:
    void watch();

    sigset_t original_mask_;
    int signals_ = -1;  // a signalfd of the stop requests
    int stop_ = -1;     // an eventfd: hand_over() was called
    std::mutex handing_over_;
    bool handed_over_ = false;
    std::thread watcher_;
};

// Runs `argv` (argv[0] looked up in PATH) with the caller's environment, waits for it and
// releases `lock` afterwards, however the child ended.
// Requires: `lock` is held; `argv` is not empty.
// Returns: the child's exit status; 128 + N when signal N ended it (as a shell reports it);
//   options.lost_exit_code when the lock was lost while the child ran; exit_release_failed
//   when releasing the lock afterwards failed (it may still be held). Never says "released"
//   (with -v) unless the release succeeded.
// Throws: cli_error(127) when the command was not found, cli_error(126) when it could not be
//   executed, cli_error(EX_OSERR) when fork or the signal setup failed.
int supervise_child(named_lock& lock, const std::vector<std::string>& argv,
                    const supervise_options& options);

}  // namespace locksmith::cli
