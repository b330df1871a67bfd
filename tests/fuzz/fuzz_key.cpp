// SPDX-License-Identifier: MIT
// Serialized keys (key::from_json, key::to_json): what lock_factory::create_lock_from_key
// continues a lock from, sent by another process or host. The input is read twice: as a
// serialized key (JSON) and as the resource name of a new key. Properties:
//  - from_json throws nothing but invalid_argument_error, and what it accepts is a valid key;
//  - "resource_hex" is accepted only when it is hexadecimal;
//  - parse -> format -> parse gives the same key (resource, token, fencing token, state,
//    expiry), through the JSON text as it travels;
//  - any resource name (any bytes, NUL and non-UTF-8 included) survives format -> parse.
#include <cctype>
#include <chrono>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

// `k` as it travels: to_json, as text, parsed again.
key round_trip(const key& k) {
    const auto text = k.to_json().dump();
    return key::from_json(nlohmann::json::parse(text));
}

void expect_same(const key& a, const key& b) {
    check(a.resource() == b.resource(), "the resource changed on the way");
    check(a.token() == b.token(), "the token changed on the way");
    check(a.fencing_token() == b.fencing_token(), "the fencing token changed on the way");
    check(a.portable_state() == b.portable_state(), "the state changed on the way");
    check(a.expires_at().has_value() == b.expires_at().has_value(), "the expiry came or went");
    if (a.expires_at()) {
        // Sent as wall-clock milliseconds: a millisecond of rounding and the time in between.
        const auto drift = std::chrono::abs(*a.expires_at() - *b.expires_at());
        check(drift < std::chrono::milliseconds(50), "the expiry moved on the way");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto text = fuzz::as_text(data, size);

    if (!text.empty()) {
        const key fresh{std::string(text)};
        expect_same(fresh, round_trip(fresh));
    }

    // A caller parses the text first; nesting this deep is refused before (config::max_depth).
    const auto depth = fuzz::json_depth(text);
    if (!depth || *depth > 64) return 0;
    const auto j = nlohmann::json::parse(text);
    std::optional<key> k;
    try {
        k.emplace(key::from_json(j));
    } catch (const invalid_argument_error&) {
        return 0;
    }
    check(!k->resource().empty() && k->resource().size() <= max_name_length,
          "a key with an invalid resource was accepted");
    check(k->token().size() >= 32, "a key with a short token was accepted");
    if (!(j.contains("resource") && j["resource"].is_string()))
        for (unsigned char c : j["resource_hex"].get<std::string>())
            check(std::isxdigit(c) != 0, "'resource_hex' that is not hexadecimal was accepted",
                  j["resource_hex"].get<std::string>());
    expect_same(*k, round_trip(*k));
    return 0;
}
