// SPDX-License-Identifier: MIT
// The sql strategy's store: one for every driver. The drivers (sqlite_driver.cpp,
// postgresql_driver.cpp, mariadb_driver.cpp) speak their dialects; the store owns the pool,
// the key ids, table creation and the module's registration.
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
        const auto id = key_id(k.resource());
        auto fence = run([&](connection& c) { return c.acquire(id, k.token(), ttl); });
        if (!fence) return false;
        k.set_fencing_token(std::uint64_t(*fence));
        return true;
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        check_ttl(ttl);
        const auto id = key_id(k.resource());
        return run([&](connection& c) { return c.refresh(id, k.token(), ttl); });
    }

    void do_release(key& k) override {
        const auto id = key_id(k.resource());
        run([&](connection& c) {
            c.release(id, k.token());
            return true;
        });
    }

    bool do_holds(const key& k) override {
        const auto id = key_id(k.resource());
        return run([&](connection& c) { return c.holds(id, k.token()); });
    }

    lock_status do_status(std::string_view resource) override {
        const auto id = key_id(resource);
        auto left = run([&](connection& c) { return c.remaining(id); });
        lock_status s;
        s.held = left ? lock_status::state::held_exclusive : lock_status::state::free;
        if (left) s.remaining = *left;
        return s;
    }

  private:
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
