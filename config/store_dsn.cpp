// SPDX-License-Identifier: MIT
// A store as Symfony Lock's StoreFactory::createStore() spells it, read into one of our strategies
// and its options (parse_store_dsn, include/locksmith/config.hpp). Messages name keys and forms,
// never a value that could be a password: a DSN is only ever shown through redact_url.
#include <cctype>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/sql.hpp>

namespace locksmith {
namespace {

bool starts(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

// Longest part of a (redacted) DSN a message shows.
constexpr std::size_t longest_shown = 200;

[[noreturn]] void refuse(std::string_view dsn, const std::string& why) {
    std::string shown = redact_url(dsn);
    if (shown.size() > longest_shown) {
        std::size_t cut = longest_shown;
        while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xc0) == 0x80) --cut;
        shown = shown.substr(0, cut) + "... (" + std::to_string(dsn.size()) + " bytes)";
    }
    throw invalid_argument_error("store " + shown + ": " + why);
}

// Longest DSN taken: far more than a cluster's worth of host[...] entries, far less than what
// would make a message or an option of megabytes.
constexpr std::size_t longest_dsn = 16 * 1024;
// Longest parameter name a message quotes.
constexpr std::size_t longest_quoted_name = 64;

// A parameter's name as a message shows it: quoted when short, else only its length (the
// caller has refused control characters already).
std::string parameter_name(std::string_view key) {
    if (key.size() <= longest_quoted_name) return "'" + std::string(key) + "'";
    return "of " + std::to_string(key.size()) + " characters";
}

// A DSN is one line of printable text (UTF-8 beyond ASCII allowed). A control character in a
// host, a Sentinel master name or a path would reach the strategy's options, and in a message
// it could move a terminal's cursor or forge a log line; a huge DSN would make a huge message.
// Neither is shown (redact_url does not promise to hide a password among control characters).
void check_shape(std::string_view dsn) {
    const std::string what = "store of " + std::to_string(dsn.size()) + " bytes: ";
    if (dsn.size() > longest_dsn)
        throw invalid_argument_error(what + "longer than " + std::to_string(longest_dsn) +
                                     " bytes, more than any store's DSN needs (not shown)");
    for (std::size_t i = 0; i < dsn.size(); ++i) {
        const auto c = static_cast<unsigned char>(dsn[i]);
        if (c < 0x20 || c == 0x7f) {
            char code[8];
            std::snprintf(code, sizeof code, "0x%02x", c);
            throw invalid_argument_error(what + "a control character (" + code + ") at byte " +
                                         std::to_string(i) +
                                         ": a DSN is one line of printable text (not shown)");
        }
    }
}

// "host" or "host:port" with `port` added when it has none (an IPv6 address in brackets).
std::string with_port(std::string_view host, int port) {
    const auto close = host.rfind(']');
    const auto colon = host.rfind(':');
    const bool has_port = colon != std::string_view::npos &&
                          (close == std::string_view::npos || colon > close) &&
                          (host.front() == '[' || host.find(':') == colon);
    return std::string(host) + (has_port ? "" : ":" + std::to_string(port));
}

// A Symfony Redis or Memcached DSN taken apart: `scheme:[//[userinfo@]host[:port]][/path]
// [?query]`, the query's `host[h:p]` entries (more servers) and its other parameters.
struct server_dsn {
    std::string userinfo;
    std::string authority;  // host[:port], may be empty
    std::string path;
    std::vector<std::string> hosts;  // from host[...]
    std::vector<std::pair<std::string, std::string>> parameters;
};

server_dsn split_server_dsn(std::string_view dsn, std::string_view rest) {
    server_dsn out;
    const auto q = rest.find('?');
    auto head = rest.substr(0, q);
    auto query = q == std::string_view::npos ? std::string_view() : rest.substr(q + 1);
    if (starts(head, "//")) {
        head.remove_prefix(2);
        const auto slash = head.find('/');
        auto authority = head.substr(0, slash);
        out.path = slash == std::string_view::npos ? "" : std::string(head.substr(slash));
        if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
            out.userinfo = std::string(authority.substr(0, at));
            authority.remove_prefix(at + 1);
        }
        out.authority = std::string(authority);
    } else if (!head.empty()) {
        refuse(dsn, "expected '//' or '?' after the scheme");
    }
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (pair.empty()) continue;
        if (starts(pair, "host[")) {
            const auto close = pair.find(']');
            if (close == std::string_view::npos || close == 5)
                refuse(dsn, "a host[...] parameter is not closed or empty");
            if (close + 1 != pair.size())
                refuse(dsn, "server weights (host[...]=N) are not supported");
            out.hosts.emplace_back(pair.substr(5, close - 5));
            continue;
        }
        const auto eq = pair.find('=');
        out.parameters.emplace_back(pair.substr(0, eq),
                                    eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    }
    return out;
}

// The seconds of a timeout parameter, checked as the strategy's own option would be.
double seconds(std::string_view dsn, const std::string& key, const std::string& value) {
    try {
        // Decimal only: std::stod also reads hex ("0x10", 16 s), which PHP reads as 0.
        if (value.find_first_not_of("0123456789.") != std::string::npos)
            throw std::invalid_argument(key);
        std::size_t used = 0;
        const double s = std::stod(value, &used);
        if (used == value.size() && s > 0 && s <= 3600) return s;
    } catch (const std::exception&) {
    }
    refuse(dsn, "parameter " + key + " must be a number of seconds in (0, 3600]");
}

store_spelling redis_store(std::string_view dsn) {
    const bool tls = starts(dsn, "rediss:");
    auto d = split_server_dsn(dsn, dsn.substr(tls ? 7 : 6));
    const std::string scheme = tls ? "rediss://" : "redis://";
    store_spelling out{"redis", nlohmann::json::object()};
    bool cluster = false;
    std::string sentinel_master;
    std::string db;
    for (const auto& [key, value] : d.parameters) {
        if (key == "redis_cluster") {
            cluster = value == "1" || value == "true";
        } else if (key == "redis_sentinel") {
            sentinel_master = value;
        } else if (key == "dbindex") {
            db = value;
        } else if (key == "timeout") {
            out.options["connect_timeout_s"] = seconds(dsn, key, value);
        } else if (key == "read_timeout") {
            out.options["command_timeout_s"] = seconds(dsn, key, value);
        } else if (key == "lazy" || key == "persistent" || key == "persistent_id" ||
                   key == "retry_interval" || key == "tcp_keepalive" || key == "failover" ||
                   key == "class") {
            // Tuning of PHP's client, meaningless here: locksmith connects on first use and
            // keeps a pool of its own.
        } else {
            refuse(dsn, "the Redis DSN parameter " + parameter_name(key) +
                            " is not supported (supported: host[...], redis_cluster, "
                            "redis_sentinel, dbindex, timeout, read_timeout)");
        }
    }
    if (!db.empty() && (db.size() > 7 || db.find_first_not_of("0123456789") != std::string::npos))
        refuse(dsn, "dbindex must be a database number");
    std::vector<std::string> nodes;
    if (!d.authority.empty()) nodes.push_back(d.authority);
    nodes.insert(nodes.end(), d.hosts.begin(), d.hosts.end());
    if (!d.path.empty() && d.path != "/") {
        // redis:///var/run/redis.sock, or redis://host/2 (the database).
        if (d.authority.empty()) {
            if (cluster || !sentinel_master.empty() || !d.hosts.empty())
                refuse(dsn, "a Unix socket serves one server: no cluster, Sentinel or host[...]");
            if (!d.userinfo.empty())
                out.options["password"] = d.userinfo.substr(d.userinfo.find(':') + 1);
            out.options["url"] = "unix://" + d.path + (db.empty() ? "" : "?db=" + db);
            return out;
        }
        if (!db.empty()) refuse(dsn, "the database is given twice (path and dbindex)");
        db = d.path.substr(1);
        if (db.size() > 7 || db.find_first_not_of("0123456789") != std::string::npos)
            refuse(dsn, "the path must be a database number (redis://host:6379/2)");
    }
    if (nodes.empty()) refuse(dsn, "no Redis server named (redis://host:6379)");
    if (cluster || !sentinel_master.empty()) {
        if (cluster && !sentinel_master.empty())
            refuse(dsn, "redis_cluster and redis_sentinel do not go together");
        if (!d.userinfo.empty()) {
            const auto colon = d.userinfo.find(':');
            if (colon != std::string::npos && colon > 0)
                out.options["user"] = d.userinfo.substr(0, colon);
            out.options["password"] =
                colon == std::string::npos ? d.userinfo : d.userinfo.substr(colon + 1);
        }
        nlohmann::json list = nlohmann::json::array();
        for (const auto& n : nodes) list.push_back(with_port(n, cluster ? 6379 : 26379));
        if (cluster) {
            if (!db.empty() && db != "0") refuse(dsn, "Redis Cluster has no database but 0");
            out.options["cluster"] = list;
            if (tls) out.options["tls"] = true;
        } else {
            if (tls) refuse(dsn, "TLS behind Sentinel is not supported yet");
            out.options["sentinels"] = list;
            out.options["master_name"] = sentinel_master;
            if (!db.empty()) out.options["db"] = std::stoi(db);
        }
        return out;
    }
    if (nodes.size() > 1)
        refuse(dsn,
               "several servers without redis_cluster or redis_sentinel (a RedisArray, which "
               "spreads names over independent servers) are not supported: one restart would "
               "lose a share of the locks");
    out.options["url"] = scheme + (d.userinfo.empty() ? "" : d.userinfo + "@") + nodes.front() +
                         (db.empty() ? "" : "/" + db);
    return out;
}

store_spelling memcached_store(std::string_view dsn) {
    auto d = split_server_dsn(dsn, dsn.substr(10));
    if (!d.userinfo.empty()) refuse(dsn, "Memcached SASL authentication is not supported");
    if (!d.path.empty() && d.path != "/")
        refuse(dsn, "a Unix socket or path is not supported: name host:port");
    if (!d.parameters.empty())
        refuse(dsn, "the Memcached DSN parameter " + parameter_name(d.parameters.front().first) +
                        " is not supported (only host[...])");
    std::string servers;
    auto add = [&](std::string_view list) {
        // memcached://a,b:11211 is not Symfony's; its servers go in host[...] parameters.
        if (list.find(',') != std::string_view::npos)
            refuse(dsn, "name further servers as host[...] parameters");
        servers += (servers.empty() ? "" : ",") + with_port(list, 11211);
    };
    if (!d.authority.empty()) add(d.authority);
    for (const auto& h : d.hosts) add(h);
    if (servers.empty()) refuse(dsn, "no Memcached server named (memcached://host:11211)");
    return {"memcached", {{"servers", servers}}};
}

store_spelling zookeeper_store(std::string_view dsn) {
    auto rest = dsn.substr(12);  // after "zookeeper://"
    if (rest.find_first_of("@?#") != std::string_view::npos)
        refuse(dsn,
               "a ZooKeeper DSN is zookeeper://host[,host...][:port], nothing more "
               "(auth and the root are the zookeeper strategy's options)");
    const auto slash = rest.find('/');
    if (slash != std::string_view::npos && slash + 1 != rest.size())
        refuse(dsn,
               "a path in the DSN (Symfony ignores it) is not taken: use the zookeeper "
               "strategy's root option");
    rest = rest.substr(0, slash);
    // Symfony appends the port of the last host to every host: a,b:2181 is a:2181,b:2181.
    std::string port = "2181";
    if (const auto colon = rest.rfind(':');
        colon != std::string_view::npos && rest.find(',', colon) == std::string_view::npos) {
        port = std::string(rest.substr(colon + 1));
        rest = rest.substr(0, colon);
    }
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
        refuse(dsn, "the port is not a number in [1, 65535]");
    std::string hosts;
    while (true) {
        const auto comma = rest.find(',');
        const auto host = rest.substr(0, comma);
        if (host.empty()) refuse(dsn, "an empty host in the list");
        hosts += (hosts.empty() ? "" : ",") + with_port(host, std::stoi(port));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return {"zookeeper", {{"hosts", hosts}}};
}

}  // namespace

store_spelling parse_store_dsn(std::string_view dsn) {
    check_shape(dsn);
    if (dsn == "flock") return {"file", nlohmann::json::object()};
    if (starts(dsn, "flock://")) {
        // Symfony takes what follows "flock://" as the directory: flock:///var/lock.
        const auto dir = dsn.substr(8);
        if (!starts(dir, "/"))
            throw invalid_argument_error(
                "store flock://: the lock directory must be an absolute path: "
                "flock:///var/lock/app");
        return {"file", {{"lock_dir", std::string(dir)}}};
    }
    if (dsn == "semaphore") return {"semaphore", nlohmann::json::object()};
    if (dsn == "in-memory") return {"memory", nlohmann::json::object(), true};
    if (dsn == "null") return {"null", nlohmann::json::object(), true};
    if (starts(dsn, "redis:") || starts(dsn, "rediss:")) return redis_store(dsn);
    if (starts(dsn, "memcached:")) return memcached_store(dsn);
    if (starts(dsn, "zookeeper://")) return zookeeper_store(dsn);
    if (starts(dsn, "mongodb"))
        refuse(dsn, "MongoDB is not supported: use redis, etcd, zookeeper or an SQL database");
    for (std::string_view advisory :
         {"pgsql+advisory:", "postgres+advisory:", "postgresql+advisory:"})
        if (starts(dsn, advisory)) {
            const auto plus = dsn.find('+');
            const std::string plain = std::string(dsn.substr(0, plus)) +
                                      std::string(dsn.substr(plus + 9));  // "+advisory"
            std::string url;
            try {
                url = strategies::normalize_sql_dsn(plain);
            } catch (const invalid_argument_error& e) {
                refuse(dsn, e.what());
            }
            if (!starts(url, "postgresql://") && !starts(url, "postgres://"))
                refuse(dsn, "not a PostgreSQL DSN");
            try {
                (void)strategies::parse_sql_dsn(url);  // host, port and database read alike
            } catch (const invalid_argument_error& e) {
                throw invalid_argument_error(std::string("store: ") + e.what());
            }
            return {"pg_advisory", {{"dsn", url}}};
        }
    for (std::string_view sql :
         {"pgsql:", "postgres://", "postgresql://", "mysql:", "mysql2://", "mariadb://", "sqlite:",
          "sqlite3://", "sqlsrv:", "mssql:", "oci:", "oci8:", "pdo_oci:", "db2:", "ibm_db2:"})
        if (starts(dsn, sql)) {
            try {
                (void)strategies::parse_sql_dsn(dsn);
            } catch (const invalid_argument_error& e) {
                // parse_sql_dsn's message already shows the DSN, redacted.
                throw invalid_argument_error(std::string("store: ") + e.what());
            }
            return {"sql", {{"dsn", std::string(dsn)}}};
        }
    // Not shown, not even redacted: a misspelt scheme ("pgsq:host=db;password=...") would be
    // read as something else, and its password with it. Only a scheme-like start is named.
    std::size_t scheme = 0;
    while (scheme < dsn.size() && scheme < 32 &&
           (std::isalnum(static_cast<unsigned char>(dsn[scheme])) ||
            std::string_view("+.-_").find(dsn[scheme]) != std::string_view::npos))
        ++scheme;
    throw invalid_argument_error(
        "store " +
        (scheme > 0 && scheme < dsn.size() && dsn[scheme] == ':'
             ? "'" + std::string(dsn.substr(0, scheme + 1)) + "...'"
             : "of " + std::to_string(dsn.size()) + " bytes") +
        ": not a store this build knows. Symfony's spellings taken: flock, flock:///dir, "
        "semaphore, in-memory, null, redis://, rediss://, redis:?host[...], memcached://, "
        "pgsql:/mysql:/sqlite: PDO DSNs, pgsql://, postgresql://, mysql://, sqlite:/// URLs, "
        "pgsql+advisory:, postgresql+advisory://, zookeeper://");
}

}  // namespace locksmith
