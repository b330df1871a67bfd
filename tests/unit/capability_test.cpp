// SPDX-License-Identifier: MIT
// Capabilities: TYPO3's values, the text form and its errors.
#define BOOST_TEST_MODULE capability
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string>

#include <locksmith/capability.hpp>
#include <locksmith/errors.hpp>

#include "support/printers.hpp"

using namespace locksmith;

// TYPO3's LockingStrategyInterface constants must keep their values: configs and callers that
// pass 1/2/4 as numbers rely on them.
static_assert(std::uint32_t(capability::exclusive) == 1);
static_assert(std::uint32_t(capability::shared) == 2);
static_assert(std::uint32_t(capability::noblock) == 4);
static_assert(std::uint32_t(capability::native_wait) == 8);
static_assert(std::uint32_t(capability::consensus) == 1024);
static_assert(std::uint32_t(capability::counting) == 2048);
static_assert(has(capability::exclusive | capability::shared, capability::shared));
static_assert(!has(capability::exclusive, capability::exclusive | capability::shared));
static_assert(has(capability::exclusive, capability::none));

namespace {

// what() of the exception `f` throws; empty when it throws nothing.
template <class F>
std::string invalid_argument_message(F&& f) {
    try {
        f();
    } catch (const invalid_argument_error& e) {
        return e.what();
    }
    return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(typo3_numbers_parse) {
    BOOST_TEST(parse_capabilities("1") == capability::exclusive);
    BOOST_TEST(parse_capabilities("2") == capability::shared);
    BOOST_TEST(parse_capabilities("4") == capability::noblock);
    BOOST_TEST(parse_capabilities("7") ==
               (capability::exclusive | capability::shared | capability::noblock));
}

BOOST_AUTO_TEST_CASE(names_print_in_bit_order) {
    BOOST_TEST(to_string(capability::noblock | capability::exclusive) == "exclusive|noblock");
    BOOST_TEST(to_string(capability::none) == "none");
    BOOST_TEST(to_string(capability::consensus) == "consensus");
    BOOST_TEST(to_string(capability::counting) == "counting");
    BOOST_TEST(parse_capabilities("exclusive|counting") ==
               (capability::exclusive | capability::counting));
    BOOST_TEST(capability_name(capability::crash_release) == "crash_release");
    BOOST_TEST(capability_name(capability::none) == "none");
}

BOOST_AUTO_TEST_CASE(every_set_round_trips) {
    for (std::uint32_t bits = 1; bits < 2048; ++bits) {
        auto set = capability(bits);
        auto text = to_string(set);
        BOOST_TEST_CONTEXT("bits " << bits << " text " << text) {
            BOOST_TEST(parse_capabilities(text) == set);
            BOOST_TEST(parse_capabilities(std::to_string(bits)) == set);
        }
    }
}

BOOST_AUTO_TEST_CASE(every_single_name_parses) {
    for (auto bit : all_capabilities) BOOST_TEST(parse_capabilities(capability_name(bit)) == bit);
}

BOOST_AUTO_TEST_CASE(comma_and_bar_separate) {
    auto want = capability::exclusive | capability::distributed;
    BOOST_TEST(parse_capabilities("exclusive|distributed") == want);
    BOOST_TEST(parse_capabilities("exclusive,distributed") == want);
    BOOST_TEST(parse_capabilities(" exclusive | distributed ") == want);
    BOOST_TEST(parse_capabilities("distributed, exclusive") == want);
    BOOST_TEST(parse_capabilities("exclusive|exclusive") == capability::exclusive);
}

BOOST_AUTO_TEST_CASE(unknown_name_is_named_in_the_error) {
    auto message = invalid_argument_message([] { parse_capabilities("exclusive|exlcusive"); });
    BOOST_TEST(!message.empty());
    BOOST_TEST(message.find("exlcusive") != std::string::npos, message);

    message = invalid_argument_message([] { parse_capabilities("frobnicate"); });
    BOOST_TEST(message.find("frobnicate") != std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(names_are_case_sensitive) {
    auto message = invalid_argument_message([] { parse_capabilities("Exclusive"); });
    BOOST_TEST(message.find("Exclusive") != std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(empty_text_is_an_error) {
    BOOST_CHECK_THROW(parse_capabilities(""), invalid_argument_error);
    BOOST_CHECK_THROW(parse_capabilities("   "), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(empty_word_between_separators_is_an_error) {
    // "exclusive||noblock" is a typo, not a request for exclusive|noblock.
    BOOST_CHECK_THROW(parse_capabilities("exclusive||noblock"), invalid_argument_error);
    BOOST_CHECK_THROW(parse_capabilities("exclusive,"), invalid_argument_error);
}

BOOST_AUTO_TEST_CASE(operators) {
    auto set = capability::exclusive;
    set |= capability::shared;
    BOOST_TEST(set == (capability::exclusive | capability::shared));
    set &= capability::shared;
    BOOST_TEST(set == capability::shared);
    BOOST_TEST(((~capability::shared) & capability::shared) == capability::none);
    BOOST_TEST(has(~capability::none, capability::consensus));
}
