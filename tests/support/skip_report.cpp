// SPDX-License-Identifier: MIT
#include "support/skip_report.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "support/test_environment.hpp"

namespace locksmith::test {
namespace {

struct skip {
    std::string unit;
    std::string why;
};

std::vector<skip>& skips() {
    static std::vector<skip> all;
    return all;
}

// Sees the cases Boost.Test skips because a precondition (a server endpoint) failed.
class skip_observer : public boost::unit_test::test_observer {
  public:
    // After Boost.Test's own observers: at the default priority 0 the framework reports a
    // setup error with no message before any case runs (Boost 1.74).
    int priority() override { return 1000; }
    void test_unit_skipped(const boost::unit_test::test_unit& tu,
                           boost::unit_test::const_string reason) override {
        std::string why(reason.begin(), reason.end());
        // Units left out by --run_test are "disabled": a choice of the caller, not a skip.
        if (why == "disabled") return;
        skips().push_back({tu.full_name(), why});
    }
};

bool (*user_init)() = nullptr;

bool init_with_observer() {
    static skip_observer observer;
    boost::unit_test::framework::register_observer(observer);
    return user_init();
}

}  // namespace

void skip_case(const std::string& why) {
    if (running_in_ci()) BOOST_FAIL("cannot run under CI=true, where it must: " << why);
    BOOST_TEST_MESSAGE("skipped: " << why);
    skips().push_back({boost::unit_test::framework::current_test_case().full_name(), why});
}

std::optional<local_user> another_local_user_or_skip() {
    std::string why;
    auto user = another_local_user(&why);
    if (!user) skip_case(why);
    return user;
}

int run_tests(bool (*init)(), int argc, char* argv[]) {
    user_init = init;
    int code = boost::unit_test::unit_test_main(&init_with_observer, argc, argv);
    // One line per reason ("SKIPPED <n> test unit(s) (<first>, ...): <why>"), for the log
    // that CTest keeps (Testing/Temporary/LastTest.log) and for scripts to grep.
    std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;
    for (const auto& s : skips()) {
        auto it = std::find_if(by_reason.begin(), by_reason.end(),
                               [&](const auto& r) { return r.first == s.why; });
        if (it == by_reason.end()) it = by_reason.insert(by_reason.end(), {s.why, {}});
        it->second.push_back(s.unit);
    }
    for (const auto& [why, units] : by_reason)
        std::printf("SKIPPED %zu test unit(s) (%s%s): %s\n", units.size(), units.front().c_str(),
                    units.size() > 1 ? ", ..." : "", why.c_str());
    std::fflush(stdout);
    if (code != 0 || skips().empty()) return code;
    if (running_in_ci()) {
        std::printf("CI=true: %zu test unit(s) skipped, which CI must run; failing\n",
                    skips().size());
        return 1;
    }
    return skip_exit_code;
}

}  // namespace locksmith::test
