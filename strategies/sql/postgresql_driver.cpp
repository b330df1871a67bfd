// The sql strategy's PostgreSQL driver (libpq, loaded on first use). Statements are prepared once
// per connection and run asynchronously, so that connect_timeout and command_timeout bound every
// wait even when the server stops answering.
#include <poll.h>

#include <array>
#include <chrono>
#include <string>

#include <libpq-fe.h>

#include "sql_driver.hpp"

namespace locksmith::strategies::sql_detail {
namespace {

// The functions of libpq.so.5 this driver calls, resolved on first use (load_client_library).
#define LS_LIBPQ_FUNCTIONS(X)                                                                   \
    X(PQclear)                                                                                  \
    X(PQcmdTuples) X(PQconnectPoll) X(PQconnectStartParams) X(PQconsumeInput) X(PQerrorMessage) \
        X(PQfinish) X(PQflush) X(PQgetResult) X(PQgetvalue) X(PQisBusy) X(PQntuples)            \
            X(PQresultErrorField) X(PQresultErrorMessage) X(PQresultStatus) X(PQsendPrepare)    \
                X(PQsendQuery) X(PQsendQueryPrepared) X(PQsocket) X(PQstatus)
struct libpq_api {
#define LS_DECLARE(f) decltype(&::f) f;
    LS_LIBPQ_FUNCTIONS(LS_DECLARE)
#undef LS_DECLARE
};

const libpq_api& libpq() {
    // A failed load throws out of the initialisation, so the next call tries again.
    static const libpq_api api = [] {
        void* library = load_client_library("libpq.so.5", "libpq5");
        libpq_api a;
#define LS_RESOLVE(f) \
    a.f = reinterpret_cast<decltype(&::f)>(client_symbol(library, #f, "libpq.so.5"));
        LS_LIBPQ_FUNCTIONS(LS_RESOLVE)
#undef LS_RESOLVE
        return a;
    }();
    return api;
}

using clock = std::chrono::steady_clock;

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

class pg_connection final : public connection {
  public:
    explicit pg_connection(const sql_options& o) : o_(o) {
        const std::string table = "\"" + o.table + "\"";
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
        connect();
    }
    ~pg_connection() override {
        if (conn_) pq_.PQfinish(conn_);
    }

    std::optional<std::int64_t> acquire(const std::string& id, const std::string& token,
                                        milliseconds ttl) override {
        const auto ttl_text = std::to_string(ttl.count());
        result r = exec(acquire_id, {id.c_str(), token.c_str(), ttl_text.c_str()});
        if (pq_.PQntuples(r.get()) == 0) return std::nullopt;
        return std::stoll(pq_.PQgetvalue(r.get(), 0, 0));
    }
    bool refresh(const std::string& id, const std::string& token, milliseconds ttl) override {
        const auto ttl_text = std::to_string(ttl.count());
        result r = exec(refresh_id, {id.c_str(), token.c_str(), ttl_text.c_str()});
        return std::string(pq_.PQcmdTuples(r.get())) == "1";
    }
    void release(const std::string& id, const std::string& token) override {
        exec(release_id, {id.c_str(), token.c_str()});
    }
    bool holds(const std::string& id, const std::string& token) override {
        return pq_.PQntuples(exec(holds_id, {id.c_str(), token.c_str()}).get()) == 1;
    }
    std::optional<milliseconds> remaining(const std::string& id) override {
        result r = exec(remaining_id, {id.c_str()});
        if (pq_.PQntuples(r.get()) == 0) return std::nullopt;
        return milliseconds(std::stoll(pq_.PQgetvalue(r.get(), 0, 0)));
    }
    void create_table() override {
        const std::string sql = "CREATE TABLE IF NOT EXISTS \"" + o_.table +
                                "\" (key_id VARCHAR(32) NOT NULL PRIMARY KEY, token VARCHAR(32) "
                                "NOT NULL, expires_ms BIGINT NOT NULL, fence BIGINT NOT NULL)";
        if (!pq_.PQsendQuery(conn_, sql.c_str())) fail_connection("creating the table");
        try {
            finish("creating the table", clock::now() + o_.command_timeout);
        } catch (const backend_error& e) {
            // Two processes creating it at once: one of them loses a race in the catalog.
            if (e.native_code() != "SQLSTATE 23505" && e.native_code() != "SQLSTATE 42P07") throw;
        }
        prepared_.fill(false);
    }
    bool usable() const override { return usable_ && pq_.PQstatus(conn_) == CONNECTION_OK; }
    bool still_open() const override { return !socket_closed_by_peer(pq_.PQsocket(conn_)); }

  private:
    struct result_deleter {
        void operator()(PGresult* r) const noexcept { libpq().PQclear(r); }
    };
    using result = std::unique_ptr<PGresult, result_deleter>;

    std::string where() const { return o_.dsn.redacted(); }

    void connect() {
        const char* keys[] = {"dbname", "application_name", "client_encoding", nullptr};
        const char* values[] = {o_.dsn.text.c_str(), "locksmith", "UTF8", nullptr};
        conn_ = pq_.PQconnectStartParams(keys, values, 1);
        if (!conn_) throw backend_error("sql", "connection", "sql: out of memory connecting");
        const auto until = clock::now() + o_.connect_timeout;
        auto status = PGRES_POLLING_WRITING;
        while (pq_.PQstatus(conn_) != CONNECTION_BAD && status != PGRES_POLLING_OK &&
               status != PGRES_POLLING_FAILED) {
            if (!wait_socket(status == PGRES_POLLING_READING ? POLLIN : POLLOUT, until))
                throw backend_error("sql", "timeout",
                                    "sql: connecting to " + where() + " timed out after " +
                                        std::to_string(o_.connect_timeout.count()) +
                                        " ms (connect_timeout_s); is the server running?");
            status = pq_.PQconnectPoll(conn_);
        }
        if (pq_.PQstatus(conn_) != CONNECTION_OK)
            throw backend_error("sql", "connection",
                                "sql: connecting to " + where() + " failed: " + message());
    }

    // The connection's last error, one line, without the password.
    std::string message() const {
        std::string m = pq_.PQerrorMessage(conn_);
        while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
        for (auto& ch : m)
            if (ch == '\n') ch = ' ';
        return scrub(m, o_.dsn.password);
    }

    bool wait_socket(short events, clock::time_point until) {
        for (;;) {
            const auto left = std::chrono::ceil<milliseconds>(until - clock::now()).count();
            if (left <= 0) return false;
            pollfd p{pq_.PQsocket(conn_), events, 0};
            int n = ::poll(&p, 1, int(std::min<long long>(left, 1 << 30)));
            if (n > 0) return true;
            if (n < 0 && errno != EINTR) return true;  // libpq reports the error next
        }
    }

    [[noreturn]] void fail_connection(const std::string& what) {
        usable_ = false;
        throw backend_error("sql", "connection",
                            "sql: " + what + " on " + where() + " failed: " + message());
    }

    [[noreturn]] void timed_out(const std::string& what) {
        usable_ = false;
        throw backend_error("sql", "timeout",
                            "sql: " + what + " on " + where() + ": no answer within " +
                                std::to_string(o_.command_timeout.count()) +
                                " ms (command_timeout_s); is the server running?");
    }

    // Waits for the command sent last and returns its (first) result, checked.
    result finish(const std::string& what, clock::time_point until) {
        for (;;) {
            int flushed = pq_.PQflush(conn_);
            if (flushed < 0) fail_connection(what);
            if (flushed == 0) break;
            if (!wait_socket(POLLIN | POLLOUT, until)) timed_out(what);
            if (!pq_.PQconsumeInput(conn_)) fail_connection(what);
        }
        result first;
        for (;;) {
            while (pq_.PQisBusy(conn_)) {
                if (!wait_socket(POLLIN, until)) timed_out(what);
                if (!pq_.PQconsumeInput(conn_)) fail_connection(what);
            }
            PGresult* r = pq_.PQgetResult(conn_);
            if (!r) break;
            if (!first)
                first.reset(r);
            else
                pq_.PQclear(r);
        }
        if (!first) fail_connection(what);
        const auto status = pq_.PQresultStatus(first.get());
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return first;
        const char* state_text = pq_.PQresultErrorField(first.get(), PG_DIAG_SQLSTATE);
        const std::string state = state_text ? state_text : "";
        // The first line: the rest quotes the statement with a caret under the position.
        std::string detail = pq_.PQresultErrorMessage(first.get());
        detail = scrub(detail.substr(0, detail.find('\n')), o_.dsn.password);
        if (pq_.PQstatus(conn_) != CONNECTION_OK || state.empty()) {
            usable_ = false;
            throw backend_error("sql", "connection",
                                "sql: " + what + " on " + where() +
                                    " failed: " + (detail.empty() ? message() : detail));
        }
        const std::string code = "SQLSTATE " + state;
        if (state == "42P01")
            throw missing_table("sql", code,
                                "sql: table '" + o_.table + "' does not exist in " + where());
        if (wrong_shape(state))
            throw backend_error("sql", code,
                                "sql: table '" + o_.table + "' in " + where() +
                                    " does not have the columns locksmith needs (" +
                                    expected_columns + "): " + detail + " (" + code +
                                    "); drop it or choose another with the option 'table'");
        throw backend_error(
            "sql", code,
            "sql: " + what + " on " + where() + " failed: " + detail + " (" + code + ")");
    }

    result exec(statement_id id, std::initializer_list<const char*> params) {
        const auto& s = statements[id];
        const auto until = clock::now() + o_.command_timeout;
        if (!prepared_[id]) {
            if (!pq_.PQsendPrepare(conn_, s.name, sql_[id].c_str(), s.params, nullptr))
                fail_connection(s.what);
            finish(s.what, until);
            prepared_[id] = true;
        }
        if (!pq_.PQsendQueryPrepared(conn_, s.name, int(params.size()), params.begin(), nullptr,
                                     nullptr, 0))
            fail_connection(s.what);
        return finish(s.what, until);
    }

    const sql_options& o_;
    const libpq_api& pq_ = libpq();
    PGconn* conn_ = nullptr;
    bool usable_ = true;
    std::array<std::string, statement_count> sql_;
    std::array<bool, statement_count> prepared_{};
};

}  // namespace

std::unique_ptr<connection> open_postgresql(const sql_options& options) {
    return std::make_unique<pg_connection>(options);
}

}  // namespace locksmith::strategies::sql_detail
