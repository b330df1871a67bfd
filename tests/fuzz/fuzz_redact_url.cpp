// SPDX-License-Identifier: MIT
// redact_url, which every message and listing that shows an endpoint goes through. The input is
// "<scheme>\n<user>\n<password>\n<rest>", from which the target builds the URL
// <scheme>://<user>:<password>@<rest> (without "<scheme>://" when the scheme is empty: a URL
// written without its scheme, as a message about a malformed one shows it). Properties:
//  - the redacted URL never contains the password;
//  - redacting twice changes nothing (a redacted URL is safe to pass around and redact again).
// Inputs whose pieces join into another shape are not checked for the password: a scheme made
// of the user and the password ("mysql" + ":" + "//x@": the "password" is then the userinfo),
// and a text that is no URL but starts with "keyword=", which is keyword/value (libpq's form),
// where the words of the "password" are keywords and values of their own, not a URL's password:
// what redaction shows of that form (keywords, plain host/port/dbname/user values) is checked by
// fuzz_pg_dsn, so only the second property applies to it.
#include <locksmith/options.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The length of "scheme://" at the start of `text` as redact_url reads it (RFC 3986: a letter,
// then letters, digits, '+', '-', '.'), or 0.
std::size_t scheme_end(std::string_view text) {
    if (text.empty() || is_alnum(text[0]) == (text[0] >= '0' && text[0] <= '9')) return 0;
    std::size_t i = 1;
    while (i < text.size() &&
           (is_alnum(text[i]) || std::string_view("+-.").find(text[i]) != std::string_view::npos))
        ++i;
    return text.substr(i, 3) == "://" ? i + 3 : 0;
}

// Whether redact_url reads `text` as keyword/value: no scheme, and, after blanks, a keyword
// ([A-Za-z0-9_]+) and blanks before '='.
bool keyword_value(std::string_view text) {
    constexpr std::string_view blanks = " \t\n\r\f\v";
    if (scheme_end(text) != 0) return false;
    auto i = text.find_first_not_of(blanks);
    if (i == std::string_view::npos) return false;
    const auto start = i;
    while (i < text.size() && (is_alnum(text[i]) || text[i] == '_')) ++i;
    if (i == start) return false;
    while (i < text.size() && blanks.find(text[i]) != std::string_view::npos) ++i;
    return i < text.size() && text[i] == '=';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view input = fuzz::as_text(data, size);
    std::string_view fields[3];
    for (auto& field : fields) {
        const auto end = input.find('\n');
        if (end == std::string_view::npos) return 0;
        field = input.substr(0, end);
        input.remove_prefix(end + 1);
    }
    const auto [scheme, user, password] = fields;
    std::string url;
    if (!scheme.empty()) url = std::string(scheme) + "://";
    url += std::string(user) + ":" + std::string(password) + "@" + std::string(input);

    const auto shown = redact_url(url);
    // No scheme longer than the one the input gave (not "mysql" + ":" + "//..." made of the
    // user and the password), and not keyword/value.
    const std::size_t built_scheme = scheme.empty() ? 0 : scheme.size() + 3;
    if (scheme_end(url) <= built_scheme && !keyword_value(url))
        check(!fuzz::reveals(shown, url, password), "redact_url shows the password",
              url + " -> " + shown);
    check(redact_url(shown) == shown, "redact_url changes a redacted URL", shown);
    return 0;
}
