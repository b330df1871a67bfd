#include <locksmith/strategy_support.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <pthread.h>
#include <unistd.h>

namespace locksmith {
namespace {

std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

std::atomic<std::uint64_t> fork_counter{0};

const bool fork_handler_registered = [] {
    ::pthread_atfork(nullptr, nullptr, [] { fork_counter.fetch_add(1, std::memory_order_relaxed); });
    return true;
}();

}  // namespace

std::string name_hash::hex() const {
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", (unsigned long long)high,
                  (unsigned long long)low);
    return out;
}

name_hash stable_name_hash(std::string_view name) noexcept {
    // Two lanes over 8-byte words, each finished with splitmix64: fast on 1 MiB names too.
    std::uint64_t a = 0x9e3779b97f4a7c15ull ^ name.size();
    std::uint64_t b = 0xc2b2ae3d27d4eb4full + name.size();
    std::size_t i = 0;
    for (; i + 8 <= name.size(); i += 8) {
        std::uint64_t w;
        std::memcpy(&w, name.data() + i, 8);
        a = mix64(a ^ w);
        b = (b ^ (w * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
        b = (b << 31) | (b >> 33);
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, name.data() + i, name.size() - i);
    a = mix64(a ^ tail ^ 0xff51afd7ed558ccdull);
    b = mix64(b ^ tail);
    return {mix64(a + b), mix64(b ^ (a >> 7))};
}

std::string lock_file_name(std::string_view name, std::string_view suffix) {
    std::string prefix;
    for (unsigned char c : name.substr(0, 32)) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                           (c == '.' && !prefix.empty());
        if (plain)
            prefix += char(c);
        else if (!prefix.empty() && prefix.back() != '-')
            prefix += '-';
    }
    return (prefix.empty() ? "lock" : prefix) + "." + stable_name_hash(name).hex() +
           std::string(suffix);
}

std::uint64_t fork_generation() noexcept {
    (void)fork_handler_registered;
    return fork_counter.load(std::memory_order_relaxed);
}

pid_t current_pid() noexcept {
    struct cached {
        pid_t pid = 0;
        std::uint64_t generation = ~std::uint64_t(0);
    };
    thread_local cached c;
    const std::uint64_t generation = fork_generation();
    if (c.generation != generation) c = {::getpid(), generation};
    return c.pid;
}

}  // namespace locksmith
