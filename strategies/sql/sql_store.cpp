// SPDX-License-Identifier: MIT
// The sql strategy's store: one for every driver. The drivers (sqlite_driver.cpp,
// postgresql_driver.cpp, mariadb_driver.cpp) speak their dialects; the store owns the pool,
// the key ids, table creation and the module's registration.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include <locksmith/author/connection_pool.hpp>
#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>
#include <locksmith/version.hpp>

#include "sql_descriptor.hpp"
#include "sql_driver.hpp"

namespace locksmith::strategies {
namespace {

using namespace sql_detail;

const char* driver_name(sql_dsn::kind k) {
    switch (k) {
        case sql_dsn::kind::sqlite:
            return "SQLite";
        case sql_dsn::kind::postgresql:
            return "PostgreSQL";
        case sql_dsn::kind::mysql:
            return "MariaDB";
    }
    return "?";
}

// The driver of `options`, or an error naming the package the build lacked.
std::unique_ptr<connection> open_connection(const sql_options& options) {
    switch (options.dsn.driver) {
        case sql_dsn::kind::sqlite:
#ifdef LOCKSMITH_SQL_SQLITE
            return open_sqlite(options);
#else
            break;
#endif
        case sql_dsn::kind::postgresql:
#ifdef LOCKSMITH_SQL_POSTGRESQL
            return open_postgresql(options);
#else
            break;
#endif
        case sql_dsn::kind::mysql:
#ifdef LOCKSMITH_SQL_MARIADB
            return open_mariadb(options);
#else
            break;
#endif
    }
    const char* package = options.dsn.driver == sql_dsn::kind::sqlite       ? "libsqlite3-dev"
                          : options.dsn.driver == sql_dsn::kind::postgresql ? "libpq-dev"
                                                                            : "libmariadb-dev";
    throw invalid_argument_error(std::string("sql: this build has no ") +
                                 driver_name(options.dsn.driver) +
                                 " driver (rebuild locksmith with " + package + " installed)");
}

void check_ttl(milliseconds ttl) {
    if (ttl <= milliseconds(0))
        throw invalid_argument_error(
            "sql: ttl must be at least 1 ms (the resolution of the "
            "database clock used for expiry), got " +
            std::to_string(ttl.count()) + " ms");
}

// Counting semaphores (sql.hpp, Counting): a name's permit rows share the first 24 hex digits of
// its key id, followed by '/': `<prefix>limit` keeps the limit and the name's fence counter,
// `<prefix><slot>` (slot 1..limit) is one permit. A lock's key id (32 hex digits) never has a
// '/', so permits and locks of one name are separate rows.
struct permit_rows {
    explicit permit_rows(std::string_view resource)
        : prefix(sql_key_id(resource).substr(0, 24) + "/"), limit_id(prefix + "limit") {}
    std::string slot(std::int64_t number) const { return prefix + std::to_string(number); }
    std::string prefix, limit_id;
};

// Largest limit: an attempt reads the name's slot rows one by one (by key), up to the limit.
constexpr std::uint32_t max_permits = 1000;

// A semaphore's grant runs in a transaction (connection::begin); it is rolled back unless
// committed, also when a statement throws.
class transaction {
  public:
    explicit transaction(connection& c) : c_(c) { c_.begin(); }
    ~transaction() {
        if (!committed_) c_.rollback();
    }
    transaction(const transaction&) = delete;
    transaction& operator=(const transaction&) = delete;
    void commit() {
        c_.commit();
        committed_ = true;
    }

  private:
    connection& c_;
    bool committed_ = false;
};

// The slot number a permit's key keeps (0: none).
std::int64_t slot_of(const key& k) {
    const auto& state = k.portable_state();
    auto it = state.find("permit");
    if (it == state.end() || !it->is_number_unsigned()) return 0;
    return std::int64_t(it->get<std::uint64_t>());
}

class sql_store final : public store {
  public:
    explicit sql_store(sql_options options)
        : store("sql", options.dsn.driver == sql_dsn::kind::sqlite
                           ? sql_capabilities & ~capability::distributed
                           : sql_capabilities),
          options_(std::move(options)),
          pool_(pool_settings()) {
#ifdef LOCKSMITH_SQL_SQLITE
        if (options_.dsn.driver == sql_dsn::kind::sqlite) prepare_sqlite_file(options_);
#endif
        // Connect now and look at the table once, so that a wrong endpoint, password, database
        // or table fails at construction (and selection can fall back), not at the first lock.
        (void)run([](connection& c) { return c.holds(std::string(32, '0'), "-"); });
    }

  protected:
    bool do_try_acquire(key& k, lock_mode, milliseconds ttl) override {
        check_ttl(ttl);
        if (k.limit() != 0) return try_permit(k, ttl);
        const auto id = key_id(k.resource());
        auto fence = run([&](connection& c) { return c.acquire(id, k.token(), ttl); });
        if (!fence) return false;
        k.set_fencing_token(std::uint64_t(*fence));
        return true;
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        check_ttl(ttl);
        const auto id = row_of(k);
        if (id.empty()) return false;
        return run([&](connection& c) { return c.refresh(id, k.token(), ttl); });
    }

    void do_release(key& k) override {
        const auto id = row_of(k);
        if (id.empty()) return;
        run([&](connection& c) {
            c.release(id, k.token());
            return true;
        });
        if (k.limit() != 0) k.portable_state().erase("permit");
    }

    bool do_holds(const key& k) override {
        const auto id = row_of(k);
        if (id.empty()) return false;
        return run([&](connection& c) { return c.holds(id, k.token()); });
    }

    lock_status do_status(std::string_view resource) override {
        const auto id = key_id(resource);
        auto left = run([&](connection& c) { return c.remaining(id); });
        lock_status s;
        s.held = left ? lock_status::state::held_exclusive : lock_status::state::free;
        if (left) {
            s.remaining = *left;
            return s;
        }
        // A name whose lock is free and that keeps a limit is shown as a semaphore.
        const permit_rows rows(resource);
        const auto kept = run([&](connection& c) { return c.read_limit(rows.limit_id); });
        if (!kept) return s;
        check_limit_row(*kept, rows, resource);
        const auto held = run([&](connection& c) { return c.count_held(rows.prefix, *kept); });
        s.limit = std::uint32_t(*kept);
        s.permits_held = std::uint32_t(held);
        s.held = held < *kept ? lock_status::state::free : lock_status::state::held_exclusive;
        return s;
    }

  private:
    // The row k's grant is in: the name's lock row, or the slot row of its permit ("" when
    // the key holds no permit).
    static std::string row_of(const key& k) {
        if (k.limit() == 0) return key_id(k.resource());
        const auto slot = slot_of(k);
        return slot > 0 ? permit_rows(k.resource()).slot(slot) : std::string();
    }

    // A limit row another program wrote (or broke) is reported, never guessed at.
    void check_limit_row(std::int64_t kept, const permit_rows& rows,
                         std::string_view resource) const {
        if (kept >= 1 && kept <= std::int64_t(max_permits)) return;
        throw backend_error("sql", "foreign",
                            "sql: row '" + rows.limit_id + "' of table '" + table_shown(options_) +
                                "' in " + options_.dsn.redacted() +
                                " should keep the limit of semaphore '" + std::string(resource) +
                                "' (token 'limit', expires_ms 1.." + std::to_string(max_permits) +
                                ", fence a count) but holds something else; delete it to reset the "
                                "semaphore's limit (DELETE FROM " +
                                table_shown(options_) + " WHERE key_id = '" + rows.limit_id + "')",
                            error_kind::permanent);
    }

    // One attempt at a permit of k.resource(), in one transaction: lock the name's limit row
    // (grants of one name run one at a time), check or set the limit, take the lowest slot
    // that nobody holds. "At most limit holders" does not rest on the transaction: a slot row
    // is taken by one conditional upsert on its unique key, as a lock row is, and only slots
    // 1..limit exist for a grant, so N owners that agree on N never exceed it, and owners of
    // two limits (a limit row deleted meanwhile) never exceed the larger. The transaction makes
    // the limit check and the fencing token's order exact.
    bool try_permit(key& k, milliseconds ttl) {
        if (k.limit() > max_permits)
            throw invalid_argument_error("sql: a limit of " + std::to_string(k.limit()) + " for '" +
                                         k.resource() + "' exceeds " + std::to_string(max_permits) +
                                         " (an attempt reads the slot rows up to the limit)");
        const permit_rows rows(k.resource());
        const std::int64_t limit = k.limit();
        struct outcome {
            std::int64_t kept = 0;   // the limit kept for the name
            std::int64_t held = 0;   // permits held, when kept differs from ours
            std::int64_t slot = 0;   // the slot granted (0: none)
            std::int64_t fence = 0;  // its fencing token (0: our own grant, renewed)
        };
        const auto got = run([&](connection& c) {
            outcome o;
            transaction t(c);
            o.kept = c.lock_limit(rows.limit_id, limit);
            if (o.kept < 1 || o.kept > std::int64_t(max_permits)) return o;
            if (o.kept != limit) {
                // The limit changes only while no permit of either limit is held.
                o.held = c.count_held(rows.prefix, std::max(o.kept, limit));
                if (o.held > 0) return o;
                c.set_limit(rows.limit_id, limit);
                o.kept = limit;
            }
            const auto pick = c.pick_slot(rows.prefix, k.token(), limit);
            if (pick < 0) {
                // Ours already: renewed, as a lock's re-acquire is.
                if (c.refresh(rows.slot(-pick), k.token(), ttl)) o.slot = -pick;
            } else if (pick > 0) {  // the drivers offer slots 1..limit only
                const auto fence = c.next_fence(rows.limit_id);
                if (fence <= 0) {
                    o.kept = 0;  // a fence of nonsense: not a limit row of ours
                    return o;
                }
                if (c.take_slot(rows.slot(pick), k.token(), ttl, fence)) {
                    o.slot = pick;
                    o.fence = fence;
                }
            }
            t.commit();
            return o;
        });
        check_limit_row(got.kept, rows, k.resource());
        if (got.kept != limit)
            throw invalid_argument_error(
                "sql: semaphore '" + k.resource() + "' has a limit of " + std::to_string(got.kept) +
                " in table '" + table_shown(options_) + "', and " + std::to_string(got.held) +
                (got.held == 1 ? " of its permits is" : " of its permits are") +
                " held; this owner asks for " + std::to_string(limit) +
                ". One name has one limit: ask for " + std::to_string(got.kept) +
                ", or wait until no permit is held (the next grant then keeps the new limit)");
        if (got.slot == 0) return false;
        k.portable_state()["permit"] = std::uint64_t(got.slot);
        if (got.fence > 0) k.set_fencing_token(std::uint64_t(got.fence));
        return true;
    }

    static std::string key_id(std::string_view resource) {
        return sql_key_id(resource);
    }

    connection_pool<connection>::settings pool_settings() {
        connection_pool<connection>::settings s;
        s.size = options_.pool_size;
        s.max_wait = options_.connect_timeout + options_.command_timeout;
        s.open = [this] { return open_connection(options_); };
        s.reusable = [](const connection& c) { return c.usable(); };
        s.still_open = [](const connection& c) { return c.still_open(); };
        s.exhausted = [this] {
            throw backend_error("sql", "timeout",
                                "sql: no free connection to " + options_.dsn.redacted() +
                                    " within connect_timeout_s + command_timeout_s (pool_size " +
                                    std::to_string(options_.pool_size) + ")",
                                error_kind::transient);
        };
        return s;
    }

    // Runs `op` on a pooled connection; creates the table and runs it again when the table is
    // missing and create_table allows it.
    template <class Op>
    std::invoke_result_t<Op, connection&> run(Op op) {
        auto c = pool_.take();
        try {
            return op(*c);
        } catch (const missing_table& e) {
            if (!options_.create_table)
                throw backend_error("sql", e.native_code(),
                                    "sql: table '" + table_shown(options_) +
                                        "' does not exist in " + options_.dsn.redacted() +
                                        ": create it with the columns " + expected_columns +
                                        ", or set the option create_table to true",
                                    error_kind::permanent);
            c->create_table();
            return op(*c);
        }
    }

    sql_options options_;
    connection_pool<connection> pool_;
};

}  // namespace

std::shared_ptr<store> make_sql_store(const sql_options& options) {
    if (options.pool_size == 0) throw invalid_argument_error("sql: pool_size must be >= 1");
    // Options built in code are checked too: the names go into statements.
    if (const auto problem = table_name_problem(options); !problem.empty())
        throw invalid_argument_error("sql: " + problem);
    if (options.connect_timeout <= milliseconds(0) || options.command_timeout <= milliseconds(0))
        throw invalid_argument_error("sql: timeouts must be positive");
    auto password = resolve_secret(options.password, options.password_from, "sql", "password");
    if (password.empty()) return std::make_shared<sql_store>(options);
    if (!options.dsn.password.empty())
        throw invalid_argument_error("sql: dsn " + options.dsn.redacted() +
                                     " has a password and the options give one too: keep one");
    auto with_password = options;
    with_password.dsn.password = std::move(password);
    return std::make_shared<sql_store>(with_password);
}

// Fixed-size, stable across processes, hosts and versions (stable_name_hash never changes).
std::string sql_key_id(std::string_view name) {
    return stable_name_hash(name).hex();
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// sql_descriptor.cpp with the validator and the factory.
namespace {
void add_sql(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = sql_metadata();
    locksmith::set_factory<sql_options>(d, make_sql_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(sql, "sql", locksmith::version, add_sql)
