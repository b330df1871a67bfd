// SPDX-License-Identifier: MIT
// The etcd strategy's endpoint parser (parse_endpoint, strategies/etcd/http_connection.hpp).
// Properties:
//  - it throws nothing but invalid_argument_error;
//  - the endpoint's text ("http://host:port") parses to the same endpoint;
//  - the host holds nothing that would end it early in the Host header or a URL.
#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "strategies/etcd/http_connection.hpp"

using namespace locksmith;
using namespace locksmith::strategies::etcd_detail;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto url = fuzz::as_text(data, size);
    endpoint e;
    try {
        e = parse_endpoint(url);
    } catch (const invalid_argument_error&) {
        return 0;
    }
    check(e.port >= 1 && e.port <= 65535, "a port out of range");
    const auto again = parse_endpoint(e.text);
    check(again.host == e.host && again.port == e.port && again.text == e.text,
          "the endpoint's text names another endpoint", e.text);
    return 0;
}
