// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

// Lease TTLs are whole seconds at etcd (rounded up), at least etcd's minimum (1.5 s with the
// default 100 ms heartbeat, so 2 s), and its expiry sweep runs twice a second: a TTL of 1 s lives
// 2-2.5 s, so expiry cases need TTLs of several seconds.
constexpr std::chrono::milliseconds etcd_clock_delay{2000};

strategy_under_test entry_etcd() {
    if (auto endpoints = env("LOCKSMITH_TEST_ETCD"))
        return {"etcd", nlohmann::json{{"endpoints", *endpoints}, {"prefix", remote_test_prefix()}},
                "", false, etcd_clock_delay};
    return unavailable("etcd", "LOCKSMITH_TEST_ETCD", etcd_clock_delay);
}

// The 3-member cluster with TLS and client certificates (services.sh's etcd-cluster, the
// certificates of its `certs`).
strategy_under_test entry_etcd_tls_cluster() {
    const auto endpoints = env("LOCKSMITH_TEST_ETCD_CLUSTER");
    const auto tls = env("LOCKSMITH_TEST_TLS_DIR");
    if (!endpoints || !tls)
        return unavailable("etcd", "LOCKSMITH_TEST_ETCD_CLUSTER or LOCKSMITH_TEST_TLS_DIR",
                           etcd_clock_delay);
    return {"etcd",
            nlohmann::json{{"endpoints", *endpoints},
                           {"prefix", remote_test_prefix()},
                           {"ca_file", *tls + "/ca.pem"},
                           {"cert_file", *tls + "/client.pem"},
                           {"key_file", *tls + "/client.key"}},
            "", false, etcd_clock_delay};
}

}  // namespace locksmith::test
