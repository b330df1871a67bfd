// SPDX-License-Identifier: MIT
// The mysql_get_lock strategy's JSON options and lock names.
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/mysql_get_lock.hpp>
#include <locksmith/strategies/sql.hpp>

namespace locksmith::strategies {

std::string mysql_get_lock_name(std::string_view name) {
    // 64 characters is MySQL's limit; "locksmith:" takes 10 of them.
    constexpr std::size_t readable_max = 64 - 10;
    bool readable = !name.empty() && name.size() <= readable_max;
    for (char c : name) readable = readable && c >= 0x20 && c <= 0x7e;
    if (readable) return "locksmith:" + std::string(name);
    return "locksmith#" + stable_name_hash(name).hex();
}

mysql_get_lock_options mysql_get_lock_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    mysql_get_lock_options o;
    auto dsn = r.string("dsn");
    if (!dsn)
        throw config_error("config.missing", "/dsn",
                           "option 'dsn' is required (mysql://user@host:3306/database)");
    sql_dsn parsed;
    try {
        parsed = parse_sql_dsn(*dsn);
    } catch (const invalid_argument_error& e) {
        throw config_error("config.value", "/dsn", e.what());
    }
    if (parsed.driver != sql_dsn::kind::mysql)
        throw config_error("config.value", "/dsn",
                           "mysql_get_lock: dsn " + redact_url(*dsn) +
                               " must be a mysql:// or mariadb:// URL "
                               "(mysql://user@host:3306/database)");
    o.dsn = *dsn;
    if (auto v = r.secret("password", o.password_from)) o.password = *v;
    if (!parsed.password.empty() && (!o.password.empty() || !o.password_from.empty()))
        throw config_error("config.value",
                           o.password_from.file.empty()
                               ? (o.password_from.env.empty() ? "/password" : "/password_env")
                               : "/password_file",
                           "the dsn has a password and the options give another: keep one (a "
                           "file or variable, so that the config holds no secret)");
    if (auto v = r.seconds("connect_timeout_s", 0.001, 3600)) o.connect_timeout = *v;
    if (auto v = r.seconds("command_timeout_s", 0.001, 3600)) o.command_timeout = *v;
    if (auto v = r.integer("pool_size", 1, 1024)) o.pool_size = std::size_t(*v);
    r.finish();
    return o;
}

std::vector<std::string> mysql_get_lock_options::backends() const {
    return parse_sql_dsn(dsn).servers();
}

}  // namespace locksmith::strategies
