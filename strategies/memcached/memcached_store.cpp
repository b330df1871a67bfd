// The memcached strategy: options, a small pool of libmemcached handles, the store and its
// registry entry.
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <libmemcached/memcached.h>

#include <locksmith/connection_pool.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/module.hpp>
#include <locksmith/strategies/memcached.hpp>

#include "sha256.hpp"

namespace locksmith::strategies {

std::vector<std::pair<std::string, int>> parse_memcached_servers(const std::string& text) {
    std::vector<std::pair<std::string, int>> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        auto end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(start, end - start);
        start = end + 1;
        while (!item.empty() && item.front() == ' ') item.erase(0, 1);
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (item.empty())
            throw invalid_argument_error("memcached servers: empty entry in '" + text + "'");
        std::string host = item;
        std::string port;
        if (item.front() == '[') {
            auto close = item.find(']');
            if (close == std::string::npos)
                throw invalid_argument_error("memcached servers: unterminated [ in '" + item + "'");
            host = item.substr(1, close - 1);
            if (close + 1 < item.size()) {
                if (item[close + 1] != ':')
                    throw invalid_argument_error("memcached servers: bad entry '" + item + "'");
                port = item.substr(close + 2);
            }
        } else if (auto colon = item.rfind(':'); colon != std::string::npos) {
            host = item.substr(0, colon);
            port = item.substr(colon + 1);
            if (port.empty())
                throw invalid_argument_error("memcached servers: empty port in '" + item + "'");
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
                throw invalid_argument_error("memcached servers: port '" + port +
                                             "' is not a number in [1, 65535]");
        }
        if (host.empty())
            throw invalid_argument_error("memcached servers: missing host in '" + item + "'");
        out.emplace_back(host, p);
        if (end == text.size()) break;
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

std::string servers_text(const memcached_options& o) {
    std::string out;
    for (const auto& [host, port] : o.servers)
        out += (out.empty() ? "" : ",") +
               (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
               std::to_string(port);
    return out;
}

// One libmemcached handle (its own connections to every server). Not thread-safe: one user at
// a time, which the pool guarantees.
class handle {
  public:
    explicit handle(const memcached_options& o) : memc_(memcached_create(nullptr)) {
        if (memc_ == nullptr)
            throw backend_error("memcached", "oom", "memcached: cannot allocate a handle");
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_NO_BLOCK, 1);
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT,
                               std::uint64_t(o.connect_timeout.count()));
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_POLL_TIMEOUT,
                               std::uint64_t(o.command_timeout.count()));
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_RCV_TIMEOUT,
                               std::uint64_t(o.command_timeout.count()) * 1000);
        memcached_behavior_set(memc_, MEMCACHED_BEHAVIOR_SND_TIMEOUT,
                               std::uint64_t(o.command_timeout.count()) * 1000);
        for (const auto& [host, port] : o.servers) {
            auto rc = memcached_server_add(memc_, host.c_str(), in_port_t(port));
            if (rc != MEMCACHED_SUCCESS) {
                memcached_free(memc_);
                throw backend_error(
                    "memcached", memcached_strerror(nullptr, rc),
                    "memcached: cannot add server " + host + ":" + std::to_string(port));
            }
        }
    }
    ~handle() { memcached_free(memc_); }
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    memcached_st* get() const noexcept { return memc_; }
    bool broken = false;

  private:
    memcached_st* memc_;
};

// A handle that saw a connection error may have marked its server dead for a while; it is
// dropped, and a fresh one retries at once, so that a restarted server is usable immediately.
using handle_pool = connection_pool<handle>;

handle_pool::settings pool_settings(const memcached_options& options) {
    handle_pool::settings s;
    s.size = options.pool_size;
    s.max_wait = options.connect_timeout + options.command_timeout;
    s.open = [&options] { return std::make_unique<handle>(options); };
    s.reusable = [](const handle& h) { return !h.broken; };
    s.exhausted = [&options] {
        throw backend_error("memcached", "pool",
                            "memcached: all " + std::to_string(options.pool_size) +
                                " connections stayed busy; raise pool_size");
    };
    return s;
}

class memcached_store final : public store {
  public:
    explicit memcached_store(memcached_options options)
        : store("memcached", memcached_capabilities),
          options_(std::move(options)),
          pool_(pool_settings(options_)) {
        auto h = pool_.take();
        auto rc = memcached_version(h->get());
        if (rc != MEMCACHED_SUCCESS) fail(*h, rc, "connecting");
    }

  protected:
    bool do_try_acquire(key& k, lock_mode, milliseconds ttl) override {
        const time_t exp = expiration(ttl);
        const auto item = item_key(k.resource());
        auto h = pool_.take();
        auto rc = memcached_add(h->get(), item.data(), item.size(), k.token().data(),
                                k.token().size(), exp, 0);
        if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED) return true;
        if (rc != MEMCACHED_NOTSTORED && rc != MEMCACHED_DATA_EXISTS)
            fail(*h, rc, "adding the lock item");
        // Taken: by us (a re-acquire renews the TTL) or by another owner.
        return extend(*h, k, item, exp);
    }

    bool do_refresh(key& k, milliseconds ttl) override {
        const time_t exp = expiration(ttl);
        const auto item = item_key(k.resource());
        auto h = pool_.take();
        return extend(*h, k, item, exp);
    }

    void do_release(key& k) override {
        const auto item = item_key(k.resource());
        auto h = pool_.take();
        auto current = gets(*h, item);
        if (!current.found || current.value != k.token()) return;
        // Take the item over by CAS first: if that succeeds, nobody else can have it until we
        // delete it (it cannot expire within 2 s, and add fails while it exists).
        auto rc = memcached_cas(h->get(), item.data(), item.size(), k.token().data(),
                                k.token().size(), 2, 0, current.cas);
        if (rc == MEMCACHED_DATA_EXISTS || rc == MEMCACHED_NOTFOUND) return;  // not ours any more
        if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_STORED)
            fail(*h, rc, "taking over the lock item");
        rc = memcached_delete(h->get(), item.data(), item.size(), 0);
        if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_DELETED && rc != MEMCACHED_NOTFOUND)
            fail(*h, rc, "deleting the lock item");
    }

    bool do_holds(const key& k) override {
        const auto item = item_key(k.resource());
        auto h = pool_.take();
        auto current = gets(*h, item);
        return current.found && current.value == k.token();
    }

    lock_status do_status(std::string_view resource) override {
        const auto item = item_key(resource);
        auto h = pool_.take();
        lock_status s;
        s.held =
            gets(*h, item).found ? lock_status::state::held_exclusive : lock_status::state::free;
        return s;
    }

  private:
    struct item_state {
        bool found = false;
        std::string value;
        std::uint64_t cas = 0;
    };

    // Memcached keeps whole seconds and ticks its clock once a second, so an item set with N s
    // may vanish up to 1 s early: ask for one more second than the TTL rounded up, so that the
    // server never drops a lock the holder still believes valid. Above 30 days Memcached reads
    // the number as a Unix time.
    static time_t expiration(milliseconds ttl) {
        if (ttl < milliseconds(1000))
            throw invalid_argument_error(
                "memcached: ttl must be at least 1 s (Memcached keeps "
                "whole seconds), got " +
                std::to_string(ttl.count()) + " ms");
        const long long seconds = (ttl.count() + 999) / 1000 + 1;
        constexpr long long thirty_days = 30LL * 24 * 3600;
        if (seconds <= thirty_days) return time_t(seconds);
        // The protocol carries a signed 32-bit Unix time: nothing later than January 2038.
        const long long at = std::time(nullptr) + seconds;
        if (at > 0x7fffffffLL)
            throw invalid_argument_error("memcached: ttl of " + std::to_string(ttl.count()) +
                                         " ms ends after 2038-01-19, the last expiry Memcached "
                                         "can represent");
        return time_t(at);
    }

    std::string item_key(std::string_view name) const {
        const std::size_t room = 250 - options_.key_prefix.size();
        bool plain = !name.empty() && name.size() <= room && name.front() != '#';
        for (unsigned char c : name)
            if (c <= 0x20 || c >= 0x7f) plain = false;
        if (plain) return options_.key_prefix + std::string(name);
        return options_.key_prefix + "#" + memcached_detail::sha256_hex(name);
    }

    item_state gets(handle& h, const std::string& item) {
        const char* keys[] = {item.data()};
        const std::size_t lengths[] = {item.size()};
        auto rc = memcached_mget(h.get(), keys, lengths, 1);
        if (rc != MEMCACHED_SUCCESS) fail(h, rc, "reading the lock item");
        item_state out;
        for (;;) {
            memcached_result_st* r = memcached_fetch_result(h.get(), nullptr, &rc);
            if (r == nullptr) break;
            out.found = true;
            out.value.assign(memcached_result_value(r), memcached_result_length(r));
            out.cas = memcached_result_cas(r);
            memcached_result_free(r);
        }
        if (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND && rc != MEMCACHED_SUCCESS)
            fail(h, rc, "reading the lock item");
        return out;
    }

    // Sets a new expiry on our own item, by CAS so that an item someone else took in between is
    // left alone. False when the item is gone or not ours.
    bool extend(handle& h, key& k, const std::string& item, time_t exp) {
        auto current = gets(h, item);
        if (!current.found || current.value != k.token()) return false;
        auto rc = memcached_cas(h.get(), item.data(), item.size(), k.token().data(),
                                k.token().size(), exp, 0, current.cas);
        if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED) return true;
        if (rc == MEMCACHED_DATA_EXISTS || rc == MEMCACHED_NOTFOUND) return false;
        fail(h, rc, "extending the lock item");
    }

    [[noreturn]] void fail(handle& h, memcached_return_t rc, const std::string& what) {
        h.broken = true;
        // Commands that go to every server report SOME_ERRORS; the last error says which.
        if (rc == MEMCACHED_SOME_ERRORS && memcached_last_error(h.get()) != MEMCACHED_SUCCESS)
            rc = memcached_last_error(h.get());
        std::string detail =
            memcached_last_error_message(h.get()) ? memcached_last_error_message(h.get()) : "";
        if (detail.empty()) detail = memcached_strerror(h.get(), rc);
        throw backend_error(
            "memcached", memcached_strerror(h.get(), rc),
            "memcached: " + what + " at " + servers_text(options_) + " failed: " + detail);
    }

    memcached_options options_;
    handle_pool pool_;
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

}  // namespace locksmith::strategies

// The module's entry point (include/locksmith/module.hpp); the metadata is in
// memcached_descriptor.cpp.
extern "C" std::uint32_t locksmith_module_memcached(locksmith::strategy_implementation& out) {
    using namespace locksmith::strategies;
    out.validate_options = [](const nlohmann::json& options) {
        memcached_options::from_json(options);
    };
    out.create = [](const nlohmann::json& options) {
        return make_memcached_store(memcached_options::from_json(options));
    };
    return locksmith::module_api_version;
}
