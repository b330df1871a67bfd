// SPDX-License-Identifier: MIT
// `locksmith run` against a server of the test's own that misbehaves while the command runs.
#include <boost/test/unit_test.hpp>

#include <string>

#include "cli/cli_sandbox.hpp"
#include "integration/integration_support.hpp"

using locksmith::test::cli_sandbox;
using locksmith::test::describe;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(server_faults,
                      *boost::unit_test::precondition(locksmith::test::server_precondition{
                          "LOCKSMITH_TEST_POSTGRES_DSN"}))

// The command stops the PostgreSQL backend of the session that holds its lock (SIGSTOP) and
// ends: the check at its end gets no answer. That is said as what it is, not as a loss someone
// caused (it was "another process removed or took it over").
BOOST_AUTO_TEST_CASE(a_server_that_does_not_answer_at_the_end_is_named) {
    locksmith::test::private_postgres server;
    cli_sandbox box(json{
        {"strategies",
         {{"pg_advisory", {{"options", {{"dsn", server.dsn()}, {"command_timeout_s", 1}}}}}}}});
    const std::string psql = "psql -h 127.0.0.1 -p " + std::to_string(server.port()) +
                             " -U postgres -d locktest -Atc \"SELECT pid FROM pg_locks WHERE "
                             "locktype = 'advisory' AND granted\"";
    const auto backend = box.path("backend");
    auto r = box.run_with_config(
        "run", {"--strategy", "pg_advisory", "job", "-c",
                psql + " > " + backend + " && kill -STOP $(cat " + backend + ")"});
    std::system(("kill -CONT $(cat " + backend + ")").c_str());
    BOOST_TEST(r.exit_code == 75, describe(r));
    BOOST_TEST(r.err.find("could not be confirmed when the command ended") != std::string::npos,
               r.err);
    BOOST_TEST(r.err.find("no reply within the command timeout") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("took it over") == std::string::npos, r.err);
}

BOOST_AUTO_TEST_SUITE_END()
