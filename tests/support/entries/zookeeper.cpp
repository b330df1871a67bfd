// SPDX-License-Identifier: MIT
#include <signal.h>

#include <thread>

#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

// A short session timeout, so that a killed holder frees its locks within seconds.
strategy_under_test entry_zookeeper() {
    const auto hosts = env("LOCKSMITH_TEST_ZOOKEEPER");
    if (!hosts) return unavailable("zookeeper", "LOCKSMITH_TEST_ZOOKEEPER");
    strategy_under_test e{
        "zookeeper",
        nlohmann::json{
            {"hosts", *hosts}, {"session_timeout_ms", 2000}, {"root", "/" + remote_test_prefix()}},
        ""};
    // A session ends when the server hears nothing for its timeout: the holder stopped that
    // long (the server expires it), then resumed.
    e.end_session = [](pid_t holder) {
        ::kill(holder, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(2000) + std::chrono::seconds(2));
        ::kill(holder, SIGCONT);
    };
    return e;
}

// On the three-server ensemble, with auth (the production form: issue 24).
strategy_under_test entry_zookeeper_ensemble() {
    const auto hosts = env("LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE");
    if (!hosts) return unavailable("zookeeper", "LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE");
    return {"zookeeper",
            nlohmann::json{{"hosts", *hosts},
                           {"session_timeout_ms", 2000},
                           {"root", "/" + remote_test_prefix() + "-ensemble"},
                           {"auth", "digest:locksmith-test:" + remote_test_prefix()}},
            ""};
}

}  // namespace locksmith::test
