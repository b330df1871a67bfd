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

enum statement_id { acquire_id, refresh_id, release_id, holds_id, remaining_id, statement_count };
constexpr std::array<const char*, statement_count> what = {"acquiring a lock", "refreshing a lock",
                                                           "releasing a lock", "checking a lock",
                                                           "reading a lock's status"};

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
    bool usable() const override { return session_->usable(); }
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

    MYSQL_STMT* execute(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        try {
            return session_->execute(id, sql_[id], params, what[id]);
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }
    first_value fetch(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        try {
            return session_->fetch_first(id, sql_[id], params, what[id]);
        } catch (const mariadb_error& e) {
            refine(e);
        }
    }

    const sql_options& o_;
    mariadb_target target_;
    std::optional<mariadb_session> session_;
    std::array<std::string, statement_count> sql_;
};

}  // namespace

std::unique_ptr<connection> open_mariadb(const sql_options& options) {
    return std::make_unique<mariadb_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
