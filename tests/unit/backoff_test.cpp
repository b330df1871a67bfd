// SPDX-License-Identifier: MIT
// backoff: the polling schedule for stores that cannot wait natively.
#define BOOST_TEST_MODULE backoff
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>

#include <locksmith/backoff.hpp>

using namespace locksmith;
using namespace std::chrono_literals;
using std::chrono::microseconds;

BOOST_AUTO_TEST_CASE(delays_grow_geometrically_without_jitter) {
    retry_policy p;
    p.initial = 1000us;
    p.max = 100'000us;
    p.multiplier = 2.0;
    p.jitter = 0.0;
    backoff b(p);
    BOOST_TEST(b.next_delay().count() == 1000);
    BOOST_TEST(b.next_delay().count() == 2000);
    BOOST_TEST(b.next_delay().count() == 4000);
    BOOST_TEST(b.next_delay().count() == 8000);
}

BOOST_AUTO_TEST_CASE(delays_are_bounded_by_max) {
    retry_policy p;
    p.initial = 1000us;
    p.max = 10'000us;
    p.jitter = 0.0;
    backoff b(p);
    microseconds last{0};
    for (int i = 0; i < 100; ++i) {
        auto d = b.next_delay();
        BOOST_TEST(d.count() <= 10'000);
        BOOST_TEST(d >= last);  // never shrinks without jitter
        last = d;
    }
    BOOST_TEST(last.count() == 10'000);  // and reaches the cap
}

BOOST_AUTO_TEST_CASE(jittered_delays_stay_in_range_and_vary) {
    retry_policy p;
    p.initial = 10'000us;
    p.max = 10'000us;  // constant nominal delay, so every draw has the same range
    p.jitter = 0.2;
    backoff b(p);
    std::set<std::int64_t> seen;
    std::int64_t lowest = 1'000'000'000, highest = 0;
    for (int i = 0; i < 200; ++i) {
        std::int64_t d = b.next_delay().count();
        lowest = std::min(lowest, d);
        highest = std::max(highest, d);
        seen.insert(d);
    }
    BOOST_TEST(lowest >= 8'000);
    // retry_policy::max is "the largest delay between two attempts": jitter included.
    BOOST_TEST(highest <= 10'000, "a delay of " << highest << " us exceeds max = 10000 us");
    BOOST_TEST(seen.size() > 10u, "jitter produced only " << seen.size() << " values");
}

BOOST_AUTO_TEST_CASE(jittered_growth_stays_near_nominal) {
    retry_policy p;
    p.initial = 1000us;
    p.max = 1'000'000us;
    p.jitter = 0.2;
    backoff b(p);
    double nominal = 1000;
    for (int i = 0; i < 8; ++i) {
        auto d = double(b.next_delay().count());
        BOOST_TEST(d >= nominal * 0.8 - 1, "step " << i << ": " << d << " vs " << nominal);
        BOOST_TEST(d <= nominal * 1.2 + 1, "step " << i << ": " << d << " vs " << nominal);
        nominal *= 2;
    }
}

BOOST_AUTO_TEST_CASE(two_waiters_spread_out) {
    // Waiters started together must not retry in lockstep.
    retry_policy p;
    p.initial = 10'000us;
    p.max = 10'000us;
    p.jitter = 0.5;
    backoff a(p), b(p);
    int same = 0;
    for (int i = 0; i < 50; ++i) same += a.next_delay() == b.next_delay();
    BOOST_TEST(same < 50);
}

BOOST_AUTO_TEST_CASE(sleep_stops_at_the_deadline) {
    retry_policy p;
    // A minute: far longer than the deadline, so a sleep that ignored the deadline would take
    // far longer than the safety bound below on any machine, however busy.
    p.initial = 60'000'000us;
    p.max = 60'000'000us;
    p.jitter = 0.0;
    backoff b(p);
    auto start = backoff::clock::now();
    auto until = start + 30ms;
    bool slept = b.sleep(until);
    auto elapsed = backoff::clock::now() - start;
    BOOST_TEST(slept);
    BOOST_TEST(elapsed >= 29ms);
    // Generous bound: the point is "clipped to the deadline" (not a minute), not "fast".
    BOOST_TEST(elapsed < 30s,
               "slept " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                        << " ms for a 30 ms deadline");
}

BOOST_AUTO_TEST_CASE(sleep_after_the_deadline_returns_false_at_once) {
    retry_policy p;
    p.initial = 60'000'000us;  // a minute, so that sleeping at all would exceed the bound below
    p.max = 60'000'000us;
    backoff b(p);
    auto start = backoff::clock::now();
    BOOST_TEST(!b.sleep(start - 1ms));
    BOOST_TEST(!b.sleep(start));
    BOOST_TEST((backoff::clock::now() - start) < 30s);
}

BOOST_AUTO_TEST_CASE(sleep_sleeps_the_delay_when_the_deadline_is_far) {
    retry_policy p;
    p.initial = 20'000us;
    p.max = 20'000us;
    p.jitter = 0.0;
    backoff b(p);
    auto start = backoff::clock::now();
    BOOST_TEST(b.sleep(start + 10s));
    auto elapsed = backoff::clock::now() - start;
    BOOST_TEST(elapsed >= 19ms);
}
