// SPDX-License-Identifier: MIT
// The `memory` strategy: see include/locksmith/strategies/memory.hpp for the contract.
#include <locksmith/strategies/memory.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <locksmith/errors.hpp>

#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
namespace {

using clock = std::chrono::steady_clock;

// What the store offers and the registry entry says (one statement of both).
constexpr capability memory_capabilities = capability::exclusive | capability::shared |
                                           capability::noblock | capability::native_wait |
                                           capability::expiring | capability::counting;

class memory_store final : public store {
  public:
    memory_store() : store("memory", memory_capabilities) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl) override {
        std::lock_guard guard(mutex_);
        if (k.limit() != 0) return grant_permit(k, ttl);
        return grant(k.resource(), k.token(), mode, ttl);
    }

    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl,
                         deadline until) override {
        std::unique_lock guard(mutex_);
        while (true) {
            k.set_attempt_started(clock::now());
            if (k.limit() != 0 ? grant_permit(k, ttl) : grant(k.resource(), k.token(), mode, ttl))
                return true;
            const auto now = clock::now();
            if (now >= until) return false;
            // Wake at the deadline, or when the current grants expire, whichever is first.
            const auto expiry = k.limit() != 0 ? earliest_permit_expiry(k.resource())
                                               : earliest_expiry(k.resource());
            wakeup_.wait_until(guard, std::min(until, expiry));
        }
    }

    bool do_refresh(key& k, std::chrono::milliseconds ttl) override {
        std::lock_guard guard(mutex_);
        if (k.limit() != 0) {
            auto* p = permits_of(k.resource());
            if (p == nullptr || !p->holders.count(k.token())) return false;
            p->holders[k.token()].expiry = expiry_after(ttl);
            return true;
        }
        auto* e = entry_of(k.resource());
        if (e == nullptr || !e->owners.count(k.token())) return false;
        e->owners[k.token()] = expiry_after(ttl);
        return true;
    }

    void do_release(key& k) override {
        std::lock_guard guard(mutex_);
        if (k.limit() != 0) {
            auto it = semaphores_.find(k.resource());
            if (it == semaphores_.end()) return;
            it->second.holders.erase(k.token());
            if (it->second.holders.empty()) semaphores_.erase(it);
            wakeup_.notify_all();
            return;
        }
        auto it = entries_.find(k.resource());
        if (it == entries_.end()) return;
        auto& e = it->second;
        if (e.writer == k.token()) e.writer.clear();
        e.owners.erase(k.token());
        if (e.owners.empty()) entries_.erase(it);
        wakeup_.notify_all();
    }

    bool do_holds(const key& k) override {
        std::lock_guard guard(mutex_);
        if (k.limit() != 0) {
            auto* p = permits_of(k.resource());
            return p != nullptr && p->holders.count(k.token()) > 0;
        }
        auto* e = entry_of(k.resource());
        return e != nullptr && e->owners.count(k.token()) > 0;
    }

    lock_status do_status(std::string_view resource) override {
        std::lock_guard guard(mutex_);
        lock_status status;
        // A name whose permits are held is a semaphore: that is what status shows.
        if (auto* p = permits_of(std::string(resource))) {
            status.limit = p->limit;
            status.permits_held = std::uint32_t(p->holders.size());
            status.held = p->holders.size() < p->limit ? lock_status::state::free
                                                       : lock_status::state::held_exclusive;
            const auto first = earliest_permit_expiry(std::string(resource));
            if (first != clock::time_point::max())
                status.remaining =
                    std::chrono::duration_cast<std::chrono::milliseconds>(first - clock::now());
            return status;
        }
        auto* e = entry_of(std::string(resource));
        if (e == nullptr) {
            status.held = lock_status::state::free;
            return status;
        }
        status.held = e->writer.empty() ? lock_status::state::held_shared
                                        : lock_status::state::held_exclusive;
        auto first = clock::time_point::max();
        for (const auto& [token, expiry] : e->owners) first = std::min(first, expiry);
        if (first != clock::time_point::max())
            status.remaining =
                std::chrono::duration_cast<std::chrono::milliseconds>(first - clock::now());
        status.holders.push_back(std::to_string(e->owners.size()) + " owner(s) in this process");
        return status;
    }

  private:
    struct entry {
        std::string writer;                               // token of the writer, empty when none
        std::map<std::string, clock::time_point> owners;  // writer and readers, with expiry
    };

    static clock::time_point expiry_after(std::chrono::milliseconds ttl) {
        return ttl.count() > 0 ? clock::now() + ttl : clock::time_point::max();
    }

    // The live entry for `resource`, with expired owners dropped; null when nobody holds it.
    entry* entry_of(const std::string& resource) {
        auto it = entries_.find(resource);
        if (it == entries_.end()) return nullptr;
        auto& e = it->second;
        const auto now = clock::now();
        for (auto o = e.owners.begin(); o != e.owners.end();) {
            if (o->second <= now) {
                if (e.writer == o->first) e.writer.clear();
                o = e.owners.erase(o);
            } else {
                ++o;
            }
        }
        if (e.owners.empty()) {
            entries_.erase(it);
            return nullptr;
        }
        return &e;
    }

    clock::time_point earliest_expiry(const std::string& resource) {
        auto* e = entry_of(resource);
        auto first = clock::time_point::max();
        if (e != nullptr)
            for (const auto& [token, expiry] : e->owners) first = std::min(first, expiry);
        return first;
    }

    bool grant(const std::string& resource, const std::string& token, lock_mode mode,
               std::chrono::milliseconds ttl) {
        auto* e = entry_of(resource);
        if (e == nullptr) e = &entries_[resource];
        const bool mine = e->owners.count(token) > 0;
        if (mode == lock_mode::exclusive) {
            if (!e->writer.empty() && e->writer != token) return false;
            // Readers other than us block a writer; a sole reader may promote itself.
            if (e->owners.size() > (mine ? 1u : 0u)) return false;
            e->writer = token;
        } else {
            if (!e->writer.empty() && e->writer != token) return false;
            if (e->writer == token) {
                e->writer.clear();  // demotion: other readers may join now
                wakeup_.notify_all();
            }
        }
        e->owners[token] = expiry_after(ttl);
        return true;
    }

    // A counting semaphore: its limit (the first owner's, kept while a permit is held) and its
    // holders by token, each with its permit's slot (0-based) and expiry.
    struct permit {
        std::uint32_t slot = 0;
        clock::time_point expiry;
    };
    struct permits {
        std::uint32_t limit = 0;
        std::map<std::string, permit> holders;
    };

    // The live permits of `resource`, expired holders dropped; null when none is held.
    permits* permits_of(const std::string& resource) {
        auto it = semaphores_.find(resource);
        if (it == semaphores_.end()) return nullptr;
        auto& holders = it->second.holders;
        const auto now = clock::now();
        std::erase_if(holders, [&](const auto& h) { return h.second.expiry <= now; });
        if (holders.empty()) {
            semaphores_.erase(it);
            return nullptr;
        }
        return &it->second;
    }

    clock::time_point earliest_permit_expiry(const std::string& resource) {
        auto first = clock::time_point::max();
        if (auto* p = permits_of(resource))
            for (const auto& [token, h] : p->holders) first = std::min(first, h.expiry);
        return first;
    }

    // One of k.limit() permits of k's name, the lowest free one; false when all are held.
    bool grant_permit(key& k, std::chrono::milliseconds ttl) {
        auto* p = permits_of(k.resource());
        if (p == nullptr) {
            p = &semaphores_[k.resource()];
            p->limit = k.limit();
        }
        if (p->limit != k.limit())
            throw invalid_argument_error(
                "memory: semaphore '" + k.resource() + "' has a limit of " +
                std::to_string(p->limit) + ", held by its permits' holders; this owner asks for " +
                std::to_string(k.limit()) + ". One name has one limit: ask for " +
                std::to_string(p->limit) + ", or wait until no permit is held");
        if (auto mine = p->holders.find(k.token()); mine != p->holders.end()) {
            mine->second.expiry = expiry_after(ttl);
            return true;
        }
        if (p->holders.size() >= p->limit) return false;
        std::set<std::uint32_t> taken;
        for (const auto& [token, h] : p->holders) taken.insert(h.slot);
        std::uint32_t slot = 0;
        while (taken.count(slot)) ++slot;
        p->holders[k.token()] = permit{slot, expiry_after(ttl)};
        // Shown as 1..N (LOCKSMITH_PERMIT), as every counting strategy numbers its permits.
        k.portable_state()["permit"] = std::uint64_t(slot + 1);
        return true;
    }

    std::mutex mutex_;
    std::condition_variable wakeup_;
    std::map<std::string, entry> entries_;
    std::map<std::string, permits> semaphores_;  // apart from entries_: another object
};

}  // namespace

std::shared_ptr<store> make_memory_store() {
    return std::make_shared<memory_store>();
}

strategy_descriptor memory_strategy() {
    strategy_descriptor d;
    d.name = "memory";
    d.description =
        "in-process locks for tests and single-process programs (Symfony InMemoryStore)";
    d.default_priority = 10;
    d.capabilities = memory_capabilities;
    d.enabled_by_default = false;
    d.spans_processes = false;
    d.create = [](const nlohmann::json& o) {
        options_reader(o).finish();
        return make_memory_store();
    };
    return d;
}

}  // namespace locksmith::strategies
