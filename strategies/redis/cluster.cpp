// SPDX-License-Identifier: MIT
// Redis Cluster: hash tags, CLUSTER SLOTS, and MOVED / ASK.
#include "cluster.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <locksmith/author/caller_deadline.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/strategies/redis.hpp>

namespace locksmith::strategies::redis_detail {
namespace {

// A command's redirections that are followed at once: a real migration or failover needs two (a
// MOVED, then an ASK while the slot's keys move). More are followed with pauses, for as long as
// the command timeout: while a migration ends, its two nodes may each say for a moment that the
// other one serves the slot (when the source learns it first).
constexpr int max_redirects = 5;

std::uint16_t crc16(std::string_view text) {
    std::uint16_t crc = 0;
    for (const unsigned char c : text) {
        crc = std::uint16_t(crc ^ (unsigned(c) << 8));
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) ? std::uint16_t((crc << 1) ^ 0x1021) : std::uint16_t(crc << 1);
    }
    return crc;
}

std::string host_port(const std::string& host, int port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
}

std::string_view text_of(const redisReply* r) {
    return r && r->type == REDIS_REPLY_STRING ? std::string_view(r->str, r->len)
                                              : std::string_view();
}

bool parse_port(std::string_view text, int& port) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    return ec == std::errc() && end == text.data() + text.size() && port > 0 && port < 65536;
}

[[noreturn]] void redirect_failed(const std::string& why) {
    throw backend_error("redis", "redirect", "redis: " + why, error_kind::permanent);
}

}  // namespace

std::string hash_tag(std::string_view name) {
    std::uint32_t h = 2166136261u;
    for (const unsigned char c : name) h = (h ^ c) * 16777619u;
    char out[11];
    std::snprintf(out, sizeof out, "{%08x}", unsigned(h));
    return std::string(out, 10);
}

std::uint16_t key_slot(std::string_view key) {
    const auto open = key.find('{');
    if (open != std::string_view::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    return std::uint16_t(crc16(key) & (slot_count - 1));
}

slot_router::slot_router(const redis_options& options, std::shared_ptr<const tls::tls_context> tls)
    : options_(options), tls_(std::move(tls)) {}

std::string slot_router::description() const {
    std::string out = "Redis Cluster of ";
    for (std::size_t i = 0; i < options_.cluster.size(); ++i)
        out += (i ? ", " : "") + host_port(options_.cluster[i].host, options_.cluster[i].port);
    return out;
}

slot_router::node* slot_router::node_at(const std::string& host, int port) {
    for (auto& n : nodes_)
        if (n.endpoint.host == host && n.endpoint.port == port) return &n;
    if (nodes_.size() >= max_cluster_nodes)
        throw backend_error("redis", "protocol",
                            "redis: the " + description() + " named more than " +
                                std::to_string(max_cluster_nodes) + " nodes (the last " +
                                host_port(host, port) +
                                "); Redis Cluster has at most 1000: its slot map is not one",
                            error_kind::permanent);
    auto& n = nodes_.emplace_back();
    n.endpoint = options_.endpoint;  // the nodes' credentials
    n.endpoint.host = host;
    n.endpoint.port = port;
    n.endpoint.socket_path.clear();
    n.endpoint.db = 0;
    // A deque keeps its elements where they are: the pool's functions may point at this one.
    const redis_endpoint* where = &n.endpoint;
    auto s = pool_settings(options_, nullptr);
    s.open = [this, where] { return std::make_unique<connection>(options_, *where, tls_); };
    s.exhausted = [this, where] {
        throw backend_error("redis", "pool",
                            "redis: all " + std::to_string(options_.pool_size) +
                                " connections to " + where->redacted() + " (" + description() +
                                ") stayed busy; raise pool_size",
                            error_kind::transient);
    };
    n.pool = std::make_unique<connection_pool>(std::move(s));
    return &n;
}

void slot_router::doubt() noexcept {
    std::lock_guard guard(mutex_);
    known_ = false;
}

void slot_router::refresh(std::uint16_t wanted) {
    std::lock_guard one_at_a_time(refresh_mutex_);
    std::vector<std::pair<std::string, int>> candidates;
    {
        std::lock_guard guard(mutex_);
        if (known_) return;  // another thread just read it
        // The node that answered last first (a stopped one costs its timeouts at each reading),
        // then the masters known so far (one of them is up unless the cluster is down), then
        // the configured nodes.
        if (last_answered_.second) candidates.push_back(last_answered_);
        for (const node* n : slots_)
            if (n) candidates.emplace_back(n->endpoint.host, n->endpoint.port);
    }
    for (const auto& e : options_.cluster) candidates.emplace_back(e.host, e.port);
    struct range {
        long long start, end;
        std::string host;
        int port;
    };
    const auto install = [this](const std::vector<range>& ranges,
                                const std::pair<std::string, int>& from) {
        std::lock_guard guard(mutex_);
        slots_.fill(nullptr);
        for (const auto& x : ranges) {
            node* n = node_at(x.host, x.port);
            for (long long s = x.start; s <= x.end; ++s) slots_[std::size_t(s)] = n;
        }
        known_ = true;
        last_answered_ = from;
    };
    std::optional<std::pair<std::vector<range>, std::pair<std::string, int>>> without_wanted;
    std::vector<std::pair<std::string, int>> tried;
    std::string failures;
    std::string code;
    std::size_t refused = 0;
    for (const auto& candidate : candidates) {
        bool seen = false;
        for (const auto& t : tried) seen = seen || t == candidate;
        if (seen) continue;
        tried.push_back(candidate);
        redis_endpoint e = options_.endpoint;
        e.host = candidate.first;
        e.port = candidate.second;
        e.db = 0;
        std::string why;
        try {
            connection c(options_, e, tls_);
            auto r = c.command({"CLUSTER", "SLOTS"});
            c.check(r.get(), "asking for the slot map");
            // [[start, end, [host, port, id, ...], replica...], ...]
            std::vector<range> ranges;
            long long covered = 0;  // slots named, overlaps counted twice
            bool well_formed = r->type == REDIS_REPLY_ARRAY;
            for (std::size_t i = 0; well_formed && i < r->elements; ++i) {
                const redisReply* entry = r->element[i];
                well_formed = entry->type == REDIS_REPLY_ARRAY && entry->elements >= 3 &&
                              entry->element[0]->type == REDIS_REPLY_INTEGER &&
                              entry->element[1]->type == REDIS_REPLY_INTEGER &&
                              entry->element[2]->type == REDIS_REPLY_ARRAY &&
                              entry->element[2]->elements >= 2 &&
                              entry->element[2]->element[1]->type == REDIS_REPLY_INTEGER;
                if (!well_formed) break;
                const long long port = entry->element[2]->element[1]->integer;
                if (port <= 0 || port >= 65536) {  // before it is narrowed to an int
                    well_formed = false;
                    break;
                }
                range x{entry->element[0]->integer, entry->element[1]->integer,
                        std::string(text_of(entry->element[2]->element[0])), int(port)};
                well_formed =
                    x.start >= 0 && x.start <= x.end && x.end < static_cast<long long>(slot_count);
                // More slots than there are: a map that overlaps itself is not one (and a hostile
                // node's ranges, each of every slot, would cost a pass over the map each).
                covered += well_formed ? x.end - x.start + 1 : 0;
                well_formed = well_formed && covered <= static_cast<long long>(slot_count);
                // No address: the node that answered ("?": unknown, the slot stays unserved).
                if (x.host.empty()) x.host = e.host;
                if (well_formed && x.host != "?") ranges.push_back(std::move(x));
            }
            if (!well_formed) {
                why = "answered CLUSTER SLOTS with something that is not a slot map";
                code = "protocol";
                ++refused;
            } else if (ranges.empty()) {
                why = "serves no slot (not part of a cluster yet?)";
                code = "CLUSTERDOWN";
            } else if (std::none_of(ranges.begin(), ranges.end(), [wanted](const range& x) {
                           return x.start <= wanted && wanted <= x.end;
                       })) {
                why = "serves slot " + std::to_string(wanted) + " by no master";
                code = "CLUSTERDOWN";
                if (!without_wanted) without_wanted.emplace(std::move(ranges), candidate);
            } else {
                install(ranges, candidate);
                return;
            }
        } catch (const backend_error& err) {
            why = err.what();
            code = err.native_code();
            if (err.kind() == error_kind::permanent) ++refused;
        }
        failures += (failures.empty() ? "" : "; ") + host_port(e.host, e.port) + ": " + why;
    }
    if (without_wanted) {  // the cluster is down for that slot, as far as every node knows
        install(without_wanted->first, without_wanted->second);
        return;
    }
    throw backend_error(
        "redis", code,
        "redis: no node of the " + description() + " gave its slot map (" + failures + ")",
        refused == tried.size() ? error_kind::permanent : error_kind::transient);
}

slot_router::node* slot_router::owner(std::uint16_t slot) {
    {
        std::lock_guard guard(mutex_);
        if (known_ && slots_[slot]) return slots_[slot];
        known_ = false;  // a map without a master for the slot is read again, not trusted
    }
    refresh(slot);
    std::lock_guard guard(mutex_);
    if (slots_[slot]) return slots_[slot];
    throw backend_error(
        "redis", "CLUSTERDOWN",
        "redis: slot " + std::to_string(slot) + " is served by no master of the " + description(),
        error_kind::transient);
}

slot_router::lease slot_router::take(std::uint16_t slot) {
    node* n = owner(slot);
    try {
        return n->pool->take();
    } catch (const backend_error& e) {
        if (e.transient()) doubt();  // the master may be gone: ask for the map again
        throw;
    }
}

std::unique_ptr<connection> slot_router::connect(std::uint16_t slot) {
    node* n = owner(slot);
    try {
        return std::make_unique<connection>(options_, n->endpoint, tls_);
    } catch (const backend_error& e) {
        if (e.transient()) doubt();
        throw;
    }
}

bool slot_router::serves(const connection& c, std::uint16_t slot) {
    std::lock_guard guard(mutex_);
    const node* n = slots_[slot];
    return known_ && n && n->endpoint.host == c.endpoint().host &&
           n->endpoint.port == c.endpoint().port;
}

reply_ptr slot_router::command(std::uint16_t slot, std::optional<lease>& c,
                               const std::vector<std::string_view>& args) {
    bool asking = false;
    std::string path;  // the nodes the command went to, for the message
    const auto until =
        bounded_by_refresh_deadline(std::chrono::steady_clock::now() + options_.command_timeout);
    auto pause = std::chrono::milliseconds(10);          // between TRYAGAINs
    auto redirect_pause = std::chrono::milliseconds(5);  // between redirections after the second
    for (int hops = 0;;) {
        reply_ptr reply;
        try {
            if (asking) {
                auto a = (*c)->command({"ASKING"});
                (*c)->check(a.get(), "sending ASKING");
            }
            reply = (*c)->command(args);
        } catch (const backend_error& e) {
            if (e.transient()) doubt();
            throw;
        }
        if (reply->type != REDIS_REPLY_ERROR) return reply;
        const auto code = reply_error_code(*reply);
        // A command on several keys of a slot whose keys are being moved, some here and some
        // there: the migration goes on, the command is tried again (within its timeout).
        if (code == "TRYAGAIN" && std::chrono::steady_clock::now() + pause < until) {
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::milliseconds(200));
            continue;
        }
        if (code != "MOVED" && code != "ASK") {
            if (code == "CLUSTERDOWN") doubt();
            return reply;
        }
        // "MOVED <slot> <host>:<port>" (an empty host: the node that answered)
        const std::string text(reply->str, reply->len);
        const auto space = text.rfind(' ');
        const auto colon = text.rfind(':');
        const auto& from = (*c)->endpoint();
        int port = 0;
        if (space == std::string::npos || colon == std::string::npos || colon < space ||
            !parse_port(std::string_view(text).substr(colon + 1), port))
            (*c)->fail("following a redirection", "protocol",
                       "not a redirection: " + text.substr(0, 200));
        std::string host = text.substr(space + 1, colon - space - 1);
        if (host.empty()) host = from.host;
        if (hops <= max_redirects) path += host_port(from.host, from.port) + " -" + code + "-> ";
        if (code == "MOVED" && host == from.host && port == from.port)
            redirect_failed("node " + host_port(host, port) + " of the " + description() +
                            " answered MOVED to itself for slot " + std::to_string(slot) +
                            ": its cluster configuration is broken");
        if (++hops > max_redirects && std::chrono::steady_clock::now() >= until)
            redirect_failed(std::to_string(hops) + " redirections for slot " +
                            std::to_string(slot) + " of the " + description() + " within " +
                            std::to_string(options_.command_timeout.count()) +
                            " ms (command_timeout_s; first: " + path +
                            "...): the nodes do not "
                            "agree who serves it");
        if (hops > 2) {
            std::this_thread::sleep_for(redirect_pause);
            redirect_pause = std::min(redirect_pause * 2, std::chrono::milliseconds(100));
        }
        node* n = nullptr;
        {
            std::lock_guard guard(mutex_);
            n = node_at(host, port);
            if (code == "MOVED") {
                // The slot moved (a migration ended, a failover): use its new master now, and
                // read the whole map before the next command (other slots may have moved too).
                slots_[slot] = n;
                known_ = false;
            }
        }
        c.reset();
        try {
            c.emplace(n->pool->take());
        } catch (const backend_error& e) {
            if (e.transient()) doubt();
            throw;
        }
        asking = code == "ASK";
    }
}

}  // namespace locksmith::strategies::redis_detail

namespace locksmith::strategies {

namespace {

std::string_view kind_text(redis_key_kind kind) {
    switch (kind) {
        case redis_key_kind::lock:
            return "lock:";
        case redis_key_kind::fence:
            return "fence:";
        case redis_key_kind::wait:
            return "wait:";
        case redis_key_kind::queue:
            return "queue:";
        case redis_key_kind::readers:
            return "readers:";
        case redis_key_kind::chan:
            return "chan:";
        case redis_key_kind::permits:
            return "permits:";
        case redis_key_kind::limit:
            return "limit:";
    }
    throw std::logic_error("unknown redis_key_kind");
}

}  // namespace

std::string redis_key(std::string_view key_prefix, redis_key_kind key_kind, std::string_view name,
                      bool cluster) {
    const std::string_view kind = kind_text(key_kind);
    std::string out;
    out.reserve(key_prefix.size() + kind.size() + name.size() + 10);
    out.append(key_prefix).append(kind);
    if (cluster) out.append(redis_detail::hash_tag(name));
    out.append(name);
    return out;
}

}  // namespace locksmith::strategies
