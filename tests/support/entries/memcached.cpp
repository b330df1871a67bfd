// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

// Memcached keeps whole seconds and the store adds one (its clock ticks once a second), so a
// 1 s TTL lives 2-3 s: expiry cases need TTLs of several seconds.
strategy_under_test entry_memcached() {
    if (auto servers = env("LOCKSMITH_TEST_MEMCACHED"))
        return {"memcached",
                nlohmann::json{{"servers", *servers}, {"key_prefix", remote_test_prefix()}}, "",
                false, std::chrono::milliseconds(2000)};
    return unavailable("memcached", "LOCKSMITH_TEST_MEMCACHED");
}

}  // namespace locksmith::test
