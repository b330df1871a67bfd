// SPDX-License-Identifier: MIT
// options_reader: strict reading of a strategy's JSON options, for strategy authors.
//
// Every accessor marks its key as known; finish() rejects any key nobody asked for. Errors are
// config_errors whose pointer is relative to the options object ("/lock_dir"); the registry
// prefixes "/strategies/<name>/options".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace locksmith {

// Where a secret (a password, zookeeper's auth) comes from when the config should not hold it, so
// that a config file can be readable by all: a file of its owner's alone (option `<name>_file`,
// read by read_secret_file) or an environment variable (option `<name>_env`, its name). Read where
// the store is made (resolve_secret in make_*_store), by the process that uses it, not when a
// config is checked.
struct secret_source {
    std::string file;  // an absolute path, or ""
    std::string env;   // an environment variable's name, or ""
    bool empty() const noexcept { return file.empty() && env.empty(); }
};

class options_reader {
  public:
    // Throws config_error unless `options` is an object or null (= no options).
    explicit options_reader(const nlohmann::json& options);

    std::optional<std::string> string(const std::string& name);
    std::optional<bool> boolean(const std::string& name);
    // A non-empty array of strings.
    std::optional<std::vector<std::string>> strings(const std::string& name);
    // An integer in [min, max].
    std::optional<std::int64_t> integer(const std::string& name, std::int64_t min,
                                        std::int64_t max);
    // A number of seconds (fractions allowed) in [min_s, max_s], as milliseconds.
    std::optional<std::chrono::milliseconds> seconds(const std::string& name, double min_s,
                                                     double max_s);
    // The secret option `name` when the config gives it inline; `<name>_file` and `<name>_env`
    // fill `from` instead (secret_source). At most one of the three.
    std::optional<std::string> secret(const std::string& name, secret_source& from);
    // Throws config_error("config.unknown_key") for the first key no accessor asked for.
    void finish() const;

  private:
    const nlohmann::json* get(const std::string& name);
    const nlohmann::json& options_;
    std::set<std::string> known_;
};

// An endpoint fit to print, in any form a user writes one; every message, log record and listing
// that shows an endpoint or DSN from a config goes through it, and through nothing else.
//  - A URL (scheme://...): the userinfo's password becomes "***" (the userinfo ends at the last
//    '@', so a password with an unencoded '/', '?' or '#' is hidden too); so does a userinfo
//    without ':', which redis reads as a password, except in postgresql://, postgres://,
//    mysql:// and mariadb:// URLs, where it is the user name. Every query value but db=N
//    becomes "***", and so does any fragment and whatever follows a blank.
//  - libpq's keyword/value form (host=db user=app password='a b'): every value becomes "***"
//    but plain ones (letters, digits, ._-,:/[]) of host, hostaddr, port, dbname and user; from
//    what cannot be read as keyword=value on (an unterminated quote, a word without '='),
//    everything is "***".
//  - A PDO DSN (`pgsql:host=db;dbname=app;password=x`, Symfony's spelling): as the keyword/value
//    form, its ';' separators kept.
//  - Anything else (memcached's user:password@host:port) is read as a URL without scheme.
std::string redact_url(std::string_view url);

// Whether a user name may show in an endpoint's printed form (redact_url, redis's endpoints):
// letters, digits and "-._" only, so that what shows neither reads as another URL nor puts
// control characters or escape sequences into a message.
bool is_plain_user_name(std::string_view user) noexcept;

// "/a~1b" for "a/b": a JSON pointer token (RFC 6901).
std::string json_pointer_token(const std::string& key);

// A number for a message: whole numbers in full (31536000, not 3.1536e+07), others in their
// shortest exact form (0.001, 1e+300).
std::string number_text(double d);

}  // namespace locksmith
