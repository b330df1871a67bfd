// SPDX-License-Identifier: MIT
// Helpers for tests that fork: a pipe to pass single bytes between parent and child (the
// synchronisation, instead of sleeps), and fork/wait with a safety timeout so a broken lock
// makes a test fail instead of hanging CTest.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace locksmith::test {

// A pipe whose ends close on destruction. Each end can be closed early, e.g. by a child that
// only reads, so that closing the last write end is seen as EOF by every reader.
class byte_pipe {
  public:
    byte_pipe();
    ~byte_pipe();
    byte_pipe(const byte_pipe&) = delete;
    byte_pipe& operator=(const byte_pipe&) = delete;

    // Returns false when the write failed (reader gone).
    bool put(char c);
    // Waits up to `timeout` for one byte. nullopt on timeout or EOF.
    std::optional<char> get(std::chrono::milliseconds timeout);
    void close_read();
    void close_write();

  private:
    int read_fd_ = -1;
    int write_fd_ = -1;
};

// Forks; the child runs `body` and _exit()s with its result (exceptions give 120, so the parent
// sees them as a failure). The child never returns into the test framework, and an alarm
// kills it after `limit` so that a stuck child cannot outlive the test.
// Requires: this process runs no other thread (a child forked beside threads may call only
// async-signal-safe functions, and `body` calls anything); checked, after waiting up to 15 s
// for threads that end by themselves (combined's member requests).
// Returns the child's pid in the parent. Throws std::system_error when fork fails,
// std::logic_error when this process runs other threads.
pid_t fork_child(const std::function<int()>& body,
                 std::chrono::seconds limit = std::chrono::seconds(30));

// The threads this process runs now (/proc/self/status), -1 when unknown.
int threads_of_this_process();

// For a case that needs a process of its own that none of the earlier cases touched (no renewal
// thread yet, ...), where fork_child cannot help once threads run: the case runs itself alone in
// a new process (this executable, exec()ed at once after the fork, --run_test=<the case>).
//   if (!running_alone()) { BOOST_TEST(run_alone_in_a_fresh_process() == 0); return; }
// running_alone(): this process is that new process.
bool running_alone();
// The new process's exit status (0: the case passed), as wait_child() gives it.
int run_alone_in_a_fresh_process(std::chrono::seconds limit = std::chrono::seconds(60));

// Another local user to act as, for the tests that check what one user can do to another's
// locks: `nobody`, with its primary group and no supplementary groups.
struct local_user {
    uid_t uid = 0;
    gid_t gid = 0;
};

// nobody, when this process may become it (it runs as root); nullopt otherwise, with `why`
// saying so. Tests that need it skip with that reason, and fail under CI=true (CI runs as root).
std::optional<local_user> another_local_user(std::string* why = nullptr);

// Like fork_child, but the child first becomes `user` (setgroups, setgid, setuid: no way back)
// and exits 121 when it cannot.
pid_t fork_child_as(const local_user& user, const std::function<int()>& body,
                    std::chrono::seconds limit = std::chrono::seconds(30));

// Runs `body` without root's privileges, for checks of what an ordinary user may not do (root
// may do anything): in this process when it is not root, else in a child forked as
// another_local_user(). Returns what `body` returned (through the child's exit status), or
// nullopt with `why` when root has no other user to become (the caller skips).
std::optional<int> run_unprivileged(const std::function<int()>& body, std::string* why = nullptr);

// Waits for `pid` at most `timeout`, killing it with SIGKILL after that.
// Returns its exit status, 128+signal when a signal ended it, or -1 on timeout or error.
int wait_child(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// wait_child's status in words, for a failed check: "exit 3", "exit 120 (an exception: see
// its stderr)", "signal 14 (SIGALRM: fork_child's time limit passed)", "signal 9 (Killed)".
std::string exit_text(int status);

}  // namespace locksmith::test
