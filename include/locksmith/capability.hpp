// SPDX-License-Identifier: MIT
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

// The one list of capability bits, in bit order: X(name, value). The enum, the list of named
// bits, the mask and the names are all made from it.
#define LOCKSMITH_CAPABILITIES(X)                                                                \
    X(exclusive, 1)       /* one holder at a time */                                             \
    X(shared, 2)          /* many readers, excluded by a writer */                               \
    X(noblock, 4)         /* can try to acquire without waiting */                               \
    X(native_wait, 8)     /* waits without polling (kernel, server-side wait, pub/sub, watch) */ \
    X(expiring, 16)       /* locks carry a TTL and can be refreshed */                           \
    X(distributed, 32)    /* works across hosts */                                               \
    X(serializable, 64)   /* a key can be handed to another process, which continues to hold */  \
    X(crash_release, 128) /* released by the kernel or server when the holder dies */            \
    X(fencing, 256)       /* each grant carries a token larger than every earlier grant's */     \
    X(fair, 512)          /* waiters are served first come, first served */                      \
    X(consensus, 1024)    /* granted by a replicated consensus service */                        \
    X(counting, 2048)     /* counting semaphores: at most N holders of a name (named_semaphore) */

enum class capability : std::uint32_t {
    none = 0,
#define LOCKSMITH_CAPABILITY_ENUM(name, value) name = value,
    LOCKSMITH_CAPABILITIES(LOCKSMITH_CAPABILITY_ENUM)
#undef LOCKSMITH_CAPABILITY_ENUM
};

// Every named bit, in bit order.
inline constexpr capability all_capabilities[] = {
#define LOCKSMITH_CAPABILITY_ITEM(name, value) capability::name,
    LOCKSMITH_CAPABILITIES(LOCKSMITH_CAPABILITY_ITEM)
#undef LOCKSMITH_CAPABILITY_ITEM
};

// The union of every named bit.
inline constexpr std::uint32_t all_capability_bits = 0
#define LOCKSMITH_CAPABILITY_BIT(name, value) | std::uint32_t(value)
    LOCKSMITH_CAPABILITIES(LOCKSMITH_CAPABILITY_BIT)
#undef LOCKSMITH_CAPABILITY_BIT
    ;

// Each bit is a single, new bit, in ascending order: the list cannot drift from the mask.
static_assert([] {
    std::uint32_t seen = 0;
    for (capability c : all_capabilities) {
        const auto bit = std::uint32_t(c);
        if (bit == 0 || (bit & (bit - 1)) != 0 || bit <= seen) return false;
        seen |= bit;
    }
    return seen == all_capability_bits;
}());

constexpr capability operator|(capability a, capability b) noexcept {
    return capability(std::uint32_t(a) | std::uint32_t(b));
}
constexpr capability operator&(capability a, capability b) noexcept {
    return capability(std::uint32_t(a) & std::uint32_t(b));
}
constexpr capability operator~(capability a) noexcept {
    return capability(~std::uint32_t(a) & all_capability_bits);
}
constexpr capability& operator|=(capability& a, capability b) noexcept {
    return a = a | b;
}
constexpr capability& operator&=(capability& a, capability b) noexcept {
    return a = a & b;
}

// True when every bit of `wanted` is in `set` (the superset rule of strategy selection).
constexpr bool has(capability set, capability wanted) noexcept {
    return (set & wanted) == wanted;
}

// The name of one bit ("exclusive"); "none" for 0. Requires: `bit` is 0 or a single named bit.
std::string_view capability_name(capability bit) noexcept;

// "exclusive|noblock"; "none" for the empty set. Bits print in bit order.
std::string to_string(capability set);

// Parses "exclusive|noblock", "exclusive,distributed" or a decimal number. Whitespace around
// names is ignored; names are case-sensitive.
// Throws invalid_argument_error naming the unknown word, or for an empty string.
capability parse_capabilities(std::string_view text);

}  // namespace locksmith
