// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"
#include "support/test_environment.hpp"

namespace locksmith::test {

strategy_under_test entry_redis() {
    if (auto url = env("LOCKSMITH_TEST_REDIS_URL"))
        return {"redis", nlohmann::json{{"url", *url}, {"key_prefix", remote_test_prefix()}}, ""};
    return unavailable("redis", "LOCKSMITH_TEST_REDIS_URL");
}

// Over TLS (rediss://), to services.sh's redis-tls: client certificate, password.
strategy_under_test entry_redis_tls() {
    const auto url = env("LOCKSMITH_TEST_REDIS_TLS_URL");
    const auto tls = env("LOCKSMITH_TEST_TLS_DIR");
    if (!url || !tls)
        return unavailable("redis", "LOCKSMITH_TEST_REDIS_TLS_URL or LOCKSMITH_TEST_TLS_DIR");
    return {"redis",
            nlohmann::json{{"url", *url},
                           {"key_prefix", remote_test_prefix()},
                           {"ca_file", *tls + "/ca.pem"},
                           {"cert_file", *tls + "/client.pem"},
                           {"key_file", *tls + "/client.key"}},
            ""};
}

// Behind Sentinel (services.sh's redis-sentinel: a master, its replica, three Sentinels, every
// one with a password): every grant waits for the replica (WAIT 1).
strategy_under_test entry_redis_sentinel() {
    const auto sentinels = env("LOCKSMITH_TEST_REDIS_SENTINELS");
    const auto master = env("LOCKSMITH_TEST_REDIS_SENTINEL_MASTER");
    const auto password = env("LOCKSMITH_TEST_REDIS_SENTINEL_PASSWORD");
    if (!sentinels || !master || !password)
        return unavailable(
            "redis", "LOCKSMITH_TEST_REDIS_SENTINELS, _SENTINEL_MASTER or _SENTINEL_PASSWORD");
    return {"redis",
            nlohmann::json{{"sentinels", endpoint_list(*sentinels)},
                           {"master_name", *master},
                           {"sentinel_password", *password},
                           {"password", *password},
                           {"key_prefix", remote_test_prefix()}},
            ""};
}

// On a Redis Cluster (services.sh's redis-cluster: three masters, a replica of each, a
// password): names spread over the masters, every grant waits for the replica. Three of the six
// nodes are named, as a config would: each one that is dead or silent costs the first map its
// connect and command timeouts (the hostile suite's bound is 9 s).
strategy_under_test entry_redis_cluster() {
    const auto nodes = env("LOCKSMITH_TEST_REDIS_CLUSTER");
    const auto password = env("LOCKSMITH_TEST_REDIS_CLUSTER_PASSWORD");
    if (!nodes || !password)
        return unavailable("redis", "LOCKSMITH_TEST_REDIS_CLUSTER or _CLUSTER_PASSWORD");
    return {"redis",
            nlohmann::json{{"cluster", endpoint_list(*nodes, 3)},
                           {"password", *password},
                           {"key_prefix", remote_test_prefix()}},
            ""};
}

}  // namespace locksmith::test
