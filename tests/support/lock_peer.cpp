// SPDX-License-Identifier: MIT
#include "support/lock_peer.hpp"

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <locksmith/config.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/registry.hpp>

#include "support/suite_helpers.hpp"

namespace locksmith::test {
namespace {

// The longest a peer may take to answer: a safety net against a hang, never reached by a
// working lock (a blocking lock() is answered through answer(), which has its own timeout).
constexpr std::chrono::seconds answer_limit{60};

// Commands: one byte, then for those with an argument 8 decimal digits of milliseconds.
//   t try_lock   s try_lock_shared   w try_lock_for(arg)   L lock()   S lock_shared()
//   u unlock     r refresh(arg)      h is_acquired         q quit
// Answers: '1' yes, '0' no.
class peer_body {
  public:
    peer_body(const strategy_under_test& entry, std::string resource, lock_pattern pattern,
              std::chrono::milliseconds ttl)
        : entry_(entry), resource_(std::move(resource)), pattern_(pattern), ttl_(ttl) {
        if (pattern_ == lock_pattern::long_lived) lock_ = make_long_lived();
    }

    bool run(char command, std::chrono::milliseconds arg) {
        switch (command) {
            case 't':
                return current().try_lock();
            case 's':
                return current().try_lock_shared();
            case 'w':
                return current().try_lock_for(arg);
            case 'L':
                current().lock();
                return true;
            case 'S':
                current().lock_shared();
                return true;
            case 'u': {
                if (!lock_ || !lock_->held_mode()) return false;
                lock_->unlock();
                if (pattern_ == lock_pattern::fresh_objects) drop();
                return true;
            }
            case 'r': {
                if (!lock_ || !lock_->held_mode()) return false;
                try {
                    lock_->refresh(arg);
                    return true;
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "peer %d: refresh: %s\n", int(::getpid()), e.what());
                    return false;
                }
            }
            case 'h':
                return lock_ && lock_->is_acquired();
        }
        throw std::logic_error(std::string("lock_peer: unknown command ") + command);
    }

  private:
    std::unique_ptr<named_lock> make_long_lived() {
        lock_options o;
        o.ttl = ttl_;
        return std::make_unique<named_lock>(create_store(entry_), std::make_shared<key>(resource_),
                                            o);
    }

    // The lock object for the next acquisition: the long-lived one, or in the fresh pattern a
    // new one unless the current one holds (a second acquire while holding is a re-entry).
    named_lock& current() {
        if (pattern_ == lock_pattern::long_lived) return *lock_;
        if (lock_ && lock_->held_mode()) return *lock_;
        drop();
        fresh_lock fresh(entry_, resource_, ttl_);
        factory_ = std::move(fresh.factory);
        lock_ = std::move(fresh.lock);
        return *lock_;
    }

    void drop() {
        lock_.reset();
        factory_.reset();
    }

    const strategy_under_test& entry_;
    std::string resource_;
    lock_pattern pattern_;
    std::chrono::milliseconds ttl_;
    std::unique_ptr<lock_factory> factory_;
    std::unique_ptr<named_lock> lock_;
};

}  // namespace

fresh_lock::fresh_lock(const strategy_under_test& entry, const std::string& resource,
                       std::chrono::milliseconds ttl) {
    nlohmann::json doc = {{"strategies", {{entry.name, {{"options", entry.options.value()}}}}}};
    factory = std::make_unique<lock_factory>(config::parse(doc.dump()), default_registry());
    lock_request r;
    r.strategy = entry.name;
    r.ttl = ttl;
    lock = std::make_unique<named_lock>(factory->create_lock(resource, r));
}

const char* to_string(lock_pattern p) noexcept {
    return p == lock_pattern::long_lived ? "long_lived" : "fresh_objects";
}

lock_peer::lock_peer(const strategy_under_test& entry, const std::string& resource,
                     lock_pattern pattern, std::chrono::milliseconds ttl) {
    pid_ = fork_child(
        [&]() -> int {
            to_peer_.close_write();
            from_peer_.close_read();
            peer_body body(entry, resource, pattern, ttl);
            for (;;) {
                auto command = to_peer_.get(std::chrono::hours(1));
                if (!command || *command == 'q') return 0;
                std::chrono::milliseconds arg{0};
                if (*command == 'w' || *command == 'r') {
                    long long ms = 0;
                    for (int i = 0; i < 8; ++i) {
                        auto digit = to_peer_.get(answer_limit);
                        if (!digit) return 3;
                        ms = ms * 10 + (*digit - '0');
                    }
                    arg = std::chrono::milliseconds(ms);
                }
                bool yes = body.run(*command, arg);
                if (!from_peer_.put(yes ? '1' : '0')) return 4;
            }
        },
        std::chrono::seconds(600));
    to_peer_.close_read();
    from_peer_.close_write();
}

lock_peer::~lock_peer() {
    to_peer_.put('q');
    to_peer_.close_write();
    // A peer still blocked in lock() (a failed case) cannot read 'q': it is killed after 10 s.
    int status = wait_child(pid_, std::chrono::seconds(10));
    if (status != 0) std::fprintf(stderr, "lock_peer %d ended with status %d\n", int(pid_), status);
}

bool lock_peer::ask(char command) {
    if (!to_peer_.put(command)) throw std::runtime_error("lock_peer: the peer is gone");
    auto reply = from_peer_.get(answer_limit);
    if (!reply) throw std::runtime_error(std::string("lock_peer: no answer to ") + command);
    return *reply == '1';
}

bool lock_peer::ask(char command, std::chrono::milliseconds arg) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%08lld", static_cast<long long>(arg.count()));
    if (!to_peer_.put(command)) throw std::runtime_error("lock_peer: the peer is gone");
    for (int i = 0; i < 8; ++i) to_peer_.put(digits[i]);
    auto reply = from_peer_.get(answer_limit);
    if (!reply) throw std::runtime_error(std::string("lock_peer: no answer to ") + command);
    return *reply == '1';
}

bool lock_peer::try_lock() {
    return ask('t');
}
bool lock_peer::try_lock_shared() {
    return ask('s');
}
bool lock_peer::try_lock_for(std::chrono::milliseconds wait) {
    return ask('w', wait);
}
void lock_peer::start_lock(bool shared) {
    if (!to_peer_.put(shared ? 'S' : 'L')) throw std::runtime_error("lock_peer: the peer is gone");
}
std::optional<bool> lock_peer::answer(std::chrono::milliseconds timeout) {
    auto reply = from_peer_.get(timeout);
    if (!reply) return std::nullopt;
    return *reply == '1';
}
bool lock_peer::unlock() {
    return ask('u');
}
bool lock_peer::refresh(std::chrono::milliseconds ttl) {
    return ask('r', ttl);
}
bool lock_peer::is_acquired() {
    return ask('h');
}

}  // namespace locksmith::test
