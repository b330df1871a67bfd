// SPDX-License-Identifier: MIT
// main() of every test executable (BOOST_TEST_NO_MAIN is set for all of them): the suite's
// init_unit_test(), from BOOST_TEST_MODULE or written by hand, run with the skip report.
#include "support/skip_report.hpp"

bool init_unit_test();

int main(int argc, char* argv[]) {
    return locksmith::test::run_tests(&init_unit_test, argc, argv);
}
