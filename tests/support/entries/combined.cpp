// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

// A consensus of three independent redis servers, each with the run's prefix.
strategy_under_test entry_combined() {
    const auto urls = env("LOCKSMITH_TEST_REDIS_QUORUM");
    if (!urls) return unavailable("combined", "LOCKSMITH_TEST_REDIS_QUORUM");
    auto members = nlohmann::json::array();
    for (const auto& url : endpoint_list(*urls))
        members.push_back({{"strategy", "redis"},
                           {"options", {{"url", url}, {"key_prefix", remote_test_prefix()}}}});
    return {"combined", nlohmann::json{{"quorum", "consensus"}, {"members", members}}, ""};
}

}  // namespace locksmith::test
