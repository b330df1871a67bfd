// Helpers for strategy authors (<locksmith/author/strategy_support.hpp>, throw_errno) that no one
// strategy's tests cover alone.
#define BOOST_TEST_MODULE strategy_support
#include <boost/test/unit_test.hpp>

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
