// SPDX-License-Identifier: MIT
// connection_pool: a bounded pool of client connections shared by the threads of a remote
// strategy's store (header-only, for strategy authors).
//
// take() hands out an idle connection, or opens a new one while fewer than `size` are out, or
// waits (bounded) for one to come back. A lease returns its connection when it is destroyed;
// connections that are no longer reusable (broken by an error, closed by a restarted server)
// are dropped, so the next take() opens a fresh one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace locksmith {

template <class Connection>
class connection_pool {
  public:
    struct settings {
        std::size_t size = 4;                   // at most this many connections out at once
        std::chrono::milliseconds max_wait{0};  // how long take() waits for one to come back
        std::function<std::unique_ptr<Connection>()> open;  // may throw
        // Checked when a connection comes back (cheap: e.g. "no error seen"); false drops it.
        std::function<bool(const Connection&)> reusable;
        // Checked before an idle connection is handed out again (e.g. "the server did not close
        // it meanwhile"); empty = always. False drops it and tries the next.
        std::function<bool(const Connection&)> still_open;
        // still_open is skipped for a connection back for less than this: no server restarts
        // that quickly, and a tight lock/unlock loop then pays no system call for the check.
        std::chrono::milliseconds recheck_after{1};
        std::function<void()> exhausted;  // called (and must throw) when max_wait passes
    };

    explicit connection_pool(settings s) : settings_(std::move(s)) {}

    // A connection on loan; goes back to the pool when destroyed.
    class lease {
      public:
        lease(connection_pool& pool, std::unique_ptr<Connection> c)
            : pool_(&pool), connection_(std::move(c)) {}
        lease(lease&&) noexcept = default;
        lease& operator=(lease&&) = delete;
        ~lease() {
            if (connection_) pool_->give_back(std::move(connection_));
        }
        Connection* operator->() const noexcept { return connection_.get(); }
        Connection& operator*() const noexcept { return *connection_; }

      private:
        connection_pool* pool_;
        std::unique_ptr<Connection> connection_;
    };

    lease take() {
        std::unique_lock lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        const auto until = now + settings_.max_wait;
        for (;;) {
            while (!idle_.empty()) {
                auto [c, returned_at] = std::move(idle_.back());
                idle_.pop_back();
                if (settings_.still_open && now - returned_at >= settings_.recheck_after &&
                    !settings_.still_open(*c))
                    continue;
                ++out_;
                return lease(*this, std::move(c));
            }
            if (out_ < settings_.size) {
                ++out_;
                lock.unlock();  // connecting may take long; other threads may give back meanwhile
                try {
                    return lease(*this, settings_.open());
                } catch (...) {
                    lock.lock();
                    --out_;
                    returned_.notify_one();
                    throw;
                }
            }
            if (returned_.wait_until(lock, until) == std::cv_status::timeout) settings_.exhausted();
        }
    }

  private:
    void give_back(std::unique_ptr<Connection> c) noexcept {
        std::lock_guard lock(mutex_);
        --out_;
        if (settings_.reusable(*c))
            idle_.emplace_back(std::move(c), std::chrono::steady_clock::now());
        returned_.notify_one();
    }

    settings settings_;
    std::mutex mutex_;
    std::condition_variable returned_;
    // Idle connections and when each came back.
    std::vector<std::pair<std::unique_ptr<Connection>, std::chrono::steady_clock::time_point>>
        idle_;
    std::size_t out_ = 0;  // connections on loan
};

}  // namespace locksmith
