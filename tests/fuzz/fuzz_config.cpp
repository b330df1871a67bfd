// SPDX-License-Identifier: MIT
// The configuration, as read from a file, from LOCKSMITH_CONFIG and from a string: size and
// nesting pre-scan, JSON syntax, validation. Properties:
//  - only config_error escapes, and a document parses to the same config every time (twice from
//    the string, once from a file, once from LOCKSMITH_CONFIG when it is inline JSON);
//  - config::check() lists problems exactly when config::parse() throws, and reads the same
//    config when there are none;
//  - the nesting pre-scan refuses exactly the valid documents nested deeper than max_depth;
//  - a lock rule's capabilities survive to_string and parse_capabilities.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include <locksmith/config.hpp>

#include "fuzz_support.hpp"

using namespace locksmith;
using locksmith::fuzz::check;

namespace {

bool same(const config& a, const config& b) {
    if (a.default_ttl != b.default_ttl || a.auto_release != b.auto_release ||
        a.fallback != b.fallback || a.retry.initial != b.retry.initial ||
        a.retry.max != b.retry.max || a.plugins != b.plugins || a.locks.size() != b.locks.size() ||
        a.strategies.size() != b.strategies.size())
        return false;
    for (std::size_t i = 0; i < a.locks.size(); ++i) {
        const auto &x = a.locks[i], &y = b.locks[i];
        if (x.pattern != y.pattern || x.require != y.require || x.strategy != y.strategy ||
            x.ttl != y.ttl || x.fallback != y.fallback)
            return false;
    }
    for (auto ia = a.strategies.begin(), ib = b.strategies.begin(); ia != a.strategies.end();
         ++ia, ++ib)
        if (ia->first != ib->first || ia->second.enabled != ib->second.enabled ||
            ia->second.priority != ib->second.priority || ia->second.options != ib->second.options)
            return false;
    return true;
}

struct outcome {
    std::optional<config> read;
    std::string error_id;
};

template <class Read>
outcome attempt(Read read) {
    outcome o;
    try {
        o.read = read();
    } catch (const config_error& e) {
        o.error_id = e.id();
    }
    return o;
}

void expect_same(const outcome& a, const outcome& b, const char* how) {
    check(a.read.has_value() == b.read.has_value() && a.error_id == b.error_id,
          std::string("the same document read ") + how + " gives another result",
          a.error_id + " / " + b.error_id);
    if (a.read)
        check(same(*a.read, *b.read),
              std::string("the same document read ") + how + " gives another config");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto text = fuzz::as_text(data, size);

    const auto first = attempt([&] { return config::parse(text); });
    expect_same(first, attempt([&] { return config::parse(text); }), "twice");

    std::optional<config> checked;
    const auto problems = config::check(text, &checked);
    check(problems.empty() == first.read.has_value(),
          "config::check() finds problems exactly when config::parse() throws");
    if (first.read) check(checked && same(*checked, *first.read), "check() reads another config");

    const auto depth = fuzz::json_depth(text);
    const bool too_deep = !problems.empty() && problems.front().id() == "config.too_deep";
    if (depth && text.size() <= config::max_bytes)
        check(too_deep == (*depth > config::max_depth),
              "the nesting pre-scan refuses exactly the documents nested deeper than max_depth",
              "depth " + std::to_string(*depth));
    if (too_deep) check(problems.size() == 1, "a document too deep is reported once, alone");

    if (first.read)
        for (const auto& rule : first.read->locks)
            if (rule.require)
                check(parse_capabilities(to_string(*rule.require)) == *rule.require,
                      "capabilities survive to_string and parse_capabilities", rule.pattern);

    // From a file, in a folder of our own: a config is read only where no other user could
    // have changed it (an unnamed file in memory, or one in /tmp itself, is refused as unsafe).
    static const struct private_folder {
        std::string path;
        private_folder() {
            char name[] = "/tmp/locksmith-fuzz-config-XXXXXX";
            check(::mkdtemp(name) != nullptr, "mkdtemp");
            path = name;
        }
        ~private_folder() {
            ::unlink((path + "/config.json").c_str());
            ::rmdir(path.c_str());
        }
    } folder;
    const std::string file = folder.path + "/config.json";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    check(fd >= 0, "open the config file");
    const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    ::close(fd);
    if (written)
        expect_same(first, attempt([&] { return config::load_file(file); }), "from a file");

    // From LOCKSMITH_CONFIG, when it is inline JSON (a path would read whatever file it names).
    const auto start = text.find_first_not_of(" \t\r\n");
    if (start != std::string_view::npos && text[start] == '{' &&
        text.find('\0') == std::string_view::npos) {
        ::setenv("LOCKSMITH_CONFIG", std::string(text).c_str(), 1);
        expect_same(first, attempt([] { return *config::from_environment(); }),
                    "from LOCKSMITH_CONFIG");
        ::unsetenv("LOCKSMITH_CONFIG");
    }
    return 0;
}
