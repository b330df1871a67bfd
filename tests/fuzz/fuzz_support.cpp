// SPDX-License-Identifier: MIT
#include "fuzz_support.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace locksmith::fuzz {

void fail(std::string_view property, std::string_view detail) {
    std::fprintf(stderr, "\nFUZZ PROPERTY VIOLATED: %.*s\n", int(property.size()), property.data());
    if (!detail.empty()) std::fprintf(stderr, "  %.*s\n", int(detail.size()), detail.data());
    std::abort();  // libFuzzer keeps the input as crash-<sha1>
}

namespace {

struct depth_sax : nlohmann::json_sax<nlohmann::json> {
    std::size_t depth = 0, deepest = 0;
    bool open() {
        deepest = std::max(deepest, ++depth);
        return true;
    }
    bool close() {
        --depth;
        return true;
    }
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return open(); }
    bool key(string_t&) override { return true; }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
        return false;
    }
};

std::size_t occurrences(std::string_view text, std::string_view what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

std::optional<std::size_t> json_depth(std::string_view text) {
    depth_sax sax;
    if (!nlohmann::json::sax_parse(text.begin(), text.end(), &sax)) return std::nullopt;
    return sax.deepest;
}

bool reveals(std::string_view shown, std::string_view input, std::string_view secret,
             std::string_view wording) {
    // A secret made only of what a redaction writes itself (separators, blanks, "***") is no
    // proof of a leak where it appears.
    if (secret.empty() || secret.find('*') != std::string_view::npos ||
        secret.find_first_not_of(" \t&;=:@/?#") == std::string_view::npos)
        return false;
    // What a redaction writes differently from the input: ';' as '&', "key \t= value" as
    // "key=": a secret that only the rewriting spells out is not given away by it.
    std::string normalized;
    for (char c : input) {
        if (c == '=')
            // Every blank the DSN readers skip (is_space: \f and \v too).
            while (!normalized.empty() && std::string_view(" \t\n\r\f\v").find(normalized.back()) !=
                                              std::string_view::npos)
                normalized.pop_back();
        normalized += c == ';' ? '&' : c;
    }
    if (occurrences(normalized, secret) != 1 || occurrences(input, secret) != 1) return false;
    if (wording.find(secret) != std::string_view::npos) return false;
    return shown.find(secret) != std::string_view::npos;
}

exchange exchange::parse(std::string_view input) {
    exchange out;
    out.steps.emplace_back();
    for (;;) {
        const auto mark = input.find("\n%");
        if (mark == std::string_view::npos) {
            out.steps.back().reply += input;
            return out;
        }
        out.steps.back().reply += input.substr(0, mark + 1);
        input.remove_prefix(mark + 2);
        const auto end = input.find('\n');
        step next;
        next.request = std::string(input.substr(0, end));
        out.steps.push_back(std::move(next));
        if (end == std::string_view::npos) return out;
        input.remove_prefix(end + 1);
    }
}

socket_peer::socket_peer() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
        fail("socketpair", "no socket pair");
    ours_ = fds[0];
    theirs_ = fds[1];
    // Room for a whole input and its requests: the code under test never waits on a full buffer.
    const int size = 1 << 20;
    ::setsockopt(theirs_, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    ::setsockopt(ours_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

socket_peer::~socket_peer() {
    if (ours_ >= 0) ::close(ours_);
    if (theirs_ >= 0) ::close(theirs_);
}

int socket_peer::take_ours() noexcept {
    const int fd = ours_;
    ours_ = -1;
    return fd;
}

void socket_peer::send(std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(theirs_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return;  // full or closed: the code under test reads what got through
        bytes.remove_prefix(std::size_t(n));
    }
}

void socket_peer::hang_up() noexcept {
    ::shutdown(theirs_, SHUT_WR);
}

void socket_peer::drain() noexcept {
    char buffer[4096];
    while (::recv(theirs_, buffer, sizeof buffer, 0) > 0) {
    }
}

}  // namespace locksmith::fuzz
