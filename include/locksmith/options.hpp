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

#include <nlohmann/json.hpp>

namespace locksmith {

class options_reader {
  public:
    // Throws config_error unless `options` is an object or null (= no options).
    explicit options_reader(const nlohmann::json& options);

    std::optional<std::string> string(const std::string& name);
    std::optional<bool> boolean(const std::string& name);
    // An integer in [min, max].
    std::optional<std::int64_t> integer(const std::string& name, std::int64_t min,
                                        std::int64_t max);
    // A number of seconds (fractions allowed) in [min_s, max_s], as milliseconds.
    std::optional<std::chrono::milliseconds> seconds(const std::string& name, double min_s,
                                                     double max_s);
    // Throws config_error("config.unknown_key") for the first key no accessor asked for.
    void finish() const;

  private:
    const nlohmann::json* get(const std::string& name);
    const nlohmann::json& options_;
    std::set<std::string> known_;
};

// `url` fit to print: the userinfo's password (or a userinfo without ':', which redis reads as
// a password) becomes "***", and so does every query value but db=N and any fragment. The
// userinfo ends at the last '@', so a password with an unencoded '/', '?' or '#' is hidden too.
// Every message and listing that shows an endpoint given by the user goes through it.
std::string redact_url(std::string_view url);

// "/a~1b" for "a/b": a JSON pointer token (RFC 6901).
std::string json_pointer_token(const std::string& key);

// A number for a message: whole numbers in full (31536000, not 3.1536e+07), others in their
// shortest exact form (0.001, 1e+300).
std::string number_text(double d);

}  // namespace locksmith
