// SPDX-License-Identifier: MIT
// Private to the sql strategy: what the store asks of a driver, and what the drivers share (the
// table's columns, the missing-table error). Loading client libraries, scrubbing passwords and
// noticing a closed socket are strategy_support.hpp's; libpq is strategies/common/pq's.
//
//   connection       one open database connection speaking its database's dialect
//   statement_id / statements   the statements every driver keeps, by id, and what each does
//   missing_table    thrown by a driver when the table does not exist
//   table_name_problem / table_sql / table_shown   the table's name: checked, in SQL, in messages
//   open_sqlite / open_postgresql / open_mariadb   the drivers built into this module
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>

namespace locksmith::strategies::sql_detail {

using std::chrono::milliseconds;

// The columns every driver creates and expects, for messages about a table of the wrong shape.
inline constexpr const char* expected_columns =
    "key_id (text, primary key), token (text), expires_ms (64-bit integer), fence (64-bit "
    "integer)";

// The statements of a connection: each driver keeps its SQL in an array indexed by these ids.
// The lock's and the semaphore's come first (row_statement_count of them, the ones every driver
// prepares); the transaction's three after them (SQLite prepares them too; PostgreSQL and
// MariaDB send them as plain queries).
enum statement_id : std::size_t {
    acquire_id,
    refresh_id,
    release_id,
    holds_id,
    remaining_id,
    lock_limit_id,
    read_limit_id,
    set_limit_id,
    pick_slot_id,
    count_held_id,
    next_fence_id,
    take_slot_id,
    begin_id,
    commit_id,
    rollback_id,
    statement_count
};
inline constexpr std::size_t row_statement_count = begin_id;

struct statement_info {
    const char* name;  // the prepared statement's (PostgreSQL names them)
    const char* what;  // what it does, for messages
};
inline constexpr std::array<statement_info, statement_count> statements = {{
    {"locksmith_acquire", "acquiring a lock"},
    {"locksmith_refresh", "refreshing a lock"},
    {"locksmith_release", "releasing a lock"},
    {"locksmith_holds", "checking a lock"},
    {"locksmith_remaining", "reading a lock's status"},
    {"locksmith_lock_limit", "locking a semaphore's limit"},
    {"locksmith_read_limit", "reading a semaphore's limit"},
    {"locksmith_set_limit", "setting a semaphore's limit"},
    {"locksmith_pick_slot", "looking for a free permit"},
    {"locksmith_count_held", "counting held permits"},
    {"locksmith_next_fence", "drawing a permit's fencing token"},
    {"locksmith_take_slot", "taking a permit"},
    {"locksmith_begin", "starting a transaction"},
    {"locksmith_commit", "committing a transaction"},
    {"locksmith_rollback", "rolling back a transaction"},
}};

class missing_table : public backend_error {
  public:
    using backend_error::backend_error;
};

class connection {
  public:
    virtual ~connection() = default;
    // The grant, in one statement: inserts the row, or takes it over when it is free, expired
    // or ours, counting a new grant in `fence` unless it is ours already.
    // Returns the grant's fence, or nullopt when another owner holds the row.
    virtual std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                                milliseconds ttl) = 0;
    // Extends our unexpired grant to now + ttl; false when the row is not ours or expired.
    virtual bool refresh(const std::string& id, const std::string& token, milliseconds ttl) = 0;
    // Clears the row's token and expiry when it is ours; keeps the row and its fence.
    virtual void release(const std::string& id, const std::string& token) = 0;
    virtual bool holds(const std::string& id, const std::string& token) = 0;
    // Time left of the row's current grant; nullopt when nobody holds it.
    virtual std::optional<milliseconds> remaining(const std::string& id) = 0;
    // --- counting semaphores (sql.hpp, Counting): rows `<prefix>/limit` and `<prefix>/<slot>` ---
    // A transaction whose reads after lock_limit see every grant of the name committed before
    // (PostgreSQL: READ COMMITTED; MariaDB: REPEATABLE READ, whose snapshot the first plain read
    // takes, after lock_limit's lock; SQLite: BEGIN IMMEDIATE, the file's write lock).
    // rollback() never throws: a connection it cannot roll back is no longer usable().
    virtual void begin() = 0;
    virtual void commit() = 0;
    virtual void rollback() noexcept = 0;
    // Creates the limit row with `limit` when missing and locks it until the transaction ends
    // (grants of one name run one at a time). Returns the limit it keeps; -1 when the row is not
    // a limit row (token 'limit', expires_ms the limit).
    virtual std::int64_t lock_limit(const std::string& limit_id, std::int64_t limit) = 0;
    // The limit row's limit without locking or creating it (-1: not a limit row); nullopt: none.
    virtual std::optional<std::int64_t> read_limit(const std::string& limit_id) = 0;
    virtual void set_limit(const std::string& limit_id, std::int64_t limit) = 0;
    // Among the slot rows `<prefix>1` .. `<prefix><limit>`: -s when `token` holds slot s, else
    // the lowest slot nobody holds (free, released or expired), else 0.
    virtual std::int64_t pick_slot(const std::string& prefix, const std::string& token,
                                   std::int64_t limit) = 0;
    // How many of those slots take_slot could not take now (held, or a foreign row).
    virtual std::int64_t count_held(const std::string& prefix, std::int64_t limit) = 0;
    // The name's next fencing token: the limit row's fence, incremented.
    virtual std::int64_t next_fence(const std::string& limit_id) = 0;
    // Takes the slot row `slot_id` for `token` until now + ttl with `fence` when it is missing,
    // released or expired; false when it is held.
    virtual bool take_slot(const std::string& slot_id, const std::string& token, milliseconds ttl,
                           std::int64_t fence) = 0;
    // A slot row's refresh, release and check are a lock row's (refresh, release, holds).

    // CREATE TABLE IF NOT EXISTS.
    virtual void create_table() = 0;
    // False after an error that may have left the connection unusable: it is then dropped.
    virtual bool usable() const = 0;
    // False when the server closed the idle connection (a restart): checked before reuse.
    virtual bool still_open() const { return true; }
};

// What is wrong with options.table and options.schema for the driver of options.dsn (see
// sql_options::schema), as a sentence to follow "sql: "; "" when nothing is.
std::string table_name_problem(const sql_options& options);
// The table as statements name it, schema-qualified, each part quoted with `quote` ('"' or '`').
std::string table_sql(const sql_options& options, char quote);
// The table for messages: "schema.table" (MariaDB without schema: "table").
std::string table_shown(const sql_options& options);

std::unique_ptr<connection> open_sqlite(const sql_options& options);
std::unique_ptr<connection> open_postgresql(const sql_options& options);
std::unique_ptr<connection> open_mariadb(const sql_options& options);

// Prepares a SQLite file before its first connection: checks its folder like a lock
// directory (creating it), creates the file 0600 without following a symlink, switches it to
// WAL. Throws invalid_argument_error or backend_error.
void prepare_sqlite_file(const sql_options& options);

}  // namespace locksmith::strategies::sql_detail
