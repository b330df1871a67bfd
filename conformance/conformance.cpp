// SPDX-License-Identifier: MIT
#include <locksmith/conformance.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <ostream>
#include <regex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/named_semaphore.hpp>

namespace locksmith::conformance {
namespace {

using namespace std::chrono_literals;

struct case_failed {
    std::string what;
};
struct case_skipped {
    std::string why;
};

void expect(bool ok, const std::string& what) {
    if (!ok) throw case_failed{what};
}

double ms_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
        .count();
}
std::string ms(double milliseconds) {
    return std::to_string(std::lround(milliseconds));
}

// A lock name no other run uses, so that leftovers of an earlier run do not matter.
std::string fresh_name(const std::string& label) {
    static int counter = 0;
    return "conformance-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" +
           label;
}

// The descriptors of this process that an exec passes on (no FD_CLOEXEC), with what each is.
std::map<int, std::string> inheritable_fds() {
    std::map<int, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(e.path().filename().string());
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;  // the iterator's own is CLOEXEC
        std::error_code ec;
        out[fd] = std::filesystem::read_symlink(e.path(), ec).string();
    }
    return out;
}

// What a command exec()ed now gets: the descriptor numbers a shell has, read through a pipe on
// its standard output (sorted as numbers).
std::optional<std::vector<int>> fds_of_an_exec() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return std::nullopt;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(p[1], 1);  // dup2 leaves the copy inheritable
        // ls, a child of the shell: a glob would list the shell's descriptor of the folder too.
        ::execl("/bin/sh", "sh", "-c", "ls /proc/$$/fd", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(p[1]);
    std::string text;
    char buffer[512];
    for (ssize_t n; (n = ::read(p[0], buffer, sizeof buffer)) > 0;) text.append(buffer, n);
    ::close(p[0]);
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || status != 0) return std::nullopt;
    std::vector<int> out;
    for (std::size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
        out.push_back(std::stoi(text.substr(at, end - at)));
    std::sort(out.begin(), out.end());
    return out;
}

// ---- a server that misbehaves on purpose, whatever protocol the client speaks ----
enum class misbehaviour { silent, trickle, nonsense, hang_up };
constexpr misbehaviour every_misbehaviour[] = {misbehaviour::silent, misbehaviour::trickle,
                                               misbehaviour::nonsense, misbehaviour::hang_up};

const char* name_of(misbehaviour b) {
    switch (b) {
        case misbehaviour::silent:
            return "accepts and never answers";
        case misbehaviour::trickle:
            return "trickles a byte every 100 ms";
        case misbehaviour::nonsense:
            return "answers nonsense";
        case misbehaviour::hang_up:
            return "hangs up at once";
    }
    return "?";
}

// Listens on 127.0.0.1 (a port of the kernel's choice) in a forked process that makes system
// calls only (the kit's process may run a plugin's threads) and treats every connection as
// `b` says, until destroyed.
class hostile_listener {
  public:
    explicit hostile_listener(misbehaviour b) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof a;
        const bool listening = fd >= 0 &&
                               ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                               ::listen(fd, 64) == 0 &&
                               ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0;
        if (!listening) {
            if (fd >= 0) ::close(fd);
            throw case_failed{"could not listen on 127.0.0.1"};
        }
        port_ = ntohs(a.sin_port);
        pid_ = ::fork();
        if (pid_ == 0) serve(fd, b);
        ::close(fd);
        if (pid_ < 0) throw case_failed{"fork failed"};
    }
    ~hostile_listener() {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    hostile_listener(const hostile_listener&) = delete;
    hostile_listener& operator=(const hostile_listener&) = delete;
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  private:
    [[noreturn]] static void serve(int listener, misbehaviour b) {
        constexpr int most = 64;
        pollfd fds[most + 1] = {{listener, POLLIN, 0}};
        int open = 0;
        std::uint64_t seed = 42;
        for (;;) {
            if (::poll(fds, nfds_t(open + 1), 100) < 0 && errno != EINTR) ::_exit(1);
            if (b == misbehaviour::trickle)
                for (int i = 1; i <= open; ++i) (void)!::send(fds[i].fd, "a", 1, MSG_NOSIGNAL);
            for (int i = 1; i <= open; ++i) {
                if (fds[i].revents == 0) continue;
                char in[4096];
                const ssize_t n = ::recv(fds[i].fd, in, sizeof in, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                    ::close(fds[i].fd);
                    fds[i--] = fds[open--];
                    continue;
                }
                if (b == misbehaviour::nonsense && n > 0) {
                    char out[4096];
                    for (auto& c : out) {
                        seed = seed * 6364136223846793005u + 1442695040888963407u;
                        c = char(seed >> 56);
                    }
                    (void)!::send(fds[i].fd, out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT);
                }
            }
            if ((fds[0].revents & POLLIN) != 0) {
                const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
                if (c >= 0 && (b == misbehaviour::hang_up || open == most)) {
                    ::close(c);
                } else if (c >= 0) {
                    fds[++open] = {c, POLLIN, 0};
                }
            }
        }
    }

    int port_ = 0;
    pid_t pid_ = -1;
};

// Waits at most `bound` for `pid`, killing it after that. Its exit status, 128 + N when signal
// N ended it, or -1 when it had to be killed.
int wait_within(pid_t pid, std::chrono::milliseconds bound) {
    const auto until = std::chrono::steady_clock::now() + bound;
    for (;;) {
        int status = 0;
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (done < 0 && errno != EINTR) return -1;
        if (std::chrono::steady_clock::now() >= until) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
            }
            return -1;
        }
        std::this_thread::sleep_for(20ms);
    }
}

class runner {
  public:
    explicit runner(const subject& s) : subject_(s), factory_(make_config(s), registry()) {
        info_ = factory_.registry().info(s.strategy);
    }

    // One case: its name, what a strategy needs for it to apply, and its body.
    struct case_def {
        const char* name;
        capability needs;         // every bit must be among the strategy's capabilities
        capability needs_absent;  // none of these may be
        bool needs_processes;     // the strategy's locks span processes
        void (runner::*body)();
    };
    static const std::vector<case_def>& cases();

    outcome run_one(const case_def& c, std::ostream* log) {
        outcome o{c.name, outcome::verdict::passed, ""};
        try {
            if (!has(info_.capabilities, c.needs))
                throw case_skipped{"the case needs " + to_string(c.needs)};
            if ((info_.capabilities & c.needs_absent) != capability::none)
                throw case_skipped{"the case is for strategies without " +
                                   to_string(c.needs_absent)};
            if (c.needs_processes && !info_.descriptor.spans_processes)
                throw case_skipped{"the strategy's locks live in one process"};
            (this->*c.body)();
        } catch (const case_failed& f) {
            o = {c.name, outcome::verdict::failed, f.what};
        } catch (const case_skipped& s) {
            o = {c.name, outcome::verdict::skipped, s.why};
        } catch (const std::exception& e) {
            o = {c.name, outcome::verdict::failed, std::string("threw: ") + e.what()};
        }
        if (log) {
            static constexpr const char* words[] = {"PASS", "FAIL", "SKIP"};
            *log << words[int(o.result)] << ' ' << subject_.strategy << '/' << o.name
                 << (o.detail.empty() ? "" : ": " + o.detail) << '\n';
        }
        return o;
    }
    static bool applies(const case_def& c, capability caps, bool spans_processes) {
        return has(caps, c.needs) && (caps & c.needs_absent) == capability::none &&
               (!c.needs_processes || spans_processes);
    }

  private:
    static config make_config(const subject& s) {
        nlohmann::json doc{{"plugins", s.plugins},
                           {"strategies", {{s.strategy, {{"enabled", true}}}}}};
        if (!s.options.is_null()) doc["strategies"][s.strategy]["options"] = s.options;
        return config::parse(doc.dump(), "conformance config for " + s.strategy);
    }
    // The process registry: plugins register into it once, however many runs there are.
    static strategy_registry& registry() { return default_registry(); }

    named_lock make(const std::string& name, std::chrono::milliseconds ttl = 30s) {
        lock_request r;
        r.strategy = subject_.strategy;
        r.ttl = ttl;
        return factory_.create_lock(name, r);
    }
    // The strategy's store, as the factory shares it between its locks.
    store& st() {
        if (!store_) store_ = factory_.store_for(subject_.strategy);
        return *store_;
    }

    void store_matches_descriptor() {
        auto lock = make(fresh_name("caps"));
        expect(lock.strategy() == subject_.strategy,
               "the store calls itself '" + lock.strategy() + "'");
        expect(lock.capabilities() == info_.capabilities,
               "the store offers " + to_string(lock.capabilities()) + ", the descriptor " +
                   to_string(info_.capabilities));
    }
    void exclusive_between_owners() {
        const auto name = fresh_name("exclusive");
        auto a = make(name), b = make(name);
        expect(a.try_lock(), "the first owner did not get a free lock");
        expect(!b.try_lock(), "a second owner got a lock that was held");
        expect(a.try_lock(), "the holder's second try_lock failed");  // re-entry, not counted
        a.release();                                                  // one release frees it
        expect(b.try_lock(), "a second owner did not get the lock after its release");
        expect(!a.try_lock(), "the first owner got the lock back while the second held it");
        b.release();
    }
    void names_are_independent() {
        auto a = make(fresh_name("one")), b = make(fresh_name("two"));
        expect(a.try_lock() && b.try_lock(), "holding one name blocked another");
        a.release();
        b.release();
    }
    void release_is_idempotent() {
        auto a = make(fresh_name("idempotent"));
        a.release();  // not held: no error
        expect(a.try_lock(), "could not lock");
        a.release();
        a.release();
        expect(!a.is_acquired(), "still acquired after release");
    }
    void reacquire_after_release() {
        auto a = make(fresh_name("again"));
        for (int i = 0; i < 3; ++i) {
            expect(a.try_lock(), "round " + std::to_string(i) + ": could not lock");
            expect(a.is_acquired(), "round " + std::to_string(i) + ": not acquired after lock");
            a.release();
        }
    }
    void blocking_lock_waits_for_release() {
        const auto name = fresh_name("wait");
        auto a = make(name), b = make(name);
        expect(a.try_lock(), "could not lock");
        expect(!b.try_lock(), "a second owner got a lock that was held");
        // Set just before the release: a waiter that returns while it is false got the lock
        // from a holder that still held it.
        std::atomic<bool> releasing{false};
        // The waiter releases in its own thread: a lock may belong to its thread (shm's).
        auto waiter = std::async(std::launch::async, [&] {
            b.lock();
            const bool early = !releasing;
            const bool got = b.is_acquired();
            b.release();
            return std::pair{got, early};
        });
        std::this_thread::sleep_for(50ms);  // lets the waiter block first; not a check
        releasing = true;
        a.release();
        // A safety net, not a timing assertion: a waiter that never wakes is a failure.
        expect(waiter.wait_for(60s) == std::future_status::ready,
               "a blocked owner did not get the lock within 60 s of its release");
        const auto [got, early] = waiter.get();
        expect(got, "the waiter returned without the lock");
        expect(!early, "lock() returned before the holder released");
    }
    void bounded_wait_times_out() {
        const auto name = fresh_name("bounded");
        auto holder = make(name), waiter = make(name);
        expect(holder.try_lock(), "could not lock");
        auto start = std::chrono::steady_clock::now();
        expect(!waiter.try_lock_for(200ms), "a bounded wait got a lock that was held");
        auto waited = ms_since(start);
        expect(waited >= 195, "try_lock_for(200 ms) gave up after " + ms(waited) + " ms");
        expect(!waiter.held_mode().has_value(), "a waiter that timed out holds the lock");
        expect(holder.is_acquired(), "the holder lost its lock to a waiter that timed out");
        start = std::chrono::steady_clock::now();
        expect(!waiter.try_lock_until(start + 100ms), "a bounded wait got a lock that was held");
        waited = ms_since(start);
        expect(waited >= 95, "try_lock_until(now + 100 ms) gave up after " + ms(waited) + " ms");
        holder.release();
    }
    // Each grant's token is larger than every earlier grant's (capability `fencing`).
    void fencing_tokens_increase() {
        const auto name = fresh_name("fencing");
        std::uint64_t last = 0;
        for (int i = 0; i < 5; ++i) {
            const std::string grant = "grant " + std::to_string(i);
            auto lock = make(name);
            expect(lock.acquire(), grant + ": could not lock");
            const auto token = lock.fencing_token();
            expect(token.has_value(), grant + ": no fencing token");
            expect(*token > last,
                   grant + ": token " + std::to_string(*token) + " after " + std::to_string(last));
            last = *token;
            lock.release();
        }
    }
    // Four threads, each with an owner of its own, take the lock 200 times each and update a
    // counter under it with a window for a lost update: never two inside.
    void mutual_exclusion_across_threads() {
        const auto name = fresh_name("threads");
        std::vector<named_lock> locks;
        for (int t = 0; t < 4; ++t) locks.push_back(make(name));
        long counter = 0;
        std::atomic<int> inside{0}, overlaps{0};
        std::vector<std::thread> threads;
        for (auto& lock : locks)
            threads.emplace_back([&] {
                for (int i = 0; i < 200; ++i) {
                    std::lock_guard guard(lock);
                    if (inside.fetch_add(1) != 0) ++overlaps;
                    const long seen = counter;
                    std::this_thread::yield();
                    counter = seen + 1;
                    inside.fetch_sub(1);
                }
            });
        for (auto& t : threads) t.join();
        expect(overlaps == 0, std::to_string(overlaps) + " times two threads were inside");
        expect(counter == 800, std::to_string(800 - counter) + " of 800 updates lost");
    }
    // Four threads, each an owner, take the lock shared three times in four and exclusive else:
    // never a writer beside anyone.
    void readers_and_writers_across_threads() {
        const auto name = fresh_name("rw_threads");
        std::vector<named_lock> locks;
        for (int t = 0; t < 4; ++t) locks.push_back(make(name));
        std::atomic<int> readers{0}, writers{0}, violations{0};
        std::mutex failed_mutex;
        std::string failed;  // the first error a thread met: reported, not thrown out of it
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&, t] {
                try {
                    auto& lock = locks[std::size_t(t)];
                    for (int i = 0; i < 100; ++i) {
                        if ((i + t) % 4 == 0) {
                            std::unique_lock guard(lock);
                            if (writers.fetch_add(1) != 0 || readers != 0) ++violations;
                            std::this_thread::yield();
                            writers.fetch_sub(1);
                        } else {
                            std::shared_lock guard(lock);
                            readers.fetch_add(1);
                            if (writers != 0) ++violations;
                            std::this_thread::sleep_for(100us);
                            readers.fetch_sub(1);
                        }
                    }
                } catch (const std::exception& e) {
                    std::lock_guard guard(failed_mutex);
                    if (failed.empty()) failed = e.what();
                }
            });
        for (auto& t : threads) t.join();
        expect(failed.empty(), "a thread failed: " + failed);
        expect(violations == 0, std::to_string(violations) + " times a writer was beside another");
    }
    // ---- TTLs (capability `expiring`) as named_lock reports them ----
    void lock_remaining_lifetime() {
        auto lock = make(fresh_name("lifetime"), 10s);
        expect(lock.acquire(), "could not lock");
        const auto left = lock.remaining_lifetime();
        expect(left.has_value(), "a lock with a TTL has no remaining lifetime");
        expect(left->count() > 9000 && left->count() <= 10000,
               "a TTL of 10 s has " + std::to_string(left->count()) + " ms left at once");
        lock.release();
    }
    void set_expiration() {
        auto lock = make(fresh_name("set_expiration"), 10s);
        expect(lock.acquire(), "could not lock");
        lock.refresh(1s);
        const auto left = lock.remaining_lifetime();
        expect(left.has_value(), "a lock with a TTL has no remaining lifetime");
        expect(left->count() >= 0 && left->count() <= 1000,
               "refreshed to 1 s, " + std::to_string(left->count()) + " ms are left");
        expect(!lock.is_expired(), "expired at once after a refresh to 1 s");
        lock.release();
    }
    void no_lifetime_without_expiring() {
        auto lock = make(fresh_name("no_lifetime"));
        expect(lock.acquire(), "could not lock");
        expect(!lock.remaining_lifetime().has_value(), "a lock that never expires has a lifetime");
        expect(!lock.is_expired(), "a lock that never expires is expired");
        lock.refresh();  // a no-op
        expect(lock.is_acquired(), "a refresh of a lock that never expires lost it");
        lock.release();
    }
    void status_follows_the_lock() {
        const auto name = fresh_name("status");
        auto st = factory_.store_for(subject_.strategy);
        if (st->status(name).held == lock_status::state::unknown)
            throw case_skipped{"the strategy cannot tell whether a lock is held"};
        expect(st->status(name).held == lock_status::state::free, "a fresh name is not free");
        auto a = make(name);
        expect(a.try_lock(), "could not lock");
        expect(st->status(name).held == lock_status::state::held_exclusive,
               "a held lock is not reported held exclusive");
        a.release();
        expect(st->status(name).held == lock_status::state::free, "a released lock is not free");
    }
    void shared_owners_coexist() {
        const auto name = fresh_name("shared");
        auto a = make(name), b = make(name), c = make(name);
        expect(a.try_lock_shared() && b.try_lock_shared(), "two readers did not coexist");
        expect(!c.try_lock(), "a writer got a lock readers held");
        expect(!c.try_lock_for(50ms), "a writer's bounded wait got a lock readers held");
        a.release();
        expect(!c.try_lock(), "a writer got a lock one reader still held");
        b.release();
        expect(c.try_lock(), "a writer did not get the lock after the readers left");
        expect(!a.try_lock_shared(), "a reader got in beside a writer");
        c.release();
    }
    // Runs `child` in a forked process; its exit status is the result (0 = fine).
    static pid_t fork_child(const std::function<int()>& child) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            int code = 1;
            try {
                code = child();
            } catch (...) {
            }
            ::_exit(code);
        }
        expect(pid > 0, "fork failed");
        return pid;
    }
    static int wait_for(pid_t pid) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0) {
            if (errno != EINTR) return -1;
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    void excludes_another_process() {
        const auto name = fresh_name("process");
        int to_parent[2], to_child[2];
        expect(::pipe(to_parent) == 0 && ::pipe(to_child) == 0, "pipe failed");
        const pid_t pid = fork_child([&] {
            auto held = make(name);
            char byte = held.try_lock() ? 'y' : 'n';
            (void)!::write(to_parent[1], &byte, 1);
            (void)!::read(to_child[0], &byte, 1);  // until the parent has tried
            held.release();
            return 0;
        });
        // Only the child writes to the parent: a child that dies early then reads as end of file.
        ::close(to_parent[1]);
        ::close(to_child[0]);
        char byte = 0;
        (void)!::read(to_parent[0], &byte, 1);
        auto mine = make(name);
        const bool got_while_held = byte == 'y' && mine.try_lock();
        (void)!::write(to_child[1], "x", 1);
        const int code = wait_for(pid);
        ::close(to_parent[0]);
        ::close(to_child[1]);
        expect(byte == 'y', "the child process could not lock");
        expect(!got_while_held, "this process got a lock another process held");
        expect(code == 0, "the child failed");
        expect(mine.try_lock(), "the lock was not free after the other process released it");
        mine.release();
    }
    void crash_releases() {
        const auto name = fresh_name("crash");
        const pid_t pid = fork_child([&] {
            auto held = make(name);
            if (!held.try_lock()) return 2;
            ::_exit(0);  // dies holding it: no destructor, no release
        });
        expect(wait_for(pid) == 0, "the child process could not lock");
        // Where a server notices the death (a session that times out: ZooKeeper's), later: the
        // wait is a safety net, not a time the strategy must meet.
        auto mine = make(name);
        expect(mine.try_lock_for(60s), "a lock whose holder died was not released within 60 s");
        mine.release();
    }
    void key_continues_elsewhere() {
        auto a = make(fresh_name("serial"));
        expect(a.try_lock(), "could not lock");
        auto again = factory_.create_lock_from_key(a.serialize_key());
        expect(again.is_acquired(), "the continued owner does not hold the lock");
        again.release();
        expect(!a.is_acquired(), "the original still holds after the continuation released");
    }

    // ---- the store interface itself (Symfony's store test traits: shared/reference) ----
    // CHECK names the condition that failed, as a test framework would.
#define LOCKSMITH_CHECK(cond) expect((cond), "line " + std::to_string(__LINE__) + ": " #cond)
    static constexpr auto ex = lock_mode::exclusive;
    static constexpr auto sh = lock_mode::shared;
    static constexpr std::chrono::milliseconds long_ttl = 60s;

    void store_save() {
        key k(fresh_name("save"));
        LOCKSMITH_CHECK(!st().holds(k));
        LOCKSMITH_CHECK(st().try_acquire(k, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k));
        st().release(k);
        LOCKSMITH_CHECK(!st().holds(k));
    }
    void store_save_with_different_resources() {
        key k1(fresh_name("r1")), k2(fresh_name("r2"));
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1));
        LOCKSMITH_CHECK(!st().holds(k2));
        LOCKSMITH_CHECK(st().try_acquire(k2, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2));
        st().release(k1);
        LOCKSMITH_CHECK(!st().holds(k1));
        LOCKSMITH_CHECK(st().holds(k2));
        st().release(k2);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2));
    }
    void store_save_with_different_keys_on_same_resource() {
        const auto resource = fresh_name("same");
        key k1(resource), k2(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1));
        LOCKSMITH_CHECK(!st().holds(k2));
        // A second owner in the same process is refused, and does not disturb the holder.
        LOCKSMITH_CHECK(!st().try_acquire(k2, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1));
        LOCKSMITH_CHECK(!st().holds(k2));
        st().release(k1);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2));
        LOCKSMITH_CHECK(st().try_acquire(k2, ex, long_ttl));
        LOCKSMITH_CHECK(!st().holds(k1) && st().holds(k2));
        st().release(k2);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2));
    }
    void store_save_twice() {
        key k(fresh_name("twice"));
        LOCKSMITH_CHECK(st().try_acquire(k, ex, long_ttl));
        LOCKSMITH_CHECK(st().try_acquire(k, ex, long_ttl));  // re-entry of the same owner
        LOCKSMITH_CHECK(st().holds(k));
        st().release(k);  // one release frees it
        LOCKSMITH_CHECK(!st().holds(k));
        key other(k.resource());
        LOCKSMITH_CHECK(st().try_acquire(other, ex, long_ttl));
        st().release(other);
    }
    void store_delete_isolated() {
        key k1(fresh_name("isolated1")), k2(fresh_name("isolated2"));
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));
        st().release(k2);  // never saved: a no-op, no error
        LOCKSMITH_CHECK(st().holds(k1));
        LOCKSMITH_CHECK(!st().holds(k2));
        st().release(k1);
    }
    // Release and refresh act only on one's own lock.
    void store_release_by_another_owner_is_ignored() {
        const auto resource = fresh_name("foreign");
        key holder(resource), intruder(resource);
        LOCKSMITH_CHECK(st().try_acquire(holder, ex, long_ttl));
        st().release(intruder);  // no error, no effect
        LOCKSMITH_CHECK(st().holds(holder));
        LOCKSMITH_CHECK(!st().try_acquire(intruder, ex, long_ttl));
        st().release(holder);
        LOCKSMITH_CHECK(st().try_acquire(intruder, ex, long_ttl));
        st().release(intruder);
    }
    void store_release_twice() {
        key k(fresh_name("release_twice"));
        LOCKSMITH_CHECK(st().try_acquire(k, ex, long_ttl));
        st().release(k);
        st().release(k);  // no error
        LOCKSMITH_CHECK(!st().holds(k));
    }
    // ---- the store's own wait (capability `native_wait`) ----
    void native_wait_times_out() {
        const auto resource = fresh_name("wait_timeout");
        key holder(resource), waiter(resource);
        LOCKSMITH_CHECK(st().try_acquire(holder, ex, long_ttl));
        const auto start = std::chrono::steady_clock::now();
        LOCKSMITH_CHECK(!st().wait_acquire(waiter, ex, long_ttl, start + 150ms));
        const auto waited = ms_since(start);
        expect(waited >= 145, "a wait of 150 ms gave up after " + ms(waited) + " ms");
        LOCKSMITH_CHECK(!st().holds(waiter));
        LOCKSMITH_CHECK(st().holds(holder));
        // A deadline in the past is one attempt.
        const auto past = std::chrono::steady_clock::now() - 1s;
        LOCKSMITH_CHECK(!st().wait_acquire(waiter, ex, long_ttl, past));
        st().release(holder);
        LOCKSMITH_CHECK(st().wait_acquire(waiter, ex, long_ttl, past));
        st().release(waiter);
    }
    // A holder in another thread (the same thread acquires and releases: shm's owner is a
    // thread) lets go 50 ms after it is told to; the waiter's wait must end after that.
    void blocking_locks_across_threads() {
        const auto resource = fresh_name("blocking_thread");
        std::promise<bool> acquired;
        std::promise<void> go;
        std::atomic<bool> releasing{false};
        std::thread holder([&] {
            key k(resource);
            const bool ok = st().try_acquire(k, ex, long_ttl);
            acquired.set_value(ok);
            if (!ok) return;
            go.get_future().wait();
            std::this_thread::sleep_for(50ms);  // lets the waiter wait first; not a check
            releasing = true;
            st().release(k);
        });
        struct joined {
            std::thread& t;
            std::promise<void>& go;
            bool told = false;
            ~joined() {
                if (!told) go.set_value();
                t.join();
            }
        } join{holder, go};
        LOCKSMITH_CHECK(acquired.get_future().get());
        key waiter(resource);
        LOCKSMITH_CHECK(!st().try_acquire(waiter, ex, long_ttl));
        join.told = true;
        go.set_value();
        const bool got =
            st().wait_acquire(waiter, ex, long_ttl, std::chrono::steady_clock::now() + 10s);
        expect(got, "the waiter did not get the lock within 10 s of its release");
        expect(releasing, "the wait returned before the holder released");
        LOCKSMITH_CHECK(st().holds(waiter));
        st().release(waiter);
    }
    void store_status_of_shared_holders() {
        const auto resource = fresh_name("status_shared");
        if (st().status(resource).held == lock_status::state::unknown)
            throw case_skipped{"the strategy cannot tell whether a lock is held"};
        key k(resource);
        LOCKSMITH_CHECK(st().try_acquire(k, sh, long_ttl));
        LOCKSMITH_CHECK(st().status(resource).held == lock_status::state::held_shared);
        st().release(k);
        LOCKSMITH_CHECK(st().status(resource).held == lock_status::state::free);
    }
    void store_shared_read_first() {
        const auto resource = fresh_name("read_first");
        key k1(resource), k2(resource), k3(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && !st().holds(k2) && !st().holds(k3));
        LOCKSMITH_CHECK(st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2) && !st().holds(k3));
        LOCKSMITH_CHECK(!st().try_acquire(k3, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2) && !st().holds(k3));
        st().release(k1);
        LOCKSMITH_CHECK(!st().holds(k1) && st().holds(k2) && !st().holds(k3));
        st().release(k2);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2) && !st().holds(k3));
        LOCKSMITH_CHECK(st().try_acquire(k3, ex, long_ttl));
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2) && st().holds(k3));
        st().release(k3);
        LOCKSMITH_CHECK(!st().holds(k3));
    }
    void store_shared_write_first() {
        const auto resource = fresh_name("write_first");
        key k1(resource), k2(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && !st().holds(k2));
        LOCKSMITH_CHECK(!st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && !st().holds(k2));
        st().release(k1);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2));
        LOCKSMITH_CHECK(st().try_acquire(k2, ex, long_ttl));
        LOCKSMITH_CHECK(!st().holds(k1) && st().holds(k2));
        st().release(k2);
        LOCKSMITH_CHECK(!st().holds(k1) && !st().holds(k2));
    }
    void store_shared_promote() {
        const auto resource = fresh_name("promote");
        key k1(resource), k2(resource), writer(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, sh, long_ttl));
        LOCKSMITH_CHECK(st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2));
        // Promotion while another reader is present is refused, and keeps the read lock.
        LOCKSMITH_CHECK(!st().try_acquire(k1, ex, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2));
        LOCKSMITH_CHECK(!st().try_acquire(writer, ex, long_ttl));
        st().release(k2);
        // The read lock kept is still a read lock that keeps writers out.
        LOCKSMITH_CHECK(!st().try_acquire(writer, ex, long_ttl));
        st().release(k1);
        LOCKSMITH_CHECK(st().try_acquire(writer, ex, long_ttl));
        st().release(writer);
    }
    void store_shared_promote_allowed() {
        const auto resource = fresh_name("promote_allowed");
        key k1(resource), k2(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, sh, long_ttl));
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));  // the sole reader
        LOCKSMITH_CHECK(!st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && !st().holds(k2));
        st().release(k1);
        LOCKSMITH_CHECK(st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(!st().holds(k1) && st().holds(k2));
        st().release(k2);
    }
    void store_shared_demote() {
        const auto resource = fresh_name("demote");
        key k1(resource), k2(resource), writer(resource);
        LOCKSMITH_CHECK(st().try_acquire(k1, ex, long_ttl));
        LOCKSMITH_CHECK(st().try_acquire(k1, sh, long_ttl));  // demotion
        LOCKSMITH_CHECK(st().try_acquire(k2, sh, long_ttl));
        LOCKSMITH_CHECK(st().holds(k1) && st().holds(k2));
        LOCKSMITH_CHECK(!st().try_acquire(writer, ex, long_ttl));
        st().release(k1);
        st().release(k2);
        LOCKSMITH_CHECK(st().try_acquire(writer, ex, long_ttl));
        st().release(writer);
    }
    void unserializable_key() {
        auto lock = make(fresh_name("unserializable"));
        LOCKSMITH_CHECK(lock.acquire());
        bool refused = false;
        try {
            (void)lock.serialize_key();
        } catch (const not_serializable_error&) {
            refused = true;
        }
        expect(refused, "a strategy without `serializable` serialized a key");
        LOCKSMITH_CHECK(lock.is_acquired());  // refusing did not disturb the lock
        lock.release();
    }
    void store_serializable_key() {
        key k(fresh_name("serializable"));
        LOCKSMITH_CHECK(st().try_acquire(k, ex, long_ttl));
        key moved = key::from_json(nlohmann::json::parse(k.to_json().dump()));
        LOCKSMITH_CHECK(st().holds(moved));
        st().release(moved);
        LOCKSMITH_CHECK(!st().holds(k));
    }
#undef LOCKSMITH_CHECK

    // ---- hostile surroundings: what a holder's exec() passes on ----
    // A granted lock leaves nothing to a command the holder exec()s (a library user's fork/exec,
    // as `locksmith run` does): every descriptor the strategy or a client library opened for it
    // — the lock's files and sockets, pooled sessions, a waiter's connection, client threads'
    // pipes — is close-on-exec. A command that kept a session's socket would keep the session
    // (and its locks) alive after the holder died, and could write into it. In a child process,
    // so that the descriptors of earlier cases do not count.
    // ---- hostile surroundings: a server that misbehaves ----
    // A strategy of a remote kind pointed at servers that accept and never answer, trickle,
    // answer nonsense or hang up at once (subject::hostile_options says how to reach them) is
    // never granted a lock by them, does not crash, and gives up in bounded time: a try, then a
    // wait of 1 s, each within the strategy's own connect and command timeouts — within 20 s
    // together. A refusal that throws says why. Each behaviour in a process of its own, all at
    // once.
    void hostile_server_grants_nothing() {
        constexpr auto bound = 20s;
        struct attempt {
            misbehaviour behaviour;
            std::vector<std::unique_ptr<hostile_listener>> servers;
            pid_t pid = -1;
        };
        std::vector<attempt> attempts;
        const auto name = fresh_name("hostile");
        for (const auto b : every_misbehaviour) {
            attempt a{b, {}};
            const auto options = pointed_at_servers(b, a.servers);
            if (!options)
                throw case_skipped{
                    "the options name no 127.0.0.1:PORT or localhost:PORT endpoint; give "
                    "hostile_options (--hostile-options) with \"{server}\" where one goes"};
            subject hostile = subject_;
            hostile.options = *options;
            a.pid = fork_child([&]() -> int {
                try {
                    lock_factory f(make_config(hostile), registry());
                    lock_request r;
                    r.strategy = hostile.strategy;
                    r.ttl = 30s;
                    auto lock = f.create_lock(name, r);
                    if (lock.try_lock() || lock.try_lock_for(1s)) return 3;
                    return 0;
                } catch (const error& e) {
                    return std::string(e.what()).empty() ? 4 : 0;
                } catch (const std::exception&) {
                    return 5;
                }
            });
            attempts.push_back(std::move(a));
        }
        std::string failures;
        for (auto& a : attempts) {
            const int code = wait_within(a.pid, bound);
            const std::string what = std::string("a server that ") + name_of(a.behaviour);
            if (code == 3) failures += "; " + what + " granted the lock";
            if (code == 4) failures += "; against " + what + ", an error without a message";
            if (code == 5) failures += "; against " + what + ", an exception not locksmith::error";
            if (code == -1)
                failures += "; against " + what + ", no answer within " +
                            std::to_string(bound.count()) + " s";
            if (code > 128)
                failures += "; " + what + " crashed it (signal " + std::to_string(code - 128) + ")";
        }
        expect(failures.empty(), failures.empty() ? "" : failures.substr(2));
    }
    // The options pointed at servers behaving as `b`, one per endpoint (kept in `servers`).
    std::optional<nlohmann::json> pointed_at_servers(
        misbehaviour b, std::vector<std::unique_ptr<hostile_listener>>& servers) const {
        if (!subject_.hostile_options.is_null()) {
            servers.push_back(std::make_unique<hostile_listener>(b));
            const std::string address = servers.back()->address();
            std::function<void(nlohmann::json&)> fill = [&](nlohmann::json& j) {
                if (j.is_string()) {
                    auto text = j.get<std::string>();
                    for (auto at = text.find("{server}"); at != std::string::npos;
                         at = text.find("{server}", at + address.size()))
                        text.replace(at, 8, address);
                    j = text;
                }
                if (j.is_structured())
                    for (auto& item : j) fill(item);
            };
            auto options = subject_.hostile_options;
            fill(options);
            return options;
        }
        static const std::regex endpoint(R"((127\.0\.0\.1|localhost):[0-9]+)");
        const std::string text = subject_.options.dump();
        std::map<std::string, std::string> replaced;
        std::string out;
        auto from = text.cbegin();
        for (std::sregex_iterator it(text.begin(), text.end(), endpoint), end; it != end; ++it) {
            auto& address = replaced[it->str()];
            if (address.empty()) {
                servers.push_back(std::make_unique<hostile_listener>(b));
                address = servers.back()->address();
            }
            out.append(from, (*it)[0].first);
            out += address;
            from = (*it)[0].second;
        }
        if (replaced.empty()) return std::nullopt;
        out.append(from, text.cend());
        return nlohmann::json::parse(out);
    }

    void holder_passes_no_descriptor_to_an_exec() {
        const auto name = fresh_name("cloexec");
        const bool processes = info_.descriptor.spans_processes;
        int report[2];
        expect(::pipe2(report, O_CLOEXEC) == 0, "pipe failed");
        const pid_t pid = fork_child([&]() -> int {
            ::close(report[0]);
            auto say = [&](const std::string& what) {
                (void)!::write(report[1], what.data(), what.size());
            };
            const auto before = inheritable_fds();
            auto held = make(name);
            if (!held.try_lock_for(10s)) return 10;
            // A second owner waits for the name meanwhile, through a factory of its own (where
            // locks span processes: in one process its wait could not be told from a grant).
            std::atomic<bool> waiting{true};
            std::thread waiter;
            if (processes)
                waiter = std::thread([&] {
                    try {
                        lock_factory other_factory(make_config(subject_), registry());
                        lock_request r;
                        r.strategy = subject_.strategy;
                        r.ttl = 30s;
                        auto other = other_factory.create_lock(name, r);
                        if (other.try_lock_for(2s)) other.release();
                    } catch (const std::exception&) {
                    }
                    waiting = false;
                });
            std::this_thread::sleep_for(500ms);
            int code = 0;
            for (const auto& [fd, what] : inheritable_fds())
                if (!before.count(fd)) {
                    say("fd " + std::to_string(fd) + " (" + what + ") is not close-on-exec; ");
                    code = 20;
                }
            std::vector<int> expected;
            for (const auto& [fd, what] : before) expected.push_back(fd);
            const auto got = fds_of_an_exec();
            if (!got) {
                say("could not run a command; ");
                code = 21;
            } else if (*got != expected) {
                std::string text;
                for (int fd : *got) text += " " + std::to_string(fd);
                say("an exec got fds" + text + "; ");
                code = 22;
            }
            const bool waited = waiting;
            // Released before the join: the waiter then ends at once, not at its 2 s bound.
            held.release();
            if (waiter.joinable()) waiter.join();
            if (code == 0 && processes && !waited) {
                say("the second owner did not wait; ");
                code = 23;
            }
            return code;
        });
        ::close(report[1]);
        std::string said;
        char buffer[512];
        for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;)
            said.append(buffer, std::size_t(n));
        ::close(report[0]);
        const int code = wait_for(pid);
        expect(code != 10, "the child could not lock");
        expect(code == 0, "descriptors of the lock pass to an exec: " + said + "(child exit " +
                              std::to_string(code) + ")");
    }

    // ---- counting semaphores (issue 27): strategies with `counting` ----
    named_semaphore permit(lock_factory& f, const std::string& name, std::uint32_t limit) {
        lock_request r;
        r.strategy = subject_.strategy;
        r.ttl = 30s;
        return f.create_semaphore(name, limit, r);
    }
    named_semaphore permit(const std::string& name, std::uint32_t limit) {
        return permit(factory_, name, limit);
    }
    void counting_at_most_n_owners() {
        const auto name = fresh_name("permits");
        auto a = permit(name, 2), b = permit(name, 2), c = permit(name, 2);
        expect(a.try_acquire() && b.try_acquire(), "two owners did not get two permits of two");
        expect(!c.try_acquire(), "a third owner got a permit of two");
        a.release();
        expect(c.try_acquire(), "a permit given back was not free for the next owner");
        b.release();
        c.release();
        // The lock of the same name is another object.
        auto lock = make(name);
        expect(lock.try_lock(), "a semaphore's permits blocked the lock of the same name");
        lock.release();
    }
    // Three owners of three get a permit each and a fourth none; each holder's permit() is
    // distinct and, as named_semaphore.hpp says, the number of its slot (1..N) where the strategy
    // numbers its permits, else its owner's token; status() counts them where it can. A permit
    // given back is the next owner's: where permits are slots, the number given back.
    void counting_limit_kept_and_permits_numbered() {
        const auto name = fresh_name("numbered");
        auto a = permit(name, 3), b = permit(name, 3), c = permit(name, 3), d = permit(name, 3);
        expect(a.try_acquire() && b.try_acquire() && c.try_acquire(),
               "three owners did not get three permits of three");
        expect(!d.try_acquire(), "a fourth owner got a permit of three");
        const auto first = a.permit();
        expect(a.try_acquire() && a.permit() == first,
               "a holder asking again did not keep its permit");
        auto slot = [](const std::string& p) { return p == "1" || p == "2" || p == "3"; };
        const bool slots = slot(first);
        std::set<std::string> seen;
        for (auto* p : {&a, &b, &c}) {
            const auto number = p->permit();
            expect(slots ? slot(number) : number == p->owner()->token(),
                   "permit '" + number + "' is " +
                       (slots ? "no slot of 1..3 (another holder's is " + first + ")"
                              : "neither a slot of 1..3 nor its owner's token"));
            expect(seen.insert(number).second, "two holders hold permit " + number);
            expect(p->is_acquired(), "the holder of permit " + number + " is not acquired");
        }
        const auto st = this->st().status(name);
        expect(st.limit.value_or(3) == 3,
               "status() says the limit is " + std::to_string(st.limit.value_or(0)) + ", not 3");
        expect(st.permits_held.value_or(3) == 3, "status() says " +
                                                     std::to_string(st.permits_held.value_or(0)) +
                                                     " permits are held, not 3");
        expect(
            st.held == lock_status::state::unknown || st.held == lock_status::state::held_exclusive,
            "status() does not say every permit is held");
        const auto freed = b.permit();
        b.release();
        expect(!b.is_acquired(), "a released permit is still held");
        const auto after = this->st().status(name).held;
        expect(after == lock_status::state::unknown || after == lock_status::state::free,
               "status() does not say a permit is free after a release");
        expect(d.try_acquire(), "the permit given back was not free for the next owner");
        if (slots)
            expect(d.permit() == freed, "the next owner got permit " + d.permit() +
                                            ", not the one given back (" + freed + ")");
        a.release();
        c.release();
        d.release();
        expect(this->st().status(name).permits_held.value_or(0) == 0,
               "status() counts permits after every holder gave its back");
    }
    void counting_one_limit_per_name() {
        const auto name = fresh_name("limit");
        auto a = permit(name, 2);
        expect(a.try_acquire(), "could not take a permit");
        // Another user: an owner of another factory (another store object and connection),
        // or of this one where locks live in one process (their store object keeps them).
        std::optional<lock_factory> other_factory;
        if (info_.descriptor.spans_processes)
            other_factory.emplace(make_config(subject_), registry());
        auto& other = other_factory ? *other_factory : factory_;
        auto b = permit(other, name, 3);
        std::string refusal;
        try {
            (void)b.try_acquire();
        } catch (const invalid_argument_error& e) {
            refusal = std::string("refused: ") + e.what();
        }
        expect(!refusal.empty(), "an owner asking another limit for the name was not refused");
        // Naming both limits: the one the name keeps and the one this owner asked for.
        expect(refusal.find("limit of 2") != std::string::npos &&
                   refusal.find("asks for 3") != std::string::npos,
               "the refusal names not both limits (the name's 2, the owner's 3): " + refusal);
        expect(!b.held(), "an owner refused for its limit holds a permit");
        auto same = permit(other, name, 2), third = permit(name, 2);
        expect(same.try_acquire(), "an owner asking the name's own limit did not get a permit");
        expect(!third.try_acquire(), "a third owner got a permit of two");
        same.release();
        a.release();
    }
    // A bounded wait for a permit ends at its deadline, and one given back meanwhile ends it
    // early.
    void counting_timed_waits_end_on_time() {
        const auto name = fresh_name("count_timed");
        auto holder = permit(name, 1), waiter = permit(name, 1);
        expect(holder.try_acquire(), "could not take a permit");
        const auto start = std::chrono::steady_clock::now();
        expect(!waiter.try_acquire_for(200ms), "a bounded wait got the only permit, held");
        const auto waited = ms_since(start);
        expect(waited >= 195 && waited < 2000,
               "try_acquire_for(200 ms) gave up after " + ms(waited) + " ms");
        expect(!waiter.try_acquire_for(0ms), "a wait of 0 ms got the only permit, held");
        // The waiter in a thread of its own (a permit may belong to its thread: shm's).
        auto waited_for = std::async(std::launch::async, [&] {
            const auto begin = std::chrono::steady_clock::now();
            const bool got = waiter.try_acquire_for(30s);
            const double took = ms_since(begin);
            if (got) waiter.release();
            return std::pair{got, took};
        });
        std::this_thread::sleep_for(100ms);
        holder.release();
        const auto [got, took] = waited_for.get();
        expect(got, "a waiter did not get the permit given back during its wait of 30 s");
        // A safety net, not a time the strategy must meet.
        expect(took < 20000, "the wait took " + ms(took) + " ms after the permit came back");
    }
    void counting_across_processes() {
        const auto name = fresh_name("permits-process");
        int to_parent[2], to_child[2];
        expect(::pipe(to_parent) == 0 && ::pipe(to_child) == 0, "pipe failed");
        const pid_t pid = fork_child([&] {
            auto held = permit(name, 1);
            char byte = held.try_acquire() ? 'y' : 'n';
            (void)!::write(to_parent[1], &byte, 1);
            (void)!::read(to_child[0], &byte, 1);  // until the parent has tried
            held.release();
            return 0;
        });
        ::close(to_parent[1]);
        ::close(to_child[0]);
        char byte = 0;
        (void)!::read(to_parent[0], &byte, 1);
        auto mine = permit(name, 1);
        const bool got_while_held = byte == 'y' && mine.try_acquire();
        (void)!::write(to_child[1], "x", 1);
        const int code = wait_for(pid);
        ::close(to_parent[0]);
        ::close(to_child[1]);
        expect(byte == 'y', "the child process could not take a permit");
        expect(!got_while_held, "this process got the only permit another process held");
        expect(code == 0, "the child failed");
        expect(mine.try_acquire(), "the permit was not free after the other process gave it back");
        mine.release();
    }
    // N + 2 processes (N = 3), each with its own store, take a permit 40 times each, holding it
    // 2 ms, and count the holders on a page they share: never more than N at once, and N at some
    // point (under this load a strategy that serves fewer at once is not counting to N). The
    // children are forked before this process makes a store (fork_child's rule: a plugin's store
    // may run threads), and each makes its own.
    void counting_never_more_than_n_across_processes() {
        struct counter {
            std::atomic<int> inside{0}, most{0}, grants{0};
        };
        struct shared_page {
            void* at = ::mmap(nullptr, sizeof(counter), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            ~shared_page() {
                if (at != MAP_FAILED) ::munmap(at, sizeof(counter));
            }
        } page;
        expect(page.at != MAP_FAILED, "mmap failed");
        auto& c = *new (page.at) counter;
        const auto name = fresh_name("count-pool");
        constexpr int processes = 5, grants = 40;
        int gate[2];
        expect(::pipe(gate) == 0, "pipe failed");
        std::vector<pid_t> children;
        for (int p = 0; p < processes; ++p)
            children.push_back(fork_child([&] {
                ::close(gate[1]);
                auto held = permit(name, 3);
                char byte;
                (void)!::read(gate[0], &byte, 1);  // end of file: every child is ready, go
                for (int i = 0; i < grants; ++i) {
                    if (!held.try_acquire_for(20s)) return 2;
                    const int now = ++c.inside;
                    for (int seen = c.most;
                         now > seen && !c.most.compare_exchange_weak(seen, now);) {
                    }
                    ++c.grants;
                    std::this_thread::sleep_for(2ms);
                    --c.inside;
                    held.release();
                }
                return 0;
            }));
        ::close(gate[0]);
        ::close(gate[1]);
        int failed = 0;
        for (const pid_t pid : children) failed += wait_within(pid, 120s) != 0;
        expect(failed == 0, std::to_string(failed) + " of " + std::to_string(processes) +
                                " processes did not get their " + std::to_string(grants) +
                                " permits (a wait of 20 s ran out, or they failed)");
        expect(c.grants == processes * grants,
               std::to_string(c.grants) + " grants of " + std::to_string(processes * grants));
        expect(c.most <= 3, std::to_string(c.most) + " processes held a permit of 3 at once");
        expect(c.most == 3, "never more than " + std::to_string(c.most) +
                                " processes held a permit of 3 at once, with 5 asking");
    }
    // Both permits of two held and three waiters queued one after another, each in a thread of
    // its own (a permit may belong to its thread: shm's); a fourth that gives up meanwhile. The
    // permits come back one at a time (the first holder's first, then the other's, then the
    // first waiter's): every waiter is served within a bound (none starved) and, where the
    // strategy claims `fair`, in the order they began to wait. A strategy whose waiters poll
    // (retry with backoff) is held to the bound only: its order is whoever tries first.
    void counting_waiters_are_served_in_turn() {
        const auto name = fresh_name("count-turn");
        constexpr int waiters = 3;
        constexpr auto bound = 20s;  // a safety net for a poller's backoff, not a speed
        auto h1 = permit(name, 2), h2 = permit(name, 2);
        expect(h1.try_acquire() && h2.try_acquire(), "two owners did not get two permits of two");
        std::mutex m;
        std::condition_variable changed;
        std::vector<int> served;  // the waiters, in the order they got a permit
        std::string failure;      // the first error a waiter met
        std::atomic<bool> give_back[waiters] = {};
        std::vector<std::future<void>> threads;
        auto served_count = [&] {
            std::lock_guard guard(m);
            return served.size();
        };
        // Until `count` waiters are served, at most `bound`.
        auto until_served = [&](std::size_t count) {
            std::unique_lock guard(m);
            return changed.wait_for(guard, bound, [&] { return served.size() >= count; });
        };
        for (int w = 0; w < waiters; ++w) {
            threads.push_back(std::async(std::launch::async, [&, w] {
                try {
                    auto mine = permit(name, 2);
                    if (!mine.try_acquire_for(3 * bound)) return;
                    {
                        std::lock_guard guard(m);
                        served.push_back(w);
                    }
                    changed.notify_all();
                    while (!give_back[w]) std::this_thread::sleep_for(5ms);
                    mine.release();
                } catch (const std::exception& e) {
                    std::lock_guard guard(m);
                    if (failure.empty()) failure = e.what();
                }
            }));
            std::this_thread::sleep_for(300ms);  // lets it queue before the next; not a check
        }
        auto finish = [&] {
            for (auto& b : give_back) b = true;
            h1.release();
            h2.release();
            for (auto& t : threads) t.wait();
        };
        try {
            expect(served_count() == 0, "a waiter got a permit while both were held");
            // A waiter that gives up leaves the queue without letting anyone in.
            auto late = permit(name, 2);
            expect(!late.try_acquire_for(300ms),
                   "a bounded wait got a permit while both were held");
            std::this_thread::sleep_for(200ms);  // lets a wrong grant show; not a check
            expect(served_count() == 0, "a waiter that gave up let a waiter in");
            const std::string within = " within " + std::to_string(bound.count()) + " s";
            h1.release();
            expect(until_served(1), "no waiter got the permit the first holder gave back" + within);
            h2.release();
            expect(until_served(2),
                   "no other waiter got the permit the second holder gave back" + within);
            {
                std::lock_guard guard(m);
                give_back[served.front()] = true;
            }
            expect(until_served(3),
                   "the last waiter did not get the permit a waiter gave back" + within);
        } catch (...) {
            finish();
            std::lock_guard guard(m);
            if (!failure.empty()) throw case_failed{"a waiter failed: " + failure};
            throw;
        }
        finish();
        expect(failure.empty(), "a waiter failed: " + failure);
        if (has(info_.capabilities, capability::fair)) {
            std::string order;
            for (const int w : served) order += " " + std::to_string(w + 1);
            expect(served == std::vector<int>{0, 1, 2},
                   "the strategy claims `fair`, but the waiters were served in the order" + order +
                       " (they began to wait as 1 2 3)");
        }
    }
    void counting_crash_gives_the_permit_back() {
        const auto name = fresh_name("permit-crash");
        const pid_t pid = fork_child([&] {
            auto held = permit(name, 1);
            if (!held.try_acquire()) return 2;
            ::_exit(0);  // dies holding it: no destructor, no release
        });
        expect(wait_for(pid) == 0, "the child process could not take a permit");
        auto mine = permit(name, 1);
        expect(mine.try_acquire_for(60s),
               "a permit whose holder died was not given back within 60 s");
        mine.release();
    }

    subject subject_;
    lock_factory factory_;
    strategy_info info_;
    std::shared_ptr<store> store_;
};

const std::vector<runner::case_def>& runner::cases() {
    using c = capability;
    const auto none = c::none;
    static const std::vector<case_def> all = {
        {"store_matches_descriptor", none, none, false, &runner::store_matches_descriptor},
        {"exclusive_between_owners", none, none, false, &runner::exclusive_between_owners},
        {"names_are_independent", none, none, false, &runner::names_are_independent},
        {"release_is_idempotent", none, none, false, &runner::release_is_idempotent},
        {"reacquire_after_release", none, none, false, &runner::reacquire_after_release},
        {"blocking_lock_waits_for_release", none, none, false,
         &runner::blocking_lock_waits_for_release},
        {"bounded_wait_times_out", c::exclusive, none, false, &runner::bounded_wait_times_out},
        {"fencing_tokens_increase", c::exclusive | c::fencing, none, false,
         &runner::fencing_tokens_increase},
        {"mutual_exclusion_across_threads", c::exclusive, none, false,
         &runner::mutual_exclusion_across_threads},
        {"lock_remaining_lifetime", c::expiring, none, false, &runner::lock_remaining_lifetime},
        {"set_expiration", c::expiring, none, false, &runner::set_expiration},
        {"no_lifetime_without_expiring", c::exclusive, c::expiring, false,
         &runner::no_lifetime_without_expiring},
        {"status_follows_the_lock", none, none, false, &runner::status_follows_the_lock},
        {"save", none, none, false, &runner::store_save},
        {"save_with_different_resources", none, none, false,
         &runner::store_save_with_different_resources},
        {"save_with_different_keys_on_same_resource", none, none, false,
         &runner::store_save_with_different_keys_on_same_resource},
        {"save_twice", none, none, false, &runner::store_save_twice},
        {"delete_isolated", none, none, false, &runner::store_delete_isolated},
        {"release_by_another_owner_is_ignored", none, none, false,
         &runner::store_release_by_another_owner_is_ignored},
        {"release_twice", none, none, false, &runner::store_release_twice},
        {"native_wait_times_out", c::native_wait, none, false, &runner::native_wait_times_out},
        {"blocking_locks_across_threads", c::native_wait, none, false,
         &runner::blocking_locks_across_threads},
        {"shared_owners_coexist", c::shared, none, false, &runner::shared_owners_coexist},
        {"readers_and_writers_across_threads", c::shared, none, false,
         &runner::readers_and_writers_across_threads},
        {"status_of_shared_holders", c::shared, none, false,
         &runner::store_status_of_shared_holders},
        {"shared_lock_read_first", c::shared, none, false, &runner::store_shared_read_first},
        {"shared_lock_write_first", c::shared, none, false, &runner::store_shared_write_first},
        {"shared_lock_promote", c::shared, none, false, &runner::store_shared_promote},
        {"shared_lock_promote_allowed", c::shared, none, false,
         &runner::store_shared_promote_allowed},
        {"shared_lock_demote", c::shared, none, false, &runner::store_shared_demote},
        {"excludes_another_process", none, none, true, &runner::excludes_another_process},
        {"crash_releases", c::crash_release, none, true, &runner::crash_releases},
        {"unserializable_key", none, c::serializable, false, &runner::unserializable_key},
        {"key_continues_elsewhere", c::serializable, none, false, &runner::key_continues_elsewhere},
        {"serializable_key", c::serializable, none, false, &runner::store_serializable_key},
        {"holder_passes_no_descriptor_to_an_exec", none, none, false,
         &runner::holder_passes_no_descriptor_to_an_exec},
        {"hostile_server_grants_nothing", c::distributed, none, false,
         &runner::hostile_server_grants_nothing},
        {"counting_at_most_n_owners", c::counting, none, false, &runner::counting_at_most_n_owners},
        {"counting_limit_kept_and_permits_numbered", c::counting, none, false,
         &runner::counting_limit_kept_and_permits_numbered},
        {"counting_one_limit_per_name", c::counting, none, false,
         &runner::counting_one_limit_per_name},
        {"counting_timed_waits_end_on_time", c::counting, none, false,
         &runner::counting_timed_waits_end_on_time},
        {"counting_across_processes", c::counting, none, true, &runner::counting_across_processes},
        {"counting_never_more_than_n_across_processes", c::counting, none, true,
         &runner::counting_never_more_than_n_across_processes},
        {"counting_waiters_are_served_in_turn", c::counting, none, false,
         &runner::counting_waiters_are_served_in_turn},
        {"counting_crash_gives_the_permit_back", c::counting | c::crash_release, none, true,
         &runner::counting_crash_gives_the_permit_back},
    };
    return all;
}

}  // namespace

std::vector<std::string> case_names(capability caps, bool spans_processes) {
    std::vector<std::string> out;
    for (const auto& c : runner::cases())
        if (runner::applies(c, caps, spans_processes)) out.push_back(c.name);
    return out;
}

std::vector<outcome> run(const subject& s, std::ostream* log) {
    std::vector<outcome> out;
    for (const auto& c : runner::cases()) out.push_back(runner(s).run_one(c, log));
    return out;
}

outcome run_case(const subject& s, const std::string& name, std::ostream* log) {
    for (const auto& c : runner::cases())
        if (name == c.name) return runner(s).run_one(c, log);
    return {name, outcome::verdict::failed, "no conformance case has this name"};
}

bool all_passed(const std::vector<outcome>& outcomes) {
    for (const auto& o : outcomes)
        if (o.result == outcome::verdict::failed) return false;
    return true;
}

}  // namespace locksmith::conformance
