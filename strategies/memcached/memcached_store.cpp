// SPDX-License-Identifier: MIT
// The memcached strategy: options, the store (on meta_connection, one connection pool per
// server) and the module's entry point.
#include <charconv>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/author/connection_pool.hpp>
#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/memcached.hpp>
#include <locksmith/version.hpp>

#include "memcached_descriptor.hpp"
#include "meta_connection.hpp"

namespace locksmith::strategies {

std::vector<std::pair<std::string, int>> parse_memcached_servers(const std::string& text) {
    // Messages show entries through redact_url: a user may have written a URL with a password.
    auto bad = [](const std::string& why, const std::string& where) {
        throw invalid_argument_error("memcached servers: " + why + " in '" + redact_url(where) +
                                     "'");
    };
    std::vector<std::pair<std::string, int>> out;
    for (const auto& item : split_list(text)) {
        if (item.empty()) bad("empty entry", text);
        // Not quoted at all: what follows '/', '?' or '#' is nothing redact_url knows to hide.
        if (item.find_first_of("@/?#") != std::string::npos)
            throw invalid_argument_error(
                "memcached servers: entry " + std::to_string(out.size() + 1) +
                " is not host:port (it has '@', '/', '?' or '#'); memcached's meta protocol has "
                "no user or password, and entries are not URLs");
        std::string host = item;
        std::string port;
        if (item.front() == '[') {
            auto close = item.find(']');
            if (close == std::string::npos) bad("unterminated [", item);
            host = item.substr(1, close - 1);
            if (close + 1 < item.size()) {
                if (item[close + 1] != ':') bad("text after ] that is not :port", item);
                port = item.substr(close + 2);
            }
        } else if (auto colon = item.rfind(':'); colon != std::string::npos) {
            host = item.substr(0, colon);
            port = item.substr(colon + 1);
            if (port.empty()) bad("empty port", item);
            // ::1 would be host ":" on port 1.
            if (host.find(':') != std::string::npos)
                bad("an IPv6 address goes in brackets ([::1]:11211)", item);
        }
        int p = 11211;
        if (!port.empty()) {
            std::size_t used = 0;
            try {
                p = std::stoi(port, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != port.size() || p < 1 || p > 65535)
                bad("the port is not a number in [1, 65535]", item);
        }
        if (host.empty()) bad("missing host", item);
        // Not quoted either: a "host" with blanks, '=' or quotes is a DSN of another kind
        // ("host=h password=x"), whose parts redact_url may not all know to hide.
        if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789.-_:%") != std::string::npos)
            throw invalid_argument_error("memcached servers: the host of entry " +
                                         std::to_string(out.size() + 1) +
                                         " has characters no host name has; entries are "
                                         "host:port, [ipv6]:port or host");
        out.emplace_back(host, p);
    }
    if (out.empty()) throw invalid_argument_error("memcached servers: none given");
    return out;
}

namespace {

using std::chrono::milliseconds;

void check_prefix(const std::string& prefix) {
    if (prefix.size() > 100)
        throw invalid_argument_error("memcached: key_prefix is longer than 100 bytes");
    for (unsigned char c : prefix)
        if (c <= 0x20 || c >= 0x7f)
            throw invalid_argument_error(
                "memcached: key_prefix must be printable ASCII without spaces");
}

// The state a store keeps in a key it granted: the CAS id of the item as this process last
// stored it, so that release and refresh are one compare-and-act command each.
struct memcached_key_state final : key_local_state {
    std::uint64_t cas = 0;          // 0: unknown (not granted here, or released)
    std::uint64_t incarnation = 0;  // the server process that issued `cas`
};

using meta_connection = memcached_detail::meta_connection;
using meta_status = memcached_detail::meta_status;

// One server of the list and its own connections.
struct server {
    server(std::string host_name, int port_number, const memcached_options& options)
        : host(std::move(host_name)),
          port(port_number),
          address((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                  std::to_string(port)),
          pool(pool_settings(options)) {}

    connection_pool<meta_connection>::settings pool_settings(const memcached_options& options) {
        connection_pool<meta_connection>::settings s;
        s.size = options.pool_size;
        s.max_wait = options.connect_timeout + options.command_timeout;
        s.open = [this, connect = options.connect_timeout, command = options.command_timeout] {
            return std::make_unique<meta_connection>(host, port, connect, command);
        };
        // A connection that saw an error, or that the server closed while it sat idle (a
        // restart), is dropped; the next take() opens a fresh one.
        s.reusable = [](const meta_connection& c) { return !c.broken(); };
        s.still_open = [](const meta_connection& c) { return !c.stale(); };
        s.exhausted = [this, size = options.pool_size] {
            throw backend_error("memcached", "pool",
                                "memcached: all " + std::to_string(size) + " connections to " +
                                    address + " stayed busy; raise pool_size",
                                error_kind::transient);
        };
        return s;
    }

    const std::string host;
    const int port;
    const std::string address;  // "host:port", IPv6 in brackets; also its rendezvous hash seed
    connection_pool<meta_connection> pool;
};

// What became of an item that this owner wanted to renew.
enum class renewal { renewed, gone, not_ours };

// A CAS race lost this many times in a row means something rewrites the item constantly.
constexpr int max_cas_attempts = 8;

// Largest limit of a semaphore: an attempt that finds every permit held has tried each one, a
// round trip apiece (and status reads them all).
constexpr std::uint32_t max_permits = 1000;

// The items of one counting semaphore (memcached.hpp's Counting): all on the server of `base`.
struct permit_items {
    permit_items(std::string_view prefix, std::string_view name)
        : base(memcached_semaphore_key(prefix, name)), limit(base + ".limit") {}
    std::string permit(std::uint32_t i) const { return base + ".permit." + std::to_string(i); }
    std::string base;
    std::string limit;
};

// What a permit item holds: its owner's token and the limit it was granted under, so that a
// limit item lost while permits are held is written again only by owners of the same limit.
std::string permit_value(const key& k) {
    return k.token() + " " + std::to_string(k.limit());
}

// The limit in a permit item's value; nullopt when it is not one locksmith wrote.
std::optional<std::uint32_t> limit_of_permit(std::string_view value) {
    const auto space = value.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    const auto text = value.substr(space + 1);
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n == 0 ||
        std::to_string(n) != text)
        return std::nullopt;
    return n;
}

class memcached_store final : public store {
  public:
    explicit memcached_store(memcached_options options)
        : store("memcached", memcached_capabilities), options_(std::move(options)) {
        for (const auto& [host, port] : options_.servers)
            servers_.push_back(std::make_unique<server>(host, port, options_));
        // Every server must answer (and speak meta) now, so that a wrong endpoint fails here
        // rather than on the first lock whose name happens to hash to it.
        for (auto& s : servers_) {
            auto checked = s->pool.take();
        }
    }

  protected:
    // `ms <item> ... ME c`: one round trip when the lock is free.
    bool do_try_acquire(key& k, lock_mode, milliseconds ttl) override {
        if (k.limit() != 0) return try_permit(k, ttl);
        const long long exp = expiration(ttl);
        const auto item = item_key(k.resource());
        auto c = server_for(item).pool.take();
        for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
            auto added = c->set(item, k.token(), exp, true, 0, "adding the lock item");
            if (added.status == meta_status::stored) {
                remember(k, *c, added.cas);
                return true;
            }
            // Taken: by this owner (a re-acquire renews the TTL) or by another one.
            switch (renew_if_ours(*c, k, item, k.token(), exp, cached_cas(k, *c))) {
                case renewal::renewed:
                    return true;
                case renewal::not_ours:
                    return false;
                case renewal::gone:
                    break;  // expired or released meanwhile: add again
            }
        }
        return false;
    }

    // `ms <item> ... C<cas> c` with the CAS this process stored: one round trip.
    bool do_refresh(key& k, milliseconds ttl) override {
        const long long exp = expiration(ttl);
        const auto held = owned_item(k);
        if (!held) return false;
        auto c = server_for(held->server).pool.take();
        return renew_if_ours(*c, k, held->item, held->value, exp, cached_cas(k, *c)) ==
               renewal::renewed;
    }

    // `md <item> C<cas>` with the CAS this process stored: one round trip. Without it (a key
    // deserialized here) or when the item changed since (the same owner refreshed it through a
    // copy of the key elsewhere, or another owner took it after expiry): read the item, and
    // delete it only when it holds our value, by the CAS just read.
    void do_release(key& k) override {
        const auto held = owned_item(k);
        if (!held) return;
        auto c = server_for(held->server).pool.take();
        remove_if_ours(*c, k, held->item, held->value);
        if (k.limit() != 0) k.portable_state().erase("permit");
    }

    bool do_holds(const key& k) override {
        const auto held = owned_item(k);
        if (!held) return false;
        auto c = server_for(held->server).pool.take();
        auto current = c->get(held->item, "v", "reading the lock item");
        return current.status == meta_status::value && current.value == held->value;
    }

    // A name whose limit item exists is a semaphore: its limit and how many permits are held
    // (one read per permit). Otherwise the lock item's state.
    lock_status do_status(std::string_view resource) override {
        const permit_items items(options_.key_prefix, resource);
        {
            auto c = server_for(items.base).pool.take();
            if (auto kept = read_limit(*c, items, resource)) {
                lock_status s;
                s.limit = *kept;
                s.permits_held = 0;
                for (std::uint32_t i = 1; i <= *kept && i <= max_permits; ++i)
                    if (c->get(items.permit(i), "", "reading a permit item").status !=
                        meta_status::miss)
                        ++*s.permits_held;
                s.held = *s.permits_held < *kept ? lock_status::state::free
                                                 : lock_status::state::held_exclusive;
                return s;
            }
        }
        const auto item = item_key(resource);
        auto c = server_for(item).pool.take();
        auto current = c->get(item, "t", "reading the lock item");
        lock_status s;
        if (current.status == meta_status::miss) {
            s.held = lock_status::state::free;
        } else {
            s.held = lock_status::state::held_exclusive;
            if (current.ttl && *current.ttl >= 0) s.remaining = std::chrono::seconds(*current.ttl);
        }
        return s;
    }

  private:
    // The item k holds (or would hold) and the value that says it is k's: the lock item and the
    // token, or for a permit the item of the permit k was granted (none: nothing held) and the
    // token with the limit. `server` picks the server (a semaphore's items share its base's).
    struct held_item {
        std::string server;
        std::string item;
        std::string value;
    };
    std::optional<held_item> owned_item(const key& k) const {
        if (k.limit() == 0) {
            auto item = item_key(k.resource());
            return held_item{item, item, k.token()};
        }
        const auto& state = k.portable_state();
        const auto it = state.find("permit");
        if (it == state.end() || !it->is_number_unsigned()) return std::nullopt;
        const auto i = it->get<std::uint64_t>();
        if (i == 0 || i > k.limit()) return std::nullopt;
        const permit_items items(options_.key_prefix, k.resource());
        return held_item{items.base, items.permit(std::uint32_t(i)), permit_value(k)};
    }

    // One attempt at a permit: renew the one k holds, or add the first free permit item of
    // 1..limit, then check that the limit item still says k's limit. The check comes after
    // the add so that an owner that read the limit just before the item was lost (evicted,
    // deleted) and re-written with another limit never keeps a permit beside that limit's
    // owners; a full semaphore reads the limit item only to tell a mismatch.
    bool try_permit(key& k, milliseconds ttl) {
        if (k.limit() > max_permits)
            throw invalid_argument_error("memcached: a limit of " + std::to_string(k.limit()) +
                                         " for '" + k.resource() + "' exceeds " +
                                         std::to_string(max_permits) +
                                         " (an attempt tries each permit item in turn)");
        const long long exp = expiration(ttl);
        const permit_items items(options_.key_prefix, k.resource());
        const auto value = permit_value(k);
        auto c = server_for(items.base).pool.take();
        if (const auto held = owned_item(k)) {  // a re-acquire renews the TTL
            if (renew_if_ours(*c, k, held->item, value, exp, cached_cas(k, *c)) == renewal::renewed)
                return true;
            k.portable_state().erase("permit");
        }
        for (std::uint32_t permit = 1; permit <= k.limit(); ++permit) {
            const auto item = items.permit(permit);
            auto added = c->set(item, value, exp, true, 0, "adding a permit item");
            if (added.status != meta_status::stored) continue;
            remember(k, *c, added.cas);
            try {
                keep_limit(*c, k, items, permit);
            } catch (...) {
                give_back(server_for(items.base), *c, k, item, value);
                throw;
            }
            k.portable_state()["permit"] = std::uint64_t(permit);
            return true;
        }
        if (const auto kept = read_limit(*c, items, k.resource()); kept && *kept != k.limit())
            throw limit_mismatch(k, items, *kept);
        return false;
    }

    // After k took permit `taken`: the limit item must say k's limit. When it is gone (the
    // name's first use, or memcached evicted it or someone deleted it), k writes it again (an
    // add: one writer wins) unless a permit item of 1..limit holds another limit: an owner of
    // another limit then gets the mismatch instead of the limit of its choice. Holders under a
    // larger limit, whose permits lie beyond k's, keep them: at most that larger limit hold.
    void keep_limit(meta_connection& c, const key& k, const permit_items& items,
                    std::uint32_t taken) {
        for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
            if (const auto kept = read_limit(c, items, k.resource())) {
                if (*kept != k.limit()) throw limit_mismatch(k, items, *kept);
                return;
            }
            for (std::uint32_t i = 1; i <= k.limit(); ++i) {
                if (i == taken) continue;
                auto other = c.get(items.permit(i), "v", "reading a permit item");
                if (other.status != meta_status::value) continue;
                // A value locksmith did not write holds a permit out of use; it is no holder.
                const auto limit = limit_of_permit(other.value);
                if (limit && *limit != k.limit()) throw limit_mismatch(k, items, *limit);
            }
            const auto limit_text = std::to_string(k.limit());
            if (c.set(items.limit, limit_text, 0, true, 0, "adding the limit item").status ==
                meta_status::stored)
                return;
            // Another owner wrote it meanwhile: read it again.
        }
        throw_cas_race(c, "adding the limit item");
    }

    // The limit kept in the name's limit item; nullopt when there is none.
    // Throws backend_error for a value that is not a limit locksmith wrote.
    static std::optional<std::uint32_t> read_limit(meta_connection& c, const permit_items& items,
                                                   std::string_view resource) {
        auto current = c.get(items.limit, "v", "reading the limit item");
        if (current.status != meta_status::value) return std::nullopt;
        std::uint32_t n = 0;
        const auto& text = current.value;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec != std::errc() || end != text.data() + text.size() || n == 0 ||
            n > max_semaphore_limit || std::to_string(n) != text)
            throw backend_error("memcached", "foreign",
                                "memcached: the limit item '" + items.limit + "' of semaphore '" +
                                    std::string(resource) + "' at " + c.address() +
                                    " holds a value that is not a semaphore limit (1.." +
                                    std::to_string(max_semaphore_limit) +
                                    "): another program's item? Delete it (md " + items.limit +
                                    ") or choose another key_prefix",
                                error_kind::permanent);
        return n;
    }

    static invalid_argument_error limit_mismatch(const key& k, const permit_items& items,
                                                 std::uint32_t kept) {
        return invalid_argument_error(
            "memcached: semaphore '" + k.resource() + "' has a limit of " + std::to_string(kept) +
            ", kept in the item '" + items.limit + "'; this owner asks for " +
            std::to_string(k.limit()) + ". One name has one limit: ask for " +
            std::to_string(kept) + ", or delete that item (md " + items.limit +
            ") once no permit is held");
    }

    // Gives back a permit k just took and may not keep, on a fresh connection when `c` failed
    // (the add did succeed); an error on the way loses to the reason, and the permit then
    // expires with its TTL.
    void give_back(server& at, meta_connection& c, key& k, const std::string& item,
                   const std::string& value) noexcept {
        try {
            if (!c.broken()) {
                remove_if_ours(c, k, item, value);
            } else {
                auto fresh = at.pool.take();
                remove_if_ours(*fresh, k, item, value);
            }
        } catch (const std::exception&) {
            forget(k);
        }
    }

    // Deletes `item` when it holds `value`: by the CAS this process stored first, else (or when
    // the item changed since) after reading it, by the CAS just read; never another owner's.
    void remove_if_ours(meta_connection& c, key& k, const std::string& item,
                        const std::string& value) {
        std::uint64_t cas = cached_cas(k, c);
        for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
            if (cas != 0) {
                auto deleted = c.remove(item, cas, "deleting the lock item");
                if (deleted.status != meta_status::exists) {  // deleted, or gone already
                    forget(k);
                    return;
                }
            }
            auto current = c.get(item, "v c", "reading the lock item");
            if (current.status != meta_status::value || current.value != value) {
                forget(k);  // gone, or another owner's: never delete it
                return;
            }
            cas = current.cas;
        }
        throw_cas_race(c, "deleting the lock item");
    }

    // Memcached keeps whole seconds and ticks its clock once a second, so an item set with N s
    // may vanish up to 1 s early: ask for one more second than the TTL rounded up, so that the
    // server never drops a lock the holder still believes valid. Above 30 days Memcached reads
    // the number as a Unix time.
    static long long expiration(milliseconds ttl) {
        if (ttl < milliseconds(1000))
            throw invalid_argument_error(
                "memcached: ttl must be at least 1 s (Memcached keeps "
                "whole seconds), got " +
                std::to_string(ttl.count()) + " ms");
        const long long seconds = (ttl.count() + 999) / 1000 + 1;
        constexpr long long thirty_days = 30LL * 24 * 3600;
        if (seconds <= thirty_days) return seconds;
        // The protocol carries a signed 32-bit Unix time: nothing later than January 2038.
        const long long at = std::time(nullptr) + seconds;
        if (at > 0x7fffffffLL)
            throw invalid_argument_error("memcached: ttl of " + std::to_string(ttl.count()) +
                                         " ms ends after 2038-01-19, the last expiry Memcached "
                                         "can represent");
        return at;
    }

    std::string item_key(std::string_view name) const {
        return memcached_item_key(options_.key_prefix, name);
    }

    // Rendezvous (highest random weight) hashing: each item goes to the server whose hash with
    // the item key is highest. Stable across processes and versions (stable_name_hash), and
    // removing a server moves only that server's items.
    server& server_for(std::string_view item) {
        if (servers_.size() == 1) return *servers_.front();
        server* best = nullptr;
        std::uint64_t best_weight = 0;
        for (auto& s : servers_) {
            const std::uint64_t weight = memcached_server_weight(s->address, item);
            if (best == nullptr || weight > best_weight) {
                best = s.get();
                best_weight = weight;
            }
        }
        return *best;
    }

    // The CAS this process stored for k's item, if the same server process still answers:
    // a restarted memcached hands out the same CAS ids again, to other owners' items.
    std::uint64_t cached_cas(const key& k, const meta_connection& c) const {
        const auto* state = k.local_state_of<memcached_key_state>(instance_id());
        return state != nullptr && state->incarnation == c.incarnation() ? state->cas : 0;
    }

    void remember(key& k, const meta_connection& c, std::uint64_t cas) {
        auto* state = k.local_state_of<memcached_key_state>(instance_id());
        if (state == nullptr) {
            auto fresh = std::make_unique<memcached_key_state>();
            state = fresh.get();
            k.set_local_state(instance_id(), std::move(fresh));
        }
        state->cas = cas;
        state->incarnation = c.incarnation();
    }

    void forget(key& k) {
        if (auto* state = k.local_state_of<memcached_key_state>(instance_id())) state->cas = 0;
    }

    // Sets a new expiry on the item when it holds `value`: by `cas` first when known, else
    // (or when the item changed since) after reading the item, by the CAS just read, so that an
    // item someone else took in between is left alone.
    renewal renew_if_ours(meta_connection& c, key& k, const std::string& item,
                          const std::string& value, long long exp, std::uint64_t cas) {
        for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
            if (cas != 0) {
                auto stored = c.set(item, value, exp, false, cas, "extending the lock item");
                if (stored.status == meta_status::stored) {
                    remember(k, c, stored.cas);
                    return renewal::renewed;
                }
                if (stored.status == meta_status::not_found) {
                    forget(k);
                    return renewal::gone;
                }
                // EX: changed since that CAS; look at who has it now.
            }
            auto current = c.get(item, "v c", "reading the lock item");
            if (current.status != meta_status::value) {
                forget(k);
                return renewal::gone;
            }
            if (current.value != value) {
                forget(k);
                return renewal::not_ours;
            }
            cas = current.cas;
        }
        throw_cas_race(c, "extending the lock item");
    }

    [[noreturn]] static void throw_cas_race(const meta_connection& c, const std::string& what) {
        throw backend_error("memcached", "cas_race",
                            "memcached: " + what + " at " + c.address() +
                                " failed: the item changed under every one of " +
                                std::to_string(max_cas_attempts) + " compare-and-set attempts",
                            error_kind::transient);
    }

    memcached_options options_;
    std::vector<std::unique_ptr<server>> servers_;
};

}  // namespace

memcached_options memcached_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    memcached_options o;
    auto servers = r.string("servers");
    if (!servers) throw config_error("config.missing", "/servers", "option 'servers' is required");
    try {
        o.servers = parse_memcached_servers(*servers);
    } catch (const invalid_argument_error& e) {
        throw config_error("config.value", "/servers", e.what());
    }
    if (auto v = r.seconds("connect_timeout_s", 0.001, 3600)) o.connect_timeout = *v;
    if (auto v = r.seconds("command_timeout_s", 0.001, 3600)) o.command_timeout = *v;
    if (auto v = r.string("key_prefix")) {
        try {
            check_prefix(*v);
        } catch (const invalid_argument_error& e) {
            throw config_error("config.value", "/key_prefix", e.what());
        }
        o.key_prefix = *v;
    }
    if (auto v = r.integer("pool_size", 1, 1024)) o.pool_size = std::size_t(*v);
    r.finish();
    return o;
}

std::shared_ptr<store> make_memcached_store(const memcached_options& options) {
    if (options.servers.empty()) throw invalid_argument_error("memcached: no servers given");
    if (options.pool_size == 0) throw invalid_argument_error("memcached: pool_size must be >= 1");
    if (options.connect_timeout <= milliseconds(0) || options.command_timeout <= milliseconds(0))
        throw invalid_argument_error("memcached: timeouts must be positive");
    check_prefix(options.key_prefix);
    return std::make_shared<memcached_store>(options);
}

std::vector<std::string> memcached_options::backends() const {
    std::vector<std::string> ids;
    for (const auto& [host, port] : servers)
        for (auto& id : server_identities(host, port)) ids.push_back(std::move(id));
    return ids;
}

namespace {
// `<prefix><name>` when the name is printable ASCII without spaces and leaves `suffix` bytes of
// the 250-byte key limit; `<prefix>#<sha256 of the name>` otherwise.
std::string item_key_leaving(std::string_view key_prefix, std::string_view name,
                             std::size_t suffix) {
    const std::size_t used = key_prefix.size() + suffix;
    const std::size_t room = used < 250 ? 250 - used : 0;
    bool plain = !name.empty() && name.size() <= room && name.front() != '#';
    for (unsigned char c : name)
        if (c <= 0x20 || c >= 0x7f) plain = false;
    if (plain) return std::string(key_prefix) + std::string(name);
    return std::string(key_prefix) + "#" + sha256_hex(name);
}
}  // namespace

std::string memcached_item_key(std::string_view key_prefix, std::string_view name) {
    return item_key_leaving(key_prefix, name, 0);
}

std::string memcached_semaphore_key(std::string_view key_prefix, std::string_view name) {
    // The longest suffix: ".permit." and four digits (max_permits).
    return item_key_leaving(key_prefix, name, 12);
}

std::uint64_t memcached_server_weight(std::string_view address, std::string_view item_key) {
    thread_local std::string probe;
    probe.assign(address).append(1, '\n').append(item_key);
    return stable_name_hash(probe).high;
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// memcached_descriptor.cpp with the validator and the factory. liblocksmith_memcached.so gets
// the entry point locksmith_plugin_info from CMake (cmake/LocksmithStrategy.cmake); the
// locksmith command links locksmith_plugin_info_memcached directly.
namespace {
void add_memcached(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = memcached_metadata();
    locksmith::set_factory<memcached_options>(d, make_memcached_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(memcached, "memcached", locksmith::version, add_memcached)
