// SPDX-License-Identifier: MIT
// The pg_advisory strategy's JSON options and key mapping.
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/pg_advisory.hpp>

#include "pg_session.hpp"

namespace locksmith::strategies {

std::int64_t pg_advisory_lock_key(std::string_view name) noexcept {
    return std::int64_t(stable_name_hash(name).high);
}

pg_advisory_options pg_advisory_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    pg_advisory_options o;
    auto dsn = r.string("dsn");
    if (!dsn) throw config_error("config.missing", "/dsn", "option 'dsn' is required");
    try {
        pg::make_pg_target("pg_advisory", *dsn);
    } catch (const invalid_argument_error& e) {
        throw config_error("config.value", "/dsn", e.what());
    }
    o.dsn = *dsn;
    if (auto v = r.secret("password", o.password_from)) o.password = *v;
    if (auto v = r.seconds("connect_timeout_s", 0.001, 3600)) o.connect_timeout = *v;
    if (auto v = r.seconds("command_timeout_s", 0.001, 3600)) o.command_timeout = *v;
    if (auto v = r.integer("pool_size", 1, 1024)) o.pool_size = std::size_t(*v);
    r.finish();
    return o;
}

std::vector<std::string> pg_advisory_options::backends() const {
    return pg::make_pg_target("pg_advisory", dsn).servers;
}

}  // namespace locksmith::strategies
