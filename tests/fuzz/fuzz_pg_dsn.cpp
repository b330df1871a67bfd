// SPDX-License-Identifier: MIT
// The DSN check of the PostgreSQL strategies (pg::make_pg_target, shared by pg_advisory and the
// sql strategy's PostgreSQL driver): the URL check, libpq's own parse (PQconninfoParse), the
// redacted form for messages. The password is taken from libpq, which is what connects, so that
// the redaction is checked against the reading that matters. Properties:
//  - it throws nothing but invalid_argument_error;
//  - the password libpq reads from the DSN is in neither the target's redacted DSN nor any
//    message (a keyword/value DSN, "host=db password=x", included).
#include <libpq-fe.h>

#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "strategies/common/pq/pg_session.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

// What make_pg_target's messages and libpq's own (which it passes on) say in any case: a
// password that is one of these words is not given away by the message.
constexpr std::string_view wording =
    "pg_advisory: dsn must be a URL postgresql://user[:password]@host[:port]/database; is not a "
    "valid PostgreSQL URL: names no database (postgresql://host[:port]/database); missing \"=\" "
    "after \"\" in connection info string; invalid connection option \"\"; unterminated quoted "
    "string in connection info string; invalid percent-encoded token: \"\"; forbidden value %00 in "
    "percent-encoded value: \"\"; invalid URI propagated to internal parser routine: \"\"; end of "
    "string reached when looking for matching \"]\" in IPv6 host address in URI: \"\"; IPv6 host "
    "address may not be empty in URI: \"\"; unexpected character \"\" at position in URI "
    "(expected \":\" or \"/\"): \"\"; extra key/value separator \"=\" in URI query parameter: "
    "\"\"; missing key/value separator \"=\" in URI query parameter: \"\"; invalid URI query "
    "parameter: \"\"; out of memory 0123456789";

// The password libpq reads from `dsn`, if it reads one.
std::string libpq_password(const std::string& dsn) {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(dsn.c_str(), &error);
    PQfreemem(error);
    std::string password;
    if (options == nullptr) return password;
    for (auto* o = options; o->keyword != nullptr; ++o)
        if (o->val != nullptr && std::string_view(o->keyword) == "password") password = o->val;
    PQconninfoFree(options);
    return password;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string dsn(fuzz::as_text(data, size));
    if (dsn.find('\0') != std::string::npos) return 0;  // libpq reads a C string
    const auto password = libpq_password(dsn);
    // With a %-escape, the password as read is not the text that the DSN shows.
    const bool comparable = dsn.find('%') == std::string::npos;
    try {
        const auto t = pg::make_pg_target("pg_advisory", dsn);
        check(t.password == password, "the target's password is not libpq's");
        if (comparable)
            check(!fuzz::reveals(t.redacted, dsn, password), "the redacted DSN shows the password",
                  t.redacted);
    } catch (const invalid_argument_error& e) {
        if (comparable)
            check(!fuzz::reveals(e.what(), dsn, password, wording), "a message shows the password",
                  e.what());
    }
    return 0;
}
