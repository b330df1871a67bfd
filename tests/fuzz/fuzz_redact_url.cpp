// SPDX-License-Identifier: MIT
// redact_url, which every message and listing that shows an endpoint goes through. The input is
// "<scheme>\n<user>\n<password>\n<rest>", from which the target builds the URL
// <scheme>://<user>:<password>@<rest> (without "<scheme>://" when the scheme is empty: a URL
// written without its scheme, as a message about a malformed one shows it). Properties:
//  - the redacted URL never contains the password;
//  - redacting twice changes nothing (a redacted URL is safe to pass around and redact again).
#include <locksmith/options.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

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
    check(!fuzz::reveals(shown, url, password), "redact_url shows the password",
          url + " -> " + shown);
    check(redact_url(shown) == shown, "redact_url changes a redacted URL", shown);
    return 0;
}
