// SPDX-License-Identifier: MIT
// Helpers for strategy authors: what several strategies need and must do alike.
//
//   name_hash / stable_name_hash  a 128-bit hash of a lock name that every build and version
//                                 computes alike, for mapping names to files, slots, semaphores
//   lock_file_name                a safe single path component for a lock name
//   sha256_hex                    SHA-256, for a backend key of fixed length from any name
//   fork_generation / current_pid per-process facts cached without a system call, and
//                                 refreshed in a fork()ed child
//   lock_directory                the checked, open directory of a file-based strategy
//   default_lock_dir              where lock files go when the config does not say
//   read_lock_dir_options         the lock_dir and shared_group options
//   open_lock_directory           opens (creates) and checks a lock directory
//   open_private_directory        the same for a folder a strategy names otherwise (sql's)
//   client_library                a C client library (libpq, libmariadb) opened on first use
//   scrub_secret                  a message with a password replaced by "***"
//   read_secret_file              a password (or other credential) kept in a file of its own
//   resolve_secret                a secret option's value, from the config, a file or the
//   environment socket_closed_by_peer         whether the server closed an idle connection
//   connect_tcp                   a TCP connection within a deadline, every address in turn
//   json_too_deep_at              where JSON nests too deep to be parsed (config, server replies)
//   every_signal_blocked          starts background threads that take no process signal
//   brief_retries                 a few quick tries before a waiter sleeps in the kernel
//   set_permit_number             which permit a key holds, for a store that numbers them
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>

namespace locksmith {

// Not cryptographic: a crafted collision makes two names share one lock (less concurrency),
// never breaks mutual exclusion. Changing the function would make two versions of locksmith
// map one name to two locks, so it never changes.
struct name_hash {
    std::uint64_t high = 0;
    std::uint64_t low = 0;
    bool operator==(const name_hash&) const = default;
    // 32 lowercase hex digits.
    std::string hex() const;
};

name_hash stable_name_hash(std::string_view name) noexcept;

// "<readable prefix>.<hash hex><suffix>": the prefix (up to 32 characters of [A-Za-z0-9._-] from
// the name) helps an admin who lists the directory; the hash makes any name (with '/', "..",
// NUL, any length) one safe path component.
std::string lock_file_name(std::string_view name, std::string_view suffix);

// The SHA-256 of `data` (FIPS 180-4) as 64 lowercase hex digits: a key of fixed length for a name
// a backend cannot take as it is (too long, or bytes it forbids), where a collision must be out
// of reach (stable_name_hash is not cryptographic).
std::string sha256_hex(std::string_view data);

// A counter that changes in the child at every fork(): a cache tagged with it knows when it
// was filled by the parent.
std::uint64_t fork_generation() noexcept;

// getpid(), cached per thread (a lock+unlock fast path should make no extra system call).
pid_t current_pid() noexcept;

class options_reader;
struct secret_source;

// The directory of a file-based strategy's lock files, opened once with O_NOFOLLOW so that lock
// files are created relative to it (openat) and a symlink swapped in later cannot redirect them.
// Private (only its owner writes to it) or shared with one group (the `shared_group` option).
class lock_directory {
  public:
    lock_directory(int fd, std::filesystem::path path, std::optional<gid_t> shared_group)
        : fd_(fd), path_(std::move(path)), shared_group_(shared_group) {}
    ~lock_directory();
    lock_directory(const lock_directory&) = delete;
    lock_directory& operator=(const lock_directory&) = delete;
    int fd() const noexcept { return fd_; }
    const std::filesystem::path& path() const noexcept { return path_; }
    // The group the directory is shared with; nullopt for a private directory.
    std::optional<gid_t> shared_group() const noexcept { return shared_group_; }

    // The mode to create lock files with: 0600, or 0660 in a shared directory.
    mode_t file_mode() const noexcept { return shared_group_ ? 0660 : 0600; }

    // Effects: in a shared directory, gives a file this process owns (`st` is its fstat) the
    //   shared group and mode 0660, whatever the umask, so that the group's other users can use
    //   it; nothing in a private directory.
    // Throws: backend_error naming the file and `strategy`.
    void share(int fd, const struct stat& st, const std::string& name,
               std::string_view strategy) const;

    // Why the file `name` in this directory, `st` being the fstat of the open file, must not be
    // used as a lock file, or "" when it may: it is not a regular file; it has more than one link
    // (a hard link to some other file: nothing may be written into it, and its removal would
    // not be seen); it belongs to neither this user nor (shared directory) the shared group.
    std::string refusal(const struct stat& st) const;

  private:
    int fd_;
    std::filesystem::path path_;
    std::optional<gid_t> shared_group_;
};

// The default lock directory, one per user whatever the environment (cron, login shell,
// service): /run/locksmith for root (per machine, only root can create it); for other users
// /run/lock/locksmith-<uid> where /run/lock is the sticky, world-writable lock directory of the
// FHS (Debian, Ubuntu), else /tmp/locksmith-<uid>.
std::filesystem::path default_lock_dir();

// Reads the options every file-based strategy shares: "lock_dir" (an absolute path) and
// "shared_group" (a group name). Throws config_error pointing at the option.
void read_lock_dir_options(options_reader& reader, std::filesystem::path& lock_dir,
                           std::string& shared_group);

// Opens `configured` (or default_lock_dir() when it is empty; with `shared_group` it must not
// be: the default directory is one user's), creating it when it does not
// exist (0700, or 2770 with the group when shared), and checks it, so that nobody but the caller
// (and root) can remove or plant a lock file in it:
//  - a directory, not a symlink (trailing slashes are ignored, so "dir/" is checked as "dir");
//  - owned by the caller or root (or, when shared, a member of the group); the default one must
//    be the caller's own, mode 0700;
//  - writable by nobody else: not by others at all, and by the group only when `shared_group`
//    names it (and is the directory's group);
//  - every directory above it is owned by root or the caller and not writable by others unless
//    sticky (else they could rename it away and a second lock directory would appear);
//  - writable by the caller.
// Throws invalid_argument_error naming `strategy`, the directory, what is wrong and what to do.
std::shared_ptr<const lock_directory> open_lock_directory(const std::filesystem::path& configured,
                                                          const std::string& shared_group,
                                                          std::string_view strategy);

// open_lock_directory for a directory no group shares, which the strategy calls `what` in its
// messages (sql: "the folder of the SQLite file"; a plugin: its option's name): the same checks,
// and advice that does not offer shared_group. `dir` must not be empty.
std::shared_ptr<const lock_directory> open_private_directory(const std::filesystem::path& dir,
                                                             std::string_view strategy,
                                                             std::string_view what);

// A C client library that a module opens with dlopen on first use instead of linking it: a
// program that never talks to that server (the statically linked locksmith command above all)
// then does not load it and what it pulls in (TLS, Kerberos, LDAP) at every start. Only its
// header is needed to build; its functions are reached through a table of pointers, filled once:
//
//   #define MY_FUNCTIONS(X) X(PQconnectStartParams) X(PQfinish) ...
//   struct my_api {
//   #define MY_MEMBER(f) decltype(&::f) f = nullptr;
//       MY_FUNCTIONS(MY_MEMBER)
//       explicit my_api(const client_library& lib) {
//   #define MY_RESOLVE(f) lib.resolve(f, #f);
//           MY_FUNCTIONS(MY_RESOLVE)
//       }
//   };
//   const my_api& api = load_client_api<my_api>("libpq.so.5", "libpq5", "pg_advisory");
class client_library {
  public:
    // Opens `soname` (dlopen counts references: every opening of one soname shares one copy).
    // Throws backend_error (native code "dlopen", permanent) naming `strategy`, the library and
    // the Debian `package` to install.
    client_library(std::string soname, std::string package, std::string strategy);
    // Sets `function` to the library's function `name`. Throws backend_error (as above) when
    // the library has none (a version too old).
    template <class F>
    void resolve(F*& function, const char* name) const {
        function = reinterpret_cast<F*>(symbol(name));
    }

  private:
    void* symbol(const char* name) const;
    void* handle_;
    std::string soname_;
    std::string package_;
    std::string strategy_;
};

// The function table `Api` (constructible from a client_library) of `soname`, built at the
// first call, once per process and thread-safely, and shared by every caller in this module.
// A failed load throws (see client_library) and is tried again at the next call, so that
// installing the package helps without a restart. `strategy` only names the caller in errors.
template <class Api>
const Api& load_client_api(const char* soname, const char* package, std::string_view strategy) {
    static const Api api{client_library(soname, package, std::string(strategy))};
    return api;
}

// `text` with every occurrence of `secret` (when not empty) replaced by "***": a client
// library's or server's message may quote what the client sent, and no message shows a password.
std::string scrub_secret(std::string text, std::string_view secret);

// The contents of the secret file `path` (a `password_file`, zookeeper's `auth_file`), so that a
// config that names it can be readable by all: without one trailing "\n" or "\r\n", at most
// 64 KiB. The file must be a regular file readable by its owner only (no permission for group
// or others), owned by the caller or root, on a path nobody else can change (the rule of every
// file this process trusts: a config, a plugin). `option` names it in messages ("zookeeper
// option 'auth_file'"), which give the path and what is wrong, never the contents. Throws
// invalid_argument_error.
std::string read_secret_file(const std::string& path, std::string_view option);

// The secret `strategy` option `name` holds: `inline_value`, or what `from` names (a file read by
// read_secret_file, or an environment variable that must be set and not empty). Messages name the
// option, the file or the variable, never the secret. Throws invalid_argument_error.
std::string resolve_secret(std::string inline_value, const secret_source& from,
                           std::string_view strategy, std::string_view name);

// The items of a `separator`-separated list option (servers, endpoints, hosts), spaces around
// each item trimmed. Empty items are kept, so that a caller can refuse "a,,b"; "" is one empty
// item. The one splitter of list options, so that every strategy reads a list alike.
std::vector<std::string> split_list(std::string_view text, char separator = ',');

// The identities of the server at `host`:`port`, for strategy_descriptor::backends: the host
// lower-cased, without IPv6 brackets, as "host:port" ("[addr]:port" for IPv6); "localhost" and
// an empty host give both loopback addresses, which are what they reach. No name is resolved.
std::vector<std::string> server_identities(std::string_view host, int port);

// True when the idle client socket `fd` has data, a hang-up or an error pending, which on an idle
// connection means the server closed it (restart, idle timeout, terminated session); also for
// fd < 0. One poll(2), no round trip: checked before a pooled connection is used again.
bool socket_closed_by_peer(int fd) noexcept;

// For strategies that speak their server's protocol themselves (memcached, etcd): a TCP
// connection to host:port, trying every address the name resolves to (::1 and 127.0.0.1) within
// one deadline, non-blocking and close-on-exec, with TCP_NODELAY (lock requests are small and
// wait for their reply: never hold them back). The caller turns a failure into its own error.
struct tcp_connection_attempt {
    int fd = -1;  // the connected socket, or -1
    // When the name did not resolve: "cannot resolve '<host>': <reason>", and whether a retry
    // may help (EAI_AGAIN, a transient errno).
    std::string resolve_failure;
    error_kind resolve_kind = error_kind::permanent;
    // Otherwise errno of the last address tried: ETIMEDOUT when the deadline passed first; 0
    // when the name has no address.
    int connect_errno = 0;
};
tcp_connection_attempt connect_tcp(const std::string& host, int port,
                                   std::chrono::steady_clock::time_point until);

// Where JSON text nests too deep: the offset of the first '[' or '{' that opens level
// `max_depth` + 1 (the outermost bracket is level 1), or npos. nlohmann's parser does not recurse,
// but copying, comparing and printing a parsed value do, so a document nested deeper than the
// stack allows must be refused before it is parsed: a config (config::parse), and every JSON
// document a strategy reads from a server, which may be broken or hostile. A linear scan that
// recurses nowhere; strings (and brackets in them) are skipped.
std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth) noexcept;

// While it lives, every signal is blocked in the thread that made it, and so in every thread
// started meanwhile (a new thread inherits its creator's mask). The library's background threads
// (renewal, a strategy's requests or client library) start under one: a process signal, such as
// the SIGCHLD that the locksmith command waits for on a signalfd, must reach the program's own
// threads, never one of ours, where it would be dropped.
class every_signal_blocked {
  public:
    every_signal_blocked() noexcept;
    ~every_signal_blocked();
    every_signal_blocked(const every_signal_blocked&) = delete;
    every_signal_blocked& operator=(const every_signal_blocked&) = delete;

  private:
    sigset_t previous_;
};

// For strategies that wait in the kernel (flock, System V semaphores): a few tries without
// sleeping before the blocking call. Once a waiter sleeps, each grant costs waking it, a context
// switch that may cross CPUs: the kernel hands a semaphore's release to its oldest sleeper, and
// flock wakes its sleepers to compete; with short holds that turned two processes on one name
// into a twentieth of one (bench/harness/analysis.md). A waiter that gets the lock while
// retrying costs none. Tries that fail (long holds) only take CPU from others, so the number of
// tries halves after a round without success and doubles after a success, between 2 and
// `max_tries`. After each of the first `pausing_tries` tries of a round the waiter pauses for
// about a microsecond; after later ones it yields the CPU, so that a holder preempted by the waiter
// (more waiters than CPUs) runs on. One object per waiter (not thread-safe).
class brief_retries {
  public:
    static constexpr int min_tries = 2;

    constexpr brief_retries(int max_tries, int pausing_tries) noexcept
        : max_tries_(max_tries), pausing_tries_(pausing_tries), tries_(max_tries) {}

    // Calls `attempt` (returns 0 when granted, EAGAIN, EWOULDBLOCK or EINTR when the lock is
    // busy, another errno on failure) up to the current number of tries, and not past `until`.
    // Returns 0, the failure's errno, or EAGAIN when the lock stayed busy: then the caller
    // sleeps in the kernel.
    template <class Attempt>
    int run(Attempt&& attempt, std::chrono::steady_clock::time_point until) {
        for (int i = 0; i < tries_; ++i) {
            const int rc = attempt();
            if (rc == 0) {
                tries_ = tries_ * 2 < max_tries_ ? tries_ * 2 : max_tries_;
                return 0;
            }
            if (rc != EAGAIN && rc != EWOULDBLOCK && rc != EINTR) return rc;
            if (until != std::chrono::steady_clock::time_point::max() &&
                std::chrono::steady_clock::now() >= until)
                return EAGAIN;
            wait_before_next_try(i < pausing_tries_);
        }
        tries_ = tries_ / 2 > min_tries ? tries_ / 2 : min_tries;
        return EAGAIN;
    }

  private:
    static void wait_before_next_try(bool pause) noexcept;
    int max_tries_;
    int pausing_tries_;
    int tries_;
};

// For a store that numbers its permits (1..N): records in k's portable state which one k holds,
// for named_semaphore::permit() and LOCKSMITH_PERMIT. The entry may stay after the release
// (permit() asks only while held); a grant of the same number writes nothing.
inline void set_permit_number(key& k, std::uint32_t number) {
    auto& entry = k.portable_state()["permit"];
    if (!entry.is_number_unsigned() || entry.get<std::uint32_t>() != number) entry = number;
}

}  // namespace locksmith
