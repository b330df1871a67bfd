// SPDX-License-Identifier: MIT
// The hostile-surroundings suite (issue 23): what every strategy must survive whatever the
// surroundings, run for every entry of strategies_under_test() by what it uses.
//
// A strategy that talks to a server (its options name an endpoint on 127.0.0.1) is pointed at a
// server that misbehaves on purpose (support/hostile_server.hpp: never answers, trickles,
// answers nonsense, nests JSON 200,000 levels deep, announces a 1 TiB body, hangs up). A strategy
// that speaks TLS (its options name a ca_file) meets each behaviour twice: during the handshake
// (a server that is not TLS at all) and after it (a server with a certificate the client
// trusts, services.sh's). For each behaviour a forked process asks for the lock, and must
//   - not be granted it (no server said yes),
//   - not die of a signal (a crash would lose the caller's command status and its lock),
//   - give up in bounded time: a non-blocking attempt within the strategy's own connect and
//     command timeouts, a bounded wait by its deadline (plus the same slack);
// and a refusal that throws carries a message. A strategy that counts (`counting`) meets every
// behaviour with a permit as well. A strategy that speaks memcached meets, besides, servers that
// pass its connection check and then misbehave in the meta protocol's terms
// (support/hostile_server.hpp: hostile_memcached), and one that grants and then hangs up while
// the lock is held. A strategy whose server can end a session while a lock is held (the entry's
// end_session) must tell the holder at once. Every behaviour runs in parallel, each against its
// own server, so that a case costs the longest of them, not their sum.
//
// A strategy whose descriptor says its locks live in a directory (backends: "dir:PATH") meets
// that directory as another local user left it: made by that user, open to every user, or a
// symlink to a folder of ours; the store must refuse it and write nothing there. One whose
// locks live in a POSIX shared-memory object ("shm:NAME") meets that object made by another
// user, opened to everyone, or replaced by a symlink or a hard link to a file of ours.
//
// A new strategy gets these cases by its entries (locksmith_add_strategy's TESTS); plugins get
// the exec case and, when remote, hostile_server_grants_nothing through the conformance kit.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/conformance.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/registry.hpp>

#include "support/child_process.hpp"
#include "support/full_tmpfs.hpp"
#include "support/hostile_server.hpp"
#include "support/permit_helpers.hpp"
#include "support/skip_report.hpp"
#include "support/strategies_under_test.hpp"
#include "support/suite_helpers.hpp"
#include "support/test_environment.hpp"

using namespace locksmith;
using namespace locksmith::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// The longest any strategy's default connect + command timeouts add up to (sql and pg_advisory:
// 2 s + 5 s), plus scheduling slack on a loaded 2-CPU machine.
constexpr auto attempt_bound = 9s;
constexpr auto bounded_wait = 1500ms;

// The entry's options with each 127.0.0.1 endpoint replaced by the address `replace` gives for
// it (one per distinct endpoint, so that `combined`'s members stay distinct members); nullopt
// when the options name none (a local strategy).
std::optional<nlohmann::json> pointed_at(
    const strategy_under_test& e, const std::function<std::string(const std::string&)>& replace) {
    static const std::regex endpoint(R"(127\.0\.0\.1:[0-9]+)");
    const std::string text = e.options->dump();
    std::string out;
    auto from = text.cbegin();
    for (std::sregex_iterator it(text.begin(), text.end(), endpoint), end; it != end; ++it) {
        out.append(from, (*it)[0].first);
        out += replace(it->str());
        from = (*it)[0].second;
    }
    if (out.empty()) return std::nullopt;
    out.append(from, text.cend());
    return nlohmann::json::parse(out);
}

bool uses_a_server(const strategy_under_test& e) {
    return e.options &&
           pointed_at(e, [](const std::string&) { return std::string("127.0.0.1:1"); });
}

// Child exit codes.
constexpr int refused = 0;
constexpr int refused_with_error = 3;
constexpr int granted = 1;
constexpr int foreign_exception = 2;

int connections(const std::map<std::string, std::unique_ptr<hostile_server>>& servers) {
    int n = 0;
    for (const auto& [real, server] : servers) n += server->connections();
    return n;
}

// How long a forked attempt took, written by the child into memory shared with the parent.
struct timings {
    std::atomic<long> create_ms{-1};   // building the store (it may connect)
    std::atomic<long> attempt_ms{-1};  // the lock request
};

// A request on a store pointed at a hostile server, for the resource given: true when granted.
using request = std::function<bool(const std::shared_ptr<store>&, const std::string& resource)>;

// One way a server misbehaves: a name for messages, and a server that does it (one per endpoint
// the entry names).
struct misbehaviour {
    std::string what;
    std::function<std::unique_ptr<hostile_server>()> make;
};

// The generic behaviours (hostile_behaviour: whatever protocol the client speaks), each also
// after a TLS handshake when the entry speaks TLS (its options name a ca_file).
std::vector<misbehaviour> generic_misbehaviours(const strategy_under_test& entry) {
    // The folder of the certificates the entry trusts: the TLS servers present its server.pem.
    std::string tls_dir;
    if (const auto ca = entry.options->value("ca_file", std::string()); !ca.empty())
        tls_dir = ca.substr(0, ca.rfind('/'));
    std::vector<misbehaviour> out;
    for (const auto b : every_hostile_behaviour()) {
        out.push_back({to_string(b), [b] { return std::make_unique<hostile_server>(b); }});
        if (!tls_dir.empty())
            out.push_back({std::string(to_string(b)) + " after the TLS handshake",
                           [b, tls_dir] { return std::make_unique<hostile_server>(b, tls_dir); }});
    }
    return out;
}

// Runs `attempt` in a forked process against every misbehaviour at once, and checks each
// outcome: building the store within `attempt_bound` (it may connect, bounded by the strategy's
// connect timeout), the request within `bound`.
void against_every_behaviour(const strategy_under_test& entry, const request& attempt,
                             std::chrono::milliseconds bound,
                             const std::vector<misbehaviour>& behaviours) {
    struct run {
        const misbehaviour* behaviour;
        std::map<std::string, std::unique_ptr<hostile_server>> servers;  // by real endpoint
        timings* took = nullptr;
        pid_t pid = -1;
    };
    void* shared = ::mmap(nullptr, sizeof(timings) * behaviours.size(), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    BOOST_REQUIRE(shared != MAP_FAILED);
    std::vector<run> runs;
    const auto resource = unique_resource("hostile");
    for (std::size_t i = 0; i < behaviours.size(); ++i) {
        run r{&behaviours[i], {}, new (static_cast<timings*>(shared) + i) timings};
        strategy_under_test hostile = entry;
        hostile.options = pointed_at(entry, [&](const std::string& real) {
            auto& server = r.servers[real];
            if (!server) server = behaviours[i].make();
            return server->address();
        });
        auto* took = r.took;
        r.pid = fork_child(
            [hostile, resource, &attempt, took] {
                auto since = [](steady::time_point t0) {
                    return long(
                        std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0)
                            .count());
                };
                auto t0 = steady::now();
                try {
                    const auto s = create_store(hostile);
                    took->create_ms = since(t0);
                    t0 = steady::now();
                    const bool got = attempt(s, resource);
                    took->attempt_ms = since(t0);
                    return got ? granted : refused;
                } catch (const error& e) {
                    (took->create_ms < 0 ? took->create_ms : took->attempt_ms) = since(t0);
                    if (std::string(e.what()).empty()) return foreign_exception;
                    std::fprintf(stderr, "  refused: %s\n", e.what());
                    return refused_with_error;
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "  not a locksmith error: %s\n", e.what());
                    return foreign_exception;
                }
            },
            std::chrono::duration_cast<std::chrono::seconds>(attempt_bound + bound) +
                test::patience(20s));
        runs.push_back(std::move(r));
    }
    for (auto& r : runs) {
        const int status = wait_child(r.pid, attempt_bound + bound + test::patience(20s));
        const long create_ms = r.took->create_ms, attempt_ms = r.took->attempt_ms;
        BOOST_TEST_INFO(entry.id()
                        << " against a server that is " << r.behaviour->what << " ("
                        << r.servers.size() << " servers, " << connections(r.servers)
                        << " connections): exit " << status << ", store built in " << create_ms
                        << " ms, request answered in " << attempt_ms << " ms");
        BOOST_CHECK(status == refused || status == refused_with_error);
        BOOST_CHECK(create_ms <= attempt_bound.count() * 1000);
        BOOST_CHECK(attempt_ms <= bound.count());
    }
    ::munmap(shared, sizeof(timings) * behaviours.size());
}

bool try_lock(const std::shared_ptr<store>& s, const std::string& resource) {
    named_lock l(s, std::make_shared<key>(resource));
    return l.try_lock();
}

bool wait_for_lock(const std::shared_ptr<store>& s, const std::string& resource) {
    named_lock l(s, std::make_shared<key>(resource));
    return l.try_lock_for(bounded_wait);
}

// A permit of a counting semaphore of 3 (issue 27): its own items or keys, and a limit to keep.
constexpr std::uint32_t permit_limit = 3;

bool try_permit(const std::shared_ptr<store>& s, const std::string& resource) {
    return make_permit(s, resource, permit_limit).try_acquire();
}

bool wait_for_permit(const std::shared_ptr<store>& s, const std::string& resource) {
    return make_permit(s, resource, permit_limit).try_acquire_for(bounded_wait);
}

const auto wait_bound = std::chrono::duration_cast<std::chrono::milliseconds>(bounded_wait + 1s);

void test_try_lock(const strategy_under_test& entry) {
    against_every_behaviour(entry, try_lock, attempt_bound, generic_misbehaviours(entry));
}

void test_bounded_wait(const strategy_under_test& entry) {
    against_every_behaviour(entry, wait_for_lock, wait_bound, generic_misbehaviours(entry));
}

void test_try_permit(const strategy_under_test& entry) {
    against_every_behaviour(entry, try_permit, attempt_bound, generic_misbehaviours(entry));
}

void test_bounded_wait_for_a_permit(const strategy_under_test& entry) {
    against_every_behaviour(entry, wait_for_permit, wait_bound, generic_misbehaviours(entry));
}

// memcached's own mode: servers that pass the connection check, then misbehave on the meta
// protocol (support/hostile_server.hpp: hostile_memcached), for a lock and for a permit, tried
// and waited for.
void test_hostile_memcached(const strategy_under_test& entry) {
    std::vector<misbehaviour> behaviours;
    for (const auto b : every_hostile_memcached())
        behaviours.push_back(
            {to_string(b), [b] { return std::make_unique<hostile_server>(memcached_setup(b)); }});
    const std::pair<const char*, request> requests[] = {{"try_lock", try_lock},
                                                        {"try_permit", try_permit}};
    for (const auto& [what, attempt] : requests) {
        BOOST_TEST_CONTEXT(what) {
            against_every_behaviour(entry, attempt, attempt_bound, behaviours);
        }
    }
    const std::pair<const char*, request> waits[] = {{"wait_for_lock", wait_for_lock},
                                                     {"wait_for_permit", wait_for_permit}};
    for (const auto& [what, attempt] : waits) {
        BOOST_TEST_CONTEXT(what) {
            against_every_behaviour(entry, attempt, wait_bound, behaviours);
        }
    }
}

// A memcached that grants the lock (the add answered as memcached does) and then hangs up, on
// that connection and on every later one at its first command: the holder's refresh fails with
// a backend_error in bounded time (the lock's state unknown, never taken for renewed), its
// release and its destruction end in bounded time without a crash. A permit's grant is given
// back when the limit cannot be checked: never granted.
void test_memcached_hang_up_while_held(const strategy_under_test& entry) {
    for (const bool permit : {false, true}) {
        BOOST_TEST_CONTEXT((permit ? "a permit" : "a lock")) {
            hostile_server server(memcached_setup(hostile_memcached::hang_up_holding));
            strategy_under_test e = entry;
            e.options = pointed_at(entry, [&](const std::string&) { return server.address(); });
            const auto resource = unique_resource("hang-up-holding");
            const pid_t holder = fork_child([&] {
                auto s = create_store(e);
                const auto t0 = steady::now();
                auto k = std::make_shared<key>(resource);
                if (permit) k->set_limit(permit_limit);
                named_lock lock(s, k);
                try {
                    if (lock.try_lock()) {
                        if (permit) return 20;  // granted with its limit never checked
                    } else {
                        return 21;
                    }
                } catch (const backend_error& err) {
                    std::fprintf(stderr, "  refused: %s\n", err.what());
                    return permit ? 0 : 22;
                }
                try {
                    lock.refresh();
                    return 23;                // renewed by a server that hung up
                } catch (const error& err) {  // a backend_error, or the lock said lost
                    std::fprintf(stderr, "  refresh: %s\n", err.what());
                }
                try {
                    lock.release();
                } catch (const error& err) {
                    std::fprintf(stderr, "  release: %s\n", err.what());
                }
                return steady::now() - t0 < attempt_bound * 2 ? 0 : 24;
            });
            const int status = wait_child(holder, attempt_bound * 3 + test::patience(20s));
            BOOST_TEST(status == 0, entry.id() << ": " << exit_text(status));
        }
    }
}

// A session or connection that the server ends while a lock is held (issue 23): the holder hears
// of it at once — its loss descriptor turns readable and is_acquired() says no — so that `run`
// can stop its command; and another process then gets the lock. The entry says how the server
// ends the session (strategy_under_test::end_session).
void test_session_ended_while_held(const strategy_under_test& entry) {
    const auto resource = unique_resource("session-ended");
    byte_pipe holding, told;
    const auto watch_for = test::patience(10s);
    const pid_t holder = fork_child(
        [&] {
            named_lock lock(create_store(entry), std::make_shared<key>(resource));
            if (!lock.try_lock()) return 10;
            auto fd = lock.loss_fd();
            if (!fd || *fd < 0) return 11;  // a store with end_session has a loss descriptor
            holding.put('h');
            // Waits for the notice (the end_session may stop this process meanwhile).
            const auto until = steady::now() + watch_for + 10s;
            while (steady::now() < until) {
                pollfd p{*fd, POLLIN, 0};
                const int left =
                    int(std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now())
                            .count());
                if (::poll(&p, 1, std::max(left, 0)) <= 0) continue;
                if (!lock.is_acquired()) {
                    told.put('t');
                    return 0;
                }
                fd = lock.loss_fd();  // a notice that changed nothing: watch again
                if (!fd || *fd < 0) return 12;
            }
            return 13;  // never told
        },
        std::chrono::duration_cast<std::chrono::seconds>(watch_for) + 60s);
    BOOST_REQUIRE_MESSAGE(holding.get(30s), entry.id() << ": the holder never held");
    entry.end_session(holder);
    const auto ended = steady::now();
    const auto heard = told.get(watch_for);
    BOOST_TEST(heard.has_value(), entry.id() << ": the holder was not told of the lost session");
    BOOST_TEST_MESSAGE(
        entry.id()
        << ": the holder was told "
        << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - ended).count()
        << " ms after the session ended");
    BOOST_TEST(wait_child(holder, watch_for + 60s) == 0);
    const pid_t next = fork_child([&] {
        named_lock lock(create_store(entry), std::make_shared<key>(resource));
        return lock.try_lock_for(10s) ? 0 : 1;
    });
    BOOST_TEST(wait_child(next, 60s) == 0, entry.id() << ": nobody else got the lock after");
}

// A granted lock leaves nothing to a command the holder exec()s: the conformance kit's case
// (<locksmith/conformance.hpp>), which plugin authors run too, on the entry.
void test_nothing_passes_to_an_exec(const strategy_under_test& entry) {
    const auto o = conformance::run_case({entry.name, *entry.options, {}},
                                         "holder_passes_no_descriptor_to_an_exec");
    BOOST_TEST((o.result == conformance::outcome::verdict::passed), entry.id() << ": " << o.detail);
}

// The directories the entry's descriptor says its locks live in (strategy_descriptor::backends,
// "dir:PATH"). The local cases below act on what a descriptor says, not on a list of strategies:
// a new local strategy, or a plugin, that says where its locks live gets them.
std::vector<std::string> directories_used(const strategy_under_test& e) {
    std::vector<std::string> dirs;
    const auto d = default_registry().find(e.name);
    if (!d || !d->backends || !e.options) return dirs;
    for (const auto& b : d->backends(*e.options))
        if (b.rfind("dir:", 0) == 0) dirs.push_back(b.substr(4));
    return dirs;
}

// One try of a fresh store of `e` in this process (a forked child's body), released when granted:
// granted, refused, refused_with_error (a locksmith error, said on stderr) or foreign_exception.
int try_once(const strategy_under_test& e, const std::string& what) {
    try {
        named_lock lock(create_store(e), std::make_shared<key>(unique_resource(what)));
        const bool got = lock.try_lock();
        if (got) lock.unlock();
        return got ? granted : refused;
    } catch (const error& err) {
        std::fprintf(stderr, "  refused: %s\n", err.what());
        return refused_with_error;
    } catch (const std::exception& err) {
        std::fprintf(stderr, "  not a locksmith error: %s\n", err.what());
        return foreign_exception;
    }
}

bool uses_a_directory(const strategy_under_test& e) {
    return !directories_used(e).empty();
}

// The entry's options with each option that names `dir` naming `to` instead; nullopt when none
// does (the strategy's default directory, which the test does not touch).
std::optional<nlohmann::json> with_directory(const strategy_under_test& e, const std::string& dir,
                                             const std::string& to) {
    auto options = *e.options;
    bool named = false;
    for (auto& [key, value] : options.items()) {
        if (!value.is_string()) continue;
        std::error_code ec;
        if (std::filesystem::weakly_canonical(value.get<std::string>(), ec).string() != dir)
            continue;
        value = to;
        named = true;
    }
    return named ? std::optional(options) : std::nullopt;
}

bool is_empty(const std::string& dir) {
    std::error_code ec;
    return std::filesystem::is_empty(dir, ec) && !ec;
}

// Another local user got to the lock directory first (in a folder all users share, such as
// /run/lock or /tmp, or where protected_symlinks is off): made it, left it open to everyone, or
// planted a symlink to a folder of ours. A lock there is one that user can remove or replace —
// a second holder — so the store refuses it, and writes nothing there or through the link.
// A private folder of ours beside them is taken (the control: the refusals are not the
// parent's doing).
void test_directory_others_got_to_first(const strategy_under_test& entry) {
    if (::geteuid() != 0) {
        skip_case("acting as another user (nobody) needs root");
        return;
    }
    constexpr uid_t nobody = 65534;
    for (const auto& dir : directories_used(entry)) {
        char base[] = "/tmp/locksmith-hostile-dir-XXXXXX";
        BOOST_REQUIRE(::mkdtemp(base) != nullptr);
        const std::string victim = std::string(base) + "/victim";
        BOOST_REQUIRE(::mkdir(victim.c_str(), 0700) == 0);
        struct plant {
            const char* what;
            std::function<bool(const std::string&)> make;
            bool taken;
        };
        const plant plants[] = {
            {"a private folder of ours",
             [](const std::string& p) { return ::mkdir(p.c_str(), 0700) == 0; }, true},
            {"a folder another user made",
             [](const std::string& p) {
                 return ::mkdir(p.c_str(), 0755) == 0 && ::chown(p.c_str(), nobody, nobody) == 0;
             },
             false},
            {"a folder open to every user",
             [](const std::string& p) {
                 return ::mkdir(p.c_str(), 0700) == 0 && ::chmod(p.c_str(), 0777) == 0;
             },
             false},
            {"a symlink to a folder of ours",
             [&](const std::string& p) { return ::symlink(victim.c_str(), p.c_str()) == 0; },
             false},
        };
        int i = 0;
        for (const auto& planted : plants) {
            const std::string path = std::string(base) + "/" + std::to_string(i++);
            BOOST_REQUIRE_MESSAGE(planted.make(path), planted.what);
            const auto options = with_directory(entry, dir, path);
            if (!options) {
                skip_case(entry.id() + ": no option names " + dir + " (a default directory)");
                break;
            }
            strategy_under_test e = entry;
            e.options = options;
            const int status =
                wait_child(fork_child([&] { return try_once(e, "hostile-dir"); }), 60s);
            BOOST_TEST_INFO(entry.id() << " in " << planted.what << ": exit " << status);
            if (planted.taken) {
                BOOST_CHECK(status == granted);
            } else {
                BOOST_CHECK(status == refused_with_error);
                BOOST_CHECK(is_empty(victim));
                if (std::filesystem::is_directory(std::filesystem::symlink_status(path)))
                    BOOST_CHECK(is_empty(path));
            }
        }
        std::filesystem::remove_all(base);
    }
}

// The POSIX shared-memory objects the entry's descriptor says its locks live in ("shm:NAME").
std::vector<std::string> segments_used(const strategy_under_test& e) {
    std::vector<std::string> names;
    const auto d = default_registry().find(e.name);
    if (!d || !d->backends || !e.options) return names;
    for (const auto& b : d->backends(*e.options))
        if (b.rfind("shm:", 0) == 0) names.push_back(b.substr(4));
    return names;
}

bool uses_a_segment(const strategy_under_test& e) {
    return !segments_used(e).empty();
}

// A lock try on the entry with every option naming `from` naming `to`, in a forked process.
int try_with_option_renamed(const strategy_under_test& entry, const std::string& from,
                            const std::string& to) {
    strategy_under_test e = entry;
    for (auto& [key, value] : e.options->items())
        if (value.is_string() && value.get<std::string>() == from) value = to;
    return wait_child(fork_child([&] { return try_once(e, "hostile-shm"); }), 60s);
}

// Another local user got to the segment (in /dev/shm, which every user can write to) first or
// after us: made it, or changed ours to be open to everyone, or planted a symlink or a hard link
// to a file of ours under its name. Each is refused, and the file behind a link is not written.
// The control: a segment of our own, made by the store, is used.
void test_segment_others_got_to_first(const strategy_under_test& entry) {
    if (::geteuid() != 0) {
        skip_case("acting as another user (nobody) needs root");
        return;
    }
    constexpr uid_t nobody = 65534;
    for (const auto& name : segments_used(entry)) {
        const std::string fresh = "locksmith-hostile-" + std::to_string(::getpid());
        const std::string path = "/dev/shm/" + fresh;
        const std::string copy = path + ".copy";
        auto attempt = [&](const char* what, int expected) {
            const int status = try_with_option_renamed(entry, name, fresh);
            BOOST_TEST_INFO(entry.id()
                            << " with a segment that is " << what << ": exit " << status);
            BOOST_CHECK(status == expected);
        };
        ::unlink(path.c_str());
        attempt("ours, made by the store", granted);
        // A copy of a real segment: what is refused is where it came from, not its contents.
        std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
        ::chmod(path.c_str(), 0666);
        attempt("ours but open to every user", refused_with_error);
        ::chmod(path.c_str(), 0600);
        BOOST_REQUIRE(::chown(path.c_str(), nobody, nobody) == 0);
        attempt("another user's", refused_with_error);
        ::unlink(path.c_str());
        BOOST_REQUIRE(::symlink(copy.c_str(), path.c_str()) == 0);
        const auto before = std::filesystem::last_write_time(copy);
        attempt("a symlink to a file of ours", refused_with_error);
        ::unlink(path.c_str());
        BOOST_REQUIRE(::link(copy.c_str(), path.c_str()) == 0);
        attempt("a hard link to a file of ours", refused_with_error);
        BOOST_CHECK(std::filesystem::last_write_time(copy) == before);
        ::unlink(path.c_str());
        ::unlink(copy.c_str());
    }
}

// A full file system where the entry keeps its locks: any local user can fill a shared tmpfs
// (/dev/shm, Debian's 5 MiB /run/lock) before a lock is taken there. A try is granted (nothing
// needed room) and released, or refused with a locksmith error — never a crash (SIGBUS from a
// mapping whose pages were never reserved) nor an error of another kind.
void test_full_file_system(const strategy_under_test& entry) {
    auto check = [&](const std::string& where, const strategy_under_test& e) {
        std::string why;
        const auto status = run_on_a_full_tmpfs(
            where, 0700, [&] { return try_once(e, "hostile-full"); }, why);
        if (!status) {
            skip_case(why);
            return;
        }
        BOOST_TEST_INFO(entry.id() << " with " << where << " full: exit " << *status);
        BOOST_CHECK(*status == granted || *status == refused_with_error);
    };
    for (const auto& dir : directories_used(entry)) {
        char base[] = "/tmp/locksmith-hostile-full-XXXXXX";
        BOOST_REQUIRE(::mkdtemp(base) != nullptr);
        if (const auto options = with_directory(entry, dir, base)) {
            strategy_under_test e = entry;
            e.options = options;
            check(base, e);
        } else {
            skip_case(entry.id() + ": no option names " + dir + " (a default directory)");
        }
        std::filesystem::remove_all(base);
    }
    if (uses_a_segment(entry)) check("/dev/shm", entry);
}

bool uses_a_directory_or_segment(const strategy_under_test& e) {
    return uses_a_directory(e) || uses_a_segment(e);
}

bool every_strategy(const strategy_under_test&) {
    return true;
}

// Counting semaphores (issue 27) on a server: their permits have requests of their own.
bool counts_on_a_server(const strategy_under_test& e) {
    const auto d = default_registry().find(e.name);
    return uses_a_server(e) && d && has(d->capabilities, capability::counting);
}

// The protocol modes: servers that speak the strategy's own protocol well enough to pass its
// connection check, then misbehave in that protocol's terms (redis's fakes and etcd's broken
// endpoints live in their integration suites).
bool speaks_memcached(const strategy_under_test& e) {
    return e.name == "memcached" && uses_a_server(e);
}

bool a_server_can_end_its_session(const strategy_under_test& e) {
    return bool(e.end_session);
}

struct case_spec {
    const char* name;
    bool (*applies)(const strategy_under_test&);
    void (*run)(const strategy_under_test&);
};

const case_spec cases[] = {
    {"a_hostile_server_neither_grants_nor_crashes_a_try", uses_a_server, test_try_lock},
    {"a_bounded_wait_on_a_hostile_server_ends_in_time", uses_a_server, test_bounded_wait},
    {"a_hostile_server_neither_grants_nor_crashes_a_permit", counts_on_a_server, test_try_permit},
    {"a_bounded_wait_for_a_permit_on_a_hostile_server_ends_in_time", counts_on_a_server,
     test_bounded_wait_for_a_permit},
    {"a_hostile_memcached_neither_grants_nor_crashes_a_lock_or_a_permit", speaks_memcached,
     test_hostile_memcached},
    {"a_memcached_that_hangs_up_while_a_lock_is_held_is_an_error_in_time", speaks_memcached,
     test_memcached_hang_up_while_held},
    {"a_session_ended_by_the_server_is_heard_of_at_once", a_server_can_end_its_session,
     test_session_ended_while_held},
    {"a_command_execed_by_the_holder_inherits_no_descriptor", every_strategy,
     test_nothing_passes_to_an_exec},
    {"a_lock_directory_another_user_got_to_first_is_refused", uses_a_directory,
     test_directory_others_got_to_first},
    {"a_segment_another_user_got_to_first_is_refused", uses_a_segment,
     test_segment_others_got_to_first},
    {"a_full_file_system_under_its_locks_is_an_error_not_a_crash", uses_a_directory_or_segment,
     test_full_file_system},
};

}  // namespace

// Found by tests/support/test_main.cpp.
bool init_unit_test() {
    using namespace boost::unit_test;
    auto& master = framework::master_test_suite();
    master.p_name.value = "hostile";
    static const std::vector<strategy_under_test> entries = strategies_under_test();
    for (const auto& entry : entries) {
        if (!entry.options) {
            // What it uses is unknown without its options: the whole entry is a skip (a failure
            // under CI=true, where every server runs).
            auto* suite = BOOST_TEST_SUITE(entry.id());
            master.add(suite);
            const std::string why = entry.id() + " skipped: " + entry.missing;
            suite->add(
                make_test_case([why] { skip_case(why); }, "not_available", __FILE__, __LINE__));
            continue;
        }
        auto* suite = BOOST_TEST_SUITE(entry.id());
        master.add(suite);
        for (const auto& spec : cases) {
            if (!spec.applies(entry)) continue;
            const strategy_under_test* e = &entry;
            auto run = spec.run;
            suite->add(make_test_case([e, run] { run(*e); }, spec.name, __FILE__, __LINE__));
        }
    }
    return true;
}
