// SPDX-License-Identifier: MIT
// The etcd strategy: options, the store (etcd's lock recipe over the v3 JSON gateway, on
// http_connection) and the module's entry point.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/etcd.hpp>
#include <locksmith/version.hpp>

#include "etcd_descriptor.hpp"
#include "http_connection.hpp"

namespace locksmith::strategies {
namespace {

using namespace etcd_detail;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr const char* strategy_name = "etcd";

std::string base64(std::string_view in) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = unsigned(std::uint8_t(in[i])) << 16 |
                           unsigned(std::uint8_t(in[i + 1])) << 8 | std::uint8_t(in[i + 2]);
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    if (i < in.size()) {
        unsigned v = unsigned(std::uint8_t(in[i])) << 16;
        if (i + 1 < in.size()) v |= unsigned(std::uint8_t(in[i + 1])) << 8;
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += i + 1 < in.size() ? alphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

// base64's inverse; what is not base64 ends the text.
std::string unbase64(std::string_view in) {
    std::string out;
    unsigned bits = 0;
    int count = 0;
    for (const char c : in) {
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else
            break;
        bits = (bits << 6) | unsigned(v);
        if ((count += 6) >= 8) {
            count -= 8;
            out += char((bits >> count) & 0xff);
        }
    }
    return out;
}

// etcd's JSON carries 64-bit integers as strings, and leaves out fields that are 0 or false.
std::int64_t number(const json& object, const char* field) {
    if (!object.is_object()) return 0;
    const auto it = object.find(field);
    if (it == object.end()) return 0;
    if (it->is_number_integer()) return it->get<std::int64_t>();
    if (!it->is_string()) return 0;
    const auto& text = it->get_ref<const std::string&>();
    std::int64_t n = 0;
    std::from_chars(text.data(), text.data() + text.size(), n);
    return n;
}

const json& field(const json& object, const char* name) {
    static const json missing;
    if (!object.is_object()) return missing;
    const auto it = object.find(name);
    return it == object.end() ? missing : *it;
}

// The smallest key above every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string prefix) {
    while (!prefix.empty()) {
        if (std::uint8_t(prefix.back()) < 0xff) {
            prefix.back() = char(std::uint8_t(prefix.back()) + 1);
            return prefix;
        }
        prefix.pop_back();
    }
    return std::string(1, '\0');  // every key
}

std::string hex(std::uint64_t n) {
    char digits[17];
    auto end = std::to_chars(digits, digits + sizeof digits, n, 16).ptr;
    return std::string(digits, end);
}

// Lease TTLs are whole seconds: rounded up, so that etcd never drops a lease before the holder's
// own clock says it expired.
std::int64_t ttl_seconds(milliseconds ttl) {
    if (ttl <= milliseconds(0))
        throw invalid_argument_error("etcd: ttl must be positive, got " +
                                     std::to_string(ttl.count()) + " ms");
    return (ttl.count() + 999) / 1000;
}

// A key's grant, or its place in the queue while it waits.
struct etcd_key_state final : key_local_state {
    std::int64_t lease = 0;
    std::int64_t ttl_s = 0;
    std::string key;            // the etcd key (raw bytes)
    std::int64_t revision = 0;  // its create revision: the fencing token
    // When the lease was last granted or kept alive: it lives at least the TTL from then. A
    // waiter's grant counts its lifetime from here, not from the start of a long wait.
    key::clock::time_point renewed{};
    bool orphaned = false;  // its release failed: the lease is among the orphaned ones
    // The process that was granted: a fork()ed child's copy of the key releases nothing (the
    // lease is the parent's).
    std::uint64_t generation = fork_generation();
};

// The wire names of the key's queue under a lock name.
struct queue_names {
    queue_names(const std::string& prefix, std::string_view name)
        : queue_names(etcd_lock_queue(prefix, name)) {}
    // The queue of a lock key (`dir` is the key up to its last '/').
    explicit queue_names(std::string queue_dir)
        : dir(std::move(queue_dir)), dir_b64(base64(dir)), end_b64(base64(prefix_end(dir))) {}
    std::string dir;
    std::string dir_b64;
    std::string end_b64;

    // The first key (the holder).
    json first() const { return range("ASCEND", 1); }
    // The last `n` keys, latest first; with `before`, of those created before that revision.
    json last(int n, std::int64_t before = 0) const {
        auto r = range("DESCEND", n);
        if (before) r["max_create_revision"] = std::to_string(before - 1);
        return r;
    }

  private:
    json range(const char* order, int limit) const {
        return {{"key", dir_b64},      {"range_end", end_b64}, {"sort_target", "CREATE"},
                {"sort_order", order}, {"limit", limit},       {"keys_only", true}};
    }
};

// Largest limit of a counting semaphore: a waiter reads the keys of up to limit + 1 permits
// before its own at each look, in one reply (http_connection takes at most 1 MiB).
constexpr std::uint32_t max_permits = 1000;

// The wire names of a counting semaphore: its permits' queue and the key that keeps its limit.
struct permit_names {
    permit_names(const std::string& prefix, std::string_view name)
        : queue(etcd_permit_queue(prefix, name)),
          limit_key(etcd_permit_limit_key(prefix, name)),
          limit_b64(base64(limit_key)) {}
    queue_names queue;
    std::string limit_key;
    std::string limit_b64;
};

// Where a permit key stands, as read at `revision`: how many keys were created before it
// (counted up to limit + 1) and the one just before it (base64; empty when none).
struct permit_place {
    std::size_t before = 0;
    std::string previous;
    std::int64_t revision = 0;
};

// Leases this process gave up but could not revoke: a release, or a waiter giving up, while the
// server was down or unreachable. etcd keeps leases across a restart and renews each to its full
// TTL (plus its election timeout) when it starts, so such a key would stand in the name's queue
// for that long after the server is back, and every waiter queues behind it (the faults run,
// etcd under `restart`: no grant for the rest of the run). Every store of this process on the
// same cluster revokes them before its next acquisition. Process-wide rather than per store: a
// store is often made per acquisition and gone by the time the server is back.
class orphaned_leases {
  public:
    // The list of one cluster (its endpoints and user).
    static orphaned_leases& of(const std::string& cluster) {
        // Never destroyed: a store may still use its list while statics are torn down (a global
        // lock released at exit, the renewal thread).
        static auto* registry_mutex = new std::mutex;
        static auto* registry = new std::map<std::string, std::unique_ptr<orphaned_leases>>;
        std::lock_guard guard(*registry_mutex);
        auto& list = (*registry)[cluster];
        if (!list) list = std::make_unique<orphaned_leases>();
        return *list;
    }

    void add(std::int64_t lease) {
        std::lock_guard guard(mutex_);
        if (std::find(leases_.begin(), leases_.end(), lease) != leases_.end()) return;
        // Bounded: the oldest ones expire on their own meanwhile.
        if (leases_.size() >= max_kept) leases_.pop_front();
        leases_.push_back(lease);
    }

    // All of them, oldest first; the caller adds back those it could not revoke.
    std::deque<std::int64_t> take() {
        std::lock_guard guard(mutex_);
        return std::exchange(leases_, {});
    }

    bool empty() {
        std::lock_guard guard(mutex_);
        return leases_.empty();
    }

  private:
    static constexpr std::size_t max_kept = 4096;
    std::mutex mutex_;
    std::deque<std::int64_t> leases_;
};

// One id whatever the order in which a config lists the endpoints.
std::string cluster_of(const etcd_options& o) {
    auto endpoints = o.endpoints;
    std::sort(endpoints.begin(), endpoints.end());
    std::string id = o.user + '\n';
    for (const auto& e : endpoints) id += e + ',';
    return id;
}

[[noreturn]] void protocol_error(std::string_view what) {
    throw backend_error(
        strategy_name, "protocol",
        "etcd: " + std::string(what) + " failed: the reply is not what etcd's v3 gateway sends",
        error_kind::permanent);
}

// etcd's replies nest 6 levels at most (a transaction's responses, a range, its keys).
constexpr std::size_t max_reply_depth = 32;

// A reply or watch message from `address` (http_connection bounds its size), parsed only when it
// nests at most max_reply_depth deep: a broken or hostile endpoint's deeper one would overflow
// the stack where a parsed value is copied or printed. Null (is_discarded) when it is not JSON.
// Throws backend_error (protocol, permanent) when it nests too deep.
json parse_reply(std::string_view text, std::string_view what, const std::string& address) {
    if (json_too_deep_at(text, max_reply_depth) != std::string_view::npos)
        throw backend_error(strategy_name, "protocol",
                            "etcd: " + std::string(what) + " at " + address +
                                " failed: the reply nests deeper than " +
                                std::to_string(max_reply_depth) +
                                " levels (etcd's are a few deep: is this an etcd endpoint?)",
                            error_kind::permanent);
    return json::parse(text, nullptr, false);
}

// Where a waiter stands, as read at `revision`: the (at most two) keys created just before its
// own, earliest first (base64; none: its turn), and whether they are all the keys before it, the
// holder among them.
struct queue_place {
    std::vector<std::string> before;
    bool complete = false;
    std::int64_t revision = 0;
};

// A waiter's place from the queue's first key (`first`, the kvs of a range) and the last keys
// created before its own (`before`, kvs of a range, latest first).
queue_place place_in_queue(const json& first, const json& before, std::int64_t revision) {
    queue_place p;
    p.revision = revision;
    if (!before.is_array() || before.empty()) {
        p.complete = true;
        return p;
    }
    for (auto kv = before.rbegin(); kv != before.rend(); ++kv) {
        const auto& key = field(*kv, "key");
        if (!key.is_string()) protocol_error("reading the lock's queue");
        p.before.push_back(key.get<std::string>());
    }
    p.complete = first.is_array() && !first.empty() &&
                 number(first[0], "create_revision") == number(before.back(), "create_revision");
    return p;
}

class etcd_store final : public store {
  public:
    explicit etcd_store(etcd_options options)
        : store(strategy_name, etcd_capabilities),
          options_(std::move(options)),
          orphans_(orphaned_leases::of(cluster_of(options_))) {
        for (const auto& e : options_.endpoints) endpoints_.push_back(parse_endpoint(e));
        if (endpoints_.front().tls)
            tls_ = std::make_shared<const tls::tls_context>(
                tls::tls_options{options_.ca_file, options_.cert_file, options_.key_file,
                                 options_.server_name},
                strategy_name);
        // One request now, so that a wrong endpoint or a server that is not etcd fails here.
        call("/v3/maintenance/status", json::object(), "asking for the server's status");
    }

    ~etcd_store() override {
        // The kept leases (no keys on them) are revoked rather than left to their TTL; not when
        // the server is away (they expire on their own), nor in a fork()ed child (the parent's).
        std::vector<kept_lease> kept;
        {
            std::lock_guard guard(mutex_);
            if (generation_ == fork_generation()) kept.swap(leases_);
        }
        for (const auto& l : kept) {
            if (key::clock::now() >= l.renewed + std::chrono::seconds(l.ttl_s)) continue;
            try {
                call("/v3/lease/revoke", {{"ID", std::to_string(l.lease)}}, "revoking the lease");
            } catch (...) {
                break;
            }
        }
    }

  protected:
    bool do_try_acquire(key& k, lock_mode, milliseconds ttl) override {
        if (auto renewed = reacquire(k, ttl)) return *renewed;
        const auto began = key::clock::now();
        auto s = enter_queue(k, ttl);
        if (s.owner) {
            lives_from_its_lease(k, s.state, began);
            return grant(k, std::move(s.state));
        }
        end_key(s.state);
        return false;
    }

    bool do_wait_acquire(key& k, lock_mode, milliseconds ttl, deadline until) override {
        if (auto renewed = reacquire(k, ttl)) return *renewed;
        const auto began = key::clock::now();
        auto s = enter_queue(k, ttl);
        if (s.owner) {
            lives_from_its_lease(k, s.state, began);
            return grant(k, std::move(s.state));
        }
        try {
            if (k.limit() != 0 ? wait_for_permit(k, s.state, std::move(s.permit), ttl, until)
                               : wait_for_turn(s.state, std::move(s.place), ttl, until)) {
                k.set_attempt_started(s.state.renewed);
                return grant(k, std::move(s.state));
            }
        } catch (...) {
            revoke_quietly(s.state.lease);
            throw;
        }
        revoke_quietly(s.state.lease);
        return false;
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        auto* s = k.local_state_of<etcd_key_state>(instance_id());
        if (s == nullptr) return false;
        if (s->orphaned) return false;  // released (the release failed): never renewed again
        const auto seconds = ttl_seconds(ttl);
        // A permit's key is checked too: another client may have deleted it while its lease
        // lives, and then a waiter took its place among the first `limit` (never limit + 1
        // holders that believe they hold past a refresh). A lock's holder is always first.
        if (seconds == s->ttl_s) {
            const auto sent = key::clock::now();
            if (!keep_alive(s->lease)) return false;
            s->renewed = sent;  // for end_key, which keeps the lease after the release
            return k.limit() == 0 || key_is_ours(*s);
        }
        // Another TTL: a lease's TTL is fixed, so move the key to a new lease (a put keeps the
        // create revision, hence the place and the fencing token), then drop the old one.
        const auto sent = key::clock::now();
        const auto fresh = grant_lease(seconds);
        const auto r = call("/v3/kv/txn",
                            {{"compare",
                              {{{"target", "CREATE"},
                                {"key", base64(s->key)},
                                {"create_revision", std::to_string(s->revision)}}}},
                             {"success",
                              {{{"request_put",
                                 {{"key", base64(s->key)},
                                  {"value", base64(k.token())},
                                  {"lease", std::to_string(fresh)}}}}}}},
                            "moving the lock key to a new lease");
        if (!field(r, "succeeded").is_boolean() || !r["succeeded"].get<bool>()) {
            revoke_quietly(fresh);
            return false;
        }
        revoke_quietly(s->lease);
        s->lease = fresh;
        s->ttl_s = seconds;
        s->renewed = sent;
        return true;
    }

    void do_release(key& k) override {
        auto* s = k.local_state_of<etcd_key_state>(instance_id());
        if (s == nullptr) return;
        if (s->generation != fork_generation()) {
            // A fork()ed child's copy: the grant is the parent's, which goes on holding it.
            k.set_local_state(instance_id(), nullptr);
            return;
        }
        try {
            end_key(*s);
        } catch (const backend_error& e) {
            // Transient: the lease is an orphan now (revoke()), which the next acquisition
            // revokes. The state stays for a release that is tried again, but the grant is
            // never renewed or taken up again: it would be revoked under its holder.
            if (e.kind() != error_kind::permanent) s->orphaned = true;
            throw;
        }
        k.set_local_state(instance_id(), nullptr);
    }

    bool do_holds(const key& k) override {
        const auto* s = k.local_state_of<etcd_key_state>(instance_id());
        if (s == nullptr || s->orphaned) return false;
        // The server's word: the key exists (its lease did not expire) and is still the one this
        // grant created. The holder's key is always the first (or among the first `limit`):
        // keys created later come after it.
        return key_is_ours(*s);
    }

    lock_status do_status(std::string_view resource) override {
        const queue_names names(options_.prefix, resource);
        const permit_names permits(options_.prefix, resource);
        // The lock's queue; and a semaphore's limit and how many keys its queue has.
        const auto r = call("/v3/kv/txn",
                            {{"success",
                              {{{"request_range", names.first()}},
                               {{"request_range", {{"key", permits.limit_b64}}}},
                               {{"request_range",
                                 {{"key", permits.queue.dir_b64},
                                  {"range_end", permits.queue.end_b64},
                                  {"count_only", true}}}}}}},
                            "reading the lock's queue");
        const auto& responses = field(r, "responses");
        if (!responses.is_array() || responses.size() != 3)
            protocol_error("reading the lock's queue");
        lock_status st;
        const auto& kvs = field(field(responses[0], "response_range"), "kvs");
        const auto& limit = field(field(responses[1], "response_range"), "kvs");
        if ((!kvs.is_array() || kvs.empty()) && limit.is_array() && !limit.empty()) {
            const auto kept = limit_in(limit[0], permits);
            const auto keys = number(field(responses[2], "response_range"), "count");
            st.limit = kept;
            // The first `limit` keys hold; the others wait.
            st.permits_held = std::uint32_t(std::min<std::int64_t>(keys, kept));
            st.held = *st.permits_held < kept ? lock_status::state::free
                                              : lock_status::state::held_exclusive;
            if (keys > kept) st.holders.push_back(std::to_string(keys - kept) + " waiting");
            return st;
        }
        if (!kvs.is_array() || kvs.empty()) {
            st.held = lock_status::state::free;
            return st;
        }
        st.held = lock_status::state::held_exclusive;
        const auto& holder = kvs[0];
        const auto lease = number(holder, "lease");
        st.holders.push_back("lease " + hex(std::uint64_t(lease)) + ", create revision " +
                             std::to_string(number(holder, "create_revision")));
        if (lease != 0) {
            const auto t = call("/v3/kv/lease/timetolive", {{"ID", std::to_string(lease)}},
                                "reading the holder's lease");
            if (const auto left = number(t, "TTL"); left > 0)
                st.remaining = std::chrono::seconds(left);
        }
        return st;
    }

  private:
    struct queued {
        etcd_key_state state;
        bool owner = false;
        std::optional<queue_place> place;    // a waiter's, when the transaction read it
        std::optional<permit_place> permit;  // a permit waiter's, likewise
    };

    bool key_is_ours(const etcd_key_state& s) {
        const auto r = call("/v3/kv/range", {{"key", base64(s.key)}, {"keys_only", true}},
                            "reading the lock key");
        const auto& kvs = field(r, "kvs");
        return kvs.is_array() && kvs.size() == 1 && number(kvs[0], "create_revision") == s.revision;
    }

    // A key that holds already: renew its lease (Symfony's re-acquire). nullopt when it holds
    // nothing (or its grant is gone), so that the caller acquires afresh.
    std::optional<bool> reacquire(key& k, milliseconds ttl) {
        if (k.local_state_of<etcd_key_state>(instance_id()) == nullptr) return std::nullopt;
        if (do_holds(k) && do_refresh(k, ttl)) return true;
        k.set_local_state(instance_id(), nullptr);
        return std::nullopt;
    }

    // A kept lease renewed before this attempt `began`: the grant lives its TTL from then, not
    // from the attempt's start (a lease granted or renewed within the attempt lives longer than
    // that: the attempt's start stays, so that a late reply still counts against the grant).
    static void lives_from_its_lease(key& k, const etcd_key_state& s,
                                     key::clock::time_point began) {
        if (s.renewed < began) k.set_attempt_started(s.renewed);
    }

    bool grant(key& k, etcd_key_state state) {
        grants_.fetch_add(1, std::memory_order_relaxed);
        k.set_fencing_token(std::uint64_t(state.revision));
        k.set_local_state(instance_id(), std::make_unique<etcd_key_state>(std::move(state)));
        return true;
    }

    // The lock's or the permit's key, at the end of the name's queue, once the leases that
    // earlier revocations could not reach are revoked.
    queued enter_queue(const key& k, milliseconds ttl) {
        revoke_orphans();
        return k.limit() != 0 ? enqueue_permit(k, ttl) : enqueue(k, ttl);
    }

    // Creates k's key under a lease (kept from a release, else a new one: take_lease), at the end
    // of the name's queue, and reads its place there. One round trip with a kept lease, else two.
    queued enqueue(const key& k, milliseconds ttl) {
        queued q;
        q.state.ttl_s = ttl_seconds(ttl);
        const queue_names names(options_.prefix, k.resource());
        bool kept = take_lease(q.state, names.dir);
        json r;
        for (;;) {
            try {
                const auto key_b64 = base64(q.state.key);
                // Created only if absent (a repeated request finds its own key); the queue's first
                // key and (after the put: ours and the two before it) its last three keys are read
                // in the same transaction, so that a waiter knows whom to watch without another
                // round trip.
                r = call("/v3/kv/txn",
                         {{"compare",
                           {{{"target", "CREATE"}, {"key", key_b64}, {"create_revision", "0"}}}},
                          {"success",
                           {{{"request_put",
                              {{"key", key_b64},
                               {"value", base64(k.token())},
                               {"lease", std::to_string(q.state.lease)}}}},
                            {{"request_range", names.first()}},
                            {{"request_range", names.last(3)}}}},
                          {"failure",
                           {{{"request_range", {{"key", key_b64}}}},
                            {{"request_range", names.first()}}}}},
                         "creating the lock key");
                break;
            } catch (const backend_error& e) {
                if (!lease_gone(e, kept)) {
                    revoke_quietly(q.state.lease);
                    throw;
                }
            } catch (...) {
                revoke_quietly(q.state.lease);
                throw;
            }
            kept = new_lease(q.state, names.dir);
        }
        const auto& responses = field(r, "responses");
        const bool created = field(r, "succeeded").is_boolean() && r["succeeded"].get<bool>();
        if (!responses.is_array() || responses.size() != (created ? 3u : 2u))
            protocol_error("creating the lock key");
        const auto& first = field(field(responses[1], "response_range"), "kvs");
        if (created) {
            q.state.revision = number(field(r, "header"), "revision");
            const auto& last = field(field(responses[2], "response_range"), "kvs");
            if (!last.is_array() || last.empty() ||
                number(last[0], "create_revision") != q.state.revision)
                protocol_error("creating the lock key");
            q.place = place_in_queue(first, json(last.begin() + 1, last.end()), q.state.revision);
        } else {
            const auto& own = field(field(responses[0], "response_range"), "kvs");
            if (!own.is_array() || own.empty()) protocol_error("creating the lock key");
            q.state.revision = number(own[0], "create_revision");
        }
        q.owner = first.is_array() && !first.empty() &&
                  number(first[0], "create_revision") == q.state.revision;
        return q;
    }

    // --- counting semaphores ---
    // A permit is a key `<prefix><hash>.permits/<lease>` under the holder's lease; the holders
    // are the first `limit` keys by create revision (FIFO), the others wait. The limit is kept
    // in `<prefix><hash>.limit` (no lease: created once, by the name's first user) and every
    // key is created in a transaction that compares it with the owner's limit.

    // The limit a limit key keeps; a value that is not one is another program's key.
    std::uint32_t limit_in(const json& kv, const permit_names& names) const {
        // etcd's JSON carries values in base64.
        const auto& value = field(kv, "value");
        const auto decoded = unbase64(value.is_string() ? value.get<std::string>() : std::string());
        std::uint32_t kept = 0;
        const auto [end, ec] =
            std::from_chars(decoded.data(), decoded.data() + decoded.size(), kept);
        if (ec != std::errc() || end != decoded.data() + decoded.size() || kept == 0 ||
            kept > max_semaphore_limit)
            throw backend_error(strategy_name, "foreign",
                                "etcd: the key '" + redact_key(names.limit_key) +
                                    "' holds a value that is not a semaphore limit (1.." +
                                    std::to_string(max_semaphore_limit) +
                                    "): another program's key? Delete it (when no locksmith "
                                    "process uses the name) or choose another prefix",
                                error_kind::permanent);
        return kept;
    }

    // The place of a permit key: from a range of the keys before it, latest first.
    static permit_place place_of_permit(const json& before, std::int64_t revision) {
        permit_place p;
        p.revision = revision;
        if (before.is_null()) return p;  // etcd leaves an empty list out
        if (!before.is_array()) protocol_error("reading the semaphore's queue");
        p.before = before.size();
        if (!before.empty()) {
            const auto& key = field(before[0], "key");
            if (!key.is_string()) protocol_error("reading the semaphore's queue");
            p.previous = key.get<std::string>();
        }
        return p;
    }

    // Creates k's permit key under a fresh lease at the end of the name's queue, if the kept
    // limit is k's (created when the name has none yet), and reads its place. Two round trips
    // (three for a name's first user).
    queued enqueue_permit(const key& k, milliseconds ttl) {
        if (k.limit() > max_permits)
            throw invalid_argument_error("etcd: a limit of " + std::to_string(k.limit()) +
                                         " for '" + k.resource() + "' exceeds " +
                                         std::to_string(max_permits) +
                                         " (a waiter reads the keys of the permits before it)");
        const permit_names names(options_.prefix, k.resource());
        const auto limit_text = std::to_string(k.limit());
        queued q;
        q.state.ttl_s = ttl_seconds(ttl);
        bool kept = take_lease(q.state, names.queue.dir);
        try {
            for (int round = 0;; ++round) {
                const auto key_b64 = base64(q.state.key);
                const json own = {{"key", key_b64}, {"keys_only", true}};
                // Created only if absent (a repeated request finds its own key) and only under
                // the owner's limit; the keys before ours (up to limit + 1) are read in the same
                // transaction.
                json r;
                try {
                    r = call("/v3/kv/txn",
                             {{"compare",
                               {{{"target", "CREATE"}, {"key", key_b64}, {"create_revision", "0"}},
                                {{"target", "VALUE"},
                                 {"key", names.limit_b64},
                                 {"value", base64(limit_text)}}}},
                              {"success",
                               {{{"request_put",
                                  {{"key", key_b64},
                                   {"value", base64(k.token())},
                                   {"lease", std::to_string(q.state.lease)}}}},
                                {{"request_range", names.queue.last(int(k.limit()) + 2)}}}},
                              {"failure",
                               {{{"request_range", own}},
                                {{"request_range", {{"key", names.limit_b64}}}}}}},
                             "creating the permit key");
                } catch (const backend_error& e) {
                    if (!lease_gone(e, kept)) throw;
                    kept = new_lease(q.state, names.queue.dir);
                    continue;
                }
                const auto& responses = field(r, "responses");
                if (!responses.is_array() || responses.size() != 2)
                    protocol_error("creating the permit key");
                if (field(r, "succeeded").is_boolean() && r["succeeded"].get<bool>()) {
                    q.state.revision = number(field(r, "header"), "revision");
                    const auto& last = field(field(responses[1], "response_range"), "kvs");
                    if (!last.is_array() || last.empty() ||
                        number(last[0], "create_revision") != q.state.revision)
                        protocol_error("creating the permit key");
                    q.permit =
                        place_of_permit(json(last.begin() + 1, last.end()), q.state.revision);
                    break;
                }
                const auto& mine = field(field(responses[0], "response_range"), "kvs");
                if (mine.is_array() && !mine.empty()) {  // ours, from a request repeated
                    q.state.revision = number(mine[0], "create_revision");
                    auto place = read_permit_place(q.state, k.limit());
                    if (!place) protocol_error("creating the permit key");
                    q.permit = std::move(*place);
                    break;
                }
                const auto& limit = field(field(responses[1], "response_range"), "kvs");
                if (limit.is_array() && !limit.empty()) {
                    const auto kept = limit_in(limit[0], names);
                    if (kept != k.limit())
                        throw invalid_argument_error(
                            "etcd: semaphore '" + k.resource() + "' has a limit of " +
                            std::to_string(kept) + ", kept in '" + redact_key(names.limit_key) +
                            "'; this owner asks for " + limit_text +
                            ". One name has one limit: ask for " + std::to_string(kept) +
                            ", or delete that key (etcdctl del) once no permit is held");
                    // Our number written otherwise ("03"): not a key locksmith wrote.
                    throw backend_error(strategy_name, "foreign",
                                        "etcd: the key '" + redact_key(names.limit_key) +
                                            "' holds the limit " + limit_text +
                                            " in another form than locksmith writes it: "
                                            "another program's key? Delete it (when no "
                                            "locksmith process uses the name)",
                                        error_kind::permanent);
                }
                if (round == 3) protocol_error("creating the semaphore's limit key");
                // The name's first user: keep its limit (only if nobody did meanwhile).
                call(
                    "/v3/kv/txn",
                    {{"compare",
                      {{{"target", "CREATE"}, {"key", names.limit_b64}, {"create_revision", "0"}}}},
                     {"success",
                      {{{"request_put",
                         {{"key", names.limit_b64}, {"value", base64(limit_text)}}}}}}},
                    "creating the semaphore's limit key");
            }
        } catch (...) {
            revoke_quietly(q.state.lease);
            throw;
        }
        q.owner = q.permit->before < k.limit();
        return q;
    }

    // The place of our permit key now; nullopt when the key is gone (or is another one).
    std::optional<permit_place> read_permit_place(const etcd_key_state& s, std::uint32_t limit) {
        const queue_names names(s.key.substr(0, s.key.rfind('/') + 1));
        const auto r =
            call("/v3/kv/txn",
                 {{"success",
                   {{{"request_range", names.last(int(limit) + 1, s.revision)}},
                    {{"request_range", {{"key", base64(s.key)}, {"keys_only", true}}}}}}},
                 "reading the semaphore's queue");
        const auto& responses = field(r, "responses");
        if (!responses.is_array() || responses.size() != 2)
            protocol_error("reading the semaphore's queue");
        const auto& mine = field(field(responses[1], "response_range"), "kvs");
        if (!mine.is_array() || mine.empty() || number(mine[0], "create_revision") != s.revision)
            return std::nullopt;
        return place_of_permit(field(field(responses[0], "response_range"), "kvs"),
                               number(field(r, "header"), "revision"));
    }

    // A waiter's watch: the first waiter (exactly `limit` keys before its own) watches the whole
    // queue for deletions, since any holder's release lets it in; a waiter behind it watches
    // only the key just before its own (deleted, or rewritten when that waiter was granted: see
    // announce_grant), so a release wakes one or two waiters, not all of them.
    struct permit_watch {
        std::unique_ptr<http_connection> stream;
        std::string previous;  // base64; empty: the whole queue
        std::int64_t created = 0;

        bool covers(const permit_place& place, std::uint32_t limit) const {
            if (!stream || created > place.revision) return false;
            return place.before == limit ? previous.empty() : previous == place.previous;
        }
    };

    permit_watch watch_permits(const etcd_key_state& s, const permit_place& place,
                               std::uint32_t limit, deadline until) {
        const queue_names names(s.key.substr(0, s.key.rfind('/') + 1));
        permit_watch w;
        json request;
        if (place.before == limit) {
            // prev_kv: a deletion says which key went (its create revision), so that the first
            // waiter knows without a read whether it was before its own.
            request = {{"create_request",
                        {{"key", names.dir_b64},
                         {"range_end", names.end_b64},
                         {"filters", {"NOPUT"}},
                         {"prev_kv", true}}}};
        } else {
            w.previous = place.previous;
            request = {{"create_request", {{"key", place.previous}}}};
        }
        w.stream = open_watch(request, until, "watching the permit keys before ours", w.created);
        return w;
    }

    // A waiter granted after a wait rewrites its key (same value and lease, same create
    // revision), so that the waiter just behind it, which watches it, looks again: it may be
    // the first waiter now. False when the key is gone.
    bool announce_grant(const key& k, const etcd_key_state& s) {
        const auto r = call("/v3/kv/txn",
                            {{"compare",
                              {{{"target", "CREATE"},
                                {"key", base64(s.key)},
                                {"create_revision", std::to_string(s.revision)}}}},
                             {"success",
                              {{{"request_put",
                                 {{"key", base64(s.key)},
                                  {"value", base64(k.token())},
                                  {"lease", std::to_string(s.lease)}}}}}}},
                            "announcing the permit's grant");
        return field(r, "succeeded").is_boolean() && r["succeeded"].get<bool>();
    }

    // A waiter's lease (a permit or queue key's), kept alive at a third of it as the renewal
    // thread does for holders.
    struct waiting_lease {
        milliseconds ttl, every;
        steady_clock::time_point valid_until, next_keep_alive;
        waiting_lease(const etcd_key_state& s, milliseconds ttl)
            : ttl(ttl),
              every(std::max(milliseconds(500), milliseconds(s.ttl_s * 1000) / 3)),
              valid_until(s.renewed + ttl),
              next_keep_alive(s.renewed + every) {}
    };

    void keep_alive_if_due(etcd_key_state& s, waiting_lease& lease) {
        if (steady_clock::now() < lease.next_keep_alive) return;
        const auto sent = steady_clock::now();
        if (!keep_alive(s.lease)) lost_while_waiting(s);
        s.renewed = sent;
        lease.valid_until = sent + lease.ttl;
        lease.next_keep_alive = sent + lease.every;
    }

    // A waiter's answer to the backend_error it is handling (called from its catch block:
    // `throw;` rethrows that error). A server that restarts (or a member that fails over) is
    // waited for: etcd keeps leases across restarts (and renews each when it starts), so our key
    // keeps its place; the keep-alive that comes first once it answers says whether it did.
    // Until the waiter's deadline: giving up earlier would leave a key that nobody revokes when
    // this process is gone by the server's return (`locksmith run`), and that blocks the queue
    // for a TTL after it. Without a deadline, until the lease could have expired (a lock() must
    // not wait forever for a dead server). False when `until` passes first; true after a pause
    // when the wait goes on.
    static bool wait_out(const backend_error& e, const waiting_lease& lease, deadline until) {
        if (e.kind() == error_kind::permanent) throw;
        const auto pause = milliseconds(200);
        if (until == deadline::max() && steady_clock::now() + pause >= lease.valid_until) throw;
        if (steady_clock::now() + pause >= until) return false;
        std::this_thread::sleep_for(pause);
        return true;
    }

    // Waits until our permit key is among the first `limit`, keeping its lease alive (as
    // wait_for_turn does). `known` is the place the enqueuing transaction read. False when
    // `until` passed first.
    bool wait_for_permit(const key& k, etcd_key_state& s, std::optional<permit_place> known,
                         milliseconds ttl, deadline until) {
        const std::uint32_t limit = k.limit();
        waiting_lease lease(s, ttl);
        permit_watch watch;
        for (;;) {
            if (steady_clock::now() >= until) return false;
            try {
                keep_alive_if_due(s, lease);
                permit_place place;
                if (known) {
                    place = std::move(*known);
                    known.reset();
                } else {
                    auto read = read_permit_place(s, limit);
                    if (!read) lost_while_waiting(s);
                    place = std::move(*read);
                }
                if (place.before < limit) {
                    if (!announce_grant(k, s)) lost_while_waiting(s);
                    return true;
                }
                if (!watch.covers(place, limit)) {
                    watch = watch_permits(s, place, limit, until);
                    // Written meanwhile: look again (the watch stays if it covers what we see).
                    if (place.revision < watch.created) continue;
                }
                const auto events =
                    next_permit_events(watch, std::min(until, lease.next_keep_alive));
                if (events.is_null()) continue;  // keep-alive due, or the watch ended: look again
                bool look_again = false, before_ours_went = false;
                for (const auto& e : events) {
                    // Seen in our read already.
                    if (number(field(e, "kv"), "mod_revision") <= place.revision) continue;
                    // The key before ours was granted or went: we may be the first waiter now.
                    if (!watch.previous.empty()) look_again = true;
                    const auto went = number(field(e, "prev_kv"), "create_revision");
                    if (went == 0 || went == s.revision)
                        look_again = true;  // unknown, or ours
                    else if (went < s.revision)
                        before_ours_went = true;  // (else: behind ours)
                }
                // A key before ours went (none can be created before it later): `limit` - 1
                // are left before ours, so ours is among the first `limit`.
                if (before_ours_went && watch.previous.empty() &&
                    steady_clock::now() < lease.valid_until) {
                    if (!announce_grant(k, s)) lost_while_waiting(s);
                    return true;
                }
                if (!look_again && !before_ours_went) known = std::move(place);
            } catch (const backend_error& e) {
                watch = {};
                if (!wait_out(e, lease, until)) return false;
            }
        }
    }

    // The next events on a permit waiter's watch; null when `until` passed first or the server
    // ended the watch (then dropped: the next look opens another).
    json next_permit_events(permit_watch& w, deadline until) {
        for (;;) {
            const auto result =
                next_watch_result(*w.stream, until, "watching the permit keys before ours");
            if (result.is_null()) return json();
            if (field(result, "canceled").is_boolean()) {
                w = {};
                return json();
            }
            const auto& events = field(result, "events");
            if (events.is_array() && !events.empty()) return events;
        }
    }

    struct deletion {
        std::int64_t revision = 0;  // 0: none (`until` passed, or the server ended the watch)
        std::string key_b64;
    };

    // A watch for the deletions in a lock's queue, reporting every deletion after revision
    // `created`. The whole queue, not the keys before ours, so that the stream serves the next
    // wait on the name too (watch_queue): the gateway ends a watch only with its connection
    // (Go's HTTP/1.1 server reads no more of a request body once the reply starts), so a watch
    // per key cost a new connection, and over TLS a handshake, at every wait (issue 24).
    struct deletion_watch {
        std::unique_ptr<http_connection> stream;
        std::int64_t created = 0;
        // The latest revision its messages reported: a kept watch serves a wait only if the
        // wait read the queue at or after it (the deletions before were read by another wait).
        std::int64_t consumed = 0;
        bool reused = false;           // kept open from an earlier wait (watch_queue)
        std::deque<deletion> pending;  // read from a message, not yet returned

        // True when it reports every deletion in the queue since `place` was read.
        bool covers(const queue_place& place) const {
            return stream != nullptr && created <= place.revision;
        }
    };

    // Waits until every key created before ours is gone. Follows the one or two keys just
    // before ours, on the queue's watch (kept for the next wait: watch_queue; every waiter of
    // the name reads each deletion, and looks again only for those keys). When those were all
    // the keys before ours, their deletions are our turn without another look; otherwise look
    // again after one is deleted, which is then while a key before it still holds. Keeps
    // our lease alive meanwhile. `known` is our place as the enqueuing transaction read it.
    // False when `until` passed first.
    bool wait_for_turn(etcd_key_state& s, std::optional<queue_place> known, milliseconds ttl,
                       deadline until) {
        const queue_names names(s.key.substr(0, s.key.rfind('/') + 1));
        const json ahead = names.last(2, s.revision);
        const json own = {{"key", base64(s.key)}, {"keys_only", true}};
        waiting_lease lease(s, ttl);
        deletion_watch watch;
        // The stream goes back to the store for the next wait on the name, however this one ends.
        struct keep_watch {
            etcd_store& store;
            const std::string& dir;
            deletion_watch& watch;
            ~keep_watch() { store.give_back_watch(dir, watch); }
        } keeper{*this, names.dir, watch};
        for (;;) {
            if (steady_clock::now() >= until) return false;
            try {
                keep_alive_if_due(s, lease);
                queue_place place;
                if (known) {
                    place = std::move(*known);
                    known.reset();
                } else {
                    const auto r = call("/v3/kv/txn",
                                        {{"success",
                                          {{{"request_range", ahead}},
                                           {{"request_range", own}},
                                           {{"request_range", names.first()}}}}},
                                        "reading the lock's queue");
                    const auto& responses = field(r, "responses");
                    if (!responses.is_array() || responses.size() != 3)
                        protocol_error("reading the lock's queue");
                    const auto& mine = field(field(responses[1], "response_range"), "kvs");
                    if (!mine.is_array() || mine.empty() ||
                        number(mine[0], "create_revision") != s.revision)
                        lost_while_waiting(s);
                    place = place_in_queue(field(field(responses[2], "response_range"), "kvs"),
                                           field(field(responses[0], "response_range"), "kvs"),
                                           number(field(r, "header"), "revision"));
                }
                if (place.before.empty()) return true;  // first in the queue
                if (!watch.covers(place)) {
                    watch = watch_queue(names, place.revision, until);
                    // Written meanwhile: a key may be gone already, look again (the watch stays if
                    // it covers what we then see).
                    if (watch.created > place.revision) continue;
                }
                const auto gone = next_deletion(watch, std::min(until, lease.next_keep_alive));
                if (gone.revision == 0) continue;  // keep-alive due, or the watch ended: look again
                const auto at = std::find(place.before.begin(), place.before.end(), gone.key_b64);
                if (gone.revision <= place.revision || at == place.before.end()) {
                    known = std::move(place);  // seen in our read already, or not before ours
                    continue;
                }
                if (!place.complete) continue;  // an earlier key may still hold: look again
                // The keys before ours were all known: what is left of them still is (none can be
                // created before ours later). The place keeps the revision of its read: the two
                // watchers' events may come in either order (etcd may serve one of them from its
                // resync loop).
                place.before.erase(at);
                if (!place.before.empty()) {
                    known = std::move(place);
                    continue;
                }
                // Our turn, without reading the queue again while our lease surely lives.
                if (steady_clock::now() < lease.valid_until) return true;
            } catch (const backend_error& e) {
                // A kept watch that the server (or a proxy) closed while it was idle: replaced
                // at once, as a kept-alive connection is.
                const bool kept_watch_failed =
                    watch.reused && watch.stream && watch.stream->failed();
                watch = {};
                if (kept_watch_failed && e.kind() != error_kind::permanent) continue;
                if (!wait_out(e, lease, until)) return false;
            }
        }
    }

    [[noreturn]] static void lost_while_waiting(const etcd_key_state& s) {
        throw acquire_error("etcd: the lease of a waiter for the lock key '" + redact_key(s.key) +
                            "' expired while it waited (the waiting process was paused or cut off "
                            "from etcd for longer than its TTL of " +
                            std::to_string(s.ttl_s) + " s); try again");
    }

    static std::string redact_key(const std::string& key) {
        std::string out;
        for (unsigned char c : key) out += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
        return out;
    }

    // Opens a watch for the queue's deletions from the server's current revision on, never from
    // an earlier one: etcd serves a watch that starts in the past from a loop that runs every
    // 100 ms, which made hand-overs wait that long whenever anything was written between our
    // read and the watch (bench/harness/analysis.md). Reads the server's confirmations, within
    // request_timeout and not past `wait_until`, the waiter's deadline. A watch kept from an
    // earlier wait on the queue is taken instead when what it has reported so far is older than
    // `revision`, the caller's read of the queue: then it reports every deletion since that read.
    deletion_watch watch_queue(const queue_names& names, std::int64_t revision,
                               deadline wait_until) {
        if (auto kept = take_watch(names.dir, revision); kept.stream) return kept;
        const std::string_view what = "watching the lock's queue";
        const auto until = std::min(wait_until, steady_clock::now() + options_.request_timeout);
        deletion_watch w;
        const json request = {
            {"create_request",
             {{"key", names.dir_b64}, {"range_end", names.end_b64}, {"filters", {"NOPUT"}}}}};
        w.stream = open_watch(request, until, what, w.created);
        w.consumed = w.created;
        return w;
    }

    // One watch stream for `request`, confirmed by the server before `until` (the revision it
    // reports from, exclusive, in `created`).
    std::unique_ptr<http_connection> open_watch(const json& request, deadline until,
                                                std::string_view what, std::int64_t& created) {
        auto stream = open_connection();
        auto& c = *stream;
        std::string error_body;
        const int status =
            c.open_stream("/v3/watch", request.dump(), auth_header(), until, what, error_body);
        if (status != 200) http_error(status, error_body, what, c);
        // The confirmation comes first: etcd holds a watcher's events until it is sent.
        const auto result = next_watch_result(c, until, what);
        if (result.is_null())
            throw backend_error(strategy_name, "timeout",
                                "etcd: " + std::string(what) + " at " + c.address() +
                                    " failed: the watch was not confirmed in time",
                                error_kind::transient);
        if (!field(result, "created").is_boolean() || field(result, "canceled").is_boolean())
            throw backend_error(
                strategy_name, "watch",
                "etcd: " + std::string(what) + " at " + c.address() +
                    " was refused: " + server_text(field(result, "cancel_reason").dump()),
                error_kind::permanent);
        created = number(field(result, "header"), "revision");
        return stream;
    }

    // The next deletion in the watched queue. A message may report several (etcd batches the
    // events of a few revisions): each is returned in turn.
    deletion next_deletion(deletion_watch& w, deadline until) {
        while (w.pending.empty()) {
            const auto result = next_watch_result(*w.stream, until, "watching the lock's queue");
            if (result.is_null()) return {};
            if (field(result, "canceled").is_boolean()) {
                w = {};  // ended (a compaction passed it): the next look opens another
                return {};
            }
            w.consumed = std::max(w.consumed, number(field(result, "header"), "revision"));
            const auto& events = field(result, "events");
            if (events.is_array())
                for (const auto& e : events)
                    if (field(e, "type") == "DELETE") {
                        const auto& key = field(field(e, "kv"), "key");
                        w.pending.push_back(
                            {number(field(e, "kv"), "mod_revision"),
                             key.is_string() ? key.get<std::string>() : std::string()});
                        w.consumed = std::max(w.consumed, w.pending.back().revision);
                    }
        }
        auto d = std::move(w.pending.front());
        w.pending.pop_front();
        return d;
    }

    // --- kept queue watches ---

    // The watch kept for the queue `dir` if it reported nothing after `revision`, or none.
    // One kept longer than max_watch_idle is closed instead: the server queues for it what
    // nobody reads meanwhile.
    deletion_watch take_watch(const std::string& dir, std::int64_t revision) {
        std::lock_guard guard(mutex_);
        forget_if_forked();
        drop_idle_watches();
        deletion_watch w;
        if (const auto it = watches_.find(dir);
            it != watches_.end() && it->second.consumed <= revision) {
            w.stream = std::move(it->second.stream);
            w.created = it->second.created;
            w.consumed = it->second.consumed;
            w.reused = true;
            watches_.erase(it);
        }
        return w;
    }

    // Keeps a wait's watch for the next wait on the queue (at most max_kept_watches queues).
    void give_back_watch(const std::string& dir, deletion_watch& w) noexcept {
        if (!w.stream || w.stream->failed() || w.stream->generation() != fork_generation()) return;
        try {
            std::lock_guard guard(mutex_);
            drop_idle_watches();
            if (watches_.size() >= max_kept_watches && !watches_.contains(dir)) return;
            watches_[dir] = {std::move(w.stream), w.created, w.consumed, steady_clock::now()};
        } catch (...) {
            // Not kept: the next wait opens another.
        }
    }

    void drop_idle_watches() {
        const auto now = steady_clock::now();
        std::erase_if(watches_, [&](const auto& kept) {
            return now - kept.second.idle_since > max_watch_idle;
        });
    }

    // The next message's "result" of a watch stream; null when `until` passed first.
    json next_watch_result(http_connection& c, deadline until, std::string_view what) const {
        const auto message = c.next_message(until, what);
        if (!message) return json();
        auto m = parse_reply(*message, what, c.address());
        if (m.is_discarded()) protocol_error(what);
        if (m.contains("error")) {
            const auto& e = m["error"];
            throw backend_error(strategy_name, "grpc " + std::to_string(number(e, "grpc_code")),
                                "etcd: " + std::string(what) + " at " + c.address() +
                                    " failed: " + server_text(field(e, "message").dump()),
                                error_kind::transient);
        }
        auto result = field(m, "result");
        return result.is_null() ? json::object() : result;
    }

    std::int64_t grant_lease(std::int64_t seconds) {
        const auto r =
            call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}}, "granting a lease");
        const auto id = number(r, "ID");
        if (id == 0) {
            const auto& error = field(r, "error");
            throw backend_error(
                strategy_name, "lease",
                "etcd: granting a lease failed" +
                    (error.is_string() ? ": " + server_text(error.get<std::string>()) : ""),
                error_kind::transient);
        }
        return id;
    }

    // True when the lease is still alive (now renewed to its full TTL).
    bool keep_alive(std::int64_t lease) {
        const auto r =
            call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}, "renewing the lease");
        // Keep-alive is a stream at etcd: the gateway reports the stream's failure (a leader
        // change, a member without a leader) as HTTP 200 with {"error": ...} and no result. That
        // is a failed request, not a lease that is gone (which is a result with TTL 0): taking it
        // for the latter dropped held locks at every leader change.
        if (const auto& e = field(r, "error"); !e.is_null())
            throw backend_error(strategy_name, "grpc " + std::to_string(number(e, "grpc_code")),
                                "etcd: renewing the lease failed: " +
                                    server_text(field(e, "message").is_string()
                                                    ? field(e, "message").get<std::string>()
                                                    : e.dump()),
                                error_kind::transient);
        return number(field(r, "result"), "TTL") > 0;
    }

    // --- leases kept between acquisitions (issue 24) ---
    // A store that grants more than once keeps a released key's lease (the key deleted) for its
    // next acquisition with the same TTL, which then skips the lease grant: an uncontended
    // acquire + release is two round trips, not three. A lease still carries at most one key
    // at a time, so each lock keeps its own TTL, refresh and loss, and a killed holder's key
    // goes with its own lease, as before (etcd.hpp, "One lease per grant").

    // Sets `s`'s lease (and its key in the queue `dir`): the latest kept lease of its TTL,
    // renewed first unless it was renewed lately, or else a new one. True when it was kept.
    bool take_lease(etcd_key_state& s, const std::string& dir) {
        std::optional<kept_lease> found;
        {
            std::lock_guard guard(mutex_);
            forget_if_forked();
            const auto now = key::clock::now();
            std::erase_if(leases_, [&](const kept_lease& l) {  // expired at the server too
                return now >= l.renewed + std::chrono::seconds(l.ttl_s);
            });
            for (auto it = leases_.rbegin(); it != leases_.rend(); ++it)
                if (it->ttl_s == s.ttl_s) {
                    found = *it;
                    leases_.erase(std::next(it).base());
                    break;
                }
        }
        if (!found) return new_lease(s, dir);
        s.lease = found->lease;
        s.key = dir + hex(std::uint64_t(s.lease));
        // A grant lives from its lease's last renewal: a kept lease serves as it is while that
        // costs the grant at most a twentieth of its TTL (and at most a second), else it is
        // renewed to its full TTL first, in one round trip as a grant would be.
        const auto fresh_for = std::min(milliseconds(1000), milliseconds(s.ttl_s * 1000 / 20));
        if (key::clock::now() - found->renewed < fresh_for) {
            s.renewed = found->renewed;
            return true;
        }
        const auto sent = key::clock::now();
        if (!keep_alive(s.lease)) return new_lease(s, dir);  // revoked by another client
        s.renewed = sent;
        return true;
    }

    // A new lease for `s` (and its key in the queue `dir`). False: not a kept one.
    bool new_lease(etcd_key_state& s, const std::string& dir) {
        s.renewed = key::clock::now();
        s.lease = grant_lease(s.ttl_s);
        s.key = dir + hex(std::uint64_t(s.lease));
        return false;
    }

    // Whether `e`, the error of a put on a `kept` lease, says that the lease is gone (another
    // client revoked it, or the process was paused past its TTL): then a new lease is taken.
    static bool lease_gone(const backend_error& e, bool kept) {
        return kept && e.native_code() == "grpc 5";  // "requested lease not found"
    }

    // Ends `s`'s key in one round trip. A store that granted more than once deletes the key and
    // keeps the lease for its next acquisition; otherwise (a process that locks once leaves
    // nothing), or when the key was gone already, the lease is revoked, which deletes the key
    // with it. When the server cannot be reached the lease joins orphans_ (revoked before this
    // process's next acquisition on the cluster) and the error is thrown.
    void end_key(const etcd_key_state& s) {
        if (grants_.load(std::memory_order_relaxed) > 1 && !s.orphaned &&
            s.generation == fork_generation() && room_for_lease()) {
            json r;
            try {
                r = call("/v3/kv/deleterange", {{"key", base64(s.key)}}, "deleting the lock key");
            } catch (const backend_error& e) {
                if (e.kind() != error_kind::permanent) orphans_.add(s.lease);
                throw;
            }
            // Deleted: the lease lived (its key was there); else revoke whatever is left.
            if (number(r, "deleted") == 1) {
                std::lock_guard guard(mutex_);
                if (generation_ == s.generation && leases_.size() < max_kept_leases) {
                    leases_.push_back({s.lease, s.ttl_s, s.renewed});
                    return;
                }
            }
        }
        revoke(s.lease);
    }

    bool room_for_lease() {
        std::lock_guard guard(mutex_);
        return leases_.size() < max_kept_leases;
    }

    // Revokes `lease`; when the server cannot be reached, the lease joins orphans_ (revoked
    // before this process's next acquisition on the cluster) and the error is thrown.
    void revoke(std::int64_t lease) {
        try {
            call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, "revoking the lease");
        } catch (const backend_error& e) {
            // Expired, or revoked by an earlier attempt whose reply was lost: done either way.
            if (e.native_code() == "grpc 5") return;
            if (e.kind() != error_kind::permanent) orphans_.add(lease);
            throw;
        }
    }

    // Revokes the leases that earlier revocations could not reach, until one fails again (the
    // server is still away: the rest wait for the next acquisition).
    void revoke_orphans() {
        if (orphans_.empty()) return;
        auto leases = orphans_.take();
        while (!leases.empty()) {
            const auto lease = leases.front();
            leases.pop_front();
            try {
                revoke(lease);  // kept as an orphan again when it fails transiently
            } catch (const backend_error& e) {
                if (e.kind() == error_kind::permanent) continue;
                for (const auto l : leases) orphans_.add(l);
                return;
            }
        }
    }

    void revoke_quietly(std::int64_t lease) noexcept {
        try {
            revoke(lease);
        } catch (...) {
            // The lease then expires on its own after its TTL.
        }
    }

    // --- requests ---

    // POSTs `body` to `path`; a connection that turns out broken is replaced once (every request
    // the store makes may be repeated). Returns the reply's JSON. Throws backend_error.
    json call(std::string_view path, const json& body, std::string_view what) {
        const auto text = body.dump();
        // One deadline for the request, a second attempt included: a server that never answers
        // or trickles costs request_timeout, not twice that.
        // Within a refresh, no longer than its lease lasts (caller_deadline.hpp).
        const auto until =
            bounded_by_refresh_deadline(steady_clock::now() + options_.request_timeout);
        for (int attempt = 0;; ++attempt) {
            auto c = take();
            const bool reused = c.second;
            http_response r;
            try {
                r = c.first->post(path, text, auth_header(), until, what);
            } catch (const backend_error& e) {
                // A member that failed (a timeout: hung, cut off, without a leader) is left for
                // the next endpoint, so that the next request, a keep-alive's retry included,
                // goes elsewhere instead of waiting on it again.
                if (e.native_code() == "timeout") avoid(c.first->address());
                // A kept-alive connection the server closed meanwhile (a restart): once more.
                if (reused && attempt == 0 && e.kind() != error_kind::permanent &&
                    steady_clock::now() < until)
                    continue;
                throw;
            }
            if (r.status == 401 && !options_.user.empty() && attempt == 0) {
                forget_token();  // expired auth token: authenticate again, once
                give_back(std::move(c.first));
                continue;
            }
            if (r.status != 200) {
                // etcd's "unavailable" (no leader, a member cut off from the others) or
                // "deadline exceeded": the next request tries another member.
                if (r.status >= 500) avoid(c.first->address());
                http_error(r.status, r.body, what, *c.first);
            }
            auto reply = parse_reply(r.body, what, c.first->address());
            give_back(std::move(c.first));
            if (reply.is_discarded()) protocol_error(what);
            return reply;
        }
    }

    [[noreturn]] void http_error(int status, const std::string& body, std::string_view what,
                                 const http_connection& c) {
        const auto reply = parse_reply(body, what, c.address());
        const auto code = number(reply, "code");
        // Scrubbed before it is cut: a cut could leave a part of the password.
        const std::string message = field(reply, "message").is_string()
                                        ? server_text(field(reply, "message").get<std::string>())
                                        : server_text(body).substr(0, 200);
        // gRPC codes: 14 unavailable, 4 deadline exceeded, 8 resource exhausted, 10 aborted.
        const bool transient = code == 14 || code == 4 || code == 8 || code == 10 || status >= 500;
        std::string hint;
        if (status == 404)
            hint = " (is this an etcd >= 3.4 client URL? the v3 gateway answers at /v3/)";
        if (status == 400 && message.find("CommonName") != std::string::npos)
            hint =
                " (etcd 3.4's JSON gateway refuses a client certificate with a CommonName "
                "while authentication is enabled: use one without a CN, and user/password)";
        if (code == 16 || code == 7)
            hint = " (check the etcd user, password and the user's role on the key prefix)";
        throw backend_error(
            strategy_name, code ? "grpc " + std::to_string(code) : "http " + std::to_string(status),
            "etcd: " + std::string(what) + " at " + c.address() + " failed: HTTP " +
                std::to_string(status) + ": " + message + hint,
            transient ? error_kind::transient : error_kind::permanent);
    }

    // Text from the server, for a message: without the password, which a broken or hostile
    // server could echo (found by tests/fuzz/fuzz_etcd_replies).
    std::string server_text(std::string text) const {
        return scrub_secret(std::move(text), options_.password);
    }

    // --- connections ---

    // A fork()ed child: the sockets are the parent's. Closing our copies leaves the parent's
    // connections open. Under mutex_.
    void forget_if_forked() {
        if (generation_ == fork_generation()) return;
        idle_.clear();
        watches_.clear();
        leases_.clear();  // the parent's: a child that used one would create the parent's keys
        generation_ = fork_generation();
    }

    // An idle connection (second = true), or a new one to the first endpoint that answers.
    std::pair<std::unique_ptr<http_connection>, bool> take() {
        {
            std::lock_guard guard(mutex_);
            forget_if_forked();
            drop_idle_watches();
            while (!idle_.empty()) {
                auto c = std::move(idle_.back());
                idle_.pop_back();
                if (!c->stale()) return {std::move(c), true};
            }
        }
        return {open_connection(), false};
    }

    // After a failure at `address`: new connections start at the endpoint after it, and the idle
    // connections to it are dropped. With one endpoint, nothing changes.
    void avoid(const std::string& address) {
        const std::size_t n = endpoints_.size();
        if (n < 2) return;
        for (std::size_t i = 0; i < n; ++i)
            if (endpoints_[i].text == address) {
                std::size_t expected = i;
                preferred_.compare_exchange_strong(expected, (i + 1) % n);
            }
        std::lock_guard guard(mutex_);
        std::erase_if(idle_, [&](const auto& c) { return c->address() == address; });
    }

    void give_back(std::unique_ptr<http_connection> c) {
        if (c->broken() || c->generation() != fork_generation()) return;
        std::lock_guard guard(mutex_);
        if (idle_.size() < max_idle) idle_.push_back(std::move(c));
    }

    std::unique_ptr<http_connection> open_connection() {
        std::string failures;
        const std::size_t n = endpoints_.size();
        const std::size_t start = preferred_.load();
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t at = (start + i) % n;
            try {
                auto c =
                    std::make_unique<http_connection>(endpoints_[at], options_.dial_timeout, tls_);
                preferred_.store(at);
                return c;
            } catch (const backend_error& e) {
                failures += std::string(failures.empty() ? "" : "; ") + e.what();
                // A refused certificate is the same at every member: said once, not hidden.
                if (n == 1 || e.native_code() == "tls") throw;
            }
        }
        throw backend_error(strategy_name, "unreachable",
                            "etcd: no endpoint answered (" + failures +
                                "); is etcd running, and are the endpoints right?",
                            error_kind::transient);
    }

    // --- authentication ---

    std::string auth_header() {
        if (options_.user.empty()) return {};
        {
            std::lock_guard guard(mutex_);
            if (!token_.empty()) return "Authorization: " + token_ + "\r\n";
        }
        auto c = open_connection();
        const json body = {{"name", options_.user}, {"password", options_.password}};
        const auto r = c->post("/v3/auth/authenticate", body.dump(), "",
                               steady_clock::now() + options_.request_timeout, "authenticating");
        if (r.status != 200)
            http_error(r.status, r.body, "authenticating as '" + options_.user + "'", *c);
        const auto reply = parse_reply(r.body, "authenticating", c->address());
        const auto& token = field(reply, "token");
        if (!token.is_string() || token.get<std::string>().empty())
            throw backend_error(strategy_name, "auth",
                                "etcd: authenticating as '" + options_.user +
                                    "' gave no token: is authentication enabled on the cluster?",
                                error_kind::permanent);
        std::lock_guard guard(mutex_);
        token_ = token.get<std::string>();
        return "Authorization: " + token_ + "\r\n";
    }

    void forget_token() {
        std::lock_guard guard(mutex_);
        token_.clear();
    }

    static constexpr std::size_t max_idle = 16;
    static constexpr std::size_t max_kept_watches = 8;
    static constexpr auto max_watch_idle = std::chrono::seconds(2);

    // A released key's lease, without the key, for the store's next acquisition (end_key).
    struct kept_lease {
        std::int64_t lease = 0;
        std::int64_t ttl_s = 0;
        key::clock::time_point renewed{};
    };

    struct kept_watch {
        std::unique_ptr<http_connection> stream;
        std::int64_t created = 0;
        std::int64_t consumed = 0;
        steady_clock::time_point idle_since;
    };

    const etcd_options options_;
    orphaned_leases& orphans_;
    std::vector<endpoint> endpoints_;
    std::shared_ptr<const tls::tls_context> tls_;  // for https:// endpoints
    std::atomic<std::size_t> preferred_{0};
    std::mutex mutex_;
    std::vector<std::unique_ptr<http_connection>> idle_;
    std::map<std::string, kept_watch> watches_;  // by queue (queue_names::dir)
    std::vector<kept_lease> leases_;             // released keys' leases (end_key)
    std::atomic<std::uint64_t> grants_{0};       // end_key's rule: more than one
    static constexpr std::size_t max_kept_leases = 8;
    std::uint64_t generation_ = fork_generation();
    std::string token_;
};

}  // namespace

etcd_options etcd_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    etcd_options o;
    auto endpoints = r.string("endpoints");
    if (!endpoints)
        throw config_error("config.missing", "/endpoints",
                           "option 'endpoints' is required (e.g. \"http://127.0.0.1:2379\")");
    for (auto& item : split_list(*endpoints)) {
        if (!item.empty()) {
            try {
                parse_endpoint(item);
            } catch (const invalid_argument_error& e) {
                throw config_error("config.value", "/endpoints", e.what());
            }
            o.endpoints.push_back(item);
        }
    }
    if (o.endpoints.empty())
        throw config_error("config.value", "/endpoints", "option 'endpoints' lists no endpoint");
    if (auto v = r.seconds("dial_timeout_s", 0.001, 3600)) o.dial_timeout = *v;
    if (auto v = r.seconds("request_timeout_s", 0.001, 3600)) o.request_timeout = *v;
    if (auto v = r.string("prefix")) {
        if (v->size() > 1024)
            throw config_error("config.value", "/prefix",
                               "option 'prefix' is longer than 1024 bytes");
        o.prefix = *v;
    }
    if (auto v = r.string("user")) o.user = *v;
    if (auto v = r.secret("password", o.password_from)) o.password = *v;
    const bool tls = o.endpoints.front().starts_with("https://");
    for (const auto& e : o.endpoints)
        if (e.starts_with("https://") != tls)
            throw config_error("config.value", "/endpoints",
                               "option 'endpoints' mixes http:// and https:// (all members of a "
                               "cluster are reached alike)");
    auto t = tls::read_tls_options(r, tls, "/endpoints", "https:// endpoints");
    o.ca_file = std::move(t.ca_file);
    o.cert_file = std::move(t.cert_file);
    o.key_file = std::move(t.key_file);
    o.server_name = std::move(t.server_name);
    if ((!o.password.empty() || !o.password_from.empty()) && o.user.empty())
        throw config_error("config.value", "/password", "option 'password' needs 'user'");
    r.finish();
    return o;
}

std::shared_ptr<store> make_etcd_store(const etcd_options& options) {
    if (options.endpoints.empty()) throw invalid_argument_error("etcd: no endpoints given");
    if (options.dial_timeout <= milliseconds(0) || options.request_timeout <= milliseconds(0))
        throw invalid_argument_error("etcd: timeouts must be positive");
    if (options.password_from.empty()) return std::make_shared<etcd_store>(options);
    auto with_password = options;
    with_password.password =
        resolve_secret(options.password, options.password_from, "etcd", "password");
    return std::make_shared<etcd_store>(with_password);
}

std::vector<std::string> etcd_options::backends() const {
    std::vector<std::string> ids;
    for (const auto& url : endpoints) {
        const auto e = etcd_detail::parse_endpoint(url);
        for (auto& id : server_identities(e.host, e.port)) ids.push_back(std::move(id));
    }
    return ids;
}

std::string etcd_lock_queue(std::string_view prefix, std::string_view name) {
    return std::string(prefix) + stable_name_hash(name).hex() + "/";
}

std::string etcd_permit_queue(std::string_view prefix, std::string_view name) {
    return std::string(prefix) + stable_name_hash(name).hex() + ".permits/";
}

std::string etcd_permit_limit_key(std::string_view prefix, std::string_view name) {
    return std::string(prefix) + stable_name_hash(name).hex() + ".limit";
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// etcd_descriptor.cpp with the validator and the factory.
namespace {
void add_etcd(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = etcd_metadata();
    locksmith::set_factory<etcd_options>(d, make_etcd_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(etcd, "etcd", locksmith::version, add_etcd)
