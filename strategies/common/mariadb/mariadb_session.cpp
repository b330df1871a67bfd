// SPDX-License-Identifier: MIT
#include "mariadb_session.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>

namespace locksmith::mariadb {
namespace {

// The functions of libmariadb.so.3 locksmith calls, resolved on first use (load_client_api).
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

const mariadb_api& load_api(std::string_view strategy) {
    return load_client_api<mariadb_api>("libmariadb.so.3", "libmariadb3", strategy);
}

// Only called once load_api succeeded (a session exists).
const mariadb_api& my() {
    return load_api({});
}

unsigned seconds_up(std::chrono::milliseconds d) {
    return unsigned(std::max<long long>(1, (d.count() + 999) / 1000));
}

std::string scrubbed(std::string text, const mariadb_target& t) {
    return scrub_secret(scrub_secret(std::move(text), t.password), t.dsn.password);
}

}  // namespace

error_kind mariadb_kind(unsigned code, std::string_view message) {
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
        case 1053:
        case 1317:
        case 1927:
            return error_kind::transient;
        default:
            return code >= 2000 && code < 3000 ? error_kind::unknown : error_kind::permanent;
    }
}

bool ends_session(unsigned code) noexcept {
    // 1927 ER_CONNECTION_KILLED and 1053 ER_SERVER_SHUTDOWN come from the server as it closes
    // the connection.
    return (code >= 2000 && code < 3000) || code == 1927 || code == 1053;
}

mariadb_error::mariadb_error(std::string backend, unsigned code, std::string detail,
                             const std::string& message, error_kind kind)
    : backend_error(std::move(backend), "mysql " + std::to_string(code), message, kind),
      code_(code),
      detail_(std::move(detail)) {}

MYSQL_BIND text_param(const std::string& value) {
    MYSQL_BIND b;
    std::memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_STRING;
    b.buffer = const_cast<char*>(value.data());
    b.buffer_length = value.size();
    return b;
}

MYSQL_BIND integer_param(long long& value) {
    MYSQL_BIND b;
    std::memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &value;
    return b;
}

MYSQL_BIND real_param(double& value) {
    MYSQL_BIND b;
    std::memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_DOUBLE;
    b.buffer = &value;
    return b;
}

// Shuts a session's socket down at a deadline, from a thread of its own, unless the call it
// bounds returned first. Connector/C has no per-call deadline (its read and write timeouts are
// whole seconds, fixed at connect), and a call blocked on the socket returns at once, with a lost
// connection (2013), once the socket is shut down.
class socket_cutter {
  public:
    ~socket_cutter() {
        {
            std::lock_guard<std::mutex> l(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        if (thread_.joinable()) thread_.join();
    }
    void arm(int fd, deadline until) {
        std::lock_guard<std::mutex> l(mutex_);
        fd_ = fd;
        until_ = until;
        fired_ = false;
        if (!thread_.joinable()) {
            every_signal_blocked quiet;  // the locksmith command's SIGCHLD is not for this thread
            thread_ = std::thread([this] { run(); });
        }
        wake_.notify_all();
    }
    // After it, the socket is left alone. True when it was shut down.
    bool disarm() {
        std::lock_guard<std::mutex> l(mutex_);
        until_.reset();
        return std::exchange(fired_, false);
    }

  private:
    void run() {
        std::unique_lock<std::mutex> l(mutex_);
        while (!stop_) {
            if (!until_) {
                wake_.wait(l);
            } else if (std::chrono::steady_clock::now() >= *until_) {
                ::shutdown(fd_, SHUT_RDWR);
                fired_ = true;
                until_.reset();
            } else {
                wake_.wait_until(l, *until_);
            }
        }
    }
    std::mutex mutex_;
    std::condition_variable wake_;
    int fd_ = -1;
    std::optional<deadline> until_;
    bool fired_ = false;
    bool stop_ = false;
    std::thread thread_;
};

// Bounds the session's calls by refresh_deadline() while it lives (the outermost one arms);
// failed() says whether the deadline cut the call short, as the error to throw.
class mariadb_session::deadline_guard {
  public:
    explicit deadline_guard(mariadb_session& s) : s_(s) {
        const auto until = refresh_deadline();
        const int fd = s.socket();
        if (!until || s.bounded_ || fd < 0) return;
        if (!s.cutter_) s.cutter_ = std::make_unique<socket_cutter>();
        s.cutter_->arm(fd, *until);
        s.bounded_ = armed_ = true;
    }
    ~deadline_guard() {
        // Cut after the call returned: the socket is of no use any more.
        if (armed_ && disarm()) s_.usable_ = false;
    }
    deadline_guard(const deadline_guard&) = delete;
    deadline_guard& operator=(const deadline_guard&) = delete;
    // Call with the failed call's error: fails with the deadline's reason when it cut the call.
    void failed(std::string_view what, unsigned code, std::string_view message) {
        if (armed_ && disarm())
            s_.fail(what, 2013, "no reply before the end of the lease being renewed");
        s_.fail(what, code, message);
    }

  private:
    bool disarm() {
        armed_ = s_.bounded_ = false;
        return s_.cutter_->disarm();
    }
    mariadb_session& s_;
    bool armed_ = false;
};

mariadb_session::mariadb_session(const mariadb_target& target)
    : target_(target), generation_(fork_generation()) {
    const auto& api = load_api(target.strategy);
    db_ = api.mysql_init(nullptr);
    if (!db_)
        throw backend_error(target.strategy, "connection",
                            target.strategy + ": out of memory connecting", error_kind::transient);
    auto connect_within = target.connect_timeout;
    if (const auto until = refresh_deadline()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            *until - std::chrono::steady_clock::now());
        if (left <= std::chrono::milliseconds(0))
            throw backend_error(target.strategy, "timeout",
                                target.strategy + ": connecting to " + target.dsn.redacted() +
                                    ": the lease being renewed has ended",
                                error_kind::transient);
        connect_within = std::min(connect_within, left);
    }
    unsigned connect = seconds_up(connect_within);
    unsigned command = seconds_up(target.command_timeout);
    api.mysql_options(db_, MYSQL_OPT_CONNECT_TIMEOUT, &connect);
    api.mysql_options(db_, MYSQL_OPT_READ_TIMEOUT, &command);
    api.mysql_options(db_, MYSQL_OPT_WRITE_TIMEOUT, &command);
    if (!target.init_command.empty())
        api.mysql_options(db_, MYSQL_INIT_COMMAND, target.init_command.c_str());
    api.mysql_options(db_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    const auto& d = target.dsn;
    // The DSN alone says which server: libmariadb takes "localhost" for its Unix socket and
    // ignores the port then, and fills a missing port or socket path from the environment
    // (MYSQL_TCP_PORT, MYSQL_UNIX_PORT). A port means TCP; no port on localhost (or no host)
    // means the default socket, no port elsewhere the default port.
    const bool unix_socket = d.port == 0 && (d.host.empty() || d.host == "localhost");
    unsigned protocol = unix_socket ? MYSQL_PROTOCOL_SOCKET : MYSQL_PROTOCOL_TCP;
    api.mysql_options(db_, MYSQL_OPT_PROTOCOL, &protocol);
    if (d.tls != strategies::sql_dsn::tls_mode::disable) {
        // ENFORCE: no fallback to plain TCP when the server has no TLS. VERIFY_SERVER_CERT checks
        // the chain and the host name (Connector/C 3.3 does neither by default).
        my_bool on = 1, verify = d.tls == strategies::sql_dsn::tls_mode::verify_full;
        api.mysql_options(db_, MYSQL_OPT_SSL_ENFORCE, &on);
        api.mysql_options(db_, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
        if (!d.tls_ca.empty()) api.mysql_options(db_, MYSQL_OPT_SSL_CA, d.tls_ca.c_str());
        if (!d.tls_cert.empty()) api.mysql_options(db_, MYSQL_OPT_SSL_CERT, d.tls_cert.c_str());
        if (!d.tls_key.empty()) api.mysql_options(db_, MYSQL_OPT_SSL_KEY, d.tls_key.c_str());
    }
    if (!api.mysql_real_connect(db_, d.host.empty() ? "localhost" : d.host.c_str(),
                                d.user.empty() ? nullptr : d.user.c_str(),
                                target.password.empty() ? nullptr : target.password.c_str(),
                                d.database.c_str(),
                                unix_socket ? 0 : unsigned(d.port != 0 ? d.port : MYSQL_PORT),
                                unix_socket ? MYSQL_UNIX_ADDR : nullptr, target.client_flags)) {
        const unsigned code = api.mysql_errno(db_);
        std::string why = scrubbed(api.mysql_error(db_), target);
        // MariaDB refuses a user created with REQUIRE SSL exactly as a wrong password.
        if (code == 1045 && d.tls == strategies::sql_dsn::tls_mode::disable)
            why +=
                "; a user that must connect over TLS is refused so too: add "
                "?sslrootcert=/path/to/ca.pem (sslmode verify-full) to the DSN";
        mariadb_error failed(target.strategy, code, why,
                             target.strategy + ": connecting to " + d.redacted() +
                                 " failed: " + why + " (error " + std::to_string(code) + ")",
                             mariadb_kind(code, why));
        // A constructor that throws runs no destructor: the handle is closed here (found by
        // scripts/sanitize.sh asan: every failed connect leaked it).
        api.mysql_close(db_);
        db_ = nullptr;
        throw failed;
    }
    // libmariadb opens its socket without close-on-exec: a command this process exec()s would
    // keep the session, and with it the session's locks, open after this process died, and
    // could write into it. (It never reconnects on its own: MYSQL_OPT_RECONNECT is off.)
    const int fd = int(api.mysql_get_socket(db_));
    if (fd >= 0) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

mariadb_session::~mariadb_session() {
    // In a fork()ed child the socket is the parent's: closing would end the parent's connection
    // (COM_QUIT) and with it the parent's locks. The child leaves it alone; its memory goes with
    // the child.
    if (!ours()) {
        (void)cutter_.release();  // its thread is the parent's: nothing to join here
        return;
    }
    for (auto* s : statements_)
        if (s) my().mysql_stmt_close(s);
    if (db_) my().mysql_close(db_);
}

bool mariadb_session::ours() const noexcept {
    return generation_ == fork_generation();
}

int mariadb_session::socket() const noexcept {
    if (!usable_ || !db_) return -1;
    return int(my().mysql_get_socket(db_));
}

bool mariadb_session::hung_up() const noexcept {
    // Between statements the server sends nothing unasked: whatever is readable is its goodbye
    // (the error packet of a KILL or a shutdown, then the end of stream).
    return socket_closed_by_peer(socket());
}

void mariadb_session::fail(std::string_view what, unsigned code, std::string_view message) {
    const std::string detail = scrubbed(std::string(message), target_);
    if (ends_session(code)) usable_ = false;
    throw mariadb_error(target_.strategy, code, detail,
                        target_.strategy + ": " + std::string(what) + " on " +
                            target_.dsn.redacted() + " failed: " + detail + " (error " +
                            std::to_string(code) + ")",
                        mariadb_kind(code, detail));
}

MYSQL_STMT* mariadb_session::prepared(std::size_t slot, const std::string& sql,
                                      std::string_view what, deadline_guard& bounded) {
    if (statements_.at(slot)) return statements_[slot];
    MYSQL_STMT* s = my().mysql_stmt_init(db_);
    if (!s) fail(what, my().mysql_errno(db_), my().mysql_error(db_));
    if (my().mysql_stmt_prepare(s, sql.c_str(), sql.size()) != 0) {
        const unsigned code = my().mysql_stmt_errno(s);
        const std::string message = my().mysql_stmt_error(s);
        my().mysql_stmt_close(s);
        bounded.failed(what, code, message);
    }
    return statements_[slot] = s;
}

MYSQL_STMT* mariadb_session::execute(std::size_t slot, const std::string& sql,
                                     std::initializer_list<MYSQL_BIND> params,
                                     std::string_view what) {
    if (!usable_) fail(what, 2006, "the connection was lost before");
    deadline_guard bounded(*this);
    MYSQL_STMT* s = prepared(slot, sql, what, bounded);
    std::array<MYSQL_BIND, 4> binds{};
    if (params.size() > binds.size()) fail(what, 2034, "too many parameters");
    std::copy(params.begin(), params.end(), binds.begin());
    if (my().mysql_stmt_bind_param(s, binds.data()) != 0 || my().mysql_stmt_execute(s) != 0) {
        const unsigned code = my().mysql_stmt_errno(s);
        const std::string message = my().mysql_stmt_error(s);
        // A statement whose server side is gone (restart, lost connection) is prepared anew.
        my().mysql_stmt_close(s);
        statements_[slot] = nullptr;
        bounded.failed(what, code, message);
    }
    return s;
}

first_value mariadb_session::fetch_first(std::size_t slot, const std::string& sql,
                                         std::initializer_list<MYSQL_BIND> params,
                                         std::string_view what) {
    deadline_guard bounded(*this);
    MYSQL_STMT* s = execute(slot, sql, params, what);
    first_value out;
    my_bool is_null = 0;
    MYSQL_BIND result;
    std::memset(&result, 0, sizeof result);
    result.buffer_type = MYSQL_TYPE_LONGLONG;
    result.buffer = &out.value;
    result.is_null = &is_null;
    if (my().mysql_stmt_bind_result(s, &result) != 0 || my().mysql_stmt_store_result(s) != 0)
        bounded.failed(what, my().mysql_stmt_errno(s), my().mysql_stmt_error(s));
    const int rc = my().mysql_stmt_fetch(s);
    my().mysql_stmt_free_result(s);
    if (rc == 1) bounded.failed(what, my().mysql_stmt_errno(s), my().mysql_stmt_error(s));
    out.row = rc != MYSQL_NO_DATA;
    out.null = out.row && is_null;
    return out;
}

std::uint64_t mariadb_session::affected_rows(MYSQL_STMT* statement) const {
    return my().mysql_stmt_affected_rows(statement);
}

std::uint64_t mariadb_session::insert_id(MYSQL_STMT* statement) const {
    return my().mysql_stmt_insert_id(statement);
}

void mariadb_session::run(const std::string& sql, std::string_view what) {
    if (!usable_) fail(what, 2006, "the connection was lost before");
    deadline_guard bounded(*this);
    if (my().mysql_real_query(db_, sql.c_str(), sql.size()) != 0)
        bounded.failed(what, my().mysql_errno(db_), my().mysql_error(db_));
}

}  // namespace locksmith::mariadb
