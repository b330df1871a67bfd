// SPDX-License-Identifier: MIT
// combined over three real redis-servers of the test's own, one of which is stopped: what the
// quorum rules promise when a member is really down (the unit tests use doubles for the same).
#define BOOST_TEST_MODULE combined_integration
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <locksmith/locksmith.hpp>

#include "integration/integration_support.hpp"
#include "support/suite_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;

namespace {

struct three_redis {
    std::vector<std::unique_ptr<test::private_server>> servers;
    three_redis() {
        for (int i = 0; i < 3; ++i) {
            const int port = test::free_port();
            servers.push_back(
                std::make_unique<test::private_server>(test::private_redis_argv(port), port));
        }
    }
    std::shared_ptr<store> combined(const std::string& quorum) const {
        auto members = nlohmann::json::array();
        for (const auto& s : servers)
            members.push_back({{"strategy", "redis"},
                               {"options",
                                {{"url", "redis://127.0.0.1:" + std::to_string(s->port()) + "/0"},
                                 {"connect_timeout_s", 1},
                                 {"command_timeout_s", 1}}}});
        auto d = default_registry().find("combined");
        BOOST_REQUIRE(d);
        return d->create({{"quorum", quorum}, {"members", members}});
    }
    // A lock on member `i` alone, to look at what the combined lock left there.
    named_lock on_member(std::size_t i, const std::string& name) const {
        auto d = default_registry().find("redis");
        BOOST_REQUIRE(d);
        auto s =
            d->create({{"url", "redis://127.0.0.1:" + std::to_string(servers[i]->port()) + "/0"}});
        return named_lock(s, std::make_shared<key>(name));
    }
};

named_lock make_lock(std::shared_ptr<store> s, const std::string& name) {
    lock_options o;
    o.ttl = 10s;
    return named_lock(std::move(s), std::make_shared<key>(name), o);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(combined_over_real_redis)

BOOST_AUTO_TEST_CASE(one_member_down_still_grants_under_consensus_and_excludes) {
    three_redis r;
    const auto name = test::unique_resource("consensus");
    auto s = r.combined("consensus");
    r.servers[2]->stop();
    auto a = make_lock(s, name);
    BOOST_TEST(a.try_lock());
    BOOST_TEST(a.is_acquired());
    auto b = make_lock(r.combined("consensus"), name);
    BOOST_TEST(!b.try_lock());  // the two live members are held by `a`
    a.unlock();
    BOOST_TEST(b.try_lock());
    b.unlock();
}

BOOST_AUTO_TEST_CASE(one_member_down_refuses_under_unanimous_and_leaves_no_grant) {
    three_redis r;
    const auto name = test::unique_resource("unanimous");
    auto s = r.combined("unanimous");
    r.servers[1]->stop();
    auto a = make_lock(s, name);
    bool granted = true;
    try {
        granted = a.try_lock();
    } catch (const backend_error& e) {
        granted = false;
        BOOST_TEST_MESSAGE("refused with: " << e.what());
    }
    BOOST_TEST(!granted);
    BOOST_TEST(!a.is_acquired());
    // The partial grants on the live members were rolled back: each is free on its own. (A
    // member whose grant came after the round was decided is rolled back on its own thread.)
    for (std::size_t i : {0u, 2u}) {
        auto direct = r.on_member(i, name);
        BOOST_TEST(test::eventually([&] { return direct.try_lock(); }),
                   "member " << i << " still holds a partial grant");
        direct.unlock();
    }
}

BOOST_AUTO_TEST_CASE(two_members_down_refuse_under_consensus) {
    three_redis r;
    const auto name = test::unique_resource("minority");
    auto s = r.combined("consensus");
    r.servers[0]->stop();
    r.servers[1]->stop();
    auto a = make_lock(s, name);
    bool granted = true;
    try {
        granted = a.try_lock();
    } catch (const backend_error&) {
        granted = false;
    }
    BOOST_TEST(!granted);
    auto direct = r.on_member(2, name);
    BOOST_TEST(direct.try_lock(), "the live member still holds a partial grant");
}

BOOST_AUTO_TEST_SUITE_END()
