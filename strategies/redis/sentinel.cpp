// SPDX-License-Identifier: MIT
// Finding the master behind Redis Sentinel: SENTINEL get-master-addr-by-name, checked with ROLE.
#include "sentinel.hpp"

#include <charconv>
#include <string>
#include <string_view>
#include <utility>

#include <locksmith/errors.hpp>

namespace locksmith::strategies::redis_detail {
namespace {

std::string_view text_of(const redisReply* r) {
    return r && r->type == REDIS_REPLY_STRING ? std::string_view(r->str, r->len)
                                              : std::string_view();
}

std::string host_port(const redis_endpoint& e) {
    return (e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) + ":" +
           std::to_string(e.port);
}

}  // namespace

master_locator::master_locator(const redis_options& options,
                               std::shared_ptr<const tls::tls_context> tls)
    : options_(options), tls_(std::move(tls)) {}

std::string master_locator::description() const {
    std::string out = "master '" + options_.master_name + "' of Sentinels ";
    for (std::size_t i = 0; i < options_.sentinels.size(); ++i)
        out += (i ? ", " : "") + host_port(options_.sentinels[i]);
    return out;
}

void master_locator::forget(std::uint64_t generation) noexcept {
    std::lock_guard guard(mutex_);
    // Only the master of that generation: a late failure of an old connection must not make
    // every thread ask again for a master found since.
    if (generation != generation_) return;
    master_.reset();
    ++generation_;
}

std::unique_ptr<connection> master_locator::connect() {
    std::string why;
    std::string code;
    // Twice: the master named first may have been demoted since (its connections fail, or its
    // ROLE says replica); the second answer comes after the Sentinels were asked again.
    for (int attempt = 0; attempt < 2; ++attempt) {
        redis_endpoint master;
        std::uint64_t generation = 0;
        {
            std::lock_guard guard(mutex_);
            if (!master_) master_ = ask_sentinels();
            master = *master_;
            generation = generation_;
        }
        try {
            auto c = std::make_unique<connection>(options_, master, tls_);
            auto role = c->command({"ROLE"});
            c->check(role.get(), "asking for its role");
            const std::string_view said = role->type == REDIS_REPLY_ARRAY && role->elements > 0
                                              ? text_of(role->element[0])
                                              : std::string_view();
            if (said == "master") {
                c->set_master_generation(generation);
                return c;
            }
            why = host_port(master) + " is named by the Sentinels but its ROLE is '" +
                  std::string(said) + "', not master";
            code = "MASTERDOWN";
        } catch (const backend_error& e) {
            // A wrong password or a missing permission stays wrong at the next master.
            if (e.kind() == error_kind::permanent) throw;
            why = e.what();
            code = e.native_code();
        }
        forget(generation);
    }
    throw backend_error("redis", code, "redis: no usable " + description() + ": " + why,
                        error_kind::transient);
}

redis_endpoint master_locator::ask_sentinels() {
    const auto n = options_.sentinels.size();
    std::string failures;
    std::string code;
    std::size_t refused = 0;  // Sentinels that answered no for good
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (first_ + k) % n;
        const auto& sentinel = options_.sentinels[i];
        std::string why;
        try {
            connection s(options_, sentinel, tls_);
            auto r = s.command({"SENTINEL", "get-master-addr-by-name", options_.master_name});
            s.check(r.get(), "asking for the master");
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
                const auto host = text_of(r->element[0]);
                const auto port_text = text_of(r->element[1]);
                int port = 0;
                auto [end, ec] =
                    std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
                if (!host.empty() && ec == std::errc() &&
                    end == port_text.data() + port_text.size() && port > 0 && port < 65536) {
                    redis_endpoint master = options_.endpoint;
                    master.host = std::string(host);
                    master.port = port;
                    master.socket_path.clear();
                    first_ = i;  // the next failover asks this one first
                    return master;
                }
            }
            why = r->type == REDIS_REPLY_NIL ? "does not monitor a master of that name"
                                             : "answered something that is not host and port";
            code = "sentinel";
            ++refused;
        } catch (const backend_error& e) {
            why = e.what();
            code = e.native_code();
            if (e.kind() == error_kind::permanent) ++refused;
        }
        failures += (failures.empty() ? "" : "; ") + host_port(sentinel) + ": " + why;
    }
    throw backend_error("redis", code,
                        "redis: no Sentinel named the " + description() + " (" + failures + ")",
                        refused == n ? error_kind::permanent : error_kind::transient);
}

}  // namespace locksmith::strategies::redis_detail
