#include "pg_session.hpp"

#include <dlfcn.h>
#include <poll.h>

#include <cerrno>
#include <mutex>
#include <vector>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

namespace locksmith::pg {
namespace {

// libpq is opened on first use (dlopen), not linked: it brings some twenty libraries (TLS,
// Kerberos, LDAP), which a program that never talks to PostgreSQL should not load, and Debian
// has no static libpq that the statically linked locksmith command could take in
// (cli/CMakeLists.txt). libpq-fe.h still gives every signature.
#define LOCKSMITH_LIBPQ_FUNCTIONS(X)                                                           \
    X(PQconnectStartParams)                                                                    \
    X(PQconnectPoll) X(PQconninfoParse) X(PQconninfoFree) X(PQfreemem) X(PQsetNoticeProcessor) \
        X(PQstatus) X(PQerrorMessage) X(PQfinish) X(PQsocket) X(PQsendQuery) X(PQisBusy)       \
            X(PQgetResult) X(PQconsumeInput) X(PQresultStatus) X(PQresultErrorField)           \
                X(PQresultErrorMessage) X(PQclear) X(PQntuples) X(PQnfields) X(PQgetvalue)

struct libpq_api {
#define LOCKSMITH_LIBPQ_POINTER(f) decltype(&::f) f = nullptr;
    LOCKSMITH_LIBPQ_FUNCTIONS(LOCKSMITH_LIBPQ_POINTER)
#undef LOCKSMITH_LIBPQ_POINTER
};

libpq_api the_api;
std::string load_failure;

// Loads libpq once. Throws backend_error (native code "libpq") when it cannot.
void load_libpq(const std::string& strategy) {
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) {
            const char* why = ::dlerror();
            load_failure = why ? why : "dlopen failed";
            return;
        }
#define LOCKSMITH_LIBPQ_SYMBOL(f)                                   \
    the_api.f = reinterpret_cast<decltype(&::f)>(::dlsym(lib, #f)); \
    if (the_api.f == nullptr) {                                     \
        load_failure = "libpq.so.5 has no " #f;                     \
        return;                                                     \
    }
        LOCKSMITH_LIBPQ_FUNCTIONS(LOCKSMITH_LIBPQ_SYMBOL)
#undef LOCKSMITH_LIBPQ_SYMBOL
    });
    if (!load_failure.empty())
        throw backend_error(
            strategy, "libpq",
            strategy + ": libpq cannot be loaded (install the package libpq5): " + load_failure);
}

// Only called once load_libpq succeeded (a session or a result exists).
const libpq_api& pq() noexcept {
    return the_api;
}

// libpq's messages end in newlines and may span several lines ("connection to server at ...
// failed: FATAL:  role ... does not exist\n"): one line for ours.
std::string one_line(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '\n') {
            if (!out.empty() && out.back() != ' ') out += "; ";
        } else if (c == '\t') {
            if (!out.empty() && out.back() != ' ') out += ' ';
        } else {
            out += c;
        }
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
    return out;
}

void replace_all(std::string& text, std::string_view what) {
    if (what.empty()) return;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 3))
        text.replace(at, what.size(), "***");
}

// libpq quotes what it cannot parse (a percent-escape, a parameter), which may be part of the
// password: whatever sits between "://" and the last '@' of the authority is scrubbed, as typed.
std::string raw_userinfo(std::string_view dsn) {
    const auto scheme = dsn.find("://");
    if (scheme == std::string_view::npos) return {};
    auto rest = dsn.substr(scheme + 3);
    const auto at = rest.rfind('@');
    return at == std::string_view::npos ? std::string() : std::string(rest.substr(0, at));
}

std::string scrubbed(std::string text, const std::string& password, std::string_view dsn) {
    const auto userinfo = raw_userinfo(dsn);
    if (const auto colon = userinfo.find(':'); colon != std::string::npos)
        replace_all(text, std::string_view(userinfo).substr(colon + 1));
    replace_all(text, password);
    return text;
}

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string redact_pg_dsn(std::string_view dsn) {
    const auto scheme = dsn.find("://");
    const auto userinfo = raw_userinfo(dsn);
    // A userinfo without ':' is a user name for libpq; redact_url would hide it as a password.
    if (scheme == std::string_view::npos || userinfo.empty() ||
        userinfo.find(':') != std::string::npos ||
        userinfo.find_first_of("/?#") != std::string::npos)
        return redact_url(dsn);
    std::string without(dsn.substr(0, scheme + 3));
    without += dsn.substr(scheme + 3 + userinfo.size() + 1);
    auto out = redact_url(without);
    out.insert(scheme + 3, userinfo + "@");
    return out;
}

pg_target make_pg_target(std::string strategy, std::string_view dsn) {
    pg_target t;
    t.strategy = std::move(strategy);
    t.dsn = std::string(dsn);
    t.redacted = redact_pg_dsn(dsn);
    if (!starts_with(dsn, "postgresql://") && !starts_with(dsn, "postgres://"))
        throw invalid_argument_error(t.strategy + ": dsn " + t.redacted +
                                     " must be a URL postgresql://user[:password]@host[:port]/"
                                     "database");
    load_libpq(t.strategy);
    char* error = nullptr;
    PQconninfoOption* options = pq().PQconninfoParse(t.dsn.c_str(), &error);
    if (options == nullptr) {
        std::string why = error ? one_line(error) : "out of memory";
        pq().PQfreemem(error);
        throw invalid_argument_error(t.strategy + ": dsn " + t.redacted +
                                     " is not a valid PostgreSQL URL: " + scrubbed(why, {}, dsn));
    }
    bool has_database = false;
    for (auto* o = options; o->keyword != nullptr; ++o) {
        if (o->val == nullptr) continue;
        const std::string_view keyword = o->keyword;
        if (keyword == "password") t.password = o->val;
        if (keyword == "dbname" && *o->val != '\0') has_database = true;
    }
    pq().PQconninfoFree(options);
    if (!has_database)
        throw invalid_argument_error(t.strategy + ": dsn " + t.redacted +
                                     " names no database (postgresql://host[:port]/database)");
    return t;
}

void pg_result_deleter::operator()(PGresult* r) const noexcept {
    if (r != nullptr) pq().PQclear(r);
}

int pg_rows(const PGresult* result) {
    return result ? pq().PQntuples(result) : 0;
}

std::string_view pg_value(const PGresult* result, int row, int column) {
    if (row < 0 || row >= pg_rows(result) || column < 0 || column >= pq().PQnfields(result))
        return {};
    return pq().PQgetvalue(result, row, column);
}

std::string sqlstate(const PGresult* result) {
    const char* code = result ? pq().PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    return code ? code : "";
}

pg_session::pg_session(const pg_target& target) : target_(target), generation_(fork_generation()) {
    load_libpq(target.strategy);
    const char* keywords[] = {"dbname", "fallback_application_name", nullptr};
    const char* values[] = {target.dsn.c_str(), "locksmith", nullptr};
    const auto until = clock::now() + target.connect_timeout;
    conn_ = pq().PQconnectStartParams(keywords, values, 1);
    if (conn_ == nullptr) fail("connecting", "connect", "out of memory");
    // The server's notices (an unlock of a lock not held warns) must not reach stderr.
    pq().PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    // libpq says to start as if PQconnectPoll had asked to write.
    PostgresPollingStatusType state = PGRES_POLLING_WRITING;
    while (pq().PQstatus(conn_) != CONNECTION_BAD && state != PGRES_POLLING_OK &&
           state != PGRES_POLLING_FAILED) {
        if (!wait_socket(state == PGRES_POLLING_WRITING, until)) {
            close();
            fail("connecting", "timeout",
                 "no answer within the connect timeout of " +
                     std::to_string(target.connect_timeout.count()) + " ms");
        }
        state = pq().PQconnectPoll(conn_);
    }
    if (pq().PQstatus(conn_) != CONNECTION_OK) {
        const auto why = one_line(pq().PQerrorMessage(conn_));
        close();
        fail("connecting", "connect", why);
    }
}

pg_session::~pg_session() {
    close();
}

void pg_session::close() noexcept {
    broken_ = true;
    // In a fork()ed child the socket is the parent's: PQfinish would end the parent's session
    // (and free its locks). The child leaves it alone; its memory goes with the child.
    if (conn_ != nullptr && ours()) pq().PQfinish(conn_);
    conn_ = nullptr;
}

bool pg_session::ours() const noexcept {
    return generation_ == fork_generation();
}

bool pg_session::broken() const noexcept {
    return broken_ || conn_ == nullptr || pq().PQstatus(conn_) != CONNECTION_OK;
}

bool pg_session::hung_up() const noexcept {
    if (broken()) return true;
    pollfd p{pq().PQsocket(conn_), POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;  // data, a hang-up, or an error (-1)
}

bool pg_session::wait_socket(bool for_write, clock::time_point until) const {
    pollfd p{pq().PQsocket(conn_), short(for_write ? POLLOUT : POLLIN), 0};
    if (p.fd < 0) return true;  // libpq reports the failure at its next call
    for (;;) {
        int timeout = -1;
        if (until != clock::time_point::max()) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(until - clock::now()).count();
            if (left <= 0) return false;
            timeout = left > 86'400'000 ? 86'400'000 : int(left);
        }
        const int n = ::poll(&p, 1, timeout);
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return true;  // libpq reports the error
        if (n == 0 && until != clock::time_point::max() && clock::now() >= until) return false;
    }
}

pg_result pg_session::query(const std::string& sql) {
    return query(sql, clock::now() + target_.command_timeout);
}

pg_result pg_session::query(const std::string& sql, clock::time_point until) {
    if (broken()) fail("running a statement", "connection", "the session has ended");
    if (!pq().PQsendQuery(conn_, sql.c_str())) {
        const auto why = one_line(pq().PQerrorMessage(conn_));
        close();
        fail("sending a statement", "connection", why);
    }
    // A simple query answers with one result per statement; the first error ends the batch and
    // is the one worth reporting.
    pg_result last, error;
    for (;;) {
        while (!pq().PQisBusy(conn_)) {
            PGresult* r = pq().PQgetResult(conn_);
            if (r == nullptr) {
                if (error) {
                    if (pq().PQstatus(conn_) != CONNECTION_OK) close();
                    const char* primary =
                        pq().PQresultErrorField(error.get(), PG_DIAG_MESSAGE_PRIMARY);
                    const auto code = sqlstate(error.get());
                    fail("running a statement", code.empty() ? "connection" : "SQLSTATE " + code,
                         one_line(primary ? primary : pq().PQresultErrorMessage(error.get())) +
                             (code.empty() ? "" : " (SQLSTATE " + code + ")"));
                }
                if (!last) {
                    const auto why = one_line(pq().PQerrorMessage(conn_));
                    close();
                    fail("running a statement", "connection", why);
                }
                return last;
            }
            const auto status = pq().PQresultStatus(r);
            if ((status == PGRES_FATAL_ERROR || status == PGRES_NONFATAL_ERROR) && !error)
                error.reset(r);
            else
                last.reset(r);
        }
        if (!wait_socket(false, until)) {
            // The reply may still come: the session's protocol state is unknown, so it is
            // closed, and the server frees what it held once it sees the socket close.
            close();
            fail("waiting for a reply", "timeout",
                 "no reply within the command timeout of " +
                     std::to_string(target_.command_timeout.count()) + " ms");
        }
        if (!pq().PQconsumeInput(conn_)) {
            const auto why = one_line(pq().PQerrorMessage(conn_));
            close();
            fail("reading a reply", "connection", why);
        }
    }
}

void pg_session::fail(const std::string& what, const std::string& native_code,
                      const std::string& reason) const {
    throw backend_error(target_.strategy, native_code,
                        target_.strategy + ": " + what + " on " + target_.redacted +
                            " failed: " + scrubbed(reason, target_.password, target_.dsn));
}

}  // namespace locksmith::pg
