// SPDX-License-Identifier: MIT
// The sql strategy's DSN parser (parse_sql_dsn). Properties:
//  - it throws nothing but invalid_argument_error;
//  - the password it reads is not in the DSN's redacted() form;
//  - TLS settings only for mysql://, a client certificate with its key, a certificate named
//    means TLS on.
#include <locksmith/errors.hpp>
#include <locksmith/strategies/sql.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto text = fuzz::as_text(data, size);
    sql_dsn d;
    try {
        d = parse_sql_dsn(text);
    } catch (const invalid_argument_error&) {
        return 0;
    }
    // A PDO or Doctrine spelling is shown in the form it is read as (normalize_sql_dsn): the
    // password is looked for in that form. With a %-escape, the password as read is not the
    // text that the DSN shows.
    const std::string canonical = normalize_sql_dsn(text);
    if (canonical.find('%') == std::string::npos)
        check(!fuzz::reveals(d.redacted(), canonical, d.password), "redacted() shows the password",
              d.redacted());
    if (d.driver == sql_dsn::kind::sqlite)
        check(!d.path.empty() && d.path.front() == '/', "a SQLite path that is not absolute",
              d.path);
    else
        check(d.port >= 0 && d.port <= 65535, "a port out of range");
    // TLS parameters are read from mysql:// DSNs only (libpq reads PostgreSQL's); a client
    // certificate comes with its key; a certificate alone never means "no TLS".
    using tls = sql_dsn::tls_mode;
    if (d.driver != sql_dsn::kind::mysql)
        check(d.tls == tls::disable && d.tls_ca.empty() && d.tls_cert.empty(),
              "TLS settings outside a mysql:// DSN");
    check(d.tls_cert.empty() == d.tls_key.empty(), "a client certificate without its key");
    if (!d.tls_ca.empty() || !d.tls_cert.empty())
        check(d.tls != tls::disable, "a certificate named, TLS off");
    return 0;
}
