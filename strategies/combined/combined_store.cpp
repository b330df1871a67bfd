// SPDX-License-Identifier: MIT
// The `combined` strategy: see include/locksmith/strategies/combined.hpp for the contract.
#include <locksmith/strategies/combined.hpp>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies {

bool quorum_met(quorum_rule rule, std::size_t successes, std::size_t total) noexcept {
    return rule == quorum_rule::consensus ? successes > total / 2 : successes == total;
}

bool quorum_can_be_met(quorum_rule rule, std::size_t failures, std::size_t total) noexcept {
    // failures < total/2 in real numbers, without rounding total/2 down.
    return rule == quorum_rule::consensus ? 2 * failures < total : failures == 0;
}

capability combined_capabilities(quorum_rule rule, const std::vector<capability>& members) {
    capability common = ~capability::none;
    for (capability c : members) common &= c;
    constexpr capability inherited = capability::shared | capability::expiring |
                                     capability::distributed | capability::serializable |
                                     capability::crash_release | capability::consensus;
    capability caps = capability::exclusive | capability::noblock | (common & inherited);
    if (rule == quorum_rule::unanimous)
        for (capability c : members)
            if (has(c, capability::fencing)) caps |= capability::fencing;
    return caps;
}

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Redlock's allowance for the members' clocks running at different rates over one TTL.
milliseconds drift_margin(milliseconds ttl) {
    return ttl / 100 + milliseconds(2);
}

// A member's store, created when the combined store starts, or later when its backend was down
// then: a member that cannot start counts as a failed member until it can. After a failed start
// it is tried again only after a pause (0.5 s, doubling up to 30 s), so that a waiter polling
// the lock does not pay for a start, which may hang until the member's own timeout, each time.
class member {
  public:
    member(std::string strategy, std::shared_ptr<store> s)
        : strategy_(std::move(strategy)), store_(std::move(s)) {}
    member(std::string strategy, std::function<std::shared_ptr<store>()> create)
        : strategy_(std::move(strategy)), create_(std::move(create)) {}
    const std::string& strategy() const noexcept { return strategy_; }
    // Throws what the member's factory throws, or during the pause backend_error saying so.
    std::shared_ptr<store> get() {
        std::lock_guard guard(mutex_);
        if (store_) return store_;
        if (const auto now = clock::now(); now < retry_at_)
            throw backend_error(
                "combined", "start",
                "could not start (" + start_error_ + "); next try in " +
                    std::to_string(std::chrono::ceil<milliseconds>(retry_at_ - now).count()) +
                    " ms",
                error_kind::transient);
        try {
            store_ = create_();
            return store_;
        } catch (const std::exception& e) {
            start_error_ = e.what();
            pause_ = std::clamp<milliseconds>(2 * pause_, milliseconds(500), milliseconds(30000));
            retry_at_ = clock::now() + pause_;
            throw;
        }
    }

  private:
    std::string strategy_;
    std::function<std::shared_ptr<store>()> create_;
    std::mutex mutex_;
    std::shared_ptr<store> store_;
    std::string start_error_;
    clock::time_point retry_at_{};
    milliseconds pause_{0};
};

std::string member_text(std::size_t i, const std::string& strategy) {
    return "member " + std::to_string(i + 1) + " (" + strategy + ")";
}

// Requests of one owner that may wait for a member's busy request: more are refused, so that
// a poller does not pile up threads behind a member that does not answer.
constexpr int max_queued = 16;

// One member's part of one owner's lock: the member's own key (same resource and token) and
// what is known of its grant. Requests run on threads of their own and may outlive the round
// that sent them (a member that does not answer in time): such a request keeps the slot busy
// until it ends, and then settles the member by `wanted`, which the round's decision set.
struct slot {
    explicit slot(key k) : k(std::move(k)) {}
    std::mutex mutex;
    std::condition_variable idle;  // busy became false
    key k;                         // used only by the request that made the slot busy
    bool busy = false;
    int queued = 0;                 // requests waiting for the busy one to end (max_queued at most)
    std::optional<lock_mode> held;  // the member granted this, and no release or loss since
    bool unsure = false;            // a grant request failed: the member may have granted
    std::optional<lock_mode> wanted;  // what the owner keeps on the member; none: release it
};
using slots = std::vector<std::shared_ptr<slot>>;

// What a member must be asked, by `wanted`, once its request is over (nothing, release, or
// take the read lock back after a failed promotion). Requires the slot's mutex.
enum class fix { none, release, demote };
fix needed(const slot& s) {
    if (!s.wanted) return s.held || s.unsure ? fix::release : fix::none;
    if (*s.wanted == lock_mode::shared && (s.held == lock_mode::exclusive || s.unsure))
        return fix::demote;
    return fix::none;
}

// The owner's state in its key: the slots, kept across calls; the members' portable states
// and grants also travel in the owner's portable state, so a serialized key continues on every
// member.
struct owner_state final : key_local_state {
    ~owner_state() override {
        if (loss_epoll >= 0) ::close(loss_epoll);
        if (ask_again >= 0) ::close(ask_again);
    }
    slots members;
    std::optional<lock_mode> held;  // what the last grant gave, until release or loss
    int loss_epoll = -1;            // the members' loss descriptors, merged (do_loss_fd)
    int ask_again = -1;             // readable while a granting member was busy (do_loss_fd)
};

std::optional<lock_mode> mode_named(const nlohmann::json& j) {
    if (j == "exclusive") return lock_mode::exclusive;
    if (j == "shared") return lock_mode::shared;
    return std::nullopt;
}

slots make_slots(const key& k, std::size_t n) {
    slots out;
    const auto& portable = k.portable_state();
    const auto* saved = portable.contains("members") ? &portable["members"] : nullptr;
    const auto* grants = portable.contains("grants") ? &portable["grants"] : nullptr;
    for (std::size_t i = 0; i < n; ++i) {
        nlohmann::json j = {{"resource", k.resource()}, {"token", k.token()}};
        if (saved && saved->is_array() && i < saved->size() && (*saved)[i].is_object())
            j["state"] = (*saved)[i];
        auto s = std::make_shared<slot>(key::from_json(j));
        if (grants && grants->is_array() && i < grants->size()) {
            const auto& g = (*grants)[i];
            s->held = mode_named(g);
            s->unsure = g == "unsure";
        }
        out.push_back(std::move(s));
    }
    return out;
}

// One request, the same to every member asked.
struct request {
    enum class kind { acquire, refresh, release, holds, settle } what;
    lock_mode mode = lock_mode::exclusive;
    milliseconds ttl{0};
};

enum class answer { none, yes, no, failed };

// The answers of one round. Requests report into it while it is open; the caller closes it
// when it has what it waits for, and later answers are not counted.
struct round {
    explicit round(std::size_t n)
        : answers(n, answer::none), errors(n), transient(n, 0), states(n) {}
    std::mutex mutex;
    std::condition_variable changed;
    bool closed = false;
    std::vector<answer> answers;
    std::vector<std::string> errors;
    std::vector<char> transient;
    std::vector<lock_status> states;  // status rounds

    void report(std::size_t i, answer a, std::string error = {}, bool is_transient = false,
                lock_status state = {}) {
        {
            std::lock_guard guard(mutex);
            if (closed) return;
            answers[i] = a;
            errors[i] = std::move(error);
            transient[i] = is_transient;
            states[i] = std::move(state);
        }
        changed.notify_all();
    }
    void fail(std::size_t i, const std::exception& e) {
        const auto* b = dynamic_cast<const backend_error*>(&e);
        report(i, answer::failed, e.what(), b && b->transient());
    }
};

// Runs `job` on a thread of its own, with every signal blocked; false when no thread can be
// made.
bool launch(std::function<void()> job) {
    const every_signal_blocked in_the_new_thread;
    try {
        std::thread(std::move(job)).detach();
    } catch (const std::system_error&) {
        return false;
    }
    return true;
}

// What the members said in one round.
struct tally {
    std::size_t yes = 0;
    std::size_t no = 0;      // contention, or not held
    std::size_t failed = 0;  // threw, or gave no answer in time
    bool all_transient = true;
    std::string errors;
    error_kind kind() const {
        return all_transient ? error_kind::transient : error_kind::permanent;
    }
};

tally count(const std::vector<answer>& answers) {
    tally t;
    for (answer a : answers) {
        t.yes += a == answer::yes;
        t.no += a == answer::no;
        t.failed += a == answer::failed;
    }
    return t;
}

// The request on one member, recorded in its slot. Returns the member's yes or no; throws what
// the member throws.
bool carry_out(store& st, slot& s, const request& r) {
    switch (r.what) {
        case request::kind::acquire:
            if (!st.try_acquire(s.k, r.mode, r.ttl)) return false;
            {
                std::lock_guard guard(s.mutex);
                s.held = r.mode;
                s.unsure = false;
            }
            return true;
        case request::kind::refresh:
            if (st.refresh(s.k, r.ttl)) return true;
            {
                std::lock_guard guard(s.mutex);
                s.held.reset();
                s.unsure = false;
            }
            return false;
        case request::kind::release:
            st.release(s.k);
            {
                std::lock_guard guard(s.mutex);
                s.held.reset();
                s.unsure = false;
            }
            return true;
        case request::kind::holds:
            return st.holds(s.k);
        case request::kind::settle:
            return true;  // settle() does it
    }
    return false;
}

// Brings the member to what the owner wants of it (fix), then frees the slot. A member that
// fails here keeps its grant until its TTL ends: nothing better can be done now.
void settle(const std::shared_ptr<store>& st, slot& s, milliseconds ttl) {
    fix what;
    {
        std::lock_guard guard(s.mutex);
        what = needed(s);
        if (what == fix::none || !st) {
            s.busy = false;
            s.idle.notify_all();
            return;
        }
    }
    try {
        if (what == fix::demote && st->try_acquire(s.k, lock_mode::shared, ttl)) {
            std::lock_guard guard(s.mutex);
            s.held = lock_mode::shared;
            s.unsure = false;
        } else {
            st->release(s.k);
            std::lock_guard guard(s.mutex);
            s.held.reset();
            s.unsure = false;
        }
    } catch (const std::exception&) {
    }
    std::lock_guard guard(s.mutex);
    s.busy = false;
    s.idle.notify_all();
}

// A request's thread. `rd` is null for a request nobody waits for. A queued request first waits
// for the slot's busy request to end; if its round is over by then, it only settles the member.
void perform(const std::shared_ptr<member>& m, const std::shared_ptr<slot>& s, const request& r,
             const std::shared_ptr<round>& rd, std::size_t i, bool queued) {
    bool obsolete = false;
    if (queued) {
        {
            std::unique_lock guard(s->mutex);
            s->idle.wait(guard, [&] { return !s->busy; });
            s->busy = true;
            --s->queued;
        }
        if (rd) {
            std::lock_guard guard(rd->mutex);
            obsolete = rd->closed;
        }
    }
    std::shared_ptr<store> st;
    if (r.what == request::kind::settle || obsolete) {
        // The answer says that the member is settled (as far as it can be).
        try {
            st = m->get();
        } catch (const std::exception&) {
        }
        settle(st, *s, r.ttl);
        if (rd) rd->report(i, answer::yes);
        return;
    }
    answer a = answer::failed;
    std::string error = "unknown error";
    bool transient = false;
    try {
        st = m->get();
        a = carry_out(*st, *s, r) ? answer::yes : answer::no;
    } catch (const std::exception& e) {
        if (st && r.what == request::kind::acquire) {
            std::lock_guard guard(s->mutex);
            s->unsure = true;  // its reply may have been lost after it granted
        }
        error = e.what();
        const auto* b = dynamic_cast<const backend_error*>(&e);
        transient = b && b->transient();
    } catch (...) {
    }
    // The slot is free before the answer is given when nothing is left to do, so that the
    // owner's next call finds it free.
    bool done;
    {
        std::lock_guard guard(s->mutex);
        done = needed(*s) == fix::none || !st;
        if (done) {
            s->busy = false;
            s->idle.notify_all();
        }
    }
    if (rd) rd->report(i, a, a == answer::failed ? error : std::string(), transient);
    if (!done) settle(st, *s, r.ttl);
}

// Whether a member is asked in a round, and whether the round waits for its answer.
enum class asking { no, yes, without_waiting };

class combined_store final : public store {
  public:
    combined_store(quorum_rule rule, std::vector<std::shared_ptr<member>> members, capability caps,
                   std::optional<std::size_t> fencing_member)
        : store("combined", caps),
          rule_(rule),
          members_(std::move(members)),
          fencing_member_(fencing_member) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, milliseconds ttl) override {
        auto& state = state_of(k);
        // A failed promotion gives the members that promoted back their read lock.
        const bool promoting = state.held == lock_mode::shared && mode == lock_mode::exclusive;
        const std::size_t n = members_.size();
        const auto started = clock::now();
        // The round is bounded by the caller's deadline, and for expiring members by the TTL:
        // a grant that comes later is worth nothing (see the validity below).
        std::optional<clock::time_point> bound = caller_deadline();
        // Members that have not answered when the caller's time is up are no grant in time:
        // the caller's wait ends as if the lock were held, not with an error.
        const char* late = nullptr;
        if (has(capabilities(), capability::expiring)) {
            const auto validity = started + ttl - drift_margin(ttl);
            if (!bound || validity < *bound) {
                bound = validity;
                late = "no answer within the validity of the lock's ttl";
            }
        }
        const auto t = ask(
            state.members, {request::kind::acquire, mode, ttl},
            [&](slot& s) {
                s.wanted = mode;  // a grant that comes after the round is kept if it succeeds
                return asking::yes;
            },
            [&](const tally& so_far) {
                return quorum_met(rule_, so_far.yes, n) ||
                       !quorum_can_be_met(rule_, so_far.no + so_far.failed, n);
            },
            bound, late);
        auto give_back = [&] {
            // What the owner keeps: nothing, or after a failed promotion its read lock.
            const std::optional<lock_mode> keep =
                promoting ? std::optional(lock_mode::shared) : std::nullopt;
            settle_all(state.members, keep, ttl, bound);
            if (!promoting) state.held.reset();
            save_portable(k, state.members);
        };
        if (!quorum_met(rule_, t.yes, n)) {
            give_back();
            // Another owner holds members: contention, not an error, even where a member is
            // down too (with it up the answer would be no better), so that a waiter polls on.
            if (t.no > 0) return false;
            if (has(capabilities(), capability::expiring) &&
                clock::now() - started + drift_margin(ttl) >= ttl)
                throw expired_error("lock '" + k.resource() +
                                    "' (combined): no quorum within the validity of its ttl of " +
                                    std::to_string(ttl.count()) + " ms: " + quorum_text(t) +
                                    "; the grants were rolled back: " + t.errors);
            throw backend_error("combined", "quorum",
                                "lock '" + k.resource() + "': " + quorum_text(t) +
                                    "; the grants were rolled back: " + t.errors,
                                t.kind());
        }
        if (has(capabilities(), capability::expiring)) {
            // Redlock: the grant is worth its TTL less the time the round took and the clocks'
            // drift; with none left, another owner may already hold a member's grant again.
            const auto drift = drift_margin(ttl);
            const auto elapsed = clock::now() - started;
            if (elapsed + drift >= ttl) {
                give_back();
                throw expired_error(
                    "lock '" + k.resource() + "' (combined): the quorum was reached after " +
                    std::to_string(std::chrono::duration_cast<milliseconds>(elapsed).count()) +
                    " ms, leaving no validity of its ttl of " + std::to_string(ttl.count()) +
                    " ms (drift " + std::to_string(drift.count()) +
                    " ms); the grants were rolled back");
            }
        }
        // What the owner is told is left (and the renewal schedule) excludes the drift too.
        k.set_lifetime_margin(drift_margin(ttl));
        if (fencing_member_)
            k.set_fencing_token(state.members[*fencing_member_]->k.fencing_token());
        state.held = mode;
        save_portable(k, state.members);
        return true;
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        auto& state = state_of(k);
        const std::size_t n = members_.size();
        k.set_lifetime_margin(drift_margin(ttl));
        // Only members that granted, or may have (a request still under way), are asked; the
        // others hold nothing to refresh. An answer after the grant ran out is worth nothing: a
        // member without one by then did not refresh.
        auto t = ask(
            state.members, {request::kind::refresh, lock_mode::exclusive, ttl},
            [](slot& s) { return s.held || s.unsure || s.busy ? asking::yes : asking::no; },
            [&](const tally& so_far) { return quorum_met(rule_, so_far.yes, n); }, k.expires_at(),
            nullptr);
        t.no = n - t.yes - t.failed;  // a member not asked holds nothing
        save_portable(k, state.members);
        if (quorum_met(rule_, t.yes, n)) return true;
        if (!quorum_can_be_met(rule_, t.no, n)) {
            // Lost: what is left on the other members is no lock any more, free it for others.
            settle_all(state.members, std::nullopt, ttl, k.expires_at());
            state.held.reset();
            save_portable(k, state.members);
            return false;
        }
        // Failures, not refusals, missed the quorum: the renewal retries while time is left.
        throw backend_error(
            "combined", "quorum",
            "refreshing lock '" + k.resource() + "': " + quorum_text(t) + ": " + t.errors,
            t.kind());
    }

    // Releases on every member that granted and waits for them; a member that may have granted
    // (its grant request failed) is released too, without waiting, and is not reported: only a
    // member known to hold the lock and not releasing it keeps the lock from others.
    void do_release(key& k) override {
        auto& state = state_of(k);
        state.held.reset();
        const auto t = ask(
            state.members, {request::kind::release, lock_mode::exclusive, milliseconds(0)},
            [](slot& s) {
                s.wanted.reset();
                // A member with a request waiting already releases after it (it settles by
                // `wanted`); a member whose grant request is still under way, likewise.
                if (s.busy && (s.queued > 0 || !(s.held || s.unsure))) return asking::no;
                return s.held ? asking::yes : s.unsure ? asking::without_waiting : asking::no;
            },
            [](const tally&) { return false; }, std::nullopt);
        save_portable(k, state.members);
        if (t.failed)
            throw backend_error("combined", "release",
                                "releasing lock '" + k.resource() + "' failed on " +
                                    std::to_string(t.failed) + " of " +
                                    std::to_string(members_.size()) +
                                    " members that granted it: " + t.errors,
                                t.kind());
    }

    // The members' notices merged: an epoll set of the loss descriptors of the members that
    // granted, readable when one of them is, so that `run` hears at once that a member's session
    // ended and asks holds(), which tells whether the quorum still holds. Rebuilt at each call
    // (a member's descriptor may change with its answers). A member busy with a request is left
    // out this time (its answer will tell). A member that says its grant is gone already (-1)
    // is news nobody may have counted yet (its end can come between the caller's holds() and
    // this call): it is forgotten here, and the set made readable so that the caller asks
    // holds() again. nullopt when no member can end a grant but by release or expiry.
    std::optional<int> do_loss_fd(const key& k) override {
        auto* state = k.local_state_of<owner_state>(instance_id());
        if (!state || !state->held) return -1;
        std::vector<int> fds;
        bool watchable = false, busy = false, gone = false;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            auto& s = *state->members[i];
            {
                std::lock_guard guard(s.mutex);
                if (!s.held) continue;
                if (s.busy) {
                    busy = true;
                    continue;
                }
                s.busy = true;
            }
            std::optional<int> fd;
            try {
                fd = members_[i]->get()->loss_fd(s.k);
            } catch (...) {
                fd = std::nullopt;  // asked again at the next call
            }
            {
                std::lock_guard guard(s.mutex);
                s.busy = false;
            }
            s.idle.notify_all();
            watchable = watchable || fd.has_value();
            if (fd && *fd >= 0) {
                fds.push_back(*fd);
            } else if (fd) {
                std::lock_guard guard(s.mutex);
                s.held.reset();
                gone = true;
            }
        }
        if (!watchable && !busy) return std::nullopt;
        if (state->loss_epoll >= 0) ::close(state->loss_epoll);
        state->loss_epoll = ::epoll_create1(EPOLL_CLOEXEC);
        if (state->loss_epoll < 0)
            throw backend_error("combined", "epoll",
                                "cannot watch lock '" + k.resource() +
                                    "' for a loss: epoll_create1: " + std::strerror(errno),
                                errno_kind(errno));
        // A member left out while busy, or one just found gone: readable, so that the caller
        // asks holds() and then this again (`run` waits a moment between such asks) until every
        // descriptor can be watched.
        const bool ask_holds = busy || gone;
        if (state->ask_again < 0) state->ask_again = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (state->ask_again >= 0) {
            std::uint64_t value = 1;
            ssize_t ignored = ask_holds ? ::write(state->ask_again, &value, sizeof value)
                                        : ::read(state->ask_again, &value, sizeof value);
            (void)ignored;
            if (ask_holds) fds.push_back(state->ask_again);
        }
        for (const int fd : fds) {
            epoll_event event{};
            event.events = EPOLLIN;
            event.data.fd = fd;
            if (::epoll_ctl(state->loss_epoll, EPOLL_CTL_ADD, fd, &event) != 0)
                throw backend_error("combined", "epoll",
                                    "cannot watch lock '" + k.resource() +
                                        "' for a loss: epoll_ctl: " + std::strerror(errno),
                                    errno_kind(errno));
        }
        return state->loss_epoll;
    }

    bool do_holds(const key& k) override {
        slots fresh;
        auto* state = k.local_state_of<owner_state>(instance_id());
        if (!state) fresh = make_slots(k, members_.size());
        auto& members = state ? state->members : fresh;
        const std::size_t n = members_.size();
        // A member we cannot ask vouches for nothing.
        const auto t = ask(
            members, {request::kind::holds}, [](slot&) { return asking::yes; },
            [&](const tally& so_far) {
                return quorum_met(rule_, so_far.yes, n) ||
                       !quorum_can_be_met(rule_, so_far.no + so_far.failed, n);
            },
            std::nullopt);
        return quorum_met(rule_, t.yes, n);
    }

    // The members' answers merged by the quorum rule: held when a quorum of members says held
    // (the holders and, conservatively, the shortest time left among them), free when a quorum
    // of members is free (a new owner would be granted), unknown in between (members down or
    // disagreeing, e.g. a grant being rolled back). The members are asked at once, and the
    // answer is given once a quorum agrees.
    lock_status do_status(std::string_view resource) override {
        const std::size_t n = members_.size();
        auto rd = std::make_shared<round>(n);
        std::vector<char> waiting(n, 0);
        for (std::size_t i = 0; i < n; ++i) {
            auto job = [m = members_[i], rd, i, name = std::string(resource)] {
                try {
                    auto one = m->get()->status(name);
                    rd->report(i, answer::yes, {}, false, std::move(one));
                } catch (const std::exception& e) {
                    rd->fail(i, e);  // a member we cannot ask vouches for nothing
                } catch (...) {
                    rd->report(i, answer::failed, "unknown error");
                }
            };
            if (launch(std::move(job)))
                waiting[i] = 1;
            else
                rd->report(i, answer::failed, "no thread to ask it");
        }
        auto counts = [&](const std::vector<answer>& answers,
                          const std::vector<lock_status>& states) {
            std::size_t held = 0, exclusive = 0, free = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (answers[i] != answer::yes) continue;
                free += states[i].held == lock_status::state::free;
                held += states[i].held == lock_status::state::held_exclusive ||
                        states[i].held == lock_status::state::held_shared;
                exclusive += states[i].held == lock_status::state::held_exclusive;
            }
            return std::array<std::size_t, 3>{held, exclusive, free};
        };
        std::vector<answer> answers;
        std::vector<lock_status> states;
        {
            std::unique_lock guard(rd->mutex);
            rd->changed.wait(guard, [&] {
                const auto [held, exclusive, free] = counts(rd->answers, rd->states);
                if (quorum_met(rule_, exclusive, n) || quorum_met(rule_, free, n)) return true;
                return std::find(rd->answers.begin(), rd->answers.end(), answer::none) ==
                       rd->answers.end();
            });
            rd->closed = true;
            answers = rd->answers;
            states = rd->states;
        }
        const auto [held, exclusive, free] = counts(answers, states);
        lock_status merged;
        for (std::size_t i = 0; i < n; ++i) {
            auto& one = states[i];
            if (answers[i] != answer::yes || (one.held != lock_status::state::held_exclusive &&
                                              one.held != lock_status::state::held_shared))
                continue;
            for (auto& h : one.holders)
                if (std::find(merged.holders.begin(), merged.holders.end(), h) ==
                    merged.holders.end())
                    merged.holders.push_back(std::move(h));
            if (one.remaining && (!merged.remaining || *one.remaining < *merged.remaining))
                merged.remaining = one.remaining;
        }
        if (quorum_met(rule_, held, n)) {
            merged.held = quorum_met(rule_, exclusive, n) ? lock_status::state::held_exclusive
                                                          : lock_status::state::held_shared;
            return merged;
        }
        lock_status verdict;
        verdict.held =
            quorum_met(rule_, free, n) ? lock_status::state::free : lock_status::state::unknown;
        return verdict;
    }

    std::optional<std::uint64_t> do_fencing_token(key& k) override {
        auto& s = *state_of(k).members[*fencing_member_];
        std::optional<std::uint64_t> token;
        {
            // The slot's key is ours once its earlier request (a refresh, say) is over.
            std::unique_lock guard(s.mutex);
            s.idle.wait(guard, [&] { return !s.busy; });
            s.busy = true;
        }
        try {
            token = members_[*fencing_member_]->get()->fencing_token(s.k);
        } catch (...) {
            std::lock_guard guard(s.mutex);
            s.busy = false;
            s.idle.notify_all();
            throw;
        }
        {
            std::lock_guard guard(s.mutex);
            s.busy = false;
            s.idle.notify_all();
        }
        k.set_fencing_token(token);
        save_portable(k, state_of(k).members);
        return token;
    }

  private:
    owner_state& state_of(key& k) {
        if (auto* state = k.local_state_of<owner_state>(instance_id())) return *state;
        auto state = std::make_unique<owner_state>();
        state->members = make_slots(k, members_.size());
        auto& kept = *state;
        k.set_local_state(instance_id(), std::move(state));
        return kept;
    }

    // Sends `r` at once to every member that `prepare` (called under the slot's mutex, also for
    // a busy slot) says to ask, each on a thread of its own, and waits until `decided` says the
    // answers so far settle the round, every member waited for has answered, or `bound` passed.
    // A member still busy with an earlier request of this owner gets this one after it (up to
    // max_queued requests wait; with more the member counts as late). A member
    // without an answer by the bound counts as failed with the error `late`, or as a refusal
    // when `late` is null; its request goes on, and settles the member by `wanted` when it ends.
    tally ask(slots& members, const request& r, const std::function<asking(slot&)>& prepare,
              const std::function<bool(const tally&)>& decided,
              std::optional<clock::time_point> bound,
              const char* late = "no answer in time") const {
        const std::size_t n = members_.size();
        auto rd = std::make_shared<round>(n);
        std::vector<char> waiting(n, 0);
        for (std::size_t i = 0; i < n; ++i) {
            auto& s = members[i];
            asking how;
            bool queue = false, refused = false;
            {
                std::lock_guard guard(s->mutex);
                how = prepare(*s);
                if (how != asking::no) {
                    if (!s->busy)
                        s->busy = true;
                    else if (s->queued < max_queued)
                        ++s->queued, queue = true;
                    else
                        refused = true;
                }
            }
            if (how == asking::no) continue;
            const bool wait = how == asking::yes;
            if (refused) {
                // As late as a member that does not answer by the bound.
                if (wait && late)
                    rd->report(i, answer::failed, "has not answered earlier requests yet", true);
                else if (wait)
                    rd->report(i, answer::no);
                continue;
            }
            if (launch([m = members_[i], s, r, rd = wait ? rd : nullptr, i, queue] {
                    perform(m, s, r, rd, i, queue);
                })) {
                waiting[i] = wait;
            } else {
                {
                    std::lock_guard guard(s->mutex);
                    if (queue)
                        --s->queued;
                    else
                        s->busy = false;
                    s->idle.notify_all();
                }
                if (wait) rd->report(i, answer::failed, "no thread to ask it", true);
            }
        }
        std::vector<answer> answers;
        std::vector<std::string> errors;
        std::vector<char> transient;
        {
            std::unique_lock guard(rd->mutex);
            auto done = [&] {
                if (decided(count(rd->answers))) return true;
                for (std::size_t i = 0; i < n; ++i)
                    if (waiting[i] && rd->answers[i] == answer::none) return false;
                return true;
            };
            if (bound)
                rd->changed.wait_until(guard, *bound, done);
            else
                rd->changed.wait(guard, done);
            rd->closed = true;
            answers = rd->answers;
            errors = rd->errors;
            transient = rd->transient;
        }
        const bool settled_early = decided(count(answers));
        for (std::size_t i = 0; i < n; ++i)
            if (waiting[i] && answers[i] == answer::none && !settled_early) {
                answers[i] = late ? answer::failed : answer::no;
                errors[i] = late ? late : "";
                transient[i] = 1;
            }
        tally t = count(answers);
        for (std::size_t i = 0; i < n; ++i) {
            if (answers[i] != answer::failed) continue;
            if (!transient[i]) t.all_transient = false;
            t.errors += (t.errors.empty() ? "" : "; ") + member_text(i, members_[i]->strategy()) +
                        ": " + errors[i];
        }
        return t;
    }

    // Sets what the owner keeps on every member (`keep`: nothing, or the read lock after a
    // failed promotion) and brings the members that are not busy there, waiting for them up to
    // `bound`; a busy member gets there when its request ends.
    void settle_all(slots& members, std::optional<lock_mode> keep, milliseconds ttl,
                    std::optional<clock::time_point> bound) const {
        (void)ask(
            members, {request::kind::settle, lock_mode::shared, ttl},
            [&](slot& s) {
                s.wanted = keep;
                return needed(s) == fix::none ? asking::no : asking::yes;
            },
            [](const tally&) { return false; }, bound);
    }

    // Only serializable members' states travel; copying them costs, so only then. A busy
    // member's state is its last one (its request has the key).
    void save_portable(key& k, const slots& members) const {
        if (!has(capabilities(), capability::serializable)) return;
        auto& saved = k.portable_state()["members"];
        auto& grants = k.portable_state()["grants"];
        if (!saved.is_array() || saved.size() != members.size()) saved = nlohmann::json::array();
        if (!grants.is_array() || grants.size() != members.size()) grants = nlohmann::json::array();
        for (std::size_t i = 0; i < members.size(); ++i) {
            auto& s = *members[i];
            std::lock_guard guard(s.mutex);
            if (s.busy) {
                if (i >= saved.size()) {
                    saved.push_back(nlohmann::json::object());
                    grants.push_back("unsure");
                }
                continue;
            }
            const nlohmann::json grant = s.held ? nlohmann::json(std::string(to_string(*s.held)))
                                         : s.unsure ? nlohmann::json("unsure")
                                                    : nlohmann::json();
            if (i < saved.size()) {
                saved[i] = s.k.portable_state();
                grants[i] = grant;
            } else {
                saved.push_back(s.k.portable_state());
                grants.push_back(grant);
            }
        }
    }

    std::string quorum_text(const tally& t) const {
        const std::size_t n = members_.size();
        return std::string("the quorum (") +
               (rule_ == quorum_rule::consensus ? "consensus, " + std::to_string(n / 2 + 1)
                                                : "unanimous, " + std::to_string(n)) +
               " of " + std::to_string(n) + " members) was not reached: " + std::to_string(t.yes) +
               " granted, " + std::to_string(t.no) + " refused, " + std::to_string(t.failed) +
               " failed";
    }

    quorum_rule rule_;
    std::vector<std::shared_ptr<member>> members_;
    std::optional<std::size_t> fencing_member_;
};

std::optional<std::size_t> fencing_member_of(quorum_rule rule,
                                             const std::vector<capability>& caps) {
    if (rule != quorum_rule::unanimous) return std::nullopt;
    for (std::size_t i = 0; i < caps.size(); ++i)
        if (has(caps[i], capability::fencing)) return i;
    return std::nullopt;
}

bool expiring_disagrees(const std::vector<capability>& caps) {
    std::size_t expiring = 0;
    for (capability c : caps) expiring += has(c, capability::expiring);
    return expiring != 0 && expiring != caps.size();
}

// --- options ---

struct member_config {
    std::string strategy;
    nlohmann::json options;
    strategy_descriptor descriptor;
    capability capabilities = capability::none;
};

struct combined_config {
    quorum_rule rule = quorum_rule::consensus;
    std::vector<member_config> members;
};

capability capabilities_of(const strategy_descriptor& d, const nlohmann::json& options) {
    return d.capabilities_for && !options.is_null() ? d.capabilities_for(options) : d.capabilities;
}

// Reads and checks the options; `check_members` runs each member's own validator too.
// Throws config_error with a pointer relative to combined's options.
combined_config read_config(const nlohmann::json& o, const strategy_registry& registry,
                            bool check_members) {
    if (!o.is_object())
        throw config_error("config.missing", "",
                           "combined needs options: {\"quorum\": \"consensus\", \"members\": "
                           "[{\"strategy\": ..., \"options\": {...}}, ...]}");
    combined_config c;
    for (const auto& [name, value] : o.items()) {
        if (name == "quorum") {
            if (value == "consensus")
                c.rule = quorum_rule::consensus;
            else if (value == "unanimous")
                c.rule = quorum_rule::unanimous;
            else
                throw config_error("config.value", "/quorum",
                                   "quorum must be \"consensus\" (a majority of the members) or "
                                   "\"unanimous\" (every member)");
        } else if (name != "members") {
            throw config_error("config.unknown_key", "/" + json_pointer_token(name),
                               "unknown option '" + name + "' (known: quorum, members)");
        }
    }
    const auto it = o.find("members");
    if (it == o.end() || !it->is_array() || it->empty())
        throw config_error(it == o.end() ? "config.missing" : "config.type", "/members",
                           "members must be a non-empty array of {\"strategy\": <name>, "
                           "\"options\": {...}} (three or more for consensus)");
    std::vector<std::vector<std::string>> backends_of;  // per member read so far
    for (std::size_t i = 0; i < it->size(); ++i) {
        const auto& m = (*it)[i];
        const std::string at = "/members/" + std::to_string(i);
        if (!m.is_object())
            throw config_error("config.type", at,
                               "a member must be an object {\"strategy\": <name>, \"options\": "
                               "{...}}");
        for (const auto& [name, value] : m.items())
            if (name != "strategy" && name != "options")
                throw config_error("config.unknown_key", at + "/" + json_pointer_token(name),
                                   "unknown member key '" + name + "' (known: strategy, options)");
        const auto s = m.find("strategy");
        if (s == m.end() || !s->is_string())
            throw config_error(s == m.end() ? "config.missing" : "config.type", at + "/strategy",
                               "a member needs \"strategy\": the name of a strategy");
        member_config mc;
        mc.strategy = s->get<std::string>();
        mc.options = m.value("options", nlohmann::json());
        if (mc.strategy == "combined")
            throw config_error("config.value", at + "/strategy",
                               "a combined member cannot be combined itself: list its members "
                               "here instead");
        auto d = registry.find(mc.strategy);
        if (!d) {
            std::string known;
            for (const auto& n : registry.names())
                if (n != "combined") known += (known.empty() ? "" : ", ") + n;
            throw config_error(
                "config.value", at + "/strategy",
                "unknown member strategy '" + mc.strategy + "' (registered: " + known + ")");
        }
        std::vector<std::string> backends;  // where its locks live, when its strategy says
        if (check_members) {
            try {
                if (d->validate_options)
                    d->validate_options(mc.options);
                else
                    options_reader(mc.options).finish();
                if (d->backends) backends = d->backends(mc.options);
            } catch (const config_error& e) {
                throw config_error(e.id(), at + "/options" + e.pointer(),
                                   member_text(i, mc.strategy) + ": " + e.what());
            } catch (const std::exception& e) {  // e.g. a lock directory's path
                throw config_error("config.value", at + "/options",
                                   member_text(i, mc.strategy) + ": " + e.what());
            }
        }
        // What its strategy promises at top level must hold for a member too: a member that
        // excludes nothing (`null`) or only inside one process (`memory`) is a vote that every
        // owner gets, so two owners each reach the quorum with it (with three such members no
        // member excludes at all, and no "locking is off" warning would say so).
        if (!d->spans_processes || d->excludes_nothing)
            throw config_error(
                "config.value", at + "/strategy",
                member_text(i, mc.strategy) +
                    (d->excludes_nothing ? " excludes nothing"
                                         : " excludes only inside one process") +
                    ": every owner would get its vote, and two owners the quorum; a member must "
                    "exclude across processes");
        for (std::size_t j = 0; j < c.members.size(); ++j)
            if (c.members[j].strategy == mc.strategy && c.members[j].options == mc.options)
                throw config_error("config.value", at,
                                   member_text(i, mc.strategy) + " is " +
                                       member_text(j, mc.strategy) +
                                       " again: a backend listed twice has two votes, so the "
                                       "quorum holds with fewer backends than it says");
        // Two names of one server are one failure domain too: a restart or a flush of it takes
        // both votes. Only what the options say is compared (the strategy's `backends`).
        for (const auto& server : backends)
            for (std::size_t j = 0; j < c.members.size(); ++j)
                if (std::ranges::count(backends_of[j], server))
                    throw config_error(
                        "config.value", at,
                        member_text(i, mc.strategy) + " and " +
                            member_text(j, c.members[j].strategy) + " both use " + server +
                            ": one server's restart or flush takes both votes, so the quorum "
                            "holds with fewer backends than it says; give each member a server "
                            "of its own");
        backends_of.push_back(std::move(backends));
        mc.capabilities = capabilities_of(*d, mc.options);
        mc.descriptor = std::move(*d);
        c.members.push_back(std::move(mc));
    }
    std::vector<capability> caps;
    for (const auto& m : c.members) caps.push_back(m.capabilities);
    if (expiring_disagrees(caps))
        throw config_error("config.value", "/members",
                           "members must all expire (have TTLs) or none: a TTL means nothing to "
                           "a member without one, and a member with one needs it");
    return c;
}

std::vector<capability> capabilities_of(const combined_config& c) {
    std::vector<capability> caps;
    for (const auto& m : c.members) caps.push_back(m.capabilities);
    return caps;
}

strategy_descriptor make_descriptor(std::function<strategy_registry&()> registry) {
    strategy_descriptor d;
    d.name = "combined";
    d.description =
        "a quorum (consensus or unanimous) of member strategies, e.g. three Redis servers "
        "(Symfony CombinedStore, Redlock's validity)";
    d.default_priority = 70;
    d.capabilities = capability::exclusive | capability::shared | capability::noblock |
                     capability::expiring | capability::distributed | capability::serializable |
                     capability::crash_release | capability::fencing | capability::consensus;
    d.needs_configuration = true;
    d.example_options = {
        {"quorum", "consensus"},
        {"members",
         {{{"strategy", "redis"}, {"options", {{"url", "redis://host1:6379/0"}}}},
          {{"strategy", "redis"}, {"options", {{"url", "redis://host2:6379/0"}}}},
          {{"strategy", "redis"}, {"options", {{"url", "redis://host3:6379/0"}}}}}}};
    // Must not throw: the registry lists what it cannot read as the bare minimum.
    d.capabilities_for = [registry](const nlohmann::json& o) {
        try {
            const auto c = read_config(o, registry(), false);
            return combined_capabilities(c.rule, capabilities_of(c));
        } catch (const std::exception&) {
            return capability::exclusive | capability::noblock;
        }
    };
    d.validate_options = [registry](const nlohmann::json& o) {
        (void)read_config(o, registry(), true);
    };
    d.create = [registry](const nlohmann::json& o) -> std::shared_ptr<store> {
        auto c = read_config(o, registry(), true);
        const auto caps = capabilities_of(c);
        const std::size_t n = c.members.size();
        std::vector<std::shared_ptr<member>> members;
        // The members start at once; the store is ready as soon as a quorum of them is. The
        // others go on starting (a request to one waits for it) or, down, count as failed.
        auto rd = std::make_shared<round>(n);
        for (std::size_t i = 0; i < n; ++i) {
            auto& m = c.members[i];
            auto create = [d = m.descriptor, options = m.options] { return d.create(options); };
            members.push_back(std::make_shared<member>(m.strategy, std::move(create)));
            auto job = [m = members.back(), rd, i] {
                try {
                    (void)m->get();
                    rd->report(i, answer::yes);
                } catch (const std::exception& e) {
                    rd->fail(i, e);
                } catch (...) {
                    rd->report(i, answer::failed, "unknown error");
                }
            };
            if (!launch(std::move(job))) rd->report(i, answer::failed, "no thread to start it");
        }
        tally t;
        std::vector<std::string> why;
        {
            std::unique_lock guard(rd->mutex);
            rd->changed.wait(guard, [&] {
                const auto so_far = count(rd->answers);
                return quorum_met(c.rule, so_far.yes, n) ||
                       !quorum_can_be_met(c.rule, so_far.failed, n);
            });
            rd->closed = true;
            t = count(rd->answers);
            why = rd->errors;
        }
        // A member that is down now may come back, but a quorum is needed to start at all.
        if (!quorum_met(c.rule, t.yes, n)) {
            std::string errors;
            for (std::size_t i = 0; i < n; ++i)
                if (!why[i].empty())
                    errors += (errors.empty() ? "" : "; ") + member_text(i, c.members[i].strategy) +
                              ": " + why[i];
            throw backend_error("combined", "start",
                                "combined cannot reach its quorum: " + std::to_string(t.failed) +
                                    " of " + std::to_string(n) + " members cannot start: " + errors,
                                error_kind::transient);
        }
        return std::make_shared<combined_store>(c.rule, std::move(members),
                                                combined_capabilities(c.rule, caps),
                                                fencing_member_of(c.rule, caps));
    };
    return d;
}

}  // namespace

std::shared_ptr<store> make_combined_store(quorum_rule rule, std::vector<combined_member> members) {
    if (members.empty()) throw invalid_argument_error("combined needs at least one member");
    std::vector<capability> caps;
    std::vector<std::shared_ptr<member>> ms;
    for (std::size_t i = 0; i < members.size(); ++i) {
        auto& m = members[i];
        if (!m.backend)
            throw invalid_argument_error("combined: member '" + m.strategy + "' has no store");
        for (std::size_t j = 0; j < i; ++j)
            if (members[j].backend == m.backend)
                throw invalid_argument_error("combined: " + member_text(i, m.strategy) + " is " +
                                             member_text(j, members[j].strategy) +
                                             " again (one store, two votes)");
        caps.push_back(m.backend->capabilities());
        ms.push_back(std::make_shared<member>(m.strategy, m.backend));
    }
    if (expiring_disagrees(caps))
        throw invalid_argument_error("combined: members must all expire (have TTLs) or none");
    return std::make_shared<combined_store>(rule, std::move(ms), combined_capabilities(rule, caps),
                                            fencing_member_of(rule, caps));
}

strategy_descriptor combined_strategy_for(strategy_registry& members) {
    return make_descriptor([&members]() -> strategy_registry& { return members; });
}

// The built-in entry. The default registry is looked up at use, not here: this runs while that
// registry is being built.
strategy_descriptor combined_strategy() {
    return make_descriptor([]() -> strategy_registry& { return default_registry(); });
}

}  // namespace locksmith::strategies
