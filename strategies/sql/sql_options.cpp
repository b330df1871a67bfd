// SPDX-License-Identifier: MIT
// The sql strategy's JSON options and the table's name (its DSN is parsed in config/sql_dsn.cpp).
// Messages never contain the password: the DSN is only ever shown through redact_url.
#include <cctype>
#include <string>
#include <string_view>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/sql.hpp>

#include "sql_driver.hpp"

namespace locksmith::strategies {
namespace {

bool plain_identifier(const std::string& s) {
    if (s.empty() || s.size() > 63) return false;
    if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (unsigned char c : s)
        if (!(std::isalnum(c) || c == '_')) return false;
    return true;
}

// The schema every user of the database shares; "" where an unqualified name already means
// one table per database (MariaDB: the DSN's database, whoever connects).
const char* default_schema(sql_dsn::kind driver) {
    switch (driver) {
        case sql_dsn::kind::sqlite:
            return "main";
        case sql_dsn::kind::postgresql:
            return "public";
        case sql_dsn::kind::mysql:
            return "";
    }
    return "";
}

}  // namespace

namespace sql_detail {

std::string table_name_problem(const sql_options& o) {
    if (!plain_identifier(o.table))
        return "the table must be a plain identifier (letters, digits and _, not starting with a "
               "digit, at most 63 characters), optionally after a schema: schema.table";
    if (o.schema.empty()) return "";
    if (!plain_identifier(o.schema))
        return "the table's schema must be a plain identifier (letters, digits and _, not "
               "starting with a digit, at most 63 characters)";
    // A per-session or per-connection schema would give every connection a table of its own.
    if (o.dsn.driver == sql_dsn::kind::sqlite && o.schema != "main")
        return "a SQLite table's schema can only be main (temp is one per connection, and no "
               "other database is attached)";
    if (o.dsn.driver == sql_dsn::kind::postgresql && o.schema.rfind("pg_", 0) == 0)
        return "the table's schema cannot be one of PostgreSQL's pg_* schemas (pg_temp is one "
               "per session): name a schema every user of the locks shares";
    return "";
}

std::string table_sql(const sql_options& o, char quote) {
    const std::string schema = o.schema.empty() ? default_schema(o.dsn.driver) : o.schema;
    // table_name_problem keeps quotes out of both names.
    const std::string table = quote + o.table + quote;
    return schema.empty() ? table : quote + schema + quote + "." + table;
}

std::string table_shown(const sql_options& o) {
    const std::string schema = o.schema.empty() ? default_schema(o.dsn.driver) : o.schema;
    return schema.empty() ? o.table : schema + "." + o.table;
}

}  // namespace sql_detail

sql_options sql_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    sql_options o;
    auto dsn = r.string("dsn");
    if (!dsn)
        throw config_error("config.missing", "/dsn",
                           "option 'dsn' is required (sqlite:///path/to/locks.db, "
                           "postgresql://user:password@host:5432/db or "
                           "mysql://user:password@host:3306/db)");
    try {
        o.dsn = parse_sql_dsn(*dsn);
    } catch (const invalid_argument_error& e) {
        throw config_error("config.value", "/dsn", e.what());
    }
    if (auto v = r.secret("password", o.password_from)) o.password = *v;
    if (o.dsn.driver == sql_dsn::kind::sqlite && (!o.password.empty() || !o.password_from.empty()))
        throw config_error(
            "config.value", "/password",
            "a sqlite:// database takes no password (a file's permissions guard it)");
    if (auto v = r.string("table")) {
        const auto dot = v->find('.');
        o.table = dot == std::string::npos ? *v : v->substr(dot + 1);
        o.schema = dot == std::string::npos ? "" : v->substr(0, dot);
        auto problem = sql_detail::table_name_problem(o);
        if (dot == 0) problem = "the schema before '.' is empty";
        if (!problem.empty())
            throw config_error("config.value", "/table", "option 'table': " + problem);
    }
    if (auto v = r.boolean("create_table")) o.create_table = *v;
    if (auto v = r.seconds("connect_timeout_s", 0.001, 3600)) o.connect_timeout = *v;
    if (auto v = r.seconds("command_timeout_s", 0.001, 3600)) o.command_timeout = *v;
    if (auto v = r.integer("pool_size", 1, 1024)) o.pool_size = std::size_t(*v);
    r.finish();
    return o;
}

std::vector<std::string> sql_options::backends() const {
    return dsn.servers();
}

}  // namespace locksmith::strategies
