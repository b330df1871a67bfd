// Capabilities: what a strategy can do, and what a caller requires of a lock.
//
//   capability      one bit per property (TYPO3's EXCLUSIVE=1, SHARED=2, NOBLOCK=4 kept);
//                   combine with | and test with has().
//   parse_capabilities / to_string
//                   the "exclusive|noblock" text form used in config files and on the command
//                   line ("," is accepted as a separator too).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace locksmith {

enum class capability : std::uint32_t {
    none = 0,
    exclusive = 1,        // one holder at a time
    shared = 2,           // many readers, excluded by a writer
    noblock = 4,          // can try to acquire without waiting
    native_wait = 8,      // waits without polling (kernel, server-side wait, pub/sub, watch)
    expiring = 16,        // locks carry a TTL and can be refreshed
    distributed = 32,     // works across hosts
    serializable = 64,    // a key can be handed to another process, which continues to hold it
    crash_release = 128,  // released by the kernel or server when the holder dies
    fencing = 256,        // each grant carries a token larger than every earlier grant's
    fair = 512,           // waiters are served first come, first served
    consensus = 1024,     // granted by a replicated consensus service
};

constexpr capability operator|(capability a, capability b) noexcept {
    return capability(std::uint32_t(a) | std::uint32_t(b));
}
constexpr capability operator&(capability a, capability b) noexcept {
    return capability(std::uint32_t(a) & std::uint32_t(b));
}
constexpr capability operator~(capability a) noexcept {
    return capability(~std::uint32_t(a) & 2047u);
}
constexpr capability& operator|=(capability& a, capability b) noexcept { return a = a | b; }
constexpr capability& operator&=(capability& a, capability b) noexcept { return a = a & b; }

// True when every bit of `wanted` is in `set` (the superset rule of strategy selection).
constexpr bool has(capability set, capability wanted) noexcept { return (set & wanted) == wanted; }

// Every named bit, in bit order.
inline constexpr capability all_capabilities[] = {
    capability::exclusive,   capability::shared,       capability::noblock,
    capability::native_wait, capability::expiring,     capability::distributed,
    capability::serializable, capability::crash_release, capability::fencing,
    capability::fair,        capability::consensus,
};

// The name of one bit ("exclusive"); "none" for 0. Requires: `bit` is 0 or a single named bit.
std::string_view capability_name(capability bit) noexcept;

// "exclusive|noblock"; "none" for the empty set. Bits print in bit order.
std::string to_string(capability set);

// Parses "exclusive|noblock", "exclusive,distributed" or a decimal number. Whitespace around
// names is ignored; names are case-sensitive.
// Throws invalid_argument_error naming the unknown word, or for an empty string.
capability parse_capabilities(std::string_view text);

}  // namespace locksmith
