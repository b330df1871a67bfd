// The `combined` strategy: see include/locksmith/strategies/combined.hpp for the contract.
#include <locksmith/strategies/combined.hpp>

#include <algorithm>
#include <functional>
#include <mutex>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

namespace locksmith::strategies {

bool quorum_met(quorum_rule rule, std::size_t successes, std::size_t total) noexcept {
    return rule == quorum_rule::consensus ? successes > total / 2 : successes == total;
}

bool quorum_can_be_met(quorum_rule rule, std::size_t failures, std::size_t total) noexcept {
    // failures < total/2 in real numbers, without rounding total/2 down.
    return rule == quorum_rule::consensus ? 2 * failures < total : failures == 0;
}

capability combined_capabilities(quorum_rule rule, const std::vector<capability>& members) {
    capability common = ~capability::none;
    for (capability c : members) common &= c;
    constexpr capability inherited = capability::shared | capability::expiring |
                                     capability::distributed | capability::serializable |
                                     capability::crash_release | capability::consensus;
    capability caps = capability::exclusive | capability::noblock | (common & inherited);
    if (rule == quorum_rule::unanimous)
        for (capability c : members)
            if (has(c, capability::fencing)) caps |= capability::fencing;
    return caps;
}

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Redlock's allowance for the members' clocks running at different rates over one TTL.
milliseconds drift_margin(milliseconds ttl) {
    return ttl / 100 + milliseconds(2);
}

// A member's store, created when the combined store starts, or later when its backend was down
// then: a member that cannot start counts as a failed member until it can.
class member {
  public:
    member(std::string strategy, std::shared_ptr<store> s)
        : strategy_(std::move(strategy)), store_(std::move(s)) {}
    member(std::string strategy, std::function<std::shared_ptr<store>()> create)
        : strategy_(std::move(strategy)), create_(std::move(create)) {
        try {
            store_ = create_();
        } catch (const std::exception& e) {
            // Down for now; get() tries again.
            start_error_ = e.what();
        }
    }
    const std::string& strategy() const noexcept { return strategy_; }
    // Why the member could not start with the combined store; empty when it did.
    const std::string& start_error() const noexcept { return start_error_; }
    // Throws what the member's factory throws while the member cannot start.
    std::shared_ptr<store> get() {
        std::lock_guard guard(mutex_);
        if (!store_) store_ = create_();
        return store_;
    }

  private:
    std::string strategy_;
    std::function<std::shared_ptr<store>()> create_;
    std::string start_error_;
    std::mutex mutex_;
    std::shared_ptr<store> store_;
};

// Each member's view of one owner: a key of its own (same resource and token) holding the
// member's state. Kept in the owner's key; the members' portable states also travel in the
// owner's portable state ("members"), so a serialized key continues on every member.
struct member_keys final : key_local_state {
    std::vector<std::unique_ptr<key>> keys;
    std::optional<lock_mode> held;  // what the last grant gave, until release or loss
};

std::vector<std::unique_ptr<key>> make_member_keys(const key& k, std::size_t n) {
    std::vector<std::unique_ptr<key>> keys;
    const auto* saved =
        k.portable_state().contains("members") ? &k.portable_state()["members"] : nullptr;
    for (std::size_t i = 0; i < n; ++i) {
        nlohmann::json j = {{"resource", k.resource()}, {"token", k.token()}};
        if (saved && saved->is_array() && i < saved->size() && (*saved)[i].is_object())
            j["state"] = (*saved)[i];
        keys.push_back(std::make_unique<key>(key::from_json(j)));
    }
    return keys;
}

std::string member_text(std::size_t i, const std::string& strategy) {
    return "member " + std::to_string(i + 1) + " (" + strategy + ")";
}

// What the members said in one round.
struct tally {
    std::size_t yes = 0;
    std::size_t no = 0;      // contention, or not held
    std::size_t failed = 0;  // threw
    bool all_transient = true;
    std::string errors;
    void fail(std::size_t i, const std::string& strategy, const std::exception& e) {
        ++failed;
        const auto* b = dynamic_cast<const backend_error*>(&e);
        if (!b || !b->transient()) all_transient = false;
        errors += (errors.empty() ? "" : "; ") + member_text(i, strategy) + ": " + e.what();
    }
    error_kind kind() const {
        return all_transient ? error_kind::transient : error_kind::permanent;
    }
};

class combined_store final : public store {
  public:
    combined_store(quorum_rule rule, std::vector<std::unique_ptr<member>> members, capability caps,
                   std::optional<std::size_t> fencing_member)
        : store("combined", caps),
          rule_(rule),
          members_(std::move(members)),
          fencing_member_(fencing_member) {}

  protected:
    bool do_try_acquire(key& k, lock_mode mode, milliseconds ttl) override {
        auto& state = state_of(k);
        auto& keys = state.keys;
        // A failed promotion gives the members that promoted back their read lock.
        const bool promoting = state.held == lock_mode::shared && mode == lock_mode::exclusive;
        auto roll_back_attempt = [&](const std::vector<bool>& touched) {
            if (promoting) {
                demote(keys, touched, ttl);
            } else {
                roll_back(keys, touched);
                state.held.reset();
            }
        };
        const std::size_t n = members_.size();
        const auto started = clock::now();
        tally t;
        std::vector<bool> touched(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            if (!quorum_can_be_met(rule_, t.no + t.failed, n)) break;
            try {
                if (members_[i]->get()->try_acquire(*keys[i], mode, ttl)) {
                    ++t.yes;
                    touched[i] = true;
                } else {
                    ++t.no;
                }
            } catch (const std::exception& e) {
                // Its reply may have been lost after it granted: it is rolled back too.
                touched[i] = true;
                t.fail(i, members_[i]->strategy(), e);
            }
        }
        if (!quorum_met(rule_, t.yes, n)) {
            roll_back_attempt(touched);
            save_portable(k, keys);
            // Another owner holds members: contention, not an error, even where a member is
            // down too (with it up the answer would be no better), so that a waiter polls on.
            if (t.no > 0) return false;
            throw backend_error("combined", "quorum",
                                "lock '" + k.resource() + "': " + quorum_text(t) +
                                    "; the grants were rolled back: " + t.errors,
                                t.kind());
        }
        if (has(capabilities(), capability::expiring)) {
            // Redlock: the grant is worth its TTL less the time the round took and the clocks'
            // drift; with none left, another owner may already hold a member's grant again.
            const auto drift = drift_margin(ttl);
            const auto elapsed = clock::now() - started;
            if (elapsed + drift >= ttl) {
                roll_back_attempt(touched);
                save_portable(k, keys);
                throw expired_error(
                    "lock '" + k.resource() + "' (combined): the quorum was reached after " +
                    std::to_string(std::chrono::duration_cast<milliseconds>(elapsed).count()) +
                    " ms, leaving no validity of its ttl of " + std::to_string(ttl.count()) +
                    " ms (drift " + std::to_string(drift.count()) +
                    " ms); the grants were rolled back");
            }
        }
        // What the owner is told is left (and the renewal schedule) excludes the drift too.
        k.set_lifetime_margin(drift_margin(ttl));
        if (fencing_member_) k.set_fencing_token(keys[*fencing_member_]->fencing_token());
        state.held = mode;
        save_portable(k, keys);
        return true;
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        auto& keys = member_keys_of(k);
        const std::size_t n = members_.size();
        k.set_lifetime_margin(drift_margin(ttl));
        tally t;
        for (std::size_t i = 0; i < n; ++i) {
            try {
                if (members_[i]->get()->refresh(*keys[i], ttl))
                    ++t.yes;
                else
                    ++t.no;
            } catch (const std::exception& e) {
                t.fail(i, members_[i]->strategy(), e);
            }
        }
        save_portable(k, keys);
        if (quorum_met(rule_, t.yes, n)) return true;
        if (!quorum_can_be_met(rule_, t.no, n)) {
            // Lost: what is left on the other members is no lock any more, free it for others.
            roll_back(keys, std::vector<bool>(n, true));
            state_of(k).held.reset();
            save_portable(k, keys);
            return false;
        }
        // Failures, not refusals, missed the quorum: the renewal retries while time is left.
        throw backend_error(
            "combined", "quorum",
            "refreshing lock '" + k.resource() + "': " + quorum_text(t) + ": " + t.errors,
            t.kind());
    }

    void do_release(key& k) override {
        auto& keys = member_keys_of(k);
        state_of(k).held.reset();
        tally t;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            try {
                members_[i]->get()->release(*keys[i]);
            } catch (const std::exception& e) {
                t.fail(i, members_[i]->strategy(), e);
            }
        }
        save_portable(k, keys);
        if (t.failed)
            throw backend_error("combined", "release",
                                "releasing lock '" + k.resource() + "' failed on " +
                                    std::to_string(t.failed) + " of " +
                                    std::to_string(members_.size()) + " members: " + t.errors,
                                t.kind());
    }

    bool do_holds(const key& k) override {
        std::vector<std::unique_ptr<key>> fresh;
        auto* state = k.local_state_of<member_keys>(instance_id());
        if (!state) fresh = make_member_keys(k, members_.size());
        const auto& keys = state ? state->keys : fresh;
        const std::size_t n = members_.size();
        std::size_t yes = 0, no = 0;
        for (std::size_t i = 0; i < n; ++i) {
            try {
                members_[i]->get()->holds(*keys[i]) ? ++yes : ++no;
            } catch (const std::exception&) {
                ++no;  // a member we cannot ask vouches for nothing
            }
            if (quorum_met(rule_, yes, n)) return true;
            if (!quorum_can_be_met(rule_, no, n)) return false;
        }
        return false;
    }

    // The members' answers merged by the quorum rule: held when a quorum of members says held
    // (the holders and, conservatively, the shortest time left among them), free when a quorum
    // of members is free (a new owner would be granted), unknown in between (members down or
    // disagreeing, e.g. a grant being rolled back).
    lock_status do_status(std::string_view resource) override {
        const std::size_t n = members_.size();
        std::size_t held = 0, exclusive = 0, free = 0;
        lock_status merged;
        for (const auto& m : members_) {
            lock_status one;
            try {
                one = m->get()->status(resource);
            } catch (const std::exception&) {
                continue;  // a member we cannot ask vouches for nothing
            }
            if (one.held == lock_status::state::free) ++free;
            if (one.held != lock_status::state::held_exclusive &&
                one.held != lock_status::state::held_shared)
                continue;
            ++held;
            if (one.held == lock_status::state::held_exclusive) ++exclusive;
            for (auto& h : one.holders)
                if (std::find(merged.holders.begin(), merged.holders.end(), h) ==
                    merged.holders.end())
                    merged.holders.push_back(std::move(h));
            if (one.remaining && (!merged.remaining || *one.remaining < *merged.remaining))
                merged.remaining = one.remaining;
        }
        if (quorum_met(rule_, held, n)) {
            merged.held = quorum_met(rule_, exclusive, n) ? lock_status::state::held_exclusive
                                                          : lock_status::state::held_shared;
            return merged;
        }
        return {quorum_met(rule_, free, n) ? lock_status::state::free : lock_status::state::unknown,
                {},
                std::nullopt};
    }

    std::optional<std::uint64_t> do_fencing_token(key& k) override {
        auto& keys = member_keys_of(k);
        const auto token =
            members_[*fencing_member_]->get()->fencing_token(*keys[*fencing_member_]);
        k.set_fencing_token(token);
        save_portable(k, keys);
        return token;
    }

  private:
    member_keys& state_of(key& k) {
        if (auto* state = k.local_state_of<member_keys>(instance_id())) return *state;
        auto state = std::make_unique<member_keys>();
        state->keys = make_member_keys(k, members_.size());
        auto& kept = *state;
        k.set_local_state(instance_id(), std::move(state));
        return kept;
    }
    std::vector<std::unique_ptr<key>>& member_keys_of(key& k) { return state_of(k).keys; }

    // Only serializable members' states travel; copying them costs, so only then.
    void save_portable(key& k, const std::vector<std::unique_ptr<key>>& keys) const {
        if (!has(capabilities(), capability::serializable)) return;
        auto& saved = k.portable_state()["members"];
        saved = nlohmann::json::array();
        for (const auto& m : keys) saved.push_back(m->portable_state());
    }

    // Releases this owner's grant on every member marked; a member that fails keeps its grant
    // until its TTL ends (nothing better can be done now).
    void roll_back(std::vector<std::unique_ptr<key>>& keys, const std::vector<bool>& which) {
        for (std::size_t i = 0; i < members_.size(); ++i) {
            if (!which[i]) continue;
            try {
                members_[i]->get()->release(*keys[i]);
            } catch (const std::exception&) {
            }
        }
    }

    // Takes the read lock back on every member marked (a promotion that missed the quorum); a
    // member that cannot is released, as a rollback would.
    void demote(std::vector<std::unique_ptr<key>>& keys, const std::vector<bool>& which,
                milliseconds ttl) {
        for (std::size_t i = 0; i < members_.size(); ++i) {
            if (!which[i]) continue;
            try {
                if (members_[i]->get()->try_acquire(*keys[i], lock_mode::shared, ttl)) continue;
            } catch (const std::exception&) {
            }
            try {
                members_[i]->get()->release(*keys[i]);
            } catch (const std::exception&) {
            }
        }
    }

    std::string quorum_text(const tally& t) const {
        const std::size_t n = members_.size();
        return std::string("the quorum (") +
               (rule_ == quorum_rule::consensus ? "consensus, " + std::to_string(n / 2 + 1)
                                                : "unanimous, " + std::to_string(n)) +
               " of " + std::to_string(n) + " members) was not reached: " + std::to_string(t.yes) +
               " granted, " + std::to_string(t.no) + " refused, " + std::to_string(t.failed) +
               " failed";
    }

    quorum_rule rule_;
    std::vector<std::unique_ptr<member>> members_;
    std::optional<std::size_t> fencing_member_;
};

std::optional<std::size_t> fencing_member_of(quorum_rule rule,
                                             const std::vector<capability>& caps) {
    if (rule != quorum_rule::unanimous) return std::nullopt;
    for (std::size_t i = 0; i < caps.size(); ++i)
        if (has(caps[i], capability::fencing)) return i;
    return std::nullopt;
}

bool expiring_disagrees(const std::vector<capability>& caps) {
    std::size_t expiring = 0;
    for (capability c : caps) expiring += has(c, capability::expiring);
    return expiring != 0 && expiring != caps.size();
}

// --- options ---

struct member_config {
    std::string strategy;
    nlohmann::json options;
    strategy_descriptor descriptor;
    capability capabilities = capability::none;
};

struct combined_config {
    quorum_rule rule = quorum_rule::consensus;
    std::vector<member_config> members;
};

capability capabilities_of(const strategy_descriptor& d, const nlohmann::json& options) {
    return d.capabilities_for && !options.is_null() ? d.capabilities_for(options) : d.capabilities;
}

// Reads and checks the options; `check_members` runs each member's own validator too.
// Throws config_error with a pointer relative to combined's options.
combined_config read_config(const nlohmann::json& o, const strategy_registry& registry,
                            bool check_members) {
    if (!o.is_object())
        throw config_error("config.missing", "",
                           "combined needs options: {\"quorum\": \"consensus\", \"members\": "
                           "[{\"strategy\": ..., \"options\": {...}}, ...]}");
    combined_config c;
    for (const auto& [name, value] : o.items()) {
        if (name == "quorum") {
            if (value == "consensus")
                c.rule = quorum_rule::consensus;
            else if (value == "unanimous")
                c.rule = quorum_rule::unanimous;
            else
                throw config_error("config.value", "/quorum",
                                   "quorum must be \"consensus\" (a majority of the members) or "
                                   "\"unanimous\" (every member)");
        } else if (name != "members") {
            throw config_error("config.unknown_key", "/" + json_pointer_token(name),
                               "unknown option '" + name + "' (known: quorum, members)");
        }
    }
    const auto it = o.find("members");
    if (it == o.end() || !it->is_array() || it->empty())
        throw config_error(it == o.end() ? "config.missing" : "config.type", "/members",
                           "members must be a non-empty array of {\"strategy\": <name>, "
                           "\"options\": {...}} (three or more for consensus)");
    for (std::size_t i = 0; i < it->size(); ++i) {
        const auto& m = (*it)[i];
        const std::string at = "/members/" + std::to_string(i);
        if (!m.is_object())
            throw config_error("config.type", at,
                               "a member must be an object {\"strategy\": <name>, \"options\": "
                               "{...}}");
        for (const auto& [name, value] : m.items())
            if (name != "strategy" && name != "options")
                throw config_error("config.unknown_key", at + "/" + json_pointer_token(name),
                                   "unknown member key '" + name + "' (known: strategy, options)");
        const auto s = m.find("strategy");
        if (s == m.end() || !s->is_string())
            throw config_error(s == m.end() ? "config.missing" : "config.type", at + "/strategy",
                               "a member needs \"strategy\": the name of a strategy");
        member_config mc;
        mc.strategy = s->get<std::string>();
        mc.options = m.value("options", nlohmann::json());
        if (mc.strategy == "combined")
            throw config_error("config.value", at + "/strategy",
                               "a combined member cannot be combined itself: list its members "
                               "here instead");
        auto d = registry.find(mc.strategy);
        if (!d) {
            std::string known;
            for (const auto& n : registry.names())
                if (n != "combined") known += (known.empty() ? "" : ", ") + n;
            throw config_error(
                "config.value", at + "/strategy",
                "unknown member strategy '" + mc.strategy + "' (registered: " + known + ")");
        }
        if (check_members) {
            try {
                if (d->validate_options)
                    d->validate_options(mc.options);
                else
                    options_reader(mc.options).finish();
            } catch (const config_error& e) {
                throw config_error(e.id(), at + "/options" + e.pointer(),
                                   member_text(i, mc.strategy) + ": " + e.what());
            }
        }
        mc.capabilities = capabilities_of(*d, mc.options);
        mc.descriptor = std::move(*d);
        c.members.push_back(std::move(mc));
    }
    std::vector<capability> caps;
    for (const auto& m : c.members) caps.push_back(m.capabilities);
    if (expiring_disagrees(caps))
        throw config_error("config.value", "/members",
                           "members must all expire (have TTLs) or none: a TTL means nothing to "
                           "a member without one, and a member with one needs it");
    return c;
}

std::vector<capability> capabilities_of(const combined_config& c) {
    std::vector<capability> caps;
    for (const auto& m : c.members) caps.push_back(m.capabilities);
    return caps;
}

strategy_descriptor make_descriptor(std::function<strategy_registry&()> registry) {
    strategy_descriptor d;
    d.name = "combined";
    d.description =
        "a quorum (consensus or unanimous) of member strategies, e.g. three Redis servers "
        "(Symfony CombinedStore, Redlock's validity)";
    d.default_priority = 70;
    d.capabilities = capability::exclusive | capability::shared | capability::noblock |
                     capability::expiring | capability::distributed | capability::serializable |
                     capability::crash_release | capability::fencing | capability::consensus;
    d.needs_configuration = true;
    d.example_options = {
        {"quorum", "consensus"},
        {"members",
         {{{"strategy", "redis"}, {"options", {{"url", "redis://host1:6379/0"}}}},
          {{"strategy", "redis"}, {"options", {{"url", "redis://host2:6379/0"}}}},
          {{"strategy", "redis"}, {"options", {{"url", "redis://host3:6379/0"}}}}}}};
    // Must not throw: the registry lists what it cannot read as the bare minimum.
    d.capabilities_for = [registry](const nlohmann::json& o) {
        try {
            const auto c = read_config(o, registry(), false);
            return combined_capabilities(c.rule, capabilities_of(c));
        } catch (const std::exception&) {
            return capability::exclusive | capability::noblock;
        }
    };
    d.validate_options = [registry](const nlohmann::json& o) {
        (void)read_config(o, registry(), true);
    };
    d.create = [registry](const nlohmann::json& o) -> std::shared_ptr<store> {
        auto c = read_config(o, registry(), true);
        const auto caps = capabilities_of(c);
        std::vector<std::unique_ptr<member>> members;
        std::size_t down = 0;
        std::string errors;
        for (std::size_t i = 0; i < c.members.size(); ++i) {
            auto& m = c.members[i];
            auto create = [d = m.descriptor, options = m.options] { return d.create(options); };
            members.push_back(std::make_unique<member>(m.strategy, std::move(create)));
            if (const auto& why = members.back()->start_error(); !why.empty()) {
                ++down;
                errors += (errors.empty() ? "" : "; ") + member_text(i, m.strategy) + ": " + why;
            }
        }
        // A member that is down now may come back, but a quorum is needed to start at all.
        if (!quorum_can_be_met(c.rule, down, members.size()))
            throw backend_error("combined", "start",
                                "combined cannot reach its quorum: " + std::to_string(down) +
                                    " of " + std::to_string(members.size()) +
                                    " members cannot start: " + errors,
                                error_kind::transient);
        return std::make_shared<combined_store>(c.rule, std::move(members),
                                                combined_capabilities(c.rule, caps),
                                                fencing_member_of(c.rule, caps));
    };
    return d;
}

}  // namespace

std::shared_ptr<store> make_combined_store(quorum_rule rule, std::vector<combined_member> members) {
    if (members.empty()) throw invalid_argument_error("combined needs at least one member");
    std::vector<capability> caps;
    std::vector<std::unique_ptr<member>> ms;
    for (auto& m : members) {
        if (!m.backend)
            throw invalid_argument_error("combined: member '" + m.strategy + "' has no store");
        caps.push_back(m.backend->capabilities());
        ms.push_back(std::make_unique<member>(m.strategy, std::move(m.backend)));
    }
    if (expiring_disagrees(caps))
        throw invalid_argument_error("combined: members must all expire (have TTLs) or none");
    return std::make_shared<combined_store>(rule, std::move(ms), combined_capabilities(rule, caps),
                                            fencing_member_of(rule, caps));
}

strategy_descriptor combined_strategy_for(strategy_registry& members) {
    return make_descriptor([&members]() -> strategy_registry& { return members; });
}

// The built-in entry. The default registry is looked up at use, not here: this runs while that
// registry is being built.
strategy_descriptor combined_strategy() {
    return make_descriptor([]() -> strategy_registry& { return default_registry(); });
}

}  // namespace locksmith::strategies
