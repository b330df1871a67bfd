// SPDX-License-Identifier: MIT
// The `null` strategy: see include/locksmith/strategies/null.hpp for the contract.
#include <locksmith/strategies/null.hpp>

#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
namespace {

constexpr capability null_capabilities =
    capability::exclusive | capability::shared | capability::noblock | capability::native_wait |
    capability::expiring | capability::distributed | capability::serializable |
    capability::crash_release | capability::fair | capability::counting;

// The owner's grant lives in its key, not in the store: it is the owner's own view (nothing is
// shared between owners), and it travels with a serialized key.
constexpr const char* held_marker = "null_held";

class null_store final : public store {
  public:
    null_store() : store("null", null_capabilities) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        k.portable_state()[held_marker] = true;
        return true;
    }
    bool do_wait_acquire(key& k, lock_mode mode, std::chrono::milliseconds ttl, deadline) override {
        return do_try_acquire(k, mode, ttl);
    }
    bool do_refresh(key& k, std::chrono::milliseconds) override { return do_holds(k); }
    void do_release(key& k) override { k.portable_state().erase(held_marker); }
    bool do_holds(const key& k) override { return k.portable_state().contains(held_marker); }
    lock_status do_status(std::string_view) override {
        lock_status status;
        status.held = lock_status::state::free;
        status.holders.push_back("nobody: the null strategy excludes nothing (locking is off)");
        return status;
    }
};

}  // namespace

std::shared_ptr<store> make_null_store() {
    return std::make_shared<null_store>();
}

strategy_descriptor null_strategy() {
    strategy_descriptor d;
    d.name = "null";
    d.description = "no locking: every acquire succeeds, nothing is excluded (Symfony NullStore)";
    // Enabling it in the config is what turns locking off, so it then wins.
    d.default_priority = max_priority;
    d.capabilities = null_capabilities;
    d.enabled_by_default = false;
    d.excludes_nothing = true;
    d.create = [](const nlohmann::json& o) {
        options_reader(o).finish();
        return make_null_store();
    };
    return d;
}

}  // namespace locksmith::strategies
