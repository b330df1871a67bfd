// SPDX-License-Identifier: MIT
// key: owner tokens, lifetime rules (Symfony's KeyTest and LockTest::testExpiration) and JSON.
#define BOOST_TEST_MODULE key
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>

using namespace locksmith;
using namespace std::chrono_literals;
using clock_type = key::clock;

BOOST_AUTO_TEST_CASE(token_is_32_lowercase_hex_digits) {
    key k("resource");
    BOOST_TEST(k.token().size() == 32u);
    for (char c : k.token())
        BOOST_TEST((std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f')),
                   "unexpected character '" << c << "' in " << k.token());
    BOOST_TEST(k.resource() == "resource");
}

BOOST_AUTO_TEST_CASE(tokens_differ_between_keys) {
    // Two keys for one resource are two competing owners: their tokens must differ.
    std::set<std::string> tokens;
    for (int i = 0; i < 1000; ++i) tokens.insert(key("same").token());
    BOOST_TEST(tokens.size() == 1000u);
    BOOST_TEST(random_token() != random_token());
    BOOST_TEST(random_token().size() == 32u);
}

BOOST_AUTO_TEST_CASE(bad_names_are_rejected) {
    BOOST_CHECK_THROW(key(""), invalid_argument_error);
    BOOST_CHECK_THROW(validate_lock_name(""), invalid_argument_error);
    BOOST_CHECK_THROW(validate_lock_name(std::string(max_name_length + 1, 'x')),
                      invalid_argument_error);
    BOOST_CHECK_NO_THROW(validate_lock_name(std::string(max_name_length, 'x')));
    // Any bytes are allowed: NUL, '/', non-UTF-8.
    BOOST_CHECK_NO_THROW(key(std::string("a\0b", 3)));
    BOOST_CHECK_NO_THROW(key("../../etc/passwd"));
    BOOST_CHECK_NO_THROW(key(std::string("\xff\xfe\x80", 3)));
    BOOST_TEST(key(std::string("a\0b", 3)).resource().size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_new_key_does_not_expire) {
    key k("r");
    BOOST_TEST(!k.expires_at().has_value());
    BOOST_TEST(!k.remaining_lifetime().has_value());
    BOOST_TEST(!k.is_expired());
}

BOOST_AUTO_TEST_CASE(reduce_lifetime_only_lowers) {
    key k("r");
    auto now = clock_type::now();
    k.reduce_lifetime(now + 10s);
    BOOST_TEST((k.expires_at() == now + 10s));
    k.reduce_lifetime(now + 20s);  // later: ignored
    BOOST_TEST((k.expires_at() == now + 10s));
    k.reduce_lifetime(now + 5s);  // earlier: taken
    BOOST_TEST((k.expires_at() == now + 5s));
    k.reset_lifetime();
    BOOST_TEST(!k.expires_at().has_value());
}

BOOST_AUTO_TEST_CASE(remaining_lifetime_counts_down_and_goes_negative) {
    key k("r");
    k.reduce_lifetime(clock_type::now() + 1s);
    auto left = k.remaining_lifetime();
    BOOST_REQUIRE(left.has_value());
    BOOST_TEST(left->count() <= 1000);
    BOOST_TEST(left->count() > 500);
    BOOST_TEST(!k.is_expired());

    key gone("r");
    gone.reduce_lifetime(clock_type::now() - 1s);
    BOOST_TEST(gone.is_expired());
    BOOST_REQUIRE(gone.remaining_lifetime().has_value());
    BOOST_TEST(gone.remaining_lifetime()->count() < 0);
}

// Symfony LockTest::testExpiration / testExpirationStoreInterface: a sequence of key operations
// (a number of seconds means reduce_lifetime(now + n), nullopt means reset_lifetime) and the
// expected is_expired().
BOOST_AUTO_TEST_CASE(symfony_expiration_provider) {
    struct sample {
        std::vector<std::optional<double>> steps;
        bool expired;
    };
    const std::vector<sample> samples = {
        {{-0.1}, true}, {{0.1, -0.1}, true}, {{-0.1, 0.1}, true},  // reduce never raises the expiry
        {{}, false},    {{0.1}, false},      {{-0.1, std::nullopt}, false},  // reset clears it
    };
    int index = 0;
    for (const auto& s : samples) {
        BOOST_TEST_CONTEXT("sample " << index++) {
            key k("expiration");
            for (const auto& step : s.steps) {
                if (step)
                    k.reduce_lifetime(clock_type::now() +
                                      std::chrono::duration_cast<clock_type::duration>(
                                          std::chrono::duration<double>(*step)));
                else
                    k.reset_lifetime();
            }
            BOOST_TEST(k.is_expired() == s.expired);
        }
    }
}

// Symfony KeyTest::testSerialize.
BOOST_AUTO_TEST_CASE(serialize_round_trip) {
    key k("invoice.42");
    k.reduce_lifetime(clock_type::now() + 1s);
    k.portable_state()["foo"] = "bar";
    k.set_fencing_token(17);
    auto json = k.to_json();

    key back = key::from_json(json);
    BOOST_TEST(back.resource() == k.resource());
    BOOST_TEST(back.token() == k.token());
    BOOST_TEST(back.portable_state() == k.portable_state());
    BOOST_TEST(back.portable_state()["foo"] == "bar");
    BOOST_REQUIRE(back.fencing_token().has_value());
    BOOST_TEST(*back.fencing_token() == 17u);
    BOOST_REQUIRE(back.remaining_lifetime().has_value());
    // The expiry travels as wall-clock milliseconds; allow for the conversion and the time
    // spent between the two calls.
    auto diff = *k.remaining_lifetime() - *back.remaining_lifetime();
    BOOST_TEST(std::abs(diff.count()) <= 20, "lifetimes differ by " << diff.count() << " ms");
    // A JSON text round trip too, as another process would see it.
    key again = key::from_json(nlohmann::json::parse(json.dump()));
    BOOST_TEST(again.token() == k.token());
}

BOOST_AUTO_TEST_CASE(serialize_without_expiry_keeps_no_expiry) {
    key k("plain");
    key back = key::from_json(k.to_json());
    BOOST_TEST(!back.expires_at().has_value());
    BOOST_TEST(!back.fencing_token().has_value());
    BOOST_TEST(back.token() == k.token());
}

BOOST_AUTO_TEST_CASE(binary_names_survive_serialization) {
    // JSON strings must be UTF-8; a name with NUL or invalid UTF-8 must still round trip (or
    // be refused with a clear error), never produce JSON that cannot be dumped.
    std::string name("a\0\xff/..", 6);
    key k(name);
    try {
        auto text = k.to_json().dump();
        key back = key::from_json(nlohmann::json::parse(text));
        BOOST_TEST(back.resource() == name);
    } catch (const locksmith::error& e) {
        BOOST_TEST_MESSAGE("refused with: " << e.what());
    } catch (const std::exception& e) {
        BOOST_ERROR("escaped as a non-locksmith exception: " << e.what());
    }
}

// Symfony KeyTest::testUnserialize.
BOOST_AUTO_TEST_CASE(unserializable_key_refuses_with_reason) {
    key k("bound");
    BOOST_TEST(k.serializable());
    k.mark_unserializable("holds an open file descriptor");
    BOOST_TEST(!k.serializable());
    try {
        (void)k.to_json();
        BOOST_ERROR("to_json() of an unserializable key did not throw");
    } catch (const not_serializable_error& e) {
        BOOST_TEST(std::string(e.what()).find("open file descriptor") != std::string::npos,
                   e.what());
    }
}

BOOST_AUTO_TEST_CASE(local_state_is_not_serialized) {
    struct fd_state : key_local_state {
        int fd = 7;
    };
    key k("local");
    k.set_local_state(1, std::make_unique<fd_state>());
    BOOST_REQUIRE(k.local_state_of<fd_state>(1) != nullptr);
    BOOST_TEST(k.local_state_of<fd_state>(1)->fd == 7);
    BOOST_TEST(k.local_state_of<fd_state>(2) == nullptr);  // another store's view: none
    key back = key::from_json(k.to_json());
    BOOST_TEST(back.local_state() == nullptr);
}

BOOST_AUTO_TEST_CASE(from_json_names_the_bad_field) {
    auto message_of = [](const nlohmann::json& j) -> std::string {
        try {
            (void)key::from_json(j);
        } catch (const invalid_argument_error& e) {
            return e.what();
        }
        return {};
    };
    auto good = key("r").to_json();

    auto no_token = good;
    no_token.erase("token");
    auto m = message_of(no_token);
    BOOST_TEST(m.find("token") != std::string::npos, "message: " << m);

    auto bad_resource = good;
    bad_resource["resource"] = 5;
    m = message_of(bad_resource);
    BOOST_TEST(m.find("resource") != std::string::npos, "message: " << m);

    auto empty_resource = good;
    empty_resource["resource"] = "";
    BOOST_TEST(!message_of(empty_resource).empty());

    BOOST_TEST(!message_of(nlohmann::json::array()).empty());
    BOOST_TEST(!message_of(nlohmann::json("text")).empty());
}

// Found by tests/fuzz/fuzz_key: std::stoi read " f", "-1" and "0x" as bytes of the name.
BOOST_AUTO_TEST_CASE(resource_hex_must_be_hexadecimal) {
    auto j = key("r").to_json();
    j.erase("resource");
    j["resource_hex"] = "ff41";
    BOOST_TEST(key::from_json(j).resource() == std::string("\xff"
                                                           "A"));
    for (const char* bad : {"-1", " f", "0x", "+f", "4g"}) {
        j["resource_hex"] = bad;
        BOOST_CHECK_THROW(key::from_json(j), invalid_argument_error);
    }
}

// Found by tests/fuzz/fuzz_key (UBSan): an expiry near 2^63 ms overflowed when converted to
// the clocks' nanoseconds (undefined behaviour; in practice a key expiring in the past).
BOOST_AUTO_TEST_CASE(expiry_out_of_range_is_refused) {
    auto j = key("r").to_json();
    for (std::int64_t bad : {std::numeric_limits<std::int64_t>::max(), std::int64_t(-1),
                             std::int64_t(9'300'000'000'000)}) {
        j["expires_at_unix_ms"] = bad;
        BOOST_CHECK_THROW(key::from_json(j), invalid_argument_error);
    }
    j["expires_at_unix_ms"] = std::numeric_limits<std::uint64_t>::max();
    BOOST_CHECK_THROW(key::from_json(j), invalid_argument_error);
    // An hour from now is an hour from now.
    const auto in_an_hour =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            (std::chrono::system_clock::now() + std::chrono::hours(1)).time_since_epoch())
            .count();
    j["expires_at_unix_ms"] = in_an_hour;
    const auto left = key::from_json(j).remaining_lifetime();
    BOOST_REQUIRE(left.has_value());
    BOOST_TEST(left->count() > 3'590'000);
    BOOST_TEST(left->count() <= 3'600'000);
}
