// SPDX-License-Identifier: MIT
// The sql strategy's PostgreSQL driver: its statements, over the shared libpq layer
// (strategies/common/pq, pg_session), which bounds every wait by connect_timeout and
// command_timeout even when the server stops answering. Statements are prepared once per
// connection.
#include <array>
#include <string>

#include "pg_session.hpp"
#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

// The database's clock in ms. statement_timestamp() is one value for the whole statement.
#define LS_NOW "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"

enum statement_id { acquire_id, refresh_id, release_id, holds_id, remaining_id, statement_count };

struct statement {
    const char* name;
    const char* what;  // for messages
    int params;
};
constexpr std::array<statement, statement_count> statements = {{
    {"locksmith_acquire", "acquiring a lock", 3},
    {"locksmith_refresh", "refreshing a lock", 3},
    {"locksmith_release", "releasing a lock", 2},
    {"locksmith_holds", "checking a lock", 2},
    {"locksmith_remaining", "reading a lock's status", 1},
}};

// SQLSTATEs that mean the table is not the one the strategy creates.
bool wrong_shape(const std::string& state) {
    return state == "42703" || state == "42804" || state == "42P10" || state == "22001" ||
           state == "42883" || state == "23502";
}

pg::pg_target target_of(const sql_options& o) {
    // Checked as pg_advisory's DSN; the password may also come from the options (make_sql_store).
    auto t = pg::make_pg_target("sql", o.dsn.text);
    if (t.password.empty()) t.password = o.dsn.password;
    t.connect_timeout = o.connect_timeout;
    t.command_timeout = o.command_timeout;
    return t;
}

class pg_connection final : public connection {
  public:
    explicit pg_connection(const sql_options& o) : o_(o), target_(target_of(o)), session_(target_) {
        const std::string table = table_sql(o, '"');
        sql_[acquire_id] = "INSERT INTO " + table +
                           " AS l (key_id, token, expires_ms, fence) VALUES ($1, $2, " LS_NOW
                           " + $3::bigint, 1) ON CONFLICT (key_id) DO UPDATE SET token = "
                           "EXCLUDED.token, expires_ms = EXCLUDED.expires_ms, fence = CASE WHEN "
                           "l.token = EXCLUDED.token THEN l.fence ELSE l.fence + 1 END WHERE "
                           "l.token = EXCLUDED.token OR l.expires_ms <= " LS_NOW
                           " RETURNING l.fence";
        sql_[refresh_id] =
            "UPDATE " + table +
            " SET expires_ms = " LS_NOW
            " + $3::bigint WHERE key_id = $1 AND token = $2 AND expires_ms > " LS_NOW;
        sql_[release_id] =
            "UPDATE " + table + " SET token = '', expires_ms = 0 WHERE key_id = $1 AND token = $2";
        sql_[holds_id] =
            "SELECT 1 FROM " + table + " WHERE key_id = $1 AND token = $2 AND expires_ms > " LS_NOW;
        sql_[remaining_id] = "SELECT expires_ms - " LS_NOW " FROM " + table +
                             " WHERE key_id = $1 AND token <> '' AND expires_ms > " LS_NOW;
    }

    std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                        milliseconds ttl) override {
        const auto ttl_text = std::to_string(ttl.count());
        auto r = exec(acquire_id, {id.c_str(), token.c_str(), ttl_text.c_str()});
        if (pg::pg_rows(r.get()) == 0) return std::nullopt;
        return std::stoll(std::string(pg::pg_value(r.get(), 0, 0)));
    }
    bool refresh(const std::string& id, const std::string& token, milliseconds ttl) override {
        const auto ttl_text = std::to_string(ttl.count());
        return pg::pg_affected_rows(
                   exec(refresh_id, {id.c_str(), token.c_str(), ttl_text.c_str()}).get()) == 1;
    }
    void release(const std::string& id, const std::string& token) override {
        exec(release_id, {id.c_str(), token.c_str()});
    }
    bool holds(const std::string& id, const std::string& token) override {
        return pg::pg_rows(exec(holds_id, {id.c_str(), token.c_str()}).get()) == 1;
    }
    std::optional<milliseconds> remaining(const std::string& id) override {
        auto r = exec(remaining_id, {id.c_str()});
        if (pg::pg_rows(r.get()) == 0) return std::nullopt;
        return milliseconds(std::stoll(std::string(pg::pg_value(r.get(), 0, 0))));
    }
    void create_table() override {
        const std::string sql = "CREATE TABLE IF NOT EXISTS " + table_sql(o_, '"') +
                                " (key_id VARCHAR(32) NOT NULL PRIMARY KEY, token VARCHAR(32) "
                                "NOT NULL, expires_ms BIGINT NOT NULL, fence BIGINT NOT NULL)";
        try {
            session_.query(sql, "creating the table");
        } catch (const pg::statement_error& e) {
            if (e.sqlstate() == "42501") not_allowed(e);
            // Two processes creating it at once: one of them loses a race in the catalog.
            if (e.sqlstate() != "23505" && e.sqlstate() != "42P07") throw;
        }
        prepared_.fill(false);
    }
    bool usable() const override { return !session_.broken(); }
    bool still_open() const override { return !session_.hung_up(); }

  private:
    std::string where() const { return o_.dsn.redacted(); }

    // Since PostgreSQL 15 only the database owner may create tables in `public`, and a table
    // one role created is not another's to use.
    [[noreturn]] void not_allowed(const pg::statement_error& e) const {
        throw backend_error("sql", e.native_code(),
                            "sql: no access to table '" + table_shown(o_) + "' in " + where() +
                                ": " + e.detail() + " (" + e.native_code() +
                                "); create it once for every role that locks and GRANT "
                                "SELECT, INSERT, UPDATE ON " +
                                table_shown(o_) +
                                " TO each of them, or name a schema they share with the "
                                "option 'table' (schema.table)",
                            error_kind::permanent);
    }

    pg::pg_result exec(statement_id id, std::initializer_list<const char*> params) {
        const auto& s = statements[id];
        const auto until = pg::clock::now() + o_.command_timeout;
        try {
            if (!prepared_[id]) {
                session_.prepare(s.name, sql_[id], s.params, until, s.what);
                prepared_[id] = true;
            }
            return session_.run_prepared(s.name, params, until, s.what);
        } catch (const pg::statement_error& e) {
            if (e.sqlstate() == "42501") not_allowed(e);
            if (e.sqlstate() == "42P01")
                throw missing_table(
                    "sql", e.native_code(),
                    "sql: table '" + table_shown(o_) + "' does not exist in " + where(), e.kind());
            if (wrong_shape(e.sqlstate()))
                throw backend_error("sql", e.native_code(),
                                    "sql: table '" + table_shown(o_) + "' in " + where() +
                                        " does not have the columns locksmith needs (" +
                                        expected_columns + "): " + e.detail() + " (" +
                                        e.native_code() +
                                        "); drop it or choose another with the option 'table'",
                                    error_kind::permanent);
            throw;
        }
    }

    const sql_options& o_;
    const pg::pg_target target_;
    pg::pg_session session_;
    std::array<std::string, statement_count> sql_;
    std::array<bool, statement_count> prepared_{};
};

}  // namespace

std::unique_ptr<connection> open_postgresql(const sql_options& options) {
    return std::make_unique<pg_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
