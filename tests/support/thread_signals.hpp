// SPDX-License-Identifier: MIT
// What the library's background threads do with process signals, for the tests that check that
// every thread it starts blocks them all (strategy_support.hpp: every_signal_blocked).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace locksmith::test {

// The blocked-signal masks (/proc/self/task/<id>/status, SigBlk; bit n-1 is signal n) of the
// threads of this process that are running after `start` and were not before it.
std::vector<std::uint64_t> masks_of_threads_started_by(const std::function<void()>& start);

}  // namespace locksmith::test
