// SPDX-License-Identifier: MIT
// The redis strategy's URL parser (parse_redis_url). Properties:
//  - it throws nothing but invalid_argument_error;
//  - the password it reads is in neither the endpoint's redacted() form nor redact_url(url);
//  - redacted() is a URL of the same endpoint (host, port, socket, database, TLS or not).
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/redis.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto url = fuzz::as_text(data, size);
    redis_endpoint e;
    try {
        e = parse_redis_url(url);
    } catch (const invalid_argument_error&) {
        return 0;
    }
    // With a %-escape, the password as read is not the text that the URL shows.
    if (url.find('%') == std::string_view::npos) {
        // What redacted() shows whatever the password is (it adds the default port and
        // database, which may hold the password's digits).
        auto other = e;
        other.password = e.password.empty() ? "" : "x";
        check(!fuzz::reveals(e.redacted(), url, e.password, other.redacted()),
              "redacted() shows the password", e.redacted());
        check(!fuzz::reveals(redact_url(url), url, e.password), "redact_url shows the password",
              redact_url(url));
    }
    const auto again = parse_redis_url(e.redacted());
    check(again.host == e.host && again.port == e.port && again.socket_path == e.socket_path &&
              again.db == e.db && again.tls == e.tls,
          "redacted() names another endpoint", e.redacted());
    return 0;
}
