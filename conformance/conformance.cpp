// SPDX-License-Identifier: MIT
#include <locksmith/conformance.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <ostream>

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

// A lock name no other run uses, so that leftovers of an earlier run do not matter.
std::string fresh_name(const std::string& label) {
    static int counter = 0;
    return "conformance-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" +
           label;
}

class runner {
  public:
    explicit runner(const subject& s) : subject_(s), factory_(make_config(s), registry()) {
        info_ = factory_.registry().info(s.strategy);
    }

    std::vector<outcome> run(std::ostream* log) {
        std::vector<outcome> out;
        auto one = [&](const std::string& name, const std::function<void()>& body) {
            outcome o{name, outcome::verdict::passed, ""};
            try {
                body();
            } catch (const case_failed& f) {
                o = {name, outcome::verdict::failed, f.what};
            } catch (const case_skipped& s) {
                o = {name, outcome::verdict::skipped, s.why};
            } catch (const std::exception& e) {
                o = {name, outcome::verdict::failed, std::string("threw: ") + e.what()};
            }
            if (log) {
                static constexpr const char* words[] = {"PASS", "FAIL", "SKIP"};
                *log << words[int(o.result)] << ' ' << subject_.strategy << '/' << o.name
                     << (o.detail.empty() ? "" : ": " + o.detail) << '\n';
            }
            out.push_back(std::move(o));
        };
        one("store_matches_descriptor", [&] { store_matches_descriptor(); });
        one("exclusive_between_owners", [&] { exclusive_between_owners(); });
        one("names_are_independent", [&] { names_are_independent(); });
        one("release_is_idempotent", [&] { release_is_idempotent(); });
        one("reacquire_after_release", [&] { reacquire_after_release(); });
        one("blocking_lock_waits_for_release", [&] { blocking_lock_waits_for_release(); });
        one("status_follows_the_lock", [&] { status_follows_the_lock(); });
        one("shared_owners_coexist", [&] { shared_owners_coexist(); });
        one("excludes_another_process", [&] { excludes_another_process(); });
        one("crash_releases", [&] { crash_releases(); });
        one("key_continues_elsewhere", [&] { key_continues_elsewhere(); });
        one("counting_at_most_n_owners", [&] { counting_at_most_n_owners(); });
        one("counting_one_limit_per_name", [&] { counting_one_limit_per_name(); });
        one("counting_across_processes", [&] { counting_across_processes(); });
        one("counting_crash_gives_the_permit_back",
            [&] { counting_crash_gives_the_permit_back(); });
        return out;
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

    named_lock make(const std::string& name) {
        lock_request r;
        r.strategy = subject_.strategy;
        r.ttl = 30s;
        return factory_.create_lock(name, r);
    }
    bool has_capability(capability c) const { return has(info_.capabilities, c); }
    void require(capability c) const {
        if (!has_capability(c)) throw case_skipped{"the strategy lacks " + to_string(c)};
    }
    void require_processes() const {
        if (!info_.descriptor.spans_processes)
            throw case_skipped{"the strategy's locks live in one process"};
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
        a.release();
        expect(b.try_lock(), "a second owner did not get the lock after its release");
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
        auto waiter = std::async(std::launch::async, [&] {
            b.lock();
            return b.is_acquired();
        });
        a.release();
        // A safety net, not a timing assertion: a waiter that never wakes is a failure.
        expect(waiter.wait_for(60s) == std::future_status::ready,
               "a blocked owner did not get the lock within 60 s of its release");
        expect(waiter.get(), "the waiter returned without the lock");
        b.release();
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
        require(capability::shared);
        const auto name = fresh_name("shared");
        auto a = make(name), b = make(name), c = make(name);
        expect(a.try_lock_shared() && b.try_lock_shared(), "two readers did not coexist");
        expect(!c.try_lock(), "a writer got a lock readers held");
        a.release();
        b.release();
        expect(c.try_lock(), "a writer did not get the lock after the readers left");
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
        require_processes();
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
        require(capability::crash_release);
        require_processes();
        const auto name = fresh_name("crash");
        const pid_t pid = fork_child([&] {
            auto held = make(name);
            if (!held.try_lock()) return 2;
            ::_exit(0);  // dies holding it: no destructor, no release
        });
        expect(wait_for(pid) == 0, "the child process could not lock");
        auto mine = make(name);
        expect(mine.try_lock(), "a lock whose holder died was not released");
        mine.release();
    }
    void key_continues_elsewhere() {
        require(capability::serializable);
        auto a = make(fresh_name("serial"));
        expect(a.try_lock(), "could not lock");
        auto again = factory_.create_lock_from_key(a.serialize_key());
        expect(again.is_acquired(), "the continued owner does not hold the lock");
        again.release();
        expect(!a.is_acquired(), "the original still holds after the continuation released");
    }

    // ---- counting semaphores (issue 27): strategies with `counting` ----
    named_semaphore permit(const std::string& name, std::uint32_t limit) {
        lock_request r;
        r.strategy = subject_.strategy;
        r.ttl = 30s;
        return factory_.create_semaphore(name, limit, r);
    }
    void counting_at_most_n_owners() {
        require(capability::counting);
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
    void counting_one_limit_per_name() {
        require(capability::counting);
        const auto name = fresh_name("limit");
        auto a = permit(name, 2), b = permit(name, 3);
        expect(a.try_acquire(), "could not take a permit");
        bool refused = false;
        try {
            (void)b.try_acquire();
        } catch (const invalid_argument_error&) {
            refused = true;
        }
        expect(refused, "an owner asking another limit for the name was not refused");
        expect(!b.held(), "an owner refused for its limit holds a permit");
        a.release();
    }
    void counting_across_processes() {
        require(capability::counting);
        require_processes();
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
    void counting_crash_gives_the_permit_back() {
        require(capability::counting);
        require(capability::crash_release);
        require_processes();
        const auto name = fresh_name("permit-crash");
        const pid_t pid = fork_child([&] {
            auto held = permit(name, 1);
            if (!held.try_acquire()) return 2;
            ::_exit(0);  // dies holding it: no destructor, no release
        });
        expect(wait_for(pid) == 0, "the child process could not take a permit");
        auto mine = permit(name, 1);
        expect(mine.try_acquire(), "a permit whose holder died was not given back");
        mine.release();
    }

    subject subject_;
    lock_factory factory_;
    strategy_info info_;
};

}  // namespace

std::vector<outcome> run(const subject& s, std::ostream* log) {
    return runner(s).run(log);
}

bool all_passed(const std::vector<outcome>& outcomes) {
    for (const auto& o : outcomes)
        if (o.result == outcome::verdict::failed) return false;
    return true;
}

}  // namespace locksmith::conformance
