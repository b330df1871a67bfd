// SPDX-License-Identifier: MIT
// Parsing of the sql strategy's DSN (parse_sql_dsn, include/locksmith/strategies/sql.hpp). It is
// part of liblocksmith, not of a strategy module, because two modules read mysql:// DSNs: the sql
// strategy and mysql_get_lock (both through strategies/common/mariadb).
// Messages never contain the password: the DSN is only ever shown through redact_url.
#include <charconv>
#include <string>
#include <string_view>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/sql.hpp>

namespace locksmith::strategies {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// `what` names the part for the message; the part itself is not shown (it may be the password).
std::string percent_decode(std::string_view text, const char* what) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out += text[i];
            continue;
        }
        const bool complete = i + 2 < text.size();
        const int hi = complete ? hex_value(text[i + 1]) : -1;
        const int lo = complete ? hex_value(text[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            throw invalid_argument_error(std::string("malformed %-escape in the ") + what);
        out += char(hi * 16 + lo);
        i += 2;
    }
    return out;
}

// A mysql:// DSN's query: TLS parameters with libpq's names (see sql_dsn::tls), each at most
// once. Values are percent-decoded and never echoed (a path may be private).
void read_mysql_parameters(std::string_view tail, sql_dsn& d) {
    if (tail.empty()) return;
    if (tail.front() != '?' || tail.find('#') != std::string_view::npos)
        throw invalid_argument_error("fragments are not supported in a mysql:// DSN");
    std::string_view query = tail.substr(1);
    std::string mode;
    bool seen[4] = {};
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        const auto eq = pair.find('=');
        const auto key = pair.substr(0, eq);
        // Only a known name is echoed: text without '=' may be a misplaced password.
        const bool known =
            key == "sslmode" || key == "sslrootcert" || key == "sslcert" || key == "sslkey";
        if (!known)
            throw invalid_argument_error(
                "a mysql:// DSN takes only the query parameters sslmode, sslrootcert, sslcert "
                "and sslkey");
        if (eq == std::string_view::npos || eq + 1 == pair.size())
            throw invalid_argument_error("a mysql:// DSN's query parameter " + std::string(key) +
                                         " has no value");
        const auto value = percent_decode(pair.substr(eq + 1), "query");
        if (value.find('\0') != std::string::npos)
            throw invalid_argument_error("a mysql:// DSN's query parameter contains a NUL byte");
        int index = 0;
        std::string* into = &mode;
        if (key == "sslrootcert") index = 1, into = &d.tls_ca;
        if (key == "sslcert") index = 2, into = &d.tls_cert;
        if (key == "sslkey") index = 3, into = &d.tls_key;
        if (seen[index])
            throw invalid_argument_error("a mysql:// DSN names " + std::string(key) + " twice");
        seen[index] = true;
        *into = value;
    }
    if (d.tls_cert.empty() != d.tls_key.empty())
        throw invalid_argument_error(
            "sslcert and sslkey go together (a client certificate and "
            "its key)");
    const bool names_certificate = !d.tls_ca.empty() || !d.tls_cert.empty();
    if (mode.empty())
        d.tls = names_certificate ? sql_dsn::tls_mode::verify_full : sql_dsn::tls_mode::disable;
    else if (mode == "verify-full")
        d.tls = sql_dsn::tls_mode::verify_full;
    else if (mode == "require")
        d.tls = sql_dsn::tls_mode::require;
    else if (mode == "disable" && !names_certificate)
        d.tls = sql_dsn::tls_mode::disable;
    else if (mode == "disable")
        throw invalid_argument_error("sslmode=disable with a certificate parameter: say which");
    else
        throw invalid_argument_error(
            "sslmode must be disable, require or verify-full in a mysql:// DSN (MariaDB's "
            "client checks the CA and the host name together)");
}

sql_dsn parse(std::string_view text) {
    sql_dsn d;
    d.text = std::string(text);
    constexpr std::string_view sqlite = "sqlite://";
    if (text.rfind(sqlite, 0) == 0) {
        d.driver = sql_dsn::kind::sqlite;
        d.path = std::string(text.substr(sqlite.size()));
        if (d.path.empty() || d.path.front() != '/')
            throw invalid_argument_error(
                "a SQLite DSN needs an absolute file path: sqlite:///path/to/locks.db");
        if (d.path.find_first_of("?#") != std::string::npos || d.path.back() == '/')
            throw invalid_argument_error(
                "a SQLite DSN is sqlite:///path/to/locks.db, without query or trailing '/'");
        if (d.path.find('\0') != std::string::npos)
            throw invalid_argument_error("the SQLite file path contains a NUL byte");
        return d;
    }
    std::string_view rest;
    if (text.rfind("postgresql://", 0) == 0 || text.rfind("postgres://", 0) == 0) {
        d.driver = sql_dsn::kind::postgresql;
        rest = text.substr(text.find("://") + 3);
    } else if (text.rfind("mysql://", 0) == 0 || text.rfind("mariadb://", 0) == 0) {
        d.driver = sql_dsn::kind::mysql;
        rest = text.substr(text.find("://") + 3);
    } else {
        throw invalid_argument_error(
            "must start with sqlite:///, postgresql:// or mysql:// (e.g. "
            "postgresql://user:password@host:5432/database)");
    }
    // The authority ends at the first '/', '?' or '#'; the userinfo at the last '@' before it.
    auto end = rest.find_first_of("/?#");
    if (end != std::string_view::npos && rest.find('@', end) != std::string_view::npos)
        throw invalid_argument_error(
            "'@' after the host: percent-encode '/', '?', '#' in a user or password (%2F, %3F, "
            "%23)");
    auto authority = rest.substr(0, end);
    auto tail = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
        auto userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        d.user = percent_decode(userinfo.substr(0, colon), "user");
        if (colon != std::string_view::npos)
            d.password = percent_decode(userinfo.substr(colon + 1), "password");
    }
    std::string_view host = authority, port;
    if (!authority.empty() && authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos)
            throw invalid_argument_error("unterminated [ in the host");
        host = authority.substr(1, close - 1);
        auto after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') throw invalid_argument_error("unexpected text after ]");
            port = after.substr(1);
        }
    } else if (auto colon = authority.rfind(':'); colon != std::string_view::npos) {
        host = authority.substr(0, colon);
        port = authority.substr(colon + 1);
        // mysql://u:p@::1/db would be host ":" on port 1.
        if (host.find(':') != std::string_view::npos)
            throw invalid_argument_error(
                "an IPv6 address goes in brackets: mysql://u:p@[::1]:3306/db");
    }
    // No host has them; [[::1] would be host "[::1".
    if (host.find_first_of("[]") != std::string_view::npos)
        throw invalid_argument_error("'[' or ']' inside the host");
    d.host = std::string(host);
    if (!port.empty() || authority.find(':') != std::string_view::npos) {
        auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), d.port);
        if (port.empty() || ec != std::errc() || p != port.data() + port.size() || d.port < 1 ||
            d.port > 65535)
            throw invalid_argument_error("the port is not a number in [1, 65535]");
    }
    if (!tail.empty() && tail.front() == '/') {
        auto q = tail.find_first_of("?#");
        d.database =
            percent_decode(tail.substr(1, q == std::string_view::npos ? q : q - 1), "database");
        tail = q == std::string_view::npos ? std::string_view() : tail.substr(q);
    }
    // PostgreSQL's query parameters (sslmode, ...) go to libpq with the DSN; MariaDB takes TLS's.
    if (d.driver == sql_dsn::kind::mysql) read_mysql_parameters(tail, d);
    if (d.driver == sql_dsn::kind::mysql && d.database.empty())
        throw invalid_argument_error(
            "a mysql:// DSN must name the database: mysql://user:password@host:3306/database");
    return d;
}

}  // namespace

std::string sql_dsn::redacted() const {
    return redact_url(text);
}

sql_dsn parse_sql_dsn(std::string_view dsn) {
    try {
        return parse(dsn);
    } catch (const invalid_argument_error& e) {
        throw invalid_argument_error("sql dsn " + redact_url(dsn) + ": " + e.what());
    }
}

std::vector<std::string> sql_dsn::servers() const {
    if (driver == kind::sqlite) return {"file:" + path};
    return server_identities(host, port != 0 ? port : driver == kind::mysql ? 3306 : 5432);
}

}  // namespace locksmith::strategies
