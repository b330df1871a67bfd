// SPDX-License-Identifier: MIT
#include <locksmith/author/strategy_support.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <grp.h>
#include <pwd.h>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>

#include "trusted_path.hpp"

namespace locksmith {
namespace {

std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// `n` (≤ 8) bytes at `p` as a little-endian number, whatever the host's byte order: the name
// hash is a format shared by every host of a cluster (doc/FORMATS.md).
std::uint64_t load_le(const char* p, std::size_t n) noexcept {
    std::uint64_t v = 0;
    std::memcpy(&v, p, n);
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
    return v;
}

std::atomic<std::uint64_t> fork_counter{0};

const bool fork_handler_registered = [] {
    ::pthread_atfork(nullptr, nullptr,
                     [] { fork_counter.fetch_add(1, std::memory_order_relaxed); });
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
        const std::uint64_t w = load_le(name.data() + i, 8);
        a = mix64(a ^ w);
        b = (b ^ (w * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
        b = (b << 31) | (b >> 33);
    }
    const std::uint64_t tail = load_le(name.data() + i, name.size() - i);
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

lock_directory::~lock_directory() {
    ::close(fd_);
}

void lock_directory::share(int fd, const struct stat& st, const std::string& name,
                           std::string_view strategy) const {
    if (!shared_group_ || st.st_uid != ::geteuid()) return;
    const bool group_ok =
        st.st_gid == *shared_group_ || ::fchown(fd, uid_t(-1), *shared_group_) == 0;
    if (!group_ok || ((st.st_mode & 07777) != 0660 && ::fchmod(fd, 0660) != 0))
        throw_errno(std::string(strategy),
                    "giving " + (path_ / name).string() + " the shared group and mode 0660", errno);
}

std::string lock_directory::refusal(const struct stat& st) const {
    if (!S_ISREG(st.st_mode)) return "is not a regular file";
    if (st.st_nlink > 1)
        return "has " + std::to_string(st.st_nlink) +
               " hard links: it is another file linked in, not a lock file; remove it";
    if (st.st_uid != ::geteuid() && !(shared_group_ && st.st_gid == *shared_group_))
        return "belongs to uid " + std::to_string(st.st_uid) + ", not to this user" +
               (shared_group_ ? " nor to the shared group" : "") + "; remove it";
    return {};
}

std::filesystem::path default_lock_dir() {
    const uid_t uid = ::geteuid();
    if (uid == 0) return "/run/locksmith";
    // Only where root owns the parent and its sticky bit keeps others from renaming our
    // directory away (which would let a second one appear).
    struct stat st;
    if (::lstat("/run/lock", &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
        (st.st_mode & 01777) == 01777)
        return "/run/lock/locksmith-" + std::to_string(uid);
    return "/tmp/locksmith-" + std::to_string(uid);
}

namespace {

// The default lock directory is one user's, mode 0700 (default_lock_dir): a group cannot share
// it, and making it 2770 would lock its own user out (open_directory refuses it then).
const char* const shared_group_needs_lock_dir =
    "shared_group needs a lock_dir: the default lock directory is private to one user. Name a "
    "directory for the group in lock_dir (e.g. /var/lock/myapp, made with install -d -o root "
    "-g GROUP -m 2770), or leave shared_group out";

}  // namespace

void read_lock_dir_options(options_reader& reader, std::filesystem::path& lock_dir,
                           std::string& shared_group) {
    if (auto dir = reader.string("lock_dir")) {
        if (dir->empty() || dir->front() != '/')
            throw config_error("config.path", "/lock_dir",
                               "lock_dir '" + *dir +
                                   "' must be an absolute path (a relative one would name "
                                   "another directory in every working directory)");
        lock_dir = *dir;
    }
    if (auto group = reader.string("shared_group")) {
        if (group->empty())
            throw config_error("config.value", "/shared_group",
                               "shared_group must name a group (or be left out for a private "
                               "lock directory)");
        shared_group = *group;
        if (lock_dir.empty())
            throw config_error("config.value", "/shared_group", shared_group_needs_lock_dir);
    }
}

namespace {

// How messages name a directory: whose it is, what the strategy calls it, and whether it can
// be shared with a group (the shared_group option of file and simple).
struct directory_role {
    std::string_view strategy;
    std::string_view what;
    bool shareable;
};

[[noreturn]] void fail_dir(const directory_role& role, const std::filesystem::path& dir,
                           const std::string& why) {
    throw invalid_argument_error(std::string(role.strategy) + " strategy: " +
                                 std::string(role.what) + " " + dir.string() + " " + why);
}

std::string user_name(uid_t uid) {
    std::string name = "uid " + std::to_string(uid);
    if (const passwd* pw = ::getpwuid(uid)) name += " (" + std::string(pw->pw_name) + ")";
    return name;
}

bool member_of(uid_t uid, gid_t gid) {
    const passwd* pw = ::getpwuid(uid);
    if (pw == nullptr) return false;
    if (pw->pw_gid == gid) return true;
    const std::string name = pw->pw_name;
    if (const group* gr = ::getgrgid(gid))
        for (char** m = gr->gr_mem; m && *m; ++m)
            if (name == *m) return true;
    return false;
}

// Whoever can write to a directory can remove or rename what is in it. Returns why `st`
// lets someone other than the caller and root (and the shared group) do that, or "".
std::string writable_by_others(const struct stat& st, std::optional<gid_t> shared_group,
                               bool sticky_ok) {
    if (st.st_uid != 0 && st.st_uid != ::geteuid() &&
        !(shared_group && member_of(st.st_uid, *shared_group)))
        return "is owned by " + user_name(st.st_uid) + ", who could replace it";
    if (sticky_ok && (st.st_mode & S_ISVTX)) return {};
    if (st.st_mode & S_IWOTH) return "is writable by everyone";
    if ((st.st_mode & S_IWGRP) && !(shared_group && st.st_gid == *shared_group))
        return "is writable by group " + std::to_string(st.st_gid) +
               (shared_group ? " (not the shared group)" : "");
    return {};
}

// Checks every directory above `dir` (the literal path and the one symlinks resolve to): their
// writers could rename the lock directory away, and the next process would create another.
void check_ancestors(const std::filesystem::path& dir, std::optional<gid_t> shared_group,
                     const directory_role& role, const std::filesystem::path& lock_dir) {
    std::error_code ec;
    std::vector<std::filesystem::path> chains{dir.parent_path()};
    auto real = std::filesystem::canonical(dir.parent_path(), ec);
    if (ec)
        fail_dir(role, lock_dir,
                 "cannot be used: its parent " + dir.parent_path().string() +
                     " does not exist or cannot be searched (" + ec.message() + ")");
    if (real != chains.front()) chains.push_back(real);
    for (const auto& chain : chains)
        for (auto a = chain;; a = a.parent_path()) {
            struct stat st;
            if (::lstat(a.c_str(), &st) != 0)
                fail_dir(role, lock_dir,
                         "cannot be checked: " + a.string() + ": " + std::strerror(errno));
            // A symlink cannot be changed, only replaced by who writes to its parent: checked next.
            if (!S_ISLNK(st.st_mode)) {
                if (auto why = writable_by_others(st, shared_group, true); !why.empty())
                    fail_dir(role, lock_dir,
                             "is unsafe: the directory above it, " + a.string() + ", " + why +
                                 " (without the sticky bit) and could rename the lock directory "
                                 "away; choose a lock_dir whose parents only root or you can "
                                 "write to");
            }
            if (a == a.root_path() || a.empty()) break;
        }
}

int open_dir(const std::filesystem::path& path) {
    return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

std::shared_ptr<const lock_directory> open_directory(const std::filesystem::path& configured,
                                                     const std::string& shared_group,
                                                     const directory_role& role) {
    const bool is_default = configured.empty();
    // "dir/" would make open(O_NOFOLLOW) follow a symlink at "dir": check the name itself.
    std::string text = (is_default ? default_lock_dir() : configured.lexically_normal()).string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    const std::filesystem::path path = text;

    std::optional<gid_t> group;
    if (!shared_group.empty()) {
        const struct group* gr = ::getgrnam(shared_group.c_str());
        if (gr == nullptr)
            fail_dir(role, path,
                     "is to be shared with group '" + shared_group +
                         "', but there is no such group (option shared_group)");
        group = gr->gr_gid;
    }
    // Before anything is created: see shared_group_needs_lock_dir.
    if (is_default && group)
        fail_dir(role, path, std::string("cannot be used: ") + shared_group_needs_lock_dir);
    const std::string how_private =
        role.shareable
            ? " Make it private (chmod 700, owned by you) or, to share locks with other users, "
              "set the option shared_group to a group they are in."
            : " Make it yours and private (chmod 700), or choose one of your own: " +
                  std::string(role.strategy) +
                  " shares it only among processes of one user (it has no option "
                  "shared_group).";

    if (path.is_relative()) fail_dir(role, path, "must be an absolute path");
    check_ancestors(path, group, role, path);

    int fd = open_dir(path);
    bool created = false;
    if (fd < 0 && errno == ENOENT) {
        if (::mkdir(path.c_str(), group ? 02770 : 0700) == 0)
            created = true;
        else if (errno != EEXIST)
            fail_dir(role, path, std::string("cannot be created: ") + std::strerror(errno));
        fd = open_dir(path);
    }
    // Who owns it and who may write to it, from the open directory or, when we cannot open it,
    // from its name (a directory someone else made for us is best explained, not just denied).
    auto check_owner_and_mode = [&](const struct stat& st) {
        if (is_default && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
            fail_dir(role, path,
                     "(the default lock directory of " + user_name(::geteuid()) + ") is owned by " +
                         user_name(st.st_uid) + " with mode " + mode +
                         "; it must be yours with mode 0700. If you did not make it, someone "
                         "else did, to see or block your locks: remove it (as root: rm -r " +
                         path.string() + ") and try again.");
        }
        if (auto why = writable_by_others(st, group, false); !why.empty())
            fail_dir(role, path,
                     why +
                         ", so others could remove or plant lock files and a second holder "
                         "could get in." +
                         how_private);
        if (group && st.st_gid != *group)
            fail_dir(role, path,
                     "is to be shared with group '" + shared_group + "' but belongs to group " +
                         std::to_string(st.st_gid) + "; chgrp " + shared_group + " " +
                         path.string() + " && chmod 2770 " + path.string());
    };
    struct stat st;
    if (fd < 0) {
        int err = errno;
        if (err == ELOOP || (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)))
            fail_dir(role, path, "is a symbolic link; give the real directory");
        if (err == ENOTDIR) fail_dir(role, path, "is not a directory");
        if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) check_owner_and_mode(st);
        fail_dir(role, path, std::string("cannot be opened: ") + std::strerror(err));
    }
    auto dir = std::make_shared<const lock_directory>(fd, path, group);
    if (::fstat(fd, &st) != 0)
        fail_dir(role, path, std::string("cannot be read: ") + std::strerror(errno));
    // mkdir's mode passed through the umask, and the group is the creator's: set both.
    if (created && group && st.st_uid == ::geteuid() &&
        ((st.st_gid != *group && ::fchown(fd, uid_t(-1), *group) != 0) ||
         ::fchmod(fd, 02770) != 0 || ::fstat(fd, &st) != 0))
        fail_dir(role, path,
                 "was created but cannot be given group '" + shared_group +
                     "' and mode 2770: " + std::strerror(errno));
    check_owner_and_mode(st);
    if (::faccessat(AT_FDCWD, path.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
        fail_dir(role, path, "is not writable by this user");
    return dir;
}

}  // namespace

std::shared_ptr<const lock_directory> open_lock_directory(const std::filesystem::path& configured,
                                                          const std::string& shared_group,
                                                          std::string_view strategy) {
    return open_directory(configured, shared_group, {strategy, "lock_dir", true});
}

std::shared_ptr<const lock_directory> open_private_directory(const std::filesystem::path& dir,
                                                             std::string_view strategy,
                                                             std::string_view what) {
    if (dir.empty())
        throw invalid_argument_error(std::string(strategy) + " strategy: " + std::string(what) +
                                     " is empty");
    return open_directory(dir, "", {strategy, what, false});
}

client_library::client_library(std::string soname, std::string package, std::string strategy)
    : handle_(::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)),
      soname_(std::move(soname)),
      package_(std::move(package)),
      strategy_(std::move(strategy)) {
    if (handle_ == nullptr) {
        const char* why = ::dlerror();
        throw backend_error(strategy_, "dlopen",
                            strategy_ + ": cannot load " + soname_ + " (install the package " +
                                package_ + "): " + (why ? why : "dlopen failed"),
                            error_kind::permanent);
    }
}

void* client_library::symbol(const char* name) const {
    void* function = ::dlsym(handle_, name);
    if (function == nullptr)
        throw backend_error(strategy_, "dlopen",
                            strategy_ + ": " + soname_ + " has no function " + name +
                                " (is the package " + package_ + " too old?)",
                            error_kind::permanent);
    return function;
}

std::string scrub_secret(std::string text, std::string_view secret) {
    if (secret.empty()) return text;
    for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
        text.replace(at, secret.size(), "***");
    return text;
}

std::string read_secret_file(const std::string& path, std::string_view option) {
    const auto refuse = [&](const std::string& why) {
        return invalid_argument_error(std::string(option) + ": '" + path + "' " + why);
    };
    if (path.empty()) throw invalid_argument_error(std::string(option) + " is empty");
    // Who can change the file or a folder on its way could swap in a secret of their own (and
    // read ours, since a swapped file can be a FIFO they read from): the rule of every trusted
    // file, then the file itself, opened by its resolved path.
    const path_trust trust = check_trusted_path(path);
    if (trust.error == ENOENT || trust.error == ENOTDIR) throw refuse("does not exist");
    if (trust.error != 0) throw refuse("cannot be read: " + trust.problem);
    if (!trust.problem.empty())
        throw refuse("is not safe to use: " + trust.problem +
                     ". A secret file, and every folder and symlink on its path, must be owned "
                     "by you or root and writable by no one else");
    const int fd =
        ::open(trust.resolved.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) throw refuse("cannot be read: " + std::string(std::strerror(errno)));
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_fd{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw refuse("cannot be read: " + std::string(std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw refuse("is not a regular file");
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
        throw refuse("is readable or usable by group or others (mode " + std::string(mode) +
                     "): a secret file must be its owner's alone (chmod 600)");
    }
    constexpr std::size_t max_bytes = 64 * 1024;
    std::string text(max_bytes + 1, '\0');
    std::size_t length = 0;
    while (length < text.size()) {
        const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw refuse("cannot be read: " + std::string(std::strerror(errno)));
        if (n == 0) break;
        length += std::size_t(n);
    }
    if (length > max_bytes) throw refuse("is larger than 64 KiB: is it the right file?");
    text.resize(length);
    // Editors end the last line; the newline is not part of the secret.
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) throw refuse("is empty");
    return text;
}

std::string resolve_secret(std::string inline_value, const secret_source& from,
                           std::string_view strategy, std::string_view name) {
    const std::string option = std::string(strategy) + " option '" + std::string(name);
    if (!from.file.empty()) return read_secret_file(from.file, option + "_file'");
    if (from.env.empty()) return inline_value;
    const char* value = std::getenv(from.env.c_str());
    if (value == nullptr || *value == '\0')
        throw invalid_argument_error(option + "_env' names the environment variable " + from.env +
                                     ", which is " + (value ? "empty" : "not set"));
    return value;
}

every_signal_blocked::every_signal_blocked() noexcept {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous_);
}

every_signal_blocked::~every_signal_blocked() {
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth) noexcept {
    std::size_t depth = 0;
    bool in_string = false, escaped = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return i;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return std::string_view::npos;
}

bool socket_closed_by_peer(int fd) noexcept {
    if (fd < 0) return true;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) != 0;
}

tcp_connection_attempt connect_tcp(const std::string& host, int port,
                                   std::chrono::steady_clock::time_point until) {
    using std::chrono::milliseconds;
    tcp_connection_attempt out;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
        const int resolve_errno = errno;
        out.resolve_failure =
            "cannot resolve '" + host + "': " +
            (rc == EAI_SYSTEM ? std::string(std::strerror(resolve_errno)) : ::gai_strerror(rc));
        out.resolve_kind = rc == EAI_AGAIN    ? error_kind::transient
                           : rc == EAI_SYSTEM ? errno_kind(resolve_errno)
                                              : error_kind::permanent;
        return out;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        int fd =
            ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            out.connect_errno = errno;
            continue;
        }
        int err = 0;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            while (err == EINPROGRESS || err == EINTR) {
                const auto left =
                    std::chrono::ceil<milliseconds>(until - std::chrono::steady_clock::now());
                if (left <= milliseconds(0)) {
                    err = ETIMEDOUT;
                    break;
                }
                pollfd p{fd, POLLOUT, 0};
                const int n = ::poll(&p, 1, int(std::min<long long>(left.count(), INT_MAX)));
                if (n < 0 && errno != EINTR) {
                    err = errno;
                } else if (n > 0) {
                    socklen_t length = sizeof err;
                    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) != 0) err = errno;
                }
            }
        }
        if (err != 0) {
            ::close(fd);
            out.connect_errno = err;
            if (err == ETIMEDOUT) break;  // the deadline covers all addresses
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        out.fd = fd;
        out.connect_errno = 0;
        return out;
    }
    return out;
}

void brief_retries::wait_before_next_try(bool pause) noexcept {
    if (!pause) {
        ::sched_yield();
        return;
    }
    for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    }
}

std::vector<std::string> split_list(std::string_view text, char separator) {
    std::vector<std::string> items;
    for (std::size_t from = 0;;) {
        const auto end = std::min(text.find(separator, from), text.size());
        auto item = text.substr(from, end - from);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        items.emplace_back(item);
        if (end == text.size()) return items;
        from = end + 1;
    }
}

std::vector<std::string> server_identities(std::string_view host, int port) {
    std::string h(host);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto with_port = [port](const std::string& address) {
        return (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" +
               std::to_string(port);
    };
    if (h.empty() || h == "localhost" || h == "localhost.")
        return {with_port("127.0.0.1"), with_port("::1")};
    return {with_port(h)};
}

}  // namespace locksmith
