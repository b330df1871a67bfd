// SPDX-License-Identifier: MIT
// The sql strategy's SQLite driver (libsqlite3). One file shared by the processes of one host:
// WAL mode lets readers run beside the writer, and the busy timeout (command_timeout) makes a
// statement wait for another process's write instead of failing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <type_traits>

#include <sqlite3.h>

#include <locksmith/author/strategy_support.hpp>

#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

using clock = std::chrono::steady_clock;

// The database's clock in ms; 'now' is one value for the whole statement.
#define LS_NOW "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"

// A statement parameter: text (when `text` is set) or an integer.
struct param {
    const std::string* text = nullptr;
    long long number = 0;
};
param text_param(const std::string& value) {
    return {&value, 0};
}
param integer_param(long long value) {
    return {nullptr, value};
}

// Whether retrying may help after the (extended) result code `rc`: only when another connection
// held the database (SQLITE_BUSY, SQLITE_LOCKED); a missing or unreadable file, a full disk or a
// table of the wrong shape stay until someone acts.
error_kind sqlite_kind(int rc) {
    return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED ? error_kind::transient
                                                                      : error_kind::permanent;
}

// Waits for another connection's write lock until the statement's timeout, retrying every 50 µs
// at first, growing to 1.6 ms. SQLite's own busy timeout sleeps 1, 2, 5, 10 ... 100 ms between
// tries: a grant waiting behind another process's statement (tens of µs) slept through hundreds
// of them, and the process that had just released took the lock again and again (benchmark
// fairness 0.005: one process starved).
struct busy_wait {
    std::chrono::milliseconds timeout;
    clock::time_point started;
};

int retry_soon(void* state, int tries_so_far) {
    auto& b = *static_cast<busy_wait*>(state);
    const auto now = clock::now();
    if (tries_so_far == 0) b.started = now;
    if (now - b.started >= b.timeout) return 0;  // SQLITE_BUSY to the statement
    std::this_thread::sleep_for(std::chrono::microseconds(50 << std::min(tries_so_far, 5)));
    return 1;
}

// Runs a set-up statement (journal mode, table creation), retrying while the database is busy
// until `timeout` has passed. The busy handler alone is not enough here: SQLite returns
// SQLITE_BUSY at once, without waiting, to a connection that read the schema and then needs the
// write lock another connection took meanwhile (it would deadlock otherwise), which is what
// processes meeting a new file at the same time do.
int exec_retrying_while_busy(sqlite3* db, const char* sql, std::chrono::milliseconds timeout) {
    const auto until = clock::now() + timeout;
    for (;;) {
        const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
        if ((rc & 0xff) != SQLITE_BUSY || clock::now() >= until) return rc;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

class sqlite_connection final : public connection {
  public:
    explicit sqlite_connection(const sql_options& o) : o_(o) {
        const std::string table = table_sql(o, '"');
        sql_[acquire_id] = "INSERT INTO " + table +
                           " (key_id, token, expires_ms, fence) VALUES (?1, ?2, " LS_NOW
                           " + ?3, 1) ON CONFLICT (key_id) DO UPDATE SET token = excluded.token, "
                           "expires_ms = excluded.expires_ms, fence = CASE WHEN token = "
                           "excluded.token THEN fence ELSE fence + 1 END WHERE token = "
                           "excluded.token OR expires_ms <= " LS_NOW " RETURNING fence";
        sql_[refresh_id] = "UPDATE " + table +
                           " SET expires_ms = " LS_NOW
                           " + ?3 WHERE key_id = ?1 AND token = ?2 AND expires_ms > " LS_NOW;
        sql_[release_id] =
            "UPDATE " + table + " SET token = '', expires_ms = 0 WHERE key_id = ?1 AND token = ?2";
        sql_[holds_id] =
            "SELECT 1 FROM " + table + " WHERE key_id = ?1 AND token = ?2 AND expires_ms > " LS_NOW;
        sql_[remaining_id] = "SELECT expires_ms - " LS_NOW " FROM " + table +
                             " WHERE key_id = ?1 AND token <> '' AND expires_ms > " LS_NOW;
        // Counting semaphores, inside BEGIN IMMEDIATE (the file's write lock: grants run one at
        // a time). Slot rows are looked up by their key; the slot numbers come from a recursive
        // CTE. A slot is taken unless take_slot could take it: a row of NULLs keeps its slot out
        // of use, never lets one more in.
        const std::string kept = "COALESCE(CASE WHEN token = 'limit' THEN expires_ms END, -1)";
        sql_[lock_limit_id] = "INSERT INTO " + table +
                              " (key_id, token, expires_ms, fence) VALUES (?1, 'limit', ?2, 0) ON "
                              "CONFLICT (key_id) DO UPDATE SET fence = fence RETURNING " +
                              kept;
        sql_[read_limit_id] = "SELECT " + kept + " FROM " + table + " WHERE key_id = ?1";
        sql_[set_limit_id] =
            "UPDATE " + table + " SET token = 'limit', expires_ms = ?2 WHERE key_id = ?1";
        const std::string slots =
            "WITH RECURSIVE s (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?3), taken "
            "AS (SELECT s.g, l.token FROM s JOIN " +
            table +
            " AS l ON l.key_id = ?1 || s.g WHERE NOT coalesce(l.expires_ms <= " LS_NOW ", 0)) ";
        sql_[pick_slot_id] =
            slots +
            "SELECT COALESCE((SELECT -min(g) FROM taken WHERE token = ?2), (SELECT "
            "min(g) FROM s WHERE g NOT IN (SELECT g FROM taken)), 0)";
        sql_[count_held_id] = slots + "SELECT count(*) FROM taken";
        sql_[next_fence_id] =
            "UPDATE " + table + " SET fence = fence + 1 WHERE key_id = ?1 RETURNING fence";
        sql_[take_slot_id] = "INSERT INTO " + table +
                             " (key_id, token, expires_ms, fence) VALUES (?1, ?2, " LS_NOW
                             " + ?3, ?4) ON CONFLICT (key_id) DO UPDATE SET token = "
                             "excluded.token, expires_ms = excluded.expires_ms, fence = "
                             "excluded.fence WHERE expires_ms <= " LS_NOW " RETURNING 1";
        sql_[begin_id] = "BEGIN IMMEDIATE";
        sql_[commit_id] = "COMMIT";
        sql_[rollback_id] = "ROLLBACK";
        // NOFOLLOW: never through a symlink (prepare_sqlite_file checked the real file).
        int rc = sqlite3_open_v2(o.dsn.path.c_str(), &db_,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                                 nullptr);
        if (rc != SQLITE_OK) fail("opening the database", rc);
        sqlite3_extended_result_codes(db_, 1);
        sqlite3_busy_handler(db_, retry_soon, &busy_);
        // WAL is the file's (prepare_sqlite_file); NORMAL sync is safe with it and the lock
        // table needs no durability beyond a crash of the processes that use it.
        exec_plain("PRAGMA synchronous = NORMAL", "setting up the connection");
    }
    ~sqlite_connection() override {
        for (auto* s : prepared_)
            if (s) sqlite3_finalize(s);
        if (db_) sqlite3_close_v2(db_);
    }

    std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                        milliseconds ttl) override {
        std::optional<std::int64_t> fence;
        run(acquire_id, id, token, ttl.count(),
            [&](sqlite3_stmt* s) { fence = sqlite3_column_int64(s, 0); });
        return fence;
    }
    bool refresh(const std::string& id, const std::string& token, milliseconds ttl) override {
        run(refresh_id, id, token, ttl.count(), nullptr);
        return sqlite3_changes(db_) == 1;
    }
    void release(const std::string& id, const std::string& token) override {
        run(release_id, id, token, -1, nullptr);
    }
    bool holds(const std::string& id, const std::string& token) override {
        bool found = false;
        run(holds_id, id, token, -1, [&](sqlite3_stmt*) { found = true; });
        return found;
    }
    std::optional<milliseconds> remaining(const std::string& id) override {
        std::optional<milliseconds> left;
        run(remaining_id, id, std::string(), -1,
            [&](sqlite3_stmt* s) { left = milliseconds(sqlite3_column_int64(s, 0)); });
        return left;
    }
    void begin() override { exec(begin_id, {}, nullptr); }
    void commit() override { exec(commit_id, {}, nullptr); }
    void rollback() noexcept override {
        try {
            if (sqlite3_get_autocommit(db_) == 0) exec(rollback_id, {}, nullptr);
        } catch (...) {
            unusable_ = true;
        }
    }
    std::int64_t lock_limit(const std::string& limit_id, std::int64_t limit) override {
        return integer(lock_limit_id, {text_param(limit_id), integer_param(limit)}).value_or(-1);
    }
    std::optional<std::int64_t> read_limit(const std::string& limit_id) override {
        return integer(read_limit_id, {text_param(limit_id)});
    }
    void set_limit(const std::string& limit_id, std::int64_t limit) override {
        exec(set_limit_id, {text_param(limit_id), integer_param(limit)}, nullptr);
    }
    std::int64_t pick_slot(const std::string& prefix, const std::string& token,
                           std::int64_t limit) override {
        return integer(pick_slot_id, {text_param(prefix), text_param(token), integer_param(limit)})
            .value_or(0);
    }
    std::int64_t count_held(const std::string& prefix, std::int64_t limit) override {
        // ?2 (the token) is not used here: the CTE is pick_slot's.
        return integer(count_held_id, {text_param(prefix), param{}, integer_param(limit)})
            .value_or(0);
    }
    std::int64_t next_fence(const std::string& limit_id) override {
        return integer(next_fence_id, {text_param(limit_id)}).value_or(0);
    }
    bool take_slot(const std::string& slot_id, const std::string& token, milliseconds ttl,
                   std::int64_t fence) override {
        return integer(take_slot_id, {text_param(slot_id), text_param(token),
                                      integer_param(ttl.count()), integer_param(fence)})
            .has_value();
    }
    void create_table() override {
        const std::string sql =
            "CREATE TABLE IF NOT EXISTS " + table_sql(o_, '"') +
            " (key_id TEXT NOT NULL PRIMARY KEY, token TEXT NOT NULL, "
            "expires_ms INTEGER NOT NULL, fence INTEGER NOT NULL) WITHOUT ROWID";
        const int rc = exec_retrying_while_busy(db_, sql.c_str(), o_.command_timeout);
        if (rc != SQLITE_OK) fail("creating the table", rc);
    }
    bool usable() const override { return db_ != nullptr && !unusable_; }

  private:
    std::string where() const { return o_.dsn.redacted(); }

    [[noreturn]] void fail(const std::string& doing, int rc) {
        std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        const std::string code = "sqlite " + std::to_string(rc);
        if (detail.rfind("no such table", 0) == 0)
            throw missing_table("sql", code,
                                "sql: table '" + table_shown(o_) + "' does not exist in " + where(),
                                error_kind::permanent);
        if (detail.rfind("no such column", 0) == 0 ||
            detail.find("has no column") != std::string::npos ||
            detail.find("ON CONFLICT clause does not match") != std::string::npos)
            throw backend_error("sql", code,
                                "sql: table '" + table_shown(o_) + "' in " + where() +
                                    " does not have the columns locksmith needs (" +
                                    expected_columns + "): " + detail +
                                    "; drop it or choose another with the option 'table'",
                                error_kind::permanent);
        if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
            throw backend_error("sql", code,
                                "sql: " + doing + " on " + where() +
                                    ": the database stayed locked by another connection for " +
                                    std::to_string(o_.command_timeout.count()) +
                                    " ms (command_timeout_s)",
                                error_kind::transient);
        throw backend_error(
            "sql", code,
            "sql: " + doing + " on " + where() + " failed: " + detail + " (" + code + ")",
            sqlite_kind(rc));
    }

    void exec_plain(const std::string& sql, const std::string& doing) {
        int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
        if (rc != SQLITE_OK) fail(doing, rc);
    }

    template <class Row>
    void run(statement_id id, const std::string& key_id, const std::string& token, long long ttl_ms,
             Row on_row) {
        if (id == remaining_id)
            exec(id, {text_param(key_id)}, on_row);
        else if (ttl_ms >= 0)
            exec(id, {text_param(key_id), text_param(token), integer_param(ttl_ms)}, on_row);
        else
            exec(id, {text_param(key_id), text_param(token)}, on_row);
    }

    // The first column of the last row as an integer (NULL: 0); nullopt without a row.
    std::optional<std::int64_t> integer(statement_id id, std::initializer_list<param> params) {
        std::optional<std::int64_t> value;
        exec(id, params, [&](sqlite3_stmt* s) { value = sqlite3_column_int64(s, 0); });
        return value;
    }

    // Runs statement `id` with `params` as ?1, ?2, ..., calling on_row for each row.
    template <class Row>
    void exec(statement_id id, std::initializer_list<param> params, Row on_row) {
        if (!prepared_[id]) {
            int rc = sqlite3_prepare_v3(db_, sql_[id].c_str(), int(sql_[id].size()),
                                        SQLITE_PREPARE_PERSISTENT, &prepared_[id], nullptr);
            if (rc != SQLITE_OK) fail(statements[id].what, rc);
        }
        sqlite3_stmt* s = prepared_[id];
        int index = 0;
        for (const auto& p : params) {
            ++index;
            if (p.text)
                sqlite3_bind_text(s, index, p.text->data(), int(p.text->size()), SQLITE_STATIC);
            else
                sqlite3_bind_int64(s, index, p.number);
        }
        // The busy handler waits for other writers; a snapshot that went stale meanwhile (WAL)
        // is reported at once instead, and the statement simply runs again.
        const auto until = clock::now() + o_.command_timeout;
        for (;;) {
            int rc = sqlite3_step(s);
            if (rc == SQLITE_ROW) {
                if constexpr (!std::is_same_v<Row, std::nullptr_t>) on_row(s);
                continue;
            }
            if (rc == SQLITE_DONE) break;
            sqlite3_reset(s);
            if (rc == SQLITE_BUSY_SNAPSHOT && clock::now() < until) {
                std::this_thread::yield();
                continue;
            }
            sqlite3_clear_bindings(s);
            fail(statements[id].what, rc);
        }
        sqlite3_reset(s);
    }

    const sql_options& o_;
    busy_wait busy_{o_.command_timeout, {}};
    sqlite3* db_ = nullptr;
    std::array<std::string, statement_count> sql_;
    std::array<sqlite3_stmt*, statement_count> prepared_{};
    bool unusable_ = false;  // a transaction that could not be rolled back
};

}  // namespace

void prepare_sqlite_file(const sql_options& o) {
    const std::filesystem::path path(o.dsn.path);
    // The folder obeys the lock-directory rules; it is created 0700 when missing.
    auto dir = open_private_directory(path.parent_path(), "sql", "the folder of the SQLite file");
    const std::string name = path.filename().string();
    int fd = ::openat(dir->fd(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int err = errno;
        if (err == ELOOP)
            throw invalid_argument_error("sql: the SQLite file " + o.dsn.path +
                                         " is a symlink; give the real path");
        throw_errno("sql", "opening the SQLite file " + o.dsn.path, err);
    }
    struct stat st {};
    const int stat_rc = ::fstat(fd, &st);
    ::close(fd);
    if (stat_rc != 0) throw_errno("sql", "checking the SQLite file " + o.dsn.path, errno);
    if (auto why = dir->refusal(st); !why.empty())
        throw invalid_argument_error("sql: refusing the SQLite file " + o.dsn.path + ": " + why);
    if (st.st_mode & S_IWOTH)
        throw invalid_argument_error("sql: the SQLite file " + o.dsn.path +
                                     " is writable by others; chmod o-w it");
    // WAL is a property of the file: set once, by whichever process comes first.
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(o.dsn.path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW,
                             nullptr);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, int(std::min<long long>(o.command_timeout.count(), 1 << 30)));
        rc = exec_retrying_while_busy(db, "PRAGMA journal_mode = WAL", o.command_timeout);
    }
    std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    if (rc != SQLITE_OK)
        throw backend_error("sql", "sqlite " + std::to_string(rc),
                            "sql: setting up the SQLite file " + o.dsn.path + " failed: " + detail,
                            sqlite_kind(rc));
}

std::unique_ptr<connection> open_sqlite(const sql_options& options) {
    return std::make_unique<sqlite_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
