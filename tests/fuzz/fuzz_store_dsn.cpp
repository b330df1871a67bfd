// SPDX-License-Identifier: MIT
// Symfony store DSNs (parse_store_dsn, a config's "store"). Properties:
//  - it throws nothing but invalid_argument_error;
//  - what it accepts is one of the strategies it maps to, with an object of options, and an sql
//    or pg_advisory DSN that the sql parser reads;
//  - a message never shows a PDO DSN's password.
#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto text = fuzz::as_text(data, size);
    store_spelling s;
    try {
        s = parse_store_dsn(text);
    } catch (const invalid_argument_error& e) {
        const std::string_view message = e.what();
        // A PDO DSN of a server database: SQLite's and flock's text is a path, with no secret.
        const bool server_pdo = (text.substr(0, 6) == "pgsql:" || text.substr(0, 6) == "mysql:") &&
                                text.substr(6, 2) != "//";
        const auto at = text.find(";password=");
        if (server_pdo && at != std::string_view::npos) {
            auto secret = text.substr(at + 10);
            secret = secret.substr(0, secret.find(';'));
            // The messages' own words: a "secret" such as "not" is in them anyway.
            static const std::string wording =
                "store: sql dsn postgresql:// mysql:// *** a postgresql PDO DSN is key=value "
                "pairs split by ';' (a part has no '=') a mysql PDO DSN names twice the PDO DSN "
                "key '?' is not supported (postgresql: host, port, dbname, user, password, "
                "sslmode...) (mysql: host, port, dbname, user, password) the PDO DSN's host must "
                "be a host name or address the PDO DSN's port is not a number in [1, 65535] "
                "unix_socket is not supported in a mysql: DSN: leave host out (or say localhost) "
                "for the server's default socket";
            // A message quotes a key ('p') and is made of words: a secret with a quote or a blank
            // in it may be met there by chance.
            if (secret.find_first_of("' \t") == std::string_view::npos)
                check(!fuzz::reveals(message, text, secret, wording),
                      "a message shows a PDO password", std::string(message));
        }
        return 0;
    }
    const bool known = s.strategy == "file" || s.strategy == "semaphore" ||
                       s.strategy == "memory" || s.strategy == "null" || s.strategy == "redis" ||
                       s.strategy == "memcached" || s.strategy == "sql" ||
                       s.strategy == "pg_advisory" || s.strategy == "zookeeper";
    check(known, "an unknown strategy", s.strategy);
    // The fuzzer's text need not be UTF-8; a config's always is.
    check(s.options.is_object(), "options that are not an object",
          s.options.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (s.strategy == "sql" || s.strategy == "pg_advisory") {
        try {
            (void)strategies::parse_sql_dsn(s.options.at("dsn").get<std::string>());
        } catch (const invalid_argument_error& e) {
            check(false, "a DSN the sql parser refuses", e.what());
        }
    }
    return 0;
}
