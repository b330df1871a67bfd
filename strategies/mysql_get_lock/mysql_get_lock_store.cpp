// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy's store (its registry entry is in mysql_get_lock_descriptor.cpp).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

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
enum slot : std::size_t { try_slot, wait_slot, release_slot, holds_slot, status_slot };
// A session that holds the name already would be granted again (counted): -1 then, never
// GET_LOCK. IF() evaluates only the branch it takes.
const std::string try_sql = "SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, 0))";
const std::string wait_sql = "SELECT IF(IS_USED_LOCK(?) = CONNECTION_ID(), -1, GET_LOCK(?, ?))";
// How many locks the session held (each grant counted): exactly 1 means ours, once.
const std::string release_sql = "SELECT RELEASE_ALL_LOCKS()";
const std::string holds_sql = "SELECT IS_USED_LOCK(?) = CONNECTION_ID()";
const std::string status_sql = "SELECT IS_USED_LOCK(?)";

// Idle sessions, none holding a lock (strategies/common/session_pool.hpp).
using session_cache = session_pool<mariadb_session, mariadb_target>;

// A key's grant: the session that holds it, pinned to the key until the release. Destroying it
// closes the session, which frees the lock on the server.
struct pinned_session : key_local_state {
    std::shared_ptr<session_cache> cache;  // the session's target lives there
    std::unique_ptr<mariadb_session> session;
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
        k.set_local_state(instance_id(), nullptr);
        // A session the server ended took the lock with it; one of the parent of a fork()ed
        // child is left alone.
        if (!session->ours() || session->hung_up()) return;
        // On an error the session is closed when `session` goes: the server frees its locks.
        const auto v = session->fetch_first(release_slot, release_sql, {}, "releasing a lock");
        // Exactly our one grant: the session holds nothing now and may serve another key. Any
        // other count (0: the grant was gone; more: a grant counted twice) closes it.
        if (v.row && !v.null && v.value == 1) cache_->give_back(std::move(session));
    }

    bool do_holds(const key& k) override {
        auto* held = k.local_state_of<pinned_session>(instance_id());
        if (!held || !held->session->ours() || held->session->hung_up()) return false;
        auto& session = *held->session;
        const auto name = mysql_get_lock_name(k.resource());
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
