// SPDX-License-Identifier: MIT
// The pg_advisory strategy's store (its registry entry is in pg_advisory_descriptor.cpp).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>

#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/pg_advisory.hpp>
#include <locksmith/version.hpp>

#include "pg_advisory_descriptor.hpp"
#include "pg_session.hpp"
#include "session_pool.hpp"

namespace locksmith::strategies {
namespace {

using namespace locksmith::pg;
using std::chrono::milliseconds;

constexpr const char* strategy_name = "pg_advisory";

// Idle sessions, none holding an advisory lock (strategies/common/session_pool.hpp).
using session_cache = session_pool<pg_session, pg_target>;

// A key's grant: the session that holds it, pinned to the key until the release. Destroying it
// closes the session, which frees the lock on the server.
struct pinned_session : key_local_state {
    std::shared_ptr<session_cache> cache;  // the session's target lives there
    std::unique_ptr<pg_session> session;
    lock_mode mode = lock_mode::exclusive;
    long long slot = -1;  // the permit's number, for a counting semaphore's key
};

// Largest limit: a permit is a session, so more than a server's connections is never reached,
// and an attempt that finds every permit held tries each of them.
constexpr std::uint32_t max_permits = 10000;

// A counting semaphore's statements. Permits are advisory locks in the (int4, int4) form
// (objsubid 2, never a name's lock): permit i of the name is (slots, i); every holder also
// holds (limits, N) shared, which tells the name's limit to the others; (limits, 0), taken for
// the transaction, makes the grants of one name one at a time, so that the limit check and the
// grant are one step. The two int4 are the two halves of the name's hash's low 64 bits.
struct permit_statements {
    permit_statements(std::string_view name, std::uint32_t limit) : n(std::to_string(limit)) {
        const auto low = stable_name_hash(name).low;
        slots_oid = std::uint32_t(low);
        limits_oid = std::uint32_t(low >> 32);
        slots = std::to_string(std::int32_t(slots_oid));
        limits = std::to_string(std::int32_t(limits_oid));
    }
    // One row: the other limit held for the name (0: none), the permit taken (-1: none). CASE,
    // not AND: SQL does not promise to evaluate AND's operands in order, and a limit lock taken
    // without a permit would stay on a pooled session.
    std::string try_take() const {
        return "SELECT pg_advisory_xact_lock(" + limits +
               ", 0); "
               "WITH other AS MATERIALIZED (SELECT objid::bigint AS n FROM pg_locks WHERE " +
               where(limits_oid) + " AND objid NOT IN (0, " + n +
               ") LIMIT 1), "
               "slot AS MATERIALIZED (SELECT i FROM generate_series(0, " +
               n + " - 1) AS i WHERE NOT EXISTS (SELECT 1 FROM other) AND pg_try_advisory_lock(" +
               slots +
               ", i) LIMIT 1) "
               "SELECT COALESCE((SELECT n FROM other), 0), COALESCE((SELECT i FROM slot), -1), "
               "CASE WHEN (SELECT i FROM slot) IS NOT NULL THEN pg_try_advisory_lock_shared(" +
               limits + ", " + n + ") END";
    }
    // The permits held (slot numbers), and the limits their holders hold.
    std::string held(bool own) const {
        return "SELECT objid FROM pg_locks WHERE " + where(slots_oid) +
               (own ? " AND pid = pg_backend_pid()" : "");
    }
    std::string kept_limits() const {
        return "SELECT DISTINCT objid FROM pg_locks WHERE " + where(limits_oid) +
               " AND objid <> 0 AND mode = 'ShareLock'";
    }
    static std::string where(std::uint32_t classid) {
        return "locktype = 'advisory' AND objsubid = 2 AND granted AND classid = " +
               std::to_string(classid) +
               " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    }
    std::string n, slots, limits;
    std::uint32_t slots_oid = 0, limits_oid = 0;
};

// The statements. Only the key, an integer, is spliced in: no name ever reaches SQL.
struct statements {
    explicit statements(std::string_view name) {
        const auto k = pg_advisory_lock_key(name);
        key = std::to_string(k);
        const auto bits = std::uint64_t(k);
        where = "locktype = 'advisory' AND classid = " + std::to_string(bits >> 32) +
                " AND objid = " + std::to_string(bits & 0xffffffffu) + " AND objsubid = 1";
    }
    std::string try_lock(lock_mode mode) const {
        return "SELECT pg_try_advisory_lock" + suffix(mode) + "(" + key + ")";
    }
    // Takes `mode` in a session that holds the other mode, and drops that one only once `mode`
    // is held: the session never conflicts with itself, and no instant holds neither. True when
    // granted; false (nothing changed) when another session holds a conflicting lock.
    std::string try_convert(lock_mode mode) const {
        const auto other = mode == lock_mode::exclusive ? lock_mode::shared : lock_mode::exclusive;
        return "SELECT CASE WHEN pg_try_advisory_lock" + suffix(mode) + "(" + key +
               ") THEN pg_advisory_unlock" + suffix(other) + "(" + key + ") ELSE false END";
    }
    // Waits in the server for at most `timeout_ms` (0: without bound); a timeout is SQLSTATE
    // 55P03 and, since the three statements run as one transaction, skips the rest. With
    // `converting`, the other mode is dropped once `mode` is held.
    std::string wait_lock(lock_mode mode, long long timeout_ms, bool converting) const {
        std::string sql = "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = " +
                          std::to_string(timeout_ms) + "; SELECT pg_advisory_lock" + suffix(mode) +
                          "(" + key + ")";
        if (converting)
            sql += "; SELECT pg_advisory_unlock" +
                   suffix(mode == lock_mode::exclusive ? lock_mode::shared : lock_mode::exclusive) +
                   "(" + key + ")";
        return sql;
    }
    // The session's own grant of this key, as the server sees it.
    std::string own_grant() const {
        return "SELECT mode FROM pg_locks WHERE " + where +
               " AND pid = pg_backend_pid() AND granted";
    }
    std::string holders() const {
        return "SELECT mode, pid FROM pg_locks WHERE " + where +
               " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
               " AND granted ORDER BY pid";
    }
    static std::string suffix(lock_mode mode) { return mode == lock_mode::shared ? "_shared" : ""; }
    std::string key;
    std::string where;
};

bool is_true(const pg_result& r) {
    return pg_rows(r.get()) == 1 && pg_value(r.get(), 0, 0) == "t";
}

const char* pg_mode(lock_mode mode) {
    return mode == lock_mode::shared ? "ShareLock" : "ExclusiveLock";
}

class pg_advisory_store final : public store {
  public:
    explicit pg_advisory_store(const pg_advisory_options& options)
        : store(strategy_name, pg_advisory_capabilities),
          cache_(std::make_shared<session_cache>(make_target(options), options.pool_size)) {
        // Connect once now, so that a wrong DSN fails at construction (and the factory falls
        // back); the session is the first idle one.
        cache_->give_back(cache_->take());
    }

  protected:
    bool do_try_acquire(key& k, lock_mode mode, milliseconds) override {
        if (k.limit() != 0) return try_permit(k);
        const statements sql(k.resource());
        if (auto* held = pinned(k)) {
            if (held->mode == mode) return true;
            if (!is_true(held->session->query(sql.try_convert(mode)))) return false;
            held->mode = mode;
            return true;
        }
        auto session = cache_->take();
        if (!is_true(session->query(sql.try_lock(mode)))) {
            cache_->give_back(std::move(session));
            return false;
        }
        pin(k, std::move(session), mode);
        return true;
    }

    // PostgreSQL cannot wait for any one of N locks: named_lock polls for a permit with its
    // backoff, and a release on this host wakes it (core/local_wake.hpp).
    bool do_waits_natively(const key& k) const override { return k.limit() == 0; }

    bool do_wait_acquire(key& k, lock_mode mode, milliseconds ttl, deadline until) override {
        auto* held = pinned(k);
        // A demotion never waits: the session's own exclusive lock is all that could conflict.
        // A deadline already passed is one attempt.
        if ((held && (held->mode == mode || mode == lock_mode::shared)) ||
            until <= deadline::clock::now())
            return do_try_acquire(k, mode, ttl);
        std::unique_ptr<pg_session> fresh;
        pg_session* session = held ? held->session.get() : nullptr;
        if (!session) {
            fresh = cache_->take();
            session = fresh.get();
        }
        const statements sql(k.resource());
        for (;;) {
            const auto now = deadline::clock::now();
            long long timeout_ms = 0;  // without bound
            auto reply_until = clock::time_point::max();
            if (until != deadline::max()) {
                timeout_ms = std::chrono::ceil<milliseconds>(until - now).count();
                if (timeout_ms <= 0) return give_up(std::move(fresh));
                timeout_ms = std::min<long long>(timeout_ms, INT_MAX);  // lock_timeout's range
                reply_until = now + milliseconds(timeout_ms) + session->target().command_timeout;
            }
            try {
                session->query(sql.wait_lock(mode, timeout_ms, held != nullptr), reply_until);
            } catch (const backend_error& e) {
                if (e.native_code() == "SQLSTATE 55P03") continue;  // lock_timeout: see above
                if (e.native_code() == "SQLSTATE 40P01")
                    throw acquire_error(std::string(strategy_name) + ": promoting lock '" +
                                        k.resource() +
                                        "' deadlocked with another reader that waits to promote "
                                        "too; the read lock is kept: release it and retry");
                throw;
            }
            if (held)
                held->mode = mode;
            else
                pin(k, std::move(fresh), mode);
            return true;
        }
    }

    void do_release(key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held) return;
        auto session = std::move(held->session);
        k.set_local_state(instance_id(), nullptr);
        // A session the server ended took the lock with it; one of the parent of a fork()ed
        // child is left alone.
        if (!session->ours() || session->hung_up()) return;
        // On an error the session is closed when `session` goes: the server frees its locks.
        session->query("SELECT pg_advisory_unlock_all()");
        cache_->give_back(std::move(session));
    }

    bool do_holds(const key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held || !held->session->ours() || held->session->hung_up()) return false;
        // The server's word, not ours: a session that ended (and with it the lock) fails here.
        pg_result r;
        try {
            r = held->session->query(k.limit() != 0
                                         ? permit_statements(k.resource(), k.limit()).held(true)
                                         : statements(k.resource()).own_grant(),
                                     "checking that the lock is held");
        } catch (const backend_error& e) {
            // A session the server ended took the lock with it. A server that did not answer in
            // time says nothing about the lock: an error, not a loss (our side closed the
            // session, so later calls find it gone).
            if (held->session->broken() && e.native_code() != "timeout") return false;
            throw;
        }
        if (k.limit() != 0)
            return pg_rows(r.get()) == 1 && pg_value(r.get(), 0, 0) == std::to_string(held->slot);
        return pg_rows(r.get()) == 1 && pg_value(r.get(), 0, 0) == pg_mode(held->mode);
    }

    // The held session's socket: a session the server ends sends its goodbye there.
    std::optional<int> do_loss_fd(const key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held || !held->session->ours() || held->session->hung_up()) return -1;
        return held->session->socket();
    }

    lock_status do_status(std::string_view resource) override {
        auto session = cache_->take();
        auto r = session->query(statements(resource).holders());
        // A name whose permits are held is a semaphore: that is what status shows.
        const permit_statements permits(resource, 1);
        auto held = session->query(permits.held(false));
        auto limits = session->query(permits.kept_limits());
        cache_->give_back(std::move(session));
        lock_status s;
        if (pg_rows(held.get()) > 0) {
            s.permits_held = std::uint32_t(pg_rows(held.get()));
            if (pg_rows(limits.get()) == 1)
                s.limit = std::uint32_t(std::stoul(std::string(pg_value(limits.get(), 0, 0))));
            s.held = s.limit && *s.permits_held < *s.limit ? lock_status::state::free
                                                           : lock_status::state::held_exclusive;
            return s;
        }
        s.held = lock_status::state::free;
        for (int row = 0; row < pg_rows(r.get()); ++row) {
            const auto mode = pg_value(r.get(), row, 0);
            s.held = mode == "ShareLock" ? lock_status::state::held_shared
                                         : lock_status::state::held_exclusive;
            s.holders.push_back("backend pid " + std::string(pg_value(r.get(), row, 1)));
        }
        return s;
    }

  private:
    // One attempt at a permit, in one round trip (permit_statements::try_take).
    bool try_permit(key& k) {
        if (k.limit() > max_permits)
            throw invalid_argument_error(std::string(strategy_name) + ": a limit of " +
                                         std::to_string(k.limit()) + " for '" + k.resource() +
                                         "' exceeds " + std::to_string(max_permits) +
                                         " (each permit is a database session)");
        if (pinned(k)) return true;
        const permit_statements sql(k.resource(), k.limit());
        auto session = cache_->take();
        auto r = session->query(sql.try_take(), "acquiring a permit");
        if (pg_rows(r.get()) != 1)
            throw backend_error(
                strategy_name, "protocol",
                std::string(strategy_name) + ": the permit statement returned no row",
                error_kind::permanent);
        const auto other = std::stoll(std::string(pg_value(r.get(), 0, 0)));
        const auto slot = std::stoll(std::string(pg_value(r.get(), 0, 1)));
        if (other != 0) {
            cache_->give_back(std::move(session));
            throw invalid_argument_error(
                std::string(strategy_name) + ": semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(other) + ", held by its permits' holders; this owner asks for " +
                sql.n + ". One name has one limit: ask for " + std::to_string(other) +
                ", or wait until no permit is held");
        }
        if (slot < 0) {
            cache_->give_back(std::move(session));
            return false;
        }
        pin(k, std::move(session), lock_mode::exclusive);
        auto* held = k.local_state_of<pinned_session>(instance_id());
        held->slot = slot;
        // Shown as 1..N (LOCKSMITH_PERMIT), as every counting strategy numbers its permits.
        k.portable_state()["permit"] = std::uint64_t(slot + 1);
        return true;
    }

    static pg_target make_target(const pg_advisory_options& options) {
        auto target = make_pg_target(
            strategy_name, options.dsn,
            resolve_secret(options.password, options.password_from, strategy_name, "password"));
        target.connect_timeout = options.connect_timeout;
        target.command_timeout = options.command_timeout;
        return target;
    }

    // k's grant, for an acquire: null when k has none (a grant of the parent of a fork()ed
    // child is not the child's: dropped). A session that the server ended took the lock with it,
    // and the owner must hear of that before it is granted again: acquire_error, and the grant
    // is kept until release() (named_lock reports the loss, then releases).
    pinned_session* pinned(key& k) {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held) return nullptr;
        if (!held->session->ours()) {
            k.set_local_state(instance_id(), nullptr);
            return nullptr;
        }
        if (held->session->hung_up())
            throw acquire_error(std::string(strategy_name) + ": lock '" + k.resource() +
                                "' was lost: the server ended the session that held it; release "
                                "it before acquiring it again");
        return held;
    }

    void pin(key& k, std::unique_ptr<pg_session> session, lock_mode mode) {
        auto state = std::make_unique<pinned_session>();
        state->cache = cache_;
        state->session = std::move(session);
        state->mode = mode;
        k.set_local_state(instance_id(), std::move(state));
    }

    bool give_up(std::unique_ptr<pg_session> fresh) {
        cache_->give_back(std::move(fresh));
        return false;
    }

    std::shared_ptr<session_cache> cache_;
};

}  // namespace

std::shared_ptr<store> make_pg_advisory_store(const pg_advisory_options& options) {
    if (options.pool_size == 0) throw invalid_argument_error("pg_advisory: pool_size must be >= 1");
    if (options.connect_timeout <= milliseconds(0) || options.command_timeout <= milliseconds(0))
        throw invalid_argument_error("pg_advisory: timeouts must be positive");
    return std::make_shared<pg_advisory_store>(options);
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// pg_advisory_descriptor.cpp with the validator and the factory.
namespace {
void add_pg_advisory(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = pg_advisory_metadata();
    locksmith::set_factory<pg_advisory_options>(d, make_pg_advisory_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(pg_advisory, "pg_advisory", locksmith::version, add_pg_advisory)
