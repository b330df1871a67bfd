// SPDX-License-Identifier: MIT
#include <locksmith/options.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>

#include <locksmith/errors.hpp>

namespace locksmith {

std::string json_pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

namespace {

constexpr auto npos = std::string_view::npos;

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_alnum(char c) {
    return is_alpha(c) || (c >= '0' && c <= '9');
}

// The length of "scheme://" at the start of `text` (RFC 3986: a letter, then letters, digits,
// '+', '-', '.'), or 0.
std::size_t scheme_length(std::string_view text) {
    if (text.empty() || !is_alpha(text[0])) return 0;
    std::size_t i = 1;
    while (i < text.size() &&
           (is_alnum(text[i]) || text[i] == '+' || text[i] == '-' || text[i] == '.'))
        ++i;
    return text.substr(i, 3) == "://" ? i + 3 : 0;
}

// The keyword at the start of `text`, when what follows it (after blanks) is '=': libpq's
// keyword/value form ("host=db user=app password=x"), which other clients copy.
std::string_view leading_keyword(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && (is_alnum(text[i]) || text[i] == '_')) ++i;
    if (i == 0) return {};
    std::size_t j = i;
    while (j < text.size() && is_space(text[j])) ++j;
    return j < text.size() && text[j] == '=' ? text.substr(0, i) : std::string_view();
}

// A keyword/value DSN with every value hidden but those of the keywords that say where to
// connect, and those only when they are plain (no quote, escape, '=', '@' or ';' that could
// carry another setting). What cannot be read as keyword/value (an unterminated quote, a word
// without '=') is hidden from there on.
std::string redact_keyword_value(std::string_view text) {
    std::string out;
    auto hide_rest = [&] { out += out.empty() ? "***" : " ***"; };
    while (true) {
        while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
        if (text.empty()) return out;
        const auto keyword = leading_keyword(text);
        if (keyword.empty()) {
            hide_rest();
            return out;
        }
        text.remove_prefix(text.find('=') + 1);
        while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
        // The value: quoted ('a b', with \' and \\) or up to the next blank (with \ escapes).
        std::size_t end = 0;
        if (!text.empty() && text.front() == '\'') {
            end = 1;
            while (end < text.size() && text[end] != '\'') end += text[end] == '\\' ? 2 : 1;
            if (end >= text.size()) {
                out += (out.empty() ? "" : " ") + std::string(keyword) + "=***";
                return out;
            }
            ++end;
        } else {
            while (end < text.size() && !is_space(text[end])) end += text[end] == '\\' ? 2 : 1;
            end = std::min(end, text.size());
        }
        const auto value = text.substr(0, end);
        text.remove_prefix(end);
        const bool where = keyword == "host" || keyword == "hostaddr" || keyword == "port" ||
                           keyword == "dbname" || keyword == "user";
        bool plain = !value.empty();
        for (char c : value)
            plain = plain && (is_alnum(c) || std::string_view("._-,:/[]").find(c) != npos);
        out += (out.empty() ? "" : " ") + std::string(keyword) + "=" +
               (where && plain ? std::string(value) : "***");
    }
}

// The length of "scheme:" at the start of a PDO DSN ("pgsql:host=db;dbname=app;password=x", as
// Symfony and PHP spell them: a scheme without "//", then keyword=value pairs split by ';'), or 0.
std::size_t pdo_prefix_length(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && (is_alnum(text[i]) || text[i] == '+' || text[i] == '_')) ++i;
    if (i == 0 || i >= text.size() || text[i] != ':') return 0;
    // Only PDO's drivers (and Doctrine's names for them): "user:pa=ss@host" (memcached) is not
    // one.
    const auto driver = text.substr(0, i);
    static constexpr std::string_view drivers[] = {"pgsql",
                                                   "mysql",
                                                   "sqlite",
                                                   "sqlsrv",
                                                   "oci",
                                                   "pgsql+advisory",
                                                   "postgres+advisory",
                                                   "postgresql+advisory",
                                                   "dblib",
                                                   "odbc",
                                                   "ibm",
                                                   "informix",
                                                   "firebird",
                                                   "db2",
                                                   "ibm_db2",
                                                   "mssql",
                                                   "oci8",
                                                   "pdo_oci",
                                                   "pdo_sqlsrv",
                                                   "pdo_mysql",
                                                   "pdo_pgsql"};
    bool pdo = false;
    for (const auto known : drivers) pdo = pdo || driver == known;
    if (!pdo) return 0;
    // A URL, or SQLite's path form (sqlite:/path, sqlite::memory:), is not keyword=value; any
    // other text after a PDO driver's name is read as pairs, so that nothing in it shows but
    // plain host, port, dbname and user values, whatever bytes it holds.
    const auto rest = text.substr(i + 1);
    if (rest.substr(0, 2) == "//" || (driver == "sqlite" && leading_keyword(rest).empty()))
        return 0;
    return i + 1;
}

// A PDO DSN's pairs with every value hidden but the plain ones of host, port, dbname and user;
// a part without '=' is hidden whole. The ';' separators are kept: redacting again changes
// nothing.
std::string redact_pdo(std::string_view text) {
    // '@' has no place in a PDO DSN outside a value: it may be a URL's userinfo misread.
    if (text.find('@') != npos) return "***";
    std::string out;
    for (bool first = true;; first = false) {
        const auto end = text.find(';');
        const auto part = text.substr(0, end);
        if (!first) out += ';';
        const auto eq = part.find('=');
        if (eq == npos) {
            if (!part.empty()) out += "***";
        } else {
            const auto keyword = part.substr(0, eq);
            const auto value = part.substr(eq + 1);
            const bool where =
                keyword == "host" || keyword == "port" || keyword == "dbname" || keyword == "user";
            bool plain = !value.empty();
            for (char c : value)
                plain = plain && (is_alnum(c) || std::string_view("._-,[]").find(c) != npos);
            bool plain_keyword = !keyword.empty();
            for (char c : keyword) plain_keyword = plain_keyword && (is_alnum(c) || c == '_');
            out += plain_keyword
                       ? std::string(keyword) + "=" + (where && plain ? std::string(value) : "***")
                       : "***";
        }
        if (end == npos) return out;
        text.remove_prefix(end + 1);
    }
}

}  // namespace

bool is_plain_user_name(std::string_view user) noexcept {
    for (const char c : user)
        if (!is_alnum(c) && c != '-' && c != '.' && c != '_') return false;
    return true;
}

std::string redact_url(std::string_view url) {
    if (const auto pdo = pdo_prefix_length(url); pdo != 0)
        return std::string(url.substr(0, pdo)) + redact_pdo(url.substr(pdo));
    const auto start = scheme_length(url);
    if (start == 0 &&
        !leading_keyword(url.substr(std::min(url.size(), url.find_first_not_of(" \t\n\r\f\v"))))
             .empty())
        return redact_keyword_value(url);
    // A URL has no blanks. One with a blank may be a URL whose password has one
    // ("postgresql://u:p w@host": the userinfo ends after it) or be followed by a
    // "password=...": nothing after the scheme is shown (found by tests/fuzz/fuzz_pg_dsn).
    for (char c : url)
        if (is_space(c)) return std::string(url.substr(0, start)) + "***";
    std::string out(url.substr(0, start));
    auto rest = url.substr(start);
    if (auto at = rest.rfind('@'); at != npos) {
        // Only a plain user name survives. A userinfo without ':' is a password for redis
        // (redis://secret@host), but a user name in the URLs of PostgreSQL and MySQL.
        const auto userinfo = rest.substr(0, at);
        const auto colon = userinfo.find(':');
        const auto user = userinfo.substr(0, colon == npos ? 0 : colon);
        const auto scheme = url.substr(0, start);
        const bool user_only = colon == npos && !userinfo.empty() &&
                               (scheme == "postgresql://" || scheme == "postgres://" ||
                                scheme == "mysql://" || scheme == "mariadb://");
        if (user_only && is_plain_user_name(userinfo)) out += std::string(userinfo) + "@";
        // Not a user that reads as a PDO driver's name ("pdo_sqlsrv:***@" would be redacted
        // again as a PDO DSN, differently: found by tests/fuzz/fuzz_redact_url).
        else if (colon != npos && is_plain_user_name(user) &&
                 pdo_prefix_length(std::string(user) + ":") == 0)
            out += std::string(user) + ":***@";
        else
            out += "***@";
        rest = rest.substr(at + 1);
    }
    const auto query = rest.find_first_of("?#");
    out += rest.substr(0, query);
    if (query == npos) return out;
    auto fragment = rest.find('#', query);
    if (rest[query] == '?') {
        out += '?';
        auto params = rest.substr(query + 1, fragment == npos ? npos : fragment - query - 1);
        // Every separator is kept, empty parameters too: redacting again changes nothing.
        for (bool first = true;; first = false) {
            const auto end = params.find_first_of("&;");
            const auto param = params.substr(0, end);
            if (!first) out += '&';
            const auto equals = param.find('=');
            const auto name = param.substr(0, equals);
            const bool plain_name =
                !name.empty() && name.find_first_not_of(
                                     "abcdefghijklmnopqrstuvwxyz"
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == npos;
            const auto value = equals == npos ? std::string_view() : param.substr(equals + 1);
            if (name == "db" && !value.empty() && value.find_first_not_of("0123456789") == npos)
                out += param;
            else if (plain_name && equals != npos)
                out += std::string(name) + "=***";
            else if (!param.empty())
                out += "***";
            if (end == npos) break;
            params = params.substr(end + 1);
        }
    }
    if (fragment != npos) out += "#***";
    return out;
}

namespace {

std::string type_name(const nlohmann::json& v) {
    return v.type_name();
}

[[noreturn]] void wrong_type(const std::string& name, const char* wanted, const nlohmann::json& v) {
    throw config_error("config.type", "/" + json_pointer_token(name),
                       "option '" + name + "' must be " + wanted + ", not " + type_name(v));
}

}  // namespace

options_reader::options_reader(const nlohmann::json& options) : options_(options) {
    if (!options.is_null() && !options.is_object())
        throw config_error("config.type", "",
                           "options must be an object, not " + type_name(options));
}

const nlohmann::json* options_reader::get(const std::string& name) {
    known_.insert(name);
    if (!options_.is_object()) return nullptr;
    auto it = options_.find(name);
    return it == options_.end() ? nullptr : &*it;
}

std::optional<std::string> options_reader::string(const std::string& name) {
    auto* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(name, "a string", *v);
    return v->get<std::string>();
}

std::optional<bool> options_reader::boolean(const std::string& name) {
    auto* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(name, "true or false", *v);
    return v->get<bool>();
}

std::optional<std::vector<std::string>> options_reader::strings(const std::string& name) {
    auto* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_array() || v->empty()) wrong_type(name, "a non-empty array of strings", *v);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v->size(); ++i) {
        const auto& item = (*v)[i];
        if (!item.is_string())
            throw config_error(
                "config.type", "/" + json_pointer_token(name) + "/" + std::to_string(i),
                "option '" + name + "' must hold strings only, not " + type_name(item));
        out.push_back(item.get<std::string>());
    }
    return out;
}

std::string number_text(double d) {
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e15)
        return std::to_string(std::int64_t(d));
    char out[32];
    const auto end = std::to_chars(out, out + sizeof out, d).ptr;
    return std::string(out, end);
}

std::optional<std::int64_t> options_reader::integer(const std::string& name, std::int64_t min,
                                                    std::int64_t max) {
    auto* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(name, "an integer", *v);
    // An unsigned value above INT64_MAX would read as negative: compare it as what it is, and
    // quote it as written.
    const bool too_large = v->is_number_unsigned() && v->get<std::uint64_t>() > std::uint64_t(max);
    const auto value = v->get<std::int64_t>();
    if (too_large || value < min || value > max)
        throw config_error("config.range", "/" + json_pointer_token(name),
                           "option '" + name + "' is " + v->dump() + "; it must be in [" +
                               std::to_string(min) + ", " + std::to_string(max) + "]");
    return value;
}

std::optional<std::chrono::milliseconds> options_reader::seconds(const std::string& name,
                                                                 double min_s, double max_s) {
    auto* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number of seconds", *v);
    double value = v->get<double>();
    if (!std::isfinite(value) || value < min_s || value > max_s) {
        throw config_error("config.range", "/" + json_pointer_token(name),
                           "option '" + name + "' is " + number_text(value) +
                               " s; it must be in [" + number_text(min_s) + ", " +
                               number_text(max_s) + "] s");
    }
    return std::chrono::milliseconds(std::llround(value * 1000.0));
}

std::optional<std::string> options_reader::secret(const std::string& name, secret_source& from) {
    auto inline_value = string(name);
    const auto file_option = name + "_file", env_option = name + "_env";
    if (auto file = string(file_option)) {
        if (file->empty() || file->front() != '/')
            throw config_error(
                "config.value", "/" + json_pointer_token(file_option),
                "option '" + file_option + "' must be an absolute path, got '" + *file + "'");
        from.file = *file;
    }
    if (auto env = string(env_option)) {
        const bool valid = !env->empty() &&
                           !std::isdigit(static_cast<unsigned char>(env->front())) &&
                           std::all_of(env->begin(), env->end(), [](char c) {
                               return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                           });
        if (!valid)
            throw config_error("config.value", "/" + json_pointer_token(env_option),
                               "option '" + env_option +
                                   "' must be an environment variable's name (letters, digits, "
                                   "'_'), got '" +
                                   *env + "'");
        from.env = *env;
    }
    if (int(inline_value.has_value()) + int(!from.file.empty()) + int(!from.env.empty()) > 1)
        throw config_error("config.value", "/" + json_pointer_token(name),
                           "give one of options '" + name + "', '" + file_option + "' and '" +
                               env_option + "', not several");
    return inline_value;
}

void options_reader::finish() const {
    if (!options_.is_object()) return;
    for (auto it = options_.begin(); it != options_.end(); ++it) {
        if (!known_.count(it.key())) {
            std::string known;
            for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
            throw config_error("config.unknown_key", "/" + json_pointer_token(it.key()),
                               "unknown option '" + it.key() + "'" +
                                   (known.empty() ? " (this strategy takes no options)"
                                                  : " (known: " + known + ")"));
        }
    }
}

}  // namespace locksmith
