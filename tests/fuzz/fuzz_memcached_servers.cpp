// SPDX-License-Identifier: MIT
// The memcached strategy's server list (parse_memcached_servers: "host[:port], [v6]:port, ...").
// Properties:
//  - it throws nothing but invalid_argument_error;
//  - every server it returns has a host and a port in [1, 65535], and the list written back as
//    the strategy names servers in messages ("host:port", an IPv6 host in brackets) parses to the
//    same list.
#include <locksmith/errors.hpp>
#include <locksmith/strategies/memcached.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(fuzz::as_text(data, size));
    std::vector<std::pair<std::string, int>> servers;
    try {
        servers = parse_memcached_servers(text);
    } catch (const invalid_argument_error&) {
        return 0;
    }
    check(!servers.empty(), "an empty server list was accepted");
    std::string written;
    for (const auto& [host, port] : servers) {
        check(!host.empty() && port >= 1 && port <= 65535, "a server without host or port");
        if (!written.empty()) written += ",";
        written += (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                   std::to_string(port);
    }
    check(parse_memcached_servers(written) == servers, "the list written back parses otherwise",
          written);
    return 0;
}
