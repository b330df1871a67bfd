// SPDX-License-Identifier: MIT
// The memcached strategy's reply parsing (meta_connection: the handshake's `mn` / `stats` /
// `stats settings` replies, then the replies to ms, mg and md), fed through a socket pair as a
// server would send them. The input is an exchange (fuzz_support.hpp): the handshake's reply,
// then "%<command>" lines, each followed by the reply to that command; a command is set, add,
// cas (set over a CAS), get, touch (mg with t), remove or cas_remove; a reply is taken only when
// it names the key `k` and the command's number (`kk O1` for the first). Properties:
//  - nothing but backend_error is thrown, and a connection that threw is broken();
//  - a value is exactly as long as its reply said.
#include <memory>

#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "strategies/memcached/meta_connection.hpp"

using namespace locksmith;
using namespace locksmith::strategies::memcached_detail;
using locksmith::fuzz::check;

namespace {

meta_reply command(meta_connection& c, const std::string& name) {
    if (name == "set") return c.set("k", "value", 30, false, 0, "setting");
    if (name == "add") return c.set("k", "value", 30, true, 0, "adding");
    if (name == "cas") return c.set("k", "value", 30, false, 42, "replacing");
    if (name == "touch") return c.get("k", "t", "reading the ttl");
    if (name == "remove") return c.remove("k", 0, "removing");
    if (name == "cas_remove") return c.remove("k", 42, "removing by cas");
    return c.get("k", "v c t", "getting");
}

// The length a VA reply line announces ("VA <length> <flags>...").
std::optional<std::size_t> announced_length(std::string_view reply) {
    if (!reply.starts_with("VA ")) return std::nullopt;
    std::size_t n = 0, i = 3;
    if (i >= reply.size() || reply[i] < '0' || reply[i] > '9') return std::nullopt;
    for (; i < reply.size() && reply[i] >= '0' && reply[i] <= '9'; ++i) {
        if (n > (std::size_t(1) << 40)) return std::nullopt;
        n = n * 10 + std::size_t(reply[i] - '0');
    }
    return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto script = fuzz::exchange::parse(fuzz::as_text(data, size));
    fuzz::socket_peer peer;
    peer.send(script.steps[0].reply);
    if (script.steps.size() == 1) peer.hang_up();
    std::unique_ptr<meta_connection> c;
    try {
        c = std::make_unique<meta_connection>(peer.take_ours(), "fuzz:11211",
                                              std::chrono::milliseconds(5));
    } catch (const backend_error&) {
        return 0;
    }
    for (std::size_t i = 1; i < script.steps.size(); ++i) {
        const auto& step = script.steps[i];
        peer.drain();
        // Bytes left from the last reply (the store would not reuse such a connection: stale())
        // come before this reply.
        const bool leftover = c->stale();
        peer.send(step.reply);
        if (i + 1 == script.steps.size()) peer.hang_up();
        try {
            const auto reply = command(*c, step.request);
            if (reply.status == meta_status::value && !leftover)
                if (const auto n = announced_length(step.reply))
                    check(reply.value.size() == *n, "a value of another length than announced");
        } catch (const backend_error&) {
            check(c->broken(), "a connection that threw is not broken()");
            return 0;
        }
    }
    return 0;
}
