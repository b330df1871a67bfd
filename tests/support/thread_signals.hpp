// SPDX-License-Identifier: MIT
// What the library's background threads do with process signals, for the tests that check that
// every thread it starts blocks them all (strategy_support.hpp: every_signal_blocked); and the
// signal mask of the tests' own server threads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace locksmith::test {

// The blocked-signal masks (/proc/self/task/<id>/status, SigBlk; bit n-1 is signal n) of the
// threads of this process that are running after `start` and were not before it.
std::vector<std::uint64_t> masks_of_threads_started_by(const std::function<void()>& start);

// For a test's own server thread (and the threads it starts): blocks SIGPIPE there, so that a
// write to a client that hung up (SSL_write writes with write(2)) fails with EPIPE, as in a real
// server, instead of killing the test. SIGPIPE stays deliverable to every other thread: a write
// of the library under test that raises it still fails the test.
void block_sigpipe_in_this_thread();

}  // namespace locksmith::test
