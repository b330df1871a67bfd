// SPDX-License-Identifier: MIT
#include "pg_session.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <vector>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

namespace locksmith::pg {
namespace {

// The functions of libpq.so.5 locksmith calls; libpq-fe.h gives every signature.
// One function per line, kept by hand: clang-format reflows X-macro lists differently each run.
// clang-format off
#define LOCKSMITH_LIBPQ_FUNCTIONS(X) \
    X(PQconnectStartParams) \
    X(PQconnectPoll) \
    X(PQconninfoParse) \
    X(PQconninfoFree) \
    X(PQfreemem) \
    X(PQsetNoticeReceiver) \
    X(PQsetErrorVerbosity) \
    X(PQconnectionNeedsPassword) \
    X(PQstatus) \
    X(PQerrorMessage) \
    X(PQfinish) \
    X(PQsocket) \
    X(PQsendQuery) \
    X(PQsendPrepare) \
    X(PQsendQueryPrepared) \
    X(PQisBusy) \
    X(PQgetResult) \
    X(PQconsumeInput) \
    X(PQresultStatus) \
    X(PQresultErrorField) \
    X(PQresultErrorMessage) \
    X(PQclear) \
    X(PQntuples) \
    X(PQnfields) \
    X(PQgetvalue) \
    X(PQcmdTuples)
// clang-format on
struct libpq_api {
#define LOCKSMITH_LIBPQ_POINTER(f) decltype(&::f) f = nullptr;
    LOCKSMITH_LIBPQ_FUNCTIONS(LOCKSMITH_LIBPQ_POINTER)
#undef LOCKSMITH_LIBPQ_POINTER
    explicit libpq_api(const client_library& lib) {
#define LOCKSMITH_LIBPQ_RESOLVE(f) lib.resolve(f, #f);
        LOCKSMITH_LIBPQ_FUNCTIONS(LOCKSMITH_LIBPQ_RESOLVE)
#undef LOCKSMITH_LIBPQ_RESOLVE
    }
};

// Loads libpq once. Throws backend_error ("dlopen") naming `strategy` when it cannot.
const libpq_api& load_libpq(std::string_view strategy) {
    return load_client_api<libpq_api>("libpq.so.5", "libpq5", strategy);
}

// Only called once load_libpq succeeded (a target, a session or a result exists).
const libpq_api& pq() {
    return load_libpq({});
}

// libpq's messages end in newlines and may span several lines ("connection to server at ...
// failed: FATAL:  role ... does not exist\n"): one line for ours. LOCATION lines (verbose
// messages, see the constructor) say where in the server's source the error was raised.
std::string one_line(std::string_view text) {
    std::string out;
    while (!text.empty()) {
        auto line = text.substr(0, text.find('\n'));
        text.remove_prefix(std::min(text.size(), line.size() + 1));
        if (line.empty() || line.substr(0, 9) == "LOCATION:") continue;
        if (!out.empty()) out += "; ";
        for (char c : line) {
            if (c != '\t')
                out += c;
            else if (!out.empty() && out.back() != ' ')
                out += ' ';
        }
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
    return out;
}

// The SQLSTATE in a verbose connection error ("FATAL:  3D000: database ..."), removed from the
// text so that it reads as the default one; "" when the server sent none (it was not reached).
std::string take_sqlstate(std::string& text) {
    std::string found;
    for (auto at = text.find(":  "); at != std::string::npos; at = text.find(":  ", at + 1)) {
        const auto code = std::string_view(text).substr(at + 3, 7);
        if (code.size() < 7 || code.substr(5) != ": ") continue;
        bool valid = true;
        for (char c : code.substr(0, 5))
            valid = valid && ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z'));
        if (!valid) continue;
        found = std::string(code.substr(0, 5));
        text.erase(at + 3, 7);
    }
    return found;
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
        text = scrub_secret(std::move(text), std::string_view(userinfo).substr(colon + 1));
    return scrub_secret(std::move(text), password);
}

// libpq's client-side TLS failures, which no retry mends: a server certificate that does not
// verify (wrong CA, wrong host name), a certificate or key file it cannot use, a server without
// TLS when TLS is required. libpq gives them no code: its wording is what tells them apart
// from a connection that broke during the handshake ("SSL SYSCALL error: EOF detected").
bool tls_setup_failed(std::string_view why) {
    for (std::string_view sign :
         {"certificate", "private key", "does not support SSL", "does not match host name"})
        if (why.find(sign) != std::string_view::npos) return true;
    return false;
}

// See pg_target::default_sslmode.
std::string default_sslmode_of(const PQconninfoOption* options) {
    bool has_sslmode = false, names_certificate = false;
    for (auto* o = options; o->keyword != nullptr; ++o) {
        if (o->val == nullptr) continue;
        const std::string_view keyword = o->keyword;
        if (keyword == "sslmode") has_sslmode = true;
        if (keyword == "sslrootcert" || keyword == "sslcert" || keyword == "sslkey")
            names_certificate = true;
    }
    return names_certificate && !has_sslmode ? "verify-full" : "";
}

// libpq fills what a DSN leaves out from the environment (PGHOST, PGPORT, ..., and a service file
// that PGSERVICE names): processes of one config with different environments (a service, a cron
// job, an admin's shell) would reach different servers, databases or roles, and one name would
// have a holder in each. What decides where a lock lives must be written in the DSN.
void refuse_environment_defaults(const pg_target& t, const PQconninfoOption* options) {
    static constexpr std::pair<const char*, const char*> decisive[] = {
        {"PGHOST", "host"}, {"PGHOSTADDR", "hostaddr"}, {"PGPORT", "port"},
        {"PGUSER", "user"}, {"PGDATABASE", "dbname"},   {"PGSERVICE", "service"}};
    for (const auto& [variable, keyword] : decisive) {
        const char* value = std::getenv(variable);
        if (value == nullptr || *value == '\0') continue;
        bool given = false;
        for (auto* o = options; o->keyword != nullptr; ++o)
            if (o->val != nullptr && *o->val != '\0' && std::string_view(o->keyword) == keyword)
                given = true;
        if (!given)
            throw invalid_argument_error(
                t.strategy + ": dsn " + t.redacted + " names no " + keyword + " and " + variable +
                " is set in this process's environment: libpq would take it from there, so a "
                "process with another environment would lock on another server; write the " +
                keyword + " in the dsn, or unset " + variable);
    }
}

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

std::string sqlstate(const PGresult* result) {
    const char* code = result ? pq().PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    return code ? code : "";
}

}  // namespace

error_kind sqlstate_kind(std::string_view s) noexcept {
    const auto cls = s.substr(0, 2);
    if (cls == "08" || s == "57P01" || s == "57P02" || s == "57P03" || s == "53300" ||
        s == "40001" || s == "40P01" || s == "55P03" || s == "57014")
        return error_kind::transient;
    if (cls == "58" || cls == "XX") return error_kind::unknown;
    return error_kind::permanent;
}

statement_error::statement_error(std::string backend, std::string sqlstate, std::string detail,
                                 const std::string& message)
    : backend_error(std::move(backend), "SQLSTATE " + sqlstate, message, sqlstate_kind(sqlstate)),
      sqlstate_(std::move(sqlstate)),
      detail_(std::move(detail)) {}

namespace {

// libpq's host (or hostaddr) and port lists, as identities: a host beginning with '/' is a
// socket directory, no host the default one; one port serves every host.
std::vector<std::string> servers_of(const std::string& hosts, const std::string& ports) {
    const auto host_list = split_list(hosts), port_list = split_list(ports);
    std::vector<std::string> servers;
    for (std::size_t i = 0; i < host_list.size(); ++i) {
        std::string port = port_list.size() == 1  ? port_list[0]
                           : i < port_list.size() ? port_list[i]
                                                  : "";
        if (port.empty()) port = "5432";
        const auto& h = host_list[i];
        if (h.empty() || h.front() == '/') {
            servers.push_back("unix:" + (h.empty() ? std::string("default") : h) + ":" + port);
            continue;
        }
        int number = 0;
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
        if (ec != std::errc() || end != port.data() + port.size()) {
            servers.push_back(h + ":" + port);  // libpq refuses it when it connects
            continue;
        }
        for (auto& id : server_identities(h, number)) servers.push_back(std::move(id));
    }
    return servers;
}

}  // namespace

pg_target make_pg_target(std::string strategy, std::string_view dsn, std::string password) {
    pg_target t;
    t.strategy = std::move(strategy);
    t.dsn = std::string(dsn);
    t.redacted = redact_url(dsn);
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
    std::string host, hostaddr, port;
    for (auto* o = options; o->keyword != nullptr; ++o) {
        if (o->val == nullptr) continue;
        const std::string_view keyword = o->keyword;
        if (keyword == "password") t.password = o->val;
        if (keyword == "dbname" && *o->val != '\0') has_database = true;
        if (keyword == "host") host = o->val;
        if (keyword == "hostaddr") hostaddr = o->val;
        if (keyword == "port") port = o->val;
    }
    t.servers = servers_of(hostaddr.empty() ? host : hostaddr, port);
    t.default_sslmode = default_sslmode_of(options);
    const std::unique_ptr<PQconninfoOption, decltype(pq().PQconninfoFree)> free_options(
        options, pq().PQconninfoFree);
    refuse_environment_defaults(t, options);
    if (!password.empty()) {
        if (!t.password.empty())
            throw invalid_argument_error(t.strategy + ": dsn " + t.redacted +
                                         " has a password and the options give one too: keep one");
        t.password = std::move(password);
    }
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

long pg_affected_rows(const PGresult* result) {
    return result ? std::atol(pq().PQcmdTuples(const_cast<PGresult*>(result))) : 0;
}

pg_session::pg_session(const pg_target& target) : target_(target), generation_(fork_generation()) {
    load_libpq(target.strategy);
    // fallback_: an application_name in the DSN wins. libpq applies the keywords in order, the
    // DSN's own settings where dbname stands: sslmode before it is a default the DSN overrides
    // (an empty value is skipped).
    // The password after the DSN: one from a file or the environment (password_from) is not in it.
    const char* keywords[] = {"sslmode",         "dbname", "password", "fallback_application_name",
                              "client_encoding", nullptr};
    const char* values[] = {target.default_sslmode.c_str(),
                            target.dsn.c_str(),
                            target.password.c_str(),
                            "locksmith",
                            "UTF8",
                            nullptr};
    const auto until = bounded_by_refresh_deadline(clock::now() + target.connect_timeout);
    conn_ = pq().PQconnectStartParams(keywords, values, 1);
    if (conn_ == nullptr) fail("connecting", "connect", "out of memory", error_kind::transient);
    // The server's notices (an unlock of a lock not held warns) must not reach stderr. An error
    // that reaches an idle session comes this way too: a FATAL one is the server's goodbye
    // (pg_terminate_backend, a shutdown), sent before it closes the connection.
    pq().PQsetNoticeReceiver(
        conn_,
        [](void* self, const PGresult* notice) {
            const char* severity = pq().PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
            if (severity != nullptr &&
                (std::string_view(severity) == "FATAL" || std::string_view(severity) == "PANIC"))
                static_cast<pg_session*>(self)->goodbye_ = true;
        },
        this);
    // Verbose, the message of a server that refuses the connection carries the SQLSTATE, which
    // tells a wrong setting (unknown role or database) from a busy server (take_sqlstate).
    pq().PQsetErrorVerbosity(conn_, PQERRORS_VERBOSE);
    // libpq says to start as if PQconnectPoll had asked to write.
    PostgresPollingStatusType state = PGRES_POLLING_WRITING;
    while (pq().PQstatus(conn_) != CONNECTION_BAD && state != PGRES_POLLING_OK &&
           state != PGRES_POLLING_FAILED) {
        if (!wait_socket(state == PGRES_POLLING_WRITING, until)) {
            close();
            fail("connecting", "timeout",
                 "no answer within the connect timeout of " +
                     std::to_string(target.connect_timeout.count()) + " ms",
                 error_kind::transient);
        }
        state = pq().PQconnectPoll(conn_);
    }
    if (pq().PQstatus(conn_) != CONNECTION_OK) {
        std::string why = pq().PQerrorMessage(conn_);
        const auto code = take_sqlstate(why);
        // libpq's "no password supplied" is its own: the server asked for one.
        const bool needs_password = pq().PQconnectionNeedsPassword(conn_);
        why = one_line(why);
        close();
        if (!code.empty())
            fail("connecting", "SQLSTATE " + code, why + " (SQLSTATE " + code + ")",
                 sqlstate_kind(code));
        if (tls_setup_failed(why))
            fail("connecting", "tls",
                 why +
                     " (TLS as the DSN asks cannot be set up: check sslmode, sslrootcert, the "
                     "host name and the server's certificate)",
                 error_kind::permanent);
        fail("connecting", "connect", why,
             needs_password ? error_kind::permanent : error_kind::transient);
    }
    pq().PQsetErrorVerbosity(conn_, PQERRORS_DEFAULT);
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
    return broken_ || goodbye_ || conn_ == nullptr || pq().PQstatus(conn_) != CONNECTION_OK;
}

bool pg_session::hung_up() const noexcept {
    if (broken()) return true;
    // What an idle session receives is the server's goodbye (an error, then the end of the
    // stream) or a message it may send at any time (a parameter's new value): libpq takes each
    // in, and only the end of the stream, or a read that fails, means the session is over.
    // Bounded: a server that keeps talking does not hold the caller here.
    pollfd p{pq().PQsocket(conn_), POLLIN | POLLRDHUP, 0};
    if (p.fd < 0) return true;
    for (int reads = 0; reads < 8; ++reads) {
        const int n = ::poll(&p, 1, 0);
        if (n == 0) return false;
        if (n < 0) return errno != EINTR && errno != ENOMEM;
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
        // PQisBusy parses what came: a goodbye reaches the notice receiver (goodbye_).
        if (!pq().PQconsumeInput(conn_) || (pq().PQisBusy(conn_), broken())) return true;
    }
    return false;
}

int pg_session::socket() const noexcept {
    return broken() ? -1 : pq().PQsocket(conn_);
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

std::string pg_session::connection_message() const {
    return one_line(pq().PQerrorMessage(conn_));
}

pg_result pg_session::query(const std::string& sql, std::string_view what) {
    return query(sql, bounded_by_refresh_deadline(clock::now() + target_.command_timeout), what);
}

pg_result pg_session::query(const std::string& sql, clock::time_point until,
                            std::string_view what) {
    if (broken()) fail(what, "connection", "the session has ended", error_kind::transient);
    if (!pq().PQsendQuery(conn_, sql.c_str())) {
        const auto why = connection_message();
        close();
        fail(what, "connection", why, error_kind::transient);
    }
    return finish(what, until);
}

void pg_session::prepare(const char* name, const std::string& sql, int params,
                         clock::time_point until, std::string_view what) {
    if (broken()) fail(what, "connection", "the session has ended", error_kind::transient);
    if (!pq().PQsendPrepare(conn_, name, sql.c_str(), params, nullptr)) {
        const auto why = connection_message();
        close();
        fail(what, "connection", why, error_kind::transient);
    }
    finish(what, until);
}

pg_result pg_session::run_prepared(const char* name, std::initializer_list<const char*> params,
                                   clock::time_point until, std::string_view what) {
    if (broken()) fail(what, "connection", "the session has ended", error_kind::transient);
    if (!pq().PQsendQueryPrepared(conn_, name, int(params.size()), params.begin(), nullptr, nullptr,
                                  0)) {
        const auto why = connection_message();
        close();
        fail(what, "connection", why, error_kind::transient);
    }
    return finish(what, until);
}

pg_result pg_session::finish(std::string_view what, clock::time_point until) {
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
                    const auto detail = scrubbed(
                        one_line(primary ? primary : pq().PQresultErrorMessage(error.get())),
                        target_.password, target_.dsn);
                    if (code.empty()) fail(what, "connection", detail, error_kind::transient);
                    throw statement_error(target_.strategy, code, detail,
                                          target_.strategy + ": " + std::string(what) + " on " +
                                              target_.redacted + " failed: " + detail +
                                              " (SQLSTATE " + code + ")");
                }
                if (!last) {
                    const auto why = connection_message();
                    close();
                    fail(what, "connection", why, error_kind::transient);
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
            fail(what, "timeout",
                 "no reply within the command timeout of " +
                     std::to_string(target_.command_timeout.count()) + " ms",
                 error_kind::transient);
        }
        if (!pq().PQconsumeInput(conn_)) {
            const auto why = connection_message();
            close();
            fail(what, "connection", why, error_kind::transient);
        }
    }
}

void pg_session::fail(std::string_view what, const std::string& native_code,
                      const std::string& reason, error_kind kind) const {
    throw backend_error(target_.strategy, native_code,
                        target_.strategy + ": " + std::string(what) + " on " + target_.redacted +
                            " failed: " + scrubbed(reason, target_.password, target_.dsn),
                        kind);
}

}  // namespace locksmith::pg
