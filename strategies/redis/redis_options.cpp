// SPDX-License-Identifier: MIT
// Parsing of the redis strategy's URL and JSON options. Messages never contain the password:
// the URL is only ever shown in its redacted form.
#include <charconv>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/redis.hpp>

#include "tls_stream.hpp"

namespace locksmith::strategies {
namespace {

// Parse errors name what is wrong without quoting the URL; parse_redis_url adds the URL,
// redacted.
[[noreturn]] void bad_url(const std::string& why) {
    throw invalid_argument_error(why);
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// `what` names the part for the message; the part itself is not shown (it may be the password).
std::string percent_decode(std::string_view text, const char* what) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out += text[i];
            continue;
        }
        const bool complete = i + 2 < text.size();
        int hi = complete ? hex_value(text[i + 1]) : -1;
        int lo = complete ? hex_value(text[i + 2]) : -1;
        if (hi < 0 || lo < 0) bad_url(std::string("malformed %-escape in the ") + what);
        out += char(hi * 16 + lo);
        i += 2;
    }
    return out;
}

int parse_number(std::string_view text, int min, int max, const char* what) {
    int value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
        value > max)
        bad_url(std::string("the ") + what + " is not a number in [" + std::to_string(min) + ", " +
                std::to_string(max) + "]");
    return value;
}

}  // namespace

std::string redis_endpoint::redacted() const {
    std::string out;
    if (!socket_path.empty()) {
        out = "unix://" + socket_path;
        if (db != 0) out += "?db=" + std::to_string(db);
        return out;
    }
    out = tls ? "rediss://" : "redis://";
    if (!user.empty() || !password.empty()) {
        // Only a plain user name shows: one read from %-escapes may hold '?', '@' or control
        // characters (found by tests/fuzz/fuzz_redis_url).
        out += is_plain_user_name(user) ? user : "***";
        if (!password.empty()) out += ":***";
        out += "@";
    }
    out += host.find(':') != std::string::npos ? "[" + host + "]" : host;
    out += ":" + std::to_string(port) + "/" + std::to_string(db);
    return out;
}

namespace {

redis_endpoint parse_url(std::string_view url) {
    redis_endpoint e;
    constexpr std::string_view tcp = "redis://";
    constexpr std::string_view tls = "rediss://";
    constexpr std::string_view unix_scheme = "unix://";
    if (url.substr(0, unix_scheme.size()) == unix_scheme) {
        auto rest = url.substr(unix_scheme.size());
        auto query = rest.find('?');
        e.socket_path = std::string(rest.substr(0, query));
        e.host.clear();
        if (e.socket_path.empty() || e.socket_path.front() != '/')
            bad_url("a unix:// URL needs an absolute socket path (unix:///path/to.sock)");
        if (query != std::string_view::npos) {
            auto q = rest.substr(query + 1);
            if (q.substr(0, 3) != "db=") bad_url("the only query parameter of unix:// is db=N");
            e.db = parse_number(q.substr(3), 0, 1'000'000, "database");
        }
        return e;
    }
    constexpr const char* no_query =
        "query parameters and fragments are not supported (TLS settings are options of their own: "
        "ca_file, cert_file, key_file, server_name); give a password as "
        "redis://[user]:password@host[:port][/db]";
    e.tls = url.substr(0, tls.size()) == tls;
    if (!e.tls && url.substr(0, tcp.size()) != tcp)
        bad_url("must start with redis://, rediss:// (TLS) or unix://");
    auto rest = url.substr(e.tls ? tls.size() : tcp.size());
    // The authority ends at the first '/', '?' or '#' (RFC 3986); userinfo ends at the last '@'
    // before it, so that a password may contain '@'.
    auto slash = rest.find_first_of("/?#");
    if (slash != std::string_view::npos && rest.find('@', slash) != std::string_view::npos)
        bad_url(
            "'@' after the host: percent-encode '/', '?' and '#' in a user or password "
            "(%2F, %3F, %23)");
    if (slash != std::string_view::npos && rest[slash] != '/') bad_url(no_query);
    auto authority = rest.substr(0, slash);
    auto path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (path.find_first_of("?#") != std::string_view::npos) bad_url(no_query);
    auto at = authority.rfind('@');
    if (at != std::string_view::npos) {
        auto userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        if (colon == std::string_view::npos) {
            // redis://secret@host is the common spelling of a password without user.
            e.password = percent_decode(userinfo, "password");
        } else {
            e.user = percent_decode(userinfo.substr(0, colon), "user");
            e.password = percent_decode(userinfo.substr(colon + 1), "password");
        }
    }
    std::string_view host = authority;
    std::string_view port;
    if (!authority.empty() && authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos) bad_url("unterminated [ in the host");
        host = authority.substr(1, close - 1);
        auto after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') bad_url("unexpected text after the IPv6 host");
            port = after.substr(1);
            if (port.empty()) bad_url("empty port");
        }
    } else {
        auto colon = authority.rfind(':');
        if (colon != std::string_view::npos) {
            host = authority.substr(0, colon);
            port = authority.substr(colon + 1);
            if (port.empty()) bad_url("empty port");
        }
        // redis://::1 would be host ":" on port 1.
        if (host.find(':') != std::string_view::npos)
            bad_url("an IPv6 address goes in brackets: redis://[::1]:6379");
    }
    if (host.empty()) bad_url("missing host");
    // No host has them; [[::1] would be host "[::1", shown as a URL that does not parse.
    if (host.find_first_of("[]") != std::string_view::npos) bad_url("'[' or ']' inside the host");
    e.host = std::string(host);
    if (!port.empty()) e.port = parse_number(port, 1, 65535, "port");
    if (!path.empty()) e.db = parse_number(path, 0, 1'000'000, "database");
    return e;
}

}  // namespace

redis_endpoint parse_redis_url(std::string_view url) {
    try {
        return parse_url(url);
    } catch (const invalid_argument_error& e) {
        throw invalid_argument_error("redis url " + redact_url(url) + ": " + e.what());
    }
}

namespace {

// A Sentinel's or cluster node's address (`list` names the option), "host:port" or
// "[v6]:port" (no credentials: those are options of their own). Throws config_error whose
// pointer names the entry; the message does not quote it (a password pasted into it must not be
// shown).
redis_endpoint parse_host_port(const std::string& text, std::size_t i, const std::string& list) {
    const bool sentinel = list == "sentinels";
    const std::string at = "/" + list + "/" + std::to_string(i);
    const std::string entry = sentinel ? "a sentinel entry" : "a cluster entry";
    redis_endpoint e;
    try {
        e = parse_url("redis://" + text);
    } catch (const invalid_argument_error& err) {
        throw config_error("config.value", at, entry + " is not host:port: " + err.what());
    }
    if (text.find_first_of("@/") != std::string::npos || e.db != 0 || !e.password.empty())
        throw config_error("config.value", at,
                           sentinel ? "sentinel entries are host:port only; give its credentials "
                                      "as 'sentinel_user' and 'sentinel_password' or "
                                      "'sentinel_password_file'"
                                    : "cluster entries are host:port only; give the credentials "
                                      "as 'user' and 'password' or 'password_file'");
    if (text.find(']') == std::string::npos ? text.find(':') == std::string::npos
                                            : text.find("]:") == std::string::npos)
        throw config_error("config.value", at,
                           entry + (sentinel ? " needs a port (Sentinel's default is 26379)"
                                             : " needs a port (Redis' default is 6379)"));
    return e;
}

}  // namespace

redis_options redis_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    redis_options o;
    auto url = r.string("url");
    auto sentinels = r.strings("sentinels");
    auto cluster = r.strings("cluster");
    if (int(bool(url)) + int(bool(sentinels)) + int(bool(cluster)) > 1)
        throw config_error("config.value", cluster ? "/cluster" : "/sentinels",
                           "give one of option 'url' (one server), 'sentinels' (Redis behind "
                           "Sentinel) and 'cluster' (Redis Cluster), not several");
    if (!url && !sentinels && !cluster)
        throw config_error("config.missing", "/url",
                           "option 'url' (or 'sentinels' with 'master_name', or 'cluster') is "
                           "required");
    if (url) {
        try {
            o.endpoint = parse_redis_url(*url);
        } catch (const invalid_argument_error& e) {
            throw config_error("config.value", "/url", e.what());
        }
        for (const char* only :
             {"master_name", "sentinel_user", "sentinel_password", "sentinel_password_file",
              "sentinel_password_env", "user", "password", "db"})
            if (options.contains(only))
                throw config_error("config.value", std::string("/") + only,
                                   std::string("option '") + only +
                                       "' goes with 'sentinels'; with 'url', give user, password "
                                       "and database in the URL");
    } else if (cluster) {
        for (std::size_t i = 0; i < cluster->size(); ++i)
            o.cluster.push_back(parse_host_port((*cluster)[i], i, "cluster"));
        for (const char* only : {"master_name", "sentinel_user", "sentinel_password",
                                 "sentinel_password_file", "sentinel_password_env"})
            if (options.contains(only))
                throw config_error("config.value", std::string("/") + only,
                                   std::string("option '") + only + "' goes with 'sentinels'");
        if (options.contains("db"))
            throw config_error("config.value", "/db", "a Redis Cluster has database 0 only");
        o.endpoint = redis_endpoint{};
        o.endpoint.host.clear();
        if (auto v = r.string("user")) o.endpoint.user = *v;
        // TLS to every node (the nodes' tls-port, tls-cluster yes), with the TLS options below.
        if (auto v = r.boolean("tls")) o.endpoint.tls = *v;
        o.wait_replicas = 1;
    } else {
        for (std::size_t i = 0; i < sentinels->size(); ++i)
            o.sentinels.push_back(parse_host_port((*sentinels)[i], i, "sentinels"));
        auto name = r.string("master_name");
        if (!name || name->empty())
            throw config_error("config.missing", "/master_name",
                               "option 'master_name' (the name the Sentinels monitor) is required "
                               "with 'sentinels'");
        o.master_name = *name;
        auto sentinel_user = r.string("sentinel_user");
        auto sentinel_password = r.secret("sentinel_password", o.sentinel_password_from);
        for (auto& s : o.sentinels) {
            if (sentinel_user) s.user = *sentinel_user;
            if (sentinel_password) s.password = *sentinel_password;
        }
        o.endpoint = redis_endpoint{};
        o.endpoint.host.clear();
        if (auto v = r.string("user")) o.endpoint.user = *v;
        if (auto v = r.integer("db", 0, 1'000'000)) o.endpoint.db = int(*v);
        // TLS to the Sentinels and to the master they name (their tls-port, tls-replication
        // yes): the Sentinels' answers decide where the lock's commands go, so they need it
        // as much as the master does.
        if (auto v = r.boolean("tls")) o.endpoint.tls = *v;
        for (auto& s : o.sentinels) s.tls = o.endpoint.tls;
        o.wait_replicas = 1;
    }
    // The master's password: with `url` in it, or from a file or a variable; with `sentinels`
    // also inline.
    if (auto v = r.secret("password", o.password_from)) {
        if (url)
            throw config_error("config.value", "/password",
                               "with 'url', give the password in the URL, or as 'password_file' "
                               "or 'password_env'");
        o.endpoint.password = *v;
    }
    if (!o.password_from.empty() && !o.endpoint.password.empty())
        throw config_error("config.value",
                           o.password_from.file.empty() ? "/password_env" : "/password_file",
                           "the password is given twice (in the url, and in a file or variable): "
                           "keep one");
    if (auto v = r.integer("wait_replicas", 0, 1000)) o.wait_replicas = int(*v);
    if (sentinels && o.wait_replicas == 0)
        throw config_error("config.value", "/wait_replicas",
                           "option 'wait_replicas' must be >= 1 with 'sentinels': without it a "
                           "failover can lose a grant and give the name to a second holder");
    if (auto v = r.seconds("connect_timeout_s", 0.001, 3600)) o.connect_timeout = *v;
    if (auto v = r.seconds("command_timeout_s", 0.001, 3600)) o.command_timeout = *v;
    if (auto v = r.string("key_prefix")) o.key_prefix = *v;
    // The hash tag that keeps a name's keys in one slot must be the first {...} of each key.
    if (cluster && o.key_prefix.find_first_of("{}") != std::string::npos)
        throw config_error("config.value", "/key_prefix",
                           "with 'cluster', key_prefix may not contain '{' or '}': the keys' hash "
                           "tag (which keeps a name's keys in one slot) must be their first {...}");
    if (auto v = r.integer("pool_size", 1, 1024)) o.pool_size = std::size_t(*v);
    auto t = url ? tls::read_tls_options(r, o.endpoint.tls, "/url", "a rediss:// url")
                 : tls::read_tls_options(r, o.endpoint.tls, "/tls", "'tls': true");
    o.ca_file = std::move(t.ca_file);
    o.cert_file = std::move(t.cert_file);
    o.key_file = std::move(t.key_file);
    o.server_name = std::move(t.server_name);
    r.finish();
    return o;
}

std::vector<std::string> redis_options::backends() const {
    const auto server = [](const redis_endpoint& e) -> std::vector<std::string> {
        if (!e.socket_path.empty())
            return {"unix:" + std::filesystem::path(e.socket_path).lexically_normal().string()};
        return server_identities(e.host, e.port);
    };
    if (!cluster.empty()) {
        std::vector<std::string> nodes;
        for (const auto& node : cluster)
            for (auto& at : server(node)) nodes.push_back(std::move(at));
        return nodes;
    }
    if (sentinels.empty()) return server(endpoint);
    std::vector<std::string> masters;
    for (const auto& s : sentinels)
        for (const auto& at : server(s)) masters.push_back(master_name + "@" + at);
    return masters;
}

}  // namespace locksmith::strategies
