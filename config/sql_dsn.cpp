// SPDX-License-Identifier: MIT
// Parsing of the sql strategy's DSN (parse_sql_dsn, include/locksmith/strategies/sql.hpp). It is
// part of liblocksmith, not of a strategy module, because two modules read mysql:// DSNs: the sql
// strategy and mysql_get_lock (both through strategies/common/mariadb).
// Messages never contain the password: the DSN is only ever shown through redact_url.
#include <cctype>
#include <charconv>
#include <initializer_list>
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

bool starts(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

// `text` with every byte but RFC 3986's unreserved ones %-escaped: a user, password or value
// going into a URL.
std::string percent_encode(std::string_view text) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                                c == '~';
        if (unreserved) {
            out += char(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

// A PDO DSN's pairs ("host=db;port=5432;dbname=app", blanks around them ignored) as the URL of
// `scheme`: host, port, dbname, user and password in their places, `extra` keys as query
// parameters, `ignored` keys dropped. Messages name keys, never values.
std::string pdo_to_url(std::string_view pairs, std::string_view scheme,
                       std::initializer_list<std::string_view> extra,
                       std::initializer_list<std::string_view> ignored) {
    std::string host, port, dbname, user, password, query;
    auto trim = [](std::string_view v) {
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        return v;
    };
    while (!pairs.empty()) {
        const auto end = pairs.find(';');
        const auto pair = trim(pairs.substr(0, end));
        pairs = end == std::string_view::npos ? std::string_view() : pairs.substr(end + 1);
        if (pair.empty()) continue;
        const auto eq = pair.find('=');
        if (eq == std::string_view::npos)
            throw invalid_argument_error("a " + std::string(scheme) +
                                         " PDO DSN is key=value pairs split by ';' (a part has "
                                         "no '=')");
        const auto key = trim(pair.substr(0, eq));
        const auto value = trim(pair.substr(eq + 1));
        std::string* into = nullptr;
        if (key == "host") into = &host;
        if (key == "port") into = &port;
        if (key == "dbname") into = &dbname;
        if (key == "user") into = &user;
        if (key == "password") into = &password;
        if (into) {
            if (!into->empty())
                throw invalid_argument_error("a PDO DSN names " + std::string(key) + " twice");
            *into = std::string(value);
            continue;
        }
        bool known = false;
        for (auto k : ignored) known = known || k == key;
        if (known) continue;
        for (auto k : extra) known = known || k == key;
        std::string plain_key(key);
        for (char c : plain_key)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') plain_key = "?";
        if (!known)
            throw invalid_argument_error(
                "the PDO DSN key '" + plain_key + "' is not supported (" + std::string(scheme) +
                ": host, port, dbname, user, password" +
                (extra.size() ? std::string(", ") + std::string(*extra.begin()) + "..." : "") +
                ")");
        query += (query.empty() ? "?" : "&") + std::string(key) + "=" + percent_encode(value);
    }
    // Each value goes into its own part of the URL: none may carry that URL's punctuation.
    if (host.find_first_of("/@?#[]%") != std::string::npos)
        throw invalid_argument_error("the PDO DSN's host must be a host name or address");
    if (!port.empty() &&
        (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos))
        throw invalid_argument_error("the PDO DSN's port is not a number in [1, 65535]");
    std::string url = std::string(scheme) + "://";
    if (!user.empty() || !password.empty()) {
        url += percent_encode(user);
        if (!password.empty()) url += ":" + percent_encode(password);
        url += "@";
    }
    url += host.find(':') != std::string::npos ? "[" + host + "]" : host;
    if (!port.empty()) url += ":" + port;
    if (!dbname.empty()) url += "/" + percent_encode(dbname);
    return url + query;
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

std::string normalize_sql_dsn(std::string_view dsn) {
    // Doctrine DBAL's schemes (Symfony's DoctrineDbalStore): pgsql://, mysql2://, sqlite3://.
    if (starts(dsn, "pgsql://")) return "postgresql://" + std::string(dsn.substr(8));
    if (starts(dsn, "mysql2://")) return "mysql://" + std::string(dsn.substr(9));
    if (starts(dsn, "sqlite3://"))
        return normalize_sql_dsn("sqlite://" + std::string(dsn.substr(10)));
    if (starts(dsn, "sqlite://localhost/")) {
        // Doctrine's sqlite://localhost//abs/path; its sqlite://localhost/file is relative.
        const auto path = dsn.substr(19);
        if (!starts(path, "/"))
            throw invalid_argument_error(
                "sqlite://localhost/FILE is a path relative to the working directory; write "
                "sqlite://localhost//abs/path or sqlite:///abs/path");
        return "sqlite://" + std::string(path);
    }
    if (starts(dsn, "sqlite:////")) return "sqlite://" + std::string(dsn.substr(10));
    // PDO's spellings (Symfony's PdoStore): sqlite:/path, pgsql:host=...;dbname=..., mysql:...
    if (starts(dsn, "sqlite::memory:"))
        throw invalid_argument_error(
            "sqlite::memory: is a database private to one connection: it cannot hold a lock "
            "between processes (use a file, sqlite:///path, or the memory strategy)");
    if (starts(dsn, "sqlite:") && !starts(dsn, "sqlite://")) {
        if (!starts(dsn, "sqlite:/"))
            throw invalid_argument_error(
                "a SQLite PDO DSN needs an absolute file path: sqlite:/path/to/locks.db");
        return "sqlite://" + std::string(dsn.substr(7));
    }
    if (starts(dsn, "pgsql+advisory:") || starts(dsn, "postgres+advisory:") ||
        starts(dsn, "postgresql+advisory:"))
        throw invalid_argument_error(
            "'+advisory' asks for PostgreSQL advisory locks: that is the pg_advisory strategy, "
            "not sql (a config's \"store\" maps it there)");
    if (starts(dsn, "pgsql:") && !starts(dsn, "pgsql://"))
        return pdo_to_url(dsn.substr(6), "postgresql",
                          {"sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                           "application_name", "options", "target_session_attrs"},
                          {});
    if (starts(dsn, "mysql:") && !starts(dsn, "mysql://")) {
        if (dsn.find("unix_socket=") != std::string_view::npos)
            throw invalid_argument_error(
                "unix_socket is not supported in a mysql: DSN: leave host out (or say "
                "localhost) for the server's default socket");
        return pdo_to_url(dsn.substr(6), "mysql", {}, {"charset"});
    }
    for (std::string_view other : {"sqlsrv:", "mssql:", "oci:", "oci8:", "pdo_oci:", "db2:",
                                   "ibm_db2:", "pdo_sqlsrv:", "odbc:"})
        if (starts(dsn, other))
            throw invalid_argument_error(
                "SQL Server, Oracle, DB2 and ODBC are not supported: the sql strategy speaks "
                "PostgreSQL, MariaDB/MySQL and SQLite");
    return std::string(dsn);
}

sql_dsn parse_sql_dsn(std::string_view dsn) {
    std::string canonical;
    try {
        canonical = normalize_sql_dsn(dsn);
    } catch (const invalid_argument_error& e) {
        throw invalid_argument_error("sql dsn " + redact_url(dsn) + ": " + e.what());
    }
    try {
        return parse(canonical);
    } catch (const invalid_argument_error& e) {
        throw invalid_argument_error("sql dsn " + redact_url(canonical) + ": " + e.what());
    }
}

std::vector<std::string> sql_dsn::servers() const {
    if (driver == kind::sqlite) return {"file:" + path};
    return server_identities(host, port != 0 ? port : driver == kind::mysql ? 3306 : 5432);
}

}  // namespace locksmith::strategies
