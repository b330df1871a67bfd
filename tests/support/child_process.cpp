#include "support/child_process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>
#include <thread>

namespace locksmith::test {

byte_pipe::byte_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
}

byte_pipe::~byte_pipe() {
    close_read();
    close_write();
}

bool byte_pipe::put(char c) {
    if (write_fd_ < 0) return false;
    for (;;) {
        ssize_t n = ::write(write_fd_, &c, 1);
        if (n == 1) return true;
        if (n < 0 && errno == EINTR) continue;
        return false;
    }
}

std::optional<char> byte_pipe::get(std::chrono::milliseconds timeout) {
    if (read_fd_ < 0) return std::nullopt;
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() < 0) return std::nullopt;
        pollfd p{read_fd_, POLLIN, 0};
        int r = ::poll(&p, 1, int(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return std::nullopt;
        char c;
        ssize_t n = ::read(read_fd_, &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) continue;
        return std::nullopt;  // EOF or error
    }
}

void byte_pipe::close_read() {
    if (read_fd_ >= 0) ::close(read_fd_);
    read_fd_ = -1;
}

void byte_pipe::close_write() {
    if (write_fd_ >= 0) ::close(write_fd_);
    write_fd_ = -1;
}

pid_t fork_child(const std::function<int()>& body, std::chrono::seconds limit) {
    std::fflush(nullptr);  // otherwise buffered output would be written twice
    pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid > 0) return pid;
    ::alarm(unsigned(limit.count()));
    int code = 120;
    try {
        code = body();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", int(::getpid()), e.what());
    } catch (...) {
        std::fprintf(stderr, "child %d: unknown exception\n", int(::getpid()));
    }
    std::fflush(nullptr);
    // _exit: the child must not run the parent's atexit handlers or the test framework's.
    ::_exit(code);
}

std::optional<local_user> another_local_user(std::string* why) {
    if (::geteuid() != 0) {
        if (why) *why = "needs root, to act as another local user (nobody)";
        return std::nullopt;
    }
    const passwd* pw = ::getpwnam("nobody");
    if (pw == nullptr || pw->pw_uid == 0) {
        if (why) *why = "there is no unprivileged user 'nobody' on this machine";
        return std::nullopt;
    }
    return local_user{pw->pw_uid, pw->pw_gid};
}

pid_t fork_child_as(const local_user& user, const std::function<int()>& body,
                    std::chrono::seconds limit) {
    return fork_child(
        [&] {
            if (::setgroups(0, nullptr) != 0 || ::setgid(user.gid) != 0 ||
                ::setuid(user.uid) != 0) {
                std::perror("fork_child_as: dropping privileges");
                return 121;
            }
            return body();
        },
        limit);
}

std::optional<int> run_unprivileged(const std::function<int()>& body, std::string* why) {
    if (::geteuid() != 0) return body();
    auto user = another_local_user(why);
    if (!user) return std::nullopt;
    return wait_child(fork_child_as(*user, body));
}

int wait_child(pid_t pid, std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        int status = 0;
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
            return -1;
        }
        if (r < 0 && errno != EINTR) return -1;
        if (std::chrono::steady_clock::now() >= until) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace locksmith::test
