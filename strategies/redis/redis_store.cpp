// SPDX-License-Identifier: MIT
// The redis strategy: store, scripts transport and pub/sub waiting, and the module's entry point
// (the registry entry's metadata is in redis_descriptor.cpp).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/redis.hpp>
#include <locksmith/version.hpp>

#include "cluster.hpp"
#include "redis_connection.hpp"
#include "redis_descriptor.hpp"
#include "redis_scripts.hpp"
#include "sentinel.hpp"

namespace locksmith::strategies {
namespace {

using namespace redis_detail;
using clock = deadline::clock;
using std::chrono::milliseconds;
using kind = redis_key_kind;

// The longest a waiting writer sleeps between two retries, each of which renews its place in the
// queue (the acquire script keeps a place for 3 s: a retry may come late on a loaded machine).
constexpr milliseconds waiter_renewal{1000};

enum script_id : std::size_t {
    acquire_id,
    refresh_id,
    release_id,
    unwait_id,
    holds_id,
    status_id,
    fence_id,
    acquire_permit_id,
    refresh_permit_id,
    release_permit_id
};
constexpr std::array<const char*, 10> script_text = {
    acquire_script,        refresh_script,       release_script, unwait_script,
    holds_script,          status_script,        fence_script,   acquire_permit_script,
    refresh_permit_script, release_permit_script};
constexpr std::array<const char*, 10> script_name = {
    "acquire", "refresh", "release",        "unwait",         "holds",
    "status",  "fence",   "acquire_permit", "refresh_permit", "release_permit"};

long long integer_at(const redisReply* r, std::size_t i) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements <= i ||
        r->element[i]->type != REDIS_REPLY_INTEGER)
        throw backend_error("redis", "protocol",
                            "redis: a lock script returned an unexpected reply",
                            error_kind::permanent);
    return r->element[i]->integer;
}

long long integer_of(const redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_INTEGER)
        throw backend_error("redis", "protocol",
                            "redis: a lock script returned an unexpected reply",
                            error_kind::permanent);
    return r->integer;
}

void check_ttl(milliseconds ttl) {
    if (ttl <= ttl.zero())
        throw invalid_argument_error("redis: ttl must be positive, got " +
                                     std::to_string(ttl.count()) + " ms");
}

// What this process remembers of a key between calls: that its last release handed the lock to
// a waiter. Its next wait then starts with the acquire script, which queues it: a plain SET NX
// would only fail while others take turns, a round trip per grant for nothing.
struct redis_key_state final : key_local_state {
    bool others_wait = false;
};

// The connection that one operation on a name uses: a lease of the store's pool, or in cluster
// mode one of the pool of the master that serves the name's slot, whose commands follow MOVED
// and ASK (and then stay on the node that answered: a WAIT must go where the write went).
class link {
  public:
    explicit link(connection_pool& pool) : c_(std::in_place, pool.take()) {}
    link(slot_router& router, std::uint16_t slot)
        : router_(&router), slot_(slot), c_(std::in_place, router.take(slot)) {}
    reply_ptr command(const std::vector<std::string_view>& args) {
        return router_ ? router_->command(slot_, c_, args) : (*c_)->command(args);
    }
    connection* operator->() const noexcept { return &**c_; }

  private:
    slot_router* router_ = nullptr;
    std::uint16_t slot_ = 0;
    std::optional<connection_pool::lease> c_;
};

// A script as a cluster runs it: its announcements sharded (SPUBLISH reaches the subscribers of
// the channel's slot on its master; a PUBLISH would be copied to every node of the cluster).
std::string sharded(std::string text) {
    for (auto at = text.find("'PUBLISH'"); at != std::string::npos; at = text.find("'PUBLISH'", at))
        text.replace(at, 9, "'SPUBLISH'");
    return text;
}

class redis_store final : public store {
  public:
    explicit redis_store(redis_options options)
        : store("redis", redis_capabilities),
          options_(std::move(options)),
          tls_(make_tls_context(options_)),
          locator_(options_.sentinels.empty() ? nullptr
                                              : std::make_unique<master_locator>(options_, tls_)),
          router_(options_.cluster.empty() ? nullptr
                                           : std::make_unique<slot_router>(options_, tls_)),
          pool_(settings()) {
        for (std::size_t i = 0; i < script_text.size(); ++i)
            text_[i] = router_ ? sharded(script_text[i]) : script_text[i];
        // Connect once now, so that a wrong endpoint or password fails at construction (and the
        // factory falls back), and load the scripts so that later calls go by SHA (a cluster's
        // other masters load them at their first NOSCRIPT).
        auto c = router_ ? link(*router_, 0) : link(pool_);
        for (std::size_t i = 0; i < script_text.size(); ++i) {
            auto reply = c.command({"SCRIPT", "LOAD", text_[i]});
            c->check(reply.get(), std::string("loading the ") + script_name[i] + " script");
            sha_[i] = std::string(reply->str, reply->len);
        }
    }

  protected:
    bool do_try_acquire(key& k, lock_mode mode, milliseconds ttl) override {
        if (k.limit() != 0) return acquire_permit(k, ttl).granted;
        if (mode == lock_mode::exclusive && try_grant_exclusive(k, ttl)) return true;
        return acquire(k, mode, ttl, 0, {}).granted;
    }

    // A failover behind Sentinel or in a cluster breaks connections and leaves the new master
    // without a replica (no grant confirmed) for seconds: the errors are transient, and
    // named_lock's wait rides them out, on connections to whichever master comes next.
    bool do_wait_acquire(key& k, lock_mode mode, milliseconds ttl, deadline until) override {
        return wait_acquire(k, mode, ttl, until);
    }

    bool wait_acquire(key& k, lock_mode mode, milliseconds ttl, deadline until) {
        if (k.limit() != 0) return wait_permit(k, ttl, until);
        if (mode == lock_mode::shared) return wait_shared(k, ttl, until);
        const auto* known = k.local_state_of<redis_key_state>(instance_id());
        if (!(known && known->others_wait) && try_grant_exclusive(k, ttl)) return true;
        // A waiting writer queues (acquire script) and sleeps on its own wake channel until a
        // release hands the lock over to it: first come, first served, and one wake-up per
        // grant instead of every waiter retrying at every release.
        std::unique_ptr<waker> w = take_waker(k.resource());
        const std::string member = std::to_string(ttl.count()) + " " + w->channel + " " +
                                   std::to_string(++w->waits) + " " + k.token();
        for (;;) {
            // A subscription that its node ended (the slot moved away) is made again, on the
            // same channel, at the slot's master, before the retry that may queue us again.
            if (w->subscriber->broken()) w->subscriber = subscribed(k.resource(), w->channel);
            auto now = clock::now();
            const long long wait_ms = std::max<long long>(1, ms_until(until, now));
            // The lifetime of a grant counts from here: a hand-over happens after this attempt
            // (else the attempt itself would have reported the grant).
            k.set_attempt_started(now);
            const outcome o = acquire(k, lock_mode::exclusive, ttl, wait_ms, member);
            if (o.granted) {
                give_back(std::move(w));
                return true;
            }
            now = clock::now();
            if (now >= until) {
                give_back(std::move(w));
                return withdraw(k, member);
            }
            // Sleep until the hand-over, but no longer than the obstacle can last (the holder's
            // TTL), a third of our TTL, or waiter_renewal: the retry renews the start of our
            // lifetime and our registration, which the acquire script keeps for 3 s only, so
            // that a waiter that died (stopped renewing) loses its place within 3 s instead of
            // being handed the lock, for its whole TTL, by a release long after its death. An
            // obstacle without a known end (a foreign key without TTL) is re-checked each second.
            milliseconds slice = o.value > 0 ? milliseconds(o.value + 1) : waiter_renewal;
            slice = std::min({slice, std::max(ttl / 3, milliseconds(1)), waiter_renewal,
                              milliseconds(ms_until(until, now)) + milliseconds(1)});
            if (handed_over(*w, member, now + slice)) {
                k.set_fencing_token(std::nullopt);  // drawn on request, as for a SET NX grant
                give_back(std::move(w));
                return confirm_hand_over(k, ttl);
            }
        }
    }
    bool do_refresh(key& k, milliseconds ttl) override {
        check_ttl(ttl);
        auto c = take(k.resource());
        const auto ttl_text = std::to_string(ttl.count());
        auto r =
            k.limit() != 0
                ? run(c, refresh_permit_id,
                      {name_of(kind::permits, k.resource()), name_of(kind::limit, k.resource())},
                      {k.token(), ttl_text})
                : run(c, refresh_id, {name_of(kind::lock, k.resource())}, {k.token(), ttl_text});
        if (integer_of(r.get()) != 1) return false;
        // Not confirmed: the lease is not extended (the watchdog retries while the last
        // confirmed one lasts, then reports the loss).
        if (!replicated(c)) not_replicated("refreshing lock '" + k.resource() + "'");
        return true;
    }

    void do_release(key& k) override {
        auto c = take(k.resource());
        if (k.limit() != 0) {
            release_permit(c, k);
            return;
        }
        const auto lock = name_of(kind::lock, k.resource());
        const auto wait = name_of(kind::wait, k.resource());
        const auto queue = name_of(kind::queue, k.resource());
        const auto readers = name_of(kind::readers, k.resource());
        const auto chan = name_of(kind::chan, k.resource());
        auto r = run(c, release_id, {lock, wait, queue, readers}, {k.token(), chan});
        const bool others_wait = integer_of(r.get()) == 2;
        auto* known = k.local_state_of<redis_key_state>(instance_id());
        if (others_wait && !known) {
            auto fresh = std::make_unique<redis_key_state>();
            known = fresh.get();
            k.set_local_state(instance_id(), std::move(fresh));
        }
        if (known) known->others_wait = others_wait;
    }

    bool do_holds(const key& k) override {
        auto c = take(k.resource());
        // The holds script reads a permit set as it reads a reader set.
        const auto lock = name_of(k.limit() != 0 ? kind::permits : kind::lock, k.resource());
        auto r = run(c, holds_id, {lock}, {k.token()});
        return integer_of(r.get()) == 1;
    }

    std::optional<std::uint64_t> do_fencing_token(key& k) override {
        if (auto known = k.fencing_token()) return known;
        auto c = take(k.resource());
        // A permit's token is drawn at its grant; a permit set is read as a reader set here, for
        // a key whose token did not travel with it.
        const auto lock = name_of(k.limit() != 0 ? kind::permits : kind::lock, k.resource());
        const auto fence = name_of(kind::fence, k.resource());
        auto r = run(c, fence_id, {lock, fence}, {k.token()});
        const auto token = integer_of(r.get());
        if (token <= 0)
            throw expired_error("redis: lock '" + k.resource() +
                                "' was lost before its fencing token was assigned");
        // A token a failover can lose could be drawn again by the promoted replica.
        if (!replicated(c))
            not_replicated("drawing the fencing token of lock '" + k.resource() + "'");
        k.set_fencing_token(std::uint64_t(token));
        return k.fencing_token();
    }

    lock_status do_status(std::string_view resource) override {
        auto c = take(resource);
        const auto lock = name_of(kind::lock, resource);
        const auto permits = name_of(kind::permits, resource);
        const auto limit = name_of(kind::limit, resource);
        auto r = run(c, status_id, {lock, permits, limit}, {});
        lock_status s;
        const auto state = integer_at(r.get(), 0);
        const auto holders = integer_at(r.get(), 1);
        const auto pttl = integer_at(r.get(), 2);
        switch (state) {
            case 0:
                s.held = lock_status::state::free;
                break;
            case 1:
                s.held = lock_status::state::held_exclusive;
                s.holders.push_back("one writer");
                break;
            case 2:
                s.held = lock_status::state::held_shared;
                s.holders.push_back(std::to_string(holders) + " reader(s)");
                break;
            case 4: {
                // A kept limit of 0: live holders whose limit key an administrator deleted.
                const auto kept = integer_at(r.get(), 3);
                s.permits_held = std::uint32_t(holders);
                if (kept > 0) s.limit = std::uint32_t(kept);
                s.held = kept > 0 && holders < kept ? lock_status::state::free
                                                    : lock_status::state::held_exclusive;
                break;
            }
            default:
                s.held = lock_status::state::unknown;
                s.holders.push_back("the key holds a value that is not a lock of this strategy");
        }
        if (pttl >= 0) s.remaining = milliseconds(pttl);
        return s;
    }

  private:
    struct outcome {
        bool granted;
        long long value;  // fence token (granted) or the obstacle's remaining ms (refused)
    };

    // A waiter for a permit retries at every release announced on the name's channel, or when
    // the first holder's TTL runs out (a holder that died announces nothing). Every waiter
    // retries at every release: permits are not handed over in order (not fair), which costs a
    // script call per waiter and release.
    bool wait_permit(key& k, milliseconds ttl, deadline until) {
        return wait_announced(k, name_of(kind::chan, k.resource()), until,
                              [&](clock::time_point) { return acquire_permit(k, ttl); });
    }

    // One attempt at a permit (acquire_permit_script); refusals as in outcome, a limit mismatch
    // or a foreign key as the errors they are.
    outcome acquire_permit(key& k, milliseconds ttl) {
        check_ttl(ttl);
        const auto permits = name_of(kind::permits, k.resource());
        const auto limit = name_of(kind::limit, k.resource());
        const auto fence = name_of(kind::fence, k.resource());
        const auto ttl_text = std::to_string(ttl.count());
        const auto limit_text = std::to_string(k.limit());
        auto c = take(k.resource());
        auto r =
            run(c, acquire_permit_id, {permits, limit, fence}, {k.token(), ttl_text, limit_text});
        const auto state = integer_at(r.get(), 0);
        if (state == 2)
            throw invalid_argument_error(
                "redis: semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(integer_at(r.get(), 1)) + ", kept in " + limit +
                " while a permit is held; this owner asks for " + limit_text +
                ". One name has one limit: ask for " + std::to_string(integer_at(r.get(), 1)) +
                ", or wait until no permit is held (the limit goes with the last holder)");
        if (state == 3) foreign_key(r.get(), permits, limit);
        if (state != 0 && state != 1) garbled_permit_reply(c, k);
        long long value;
        try {
            value = integer_at(r.get(), 1);
        } catch (const backend_error&) {
            if (state == 1) garbled_permit_reply(c, k);
            throw;
        }
        outcome o{state == 1, value};
        if (o.granted) confirm_grant(c, k);
        if (o.granted && o.value > 0) k.set_fencing_token(std::uint64_t(o.value));
        return o;
    }

    // A reply to the permit script that no script of ours gives (a proxy or a server that
    // garbles): a protocol error, never a refusal to wait on. The permit it may have granted is
    // given back first, so that it does not count against the limit until its TTL.
    [[noreturn]] void garbled_permit_reply(link& c, key& k) {
        try {
            release_permit(c, k);
        } catch (const std::exception&) {
            // The permit ends with its TTL anyway.
        }
        throw backend_error("redis", "protocol",
                            "redis: the permit script for '" + k.resource() +
                                "' returned a reply it never gives (a proxy or server that "
                                "garbles replies?)",
                            error_kind::permanent);
    }

    void release_permit(link& c, key& k) {
        const auto permits = name_of(kind::permits, k.resource());
        const auto limit = name_of(kind::limit, k.resource());
        const auto chan = name_of(kind::chan, k.resource());
        run(c, release_permit_id, {permits, limit}, {k.token(), chan});
    }

    // A key of a semaphore's name that is not ours (another program's, or planted): reported,
    // never overwritten.
    [[noreturn]] static void foreign_key(const redisReply* r, const std::string& permits,
                                         const std::string& limit) {
        const auto text = [&](std::size_t i) {
            if (r->elements <= i || r->element[i]->type != REDIS_REPLY_STRING) return std::string();
            return std::string(r->element[i]->str, r->element[i]->len);
        };
        const bool set = text(1) == "permits";
        const std::string what =
            set ? "'" + permits + "' is a " + text(2) + ", not locksmith's sorted set of permits"
            : text(2) == "value"
                ? "'" + limit + "' holds a value that is not a semaphore limit (1.." +
                      std::to_string(max_semaphore_limit) + ")"
                : "'" + limit + "' is a " + text(2) + ", not a semaphore limit";
        throw backend_error("redis", "foreign",
                            "redis: the key " + what +
                                ": another program's key? Delete it (when no locksmith process "
                                "uses the name) or choose another key_prefix",
                            error_kind::permanent);
    }

    // A reader retries at every release (and lapse) announced on the name's channel: readers
    // are admitted together, so waking them all is what it takes. Its attempts mark the name as
    // awaited by readers, else a release would announce nothing.
    bool wait_shared(key& k, milliseconds ttl, deadline until) {
        return wait_announced(k, name_of(kind::chan, k.resource()), until,
                              [&](clock::time_point now) {
                                  return acquire(k, lock_mode::shared, ttl,
                                                 std::max<long long>(1, ms_until(until, now)), {});
                              });
    }

    // Retries `try_once(now)` (an outcome) until it grants or `until` passes, sleeping between
    // tries on `channel`, where the name's releases are announced, but no longer than the
    // obstacle can last (its remaining ms; one second when it has no known end).
    template <class Attempt>
    bool wait_announced(key& k, const std::string& channel, deadline until, Attempt try_once) {
        std::unique_ptr<connection> subscriber;
        for (;;) {
            auto now = clock::now();
            k.set_attempt_started(now);
            const outcome o = try_once(now);
            if (o.granted) {
                recycle(std::move(subscriber));
                return true;
            }
            now = clock::now();
            if (now >= until) {
                recycle(std::move(subscriber));
                return false;
            }
            if (!subscriber) {
                // Subscribe, then try again at once: a release between the failed try and the
                // subscription has published to nobody, but the retry sees its effect.
                subscriber = subscribe(channel, k.resource());
                continue;
            }
            milliseconds slice = o.value > 0 ? milliseconds(o.value + 1) : milliseconds(1000);
            slice =
                std::min<milliseconds>(slice, milliseconds(ms_until(until, now)) + milliseconds(1));
            auto said = subscriber->read(std::max(slice, milliseconds(1)));
            if (said && unsubscribed_by_server(*said)) {
                router_->doubt();
                subscriber.reset();  // subscribe again, at the slot's new master
            }
        }
    }

    static long long ms_until(deadline until, clock::time_point now) {
        // A year bounds "forever": the script caps the registration by the holders' TTL anyway.
        constexpr long long year_ms = 365LL * 24 * 3600 * 1000;
        if (until >= now + milliseconds(year_ms)) return year_ms;
        return std::chrono::ceil<milliseconds>(until - now).count();
    }

    // In a cluster, every key and channel of a name carries its hash tag (one slot).
    std::string name_of(redis_key_kind kind, std::string_view resource) const {
        return redis_key(options_.key_prefix, kind, resource, router_ != nullptr);
    }

    // The connection for an operation on `resource`.
    link take(std::string_view resource) {
        if (!router_) return link(pool_);
        return link(*router_, slot_of(resource));
    }
    static std::uint16_t slot_of(std::string_view resource) { return key_slot(hash_tag(resource)); }

    // `member`: a waiting writer's queue entry (do_wait_acquire), else empty.
    outcome acquire(key& k, lock_mode mode, milliseconds ttl, long long wait_ms,
                    std::string_view member) {
        check_ttl(ttl);
        const auto lock = name_of(kind::lock, k.resource());
        const auto fence = name_of(kind::fence, k.resource());
        const auto wait = name_of(kind::wait, k.resource());
        const auto queue = name_of(kind::queue, k.resource());
        const auto readers = name_of(kind::readers, k.resource());
        const auto chan = name_of(kind::chan, k.resource());
        const auto ttl_text = std::to_string(ttl.count());
        const auto wait_text = std::to_string(wait_ms);
        auto c = take(k.resource());
        auto r = run(c, acquire_id, {lock, fence, wait, queue, readers},
                     {k.token(), ttl_text, mode == lock_mode::exclusive ? "x" : "s", wait_text,
                      chan, member});
        outcome o{integer_at(r.get(), 0) == 1, integer_at(r.get(), 1)};
        if (o.granted) confirm_grant(c, k);
        if (o.granted && o.value > 0) k.set_fencing_token(std::uint64_t(o.value));
        // {1, 0}: the lock holds our token already. The grant this key holds when it is alive
        // here (a re-acquire keeps its token); else a new one, handed over to a place in the
        // queue whose message we have not read (it came late, or the wait that queued us gave
        // up): its token is drawn on request, as for a hand-over read, never an earlier grant's.
        if (o.granted && o.value == 0 && (!k.expires_at() || k.is_expired()))
            k.set_fencing_token(std::nullopt);
        return o;
    }

    // The common case, a free name: one plain SET NX PX, the cheapest grant Redis has. A Lua
    // call costs the server several times what the commands in it cost (bench/redis/RESULTS.md),
    // and this is half of every uncontended lock/unlock pair. The grant carries no fencing token:
    // do_fencing_token assigns one if the owner asks. Everything else (a re-acquire, a promotion,
    // a reader set, the obstacle's TTL) is the acquire script's job: false sends the caller there.
    bool try_grant_exclusive(key& k, milliseconds ttl) {
        check_ttl(ttl);
        const auto lock = name_of(kind::lock, k.resource());
        const auto ttl_text = std::to_string(ttl.count());
        auto c = take(k.resource());
        auto r = c.command({"SET", lock, k.token(), "NX", "PX", ttl_text});
        c->check(r.get(), "granting the lock");
        if (r->type == REDIS_REPLY_NIL) return false;
        k.set_fencing_token(std::nullopt);  // a token of an earlier grant is not this grant's
        confirm_grant(c, k);
        return true;
    }

    // A writer that gives up waiting leaves the queue. True when the lock was handed over to
    // it in the meantime: then it holds the lock, and the wait succeeded.
    bool withdraw(key& k, const std::string& member) {
        auto c = take(k.resource());
        const auto wait = name_of(kind::wait, k.resource());
        const auto queue = name_of(kind::queue, k.resource());
        const auto lock = name_of(kind::lock, k.resource());
        const auto chan = name_of(kind::chan, k.resource());
        auto r = run(c, unwait_id, {wait, queue, lock}, {k.token(), chan, member});
        if (integer_of(r.get()) != 1) return false;
        k.set_fencing_token(std::nullopt);
        return confirm_hand_over(k, ttl_of_member(member));
    }

    // The pool's settings; behind Sentinel its connections go to the master the locator found,
    // and those of a forgotten master (an older generation) are dropped.
    connection_pool::settings settings() {
        auto s = pool_settings(options_, tls_);
        if (!locator_) return s;
        s.open = [this] { return locator_->connect(); };
        s.reusable = [this](const connection& c) {
            // A connection broken by an I/O error, READONLY or an unconfirmed write may be on a
            // master that is gone: ask the Sentinels again.
            if (c.broken()) locator_->forget(c.master_generation());
            return !c.broken() && locator_->current(c);
        };
        s.still_open = [this](const connection& c) { return locator_->current(c) && !c.stale(); };
        s.exhausted = [this] {
            throw backend_error("redis", "pool",
                                "redis: all " + std::to_string(options_.pool_size) +
                                    " connections to the " + locator_->description() +
                                    " stayed busy; raise pool_size",
                                error_kind::transient);
        };
        return s;
    }

    // A new connection outside the pool (waiters' subscribers): in a cluster, to the master of
    // `resource`'s slot.
    std::unique_ptr<connection> open_connection(std::string_view resource) {
        if (router_) return router_->connect(slot_of(resource));
        return locator_ ? locator_->connect()
                        : std::make_unique<connection>(options_, options_.endpoint, tls_);
    }

    // Whether an idle subscriber can serve a wait on `resource`: behind Sentinel, one to the
    // current master; in a cluster, one to the master of the name's slot.
    bool usable_for(const connection& c, std::string_view resource) {
        if (router_) return router_->serves(c, slot_of(resource));
        return !locator_ || locator_->current(c);
    }

    // WAIT: true when wait_replicas replicas have every write made so far on `c` (or none are
    // asked for). Else `c` is discarded: its server may be a master that is being demoted.
    bool replicated(link& c) {
        if (options_.wait_replicas == 0) return true;
        const auto replicas = std::to_string(options_.wait_replicas);
        const auto timeout = std::to_string(wait_timeout().count());
        auto r = c.command({"WAIT", replicas, timeout});
        c->check(r.get(), "waiting for replicas");
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= options_.wait_replicas) return true;
        c->discard();
        return false;
    }

    // WAIT's own timeout: half the command's, so that its answer arrives within the command's.
    milliseconds wait_timeout() const {
        return std::max(options_.command_timeout / 2, milliseconds(1));
    }

    [[noreturn]] void not_replicated(const std::string& what) const {
        throw backend_error("redis", "NOREPLICAS",
                            "redis: " + what + " was not confirmed by " +
                                std::to_string(options_.wait_replicas) + " replica(s) within " +
                                std::to_string(wait_timeout().count()) +
                                " ms (wait_replicas): a failover could lose it",
                            error_kind::transient);
    }

    // A grant just written on `c`: confirmed, or released (as far as this master goes) and
    // reported as not made, so that no failover can give the name to a second holder.
    void confirm_grant(link& written, key& k) {
        if (replicated(written)) return;
        try {
            if (k.limit() != 0) {
                release_permit(written, k);
                k.set_fencing_token(std::nullopt);
                not_replicated("granting a permit of '" + k.resource() + "'");
            }
            const auto lock = name_of(kind::lock, k.resource());
            const auto wait = name_of(kind::wait, k.resource());
            const auto queue = name_of(kind::queue, k.resource());
            const auto readers = name_of(kind::readers, k.resource());
            const auto chan = name_of(kind::chan, k.resource());
            run(written, release_id, {lock, wait, queue, readers}, {k.token(), chan});
        } catch (const std::exception&) {
            // The lease ends with its TTL anyway.
        }
        k.set_fencing_token(std::nullopt);
        not_replicated("granting lock '" + k.resource() + "'");
    }

    // A grant a release handed to us was written by the releaser's connection: a refresh of our
    // own (a write after it) confirms both with WAIT. False when the grant is gone already.
    bool confirm_hand_over(key& k, milliseconds ttl) {
        if (options_.wait_replicas == 0) return true;
        auto c = take(k.resource());
        const auto lock = name_of(kind::lock, k.resource());
        const auto ttl_text = std::to_string(ttl.count());
        auto r = run(c, refresh_id, {lock}, {k.token(), ttl_text});
        if (integer_of(r.get()) != 1) return false;
        confirm_grant(c, k);
        return true;
    }

    // The TTL a waiting writer's queue entry carries (its first word).
    static milliseconds ttl_of_member(const std::string& member) {
        return milliseconds(std::atoll(member.c_str()));
    }

    // A connection subscribed, for as long as it lives, to a channel of its own, on which a
    // release announces that it handed the lock over to the waiter that uses it.
    struct waker {
        std::unique_ptr<connection> subscriber;
        std::string channel;
        std::uint64_t waits = 0;  // numbers each wait, so that a late message is not mistaken
    };

    // In a cluster, a wake channel is in the slot of the name waited for (the release script
    // announces on it from that slot's master), so a waker moves to the channel of each wait.
    std::unique_ptr<waker> take_waker(std::string_view resource) {
        std::unique_ptr<waker> w;
        {
            std::lock_guard guard(subscribers_mutex_);
            for (auto it = idle_wakers_.end(); it != idle_wakers_.begin();) {
                --it;
                // Pending data on an idle subscriber is a hang-up or a late message: a fresh one
                // is cheaper than telling them apart.
                if ((*it)->subscriber->stale() ||
                    (locator_ && !locator_->current(*(*it)->subscriber))) {
                    it = idle_wakers_.erase(it);
                    continue;
                }
                if (!usable_for(*(*it)->subscriber, resource)) continue;
                w = std::move(*it);
                idle_wakers_.erase(it);
                break;
            }
        }
        if (w && !router_) return w;
        // Under the prefix, for ACLs.
        const auto channel = options_.key_prefix +
                             "wake:" + (router_ ? hash_tag(resource) : std::string()) +
                             random_token();
        if (w) {
            w->subscriber->send({"SUNSUBSCRIBE"});  // its confirmation is read by subscribe_on
            subscribe_on(*w->subscriber, channel);
        } else {
            w = std::make_unique<waker>();
            w->subscriber = subscribed(resource, channel);
        }
        w->channel = channel;
        return w;
    }

    void give_back(std::unique_ptr<waker> w) noexcept {
        if (w->subscriber->broken()) return;
        std::lock_guard guard(subscribers_mutex_);
        if (idle_wakers_.size() < options_.pool_size) idle_wakers_.push_back(std::move(w));
    }

    // Reads `w`'s channel until `until`: true once the message for `member` arrives (messages of
    // earlier waits carry another wait number and are skipped). A message "<member> next <ms>"
    // says that the lock went to the waiter ahead for ms, sooner than our retry: retry by then.
    bool handed_over(waker& w, const std::string& member, clock::time_point until) {
        const std::string next = member + " next ";
        for (;;) {
            const auto left = std::chrono::ceil<milliseconds>(until - clock::now());
            if (left <= left.zero()) return false;
            auto reply = w.subscriber->read(left);
            if (!reply) return false;
            if (unsubscribed_by_server(*reply)) {
                router_->doubt();
                w.subscriber->discard();
                return false;
            }
            if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
                reply->element[2]->type != REDIS_REPLY_STRING)
                continue;
            const std::string text(reply->element[2]->str, reply->element[2]->len);
            if (text == member) return true;
            if (text.rfind(next, 0) == 0) {
                const milliseconds grant(std::atoll(text.c_str() + next.size()));
                until = std::min(until, clock::now() + grant + milliseconds(1));
            }
        }
    }

    // A cluster node ends the subscriptions to the channels of a slot it no longer serves
    // (Redis 7: a "sunsubscribe" nobody asked for): the subscriber must go to the new master.
    bool unsubscribed_by_server(const redisReply& reply) const {
        return router_ && reply.type == REDIS_REPLY_ARRAY && reply.elements == 3 &&
               reply.element[0]->type == REDIS_REPLY_STRING &&
               std::string_view(reply.element[0]->str, reply.element[0]->len) == "sunsubscribe";
    }

    // A connection subscribed to `resource`'s channel `chan`: a recycled one when there is one,
    // else a new one.
    std::unique_ptr<connection> subscribe(const std::string& chan, std::string_view resource) {
        std::unique_ptr<connection> recycled;
        {
            std::lock_guard guard(subscribers_mutex_);
            for (auto it = idle_subscribers_.end(); it != idle_subscribers_.begin();) {
                --it;
                if (!usable_for(**it, resource)) continue;
                recycled = std::move(*it);
                idle_subscribers_.erase(it);
                break;
            }
        }
        if (recycled) {
            try {
                subscribe_on(*recycled, chan);
                return recycled;
            } catch (const backend_error&) {
                // Closed while idle (a server restart): a fresh connection decides.
            }
        }
        return subscribed(resource, chan);
    }

    // A new connection subscribed to `resource`'s channel `chan`. While a cluster moves the
    // slot, a node may answer MOVED (the map was stale, or the new master does not know yet that
    // it is one): then the map is read again and the subscription tried again, within the
    // command timeout. A subscription that failed costs a waiting writer its place in the queue
    // (its next one is under another channel), so it is worth the retry.
    std::unique_ptr<connection> subscribed(std::string_view resource, const std::string& chan) {
        const auto until = clock::now() + options_.command_timeout;
        for (milliseconds pause(10);; pause = std::min(pause * 2, milliseconds(200))) {
            auto s = open_connection(resource);
            try {
                subscribe_on(*s, chan);
                return s;
            } catch (const backend_error& e) {
                const bool moved = e.native_code() == "MOVED" || e.native_code() == "ASK";
                if (!router_ || !moved || clock::now() + pause >= until) throw;
            }
            router_->doubt();
            std::this_thread::sleep_for(pause);
        }
    }

    // In a cluster the channels are sharded (SSUBSCRIBE: on the master of their slot).
    void subscribe_on(connection& s, const std::string& chan) {
        const std::string_view confirmed = router_ ? "ssubscribe" : "subscribe";
        s.send({router_ ? "SSUBSCRIBE" : "SUBSCRIBE", chan});
        // A recycled connection first delivers what its previous use left: the confirmation of
        // its UNSUBSCRIBE and messages of the old channel published before that. The server
        // answers in order, so everything after our confirmation is about `chan`.
        for (;;) {
            auto reply = s.read(milliseconds(-1));
            if (!reply)
                s.fail("subscribing to the release channel", "timeout",
                       "no confirmation within " +
                           std::to_string(options_.command_timeout.count()) + " ms");
            s.check(reply.get(), "subscribing to the release channel");
            if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
                reply->element[0]->type == REDIS_REPLY_STRING &&
                std::string_view(reply->element[0]->str, reply->element[0]->len) == confirmed)
                return;
        }
    }

    // Unsubscribes without waiting for the answer (the next user reads it), so that the waiter
    // that just got its lock does not pay a round trip, and keeps the connection for the next
    // wait: waiting then costs no connection set-up (TCP, AUTH, SELECT).
    void recycle(std::unique_ptr<connection> s) noexcept {
        if (!s || s->broken()) return;
        try {
            s->send({router_ ? "SUNSUBSCRIBE" : "UNSUBSCRIBE"});
        } catch (const std::exception&) {
            return;
        }
        std::lock_guard guard(subscribers_mutex_);
        if (idle_subscribers_.size() < options_.pool_size)
            idle_subscribers_.push_back(std::move(s));
    }

    // EVALSHA, reloading the script when the server lost it (restart, SCRIPT FLUSH).
    reply_ptr run(link& c, script_id id, std::initializer_list<std::string_view> keys,
                  std::initializer_list<std::string_view> args) {
        const auto nkeys = std::to_string(keys.size());
        std::vector<std::string_view> argv{"EVALSHA", sha_[id], nkeys};
        argv.insert(argv.end(), keys.begin(), keys.end());
        argv.insert(argv.end(), args.begin(), args.end());
        auto reply = c.command(argv);
        if (reply->type == REDIS_REPLY_ERROR && reply_error_code(*reply) == "NOSCRIPT") {
            auto load = c.command({"SCRIPT", "LOAD", text_[id]});
            c->check(load.get(), std::string("reloading the ") + script_name[id] + " script");
            reply = c.command(argv);
        }
        c->check(reply.get(), std::string("running the ") + script_name[id] + " script");
        return reply;
    }

    redis_options options_;
    std::shared_ptr<const tls::tls_context> tls_;  // rediss:// only
    std::unique_ptr<master_locator> locator_;      // behind Sentinel only
    std::unique_ptr<slot_router> router_;          // Redis Cluster only
    connection_pool pool_;
    std::array<std::string, script_text.size()> text_;  // as this store sends them
    std::array<std::string, script_text.size()> sha_;
    std::mutex subscribers_mutex_;
    // Subscriber connections between two waits; each has an UNSUBSCRIBE in flight.
    std::vector<std::unique_ptr<connection>> idle_subscribers_;
    // Writers' wake connections between two waits, still subscribed.
    std::vector<std::unique_ptr<waker>> idle_wakers_;
};

}  // namespace

std::shared_ptr<store> make_redis_store(const redis_options& options) {
    if (options.pool_size == 0) throw invalid_argument_error("redis: pool_size must be >= 1");
    if (options.connect_timeout <= milliseconds(0) || options.command_timeout <= milliseconds(0))
        throw invalid_argument_error("redis: timeouts must be positive");
    if (options.wait_replicas < 0)
        throw invalid_argument_error("redis: wait_replicas must be >= 0");
    if (!options.sentinels.empty() && !options.cluster.empty())
        throw invalid_argument_error("redis: give sentinels or cluster, not both");
    if (!options.cluster.empty() && options.key_prefix.find_first_of("{}") != std::string::npos)
        throw invalid_argument_error("redis: in a cluster, key_prefix may not contain '{' or '}'");
    if (!options.sentinels.empty() && (options.master_name.empty() || options.wait_replicas < 1))
        throw invalid_argument_error(
            "redis: behind Sentinel, master_name is required and wait_replicas must be >= 1");
    auto with_secrets = options;
    if (!options.password_from.empty()) {
        if (!options.endpoint.password.empty())
            throw invalid_argument_error("redis: the password is given twice: keep one");
        with_secrets.endpoint.password =
            resolve_secret({}, options.password_from, "redis", "password");
    }
    if (!options.sentinel_password_from.empty()) {
        const auto secret =
            resolve_secret({}, options.sentinel_password_from, "redis", "sentinel_password");
        for (auto& s : with_secrets.sentinels) s.password = secret;
    }
    return std::make_shared<redis_store>(std::move(with_secrets));
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// redis_descriptor.cpp with the validator and the factory. liblocksmith_redis.so gets the entry
// point locksmith_plugin_info from CMake (cmake/LocksmithStrategy.cmake); the locksmith command
// links locksmith_plugin_info_redis directly.
namespace {
void add_redis(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = redis_metadata();
    locksmith::set_factory<redis_options>(d, make_redis_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(redis, "redis", locksmith::version, add_redis)
