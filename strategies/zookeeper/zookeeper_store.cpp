// SPDX-License-Identifier: MIT
// The zookeeper strategy's options and store (its registry entry is in zookeeper_descriptor.cpp).
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include <zookeeper.h>

#include <locksmith/author/plugin.hpp>
#include <locksmith/author/strategy_support.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/options.hpp>
#include <locksmith/strategies/zookeeper.hpp>
#include <locksmith/version.hpp>

#include "zookeeper_descriptor.hpp"

namespace locksmith::strategies {
namespace {

using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

constexpr const char* strategy_name = "zookeeper";

// Largest limit of a counting semaphore: the first waiter watches every holder's node.
constexpr std::uint32_t max_permits = 1000;

bool transient_rc(int rc) {
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
           rc == ZCLOSING || rc == ZSESSIONMOVED;
}

[[noreturn]] void fail(const std::string& hosts, const std::string& what, int rc) {
    // ZNOAUTH: a node made by another identity (or by one with auth, when this store has none).
    const std::string hint =
        rc == ZNOAUTH ? " (the node's ACL does not let this client's identity do that: give the "
                        "'auth' of the identity that made it, or use another root)"
                      : "";
    throw backend_error(strategy_name, "ZOO " + std::to_string(rc),
                        std::string(strategy_name) + ": " + what + " on '" + hosts +
                            "' failed: " + zerror(rc) + hint,
                        transient_rc(rc) ? error_kind::transient : error_kind::permanent);
}

// "digest:USER:PASSWORD", split; nullopt for any other form. USER has no ':' (the server splits
// the credentials at the first one).
struct digest_auth {
    std::string user;
    std::string credentials;  // "USER:PASSWORD", what zoo_add_auth takes: the secret
};

std::optional<digest_auth> parse_auth(std::string_view text) {
    constexpr std::string_view scheme = "digest:";
    if (text.substr(0, scheme.size()) != scheme) return std::nullopt;
    const auto credentials = text.substr(scheme.size());
    const auto colon = credentials.find(':');
    if (colon == 0 || colon == std::string_view::npos || colon + 1 == credentials.size() ||
        credentials.find_first_of(std::string_view("\0\n\r", 3)) != std::string_view::npos)
        return std::nullopt;
    return digest_auth{std::string(credentials.substr(0, colon)), std::string(credentials)};
}
constexpr const char* auth_form = "digest:USER:PASSWORD (USER without ':', neither empty)";

// The ACL of every node a store with auth creates: all for the session's authenticated identity
// (ZooKeeper's "auth" id stands for it at create), read for anyone, so that `status` and
// monitoring of other identities can list and read the requests.
struct ACL protected_entries[] = {{0x1f /* ZOO_PERM_ALL */, ZOO_AUTH_IDS},
                                  {0x01 /* ZOO_PERM_READ */, ZOO_ANYONE_ID_UNSAFE}};
struct ACL_vector protected_acl = {2, protected_entries};

// Why `acl` (a node's, as the server has it) does not protect the locks under it from clients
// of other identities than `user`'s digest, or empty when it does: any entry of another id with
// more than read. The digest id is "USER:<hash of the password>"; only the user part is
// compared (a second password for one user name is not told apart) and shown (the hash is not
// for messages).
std::string open_acl_problem(const ACL_vector& acl, const std::string& user) {
    std::string open;
    for (int i = 0; i < acl.count; ++i) {
        const auto& entry = acl.data[i];
        const std::string scheme = entry.id.scheme ? entry.id.scheme : "";
        const std::string id = entry.id.id ? entry.id.id : "";
        if ((entry.perms & ~ZOO_PERM_READ) == 0) continue;
        if (scheme == "digest" && id.compare(0, user.size() + 1, user + ":") == 0) continue;
        const auto shown = scheme == "digest" ? "digest:" + id.substr(0, id.find(':')) + ":..."
                                              : scheme + ":" + id;
        std::string perms;
        for (auto [bit, letter] : {std::pair{ZOO_PERM_CREATE, 'c'},
                                   {ZOO_PERM_DELETE, 'd'},
                                   {ZOO_PERM_READ, 'r'},
                                   {ZOO_PERM_WRITE, 'w'},
                                   {ZOO_PERM_ADMIN, 'a'}})
            if (entry.perms & bit) perms += letter;
        open += (open.empty() ? "" : ", ") + shown + ":" + perms;
    }
    return open;
}

// The C client (3.8) opens its threads' wake-up pipe and its socket (anew at each connection, on
// its I/O thread) without close-on-exec, and gives access to neither descriptor: a command the
// process exec()s would inherit the session's socket and could write into the session, whose
// lock nodes it does not own. They are found among the process's descriptors and marked: the
// pipe when the handle is made, the socket at each connection (the watcher's connected event).
// Until then, another thread's fork and exec would pass them on.

// An open descriptor of this process that is not close-on-exec, and what it is: its
// /proc/self/fd link names a pipe or a socket and its inode ("pipe:[4711]").
struct inheritable_fd {
    int fd;
    std::string_view kind;  // "pipe", "socket", or "" for anything else
    unsigned long long inode;
};

// Read from the links rather than with fstat(): the client's I/O thread may be creating a
// descriptor meanwhile, and ThreadSanitizer takes an fstat() beside a socket() of the same
// number for a data race (the kernel orders the two; reading a link touches no descriptor).
std::vector<inheritable_fd> inheritable_fds() {
    std::vector<inheritable_fd> out;
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) return out;
    while (const dirent* e = ::readdir(dir)) {
        int fd = -1;
        const auto name = std::string_view(e->d_name);
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc() ||
            fd == ::dirfd(dir))
            continue;
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
        char target[64];
        const ssize_t n = ::readlinkat(::dirfd(dir), e->d_name, target, sizeof target - 1);
        if (n <= 0) continue;
        const std::string_view link(target, static_cast<std::size_t>(n));
        inheritable_fd found{fd, "", 0};
        const auto open = link.find(":[");
        if (open != std::string_view::npos && link.back() == ']') {
            const auto digits = link.substr(open + 2, link.size() - open - 3);
            const bool numbered =
                std::from_chars(digits.data(), digits.data() + digits.size(), found.inode).ec ==
                std::errc();
            if (numbered && link.substr(0, open) == "pipe") found.kind = "pipe";
            if (numbered && link.substr(0, open) == "socket") found.kind = "socket";
        }
        out.push_back(found);
    }
    ::closedir(dir);
    return out;
}

void set_close_on_exec(int fd) noexcept {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// Marks the sockets connected to the server `zh` is connected to now (another handle's to that
// server too, which is no harm).
void mark_client_socket(zhandle_t* zh) {
    sockaddr_storage server{};
    socklen_t length = sizeof server;
    if (!zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&server), &length)) return;
    for (const auto& [fd, kind, inode] : inheritable_fds()) {
        if (kind != "socket") continue;
        sockaddr_storage peer{};
        socklen_t peer_length = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 &&
            peer_length == length && std::memcmp(&peer, &server, length) == 0)
            set_close_on_exec(fd);
    }
}

// The C client logs connection failures to stderr by default; errors reach callers as
// exceptions instead.
void quiet_log(const char*) {}

// What a node name says: "<attempt guid>-write-<10-digit sequence>" (or -read-, or -permit-).
struct request {
    std::string name;
    long long seq = -1;
    bool write = true;
};

std::optional<request> parse_request(const char* name) {
    request r;
    r.name = name;
    if (r.name.size() < 11) return std::nullopt;
    const auto dash = r.name.size() - 11;
    if (r.name[dash] != '-') return std::nullopt;
    try {
        r.seq = std::stoll(r.name.substr(dash + 1));
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (dash >= 5 && r.name.compare(dash - 5, 5, "-read") == 0)
        r.write = false;
    else if (dash >= 7 && r.name.compare(dash - 7, 7, "-permit") == 0)
        r.write = true;  // a counting semaphore's (under a parent of its own)
    else if (dash < 6 || r.name.compare(dash - 6, 6, "-write") != 0)
        return std::nullopt;  // not a lock request: left alone
    return r;
}

// A request node's data: who made it, for `locksmith status` (the server keeps its creation time).
std::string owner_data(const std::string& host) {
    return nlohmann::json{{"host", host}, {"pid", current_pid()}}.dump();
}

// "pid 42 on host a since 2025-06-01 12:00:00 UTC (node <name>)", from a request node's data
// and creation time (ms since the epoch, the server's clock); the node name alone for data of
// another form.
std::string describe_owner(const std::string& node, std::string_view data, std::int64_t ctime) {
    const auto owner = nlohmann::json::parse(data, nullptr, false);
    if (!owner.is_object() || !owner.contains("host") || !owner.contains("pid") ||
        !owner["host"].is_string() || !owner["pid"].is_number_integer())
        return "node " + node;
    const std::time_t seconds = ctime / 1000;
    std::tm utc{};
    char since[32] = "?";
    if (gmtime_r(&seconds, &utc)) std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &utc);
    return "pid " + std::to_string(owner["pid"].get<long long>()) + " on host " +
           owner["host"].get<std::string>() + " since " + since + " UTC (node " + node + ")";
}

// One ZooKeeper session (a zhandle_t), shared by the store and the keys that hold through it.
class session {
  public:
    session(const zookeeper_options& o) : hosts_(redact_url(o.hosts)) {
        // The client's two threads start here, with every signal blocked.
        int init_errno = 0;
        std::set<unsigned long long> pipes_before;
        for (const auto& [fd, kind, inode] : inheritable_fds())
            if (kind == "pipe") pipes_before.insert(inode);
        {
            const every_signal_blocked in_the_client_threads;
            errno = 0;
            zh_ = zookeeper_init2(o.hosts.c_str(), &session::on_event,
                                  int(o.session_timeout.count()), nullptr, this, 0, quiet_log);
            init_errno = errno;
        }
        // The wake-up pipe: both ends of a pipe that was not there before.
        std::map<unsigned long long, std::vector<int>> new_pipes;
        for (const auto& [fd, kind, inode] : inheritable_fds())
            if (kind == "pipe" && !pipes_before.count(inode)) new_pipes[inode].push_back(fd);
        for (const auto& [ino, ends] : new_pipes)
            if (ends.size() == 2)
                for (int fd : ends) set_close_on_exec(fd);
        errno = init_errno;
        if (!zh_)
            throw invalid_argument_error(std::string(strategy_name) + ": hosts '" + hosts_ +
                                         "' cannot be used (" + std::strerror(errno) +
                                         "): give host:port[,host:port][/chroot] with hosts "
                                         "that resolve");
        // By default the client's I/O thread resolves the hosts again at every poll, i.e.
        // calls getaddrinfo() several times a second. A fork() while it is inside getaddrinfo()
        // leaves glibc's lock held in the child, whose own first getaddrinfo() (a new session)
        // then hangs forever. Resolve only when a connection is lost.
        zoo_set_servers_resolution_delay(zh_, -1);
        std::unique_lock guard(mutex_);
        const auto until = clock::now() + o.connect_timeout;
        if (!cv_.wait_until(guard, until, [&] { return connected_ || expired_; }) || expired_) {
            guard.unlock();
            zookeeper_close(zh_);
            zh_ = nullptr;
            throw backend_error(strategy_name, "connect",
                                std::string(strategy_name) + ": no ZooKeeper server of '" + hosts_ +
                                    "' answered within " +
                                    std::to_string(o.connect_timeout.count()) +
                                    " ms: is it running and reachable?",
                                error_kind::transient);
        }
        id_ = zoo_client_id(zh_)->client_id;
        timeout_ = milliseconds(zoo_recv_timeout(zh_));
        // Every session, before its first request: a session without it would create nodes no
        // one can protect (the server refuses the auth ACL without an identity) or be refused
        // under ours. The client sends it again by itself at every reconnect of this session.
        guard.unlock();
        if (!o.auth.empty()) add_auth(o.auth, until);
    }
    ~session() {
        // A fork()ed child must not close the parent's session (the close would reach the server).
        if (zh_ && generation_ == fork_generation()) zookeeper_close(zh_);
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // Adds the identity of `auth` (digest:USER:PASSWORD) and waits for the server's answer.
    void add_auth(const std::string& auth, clock::time_point until) {
        const auto parsed = parse_auth(auth);
        if (!parsed)
            throw invalid_argument_error(std::string(strategy_name) + ": auth must be " +
                                         auth_form);
        int rc = zoo_add_auth(zh_, "digest", parsed->credentials.data(),
                              int(parsed->credentials.size()), &session::on_auth, this);
        if (rc == ZOK) {
            std::unique_lock guard(mutex_);
            if (!cv_.wait_until(guard, until, [&] { return auth_rc_.has_value() || expired_; }))
                rc = ZOPERATIONTIMEOUT;
            else
                rc = expired_ ? ZAUTHFAILED : *auth_rc_;
        }
        if (rc != ZOK) {
            zookeeper_close(zh_);
            zh_ = nullptr;
            fail(hosts_, "adding the identity of 'auth'", rc);
        }
    }

    // Runs one call of the C client on the handle; ZSESSIONEXPIRED once abandoned.
    template <class F>
    int call(F&& f) {
        std::shared_lock guard(use_);
        return zh_ ? f(zh_) : ZSESSIONEXPIRED;
    }
    // The hosts fit for messages (redact_url).
    const std::string& hosts() const noexcept { return hosts_; }
    std::int64_t id() const noexcept { return id_; }
    milliseconds timeout() const noexcept { return timeout_; }
    bool usable() const noexcept { return ours() && !expired_.load(); }
    // Made by this process (false in a fork()ed child, which must leave it alone).
    bool ours() const noexcept { return generation_ == fork_generation(); }

    // Looks `path` up; with `watch`, the node's next change or removal wakes the loss
    // descriptor registered for it (watch_loss). The C client keeps one such watch per path.
    int exists(const std::string& path, struct Stat& stat, bool watch) {
        return call([&](zhandle_t* zh) {
            return watch ? zoo_wexists(zh, path.c_str(), &session::on_event, this, &stat)
                         : zoo_exists(zh, path.c_str(), 0, &stat);
        });
    }

    // Wakes the eventfd `fd` whenever the grant whose node is `path` may have ended: the
    // connection is no longer up (expired, or cut off: the session may expire), or the node
    // changed or went (with exists(path, .., true)). Woken at once when not connected now.
    void watch_loss(const std::string& path, int fd) {
        std::lock_guard guard(mutex_);
        loss_watches_[path] = fd;
        if (!connected_ || expired_) wake(fd);
    }
    void unwatch_loss(const std::string& path) noexcept {
        if (!ours()) return;  // the parent's: its mutex may have been held at the fork
        std::lock_guard guard(mutex_);
        loss_watches_.erase(path);
    }

    // Gives the session up after a disconnect as long as its timeout: the server has expired it
    // or will, so its locks count as lost. Its nodes go when the last key lets go of it (the
    // close), or when the server expires it.
    void abandon() noexcept {
        expired_ = true;
        // Closed now, not when the last key lets go: a client that reconnected would keep the
        // session, and with it the nodes, alive.
        std::unique_lock guard(use_);
        if (zh_ && generation_ == fork_generation()) zookeeper_close(zh_);
        zh_ = nullptr;
    }

    // Waits until the client is connected (true) or the session expired or `until` passed.
    bool wait_connected(clock::time_point until) {
        std::unique_lock guard(mutex_);
        cv_.wait_until(guard, until, [&] { return connected_ || expired_; });
        return connected_ && !expired_;
    }

    // Waits until the node `path` is gone or changed (true) or `until` passed (false). Returns
    // early (true) when the connection state changes, so that the caller looks again.
    bool wait_deleted(const std::string& path, clock::time_point until) {
        return wait_changed({path}, until);
    }

    // The same for the first of several nodes (a permit's first waiter watches every holder).
    bool wait_changed(const std::vector<std::string>& paths, clock::time_point until) {
        std::unique_lock guard(mutex_);
        std::vector<std::uint64_t> seen;
        for (const auto& path : paths) {
            auto& w = watches_[path];
            ++w.waiters;
            seen.push_back(w.events);
        }
        const auto state_seen = state_events_;
        guard.unlock();
        // getData, not exists: on a node already gone it leaves no watch behind (Curator).
        int rc = ZOK;
        for (const auto& path : paths) {
            char buf[1];
            int len = sizeof buf;
            struct Stat stat;
            rc = call([&](zhandle_t* zh) {
                return zoo_wget(zh, path.c_str(), &session::on_event, this, buf, &len, &stat);
            });
            if (rc != ZOK) break;
        }
        guard.lock();
        bool changed = true;
        if (rc == ZOK)
            changed = cv_.wait_until(guard, until, [&] {
                for (std::size_t i = 0; i < paths.size(); ++i)
                    if (watches_[paths[i]].events != seen[i]) return true;
                return state_events_ != state_seen || expired_;
            });
        for (const auto& path : paths)
            if (--watches_[path].waiters == 0) watches_.erase(path);
        if (rc != ZOK && rc != ZNONODE && !transient_rc(rc)) {
            guard.unlock();
            fail(hosts_, "watching '" + paths.front() + "'", rc);
        }
        return changed;
    }

  private:
    static void on_auth(int rc, const void* context) {
        auto* self = static_cast<session*>(const_cast<void*>(context));
        std::lock_guard guard(self->mutex_);
        self->auth_rc_ = rc;
        self->cv_.notify_all();
    }

    static void on_event(zhandle_t* zh, int type, int state, const char* path, void* context) {
        auto* self = static_cast<session*>(context);
        std::lock_guard guard(self->mutex_);
        if (type == ZOO_SESSION_EVENT) {
            if (state == ZOO_CONNECTED_STATE) mark_client_socket(zh);
            self->connected_ = state == ZOO_CONNECTED_STATE;
            if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
                self->expired_ = true;
            ++self->state_events_;
            if (!self->connected_)
                for (const auto& [node, fd] : self->loss_watches_) wake(fd);
        } else if (path) {
            auto w = self->watches_.find(path);
            if (w != self->watches_.end()) ++w->second.events;
            auto l = self->loss_watches_.find(path);
            if (l != self->loss_watches_.end()) wake(l->second);
        }
        self->cv_.notify_all();
    }

    static void wake(int fd) noexcept {
        const std::uint64_t one = 1;
        ssize_t ignored = ::write(fd, &one, sizeof one);  // a full counter is awake already
        (void)ignored;
    }

    struct watch {
        std::uint64_t events = 0;
        int waiters = 0;
    };

    const std::string hosts_;
    const std::uint64_t generation_ = fork_generation();
    zhandle_t* zh_ = nullptr;
    std::shared_mutex use_;
    std::int64_t id_ = 0;
    milliseconds timeout_{0};
    std::mutex mutex_;
    std::condition_variable cv_;
    bool connected_ = false;
    std::atomic<bool> expired_{false};
    std::optional<int> auth_rc_;  // the server's answer to add_auth
    std::uint64_t state_events_ = 0;
    std::map<std::string, watch, std::less<>> watches_;
    std::map<std::string, int, std::less<>> loss_watches_;  // node -> its grant's eventfd
};

// A key's grant: its node, in the session that created it.
struct grant : key_local_state {
    grant() = default;
    grant(const grant&) = delete;
    grant& operator=(const grant&) = delete;
    ~grant() override {
        if (loss_fd < 0) return;
        owner->unwatch_loss(node);
        ::close(loss_fd);
    }
    std::shared_ptr<session> owner;
    std::string node;  // full path
    lock_mode mode = lock_mode::exclusive;
    // Readable when the grant may have ended (store::loss_fd); made on first request.
    int loss_fd = -1;
};

class zookeeper_store final : public store {
  public:
    explicit zookeeper_store(const zookeeper_options& options)
        : store(strategy_name, zookeeper_capabilities), options_(options) {
        if (!options_.auth.empty()) {
            const auto parsed = parse_auth(options_.auth);
            if (!parsed)
                throw invalid_argument_error(std::string(strategy_name) + ": auth must be " +
                                             auth_form);
            user_ = parsed->user;
        }
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        host_ = host;
        current();
    }

  protected:
    bool do_try_acquire(key& k, lock_mode mode, milliseconds) override {
        if (k.limit() != 0) return acquire_permit(k, std::nullopt);
        return acquire(k, mode, std::nullopt);
    }

    bool do_wait_acquire(key& k, lock_mode mode, milliseconds, deadline until) override {
        if (k.limit() != 0) return acquire_permit(k, until);
        return acquire(k, mode, until);
    }

    void do_release(key& k) override {
        // remove() leaves the node of an expired session, or of the parent's, alone.
        auto* held = k.local_state_of<grant>(instance_id());
        if (!held) return;
        auto owner = held->owner;
        const auto node = held->node;
        k.set_local_state(instance_id(), nullptr);
        remove(*owner, node);
    }

    bool do_holds(const key& k) override {
        auto* held = k.local_state_of<grant>(instance_id());
        if (!held || !held->owner->usable()) return false;
        auto& s = *held->owner;
        // The news on the loss descriptor is taken in by the answer below, which watches the
        // node again (its watch fires once).
        const bool watched = held->loss_fd >= 0;
        if (watched) {
            std::uint64_t news;
            ssize_t ignored = ::read(held->loss_fd, &news, sizeof news);
            (void)ignored;
        }
        // The server's word: the node is there and belongs to this session. A disconnect is
        // waited out for at most the session timeout, after which the session is as good as
        // expired (Curator's LOST).
        const auto until = clock::now() + s.timeout();
        for (;;) {
            struct Stat stat;
            const int rc = s.exists(held->node, stat, watched);
            if (rc == ZOK) return stat.ephemeralOwner == s.id();
            // ZINVALIDSTATE: the client has just found its session expired (as a holder does on
            // waking from a pause past the timeout), and the session's ephemeral node went with it.
            if (rc == ZNONODE || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) return false;
            if (!transient_rc(rc)) fail(s.hosts(), "looking up '" + held->node + "'", rc);
            if (!s.wait_connected(until)) {
                s.abandon();
                return false;
            }
        }
    }

    // An eventfd per grant, woken by the session's events: the ZooKeeper client tells of a
    // disconnect or an expired session, and of the node's removal, without being asked.
    std::optional<int> do_loss_fd(const key& k) override {
        auto* held = k.local_state_of<grant>(instance_id());
        if (!held || !held->owner->usable()) return -1;
        if (held->loss_fd >= 0) return held->loss_fd;
        const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            throw backend_error(
                strategy_name, "eventfd",
                std::string(strategy_name) +
                    ": cannot watch a lock for its loss: eventfd: " + std::strerror(errno),
                errno_kind(errno));
        held->loss_fd = fd;
        auto& s = *held->owner;
        s.watch_loss(held->node, fd);
        struct Stat stat;
        const int rc = s.exists(held->node, stat, true);
        // Gone already, another session's, or unknown for now: holds() decides.
        if (rc != ZOK || stat.ephemeralOwner != s.id()) {
            const std::uint64_t one = 1;
            ssize_t ignored = ::write(fd, &one, sizeof one);
            (void)ignored;
        }
        return fd;
    }

    lock_status do_status(std::string_view resource) override {
        auto s = current();
        const auto parent = zookeeper_lock_parent(options_.root, resource);
        // A name whose lock is free and that keeps a limit: a semaphore's permits.
        const auto limit = kept_limit(*s, zookeeper_permit_limit_node(options_.root, resource));
        if (limit && requests(*s, parent, clock::now() + s->timeout()).empty()) {
            const auto held = requests(*s, zookeeper_permit_parent(options_.root, resource),
                                       clock::now() + s->timeout())
                                  .size();
            lock_status st;
            st.limit = *limit;
            st.permits_held = std::uint32_t(std::min<std::size_t>(held, *limit));
            st.held = *st.permits_held < *limit ? lock_status::state::free
                                                : lock_status::state::held_exclusive;
            if (held > *limit) st.holders.push_back(std::to_string(held - *limit) + " waiting");
            return st;
        }
        // A holder that lets go between the listing and the reading of its node: list again.
        for (int attempt = 0;; ++attempt) {
            lock_status st;
            st.held = lock_status::state::free;
            bool changed = false;
            for (const auto& r : requests(*s, parent, clock::now() + s->timeout())) {
                if (r.write && !st.holders.empty()) break;
                const auto path = parent + "/" + r.name;
                char data[512];
                int len = sizeof data;
                struct Stat stat;
                const int rc = s->call(
                    [&](zhandle_t* zh) { return zoo_get(zh, path.c_str(), 0, data, &len, &stat); });
                if (rc == ZNONODE && attempt < 3) {
                    changed = true;
                    break;
                }
                if (rc != ZOK && rc != ZNONODE) fail(s->hosts(), "reading '" + path + "'", rc);
                st.held =
                    r.write ? lock_status::state::held_exclusive : lock_status::state::held_shared;
                st.holders.push_back(
                    rc == ZOK ? describe_owner(r.name, std::string_view(data, std::max(len, 0)),
                                               stat.ctime)
                              : "node " + r.name);
                if (r.write) break;
            }
            if (!changed) return st;
        }
    }

  private:
    // The store's session, started afresh when the last one expired (or in a forked child).
    std::shared_ptr<session> current() {
        std::lock_guard guard(mutex_);
        if (!session_ || !session_->usable()) {
            session_.reset();
            session_ = std::make_shared<session>(options_);
            make_root(*session_);
        }
        return session_;
    }

    void make_root(session& s) {
        // Every node of the root path, persistent; "/" is the chroot when hosts names one.
        struct Stat stat;
        int rc = s.call([&](zhandle_t* zh) { return zoo_exists(zh, "/", 0, &stat); });
        if (rc == ZNONODE)
            throw backend_error(strategy_name, "ZOO " + std::to_string(rc),
                                std::string(strategy_name) + ": the chroot of hosts '" + s.hosts() +
                                    "' does not exist: create it (zkCli.sh create <path>) or "
                                    "drop it from hosts",
                                error_kind::permanent);
        if (rc != ZOK) fail(s.hosts(), "looking up the chroot", rc);
        for (std::size_t slash = 1; slash != std::string::npos;) {
            slash = options_.root.find('/', slash + 1);
            const auto path = options_.root.substr(0, slash);
            rc = s.call([&](zhandle_t* zh) {
                return zoo_create(zh, path.c_str(), nullptr, -1, node_acl(), ZOO_PERSISTENT,
                                  nullptr, 0);
            });
            if (rc != ZOK && rc != ZNODEEXISTS) fail(s.hosts(), "creating root '" + path + "'", rc);
        }
        if (user_.empty()) return;
        check_acl(s, options_.root, "the root");
        // A child only this identity can delete keeps the root from being emptied, deleted and
        // made again, open, by another identity (deleting needs only the permission of the
        // root's parent, often "/", open to all), behind the check above and the parents that
        // checked_parents_ remembers.
        const auto guard = options_.root + "/" + root_guard;
        rc = s.call([&](zhandle_t* zh) {
            return zoo_create(zh, guard.c_str(), nullptr, -1, node_acl(), ZOO_PERSISTENT, nullptr,
                              0);
        });
        if (rc != ZOK && rc != ZNODEEXISTS) fail(s.hosts(), "creating '" + guard + "'", rc);
    }

    // Throws when the ACL of `path` lets an identity other than ours change what is under it
    // (open_acl_problem); `what` names it ("the root").
    void check_acl(session& s, const std::string& path, const std::string& what) {
        ACL_vector acl{};
        struct Stat stat;
        const int rc =
            s.call([&](zhandle_t* zh) { return zoo_get_acl(zh, path.c_str(), &acl, &stat); });
        if (rc == ZNONODE) return;  // gone: made again by create(), with our ACL
        if (rc != ZOK) fail(s.hosts(), "reading the ACL of '" + path + "'", rc);
        const auto open = open_acl_problem(acl, user_);
        deallocate_ACL_vector(&acl);
        if (open.empty()) return;
        throw backend_error(
            strategy_name, "ZOO acl",
            std::string(strategy_name) + ": " + what + " '" + path + "' on '" + s.hosts() +
                "' lets clients of other identities than '" + user_ +
                "' change or delete the lock nodes under it (" + open +
                "): made without auth (by a locksmith without it, or another client), it "
                "protects no lock. Set its ACL and its children's (zkCli.sh: addauth digest " +
                user_ + ":PASSWORD; setAcl -R " + path +
                " auth::cdrwa,world:anyone:r), delete it, or use another root",
            error_kind::permanent);
    }

    // k's grant, for an acquire: null when k has none (a grant of the parent of a fork()ed
    // child is not the child's: dropped). An expired session took the lock with it, and the
    // owner must hear of that before it is granted again: acquire_error, and the grant is kept
    // until release() (named_lock reports the loss, then releases).
    grant* held_by(key& k) {
        auto* held = k.local_state_of<grant>(instance_id());
        if (!held) return nullptr;
        if (!held->owner->ours()) {
            k.set_local_state(instance_id(), nullptr);
            return nullptr;
        }
        if (!held->owner->usable())
            throw acquire_error(std::string(strategy_name) + ": lock '" + k.resource() +
                                "' was lost: its ZooKeeper session expired; release it before "
                                "acquiring it again");
        return held;
    }

    // The requests under `parent`, by sequence. Waits out a disconnect until `until`.
    std::vector<request> requests(session& s, const std::string& parent, clock::time_point until) {
        for (;;) {
            String_vector children{};
            const int rc = s.call(
                [&](zhandle_t* zh) { return zoo_get_children(zh, parent.c_str(), 0, &children); });
            if (rc == ZOK) {
                std::vector<request> all;
                for (int i = 0; i < children.count; ++i)
                    if (auto r = parse_request(children.data[i])) all.push_back(std::move(*r));
                deallocate_String_vector(&children);
                std::sort(all.begin(), all.end(),
                          [](const request& a, const request& b) { return a.seq < b.seq; });
                return all;
            }
            if (rc == ZNONODE) return {};
            if (rc != ZCONNECTIONLOSS || !s.wait_connected(until))
                fail(s.hosts(), "listing '" + parent + "'", rc);
        }
    }

    // Creates the request node "<parent>/<guid>-<write|read>-<seq>": its path and czxid.
    std::pair<std::string, std::int64_t> create(session& s, const std::string& parent,
                                                std::string_view kind) {
        const auto guid = random_token();
        const auto prefix = parent + "/" + guid + std::string(kind);
        const auto data = owner_data(host_);
        const auto until = clock::now() + s.timeout();
        for (int attempt = 0;; ++attempt) {
            std::vector<char> path(prefix.size() + 16);
            struct Stat stat;
            int rc = s.call([&](zhandle_t* zh) {
                return zoo_create2(zh, prefix.c_str(), data.data(), int(data.size()), node_acl(),
                                   ZOO_EPHEMERAL_SEQUENTIAL, path.data(), int(path.size()), &stat);
            });
            if (rc == ZOK) return {path.data(), stat.czxid};
            if (rc == ZNONODE && attempt < 8) {
                // The parent is missing (first use, or the server removed the empty container).
                rc = s.call([&](zhandle_t* zh) {
                    return zoo_create(zh, parent.c_str(), nullptr, -1, node_acl(), ZOO_CONTAINER,
                                      nullptr, 0);
                });
                if (rc == ZNONODE)
                    make_root(s);  // someone removed the root
                else if (rc != ZOK && rc != ZNODEEXISTS)
                    fail(s.hosts(), "creating '" + parent + "'", rc);
                continue;
            }
            if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
                fail(s.hosts(), "creating a node under '" + parent + "'", rc);
            // The create may have been applied with its reply lost: find the node by its guid
            // once connected again (Curator's protection mode), else create it again.
            if (!s.wait_connected(until))
                fail(s.hosts(), "creating a node under '" + parent + "'", rc);
            for (const auto& r : requests(s, parent, until))
                if (r.name.compare(0, guid.size(), guid) == 0) {
                    const auto found = parent + "/" + r.name;
                    if (s.call([&](zhandle_t* zh) {
                            return zoo_exists(zh, found.c_str(), 0, &stat);
                        }) == ZOK)
                        return {found, stat.czxid};
                }
        }
    }

    // Deletes `node`; a disconnect is waited out for at most the session timeout, after which the
    // session is abandoned (as holds() does: Curator's LOST), so that the server expires it and
    // the node with it. Kept, it would come back with a restarted server (which keeps sessions in
    // its log) and keep the node: a grant whose release failed in the outage, or a request whose
    // wait ended in it, would block the name for as long as this store lives.
    void remove(session& s, const std::string& node) {
        if (!s.usable()) return;
        const auto until = clock::now() + s.timeout();
        for (;;) {
            const int rc = s.call([&](zhandle_t* zh) { return zoo_delete(zh, node.c_str(), -1); });
            if (rc == ZOK || rc == ZNONODE || rc == ZSESSIONEXPIRED) return;
            if (!transient_rc(rc)) fail(s.hosts(), "deleting '" + node + "'", rc);
            if (!s.wait_connected(until)) {
                s.abandon();  // the server expires the session, and the node with it
                fail(s.hosts(), "deleting '" + node + "'", rc);
            }
        }
    }

    bool acquire(key& k, lock_mode mode, std::optional<deadline> until) {
        auto* held = held_by(k);
        if (held && held->mode == mode) return true;
        auto s = held ? held->owner : current();
        const auto parent = zookeeper_lock_parent(options_.root, k.resource());
        const auto [node, czxid] =
            create(*s, parent, mode == lock_mode::exclusive ? "-write-" : "-read-");
        const auto own = node.substr(parent.size() + 1);
        const std::string kept = held ? held->node.substr(parent.size() + 1) : std::string();
        try {
            // After the create: the parent exists then (made by create() with our ACL, or
            // before, by anyone). A refusal removes the request (catch below).
            check_parent_once(*s, parent);
            for (;;) {
                const auto now = clock::now();
                const auto list_until = until ? std::max(*until, now) : now + s->timeout();
                const auto all = requests(*s, parent, list_until);
                auto self = std::find_if(all.begin(), all.end(),
                                         [&](const request& r) { return r.name == own; });
                if (self == all.end())
                    throw backend_error(strategy_name, "ZOO " + std::to_string(ZSESSIONEXPIRED),
                                        std::string(strategy_name) + ": the request for lock '" +
                                            k.resource() + "' vanished from '" + s->hosts() +
                                            "' (the session expired): try again",
                                        error_kind::transient);
                // The node to wait for: the nearest earlier node of another request (a
                // writer waits for every one, a reader only for writers).
                const request* blocker = nullptr;
                const request* kept_read = nullptr;
                for (auto r = all.begin(); r != self; ++r) {
                    if (r->name == kept) {
                        kept_read = &*r;
                        continue;
                    }
                    if (mode == lock_mode::exclusive || r->write) blocker = &*r;
                    if (kept_read && r->write && mode == lock_mode::exclusive)
                        throw acquire_error(
                            std::string(strategy_name) + ": promoting lock '" + k.resource() +
                            "' would deadlock: a writer queued behind this read lock waits for "
                            "it; the read lock is kept: release it and retry");
                }
                if (!blocker) break;
                if (!until || clock::now() >= *until) {
                    remove(*s, node);
                    return false;
                }
                s->wait_deleted(parent + "/" + blocker->name, *until);
            }
        } catch (...) {
            try {
                remove(*s, node);
            } catch (const std::exception&) {
                // The node goes with the session at the latest.
            }
            throw;
        }
        if (held) remove(*s, held->node);  // the other mode's node, after the new grant
        auto state = std::make_unique<grant>();
        state->owner = s;
        state->node = node;
        state->mode = mode;
        k.set_local_state(instance_id(), std::move(state));
        k.set_fencing_token(std::uint64_t(czxid));
        return true;
    }

    // --- counting semaphores ---
    // A permit is an ephemeral sequential node `<token>-permit-<seq>` under the container
    // `<root>/<hash>.permits`; the first `limit` by sequence hold, the others wait. The limit is
    // the data of the persistent node `<root>/<hash>.limit`, made by the name's first user.

    // The limit `node` keeps; nullopt when there is none. Throws for data that is not a limit.
    std::optional<std::uint32_t> kept_limit(session& s, const std::string& node) {
        char data[32];
        int len = 0;
        struct Stat stat;
        const auto until = clock::now() + s.timeout();
        for (;;) {
            len = sizeof data;
            const int rc = s.call(
                [&](zhandle_t* zh) { return zoo_get(zh, node.c_str(), 0, data, &len, &stat); });
            if (rc == ZNONODE) return std::nullopt;
            if (rc == ZOK) break;
            if (!transient_rc(rc) || !s.wait_connected(until))
                fail(s.hosts(), "reading '" + node + "'", rc);
        }
        std::uint32_t kept = 0;
        const std::string_view text(data, std::size_t(std::max(len, 0)));
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), kept);
        if (ec != std::errc() || end != text.data() + text.size() || kept == 0 ||
            kept > max_permits || stat.dataLength > int(sizeof data))
            throw backend_error(strategy_name, "foreign",
                                std::string(strategy_name) + ": the node '" + node + "' on '" +
                                    s.hosts() + "' holds data that is not a semaphore limit (1.." +
                                    std::to_string(max_permits) +
                                    "): another program's node? Delete it (when no locksmith "
                                    "process uses the name) or choose another root",
                                error_kind::permanent);
        return kept;
    }

    // Checks k's limit against the one kept with the name, keeping k's when there is none.
    void check_limit(session& s, const key& k) {
        const auto node = zookeeper_permit_limit_node(options_.root, k.resource());
        const auto text = std::to_string(k.limit());
        for (int attempt = 0;; ++attempt) {
            if (const auto kept = kept_limit(s, node)) {
                if (*kept == k.limit()) return;
                throw invalid_argument_error(
                    std::string(strategy_name) + ": semaphore '" + k.resource() +
                    "' has a limit of " + std::to_string(*kept) + ", kept in '" + node +
                    "'; this owner asks for " + text + ". One name has one limit: ask for " +
                    std::to_string(*kept) +
                    ", or delete that node (zkCli.sh delete) once no "
                    "permit is held");
            }
            const int rc = s.call([&](zhandle_t* zh) {
                return zoo_create(zh, node.c_str(), text.data(), int(text.size()), node_acl(),
                                  ZOO_PERSISTENT, nullptr, 0);
            });
            if (rc == ZOK) return;
            if (rc == ZNONODE && attempt < 3) {
                make_root(s);  // someone removed the root
                continue;
            }
            // Made by another owner meanwhile: compare with it.
            if (rc != ZNODEEXISTS || attempt >= 3) fail(s.hosts(), "creating '" + node + "'", rc);
        }
    }

    // Takes one of the name's permits: queues a node, holds when it is among the first `limit`.
    // A waiter watches the node just before its own (no herd), except the first waiter (exactly
    // `limit` nodes before it), which watches them all: any holder's release lets it in.
    bool acquire_permit(key& k, std::optional<deadline> until) {
        if (held_by(k)) return true;
        if (k.limit() > max_permits)
            throw invalid_argument_error(std::string(strategy_name) + ": a limit of " +
                                         std::to_string(k.limit()) + " for '" + k.resource() +
                                         "' exceeds " + std::to_string(max_permits) +
                                         " (the first waiter watches every holder's node)");
        auto s = current();
        check_limit(*s, k);
        const auto queue = zookeeper_permit_parent(options_.root, k.resource());
        const auto [node, czxid] = create(*s, queue, "-permit-");
        const auto own = node.substr(queue.size() + 1);
        try {
            check_parent_once(*s, queue);
            for (;;) {
                const auto now = clock::now();
                const auto list_until = until ? std::max(*until, now) : now + s->timeout();
                const auto all = requests(*s, queue, list_until);
                const auto self = std::find_if(all.begin(), all.end(),
                                               [&](const request& r) { return r.name == own; });
                if (self == all.end())
                    throw backend_error(strategy_name, "ZOO " + std::to_string(ZNONODE),
                                        std::string(strategy_name) + ": the permit request for '" +
                                            k.resource() + "' vanished from '" + s->hosts() +
                                            "' (the session expired, or another client deleted "
                                            "it): try again",
                                        error_kind::transient);
                const auto place = std::size_t(self - all.begin());
                if (place < k.limit()) {
                    // A waiter behind ours may watch only our node: it may be the first waiter
                    // now, which must watch every holder. Nobody can be behind a node that
                    // was last in the listing that found it holding.
                    if (self + 1 != all.end()) announce_grant(*s, node);
                    break;
                }
                if (!until || clock::now() >= *until) {
                    remove(*s, node);
                    return false;
                }
                std::vector<std::string> watched;
                if (place == k.limit())
                    for (auto r = all.begin(); r != self; ++r)
                        watched.push_back(queue + "/" + r->name);
                else
                    watched.push_back(queue + "/" + (self - 1)->name);
                s->wait_changed(watched, *until);
            }
        } catch (...) {
            try {
                remove(*s, node);
            } catch (const std::exception&) {
                // The node goes with the session at the latest.
            }
            throw;
        }
        auto state = std::make_unique<grant>();
        state->owner = s;
        state->node = node;
        k.set_local_state(instance_id(), std::move(state));
        k.set_fencing_token(std::uint64_t(czxid));
        return true;
    }

    // Rewrites a granted permit's node (same data): the data watch of the waiter behind it
    // fires.
    void announce_grant(session& s, const std::string& node) {
        const auto data = owner_data(host_);
        const int rc = s.call([&](zhandle_t* zh) {
            return zoo_set(zh, node.c_str(), data.data(), int(data.size()), -1);
        });
        if (rc != ZOK) fail(s.hosts(), "announcing the grant of '" + node + "'", rc);
    }

    // The ACL of every node this store creates: open without auth.
    const ACL_vector* node_acl() const noexcept {
        return user_.empty() ? &ZOO_OPEN_ACL_UNSAFE : &protected_acl;
    }

    // With auth, checks the ACL of `parent` the first time this store uses it: a parent under
    // the checked root can be made only by this identity, with its ACL, so one check per path
    // is enough; what it catches is a parent left open from before the root was protected.
    void check_parent_once(session& s, const std::string& parent) {
        if (user_.empty()) return;
        {
            std::lock_guard guard(mutex_);
            if (checked_parents_.count(parent)) return;
        }
        check_acl(s, parent, "the parent node");
        std::lock_guard guard(mutex_);
        if (checked_parents_.size() >= 100000) checked_parents_.clear();  // bounded memory
        checked_parents_.insert(parent);
    }

    static constexpr const char* root_guard = "locksmith-acl-guard";
    const zookeeper_options options_;
    std::string user_;  // the digest user of options_.auth; empty without auth
    std::set<std::string, std::less<>> checked_parents_;  // guarded by mutex_
    std::string host_;  // this machine's name, in every request's data
    std::mutex mutex_;
    std::shared_ptr<session> session_;
};

bool valid_path(const std::string& p) {
    if (p.size() < 2 || p.front() != '/' || p.back() == '/') return false;
    for (std::size_t begin = 1; begin <= p.size();) {
        auto end = p.find('/', begin);
        if (end == std::string::npos) end = p.size();
        const auto part = p.substr(begin, end - begin);
        if (part.empty() || part == "." || part == ".." ||
            part.find_first_of(std::string("\0", 1)) != std::string::npos)
            return false;
        begin = end + 1;
    }
    return true;
}

}  // namespace

std::string zookeeper_lock_parent(const std::string& root, std::string_view name) {
    return root + "/" + stable_name_hash(name).hex();
}

std::string zookeeper_permit_parent(const std::string& root, std::string_view name) {
    return root + "/" + stable_name_hash(name).hex() + ".permits";
}

std::string zookeeper_permit_limit_node(const std::string& root, std::string_view name) {
    return root + "/" + stable_name_hash(name).hex() + ".limit";
}

zookeeper_options zookeeper_options::from_json(const nlohmann::json& options) {
    options_reader r(options);
    zookeeper_options o;
    auto hosts = r.string("hosts");
    if (!hosts) throw config_error("config.missing", "/hosts", "option 'hosts' is required");
    const auto chroot = hosts->find('/');
    // Host names and ports only before the chroot: "user:password@host" or a DSN of another kind
    // is not a connect string (and would be printed in every message about the session).
    if (hosts->empty() || chroot == 0 || hosts->find_first_of(" \t\n") != std::string::npos ||
        hosts->substr(0, chroot).find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:,[]%") !=
            std::string::npos ||
        (chroot != std::string::npos && !valid_path(hosts->substr(chroot))))
        throw config_error("config.value", "/hosts",
                           "option 'hosts' must be host:port[,host:port...][/chroot], got '" +
                               redact_url(*hosts) + "'");
    o.hosts = *hosts;
    if (auto v = r.integer("session_timeout_ms", 1000, 600000))
        o.session_timeout = milliseconds(*v);
    if (auto v = r.integer("connect_timeout_ms", 1, 3600000)) o.connect_timeout = milliseconds(*v);
    if (auto root = r.string("root")) {
        if (!valid_path(*root))
            throw config_error("config.value", "/root",
                               "option 'root' must be an absolute znode path such as "
                               "/locksmith (no trailing '/', no empty, '.' or '..' parts), got '" +
                                   *root + "'");
        o.root = *root;
    }
    if (auto auth = r.secret("auth", o.auth_from)) {
        // The value is a secret: the message names the form, never what was given.
        if (!parse_auth(*auth))
            throw config_error("config.value", "/auth",
                               std::string("option 'auth' must be ") + auth_form);
        o.auth = *auth;
    }
    r.finish();
    return o;
}

std::shared_ptr<store> make_zookeeper_store(const zookeeper_options& options) {
    if (options.session_timeout <= milliseconds(0) || options.connect_timeout <= milliseconds(0))
        throw invalid_argument_error("zookeeper: timeouts must be positive");
    if (!valid_path(options.root))
        throw invalid_argument_error("zookeeper: root must be an absolute znode path, got '" +
                                     options.root + "'");
    if (!options.auth.empty() && !options.auth_from.empty())
        throw invalid_argument_error("zookeeper: give auth or auth_from, not both");
    if (options.auth_from.empty()) return std::make_shared<zookeeper_store>(options);
    auto with_auth = options;
    with_auth.auth = resolve_secret({}, options.auth_from, "zookeeper", "auth");
    if (!parse_auth(with_auth.auth))
        throw invalid_argument_error("zookeeper option " +
                                     (options.auth_from.file.empty()
                                          ? "'auth_env': " + options.auth_from.env
                                          : "'auth_file': '" + options.auth_from.file + "'") +
                                     " must hold " + auth_form);
    return std::make_shared<zookeeper_store>(with_auth);
}

std::vector<std::string> zookeeper_options::backends() const {
    // "host:port,host:port[/chroot]": one ensemble whatever the chroot.
    std::vector<std::string> ids;
    for (const auto& server : split_list(hosts.substr(0, hosts.find('/')))) {
        const auto colon = server.rfind(':');
        int port = 2181;
        std::string host = server;
        if (colon != std::string::npos && server.find(']', colon) == std::string::npos) {
            host = server.substr(0, colon);
            const auto digits = server.substr(colon + 1);
            const auto [end, ec] =
                std::from_chars(digits.data(), digits.data() + digits.size(), port);
            if (ec != std::errc() || end != digits.data() + digits.size()) port = 0;
        }
        if (!host.empty())
            for (auto& id : server_identities(host, port)) ids.push_back(std::move(id));
    }
    return ids;
}

}  // namespace locksmith::strategies

// The module's registration (include/locksmith/author/plugin.hpp): the metadata from
// zookeeper_descriptor.cpp with the validator and the factory.
namespace {
void add_zookeeper(locksmith::plugin_registrar& registrar) {
    using namespace locksmith::strategies;
    auto d = zookeeper_metadata();
    locksmith::set_factory<zookeeper_options>(d, &make_zookeeper_store);
    registrar.add(d);
}
}  // namespace

LOCKSMITH_DEFINE_PLUGIN(zookeeper, "zookeeper", locksmith::version, add_zookeeper)
