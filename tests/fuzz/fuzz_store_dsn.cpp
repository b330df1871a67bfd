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
        const auto at = text.find(";password=");
        if (at != std::string_view::npos) {
            auto secret = text.substr(at + 10);
            secret = secret.substr(0, secret.find(';'));
            if (secret.size() >= 8 && secret.find_first_of("@") == std::string_view::npos)
                check(message.find(secret) == std::string_view::npos,
                      "a message shows a PDO password", std::string(message));
        }
        return 0;
    }
    const bool known = s.strategy == "file" || s.strategy == "semaphore" ||
                       s.strategy == "memory" || s.strategy == "null" || s.strategy == "redis" ||
                       s.strategy == "memcached" || s.strategy == "sql" ||
                       s.strategy == "pg_advisory" || s.strategy == "zookeeper";
    check(known, "an unknown strategy", s.strategy);
    check(s.options.is_object(), "options that are not an object", s.options.dump());
    if (s.strategy == "sql" || s.strategy == "pg_advisory") {
        try {
            (void)strategies::parse_sql_dsn(s.options.at("dsn").get<std::string>());
        } catch (const invalid_argument_error& e) {
            check(false, "a DSN the sql parser refuses", e.what());
        }
    }
    return 0;
}
