// SPDX-License-Identifier: MIT
#include <locksmith/key.hpp>

#include <sys/random.h>
#include <atomic>
#include <cerrno>

#include <locksmith/errors.hpp>

namespace locksmith {

void validate_lock_name(std::string_view name) {
    if (name.empty()) throw invalid_argument_error("lock name is empty");
    if (name.size() > max_name_length)
        throw invalid_argument_error("lock name is " + std::to_string(name.size()) +
                                     " bytes long; the limit is " +
                                     std::to_string(max_name_length));
}

std::uint64_t new_local_state_tag() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
}

std::string random_token() {
    unsigned char bytes[16];
    std::size_t filled = 0;
    while (filled < sizeof bytes) {
        ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("locksmith", "getrandom", errno);
        }
        filled += std::size_t(n);
    }
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(32, '0');
    for (std::size_t i = 0; i < sizeof bytes; ++i) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 15];
    }
    return out;
}

void validate_semaphore_limit(std::uint64_t limit) {
    if (limit < 1 || limit > max_semaphore_limit)
        throw invalid_argument_error("a semaphore's limit must be 1.." +
                                     std::to_string(max_semaphore_limit) + ", got " +
                                     std::to_string(limit));
}

void key::set_limit(std::uint32_t limit) {
    if (limit != 0) validate_semaphore_limit(limit);
    limit_ = limit;
}

key::key(std::string resource) : resource_(std::move(resource)), token_(random_token()) {
    validate_lock_name(resource_);
}

void key::reduce_lifetime(clock::time_point deadline) noexcept {
    if (!expires_at_ || deadline < *expires_at_) expires_at_ = deadline;
}

std::optional<std::chrono::milliseconds> key::remaining_lifetime() const {
    if (!expires_at_) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(*expires_at_ - clock::now());
}

bool key::is_expired() const {
    return expires_at_ && *expires_at_ <= clock::now();
}

void key::mark_unserializable(std::string reason) {
    unserializable_reason_ =
        reason.empty() ? "the lock is bound to this process" : std::move(reason);
}

nlohmann::json key::to_json() const {
    if (!serializable())
        throw not_serializable_error("the key of lock '" + resource_ +
                                     "' cannot be serialized: " + unserializable_reason_);
    nlohmann::json j = {{"resource", resource_}, {"token", token_}, {"state", portable_state_}};
    // The resource may hold arbitrary bytes; JSON strings must be UTF-8, so ship it as hex
    // when it is not (dump() would throw).
    try {
        (void)nlohmann::json(resource_).dump();
    } catch (const nlohmann::json::type_error&) {
        static constexpr char hex[] = "0123456789abcdef";
        std::string encoded;
        for (unsigned char c : resource_) {
            encoded += hex[c >> 4];
            encoded += hex[c & 15];
        }
        j.erase("resource");
        j["resource_hex"] = encoded;
    }
    if (expires_at_) {
        auto wall = std::chrono::system_clock::now() + (*expires_at_ - clock::now());
        j["expires_at_unix_ms"] =
            std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
    }
    if (fencing_token_) j["fencing_token"] = *fencing_token_;
    if (limit_ != 0) j["limit"] = limit_;
    return j;
}

namespace {
// 2200-01-01 UTC: beyond any lock's expiry, and early enough that the expiry in nanoseconds
// since the epoch, and its distance from now, fit in 64 bits.
constexpr std::int64_t max_expiry_unix_ms = 7'258'118'400'000;
}  // namespace

key key::from_json(const nlohmann::json& j) {
    auto fail = [](const std::string& what) -> void {
        throw invalid_argument_error("serialized key: " + what);
    };
    if (!j.is_object()) fail("not a JSON object");
    key k;
    if (j.contains("resource") && j["resource"].is_string()) {
        k.resource_ = j["resource"].get<std::string>();
    } else if (j.contains("resource_hex") && j["resource_hex"].is_string()) {
        const auto& hex = j["resource_hex"].get_ref<const std::string&>();
        if (hex.size() % 2 != 0) fail("'resource_hex' has an odd length");
        // Digits only: std::stoi took " f", "-1" and "0x" as bytes too.
        auto digit = [](char c) {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            return -1;
        };
        for (std::size_t i = 0; i < hex.size(); i += 2) {
            const int high = digit(hex[i]), low = digit(hex[i + 1]);
            if (high < 0 || low < 0) fail("'resource_hex' is not hexadecimal");
            k.resource_ += char(high * 16 + low);
        }
    } else {
        fail("'resource' is missing or not a string");
    }
    validate_lock_name(k.resource_);
    if (!j.contains("token") || !j["token"].is_string()) fail("'token' is missing or not a string");
    k.token_ = j["token"].get<std::string>();
    if (k.token_.size() < 32) fail("'token' is shorter than 128 bits");
    if (j.contains("state")) {
        if (!j["state"].is_object()) fail("'state' is not an object");
        k.portable_state_ = j["state"];
    }
    if (j.contains("expires_at_unix_ms")) {
        if (!j["expires_at_unix_ms"].is_number_integer())
            fail("'expires_at_unix_ms' is not an integer");
        // Converted to the clocks' nanoseconds below, which overflow past the year 2262 (a value
        // above 2^63 reads as negative here).
        const auto ms = j["expires_at_unix_ms"].get<std::int64_t>();
        if (ms < 0 || ms > max_expiry_unix_ms)
            fail("'expires_at_unix_ms' is out of range (0 to " +
                 std::to_string(max_expiry_unix_ms) + ", the year 2200)");
        auto wall = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
        k.expires_at_ = clock::now() + (wall - std::chrono::system_clock::now());
    }
    if (j.contains("fencing_token")) {
        if (!j["fencing_token"].is_number_unsigned())
            fail("'fencing_token' is not an unsigned integer");
        k.fencing_token_ = j["fencing_token"].get<std::uint64_t>();
    }
    if (j.contains("limit")) {
        if (!j["limit"].is_number_unsigned()) fail("'limit' is not an unsigned integer");
        const auto limit = j["limit"].get<std::uint64_t>();
        validate_semaphore_limit(limit);
        k.limit_ = static_cast<std::uint32_t>(limit);
    }
    return k;
}

}  // namespace locksmith
