// SPDX-License-Identifier: MIT
#include "supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include <locksmith/author/caller_deadline.hpp>

#include "cli_common.hpp"
#include "inherited_fds.hpp"

namespace locksmith::cli {

namespace {

using clock = std::chrono::steady_clock;

[[noreturn]] void throw_os_error(const std::string& what, int err) {
    throw cli_error(EX_OSERR, what + ": " + std::strerror(err));
}

// Owns a file descriptor.
class fd_guard {
  public:
    explicit fd_guard(int fd = -1) noexcept : fd_(fd) {}
    ~fd_guard() { reset(); }
    fd_guard(const fd_guard&) = delete;
    fd_guard& operator=(const fd_guard&) = delete;
    int get() const noexcept { return fd_; }
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

  private:
    int fd_;
};

const char* signal_name(int sig) {
    switch (sig) {
        case SIGINT:
            return "SIGINT";
        case SIGTERM:
            return "SIGTERM";
        case SIGHUP:
            return "SIGHUP";
        case SIGKILL:
            return "SIGKILL";
        default:
            return strsignal(sig);
    }
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return EX_SOFTWARE;
}

// True when the terminal sent `info` to our whole foreground process group and the child is in
// that group too, so it already received the signal itself.
bool child_already_got_it(const signalfd_siginfo& info, pid_t child) {
    if (info.ssi_code != SI_KERNEL) return false;
    pid_t child_group = ::getpgid(child);
    return child_group >= 0 && child_group == ::getpgrp();
}

// Whether some PATH directory has an entry called `name` (for a name without '/').
bool exists_in_path(const std::string& name) {
    if (name.find('/') != std::string::npos) return true;
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/bin:/usr/bin";
    while (true) {
        auto colon = dirs.find(':');
        std::string dir(dirs.substr(0, colon));
        if (dir.empty()) dir = ".";
        struct stat st;
        if (::stat((dir + "/" + name).c_str(), &st) == 0) return true;
        if (colon == std::string_view::npos) return false;
        dirs.remove_prefix(colon + 1);
    }
}

// Starts the child with vfork: no copy of locksmith's page tables and no copy-on-write faults
// afterwards, which is most of the cost of fork() for a short command (see
// bench/cli/RESULTS.md). The child shares our memory until it execs, so it only makes system
// calls on data prepared before the vfork, and leaves with _exit.
pid_t start_child(const std::vector<std::string>& argv, const sigset_t& original_mask) {
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    char* const* child_argv = args.data();

    // The child reports a failed exec through this pipe; a successful exec closes it (CLOEXEC)
    // and the parent reads end-of-file.
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_os_error("cannot create a pipe", errno);
    fd_guard read_end(pipe_fds[0]);
    fd_guard write_end(pipe_fds[1]);
    const int report_fd = pipe_fds[1];
    // The command gets the descriptors locksmith was given and none of its own (the lock's
    // sockets, files and the client libraries' pipes, close-on-exec or not): planned here, done
    // in the child, which also closes what another thread opens meanwhile.
    const std::vector<fd_range> to_close = fds_to_close(report_fd);
    const unsigned fallback_last = largest_fd();

    const pid_t parent = ::getpid();
    const pid_t pid = ::vfork();
    if (pid < 0) throw_os_error("cannot start a process", errno);
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        // locksmith died before prctl took effect: the lock is already gone.
        if (::getppid() != parent) ::_exit(128 + SIGTERM);
        ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
        close_fd_ranges(to_close.data(), to_close.size(), fallback_last);
        ::execvp(child_argv[0], child_argv);
        int err = errno;
        ssize_t ignored = ::write(report_fd, &err, sizeof err);
        (void)ignored;
        ::_exit(err == ENOENT ? exit_not_found : exit_not_executable);
    }
    write_end.reset();
    int err = 0;
    ssize_t n;
    do {
        n = ::read(read_end.get(), &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof err)) {
        int status;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        bool not_found = err == ENOENT || err == ENOTDIR;
        if (err == EACCES && !exists_in_path(argv[0])) {
            // execvp reports EACCES for a PATH directory it may not search (e.g. /root/... for
            // another user) even when no such command exists anywhere: that is "not found".
            not_found = true;
            err = ENOENT;
        }
        throw cli_error(not_found ? exit_not_found : exit_not_executable,
                        "cannot run " + argv[0] + ": " + std::strerror(err));
    }
    return pid;
}

// Longest time a release that failed transiently (its server unreachable) is tried again after
// the command ended. A lease can outlive a release that failed while its server was down: etcd
// renews every lease to its full TTL when it starts again, whatever the outage's length, so the
// lock's TTL bounds nothing there, and once locksmith has exited nobody is left to release it.
// Bounded by what an admin waits for an exit status rather than by the TTL (5 min by default).
constexpr auto release_retry = std::chrono::seconds(10);

// Whether a stop request (SIGINT, SIGTERM, SIGHUP) came within `wait`; other signals are dropped.
bool stop_requested_within(int signals_fd, clock::duration wait) {
    const auto until = clock::now() + wait;
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now());
        if (left.count() <= 0) return false;
        pollfd pfd = {signals_fd, POLLIN, 0};
        if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
        signalfd_siginfo info;
        while (::read(signals_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
            if (info.ssi_signo != SIGCHLD) return true;
    }
}

bool transient(const std::exception& e) {
    const auto* b = dynamic_cast<const backend_error*>(&e);
    return b != nullptr && b->transient();
}

// Releases `lock` after the command, and says "released" only when that is true. A release that
// fails transiently (the server away) is tried again every 200 ms for `retry_for` (0: never),
// until a stop request; said once. A release that fails may leave the lock held, blocking everyone
// else: the caller exits with exit_release_failed then, and the message says how the command itself
// ended, which that code replaces. After a lost lock, a failed release is expected and only
// reported, and every attempt ends with the retries (at least release_retry from now): a lock
// lost on a stalled network (a request that waits for its whole command timeout) must not keep
// `run` there longer. Returns false when the release failed and the lock was not lost.
bool release(named_lock& lock, std::optional<int> command_status, bool lost, bool verbose,
             clock::duration retry_for = {}, int signals_fd = -1) {
    const auto give_up_at = clock::now() + retry_for;
    std::optional<request_deadline_scope> bounded;
    if (lost) bounded.emplace(clock::now() + std::max<clock::duration>(retry_for, release_retry));
    bool said = false;
    try {
        for (;;) {
            try {
                lock.release();
                break;
            } catch (const std::exception& e) {
                constexpr auto pause = std::chrono::milliseconds(200);
                if (!transient(e) || clock::now() + pause > give_up_at ||
                    stop_requested_within(signals_fd, pause))
                    throw;
                if (!said) {
                    print_error("releasing the lock " + lock.name() + " failed: " + e.what() +
                                "\ntrying again for up to " + format_seconds(retry_for) +
                                " (SIGINT, SIGTERM or SIGHUP: stop now)");
                    said = true;
                }
            }
        }
    } catch (const std::exception& e) {
        // The destructor would try again and report the same failure a second time.
        lock.set_auto_release(false);
        std::string message = "releasing the lock " + lock.name() + " failed: " + e.what();
        if (lost) {
            print_error(message);
            return true;
        }
        if (command_status) {
            message += "\nthe command exited with status " + std::to_string(*command_status);
        }
        message += "\nthe lock may still be held; see: locksmith status " + lock.name();
        print_error(message);
        return false;
    }
    // After a loss there was nothing of ours left to release.
    if (verbose && !lost) print_note("released " + lock.name());
    return true;
}

}  // namespace

int supervise_child(named_lock& lock, const std::vector<std::string>& argv,
                    const supervise_options& options) {
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the child before waitpid.
    ::signal(SIGCHLD, SIG_DFL);

    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, sig);
    sigset_t original_mask;
    // Blocked for the rest of the process's life: a signal that comes after the child ended
    // waits in the queue instead of killing locksmith before it has released the lock.
    if (::sigprocmask(SIG_BLOCK, &handled, &original_mask) != 0) {
        throw_os_error("cannot block signals", errno);
    }
    fd_guard signals(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
    if (signals.get() < 0) throw_os_error("cannot create a signalfd", errno);

    // Expiring strategies: the library renews the lock (the lock's auto_refresh) and makes
    // loss_fd() readable at the lease's end unless a renewal was confirmed by then, whatever a
    // stuck renewal is doing (issue 25): the loop below watches it as it watches a session.
    const bool expiring = has(lock.capabilities(), capability::expiring);
    if (expiring) {
        if (auto left = lock.remaining_lifetime(); left && *left <= std::chrono::milliseconds(0)) {
            print_error("the lock " + lock.name() +
                        " expired before the command could start; not starting it");
            release(lock, std::nullopt, true, options.verbose);
            if (options.report) options.report->lost = true;
            return options.lost_exit_code;
        }
    }

    const pid_t child =
        start_child(argv, options.command_mask ? *options.command_mask : original_mask);
    // The child's end is also watched through a pidfd: SIGCHLD goes to any thread that does not
    // block it — a plugin's or a client library's thread started without blocking signals —
    // and there, ignored by default, it never reaches the signalfd: `run` would wait forever
    // for a command that has ended. Without pidfds (before Linux 5.3) the loop looks every
    // 100 ms instead.
    fd_guard child_ended(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
    if (options.verbose) {
        print_note("started " + argv[0] + " (pid " + std::to_string(child) + ")");
    }
    // From here a stop request is read from the signalfd, not acted on by default.
    if (options.started) options.started();

    bool lost = false;
    bool killed = false;
    clock::time_point kill_at{};
    int status = 0;
    // After news on the loss descriptor that was no loss: when it may be looked at again.
    clock::time_point watch_loss_from{};

    auto lose = [&](const std::string& why) {
        lost = true;
        print_error("lost the lock " + lock.name() + ": " + why + "; sending SIGTERM to pid " +
                    std::to_string(child));
        ::kill(child, SIGTERM);
        kill_at = clock::now() + options.kill_after;
    };

    // The backend had news for the lock (or it cannot be watched): is it still ours? A loss is
    // acted on like an expired lease. News that was no loss is not looked at again for a
    // moment, so that a descriptor that stays readable cannot make this loop spin.
    auto check_loss = [&] {
        constexpr auto quiet_after_news = std::chrono::milliseconds(100);
        try {
            if (lock.is_acquired()) {
                watch_loss_from = clock::now() + quiet_after_news;
                return;
            }
            lose(expiring ? "no renewal was confirmed before its lease ran out, or it was "
                            "taken over"
                          : "the " + lock.strategy() +
                                " server no longer has it (the session or connection that held "
                                "it ended, or the grant was removed)");
        } catch (const std::exception& e) {
            lose(std::string("it could not be confirmed after news from the server: ") + e.what());
        }
    };

    for (;;) {
        // Reap first: SIGCHLD may already be queued, and waitpid is the source of truth.
        pid_t done = ::waitpid(child, &status, WNOHANG);
        if (done == child) break;
        if (done < 0 && errno != EINTR) throw_os_error("waitpid", errno);

        auto now = clock::now();
        if (lost && !killed && now >= kill_at) {
            print_error("pid " + std::to_string(child) + " still running after " +
                        format_seconds(options.kill_after) + "; sending SIGKILL");
            ::kill(child, SIGKILL);
            killed = true;
        }

        // Strategies whose backend can end a grant (a session or connection the server
        // closes): its descriptor turns readable when the backend's notice arrives, and the
        // store is then asked. -1: known gone already. Asked for anew each time: an answer may
        // replace it.
        std::optional<int> loss_fd;
        if (!lost && now >= watch_loss_from) {
            try {
                loss_fd = lock.loss_fd();
            } catch (const std::exception& e) {
                loss_fd = -1;  // cannot be watched: asked (below) at most every quiet_after_news
                if (options.verbose)
                    print_note(std::string("cannot watch the lock for a loss: ") + e.what());
            }
        }
        if (loss_fd && *loss_fd < 0) {
            check_loss();
            continue;
        }

        // Sleep until a signal or the backend's notice arrives, or the next timed step is due.
        int timeout_ms = -1;
        auto due = clock::time_point::max();
        if (lost && !killed) due = std::min(due, kill_at);
        if (!lost && !loss_fd && now < watch_loss_from) due = std::min(due, watch_loss_from);
        if (due != clock::time_point::max()) {
            auto wait = std::chrono::ceil<std::chrono::milliseconds>(due - clock::now());
            timeout_ms = static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 60'000));
        }
        if (child_ended.get() < 0 && (timeout_ms < 0 || timeout_ms > 100)) timeout_ms = 100;
        pollfd pfds[3] = {{signals.get(), POLLIN, 0},
                          {child_ended.get(), POLLIN, 0},
                          {loss_fd.value_or(-1), POLLIN, 0}};
        int ready = ::poll(pfds, loss_fd ? 3 : 2, timeout_ms);
        if (ready < 0 && errno != EINTR) throw_os_error("poll", errno);
        if (ready <= 0) continue;
        if (loss_fd && pfds[2].revents != 0) check_loss();
        if (pfds[0].revents == 0) continue;

        signalfd_siginfo info;
        while (::read(signals.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            int sig = static_cast<int>(info.ssi_signo);
            if (sig == SIGCHLD) continue;  // reaped at the top of the loop
            if (child_already_got_it(info, child)) {
                if (options.verbose) {
                    print_note(std::string(signal_name(sig)) +
                               " from the terminal reached the child directly");
                }
                continue;
            }
            if (options.verbose) {
                print_note(std::string("forwarding ") + signal_name(sig) + " to pid " +
                           std::to_string(child));
            }
            ::kill(child, sig);
        }
    }

    if (options.verbose) {
        if (WIFSIGNALED(status)) {
            print_note("pid " + std::to_string(child) + " was killed by " +
                       signal_name(WTERMSIG(status)));
        } else {
            print_note("pid " + std::to_string(child) + " exited with status " +
                       std::to_string(exit_code_of(status)));
        }
    }
    if (!lost && expiring) {
        // The child may have finished after the lease ran out, unprotected for a while.
        auto left = lock.remaining_lifetime();
        if (!left || *left <= std::chrono::milliseconds(0)) {
            lost = true;
            print_error("the lock " + lock.name() + " expired before the command finished");
        }
    }
    if (!lost) {
        // A lock removed or taken over meanwhile (a simple lock file broken by another process
        // as stale) would "release" without error: ask the store first. A store that cannot
        // answer (a server that did not answer in time) saw no loss, but the command's end is
        // not covered either: said as what it is, and exited as a loss.
        bool held = true;
        try {
            held = lock.is_acquired();
        } catch (const std::exception& e) {
            lost = true;
            print_error("the lock " + lock.name() +
                        " could not be confirmed when the command ended: " + e.what());
        }
        if (!held) {
            lost = true;
            print_error("the lock " + lock.name() +
                        " was no longer held when the command ended: another process removed "
                        "or took it over");
        }
    }
    const int code = exit_code_of(status);
    const bool released = release(lock, code, lost, options.verbose, release_retry, signals.get());
    if (options.report) *options.report = {code, lost, !released};
    if (!released) return exit_release_failed;
    return lost ? options.lost_exit_code : code;
}

stop_requests::stop_requests() {
    sigset_t watched;
    sigemptyset(&watched);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction current {};
        if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
            sigaddset(&watched, sig);
    }
    if (const int err = ::pthread_sigmask(SIG_BLOCK, &watched, &original_mask_); err != 0)
        throw_os_error("cannot block signals", err);
    signals_ = ::signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    stop_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (signals_ < 0 || stop_ < 0) {
        const int err = errno;
        hand_over();
        throw_os_error("cannot watch signals", err);
    }
    watcher_ = std::thread([this] { watch(); });
}

void stop_requests::hand_over() noexcept {
    {
        std::lock_guard<std::mutex> lock(handing_over_);
        if (handed_over_) return;
        handed_over_ = true;
    }
    if (watcher_.joinable()) {
        const std::uint64_t one = 1;
        (void)!::write(stop_, &one, sizeof one);
        watcher_.join();
    }
    for (int fd : {signals_, stop_})
        if (fd >= 0) ::close(fd);
}

void stop_requests::watch() {
    for (;;) {
        pollfd p[2] = {{signals_, POLLIN, 0}, {stop_, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
        if (p[1].revents != 0) return;
        signalfd_siginfo info;
        if (::read(signals_, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) continue;
        const int sig = static_cast<int>(info.ssi_signo);
        std::lock_guard<std::mutex> lock(handing_over_);
        if (handed_over_) {
            // The lock may be held now: the request is supervise_child's to forward.
            ::kill(::getpid(), sig);
            return;
        }
        // What the default action would have done: end the process by this signal.
        ::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        ::raise(sig);
        ::_exit(128 + sig);
    }
}

}  // namespace locksmith::cli
