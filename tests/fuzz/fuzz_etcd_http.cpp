// SPDX-License-Identifier: MIT
// The etcd strategy's HTTP/1.1 client (http_connection): status line, headers, Content-Length,
// chunked bodies, a body that ends with the connection, and the chunked watch stream read
// message by message, fed through a socket pair as a server would send them. The input is an
// exchange (fuzz_support.hpp): the reply to a first POST, then "%post" or "%stream" lines, each
// followed by the reply to that request. Properties:
//  - nothing but backend_error is thrown, and a connection that threw is broken();
//  - a stream yields messages that are single, non-blank lines.
#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "strategies/etcd/http_connection.hpp"

using namespace locksmith;
using namespace locksmith::strategies::etcd_detail;
using locksmith::fuzz::check;

namespace {

deadline soon() {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
}

void request(http_connection& c, const std::string& kind) {
    if (kind != "stream") {
        (void)c.post("/v3/kv/range", "{}", "", soon(), "reading");
        return;
    }
    std::string error_body;
    if (c.open_stream("/v3/watch", "{}", "", soon(), "watching", error_body) != 200) return;
    for (int i = 0; i < 64; ++i) {
        const auto message = c.next_message(soon(), "watching");
        if (!message) return;
        check(!message->empty() && message->find('\n') == std::string::npos &&
                  message->find_first_not_of(" \t") != std::string::npos,
              "a stream message that is not one non-blank line", *message);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto script = fuzz::exchange::parse(fuzz::as_text(data, size));
    fuzz::socket_peer peer;
    http_connection c(peer.take_ours(), "http://fuzz:2379");
    for (std::size_t i = 0; i < script.steps.size(); ++i) {
        const auto& step = script.steps[i];
        peer.drain();
        peer.send(step.reply);
        if (i + 1 == script.steps.size()) peer.hang_up();
        try {
            request(c, i == 0 ? "post" : step.request);
        } catch (const backend_error&) {
            check(c.broken(), "a connection that threw is not broken()");
            return 0;
        }
    }
    return 0;
}
