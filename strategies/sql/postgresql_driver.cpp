// SPDX-License-Identifier: MIT
// The sql strategy's PostgreSQL driver: its statements, over the shared libpq layer
// (strategies/common/pq, pg_session), which bounds every wait by connect_timeout and
// command_timeout even when the server stops answering. Statements are prepared once per
// connection.
#include <array>
#include <charconv>
#include <string>

#include <locksmith/author/caller_deadline.hpp>

#include "pg_session.hpp"
#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

// The database's clock in ms. statement_timestamp() is one value for the whole statement.
#define LS_NOW "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"

// How many parameters each statement takes, in statement_id's order.
constexpr std::array<int, row_statement_count> parameters = {3, 3, 2, 2, 1, 2, 1, 2, 3, 2, 1, 4};

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
        // Counting semaphores. DO UPDATE (of nothing) locks an existing limit row until the
        // transaction ends.
        const std::string kept = "COALESCE(CASE WHEN l.token = 'limit' THEN l.expires_ms END, -1)";
        sql_[lock_limit_id] = "INSERT INTO " + table +
                              " AS l (key_id, token, expires_ms, fence) VALUES ($1, 'limit', "
                              "$2::bigint, 0) ON CONFLICT (key_id) DO UPDATE SET fence = l.fence "
                              "RETURNING " +
                              kept;
        sql_[read_limit_id] = "SELECT " + kept + " FROM " + table + " AS l WHERE key_id = $1";
        sql_[set_limit_id] =
            "UPDATE " + table + " SET token = 'limit', expires_ms = $2::bigint WHERE key_id = $1";
        // Slot rows are looked up by their key (equality, whatever the column's collation). A
        // slot is taken unless take_slot could take it (expired, released, or no row): a row of
        // NULLs another program wrote keeps its slot out of use, never lets one more in.
        const std::string taken =
            "WITH taken AS (SELECT s.g, l.token FROM generate_series(1, "
            "$2::int) AS s(g) JOIN " +
            table +
            " AS l ON l.key_id = $1::text || s.g::text WHERE NOT "
            "COALESCE(l.expires_ms <= " LS_NOW ", false)) ";
        sql_[pick_slot_id] = taken +
                             "SELECT COALESCE((SELECT -min(g) FROM taken WHERE token = $3::text), "
                             "(SELECT min(g) FROM generate_series(1, $2::int) AS f(g) WHERE g NOT "
                             "IN (SELECT g FROM taken)), 0)";
        sql_[count_held_id] = taken + "SELECT count(*) FROM taken";
        sql_[next_fence_id] =
            "UPDATE " + table + " SET fence = fence + 1 WHERE key_id = $1 RETURNING fence";
        sql_[take_slot_id] = "INSERT INTO " + table +
                             " AS l (key_id, token, expires_ms, fence) VALUES ($1, $2, " LS_NOW
                             " + $3::bigint, $4::bigint) ON CONFLICT (key_id) DO UPDATE SET token "
                             "= EXCLUDED.token, expires_ms = EXCLUDED.expires_ms, fence = "
                             "EXCLUDED.fence WHERE l.expires_ms <= " LS_NOW " RETURNING 1";
    }

    void begin() override { session_.query("BEGIN", statements[begin_id].what); }
    void commit() override { session_.query("COMMIT", statements[commit_id].what); }
    void rollback() noexcept override {
        try {
            if (!session_.broken()) session_.query("ROLLBACK", statements[rollback_id].what);
        } catch (...) {
            unusable_ = true;
        }
    }
    std::int64_t lock_limit(const std::string& limit_id, std::int64_t limit) override {
        const auto limit_text = std::to_string(limit);
        return integer(exec(lock_limit_id, {limit_id.c_str(), limit_text.c_str()}));
    }
    std::optional<std::int64_t> read_limit(const std::string& limit_id) override {
        auto r = exec(read_limit_id, {limit_id.c_str()});
        if (pg::pg_rows(r.get()) == 0) return std::nullopt;
        return integer(std::move(r));
    }
    void set_limit(const std::string& limit_id, std::int64_t limit) override {
        const auto limit_text = std::to_string(limit);
        exec(set_limit_id, {limit_id.c_str(), limit_text.c_str()});
    }
    std::int64_t pick_slot(const std::string& prefix, const std::string& token,
                           std::int64_t limit) override {
        const auto limit_text = std::to_string(limit);
        return integer(exec(pick_slot_id, {prefix.c_str(), limit_text.c_str(), token.c_str()}));
    }
    std::int64_t count_held(const std::string& prefix, std::int64_t limit) override {
        const auto limit_text = std::to_string(limit);
        return integer(exec(count_held_id, {prefix.c_str(), limit_text.c_str()}));
    }
    std::int64_t next_fence(const std::string& limit_id) override {
        return integer(exec(next_fence_id, {limit_id.c_str()}));
    }
    bool take_slot(const std::string& slot_id, const std::string& token, milliseconds ttl,
                   std::int64_t fence) override {
        const auto ttl_text = std::to_string(ttl.count());
        const auto fence_text = std::to_string(fence);
        return pg::pg_rows(exec(take_slot_id, {slot_id.c_str(), token.c_str(), ttl_text.c_str(),
                                               fence_text.c_str()})
                               .get()) == 1;
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
    bool usable() const override { return !session_.broken() && !unusable_; }
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

    // The one value of a statement that returns one row.
    std::int64_t integer(pg::pg_result r) const {
        if (pg::pg_rows(r.get()) != 1)
            throw backend_error("sql", "protocol",
                                "sql: a statement on table '" + table_shown(o_) + "' in " +
                                    where() + " returned " + std::to_string(pg::pg_rows(r.get())) +
                                    " rows instead of one (is the row changed meanwhile?)",
                                error_kind::transient);
        const auto text = pg::pg_value(r.get(), 0, 0);
        std::int64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty())
            throw backend_error("sql", "protocol",
                                "sql: a statement on table '" + table_shown(o_) + "' in " +
                                    where() + " returned '" + std::string(text.substr(0, 40)) +
                                    "' where a number belongs (a NULL fence or limit?)",
                                error_kind::permanent);
        return value;
    }

    pg::pg_result exec(statement_id id, std::initializer_list<const char*> params) {
        const auto& s = statements[id];
        // Within a refresh, no longer than its lease lasts (caller_deadline.hpp).
        const auto until = bounded_by_refresh_deadline(pg::clock::now() + o_.command_timeout);
        try {
            if (!prepared_[id]) {
                session_.prepare(s.name, sql_[id], parameters[id], until, s.what);
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
    std::array<std::string, row_statement_count> sql_;
    std::array<bool, row_statement_count> prepared_{};
    bool unusable_ = false;  // a transaction that could not be rolled back
};

}  // namespace

std::unique_ptr<connection> open_postgresql(const sql_options& options) {
    return std::make_unique<pg_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
