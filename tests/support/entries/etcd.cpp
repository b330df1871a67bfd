// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

// Lease TTLs are whole seconds at etcd (rounded up), at least etcd's minimum (1.5 election
// timeouts, rounded up), and its expiry sweep runs twice a second. services.sh starts the test
// servers with a 500 ms election timeout: a TTL of 1 s lives 1-1.5 s (with etcd's default 1 s,
// 2-2.5 s: against such a server this must be 2000). A leader change renews every lease to its
// TTL plus the election timeout: measured under two CPU burners, as rare with 500 ms as with 1 s.
constexpr std::chrono::milliseconds etcd_clock_delay{1000};

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
