// SPDX-License-Identifier: MIT
#include "support/child_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

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

int threads_of_this_process() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (f == nullptr) return -1;
    int n = -1;
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr)
        if (std::sscanf(line, "Threads: %d", &n) == 1) break;
    std::fclose(f);
    return n;
}

namespace {

// The threads a sanitizer's runtime started before main() (AddressSanitizer's background
// thread, with hard_rss_limit_mb): they hold none of the program's locks.
const int threads_at_start = std::max(1, threads_of_this_process());

// The names of this process's threads (/proc/self/task/*/comm), for a message.
std::string thread_names() {
    std::string names;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            char comm[64] = "?";
            const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
            if (std::FILE* f = std::fopen(path.c_str(), "r")) {
                if (std::fgets(comm, sizeof comm, f) != nullptr) comm[std::strcspn(comm, "\n")] = 0;
                std::fclose(f);
            }
            names += (names.empty() ? "" : ", ") + std::string(comm) + " (" + e->d_name + ")";
        }
        ::closedir(d);
    }
    return names;
}

}  // namespace

pid_t fork_child(const std::function<int()>& body, std::chrono::seconds limit) {
    // The child runs `body`: C++, malloc, stdio, the library. After a fork beside other threads
    // it may call async-signal-safe functions only: a lock another thread held at the fork
    // (malloc's arena, ASan's allocator, stdio, a library mutex) stays held in the child, which
    // then hangs at its first use of it. Under ASan that happened (issue 28).
#ifdef __SANITIZE_THREAD__
    // ThreadSanitizer's own background thread, started with the first thread and never ended;
    // its runtime locks everything of its own around fork().
    const int own_threads = threads_at_start + 1;
#else
    const int own_threads = threads_at_start;
#endif
    // Threads that end by themselves are waited for: combined's member requests that still run
    // after their round was decided (a member's command timeout bounds them).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    int threads = threads_of_this_process();
    while (threads > own_threads && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        threads = threads_of_this_process();
    }
    if (threads > own_threads)
        throw std::logic_error(
            "fork_child: this process still runs " + std::to_string(threads) +
            " threads after 15 s (" + thread_names() +
            "), and the child would run code that is not async-signal-safe beside their "
            "locks: fork before starting threads (test servers run in processes of their own: "
            "support/hostile_server.hpp)");
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

namespace {
constexpr const char* alone_variable = "LOCKSMITH_TEST_RUNNING_ALONE";
}

bool running_alone() {
    const char* alone = std::getenv(alone_variable);
    return alone != nullptr &&
           alone == boost::unit_test::framework::current_test_case().full_name();
}

int run_alone_in_a_fresh_process(std::chrono::seconds limit) {
    const std::string name = boost::unit_test::framework::current_test_case().full_name();
    // Everything the child needs is made before the fork: between fork and exec it calls only
    // async-signal-safe functions (this process may run threads).
    const std::string run_test = "--run_test=" + name;
    const std::string marker = std::string(alone_variable) + "=" + name;
    char self[] = "/proc/self/exe";
    std::vector<char*> argv = {self, const_cast<char*>(run_test.c_str()), nullptr};
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e)
        if (std::strncmp(*e, alone_variable, std::strlen(alone_variable)) != 0) envp.push_back(*e);
    envp.push_back(const_cast<char*>(marker.c_str()));
    envp.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        ::execve(self, argv.data(), envp.data());
        ::_exit(127);
    }
    return wait_child(pid, limit);
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

std::string exit_text(int status) {
    if (status < 0) return "still running at the wait's end (killed then)";
    if (status == 120) return "exit 120 (an exception: see its stderr)";
    if (status <= 128) return "exit " + std::to_string(status);
    const int sig = status - 128;
    std::string text = "signal " + std::to_string(sig);
    if (sig == SIGALRM) return text + " (SIGALRM: fork_child's time limit passed)";
    if (const char* name = ::strsignal(sig)) text += std::string(" (") + name + ")";
    return text;
}

}  // namespace locksmith::test
