// SPDX-License-Identifier: MIT
#include <locksmith/config.hpp>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <system_error>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/options.hpp>

#include "core/trusted_path.hpp"

namespace locksmith {

bool valid_strategy_name(std::string_view name) noexcept {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

bool glob_match(std::string_view pattern, std::string_view name) noexcept {
    // Iterative matcher with one backtrack point: linear in practice, no recursion on long names.
    std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
    while (n < name.size()) {
        if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
            ++p;
            ++n;
        } else if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            resume = n;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            n = ++resume;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

namespace {

using ordered = nlohmann::ordered_json;

constexpr double max_ttl_s = 365.0 * 24 * 3600;

// Walks the document, collecting every problem with its pointer; fills `out` as it goes.
class validator {
  public:
    validator(config& out, std::vector<config_error>& errors) : out_(out), errors_(errors) {}

    void document(const ordered& root) {
        if (!root.is_object()) {
            fail("config.type", "",
                 "the configuration must be a JSON object, not " + std::string(root.type_name()));
            return;
        }
        for (auto it = root.begin(); it != root.end(); ++it) {
            const std::string& k = it.key();
            if (k == "defaults")
                defaults(*it);
            else if (k == "strategies")
                strategies(*it);
            else if (k == "locks")
                locks(*it);
            else if (k == "plugins")
                plugins(*it);
            else if (k == "store")
                store(*it, "/store", -1);
            else
                unknown_key("", k, "defaults, strategies, locks, plugins, store");
        }
        resolve_stores();
    }

  private:
    // Messages are bare: located() adds the source and the pointer, once.
    void fail(const char* id, const std::string& pointer, const std::string& message) {
        errors_.emplace_back(id, pointer, message);
    }
    void unknown_key(const std::string& at, const std::string& key, const char* known) {
        fail("config.unknown_key", at + "/" + json_pointer_token(key),
             "unknown key '" + key + "' (known: " + known + ")");
    }
    bool expect(const ordered& v, ordered::value_t type, const char* what, const std::string& at) {
        bool ok = v.type() == type || (type == ordered::value_t::number_float && v.is_number()) ||
                  (type == ordered::value_t::number_integer && v.is_number_integer());
        if (!ok) fail("config.type", at, std::string("must be ") + what + ", not " + v.type_name());
        return ok;
    }
    std::optional<std::chrono::milliseconds> ttl(const ordered& v, const std::string& at) {
        if (!expect(v, ordered::value_t::number_float, "a number of seconds", at)) return {};
        double s = v.get<double>();
        if (!std::isfinite(s) || s <= 0 || s > max_ttl_s) {
            fail("config.range", at,
                 "ttl_s is " + number_text(s) + "; it must be > 0 and at most " +
                     number_text(max_ttl_s) + " (365 days)");
            return {};
        }
        auto ms = std::chrono::milliseconds(std::llround(s * 1000));
        if (ms.count() == 0) ms = std::chrono::milliseconds(1);
        return ms;
    }

    void defaults(const ordered& v) {
        const std::string at = "/defaults";
        if (!expect(v, ordered::value_t::object, "an object", at)) return;
        std::optional<double> initial_ms, max_ms;
        for (auto it = v.begin(); it != v.end(); ++it) {
            const std::string p = at + "/" + json_pointer_token(it.key());
            if (it.key() == "ttl_s") {
                if (auto t = ttl(*it, p)) out_.default_ttl = *t;
            } else if (it.key() == "auto_release") {
                if (expect(*it, ordered::value_t::boolean, "true or false", p))
                    out_.auto_release = it->get<bool>();
            } else if (it.key() == "fallback") {
                if (expect(*it, ordered::value_t::boolean, "true or false", p))
                    out_.fallback = it->get<bool>();
            } else if (it.key() == "retry_initial_ms" || it.key() == "retry_max_ms") {
                if (!expect(*it, ordered::value_t::number_float, "a number of milliseconds", p))
                    continue;
                double ms = it->get<double>();
                if (!std::isfinite(ms) || ms <= 0 || ms > 60'000) {
                    fail(
                        "config.range", p,
                        it.key() + " is " + number_text(ms) + "; it must be > 0 and at most 60000");
                    continue;
                }
                (it.key() == "retry_initial_ms" ? initial_ms : max_ms) = ms;
            } else {
                unknown_key(at, it.key(),
                            "ttl_s, auto_release, fallback, retry_initial_ms, retry_max_ms");
            }
        }
        if (initial_ms)
            out_.retry.initial = std::chrono::microseconds(std::llround(*initial_ms * 1000));
        if (max_ms) out_.retry.max = std::chrono::microseconds(std::llround(*max_ms * 1000));
        if (out_.retry.max < out_.retry.initial)
            fail("config.range", at + "/retry_max_ms",
                 "retry_max_ms must not be smaller than retry_initial_ms");
    }

    void strategies(const ordered& v) {
        const std::string at = "/strategies";
        if (!expect(v, ordered::value_t::object, "an object", at)) return;
        for (auto it = v.begin(); it != v.end(); ++it) {
            const std::string p = at + "/" + json_pointer_token(it.key());
            if (!valid_strategy_name(it.key())) {
                fail("config.name", p,
                     "'" + it.key() + "' is not a strategy name (lowercase letters, digits, _)");
                continue;
            }
            if (!expect(*it, ordered::value_t::object, "an object", p)) continue;
            strategy_settings s;
            s.origin = out_.origin;
            for (auto f = it->begin(); f != it->end(); ++f) {
                const std::string fp = p + "/" + json_pointer_token(f.key());
                if (f.key() == "enabled") {
                    if (expect(*f, ordered::value_t::boolean, "true or false", fp))
                        s.enabled = f->get<bool>();
                } else if (f.key() == "priority") {
                    if (!expect(*f, ordered::value_t::number_integer, "an integer", fp)) continue;
                    // Compared as unsigned first: 2^64-1 must not read as -1.
                    const bool too_large = f->is_number_unsigned() &&
                                           f->get<std::uint64_t>() > std::uint64_t(max_priority);
                    const auto prio = f->get<std::int64_t>();
                    if (too_large || prio < min_priority || prio > max_priority)
                        fail("config.range", fp,
                             "priority is " + f->dump() + "; it must be in [" +
                                 std::to_string(min_priority) + ", " +
                                 std::to_string(max_priority) + "]");
                    else
                        s.priority = int(prio);
                } else if (f.key() == "options") {
                    if (expect(*f, ordered::value_t::object, "an object", fp))
                        s.options = nlohmann::json::parse(f->dump());
                } else {
                    unknown_key(p, f.key(), "enabled, priority, options");
                }
            }
            out_.strategies[it.key()] = std::move(s);
        }
    }

    void locks(const ordered& v) {
        const std::string at = "/locks";
        if (!expect(v, ordered::value_t::object, "an object", at)) return;
        for (auto it = v.begin(); it != v.end(); ++it) {
            const std::string p = at + "/" + json_pointer_token(it.key());
            if (it.key().empty()) {
                fail("config.name", p, "a lock pattern must not be empty");
                continue;
            }
            if (!expect(*it, ordered::value_t::object, "an object", p)) continue;
            lock_rule rule;
            rule.pattern = it.key();
            for (auto f = it->begin(); f != it->end(); ++f) {
                const std::string fp = p + "/" + json_pointer_token(f.key());
                if (f.key() == "require") {
                    if (!expect(*f, ordered::value_t::string, "a capability list", fp)) continue;
                    try {
                        rule.require = parse_capabilities(f->get<std::string>());
                    } catch (const invalid_argument_error& e) {
                        fail("config.capability", fp, e.what());
                    }
                } else if (f.key() == "strategy") {
                    if (!expect(*f, ordered::value_t::string, "a strategy name", fp)) continue;
                    if (!valid_strategy_name(f->get<std::string>()))
                        fail("config.name", fp,
                             "'" + f->get<std::string>() + "' is not a strategy name");
                    else
                        rule.strategy = f->get<std::string>();
                } else if (f.key() == "ttl_s") {
                    rule.ttl = ttl(*f, fp);
                } else if (f.key() == "fallback") {
                    if (expect(*f, ordered::value_t::boolean, "true or false", fp))
                        rule.fallback = f->get<bool>();
                } else if (f.key() == "limit") {
                    if (!expect(*f, ordered::value_t::number_integer, "an integer", fp)) continue;
                    // A negative integer is not unsigned: it fails the range check.
                    const auto n = f->is_number_unsigned() ? f->get<std::uint64_t>() : 0;
                    if (n < 1 || n > max_semaphore_limit)
                        fail("config.range", fp,
                             "limit is " + f->dump() + "; it must be 1.." +
                                 std::to_string(max_semaphore_limit));
                    else
                        rule.limit = static_cast<std::uint32_t>(n);
                } else if (f.key() == "store") {
                    store(*f, fp, int(out_.locks.size()));
                } else {
                    unknown_key(p, f.key(), "require, strategy, ttl_s, fallback, limit, store");
                }
            }
            out_.locks.push_back(std::move(rule));
        }
    }

    void plugins(const ordered& v) {
        const std::string at = "/plugins";
        if (!expect(v, ordered::value_t::array, "an array of paths", at)) return;
        for (std::size_t i = 0; i < v.size(); ++i) {
            const std::string p = at + "/" + std::to_string(i);
            if (!expect(v[i], ordered::value_t::string, "a path", p)) continue;
            auto path = v[i].get<std::string>();
            // A bare file name is looked for in the module folder (registry/module_loader.cpp);
            // a relative path would depend on the caller's working directory.
            const bool bare =
                !path.empty() && path.find('/') == std::string::npos && path != "." && path != "..";
            if (path.empty() || (path.front() != '/' && !bare))
                fail("config.plugin", p,
                     "plugin '" + path +
                         "' must be an absolute path or a file name in the module folder");
            else
                out_.plugins.push_back(path);
        }
    }

    // A Symfony store DSN (parse_store_dsn) at `pointer`: of the lock rule `rule`, or of the
    // whole config (-1). Resolved once the document is read, whatever the order of its keys.
    void store(const ordered& v, const std::string& pointer, int rule) {
        if (!expect(v, ordered::value_t::string, "a store DSN (e.g. \"redis://host:6379\")",
                    pointer))
            return;
        try {
            stores_.push_back({pointer, rule, parse_store_dsn(v.get<std::string>())});
        } catch (const invalid_argument_error& e) {
            fail("config.store", pointer, e.what());
        }
    }

    // A store pins its strategy for its rule's names (the config's store: for every name no rule
    // matches, as a last rule "*" would) and gives that strategy its options. A strategy has one
    // set of options: a second store of it with other options, or options under `strategies`
    // beside a store, is an error rather than a silent choice between two servers.
    void resolve_stores() {
        std::map<std::string, std::string> configured_by;
        for (const auto& s : stores_) {
            auto& settings = out_.strategies[s.spelling.strategy];
            const auto by = configured_by.find(s.spelling.strategy);
            if (by != configured_by.end() && settings.options != s.spelling.options) {
                fail("config.store", s.pointer,
                     "the " + s.spelling.strategy + " strategy already has another store (" +
                         by->second +
                         "): one strategy, one server; give these names the same store");
                continue;
            }
            if (by == configured_by.end() && !settings.options.is_null()) {
                fail("config.store", s.pointer,
                     "the " + s.spelling.strategy +
                         " strategy also has options under /strategies/" +
                         json_pointer_token(s.spelling.strategy) +
                         "/options: give its connection in one place");
                continue;
            }
            if (settings.enabled == false) {
                fail("config.store", s.pointer,
                     "the " + s.spelling.strategy + " strategy is disabled under /strategies");
                continue;
            }
            settings.options = s.spelling.options;
            if (s.spelling.enable) settings.enabled = true;
            if (settings.origin.empty()) settings.origin = out_.origin;
            configured_by.emplace(s.spelling.strategy, s.pointer);
            if (s.rule < 0) {
                lock_rule all;
                all.pattern = "*";
                all.strategy = s.spelling.strategy;
                out_.locks.push_back(std::move(all));
                continue;
            }
            auto& rule = out_.locks[std::size_t(s.rule)];
            if (rule.strategy && *rule.strategy != s.spelling.strategy) {
                fail("config.store", s.pointer,
                     "the rule names the strategy " + *rule.strategy + " and a store of " +
                         s.spelling.strategy + ": say one");
                continue;
            }
            rule.strategy = s.spelling.strategy;
        }
    }

    struct pending_store {
        std::string pointer;
        int rule;
        store_spelling spelling;
    };

    config& out_;
    std::vector<config_error>& errors_;
    std::vector<pending_store> stores_;
};

// 1-based line and column of byte `offset` in `text`.
std::pair<std::size_t, std::size_t> position(std::string_view text, std::size_t offset) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return {line, column};
}

// Fills `out` with what is valid of `text` and `errors` with every problem. False when the
// document cannot be read at all (size, depth, syntax): nothing else was checked.
bool parse_into(std::string_view text, config& out, std::vector<config_error>& errors) {
    if (text.size() > config::max_bytes) {
        errors.emplace_back("config.too_large", "",
                            "the document is " + std::to_string(text.size()) +
                                " bytes; a config may be at most 1 MiB (" +
                                std::to_string(config::max_bytes) + " bytes)");
        return false;
    }
    if (auto at = json_too_deep_at(text, config::max_depth); at != std::string_view::npos) {
        auto [line, column] = position(text, at);
        errors.emplace_back("config.too_deep", "",
                            "nesting deeper than " + std::to_string(config::max_depth) +
                                " levels (the limit for a config)",
                            line, column);
        return false;
    }
    ordered root;
    try {
        root = ordered::parse(text.begin(), text.end());
    } catch (const ordered::parse_error& e) {
        // nlohmann reports a byte offset; count lines and columns ourselves (1-based).
        auto [line, column] = position(text, e.byte == 0 ? 0 : e.byte - 1);
        std::string detail = e.what();
        // nlohmann ends with the token it was reading ("; last read: '...'"): it may be a
        // URL with its password, so it is never shown. Line and column say where.
        if (auto pos = detail.find("; last read: "); pos != std::string::npos) detail.erase(pos);
        if (auto pos = detail.find(": syntax error"); pos != std::string::npos)
            detail = detail.substr(pos + 2);
        else if (auto pos2 = detail.find("] "); pos2 != std::string::npos)
            detail = detail.substr(pos2 + 2);
        errors.emplace_back("config.syntax", "", "not valid JSON: " + detail, line, column);
        return false;
    } catch (const ordered::out_of_range& e) {
        // Valid JSON that nlohmann cannot hold: a number beyond a double (1e400). It reports
        // neither position nor a token other than the number, which is safe to show.
        std::string detail = e.what();
        if (auto pos = detail.find("] "); pos != std::string::npos) detail.erase(0, pos + 2);
        errors.emplace_back("config.syntax", "", "not a number locksmith can read: " + detail);
        return false;
    }
    validator(out, errors).document(root);
    return true;
}

// `e` (a bare message) as the user reads it: the source, the position or pointer, the message.
std::string located(const config_error& e, const std::string& origin) {
    std::string where = origin;
    if (e.line() > 0)
        where += ", line " + std::to_string(e.line()) + ", column " + std::to_string(e.column());
    if (!e.pointer().empty()) where += ": " + e.pointer();
    return where + ": " + e.what();
}

}  // namespace

config config::parse(std::string_view json_text, std::string origin) {
    config out;
    out.origin = std::move(origin);
    std::vector<config_error> errors;
    parse_into(json_text, out, errors);
    if (!errors.empty()) out.throw_problems(errors);
    return out;
}

config_error config::options_problem(const std::string& strategy, const config_error& e) {
    return config_error(
        e.id(), "/strategies/" + json_pointer_token(strategy) + "/options" + e.pointer(), e.what());
}

void config::throw_problems(const std::vector<config_error>& problems) const {
    std::string message;
    for (const auto& e : problems) message += (message.empty() ? "" : "\n") + located(e, origin);
    const auto& first = problems.front();
    throw config_error(first.id(), first.pointer(), message, first.line(), first.column());
}

std::string config::read_file(const std::filesystem::path& path) {
    const std::string name = "config file " + path.string();
    auto io_error = [&](const std::string& why) {
        return config_error("config.io", "", name + " " + why);
    };
    // A config decides where locks are kept (and which plugins run): one that another user can
    // change could give root's locks a second holder. The rule plugins obey, on the path as
    // written and as its symlinks resolve, before anything is opened (opening some devices does
    // something); then the resolved path is opened, whose components no one else can change.
    const path_trust trust = check_trusted_path(path);
    auto check_type = [&](const struct stat& st) {
        if (S_ISDIR(st.st_mode)) throw io_error("is a directory; give the path of a JSON file");
        if (!S_ISREG(st.st_mode))
            throw io_error(
                "is not a regular file (a FIFO, socket or device); give the path of a "
                "JSON file");
    };
    if (trust.error == ENOENT || trust.error == ENOTDIR) {
        // A /proc link (/dev/fd/N: a pipe from `<(...)`, a deleted file) leads where no path
        // does; stat, which opens nothing, tells that from a missing file.
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) throw io_error("does not exist");
        check_type(st);
        throw config_error("config.unsafe", "",
                           name + " is reached through a link that names no path (" +
                               trust.problem + "), so who could change it cannot be checked");
    }
    if (trust.error != 0) throw io_error("cannot be read: " + trust.problem);
    if (trust.reached) check_type(trust.st);
    if (!trust.problem.empty())
        throw config_error("config.unsafe", "",
                           name + " is not safe to use: " + trust.problem +
                               ". A config file, and every folder and symlink on its path, must "
                               "be owned by you or root and writable by no one else");
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
    const int fd =
        ::open(trust.resolved.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT || err == ENOTDIR) throw io_error("does not exist");
        throw io_error("cannot be read: " + std::string(std::strerror(err)));
    }
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_fd{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        throw io_error("cannot be read: " + std::string(std::strerror(errno)));
    check_type(st);
    auto too_large = [&] {
        return config_error("config.too_large", "",
                            name + " is larger than 1 MiB (" + std::to_string(max_bytes) +
                                " bytes), the limit for a config");
    };
    if (std::uintmax_t(st.st_size) > max_bytes) throw too_large();
    // Read at most one byte past the limit: the file may grow between fstat and read. The
    // buffer starts at the size fstat gave (zero-filling 1 MiB for a 100-byte config was half
    // of `locksmith run`'s start-up) and grows only for a file that grew.
    std::string text(std::size_t(st.st_size) + 1, '\0');
    std::size_t length = 0;
    while (length <= max_bytes) {
        if (length == text.size()) text.resize(std::min(text.size() * 2, max_bytes + 1));
        const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw io_error("cannot be read: " + std::string(std::strerror(errno)));
        if (n == 0) break;
        length += std::size_t(n);
    }
    if (length > max_bytes) throw too_large();
    text.resize(length);
    return text;
}

config config::load_file(const std::filesystem::path& path) {
    return parse(read_file(path), "config file " + path.string());
}

std::optional<config> config::from_environment() {
    const char* value = std::getenv("LOCKSMITH_CONFIG");
    if (value == nullptr || *value == '\0') return std::nullopt;
    const std::string_view text(value);
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] == '{')
        return parse(text, "LOCKSMITH_CONFIG");
    return parse(read_file(std::string(text)), "file " + std::string(text) + " (LOCKSMITH_CONFIG)");
}

namespace {

// The caller's home directory from its passwd entry, or nullopt when it has none. Not $HOME:
// a service has none, a cron job or login shell has the user's, and `sudo -E` keeps the
// invoking user's; all of them must read one file, or they lock in different places.
std::optional<std::filesystem::path> home_directory() {
    std::vector<char> buffer(4096);
    for (;;) {
        passwd entry{};
        passwd* found = nullptr;
        const int rc = ::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found);
        if (rc == ERANGE && buffer.size() < (std::size_t(1) << 20)) {
            buffer.resize(buffer.size() * 2);
            continue;
        }
        if (rc != 0 || found == nullptr || entry.pw_dir == nullptr || entry.pw_dir[0] != '/')
            return std::nullopt;
        return std::filesystem::path(entry.pw_dir);
    }
}

// $XDG_CONFIG_HOME/locksmith/config.json, when XDG_CONFIG_HOME is absolute (the base-directory
// spec says a relative one is invalid and is ignored).
std::optional<std::filesystem::path> xdg_location() {
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    if (xdg == nullptr || xdg[0] != '/') return std::nullopt;
    return std::filesystem::path(xdg) / "locksmith" / "config.json";
}

// discover() does not read $XDG_CONFIG_HOME: a service or cron job rarely has it, and would
// lock elsewhere than the shell that has it. A config of this user's there, that is none of
// `locations`, is therefore an error rather than ignored in silence.
void refuse_config_in_xdg(const std::vector<std::filesystem::path>& locations) {
    const auto xdg = xdg_location();
    if (!xdg) return;
    struct stat st {};
    if (::stat(xdg->c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return;
        throw config_error("config.io", "",
                           "config file " + xdg->string() +
                               " ($XDG_CONFIG_HOME) cannot be checked: " + std::strerror(errno));
    }
    if (st.st_uid != ::geteuid()) return;  // not this user's config (`sudo -E`)
    for (const auto& path : locations) {
        struct stat other {};
        if (::stat(path.c_str(), &other) == 0 && other.st_dev == st.st_dev &&
            other.st_ino == st.st_ino)
            return;
    }
    const auto home = home_directory();
    throw config_error(
        "config.xdg", "",
        "config file " + xdg->string() +
            " ($XDG_CONFIG_HOME) is not read: locksmith reads a user's config from "
            "~/.config/locksmith/config.json in the home directory of the passwd entry (" +
            (home ? (*home / ".config" / "locksmith" / "config.json").string()
                  : "this user has none") +
            "), which services and cron jobs without XDG_CONFIG_HOME read too. Move or link "
            "it there, or name it in LOCKSMITH_CONFIG for every process that locks");
}

}  // namespace

std::vector<std::filesystem::path> config::default_locations() {
    std::vector<std::filesystem::path> out;
    if (const auto home = home_directory())
        out.push_back(*home / ".config" / "locksmith" / "config.json");
    out.emplace_back("/etc/locksmith/config.json");
    return out;
}

config config::discover(const std::vector<std::filesystem::path>& locations) {
    if (auto from_env = from_environment()) return std::move(*from_env);
    refuse_config_in_xdg(locations);
    for (const auto& path : locations) {
        std::error_code ec;
        const bool absent =
            !std::filesystem::exists(path, ec) &&
            (!ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory);
        // read_file says why a location that is not certainly absent cannot be used.
        if (!absent) return parse(read_file(path), "file " + path.string());
    }
    return config{};
}

std::vector<config_error> config::check(std::string_view json_text, std::optional<config>* read) {
    config out;
    std::vector<config_error> errors;
    const bool was_read = parse_into(json_text, out, errors);
    if (read != nullptr) *read = was_read ? std::optional<config>(std::move(out)) : std::nullopt;
    return errors;
}

const lock_rule* config::rule_for(std::string_view name) const noexcept {
    for (const auto& rule : locks)
        if (glob_match(rule.pattern, name)) return &rule;
    return nullptr;
}

}  // namespace locksmith
