// SPDX-License-Identifier: MIT
// Counting semaphores on the memcached strategy (issue 27) against the memcached of
// scripts/services.sh (LOCKSMITH_TEST_MEMCACHED): permit items added with their TTL, the limit
// item beside them, and what another client (or memcached's eviction) does to either; each case
// names the path it guards (tests/mutants/faults.txt).
#define BOOST_TEST_MODULE memcached_semaphore_integration
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/memcached.hpp>

#include "integration/integration_support.hpp"
#include "support/child_process.hpp"
#include "support/permit_helpers.hpp"
#include "support/printers.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
using locksmith::test::contains;
using locksmith::test::endpoint;
using locksmith::test::make_permit;

namespace {

constexpr const char* servers_variable = "LOCKSMITH_TEST_MEMCACHED";

// Fixed at start-up, so that forked children (which compute nothing anew) share it.
const std::string test_prefix = "locksmith-sem:" + std::to_string(::getpid()) + ":";

std::shared_ptr<store> store_for(const std::string& servers) {
    strategies::memcached_options o;
    o.servers = strategies::parse_memcached_servers(servers);
    o.key_prefix = test_prefix;
    o.connect_timeout = 500ms;
    o.command_timeout = 1000ms;
    return strategies::make_memcached_store(o);
}

std::shared_ptr<store> shared_store() {
    return store_for(endpoint(servers_variable));
}

// Another client of the same memcached: one request on a fresh socket, its first reply line and
// the data block of a VA reply.
std::string raw(const std::string& request, int port = 0) {
    const auto servers = strategies::parse_memcached_servers(endpoint(servers_variable));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(std::uint16_t(port != 0 ? port : servers.front().second));
    ::inet_pton(AF_INET, port != 0 ? "127.0.0.1" : servers.front().first.c_str(), &a.sin_addr);
    BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    BOOST_REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                  ssize_t(request.size()));
    std::string reply;
    char c = 0;
    while (::recv(fd, &c, 1, 0) == 1) {
        reply += c;
        if (reply.ends_with("\r\n") && !reply.starts_with("VA ")) break;
        if (reply.starts_with("VA ") && std::count(reply.begin(), reply.end(), '\n') == 2) break;
    }
    ::close(fd);
    return reply;
}

std::string base_of(const std::string& name) {
    return strategies::memcached_semaphore_key(test_prefix, name);
}

// Writes `value` into `item` as another program would (a plain set, no expiry).
void plant(const std::string& item, const std::string& value) {
    BOOST_REQUIRE(raw("ms " + item + " " + std::to_string(value.size()) + " T0\r\n" + value +
                      "\r\n") == "HD\r\n");
}

bool present(const std::string& item, int port = 0) {
    return raw("mg " + item + "\r\n", port) == "HD\r\n";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memcached_permits,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          servers_variable}))

// Guards: the items behind a semaphore (the limit and the permits' numbers themselves are the
// conformance suite's counting_limit_kept_and_permits_numbered): the limit item, never expiring;
// a permit item naming its owner and the limit; no item beyond the limit; a released permit's
// item deleted; a limit beyond 1000 refused before any write.
BOOST_AUTO_TEST_CASE(the_limit_and_the_permits_are_items) {
    const std::string name = test::unique_resource("three");
    auto s = shared_store();
    auto a = make_permit(s, name, 3), b = make_permit(s, name, 3), c = make_permit(s, name, 3);
    BOOST_TEST(a.try_acquire());
    BOOST_TEST(b.try_acquire());
    BOOST_TEST(c.try_acquire());
    const auto base = base_of(name);
    BOOST_TEST(raw("mg " + base + ".limit v t\r\n") == "VA 1 t-1\r\n3\r\n");
    BOOST_TEST(contains(raw("mg " + base + ".permit." + b.permit() + " v\r\n"),
                        b.owner()->token() + " 3"));
    BOOST_TEST(!present(base + ".permit.4"));
    const auto freed = b.permit();
    b.release();
    BOOST_TEST(!present(base + ".permit." + freed));
    a.release();
    c.release();
    // Beyond 1000 (a full semaphore's attempt tries every permit): refused before any write.
    const std::string big = test::unique_resource("big");
    auto too_many = make_permit(s, big, 1001);
    BOOST_CHECK_THROW((void)too_many.try_acquire(), invalid_argument_error);
    BOOST_TEST(!present(base_of(big) + ".limit"));
    BOOST_TEST(!present(base_of(big) + ".permit.1"));
}

// Guards: the limit read after the add. Another limit is refused naming both and the item to
// delete, whether a permit is free or not, and the permit taken on the way is given back.
BOOST_AUTO_TEST_CASE(a_second_limit_is_refused_naming_both) {
    const std::string name = test::unique_resource("limits");
    const auto base = base_of(name);
    auto s = shared_store();
    auto a = make_permit(s, name, 2);
    BOOST_REQUIRE(a.try_acquire());
    auto b = make_permit(shared_store(), name, 3);
    try {
        (void)b.try_acquire();
        BOOST_ERROR("a second limit was granted");
    } catch (const invalid_argument_error& e) {
        const std::string m = e.what();
        BOOST_TEST(contains(m, "limit of 2"), m);
        BOOST_TEST(contains(m, "asks for 3"), m);
        BOOST_TEST(contains(m, "md " + base + ".limit"), m);
    }
    BOOST_TEST(!b.held());
    BOOST_TEST(!present(base + ".permit.2"));  // taken on the way, given back
    auto full = make_permit(s, name, 2);
    BOOST_REQUIRE(full.try_acquire());
    auto one = make_permit(s, name, 1);  // every permit it would try is held
    BOOST_CHECK_THROW((void)one.try_acquire(), invalid_argument_error);
    a.release();
    full.release();
}

// Guards: the permit's TTL. A holder that stops renewing loses its permit when the TTL runs out
// (memcached keeps whole seconds, plus one), and the next owner gets it.
BOOST_AUTO_TEST_CASE(an_expired_permit_is_reclaimed) {
    const std::string name = test::unique_resource("expiry");
    auto s = shared_store();
    lock_options o;
    o.ttl = 1s;
    o.auto_refresh = false;
    auto holder = make_permit(s, name, 1, o);
    BOOST_REQUIRE(holder.try_acquire());
    auto next = make_permit(shared_store(), name, 1);
    BOOST_TEST(!next.try_acquire());
    const auto start = std::chrono::steady_clock::now();
    BOOST_TEST(next.try_acquire_for(10s));
    BOOST_TEST(test::ms_since(start) >= 900.0);
    BOOST_TEST(!holder.is_acquired());
    next.release();
}

// Guards: the limit item's check. What another program writes there is an error naming the
// item, never a grant, and the permit taken on the way is given back; a valid other limit is
// a mismatch.
BOOST_AUTO_TEST_CASE(nonsense_in_the_limit_item_is_a_clear_error) {
    auto s = shared_store();
    for (const std::string value : {"garbage", "99999999999999999999", "4294967296", "0", "-1",
                                    "03", " 3", "3 ", "", "1000001"}) {
        BOOST_TEST_CONTEXT("limit item '" << value << "'") {
            const std::string name = test::unique_resource("bad-limit");
            const auto base = base_of(name);
            plant(base + ".limit", value);
            auto p = make_permit(s, name, 3);
            try {
                (void)p.try_acquire();
                BOOST_ERROR("granted");
            } catch (const backend_error& e) {
                BOOST_TEST(e.native_code() == "foreign");
                BOOST_TEST(contains(e.what(), base + ".limit"), e.what());
                BOOST_TEST(contains(e.what(), "not a semaphore limit"), e.what());
            }
            BOOST_TEST(!p.held());
            BOOST_TEST(!present(base + ".permit.1"));
            BOOST_CHECK_THROW(s->status(name), backend_error);
        }
    }
    const std::string name = test::unique_resource("huge-limit");
    plant(base_of(name) + ".limit", "1000000");
    auto p = make_permit(s, name, 3);
    BOOST_CHECK_THROW((void)p.try_acquire(), invalid_argument_error);
    BOOST_TEST(!present(base_of(name) + ".permit.1"));
}

// What another program writes into a permit item takes that permit out of use: its holder loses
// it, nobody is granted it, and never more than the limit hold.
BOOST_AUTO_TEST_CASE(nonsense_in_a_permit_item_means_fewer_holders_never_more) {
    const std::string name = test::unique_resource("bad-permit");
    const auto base = base_of(name);
    auto s = shared_store();
    auto a = make_permit(s, name, 2);
    BOOST_REQUIRE(a.try_acquire());
    for (const std::string value : {"garbage", "0", "-1", "99999999999999999999", ""}) {
        BOOST_TEST_CONTEXT("permit item '" << value << "'") {
            plant(base + ".permit.1", value);
            BOOST_TEST(!s->holds(*a.owner()));
            auto b = make_permit(s, name, 2), c = make_permit(s, name, 2);
            BOOST_TEST(b.try_acquire());
            BOOST_TEST(b.permit() == "2");
            BOOST_TEST(!c.try_acquire());
            b.release();
        }
    }
    BOOST_CHECK_THROW(a.refresh(), acquire_error);
    a.release();  // not its item any more: left alone
    BOOST_TEST(present(base + ".permit.1"));
    BOOST_TEST(raw("md " + base + ".permit.1\r\n") == "HD\r\n");
    auto d = make_permit(s, name, 2);
    BOOST_TEST(d.try_acquire());
    BOOST_TEST(d.permit() == "1");
    d.release();
}

// Guards: the scan before a lost limit item is written again. memcached may evict the limit
// item (or an admin delete it) while permits are held: an owner of another limit is refused by
// the permits' own limits, one of the same limit writes it again, and with no permit held the
// next owner's limit is the name's.
BOOST_AUTO_TEST_CASE(a_lost_limit_item_cannot_raise_the_limit) {
    const std::string name = test::unique_resource("lost-limit");
    const auto base = base_of(name);
    auto s = shared_store();
    auto a = make_permit(s, name, 2), b = make_permit(s, name, 2);
    BOOST_REQUIRE(a.try_acquire());
    BOOST_REQUIRE(b.try_acquire());
    BOOST_REQUIRE(raw("md " + base + ".limit\r\n") == "HD\r\n");  // evicted
    auto more = make_permit(s, name, 4);
    try {
        (void)more.try_acquire();
        BOOST_ERROR("a lost limit item let a larger limit in: 3 holders of 2");
    } catch (const invalid_argument_error& e) {
        BOOST_TEST(contains(e.what(), "limit of 2"), e.what());
        BOOST_TEST(contains(e.what(), "asks for 4"), e.what());
    }
    BOOST_TEST(!present(base + ".permit.3"));
    BOOST_TEST(!present(base + ".limit"));
    b.release();
    auto same = make_permit(s, name, 2);
    BOOST_TEST(same.try_acquire());  // writes it again
    BOOST_TEST(raw("mg " + base + ".limit v\r\n") == "VA 1\r\n2\r\n");
    BOOST_CHECK_THROW((void)more.try_acquire(), invalid_argument_error);
    a.release();
    same.release();
    BOOST_REQUIRE(raw("md " + base + ".limit\r\n") == "HD\r\n");  // deleted by an admin
    BOOST_TEST(more.try_acquire());                               // nothing held: 4 now
    BOOST_TEST(raw("mg " + base + ".limit v\r\n") == "VA 1\r\n4\r\n");
    more.release();
}

// Names that cannot be item keys as they are (spaces, bytes beyond ASCII, too long for the
// suffixes) are hashed, and count as any other.
BOOST_AUTO_TEST_CASE(odd_names_count_too) {
    auto s = shared_store();
    for (const std::string name :
         {test::unique_resource("with space"), test::unique_resource("caf\xc3\xa9"),
          test::unique_resource(std::string(235, 'n'))}) {
        BOOST_TEST_CONTEXT(name.size() << " bytes") {
            const auto base = base_of(name);
            BOOST_TEST(base.size() + 12 <= 250u);
            BOOST_TEST(contains(base, "#"));
            auto a = make_permit(s, name, 1), b = make_permit(s, name, 1);
            BOOST_TEST(a.try_acquire());
            BOOST_TEST(!b.try_acquire());
            BOOST_TEST(present(base + ".permit.1"));
            a.release();
            BOOST_TEST(b.try_acquire());
            b.release();
        }
    }
}

// A key serialized by the holder releases its permit in another process.
BOOST_AUTO_TEST_CASE(a_serialized_permit_is_released_elsewhere) {
    const std::string name = test::unique_resource("serialized");
    const std::string servers = endpoint(servers_variable);
    auto s = shared_store();
    auto k = std::make_shared<key>(name);
    k->set_limit(1);
    BOOST_REQUIRE(s->try_acquire(*k, lock_mode::exclusive, 30s));
    const auto saved = k->to_json();
    pid_t child = test::fork_child([&] {
        auto copy = key::from_json(saved);
        auto there = store_for(servers);
        if (!there->holds(copy)) return 2;
        there->release(copy);
        return there->holds(copy) ? 3 : 0;
    });
    BOOST_TEST(test::wait_child(child, 30s) == 0);
    auto next = make_permit(s, name, 1);
    BOOST_TEST(next.try_acquire());
    next.release();
}

// With several servers a name's limit and permit items all live on the server of its base,
// whatever the permit's number: one server decides every grant of the name.
BOOST_AUTO_TEST_CASE(several_servers_keep_a_names_items_together) {
    const int port = test::free_port();
    test::private_server server(test::private_memcached_argv(port), port);
    const int shared_port =
        strategies::parse_memcached_servers(endpoint(servers_variable)).front().second;
    auto s = store_for(endpoint(servers_variable) + ",127.0.0.1:" + std::to_string(port));
    int on_shared = 0, on_private = 0;
    for (int n = 0; n < 16; ++n) {
        const std::string name = test::unique_resource("spread");
        const auto base = base_of(name);
        std::vector<named_semaphore> permits;
        for (int i = 0; i < 3; ++i) {
            permits.push_back(make_permit(s, name, 3));
            BOOST_REQUIRE(permits.back().try_acquire());
        }
        const bool here = present(base + ".limit", shared_port);
        BOOST_TEST(here != present(base + ".limit", port));
        for (int i = 1; i <= 3; ++i) {
            const auto item = base + ".permit." + std::to_string(i);
            BOOST_TEST(present(item, here ? shared_port : port));
            BOOST_TEST(!present(item, here ? port : shared_port));
        }
        ++(here ? on_shared : on_private);
        for (auto& p : permits) p.release();
    }
    // 16 names: both servers get some but once in 32768 runs.
    BOOST_TEST(on_shared > 0, on_private << " of 16 names on the private server");
    BOOST_TEST(on_private > 0, on_shared << " of 16 names on the shared server");
}

// What a restart leaves (README): every permit and the limit are gone. The holder learns it at
// its next refresh, the name is free again, the next owner's limit is kept, and the holder's
// release does not take the CAS id a restarted server hands out again for another's permit.
BOOST_AUTO_TEST_CASE(a_restart_drops_the_permits_and_the_limit) {
    const int port = test::free_port();
    test::private_server server(test::private_memcached_argv(port), port);
    auto s = store_for("127.0.0.1:" + std::to_string(port));
    const std::string name = test::unique_resource("restart");
    key holder(name);
    holder.set_limit(2);
    BOOST_REQUIRE(s->try_acquire(holder, lock_mode::exclusive, 30s));
    server.stop();
    server.start();
    key next(name);
    next.set_limit(3);  // the restart forgot the limit of 2
    BOOST_REQUIRE(s->try_acquire(next, lock_mode::exclusive, 30s));
    BOOST_TEST(next.portable_state()["permit"] == 1);  // the holder's permit, given again
    s->release(holder);
    BOOST_TEST(s->holds(next));
    BOOST_TEST(!s->refresh(holder, 30s));
    BOOST_TEST(s->holds(next));
    BOOST_CHECK_THROW(s->try_acquire(holder, lock_mode::exclusive, 30s), invalid_argument_error);
    s->release(next);
    BOOST_TEST(!s->holds(next));
}

BOOST_AUTO_TEST_SUITE_END()
