// SPDX-License-Identifier: MIT
// Helpers for strategy authors (<locksmith/author/strategy_support.hpp>, throw_errno) that no one
// strategy's tests cover alone.
#define BOOST_TEST_MODULE strategy_support
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>

using namespace locksmith;

BOOST_AUTO_TEST_CASE(sha256_matches_the_standard_vectors) {
    BOOST_TEST(sha256_hex("") ==
               "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    BOOST_TEST(sha256_hex("abc") ==
               "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // 56 bytes: the padding needs a second block.
    BOOST_TEST(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    BOOST_TEST(sha256_hex(std::string(1000000, 'a')) ==
               "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// throw_errno keeps the errno as the native code and says whether retrying may help.
BOOST_AUTO_TEST_CASE(throw_errno_says_whether_retrying_may_help) {
    auto thrown = [](int err) {
        try {
            throw_errno("test", "connecting", err);
        } catch (const backend_error& e) {
            BOOST_TEST(e.native_code() == "errno " + std::to_string(err));
            return e.kind();
        }
        return error_kind::unknown;
    };
    for (int err : {ECONNREFUSED, ECONNRESET, ETIMEDOUT, EAGAIN, EINTR, EMFILE})
        BOOST_TEST((thrown(err) == error_kind::transient), "errno " << err);
    for (int err : {EACCES, EPERM, ENOENT, EINVAL, EROFS})
        BOOST_TEST((thrown(err) == error_kind::permanent), "errno " << err);
    // The three-argument constructor, as strategies written before the kind use it.
    BOOST_TEST((backend_error("test", "x", "message").kind() == error_kind::unknown));
}

// A client library that is not installed names itself, the package to install and the strategy;
// one that is loads, and a function it lacks is named too.
BOOST_AUTO_TEST_CASE(client_library_names_the_library_the_package_and_the_strategy) {
    try {
        client_library("liblocksmith-no-such-client.so.9", "no-such-package", "test");
        BOOST_FAIL("loaded a library that does not exist");
    } catch (const backend_error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("test: ") == 0, what);
        BOOST_TEST(what.find("liblocksmith-no-such-client.so.9") != std::string::npos, what);
        BOOST_TEST(what.find("install the package no-such-package") != std::string::npos, what);
        BOOST_TEST(e.backend() == "test");
        BOOST_TEST((e.kind() == error_kind::permanent));
    }
    const client_library libc("libc.so.6", "libc6", "test");
    int (*get_pid)() = nullptr;
    libc.resolve(get_pid, "getpid");
    BOOST_TEST(get_pid() == ::getpid());
    BOOST_CHECK_EXCEPTION(libc.resolve(get_pid, "locksmith_no_such_function"), backend_error,
                          [](const backend_error& e) {
                              return std::string(e.what()).find("locksmith_no_such_function") !=
                                         std::string::npos &&
                                     e.kind() == error_kind::permanent;
                          });
}

BOOST_AUTO_TEST_CASE(scrub_secret_hides_every_occurrence) {
    BOOST_TEST(scrub_secret("pw and pw, pwx", "pw") == "*** and ***, ***x");
    BOOST_TEST(scrub_secret("nothing to hide", "") == "nothing to hide");
    // A secret that contains the mask is replaced once per occurrence, not forever.
    BOOST_TEST(scrub_secret("a***b", "***") == "a***b");
}

BOOST_AUTO_TEST_CASE(split_list_trims_items_and_keeps_empty_ones) {
    using v = std::vector<std::string>;
    BOOST_TEST(split_list(" a:1 ,b:2,  c ") == (v{"a:1", "b:2", "c"}));
    BOOST_TEST(split_list("a,,b") == (v{"a", "", "b"}));  // for the caller to refuse
    BOOST_TEST(split_list("") == (v{""}));
    BOOST_TEST(split_list("a,") == (v{"a", ""}));
    BOOST_TEST(split_list("/tmp;h", ';') == (v{"/tmp", "h"}));
}

BOOST_AUTO_TEST_CASE(json_too_deep_at_finds_the_first_bracket_past_the_limit) {
    BOOST_TEST(json_too_deep_at("[[1]]", 2) == std::string_view::npos);
    BOOST_TEST(json_too_deep_at(R"({"a":[{}]})", 2) == 6u);
    // Brackets in strings, escaped quotes included, are text.
    BOOST_TEST(json_too_deep_at(R"(["[[[\"[[{{", 1])", 1) == std::string_view::npos);
    // Siblings do not add up; only nesting does.
    BOOST_TEST(json_too_deep_at("[[],[],[[]]]", 3) == std::string_view::npos);
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    BOOST_TEST(json_too_deep_at(deep, 64) == 64u);
}

// A socket whose peer closed counts as closed; an idle open one does not.
BOOST_AUTO_TEST_CASE(socket_closed_by_peer_sees_a_hang_up) {
    int fds[2];
    BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    BOOST_TEST(!socket_closed_by_peer(fds[0]));
    ::close(fds[1]);
    BOOST_TEST(socket_closed_by_peer(fds[0]));
    ::close(fds[0]);
    BOOST_TEST(socket_closed_by_peer(-1));
}
