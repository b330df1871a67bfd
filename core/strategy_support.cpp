#include <locksmith/strategy_support.hpp>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <locksmith/errors.hpp>

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

lock_directory::~lock_directory() { ::close(fd_); }

std::filesystem::path default_lock_dir() {
    if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && runtime[0] == '/')
        return std::filesystem::path(runtime) / "locksmith";
    return std::filesystem::path("/tmp") / ("locksmith-" + std::to_string(::geteuid()));
}

namespace {

[[noreturn]] void fail_dir(std::string_view strategy, const std::filesystem::path& dir,
                           const std::string& why) {
    throw invalid_argument_error(std::string(strategy) + " strategy: lock_dir " + dir.string() +
                                 " " + why);
}

}  // namespace

std::shared_ptr<const lock_directory> open_lock_directory(const std::filesystem::path& configured,
                                                          std::string_view strategy) {
    const bool is_default = configured.empty();
    const std::filesystem::path path = is_default ? default_lock_dir() : configured;
    if (is_default && ::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
        fail_dir(strategy, path, std::string("cannot be created: ") + std::strerror(errno));
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        struct stat st;
        if (err == ELOOP || (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)))
            fail_dir(strategy, path, "is a symbolic link; give the real directory");
        if (err == ENOENT) fail_dir(strategy, path, "does not exist");
        if (err == ENOTDIR) fail_dir(strategy, path, "is not a directory");
        fail_dir(strategy, path, std::string("cannot be opened: ") + std::strerror(err));
    }
    auto dir = std::make_shared<const lock_directory>(fd, path);
    struct stat st;
    if (::fstat(fd, &st) != 0) fail_dir(strategy, path, std::string("cannot be read: ") + std::strerror(errno));
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        fail_dir(strategy, path, "is writable by everyone without the sticky bit; anyone could replace "
                       "its lock files");
    if (is_default && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0))
        fail_dir(strategy, path, "is not private to this user (it must be owned by uid " +
                           std::to_string(::geteuid()) + " with mode 0700)");
    if (::faccessat(AT_FDCWD, path.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
        fail_dir(strategy, path, "is not writable by this user");
    return dir;
}

}  // namespace locksmith
