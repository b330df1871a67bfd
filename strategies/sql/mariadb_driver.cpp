// The sql strategy's MariaDB/MySQL driver (MariaDB Connector/C, loaded on first use), with
// server-side prepared statements. MariaDB has no INSERT .. ON CONFLICT .. WHERE .. RETURNING: the
// grant is an INSERT .. ON DUPLICATE KEY UPDATE whose IF()s take the row over only when it is free,
// expired or ours, and which reports the grant's fence through LAST_INSERT_ID(expr) (0: not
// granted), in the same statement.
#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include <mysql.h>

#include <locksmith/author/strategy_support.hpp>

#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

// The functions of libmariadb.so.3 this driver calls, resolved on first use (load_client_api).
// One function per line, kept by hand: clang-format reflows X-macro lists differently each run.
// clang-format off
#define LS_MARIADB_FUNCTIONS(X) \
    X(mysql_close) \
    X(mysql_errno) \
    X(mysql_error) \
    X(mysql_get_socket) \
    X(mysql_init) \
    X(mysql_options) \
    X(mysql_real_connect) \
    X(mysql_real_query) \
    X(mysql_stmt_affected_rows) \
    X(mysql_stmt_bind_param) \
    X(mysql_stmt_bind_result) \
    X(mysql_stmt_close) \
    X(mysql_stmt_errno) \
    X(mysql_stmt_error) \
    X(mysql_stmt_execute) \
    X(mysql_stmt_fetch) \
    X(mysql_stmt_free_result) \
    X(mysql_stmt_init) \
    X(mysql_stmt_insert_id) \
    X(mysql_stmt_prepare) \
    X(mysql_stmt_store_result)
// clang-format on
struct mariadb_api {
#define LS_DECLARE(f) decltype(&::f) f = nullptr;
    LS_MARIADB_FUNCTIONS(LS_DECLARE)
#undef LS_DECLARE
    explicit mariadb_api(const client_library& lib) {
#define LS_RESOLVE(f) lib.resolve(f, #f);
        LS_MARIADB_FUNCTIONS(LS_RESOLVE)
#undef LS_RESOLVE
    }
};

// Whether retrying may help after the client or server error `code`: transient for a server
// that cannot be reached or went away (2002 CR_CONNECTION_ERROR, 2003 CR_CONN_HOST_ERROR, 2006
// CR_SERVER_GONE_ERROR, 2013 CR_SERVER_LOST, which a read timeout gives too), too many
// connections (1040), a lock wait timeout (1205) or a deadlock (1213); unknown for the client's
// other errors (2000-2999); permanent for the server's: access denied (1044, 1045), unknown
// database (1049), missing table (1146), bad statements or data.
error_kind mariadb_kind(unsigned code, std::string_view message = {}) {
    // 2026 CR_SSL_CONNECTION_ERROR: a certificate that does not verify (wrong CA, wrong host
    // name) or cannot be loaded, or a server without TLS, which no retry mends; a handshake the
    // server broke off says neither.
    if (code == 2026)
        return message.find("certificate") != std::string_view::npos ||
                       message.find("SSL is required") != std::string_view::npos ||
                       message.find("SSL_CTX") != std::string_view::npos ||
                       message.find("PEM") != std::string_view::npos
                   ? error_kind::permanent
                   : error_kind::unknown;
    switch (code) {
        case 2002:
        case 2003:
        case 2006:
        case 2013:
        case 1040:
        case 1205:
        case 1213:
            return error_kind::transient;
        default:
            return code >= 2000 && code < 3000 ? error_kind::unknown : error_kind::permanent;
    }
}

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

unsigned seconds_up(milliseconds d) {
    return unsigned(std::max<long long>(1, (d.count() + 999) / 1000));
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
        db_ = my_.mysql_init(nullptr);
        if (!db_)
            throw backend_error("sql", "connection", "sql: out of memory connecting",
                                error_kind::transient);
        unsigned connect = seconds_up(o.connect_timeout), command = seconds_up(o.command_timeout);
        my_.mysql_options(db_, MYSQL_OPT_CONNECT_TIMEOUT, &connect);
        my_.mysql_options(db_, MYSQL_OPT_READ_TIMEOUT, &command);
        my_.mysql_options(db_, MYSQL_OPT_WRITE_TIMEOUT, &command);
        my_.mysql_options(db_, MYSQL_INIT_COMMAND, "SET time_zone = '+00:00'");
        my_.mysql_options(db_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
        const auto& d = o.dsn;
        // The DSN alone says which server: libmariadb takes "localhost" for its Unix socket and
        // ignores the port then, and fills a missing port or socket path from the environment
        // (MYSQL_TCP_PORT, MYSQL_UNIX_PORT). A port means TCP; no port on localhost (or no
        // host) means the default socket, no port elsewhere the default port.
        const bool unix_socket = d.port == 0 && (d.host.empty() || d.host == "localhost");
        unsigned protocol = unix_socket ? MYSQL_PROTOCOL_SOCKET : MYSQL_PROTOCOL_TCP;
        my_.mysql_options(db_, MYSQL_OPT_PROTOCOL, &protocol);
        if (d.tls != sql_dsn::tls_mode::disable) {
            // ENFORCE: no fallback to plain TCP when the server has no TLS. VERIFY_SERVER_CERT
            // checks the chain and the host name (Connector/C 3.3 does neither by default).
            my_bool on = 1, verify = d.tls == sql_dsn::tls_mode::verify_full;
            my_.mysql_options(db_, MYSQL_OPT_SSL_ENFORCE, &on);
            my_.mysql_options(db_, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
            if (!d.tls_ca.empty()) my_.mysql_options(db_, MYSQL_OPT_SSL_CA, d.tls_ca.c_str());
            if (!d.tls_cert.empty()) my_.mysql_options(db_, MYSQL_OPT_SSL_CERT, d.tls_cert.c_str());
            if (!d.tls_key.empty()) my_.mysql_options(db_, MYSQL_OPT_SSL_KEY, d.tls_key.c_str());
        }
        // CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, not only those it changed,
        // so a refresh within the same millisecond still counts.
        if (!my_.mysql_real_connect(db_, d.host.empty() ? "localhost" : d.host.c_str(),
                                    d.user.empty() ? nullptr : d.user.c_str(),
                                    d.password.empty() ? nullptr : d.password.c_str(),
                                    d.database.c_str(),
                                    unix_socket ? 0 : unsigned(d.port != 0 ? d.port : MYSQL_PORT),
                                    unix_socket ? MYSQL_UNIX_ADDR : nullptr, CLIENT_FOUND_ROWS)) {
            const unsigned code = my_.mysql_errno(db_);
            std::string why = scrub_secret(my_.mysql_error(db_), d.password);
            // MariaDB refuses a user created with REQUIRE SSL exactly as a wrong password.
            if (code == 1045 && d.tls == sql_dsn::tls_mode::disable)
                why +=
                    "; a user that must connect over TLS is refused so too: add "
                    "?sslrootcert=/path/to/ca.pem (sslmode verify-full) to the DSN";
            backend_error failed("sql", "mysql " + std::to_string(code),
                                 "sql: connecting to " + where() + " failed: " + why + " (error " +
                                     std::to_string(code) + ")",
                                 mariadb_kind(code, why));
            // A constructor that throws runs no destructor: the handle is closed here (found by
            // scripts/sanitize.sh asan: every failed connect leaked it).
            my_.mysql_close(db_);
            db_ = nullptr;
            throw failed;
        }
    }
    ~mariadb_connection() override {
        // In a fork()ed child the socket is the parent's: closing would end the parent's
        // connection (COM_QUIT). The child leaves it alone; its memory goes with the child.
        if (generation_ != fork_generation()) return;
        for (auto* s : statements_)
            if (s) my_.mysql_stmt_close(s);
        if (db_) my_.mysql_close(db_);
    }

    std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                        milliseconds ttl) override {
        long long ttl_ms = ttl.count();
        auto* s = execute(acquire_id, {text(id), text(token), number(ttl_ms)});
        const auto fence = std::int64_t(my_.mysql_stmt_insert_id(s));
        if (fence <= 0) return std::nullopt;
        return fence;
    }
    bool refresh(const std::string& id, const std::string& token, milliseconds ttl) override {
        long long ttl_ms = ttl.count();
        auto* s = execute(refresh_id, {number(ttl_ms), text(id), text(token)});
        return my_.mysql_stmt_affected_rows(s) == 1;
    }
    void release(const std::string& id, const std::string& token) override {
        execute(release_id, {text(id), text(token)});
    }
    bool holds(const std::string& id, const std::string& token) override {
        return fetch(holds_id, {text(id), text(token)}).has_value();
    }
    std::optional<milliseconds> remaining(const std::string& id) override {
        auto left = fetch(remaining_id, {text(id)});
        if (!left) return std::nullopt;
        return milliseconds(*left);
    }
    void create_table() override {
        const std::string sql =
            "CREATE TABLE IF NOT EXISTS " + table_sql(o_, '`') +
            " (key_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "token VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, expires_ms BIGINT "
            "NOT NULL, fence BIGINT NOT NULL) ENGINE = InnoDB";
        if (my_.mysql_real_query(db_, sql.c_str(), sql.size()) != 0)
            fail("creating the table", my_.mysql_errno(db_), my_.mysql_error(db_));
    }
    bool usable() const override { return usable_; }
    bool still_open() const override {
        return !socket_closed_by_peer(int(my_.mysql_get_socket(db_)));
    }

  private:
    std::string where() const { return o_.dsn.redacted(); }

    static MYSQL_BIND text(const std::string& s) {
        MYSQL_BIND b;
        std::memset(&b, 0, sizeof b);
        b.buffer_type = MYSQL_TYPE_STRING;
        b.buffer = const_cast<char*>(s.data());
        b.buffer_length = s.size();
        return b;
    }
    static MYSQL_BIND number(long long& v) {
        MYSQL_BIND b;
        std::memset(&b, 0, sizeof b);
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = &v;
        return b;
    }

    [[noreturn]] void fail(const std::string& doing, unsigned code, const char* message) {
        const std::string detail = scrub_secret(message ? message : "", o_.dsn.password);
        const std::string native = "mysql " + std::to_string(code);
        if (code == 1146)
            throw missing_table("sql", native,
                                "sql: table '" + table_shown(o_) + "' does not exist in " + where(),
                                mariadb_kind(code));
        if (wrong_shape(code))
            throw backend_error("sql", native,
                                "sql: table '" + table_shown(o_) + "' in " + where() +
                                    " does not have the columns locksmith needs (" +
                                    expected_columns + "): " + detail + " (error " +
                                    std::to_string(code) +
                                    "); drop it or choose another with the option 'table'",
                                error_kind::permanent);
        // Client-side errors (2000-2999: lost connection, timeout) leave the connection unusable.
        if (code >= 2000 && code < 3000) usable_ = false;
        throw backend_error("sql", native,
                            "sql: " + doing + " on " + where() + " failed: " + detail + " (error " +
                                std::to_string(code) + ")",
                            mariadb_kind(code));
    }

    MYSQL_STMT* prepared(statement_id id) {
        if (statements_[id]) return statements_[id];
        MYSQL_STMT* s = my_.mysql_stmt_init(db_);
        if (!s) fail(what[id], my_.mysql_errno(db_), my_.mysql_error(db_));
        if (my_.mysql_stmt_prepare(s, sql_[id].c_str(), sql_[id].size()) != 0) {
            const unsigned code = my_.mysql_stmt_errno(s);
            const std::string message = my_.mysql_stmt_error(s);
            my_.mysql_stmt_close(s);
            fail(what[id], code, message.c_str());
        }
        return statements_[id] = s;
    }

    MYSQL_STMT* execute(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        MYSQL_STMT* s = prepared(id);
        std::array<MYSQL_BIND, 3> binds{};
        std::copy(params.begin(), params.end(), binds.begin());
        if (my_.mysql_stmt_bind_param(s, binds.data()) != 0 || my_.mysql_stmt_execute(s) != 0) {
            const unsigned code = my_.mysql_stmt_errno(s);
            const std::string message = my_.mysql_stmt_error(s);
            // A statement whose server side is gone (restart, lost connection) is prepared anew.
            my_.mysql_stmt_close(s);
            statements_[id] = nullptr;
            fail(what[id], code, message.c_str());
        }
        return s;
    }

    // The first column of the first row, or nullopt when there is no row.
    std::optional<long long> fetch(statement_id id, std::initializer_list<MYSQL_BIND> params) {
        MYSQL_STMT* s = execute(id, params);
        long long value = 0;
        MYSQL_BIND out;
        std::memset(&out, 0, sizeof out);
        out.buffer_type = MYSQL_TYPE_LONGLONG;
        out.buffer = &value;
        if (my_.mysql_stmt_bind_result(s, &out) != 0 || my_.mysql_stmt_store_result(s) != 0)
            fail(what[id], my_.mysql_stmt_errno(s), my_.mysql_stmt_error(s));
        const int rc = my_.mysql_stmt_fetch(s);
        my_.mysql_stmt_free_result(s);
        if (rc == MYSQL_NO_DATA) return std::nullopt;
        if (rc == 1) fail(what[id], my_.mysql_stmt_errno(s), my_.mysql_stmt_error(s));
        return value;
    }

    const sql_options& o_;
    const mariadb_api& my_ = load_client_api<mariadb_api>("libmariadb.so.3", "libmariadb3", "sql");
    const std::uint64_t generation_ = fork_generation();
    MYSQL* db_ = nullptr;
    bool usable_ = true;
    std::array<std::string, statement_count> sql_;
    std::array<MYSQL_STMT*, statement_count> statements_{};
};

}  // namespace

std::unique_ptr<connection> open_mariadb(const sql_options& options) {
    return std::make_unique<mariadb_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
