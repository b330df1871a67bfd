// SPDX-License-Identifier: MIT
// The sql strategy's MariaDB/MySQL driver, with server-side prepared statements, through the
// Connector/C layer it shares with mysql_get_lock (strategies/common/mariadb). MariaDB has no
// INSERT .. ON CONFLICT .. WHERE .. RETURNING: the grant is an INSERT .. ON DUPLICATE KEY UPDATE
// whose IF()s take the row over only when it is free, expired or ours, and which reports the
// grant's fence through LAST_INSERT_ID(expr) (0: not granted), in the same statement.
#include <array>
#include <chrono>
#include <string>

#include "mariadb_session.hpp"
#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

using namespace locksmith::mariadb;

// The database's clock in ms (the session's time zone is UTC: no DST jumps). NOW(3) is one value
// for the whole statement.
#define LS_NOW "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

static_assert(row_statement_count <= mariadb_session::max_statements);

bool wrong_shape(unsigned code) {
    return code == 1054 || code == 1364 || code == 1406 || code == 1366 || code == 1265;
}

class mariadb_connection final : public connection {
  public:
    explicit mariadb_connection(const sql_options& o) : o_(o) {
        const std::string table = table_sql(o, '`');
        // Assignments run left to right and later ones see earlier results: fence and token
        // are decided on the old row, expires_ms follows the token just written.
        sql_[acquire_id] =
            "INSERT INTO " + table +
            " (key_id, token, expires_ms, fence) VALUES (?, ?, " LS_NOW
            " + ?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE fence = IF(token = VALUES(token), "
            "LAST_INSERT_ID(fence), IF(expires_ms <= " LS_NOW
            ", LAST_INSERT_ID(fence + 1), fence + LAST_INSERT_ID(0))), token = IF(token = "
            "VALUES(token) OR expires_ms <= " LS_NOW
            ", VALUES(token), token), expires_ms = IF(token = VALUES(token), "
            "VALUES(expires_ms), expires_ms)";
        sql_[refresh_id] = "UPDATE " + table +
                           " SET expires_ms = " LS_NOW
                           " + ? WHERE key_id = ? AND token = ? AND expires_ms > " LS_NOW;
        sql_[release_id] =
            "UPDATE " + table + " SET token = '', expires_ms = 0 WHERE key_id = ? AND token = ?";
        sql_[holds_id] =
            "SELECT 1 FROM " + table + " WHERE key_id = ? AND token = ? AND expires_ms > " LS_NOW;
        sql_[remaining_id] = "SELECT expires_ms - " LS_NOW " FROM " + table +
                             " WHERE key_id = ? AND token <> '' AND expires_ms > " LS_NOW;
        // Counting semaphores. The insert (or its update of nothing) locks the limit row until
        // the transaction ends. Slot rows are looked up by their key; the slot numbers come from
        // a recursive CTE (MariaDB >= 10.2, MySQL >= 8.0). A slot is taken unless take_slot could
        // take it: a row of NULLs keeps its slot out of use, never lets one more in.
        sql_[lock_limit_id] = "INSERT INTO " + table +
                              " (key_id, token, expires_ms, fence) VALUES (?, 'limit', ?, 0) ON "
                              "DUPLICATE KEY UPDATE fence = fence";
        sql_[read_limit_id] = "SELECT IFNULL(IF(token = 'limit', expires_ms, -1), -1) FROM " +
                              table + " WHERE key_id = ?";
        sql_[set_limit_id] =
            "UPDATE " + table + " SET token = 'limit', expires_ms = ? WHERE key_id = ?";
        const std::string slots =
            "WITH RECURSIVE s (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?), "
            "taken AS (SELECT s.g, l.token FROM s JOIN " +
            table +
            " AS l ON l.key_id = CONCAT(?, s.g) WHERE NOT IFNULL(l.expires_ms <= " LS_NOW ", 0)) ";
        sql_[pick_slot_id] = slots +
                             "SELECT COALESCE((SELECT -MIN(g) FROM taken WHERE token = ?), (SELECT "
                             "MIN(g) FROM s WHERE g NOT IN (SELECT g FROM taken)), 0)";
        sql_[count_held_id] = slots + "SELECT COUNT(*) FROM taken";
        sql_[next_fence_id] =
            "UPDATE " + table + " SET fence = LAST_INSERT_ID(fence + 1) WHERE key_id = ?";
        sql_[take_slot_id] =
            "INSERT INTO " + table +
            " (key_id, token, expires_ms, fence) VALUES (?, ?, " LS_NOW
            " + ?, LAST_INSERT_ID(?)) ON DUPLICATE KEY UPDATE fence = IF(expires_ms <= " LS_NOW
            ", LAST_INSERT_ID(VALUES(fence)), fence + LAST_INSERT_ID(0)), token = IF(expires_ms "
            "<= " LS_NOW ", VALUES(token), token), expires_ms = IF(expires_ms <= " LS_NOW
            ", VALUES(expires_ms), expires_ms)";
        // CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, not only those it changed,
        // so a refresh within the same millisecond still counts. Expiry is computed in UTC, so
        // that no DST jump moves it.
        target_.strategy = "sql";
        target_.dsn = o.dsn;
        target_.password = o.dsn.password;
        target_.connect_timeout = o.connect_timeout;
        target_.command_timeout = o.command_timeout;
        target_.init_command = "SET time_zone = '+00:00'";
        target_.client_flags = CLIENT_FOUND_ROWS;
        session_.emplace(target_);
    }

    // InnoDB's REPEATABLE READ, the server's default: the transaction's snapshot is taken at its
    // first plain read (read_limit), after the limit row is locked, so it holds every grant of
    // the name committed before; the writes (next_fence, take_slot) read the latest rows. Not
    // READ COMMITTED for the session: with binlog_format=STATEMENT, InnoDB refuses writes under
    // it, and the lock's statements would fail too.
    void begin() override { plain("START TRANSACTION", statements[begin_id].what); }
    void commit() override { plain("COMMIT", statements[commit_id].what); }
    void rollback() noexcept override {
        try {
            if (session_->usable()) session_->run("ROLLBACK", statements[rollback_id].what);
        } catch (...) {
            unusable_ = true;
        }
    }
    std::int64_t lock_limit(const std::string& limit_id, std::int64_t limit) override {
        long long value = limit;
        execute(lock_limit_id, {text_param(limit_id), integer_param(value)});
        auto kept = read_limit(limit_id);
        if (!kept) missing_row(limit_id);
        return *kept;
    }
    std::optional<std::int64_t> read_limit(const std::string& limit_id) override {
        auto v = fetch(read_limit_id, {text_param(limit_id)});
        if (!v.row) return std::nullopt;
        return v.null ? -1 : v.value;
    }
    void set_limit(const std::string& limit_id, std::int64_t limit) override {
        long long value = limit;
        execute(set_limit_id, {integer_param(value), text_param(limit_id)});
    }
    std::int64_t pick_slot(const std::string& prefix, const std::string& token,
                           std::int64_t limit) override {
        long long n = limit;
        return fetch(pick_slot_id, {integer_param(n), text_param(prefix), text_param(token)}).value;
    }
    std::int64_t count_held(const std::string& prefix, std::int64_t limit) override {
        long long n = limit;
        return fetch(count_held_id, {integer_param(n), text_param(prefix)}).value;
    }
    std::int64_t next_fence(const std::string& limit_id) override {
        auto* s = execute(next_fence_id, {text_param(limit_id)});
        const auto fence = std::int64_t(session_->insert_id(s));
        if (session_->affected_rows(s) != 1) missing_row(limit_id);
        if (fence <= 0)
            throw backend_error("sql", "protocol",
                                "sql: the fence of row '" + limit_id + "' of table '" +
                                    table_shown(o_) + "' in " + o_.dsn.redacted() +
                                    " is not a number; delete the row to reset the semaphore",
                                error_kind::permanent);
        return fence;
    }
    bool take_slot(const std::string& slot_id, const std::string& token, milliseconds ttl,
                   std::int64_t fence) override {
        long long ttl_ms = ttl.count();
        long long f = fence;
        auto* s = execute(take_slot_id, {text_param(slot_id), text_param(token),
                                         integer_param(ttl_ms), integer_param(f)});
        return std::int64_t(session_->insert_id(s)) == fence;
    }

    std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                        milliseconds ttl) override {
        long long ttl_ms = ttl.count();
        auto* s = execute(acquire_id, {text_param(id), text_param(token), integer_param(ttl_ms)});
        const auto fence = std::int64_t(session_->insert_id(s));
        if (fence <= 0) return std::nullopt;
        return fence;
    }
    bool refresh(const std::string& id, const std::string& token, milliseconds ttl) override {
        long long ttl_ms = ttl.count();
        auto* s = execute(refresh_id, {integer_param(ttl_ms), text_param(id), text_param(token)});
        return session_->affected_rows(s) == 1;
    }
    void release(const std::string& id, const std::string& token) override {
        execute(release_id, {text_param(id), text_param(token)});
    }
    bool holds(const std::string& id, const std::string& token) override {
        return fetch(holds_id, {text_param(id), text_param(token)}).row;
    }
    std::optional<milliseconds> remaining(const std::string& id) override {
        auto left = fetch(remaining_id, {text_param(id)});
        if (!left.row) return std::nullopt;
        return milliseconds(left.value);
    }
    void create_table() override {
        const std::string sql =
            "CREATE TABLE IF NOT EXISTS " + table_sql(o_, '`') +
            " (key_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "token VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, expires_ms BIGINT "
            "NOT NULL, fence BIGINT NOT NULL) ENGINE = InnoDB";
        try {
            session_->run(sql, "creating the table");
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }
    bool usable() const override { return session_->usable() && !unusable_; }
    bool still_open() const override { return !session_->hung_up(); }

  private:
    // The session's error, told more precisely where the table is the cause.
    [[noreturn]] void refine(const mariadb_error& e) const {
        const unsigned code = e.code();
        const std::string native = e.native_code();
        if (code == 1146)
            throw missing_table(
                "sql", native,
                "sql: table '" + table_shown(o_) + "' does not exist in " + o_.dsn.redacted(),
                e.kind());
        if (wrong_shape(code))
            throw backend_error("sql", native,
                                "sql: table '" + table_shown(o_) + "' in " + o_.dsn.redacted() +
                                    " does not have the columns locksmith needs (" +
                                    expected_columns + "): " + e.detail() + " (error " +
                                    std::to_string(code) +
                                    "); drop it or choose another with the option 'table'",
                                error_kind::permanent);
        throw e;
    }

    [[noreturn]] void missing_row(const std::string& id) const {
        throw backend_error("sql", "protocol",
                            "sql: row '" + id + "' of table '" + table_shown(o_) + "' in " +
                                o_.dsn.redacted() + " went away inside a transaction",
                            error_kind::transient);
    }
    void plain(const char* sql, const char* doing) {
        try {
            session_->run(sql, doing);
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }

    MYSQL_STMT* execute(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        try {
            return session_->execute(id, sql_[id], params, statements[id].what);
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }
    first_value fetch(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        try {
            return session_->fetch_first(id, sql_[id], params, statements[id].what);
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }

    const sql_options& o_;
    mariadb_target target_;
    std::optional<mariadb_session> session_;
    std::array<std::string, row_statement_count> sql_;
    bool unusable_ = false;  // a transaction that could not be rolled back
};

}  // namespace

std::unique_ptr<connection> open_mariadb(const sql_options& options) {
    return std::make_unique<mariadb_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
