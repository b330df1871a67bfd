// SPDX-License-Identifier: MIT
// The `simple` strategy: O_CREAT|O_EXCL lock files with an owner record. See
// include/locksmith/strategies/simple.hpp for the contract.
//
// Protocol:
//  - Acquire is only ever the O_EXCL create (the record is written right after), so at most one
//    process holds a given file at a time, whatever else happens.
//  - A file is removed (release, breaking a stale lock) or replaced (a continued key adopting
//    it) only under the guard: an OFD write lock on byte hash(name) % 65536 of the guard file.
//    Under the guard the remover reads the file again and decides on what it reads, so the file
//    it removes is the file it judged: a stale record cannot be confused with a newcomer's.
//  - OFD locks (not classic fcntl locks) belong to the open file description, so two threads of
//    one process exclude each other, and closing another descriptor never drops them.
#include <locksmith/strategies/simple.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/backoff.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {
namespace {

constexpr const char* strategy_name = "simple";
// What the store offers and the registry entry says (one statement of both).
constexpr capability simple_capabilities =
    capability::exclusive | capability::noblock | capability::serializable | capability::counting;
constexpr std::string_view magic_line = "locksmith-simple 1";
constexpr const char* guard_name = ".locksmith-simple.guard";
constexpr std::size_t max_record = 4096;
// A counting semaphore's limit file: written complete under a temporary name, then linked at
// its name (link(2) is atomic on NFS too), so a reader never sees half of it.
constexpr std::string_view limit_magic = "locksmith-simple-limit 1";
// A round of tries costs up to one create and one read per slot.
constexpr std::uint32_t max_simple_permits = 1000;

// The first line of a /proc file. "e": close-on-exec, which std::ifstream cannot ask for
// (another thread's fork and exec would pass the descriptor on).
std::string read_small_file(const char* path) {
    std::string line;
    if (FILE* f = std::fopen(path, "re")) {
        char buffer[max_record];
        if (std::fgets(buffer, sizeof buffer, f)) line = buffer;
        std::fclose(f);
    }
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
}

// The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), which
// tells a live owner from a new process that reused its pid. Empty when unknown.
std::string process_start_time(long pid) {
    std::string stat = read_small_file(("/proc/" + std::to_string(pid) + "/stat").c_str());
    auto paren = stat.rfind(')');
    if (paren == std::string::npos) return {};
    std::istringstream fields(stat.substr(paren + 2));
    std::string field;
    for (int i = 3; i <= 22 && fields >> field; ++i)
        if (i == 22) return field;
    return {};
}

// Who this process is, as written into its lock files.
struct identity {
    std::string host;
    std::string boot;
    // The pid namespace ("pid:[4026531836]"): a pid means something only inside its namespace,
    // so containers that share a host name and a lock directory do not judge each other's pids.
    std::string pidns;
    long pid = 0;
    std::string start;
};

const identity& me() {
    // pid and start change in a forked child, so they are read on every call; host and boot are
    // fixed for the life of the process.
    static const std::string host = [] {
        char buf[256] = {};
        ::gethostname(buf, sizeof buf - 1);
        return std::string(buf);
    }();
    static const std::string boot = read_small_file("/proc/sys/kernel/random/boot_id");
    static const std::string pidns = [] {
        char buf[64] = {};
        const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
        return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
    }();
    // The cache is refreshed in a forked child (the generation changes).
    thread_local identity id;
    thread_local std::uint64_t id_generation = ~std::uint64_t(0);
    const std::uint64_t generation = fork_generation();
    if (id_generation != generation) {
        const long pid = current_pid();
        id = identity{host, boot, pidns, pid, process_start_time(pid)};
        id_generation = generation;
    }
    return id;
}

std::int64_t now_unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

struct record {
    std::string token;
    identity owner;
    std::int64_t created_ms = 0;
    std::uint32_t limit = 0;  // a permit's: the limit its owner asked for; 0 for a lock
};

std::string format_record(const std::string& token, const identity& id, std::int64_t created_ms,
                          std::uint32_t limit) {
    std::string text(magic_line);
    text += "\ntoken=" + token + "\nhost=" + id.host + "\npid=" + std::to_string(id.pid) +
            "\nstart=" + id.start + "\nboot=" + id.boot + "\npidns=" + id.pidns +
            "\ncreated_ms=" + std::to_string(created_ms);
    if (limit != 0) text += "\nlimit=" + std::to_string(limit);
    return text + "\nend\n";
}

enum class parse_result { ok, truncated, foreign };

// A record is complete only with its final "end" line, so a file cut short anywhere (crash
// during the write, full disk) reads as truncated, never as a wrong owner.
parse_result parse_record(std::string_view text, record& out) {
    if (text.size() >= max_record) return parse_result::foreign;  // ours are far smaller
    if (text.size() <= magic_line.size())
        return magic_line.substr(0, text.size()) == text ? parse_result::truncated
                                                         : parse_result::foreign;
    if (text.substr(0, magic_line.size() + 1) != std::string(magic_line) + "\n")
        return parse_result::foreign;
    std::istringstream in{std::string(text.substr(magic_line.size() + 1))};
    std::string line;
    bool ended = false;
    while (std::getline(in, line)) {
        if (line == "end") {
            ended = true;
            break;
        }
        auto eq = line.find('=');
        if (eq == std::string::npos) return parse_result::foreign;
        std::string k = line.substr(0, eq), v = line.substr(eq + 1);
        if (k == "token")
            out.token = v;
        else if (k == "host")
            out.owner.host = v;
        else if (k == "pid")
            out.owner.pid = std::strtol(v.c_str(), nullptr, 10);
        else if (k == "start")
            out.owner.start = v;
        else if (k == "boot")
            out.owner.boot = v;
        else if (k == "pidns")
            out.owner.pidns = v;
        else if (k == "created_ms")
            out.created_ms = std::strtoll(v.c_str(), nullptr, 10);
        else if (k == "limit")
            out.limit = std::uint32_t(std::strtoul(v.c_str(), nullptr, 10));
        // Unknown keys come from newer versions: ignored.
    }
    if (!ended) return parse_result::truncated;
    if (out.token.empty() || out.owner.pid <= 0) return parse_result::foreign;
    return parse_result::ok;
}

struct lock_file {
    std::string text;
    std::int64_t mtime_ms = 0;
};

class simple_store final : public store {
  public:
    simple_store(std::shared_ptr<const lock_directory> dir, simple_options options)
        : store(strategy_name, simple_capabilities),
          dir_(std::move(dir)),
          options_(std::move(options)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode, std::chrono::milliseconds) override {
        if (k.limit() != 0) return acquire_permit(k);
        return try_file(k, lock_file_name(k.resource(), ".slock"), k.resource(), 0);
    }

    void do_release(key& k) override {
        if (k.limit() != 0) {
            if (auto slot = held_slot(k)) release_file(k, slot_name(k.resource(), *slot), true);
            return;
        }
        release_file(k, lock_file_name(k.resource(), ".slock"), false);
    }

    bool do_holds(const key& k) override {
        if (k.limit() != 0) return held_slot(k).has_value();
        return holds_file(k, lock_file_name(k.resource(), ".slock"));
    }

    lock_status do_status(std::string_view resource) override {
        // A name used as a semaphore has a limit file: that is what the name is.
        if (auto permits = permit_status(resource)) return *permits;
        lock_status status;
        auto file = read(lock_file_name(resource, ".slock"));
        status.held = lock_status::state::free;
        if (!file) return status;
        status.held = lock_status::state::held_exclusive;
        record r;
        switch (parse_record(file->text, r)) {
            case parse_result::foreign:
                status.held = lock_status::state::unknown;
                status.holders.push_back("not a locksmith lock file");
                break;
            case parse_result::truncated:
                status.holders.push_back(
                    stale_truncated(*file) ? "incomplete lock file (stale; broken on next acquire)"
                                           : "lock file being written");
                break;
            case parse_result::ok:
                status.holders.push_back("pid " + std::to_string(r.owner.pid) + " on host " +
                                         r.owner.host + " (token " + r.token.substr(0, 8) + "…)" +
                                         (is_stale(r) ? " — stale, broken on next acquire" : ""));
        }
        return status;
    }

  private:
    // One try at the lock file or permit slot `name`; `guarded` picks the guard byte of its
    // removals. Each round either creates the file, finds it held, or removes a stale one and
    // tries again; a handful of rounds only run out when others keep winning the races.
    // `limit` is the permit's (0 for a lock): a live slot whose owner asked for another limit is
    // refused, so that one name keeps one limit even when its limit file was removed.
    bool try_file(key& k, const std::string& name, std::string_view guarded, std::uint32_t limit) {
        for (int round = 0; round < 8; ++round) {
            if (create(name, k.token(), limit)) return true;
            auto file = read(name);
            if (!file) continue;  // released meanwhile
            record r;
            switch (parse_record(file->text, r)) {
                case parse_result::foreign:
                    fail_foreign(name);
                case parse_result::truncated:
                    if (!stale_truncated(*file)) return false;
                    break_stale(guarded, name);
                    continue;
                case parse_result::ok:
                    break;
            }
            if (r.token == k.token()) {
                adopt(k, name, guarded, r);
                return true;
            }
            if (!is_stale(r)) {
                if (limit != 0 && r.limit != 0 && r.limit != limit)
                    fail_limit(k, r.limit, "its holder " + path_of(name) + " asked for it");
                return false;
            }
            break_stale(guarded, name);
        }
        return false;
    }

    // Removes `name` if it still holds k's token, under the guard.
    void release_file(key& k, const std::string& name, bool permit) {
        const std::string guarded = permit ? name : k.resource();
        try {
            guard g(*this, guarded);
            auto file = read(name);
            if (!file) return;
            record r;
            if (parse_record(file->text, r) != parse_result::ok || r.token != k.token()) return;
            if (::unlinkat(dir_->fd(), name.c_str(), 0) != 0 && errno != ENOENT)
                throw_errno(strategy_name, "removing lock file " + path_of(name), errno);
        } catch (const error& e) {
            throw release_error(std::string(e.what()) + "; " + (permit ? "permit of '" : "lock '") +
                                k.resource() + "' stays held: its " +
                                (permit ? "slot file " : "lock file ") + path_of(name) +
                                " is left until it is released or its owner process is gone");
        }
    }

    bool holds_file(const key& k, const std::string& name) {
        auto file = read(name);
        record r;
        return file && parse_record(file->text, r) == parse_result::ok && r.token == k.token();
    }

    // ---- permits: slot files <prefix>.<hash>.permit-<i>.slock, the limit file .slimit ----

    static std::string slot_name(std::string_view resource, std::uint32_t slot) {
        return lock_file_name(resource, ".permit-" + std::to_string(slot) + ".slock");
    }

    [[noreturn]] void fail_limit(const key& k, std::uint32_t kept, const std::string& where) const {
        const std::string limit_path = path_of(lock_file_name(k.resource(), ".slimit"));
        throw invalid_argument_error(
            "simple semaphore '" + k.resource() + "' has a limit of " + std::to_string(kept) +
            " (" + where + "); this owner asks for " + std::to_string(k.limit()) +
            ". One name has one limit: ask for " + std::to_string(kept) + ", or remove " +
            limit_path + " when no process holds a permit (rm " + limit_path +
            ") so that the next user sets the limit anew");
    }

    // The limit kept in the name's limit file; nullopt when there is none. A file there that is
    // not one (a symlink, another file type, other content) is backend_error naming it.
    std::optional<std::uint32_t> read_limit(std::string_view resource) const {
        const std::string name = lock_file_name(resource, ".slimit");
        auto file = read(name);
        if (!file) return std::nullopt;
        const std::string head = std::string(limit_magic) + "\nlimit=";
        unsigned long limit = 0;
        if (file->text.compare(0, head.size(), head) == 0) {
            const char* digits = file->text.c_str() + head.size();
            char* end = nullptr;
            limit = std::strtoul(digits, &end, 10);
            if (end == digits || std::string_view(end) != "\nend\n") limit = 0;
        }
        if (limit < 1 || limit > max_simple_permits)
            throw backend_error(strategy_name, "bad limit file",
                                "simple: " + path_of(name) +
                                    " is not a locksmith limit file (or is corrupted); remove it "
                                    "when no process holds a permit of that name");
        return std::uint32_t(limit);
    }

    // The name's limit: the one its limit file keeps, or k's, written there when there is none.
    std::uint32_t kept_limit(const key& k) {
        if (auto kept = read_limit(k.resource())) return *kept;
        const std::string name = lock_file_name(k.resource(), ".slimit");
        const std::string temp = "." + name + "." + k.token() + ".tmp";
        const int fd =
            ::openat(dir_->fd(), temp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC,
                     dir_->file_mode());
        if (fd < 0) throw_errno(strategy_name, "creating " + path_of(temp), errno);
        share_new(fd, temp);
        const std::string text =
            std::string(limit_magic) + "\nlimit=" + std::to_string(k.limit()) + "\nend\n";
        const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
        const int err = written ? 0 : (errno != 0 ? errno : ENOSPC);
        const bool closed = ::close(fd) == 0;
        // link(2), not rename: it fails when a limit file is there (two first users at once),
        // and is atomic on NFS.
        const int linked = written && closed
                               ? ::linkat(dir_->fd(), temp.c_str(), dir_->fd(), name.c_str(), 0)
                               : -1;
        const int link_err = errno;
        ::unlinkat(dir_->fd(), temp.c_str(), 0);
        if (!written || !closed)
            throw_errno(strategy_name, "writing limit file " + path_of(temp), err ? err : errno);
        if (linked != 0 && link_err != EEXIST)
            throw_errno(strategy_name, "linking limit file " + path_of(name), link_err);
        if (linked == 0) return k.limit();
        if (auto kept = read_limit(k.resource())) return *kept;  // the other first user's
        throw backend_error(strategy_name, "limit file vanished",
                            "simple: the limit file " + path_of(name) +
                                " was removed while this owner read it; try again");
    }

    // Tries slots 1..N once each: the key's own slot first (a re-acquire while held), then in
    // order.
    bool acquire_permit(key& k) {
        if (k.limit() > max_simple_permits)
            throw invalid_argument_error("simple: a limit of " + std::to_string(k.limit()) +
                                         " for '" + k.resource() + "' exceeds the strategy's " +
                                         std::to_string(max_simple_permits) +
                                         " (a round of tries costs a create per slot)");
        const std::uint32_t kept = kept_limit(k);
        if (kept != k.limit()) fail_limit(k, kept, "kept in its limit file");
        if (auto own = numbered_slot(k); own && *own <= k.limit()) {
            const std::string name = slot_name(k.resource(), *own);
            if (holds_file(k, name)) return try_file(k, name, name, k.limit());
        }
        for (std::uint32_t slot = 1; slot <= k.limit(); ++slot) {
            const std::string name = slot_name(k.resource(), slot);
            if (try_file(k, name, name, k.limit())) {
                set_permit_number(k, slot);
                return true;
            }
        }
        return false;
    }

    // The permit number the key records (set at its grant).
    static std::optional<std::uint32_t> numbered_slot(const key& k) {
        const auto& state = k.portable_state();
        auto it = state.find("permit");
        if (it == state.end() || !it->is_number_unsigned()) return std::nullopt;
        const auto slot = it->get<std::uint64_t>();
        if (slot < 1 || slot > max_simple_permits) return std::nullopt;
        return std::uint32_t(slot);
    }

    // The slot whose file holds k's token, if any.
    std::optional<std::uint32_t> held_slot(const key& k) {
        auto own = numbered_slot(k);
        if (own && holds_file(k, slot_name(k.resource(), *own))) return own;
        return std::nullopt;
    }

    std::optional<lock_status> permit_status(std::string_view resource) const {
        std::optional<std::uint32_t> limit;
        try {
            limit = read_limit(resource);
        } catch (const backend_error&) {
            return std::nullopt;  // not one to trust
        }
        if (!limit) return std::nullopt;
        lock_status status;
        std::uint32_t held = 0;
        for (std::uint32_t slot = 1; slot <= *limit; ++slot) {
            const std::string name = slot_name(resource, slot);
            std::optional<lock_file> file;
            try {
                file = read(name);
            } catch (const backend_error&) {
                ++held;  // a foreign file there blocks the slot
                status.holders.push_back("permit " + std::to_string(slot) +
                                         ": not a locksmith "
                                         "lock file");
                continue;
            }
            if (!file) continue;
            record r;
            const auto parsed = parse_record(file->text, r);
            if (parsed == parse_result::ok && is_stale(r)) continue;  // broken by the next grant
            if (parsed == parse_result::truncated && stale_truncated(*file)) continue;
            ++held;
            if (parsed == parse_result::ok)
                status.holders.push_back("permit " + std::to_string(slot) + ": pid " +
                                         std::to_string(r.owner.pid) + " on host " + r.owner.host);
        }
        status.limit = *limit;
        status.permits_held = held;
        status.held = held < *limit ? lock_status::state::free : lock_status::state::held_exclusive;
        return status;
    }

    // The OFD lock on this name's byte of the guard file; released by closing the descriptor.
    // Its holders only read and remove a file, so waiting longer than write_grace for it means
    // a holder is stopped or foreign: an error, never an endless wait.
    class guard {
      public:
        guard(const simple_store& s, std::string_view resource) {
            const auto& dir = *s.dir_;
            fd_ = ::openat(dir.fd(), guard_name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                           dir.file_mode());
            if (fd_ < 0) {
                const int err = errno;
                struct stat st;
                std::string whose;
                if (::fstatat(dir.fd(), guard_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                    char mode[8];
                    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
                    whose = " (owned by uid " + std::to_string(st.st_uid) + ", mode " + mode +
                            "; every user of " + dir.path().string() +
                            " must be able to write to it: chmod 660 it and use shared_group, or "
                            "remove it while no lock is held)";
                }
                throw_errno(strategy_name, "opening guard file " + s.path_of(guard_name) + whose,
                            err);
            }
            try {
                struct stat st;
                if (dir.shared_group() && ::fstat(fd_, &st) == 0)
                    dir.share(fd_, st, guard_name, strategy_name);
                lock(s, resource);
            } catch (...) {
                ::close(fd_);
                throw;
            }
        }
        ~guard() { ::close(fd_); }
        guard(const guard&) = delete;
        guard& operator=(const guard&) = delete;

      private:
        void lock(const simple_store& s, std::string_view resource) {
            const std::uint64_t low = stable_name_hash(resource).low;
            struct flock fl {};
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            fl.l_start = static_cast<off_t>(low % 65536);
            fl.l_len = 1;
            const deadline until = deadline::clock::now() + s.options_.write_grace;
            backoff delays;
            while (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
                if (errno == EINTR) continue;
                if (errno != EAGAIN && errno != EACCES)
                    throw_errno(strategy_name, "locking guard file " + s.path_of(guard_name),
                                errno);
                if (!delays.sleep(until))
                    throw backend_error(
                        strategy_name, "guard busy",
                        "simple: the guard file " + s.path_of(guard_name) + " stayed locked for " +
                            std::to_string(s.options_.write_grace.count()) +
                            " ms (write_grace_s) by another process; it may be stopped "
                            "(SIGSTOP) or not a locksmith process");
            }
        }

        int fd_ = -1;
    };

    std::string path_of(const std::string& name) const { return (dir_->path() / name).string(); }

    [[noreturn]] void fail_foreign(const std::string& name) const {
        throw backend_error(strategy_name, "foreign file",
                            "simple: " + path_of(name) +
                                " exists but is not a locksmith lock file; refusing to remove it "
                                "(remove it by hand if nothing else uses it)");
    }

    // In a shared directory, lets the group's users read (judge) and remove the file we just
    // created. On failure the file is removed and backend_error thrown.
    void share_new(int fd, const std::string& name) const {
        if (!dir_->shared_group()) return;
        struct stat st;
        try {
            if (::fstat(fd, &st) != 0) throw_errno(strategy_name, "fstat " + path_of(name), errno);
            dir_->share(fd, st, name, strategy_name);
        } catch (...) {
            ::close(fd);
            ::unlinkat(dir_->fd(), name.c_str(), 0);
            throw;
        }
    }

    // The O_EXCL create. Returns false when the file exists.
    bool create(const std::string& name, const std::string& token, std::uint32_t limit) {
        const int fd =
            ::openat(dir_->fd(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     dir_->file_mode());
        if (fd < 0) {
            if (errno == EEXIST) return false;
            throw_errno(strategy_name, "creating lock file " + path_of(name), errno);
        }
        share_new(fd, name);
        const std::string text = format_record(token, me(), now_unix_ms(), limit);
        const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
        const int err = written ? 0 : (errno != 0 ? errno : ENOSPC);
        if (::close(fd) != 0 || !written) {
            // Nobody else removes a fresh file, so removing our half-written one is safe.
            ::unlinkat(dir_->fd(), name.c_str(), 0);
            throw_errno(strategy_name, "writing lock file " + path_of(name), err ? err : errno);
        }
        return true;
    }

    // The file's content, or nullopt when it does not exist.
    std::optional<lock_file> read(const std::string& name) const {
        // O_NONBLOCK: a FIFO planted at the path must not hang us (it fails the S_ISREG check).
        const int fd =
            ::openat(dir_->fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            if (errno == ENOENT) return std::nullopt;
            if (errno == ELOOP)
                throw backend_error(strategy_name, "errno " + std::to_string(ELOOP),
                                    "simple: lock file " + path_of(name) +
                                        " is a symbolic link; refusing to follow it");
            throw_errno(strategy_name, "opening lock file " + path_of(name), errno);
        }
        lock_file file;
        struct stat st;
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            throw backend_error(strategy_name, "not a file",
                                "simple: " + path_of(name) + " is not a regular file");
        }
        file.mtime_ms = std::int64_t(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
        char buf[max_record];
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) file.text.assign(buf, std::size_t(n));
        // A short read of a regular file is its end; only a file as large as the buffer (never a
        // record of ours) needs another look, to tell "cut at max_record" from "exactly that".
        while (n == ssize_t(sizeof buf) && file.text.size() < 2 * max_record &&
               (n = ::read(fd, buf, sizeof buf)) > 0)
            file.text.append(buf, std::size_t(n));
        const int err = n < 0 ? errno : 0;
        ::close(fd);
        if (n < 0) throw_errno(strategy_name, "reading lock file " + path_of(name), err);
        return file;
    }

    bool stale_truncated(const lock_file& file) const {
        return now_unix_ms() - file.mtime_ms >= options_.write_grace.count();
    }

    bool is_stale(const record& r) const {
        if (options_.max_age.count() > 0 &&
            now_unix_ms() - r.created_ms >= options_.max_age.count())
            return true;
        const identity& self = me();
        if (r.owner.host != self.host) return false;  // cannot see other hosts' processes
        if (!r.owner.boot.empty() && !self.boot.empty() && r.owner.boot != self.boot)
            return true;  // the owner's boot is over
        if (!r.owner.pidns.empty() && r.owner.pidns != self.pidns)
            return false;  // its pids are not ours to look up
        if (r.owner.pid == self.pid) return r.owner.start != self.start;
        if (::kill(static_cast<pid_t>(r.owner.pid), 0) != 0 && errno == ESRCH) return true;
        // The pid lives; is it still the owner, or a new process that got its number?
        if (r.owner.start.empty()) return false;
        const std::string start = process_start_time(r.owner.pid);
        return !start.empty() && start != r.owner.start;
    }

    // Removes the lock file if, read again under the guard, it is still stale.
    void break_stale(std::string_view resource, const std::string& name) {
        guard g(*this, resource);
        auto file = read(name);
        if (!file) return;
        record r;
        switch (parse_record(file->text, r)) {
            case parse_result::foreign:
                fail_foreign(name);
            case parse_result::truncated:
                if (!stale_truncated(*file)) return;
                break;
            case parse_result::ok:
                if (!is_stale(r)) return;
        }
        if (::unlinkat(dir_->fd(), name.c_str(), 0) != 0 && errno != ENOENT)
            throw_errno(strategy_name, "removing stale lock file " + path_of(name), errno);
    }

    // The file holds our token. When it names another process (a continued key), rewrite it so
    // that our process is the one whose death makes it stale.
    void adopt(key& k, const std::string& name, std::string_view guarded, const record& seen) {
        const identity& self = me();
        if (seen.owner.pid == self.pid && seen.owner.host == self.host &&
            seen.owner.start == self.start)
            return;  // already ours: an idempotent re-acquire
        guard g(*this, guarded);
        auto file = read(name);
        record r;
        if (!file || parse_record(file->text, r) != parse_result::ok || r.token != k.token())
            throw acquire_error("simple: lock '" + k.resource() +
                                "' changed owner while this process was taking it over");
        // Written beside it and renamed over it, so readers see the old or the new record.
        const std::string temp = "." + stable_name_hash(guarded).hex() + "." + k.token() + ".tmp";
        const int fd =
            ::openat(dir_->fd(), temp.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, dir_->file_mode());
        if (fd < 0) throw_errno(strategy_name, "creating " + path_of(temp), errno);
        share_new(fd, temp);
        const std::string text = format_record(k.token(), me(), r.created_ms, r.limit);
        const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
        const int err = errno;
        if (::close(fd) != 0 || !written ||
            ::renameat(dir_->fd(), temp.c_str(), dir_->fd(), name.c_str()) != 0) {
            const int e = written ? errno : err;
            ::unlinkat(dir_->fd(), temp.c_str(), 0);
            throw_errno(strategy_name, "taking over lock file " + path_of(name), e);
        }
    }

    std::shared_ptr<const lock_directory> dir_;
    simple_options options_;
};

}  // namespace

simple_options simple_options::from_json(const nlohmann::json& options) {
    options_reader reader(options);
    simple_options result;
    read_lock_dir_options(reader, result.lock_dir, result.shared_group);
    if (auto v = reader.seconds("max_age_s", 0, 10.0 * 365 * 24 * 3600)) result.max_age = *v;
    if (auto v = reader.seconds("write_grace_s", 0.001, 3600)) result.write_grace = *v;
    reader.finish();
    return result;
}

std::shared_ptr<store> make_simple_store(const simple_options& options) {
    if (options.max_age.count() < 0)
        throw invalid_argument_error("simple: max_age must not be negative");
    if (options.write_grace.count() <= 0)
        throw invalid_argument_error("simple: write_grace must be positive");
    return std::make_shared<simple_store>(
        open_lock_directory(options.lock_dir, options.shared_group, strategy_name), options);
}

std::filesystem::path simple_lock_path(const std::filesystem::path& lock_dir,
                                       std::string_view name) {
    return lock_dir / lock_file_name(name, ".slock");
}

strategy_descriptor simple_strategy() {
    strategy_descriptor d;
    d.name = strategy_name;
    d.description =
        "lock file created with O_EXCL holding the owner (TYPO3 SimpleLockStrategy); stale "
        "owners broken safely; works on NFS";
    d.default_priority = 50;
    d.capabilities = simple_capabilities;
    set_factory<simple_options>(d, make_simple_store);
    return d;
}

std::vector<std::string> simple_options::backends() const {
    const auto dir = lock_dir.empty() ? default_lock_dir() : lock_dir;
    return {"dir:" + std::filesystem::weakly_canonical(dir).string()};
}

}  // namespace locksmith::strategies
