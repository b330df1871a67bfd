// SPDX-License-Identifier: MIT
// Helpers of the counting-semaphore tests (issue 27), local and remote: a permit of a name, and
// processes that take permits together while a shared page counts how many hold one at once.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/author/store.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/named_semaphore.hpp>

#include "support/child_process.hpp"

namespace locksmith::test {

// A permit of the counting semaphore `name` of `limit` permits.
inline named_semaphore make_permit(const std::shared_ptr<store>& s, const std::string& name,
                                   std::uint32_t limit, lock_options options = {}) {
    auto k = std::make_shared<key>(name);
    k->set_limit(limit);
    return named_semaphore(s, k, std::move(options));
}

// A wait for `permit` in a thread of its own: "granted", "timed out" or "error: " and the error.
inline std::future<std::string> wait_in_thread(named_semaphore& permit,
                                               std::chrono::milliseconds for_) {
    return std::async(std::launch::async, [&permit, for_]() -> std::string {
        try {
            return permit.try_acquire_for(for_) ? "granted" : "timed out";
        } catch (const error& e) {
            return std::string("error: ") + e.what();
        }
    });
}

inline bool ready(std::future<std::string>& f, std::chrono::milliseconds within) {
    return f.wait_for(within) == std::future_status::ready;
}

// A page shared with forked children: how many hold a permit now, the most ever seen, and how
// many grants there were.
struct permit_counter {
    std::atomic<int> inside{0};
    std::atomic<int> most{0};
    std::atomic<int> grants{0};
};

struct permit_page {
    permit_counter* counter = new (::mmap(nullptr, sizeof(permit_counter), PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0)) permit_counter;
    ~permit_page() { ::munmap(counter, sizeof(permit_counter)); }
};

// Forks `processes` children that start together; each makes its own store and takes a permit
// of `name` (of `limit`) `iterations` times, waiting at most 20 s for each, holding it `hold`
// and counting the holders in `c`.
// Returns how many children failed (a wait that ran out is a failure).
inline int hold_permits_in_processes(
    const std::function<std::shared_ptr<store>()>& make_store, const std::string& name,
    std::uint32_t limit, int processes, int iterations, permit_counter& c,
    std::chrono::milliseconds hold = std::chrono::milliseconds(1)) {
    byte_pipe gate;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p)
        children.push_back(fork_child(
            [&] {
                gate.close_write();
                auto permit = make_permit(make_store(), name, limit);
                (void)gate.get(std::chrono::seconds(30));  // EOF: go
                for (int i = 0; i < iterations; ++i) {
                    if (!permit.try_acquire_for(std::chrono::seconds(20))) return 2;
                    const int now = ++c.inside;
                    int seen = c.most.load();
                    while (now > seen && !c.most.compare_exchange_weak(seen, now)) {
                    }
                    ++c.grants;
                    std::this_thread::sleep_for(hold);
                    --c.inside;
                    permit.release();
                }
                return 0;
            },
            std::chrono::seconds(120)));
    gate.close_write();
    int failures = 0;
    for (pid_t pid : children) failures += wait_child(pid, std::chrono::seconds(120)) != 0;
    return failures;
}

}  // namespace locksmith::test
