// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy's store (its registry entry is in mysql_get_lock_descriptor.cpp).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/mysql_get_lock.hpp>
#include <locksmith/version.hpp>

#include "mariadb_session.hpp"
#include "mysql_get_lock_descriptor.hpp"
#include "session_pool.hpp"

namespace locksmith::strategies {
namespace {

using namespace locksmith::mariadb;
using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

constexpr const char* strategy_name = "mysql_get_lock";

// The statements, each in its own slot of a session. The lock name is always a parameter.
enum slot : std::size_t {
    try_slot,
    wait_slot,
    release_slot,
    holds_slot,
    status_slot,
    free_permit_slot,
    take_permit_slot,
    other_limit_slot,
    limit_of_slot,
    release_permit_slot,
    count_permits_slot,
};
// A session that holds the name already would be granted again (counted): -1 then, never
// GET_LOCK. IF() evaluates only the branch it takes.
const std::string try_sql = "SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, 0))";
const std::string wait_sql = "SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, ?))";
// How many locks the session held (each grant counted): exactly 1 means ours, once.
const std::string release_sql = "SELECT RELEASE_ALL_LOCKS()";
const std::string holds_sql = "SELECT IS_USED_LOCK(?) = CONNECTION_ID()";
const std::string status_sql = "SELECT IS_USED_LOCK(?)";

// Largest limit: a permit is a session (MariaDB and MySQL allow 151 connections by default), and
// every grant looks at each of the slots 0..255 for a holder of another limit, a cost that grows
// with the slots (bench/permits/RESULTS.md: 1000 slots made a pair several times slower).
constexpr std::uint32_t max_permits = 256;

// A counting semaphore's statements (see the header's contract). Permit i (0-based) of a name is
// the user lock P = "locksmith~<32 hex of the name's hash>/<i>", and its holder also holds the
// marker P + "=" + N, N being its limit. A grant takes the marker before the permit and a release
// drops the permit before the marker: whoever holds a permit holds its marker. The names are
// parameters (CONCAT in the server).
// The slots 0..255 (their numbers in the server; no parameter inside the CTE, which MariaDB
// would count more than once).
#define LS_SLOTS "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 255) "
// The first permit in 0..N-1 that nobody holds (no row: all are held).
const std::string free_permit_sql = LS_SLOTS
    "SELECT i FROM s WHERE i < ? AND "
    "IS_USED_LOCK(CONCAT(?, i)) IS NULL ORDER BY i LIMIT 1";
// The marker (param 1), then the permit (param 2): 1 when both are held, 0 (holding neither)
// when either is taken. IF() evaluates only the branch it takes, so the order is kept.
const std::string take_permit_sql =
    "SELECT IF(GET_LOCK(?, 0) = 1, IF(GET_LOCK(?, 0) = 1, 1, RELEASE_LOCK(?) - 1), 0)";
// The first held permit at or after slot ? whose holder does not hold its marker for this limit
// (no row: none), among all 256 slots: the holder of another limit may hold any of them.
const std::string other_limit_sql = LS_SLOTS
    "SELECT i FROM (SELECT i, IS_USED_LOCK(CONCAT(?, i)) AS holder, "
    "IS_USED_LOCK(CONCAT(?, i, '=', ?)) AS marker FROM s WHERE i >= ?) AS held "
    "WHERE holder IS NOT NULL AND NOT (marker <=> holder) ORDER BY i LIMIT 1";
// The limit other than ? (0: any) whose marker the holder of permit ? holds (no row: none).
const std::string limit_of_sql =
    "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 256) "
    "SELECT n FROM s WHERE n <> ? AND IS_USED_LOCK(CONCAT(?, '=', n)) = IS_USED_LOCK(?) LIMIT 1";
// The permit first, then the marker (RELEASE_ALL_LOCKS counts it: 1 when it was all).
const std::string release_permit_sql = "SELECT IF(RELEASE_LOCK(?) = 1, RELEASE_ALL_LOCKS(), -1)";
const std::string count_permits_sql =
    LS_SLOTS "SELECT COUNT(*) FROM s WHERE IS_USED_LOCK(CONCAT(?, i)) IS NOT NULL";
#undef LS_SLOTS

// "locksmith~<hex>/": the prefix of a name's permits (never a lock's name: ':' and '#').
std::string permit_prefix(std::string_view resource) {
    return "locksmith~" + stable_name_hash(resource).hex() + "/";
}

// Idle sessions, none holding a lock (strategies/common/session_pool.hpp).
using session_cache = session_pool<mariadb_session, mariadb_target>;

// A key's grant: the session that holds it, pinned to the key until the release. Destroying it
// closes the session, which frees the lock on the server.
struct pinned_session : key_local_state {
    std::shared_ptr<session_cache> cache;  // the session's target lives there
    std::unique_ptr<mariadb_session> session;
    std::string permit;  // a counting semaphore's permit: its lock name ("": a lock)
};

class mysql_get_lock_store final : public store {
  public:
    explicit mysql_get_lock_store(mariadb_target target, std::size_t pool_size)
        : store(strategy_name, mysql_get_lock_capabilities),
          cache_(std::make_shared<session_cache>(std::move(target), pool_size)) {
        // Connect once now, so that a wrong DSN or password fails at construction (and the
        // factory falls back), and run the release statement, so that a server without it
        // (MariaDB < 10.5.2, MySQL < 5.7.5) is refused here rather than at every release. The
        // session is the first idle one.
        auto session = cache_->take();
        session->fetch_first(
            release_slot, release_sql, {},
            "checking for RELEASE_ALL_LOCKS() (MariaDB >= 10.5.2, MySQL >= 5.7.5)");
        cache_->give_back(std::move(session));
    }

  protected:
    bool do_try_acquire(key& k, lock_mode, milliseconds) override {
        if (k.limit() != 0) return try_permit(k);
        if (pinned(k)) return true;
        const auto name = mysql_get_lock_name(k.resource());
        auto session = cache_->take();
        const auto v = session->fetch_first(try_slot, try_sql, {text_param(name), text_param(name)},
                                            "acquiring a lock");
        if (!granted(v, *session, k)) {
            cache_->give_back(std::move(session));
            return false;
        }
        pin(k, std::move(session));  // the grant lives in this session: never pooled while held
        return true;
    }

    // The server cannot wait for any one of N locks: named_lock polls for a permit with its
    // backoff, and a release on this host wakes it (core/local_wake.hpp).
    bool do_waits_natively(const key& k) const override { return k.limit() == 0; }

    bool do_wait_acquire(key& k, lock_mode mode, milliseconds ttl, deadline until) override {
        // A deadline already passed is one attempt.
        if (pinned(k) || until <= deadline::clock::now()) return do_try_acquire(k, mode, ttl);
        const auto name = mysql_get_lock_name(k.resource());
        // Each GET_LOCK waits at most half the command timeout, so that its reply is due within
        // the command timeout (the client's read timeout): a dead server is noticed, and the
        // caller's deadline is checked between slices.
        const auto slice_max = std::max(milliseconds(1), cache_->target().command_timeout / 2);
        auto session = cache_->take();
        for (;;) {
            auto slice = slice_max;
            if (until != deadline::max()) {
                const auto left = std::chrono::ceil<milliseconds>(until - deadline::clock::now());
                if (left <= milliseconds(0)) {
                    cache_->give_back(std::move(session));
                    return false;
                }
                slice = std::min(slice, left);
            }
            double seconds = double(slice.count()) / 1000.0;
            const auto v = session->fetch_first(
                wait_slot, wait_sql, {text_param(name), text_param(name), real_param(seconds)},
                "waiting for a lock");
            if (granted(v, *session, k)) {
                pin(k, std::move(session));
                return true;
            }
        }
    }

    void do_release(key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held) return;
        auto session = std::move(held->session);
        const auto permit = std::move(held->permit);
        k.set_local_state(instance_id(), nullptr);  // `held` is gone
        // A session the server ended took the lock with it; one of the parent of a fork()ed
        // child is left alone.
        if (!session->ours() || session->hung_up()) return;
        // On an error the session is closed when `session` goes: the server frees its locks.
        const auto v = permit.empty()
                           ? session->fetch_first(release_slot, release_sql, {}, "releasing a lock")
                           : session->fetch_first(release_permit_slot, release_permit_sql,
                                                  {text_param(permit)}, "releasing a permit");
        // Exactly our one grant: the session holds nothing now and may serve another key. Any
        // other count (0: the grant was gone; more: a grant counted twice) closes it.
        if (v.row && !v.null && v.value == 1) cache_->give_back(std::move(session));
    }

    bool do_holds(const key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held || !held->session->ours() || held->session->hung_up()) return false;
        auto& session = *held->session;
        const auto name = held->permit.empty() ? mysql_get_lock_name(k.resource()) : held->permit;
        const auto started = clock::now();
        try {
            // The server's word, not ours: a session that ended (and with it the lock) fails here.
            const auto v = session.fetch_first(holds_slot, holds_sql, {text_param(name)},
                                               "checking that the lock is held");
            return v.row && !v.null && v.value == 1;
        } catch (const mariadb_error& e) {
            // A connection found killed or lost at once: the server ended the session, and the
            // lock with it. One that did not answer within the command timeout says nothing
            // about the lock: an error, not a loss (the session is unusable now, so later calls
            // say false).
            const bool lost =
                ends_session(e.code()) && clock::now() - started < session.target().command_timeout;
            if (lost) return false;
            throw;
        }
    }

    // The held session's socket: a session the server ends sends its goodbye there.
    std::optional<int> do_loss_fd(const key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held || !held->session->ours() || held->session->hung_up()) return -1;
        return held->session->socket();
    }

    lock_status do_status(std::string_view resource) override {
        const auto name = mysql_get_lock_name(resource);
        auto session = cache_->take();
        // A name whose permits are held is a semaphore: that is what status shows.
        const auto prefix = permit_prefix(resource);
        const auto count = session->fetch_first(count_permits_slot, count_permits_sql,
                                                {text_param(prefix)}, "counting permits");
        if (count.row && !count.null && count.value > 0) {
            lock_status s;
            s.permits_held = std::uint32_t(count.value);
            // The limit: the marker of the first held permit's holder.
            if (auto first = other_limit(*session, prefix, 0, "0"))
                s.limit = std::uint32_t(first->second);
            cache_->give_back(std::move(session));
            s.held = s.limit && *s.permits_held < *s.limit ? lock_status::state::free
                                                           : lock_status::state::held_exclusive;
            return s;
        }
        const auto v = session->fetch_first(status_slot, status_sql, {text_param(name)},
                                            "reading a lock's status");
        cache_->give_back(std::move(session));
        lock_status s;
        s.held = lock_status::state::free;
        if (v.row && !v.null) {
            s.held = lock_status::state::held_exclusive;
            s.holders.push_back("connection id " + std::to_string(v.value));
        }
        return s;
    }

  private:
    // One attempt at a permit: take the first free slot of 0..N-1 (marker, then permit), then
    // look for a holder of another limit among all slots. Taking before looking makes two owners
    // of different limits that take at once see each other: the later look sees the earlier
    // take, so at least one of them is refused (the header's contract).
    bool try_permit(key& k) {
        if (k.limit() > max_permits)
            throw invalid_argument_error(std::string(strategy_name) + ": a limit of " +
                                         std::to_string(k.limit()) + " for '" + k.resource() +
                                         "' exceeds " + std::to_string(max_permits) +
                                         " (each permit is a database session)");
        if (pinned(k)) return true;
        const auto prefix = permit_prefix(k.resource());
        const auto n = std::to_string(k.limit());
        long long limit = k.limit();
        auto session = cache_->take();
        std::string permit;
        // Each lost race (another owner took the slot found free) looks again; N tries at most.
        for (std::uint32_t attempt = 0; attempt < k.limit() && permit.empty(); ++attempt) {
            const auto free = session->fetch_first(free_permit_slot, free_permit_sql,
                                                   {integer_param(limit), text_param(prefix)},
                                                   "looking for a free permit");
            if (!free.row || free.null) break;
            const auto candidate = prefix + std::to_string(free.value);
            const auto marker = candidate + "=" + n;
            const auto v = session->fetch_first(
                take_permit_slot, take_permit_sql,
                {text_param(marker), text_param(candidate), text_param(marker)},
                "acquiring a permit");
            if (!v.row || v.null || (v.value != 0 && v.value != 1))
                session->fail("acquiring a permit", 1317,
                              "GET_LOCK returned NULL (the statement was killed, or the server "
                              "failed)");
            if (v.value == 1) permit = candidate;
        }
        if (auto other = other_limit(*session, prefix, k.limit(), n)) {
            if (permit.empty() || release_permit(*session, permit))
                cache_->give_back(std::move(session));
            throw invalid_argument_error(
                std::string(strategy_name) + ": semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(other->second) + ", held by its permits' holders; this owner asks " +
                "for " + n + ". One name has one limit: ask for " + std::to_string(other->second) +
                ", or wait until no permit is held");
        }
        if (permit.empty()) {
            cache_->give_back(std::move(session));
            return false;
        }
        const auto slot = std::stoull(permit.substr(prefix.size()));
        pin(k, std::move(session));
        k.local_state_of<pinned_session>(instance_id())->permit = permit;
        // Shown as 1..N (LOCKSMITH_PERMIT), as every counting strategy numbers its permits.
        k.portable_state()["permit"] = std::uint64_t(slot + 1);
        return true;
    }

    // A holder of a limit other than `limit` (0: any), as (its permit's slot, its limit); none
    // when every held permit's holder holds its marker for `limit`. A slot that looks wrong only
    // for an instant (its holder between its marker and its permit, or releasing) has no holder
    // of another limit when asked again: the look goes on after it.
    std::optional<std::pair<long long, long long>> other_limit(mariadb_session& session,
                                                               const std::string& prefix,
                                                               std::uint32_t limit,
                                                               const std::string& n) {
        long long from = 0, ours = limit;
        while (from < max_permits) {
            const auto v = session.fetch_first(
                other_limit_slot, other_limit_sql,
                {text_param(prefix), text_param(prefix), text_param(n), integer_param(from)},
                "checking the semaphore's limit");
            if (!v.row || v.null) return std::nullopt;
            const auto permit = prefix + std::to_string(v.value);
            const auto l =
                session.fetch_first(limit_of_slot, limit_of_sql,
                                    {integer_param(ours), text_param(permit), text_param(permit)},
                                    "reading the semaphore's limit");
            if (l.row && !l.null) return std::make_pair(v.value, l.value);
            from = v.value + 1;
        }
        return std::nullopt;
    }

    // Drops a permit taken by an owner that is refused after all: true when the session holds
    // nothing now (it may go back to the pool).
    bool release_permit(mariadb_session& session, const std::string& permit) {
        const auto v = session.fetch_first(release_permit_slot, release_permit_sql,
                                           {text_param(permit)}, "releasing a permit");
        return v.row && !v.null && v.value == 1;
    }

    // Whether GET_LOCK granted: 1 yes, 0 no (another session holds it). Throws for NULL (the
    // statement was killed, or an error) and for -1 (this session held the name already: a
    // second grant would be counted, and two keys would both believe they hold it).
    bool granted(const first_value& v, mariadb_session& session, const key& k) const {
        if (v.row && !v.null && (v.value == 0 || v.value == 1)) return v.value == 1;
        if (v.row && !v.null && v.value == -1)
            throw backend_error(strategy_name, "reentrant",
                                std::string(strategy_name) + ": lock '" + k.resource() +
                                    "' is held already by the connection that was to take it; "
                                    "refusing a second, counted grant (a bug: please report)",
                                error_kind::permanent);
        session.fail("acquiring a lock", 1317,
                     "GET_LOCK returned NULL (the statement was killed, or the server failed)");
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

    void pin(key& k, std::unique_ptr<mariadb_session> session) {
        auto state = std::make_unique<pinned_session>();
        state->cache = cache_;
        state->session = std::move(session);
        k.set_local_state(instance_id(), std::move(state));
    }

    std::shared_ptr<session_cache> cache_;
};

}  // namespace

std::shared_ptr<store> make_mysql_get_lock_store(const mysql_get_lock_options& options) {
    if (options.pool_size == 0)
        throw invalid_argument_error("mysql_get_lock: pool_size must be >= 1");
    if (options.connect_timeout <= milliseconds(0) || options.command_timeout <= milliseconds(0))
        throw invalid_argument_error("mysql_get_lock: timeouts must be positive");
    mariadb_target target;
    target.strategy = strategy_name;
    try {
        target.dsn = parse_sql_dsn(options.dsn);
    } catch (const invalid_argument_error& e) {
        throw invalid_argument_error(std::string(strategy_name) + ": " + e.what());
    }
    if (target.dsn.driver != sql_dsn::kind::mysql)
        throw invalid_argument_error(std::string(strategy_name) + ": dsn " + target.dsn.redacted() +
                                     " must be a mysql:// or mariadb:// URL");
    target.password = target.dsn.password;
    if (auto password =
            resolve_secret(options.password, options.password_from, strategy_name, "password");
        !password.empty()) {
        if (!target.password.empty())
            throw invalid_argument_error(
                "mysql_get_lock: the dsn has a password and the options give another: keep one");
        target.password = std::move(password);
    }
    target.connect_timeout = options.connect_timeout;
    target.command_timeout = options.command_timeout;
    return std::make_shared<mysql_get_lock_store>(std::move(target), options.pool_size);
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// mysql_get_lock_descriptor.cpp with the validator and the factory.
namespace {
void add_mysql_get_lock(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = mysql_get_lock_metadata();
    locksmith::set_factory<mysql_get_lock_options>(d, make_mysql_get_lock_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(mysql_get_lock, "mysql_get_lock", locksmith::version, add_mysql_get_lock)
