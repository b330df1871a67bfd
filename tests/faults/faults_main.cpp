// SPDX-License-Identifier: MIT
// locksmith_faults: a Jepsen-style run of one strategy under one nemesis (issue 25).
//
//   locksmith_faults run --strategy ID --nemesis none|pause|kill|restart|partition|stall|cut|clock
//                        [--seconds S] [--seed N] [--workers K] [--via library|run]
//                        [--json FILE]
//       K worker processes (this program, `worker`) loop: acquire, read the resource's
//       register, write it + 1 with the fencing token, release; half of them keep one lock
//       object, the other half make a fresh store and lock per acquisition. `--via run`: each
//       acquisition is `locksmith run NAME -- locksmith_faults client ...` instead (how admins
//       use it), the client acting on the resource with LOCKSMITH_FENCING_TOKEN; `pause` then
//       stops the locksmith process and its command, `kill` SIGKILLs the locksmith process
//       (the kernel sends its command SIGTERM). The nemesis, on a
//       schedule drawn from the seed: `pause` SIGSTOPs the holder past its TTL / session timeout
//       / lease and SIGCONTs it; `kill` SIGKILLs holders and waiters (and respawns them);
//       `restart` kills the strategy's server and starts it again (a private server, through
//       scripts/services.sh); `partition`, `stall` and `cut` give each worker a TCP proxy of its
//       own to the server (tests/support/tcp_fault_proxy) and, once a worker asked for it
//       (SIGUSR1) is in a long critical section, drop every byte between it and the server, hold
//       every byte, or close its connections, for a pause's length; the worker works on in 20 ms
//       steps, stops when told (on_lost, or loss_fd then is_acquired(); through `run`: the
//       SIGTERM that locksmith sends its command), and writes at the end when it was not. `clock`
//       (redis, through the library) jumps a private redis-server's wall clock forward past the TTL
//       while such a stretched section holds (clock_shift.cpp, preloaded into the server). Then the
//       checker reads the resource's log (checker.hpp), prints its verdict as JSON (appended as one
//       line to FILE), and the exit status says whether the invariants hold (0), not (1), or the
//       strategy's server is not configured (77; 1 under CI=true).
//   locksmith_faults ci ID [run|network|network-run]  the CI-sized cells of one strategy (CTest
//                                 faults.ID, faults.ID.run for the `run` variant,
//                                 faults.ID.network for one fault of partition, stall and cut,
//                                 faults.ID.network.run for those through `locksmith run`)
//   locksmith_faults check LOG    the checker alone, on a log
//
// Invariants (issue 25; counts from the log, no timing): a `fencing` strategy accepts 0 stale
// writes under every nemesis, and no strategy grants a token below an earlier grant's; a
// `crash_release` strategy has 0 overlaps under SIGKILL; every strategy: every lost lock reported
// to its holder (on_lost), 0 lost increments and 0 overlaps without a fault, no hang (workers stop
// when asked, the lock is free afterwards). One goal timed from the log's clock: under `restart`,
// the next grant within one TTL (or session timeout) plus 1 s of the server's return (what the
// outage left behind must not block longer).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/test/unit_test.hpp>  // integration_support.hpp's helpers are Boost.Test's
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/named_lock.hpp>
#include <locksmith/registry.hpp>

#include "faults/checker.hpp"
#include "faults/history.hpp"
#include "integration/integration_support.hpp"
#include "support/strategies_under_test.hpp"
#include "support/suite_helpers.hpp"
#include "support/tcp_fault_proxy.hpp"
#include "support/test_environment.hpp"

using namespace locksmith;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using ms = std::chrono::milliseconds;

namespace {

constexpr int skip_status = 77;

// ------------------------------------------------------------------ the worker

std::atomic<long> current_seq{0};
faults::history_log* worker_log = nullptr;
int worker_index = 0;
// The partition and stall nemeses: SIGUSR1 asks a worker to make its next critical section a
// long one (the nemesis cuts it off from the server meanwhile); on_lost sets `told`.
volatile sig_atomic_t stretch_next = 0;
std::atomic<bool> told{false};

int run_worker_via_cli(const nlohmann::json& spec, faults::history_log& log);

int run_worker(const nlohmann::json& spec) {
    faults::history_log log(spec.at("log").get<std::string>());
    worker_log = &log;
    worker_index = spec.at("worker").get<int>();
    if (spec.at("via").get<std::string>() == "run") return run_worker_via_cli(spec, log);
    faults::resource reg(spec.at("register").get<std::string>(), log,
                         spec.at("fenced").get<bool>());
    const auto name = spec.at("strategy").get<std::string>();
    const auto options = spec.at("options");
    const auto descriptor = default_registry().find(name);
    if (!descriptor) return 2;
    const bool fresh = spec.at("fresh").get<bool>();
    const bool fencing = spec.at("fencing").get<bool>();
    const ms acquire_bound{spec.at("acquire_ms").get<long>()};
    const auto hold_us = spec.at("hold_us").get<long>();
    const fs::path stop_file = spec.at("stop_file").get<std::string>();
    std::mt19937_64 random(spec.at("seed").get<std::uint64_t>());

    lock_options lo;
    lo.ttl = ms(spec.at("ttl_ms").get<long>());
    lo.auto_refresh = spec.at("auto_refresh").get<bool>();
    // From the renewal thread or from is_acquired(): one short append, safe from any thread.
    lo.on_lost = [](const error&) {
        told = true;
        worker_log->record(::getpid(), worker_index, current_seq.load(), 'L');
    };
    struct sigaction asked {};
    asked.sa_handler = [](int) { stretch_next = 1; };
    asked.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &asked, nullptr);
    const ms stretch{spec.value("stretch_ms", 0L)};
    lo.on_error = [](const error&) {};  // a failed release shows in the log as what follows
    const auto resource_name = spec.at("resource").get<std::string>();

    std::unique_ptr<named_lock> kept;
    auto make = [&] {
        return std::make_unique<named_lock>(descriptor->create(options),
                                            std::make_shared<key>(resource_name), lo);
    };
    const pid_t self = ::getpid();
    for (long seq = 1; !fs::exists(stop_file); ++seq) {
        current_seq = seq;
        told = false;
        std::unique_ptr<named_lock> made;
        named_lock* lock = nullptr;
        try {
            if (fresh) {
                made = make();
                lock = made.get();
            } else {
                if (!kept) kept = make();
                lock = kept.get();
            }
            if (!lock->try_lock_for(acquire_bound)) {
                log.record(self, worker_index, seq, 'T');
                continue;
            }
        } catch (const std::exception&) {
            log.record(self, worker_index, seq, 'F');
            if (!fresh) kept.reset();  // a broken connection: start over with a new object
            std::this_thread::sleep_for(50ms);
            continue;
        }
        std::int64_t token = -1;
        if (fencing) {
            try {
                token = std::int64_t(lock->fencing_token().value_or(0));
            } catch (const std::exception&) {
                // Lost before its token was known (expired_error): told, and nothing to do.
                log.record(self, worker_index, seq, 'L');
                lock->unlock();
                continue;
            }
        }
        log.record(self, worker_index, seq, 'B', token);
        const auto value = reg.read(worker_index, seq);
        std::this_thread::sleep_for(
            std::chrono::microseconds(std::uniform_int_distribution<long>(0, hold_us)(random)));
        if (stretch_next && stretch.count() > 0) {
            stretch_next = 0;
            log.record(self, worker_index, seq, 'Q');  // the nemesis waits for this
            // A long critical section, cut off from the server (partition, stall): work in
            // steps, as a careful holder does, and stop when told that the lock is lost
            // (on_lost, or loss_fd turning readable, then is_acquired()). Not told by the end:
            // write, as a holder that believes it still holds does.
            const auto until = std::chrono::steady_clock::now() + stretch;
            while (!told && std::chrono::steady_clock::now() < until) {
                std::this_thread::sleep_for(20ms);
                try {
                    const auto fd = lock->loss_fd();
                    pollfd p{fd.value_or(-1), POLLIN, 0};
                    if (fd && (*fd < 0 || ::poll(&p, 1, 0) > 0)) (void)lock->is_acquired();
                } catch (const std::exception&) {
                }
            }
            if (told) {
                log.record(self, worker_index, seq, 'E');
                lock->unlock();
                continue;
            }
        }
        // Written whatever the lock says now: a holder that does not know it lost the lock
        // acts like this, and the resource's fencing check is what must stop it.
        reg.write(worker_index, seq, token, value + 1);
        // Asks the store: where the grant is gone, this calls on_lost (an L record).
        try {
            if (!lock->is_acquired()) log.record(self, worker_index, seq, 'G');
        } catch (const std::exception&) {
            log.record(self, worker_index, seq, 'X');
        }
        log.record(self, worker_index, seq, 'E');
        lock->unlock();
    }
    return 0;
}

// The `run` variant: the worker loops over `locksmith run`, whose command (`client`) acts on the
// resource under the worker's pid and the iteration's seq, so that the history reads as the
// library variant's. The worker logs what locksmith's exit status says: T (the wait ran out), L
// (the lost-lock code: told), F (any other failure).
int run_worker_via_cli(const nlohmann::json& spec, faults::history_log& log) {
    const auto locksmith = spec.at("locksmith").get<std::string>();
    const auto config = spec.at("config").get<std::string>();
    const auto name = spec.at("resource").get<std::string>();
    const auto strategy = spec.at("strategy").get<std::string>();
    const auto ttl_s = std::to_string(double(spec.at("ttl_ms").get<long>()) / 1000);
    const auto wait_s = std::to_string(double(spec.at("acquire_ms").get<long>()) / 1000);
    const fs::path stop_file = spec.at("stop_file").get<std::string>();
    std::mt19937_64 random(spec.at("seed").get<std::uint64_t>());
    const pid_t self = ::getpid();
    constexpr int conflict = 3, lost = 75;
    struct sigaction asked {};
    asked.sa_handler = [](int) { stretch_next = 1; };
    asked.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &asked, nullptr);
    for (long seq = 1; !fs::exists(stop_file); ++seq) {
        auto client = spec;
        client["pid"] = self;
        client["seq"] = seq;
        client["seed"] = random();
        // Asked for a long critical section (the network nemeses): this run's command makes it.
        client["stretch_ms"] = stretch_next ? spec.value("stretch_ms", 0L) : 0L;
        stretch_next = 0;
        const auto client_text = client.dump();
        const pid_t pid = ::fork();
        if (pid == 0) {
            // A group of its own: `pause` stops locksmith and its command together.
            ::setpgid(0, 0);
            std::vector<std::string> args = {locksmith,
                                             "run",
                                             name,
                                             "--strategy",
                                             strategy,
                                             "--config",
                                             config,
                                             "--ttl",
                                             ttl_s,
                                             "-w",
                                             wait_s,
                                             "-E",
                                             std::to_string(conflict),
                                             "--kill-after",
                                             "1",
                                             "--",
                                             "/proc/" + std::to_string(self) + "/exe",
                                             "client",
                                             client_text};
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        if (pid < 0) return 2;
        ::setpgid(pid, pid);  // here too: the nemesis may signal the group before the child runs
        log.record(self, worker_index, seq, 'P', pid);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // -1: the nemesis's kill
        if (code == 0) continue;
        if (code == conflict) {
            log.record(self, worker_index, seq, 'T');
            continue;
        }
        if (code == lost) log.record(self, worker_index, seq, 'L');
        if (code > 0 && code != lost) log.record(self, worker_index, seq, 'F', code);
        std::this_thread::sleep_for(50ms);
    }
    return 0;
}

// `client`: the command of the `run` variant, inside the critical section.
int run_client(const nlohmann::json& spec) {
    faults::history_log log(spec.at("log").get<std::string>());
    faults::resource reg(spec.at("register").get<std::string>(), log,
                         spec.at("fenced").get<bool>());
    const long pid = spec.at("pid").get<long>();
    const long seq = spec.at("seq").get<long>();
    const int worker = spec.at("worker").get<int>();
    std::mt19937_64 random(spec.at("seed").get<std::uint64_t>());
    std::int64_t token = -1;
    if (spec.at("fencing").get<bool>()) {
        const char* text = std::getenv("LOCKSMITH_FENCING_TOKEN");
        if (text == nullptr) return 3;  // a strategy with fencing must give one
        token = std::strtoll(text, nullptr, 10);
    }
    log.record(pid, worker, seq, 'B', token, 0, ::getppid());  // c: the locksmith process
    const auto value = reg.read(worker, seq, pid);
    std::this_thread::sleep_for(std::chrono::microseconds(
        std::uniform_int_distribution<long>(0, spec.at("hold_us").get<long>())(random)));
    if (const ms stretch{spec.value("stretch_ms", 0L)}; stretch.count() > 0) {
        // locksmith's SIGTERM says the lock is lost: taken as it comes (blocked, then waited
        // for), so that the L record has the moment it arrived. (Elsewhere SIGTERM ends the
        // client at once: after a SIGKILL of locksmith, the kill nemesis, it must not write.)
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        ::sigprocmask(SIG_BLOCK, &term, nullptr);
        log.record(pid, worker, seq, 'Q');  // the nemesis waits for this
        // A long critical section, cut off from the server: work on, and stop when locksmith
        // says the lock is lost, as the library variant stops at on_lost. Not told by the end:
        // write, as a holder that believes it still holds does.
        const auto until = std::chrono::steady_clock::now() + stretch;
        for (auto now = std::chrono::steady_clock::now(); now < until;
             now = std::chrono::steady_clock::now()) {
            const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
            const timespec wait{time_t(left.count() / 1'000'000'000),
                                long(left.count() % 1'000'000'000)};
            if (::sigtimedwait(&term, nullptr, &wait) == SIGTERM) {
                log.record(pid, worker, seq, 'L');  // told now, not when locksmith exits
                log.record(pid, worker, seq, 'E');
                return 0;
            }
        }
    }
    reg.write(worker, seq, token, value + 1, pid);
    log.record(pid, worker, seq, 'E');
    return 0;
}

// ------------------------------------------------------------------ private servers

// A server of the run's own, through scripts/services.sh with a state folder and port of its
// own, which the `restart` nemesis kills (SIGKILL; PostgreSQL: services.sh stop, whose fast
// shutdown leaves no orphaned backends holding its shared memory) and starts again.
class private_service {
  public:
    // `environment`: "NAME=value " words for the server's command line (the clock nemesis's
    // shim); services.sh passes them on to the server.
    private_service(std::string service, fs::path dir, std::string environment = {})
        : service_(std::move(service)), dir_(dir), environment_(std::move(environment)) {
        fs::create_directories(dir_);
        port_ = test::free_ports(2);  // etcd's peer port is the next one
    }
    ~private_service() { script("stop"); }
    bool start() { return script("start") == 0; }
    void kill() {
        if (service_ == "postgres") {
            script("stop");
            return;
        }
        std::ifstream pid_file(dir_ / (service_ + ".pid"));
        long pid = 0;
        if (pid_file >> pid && pid > 1) {
            ::kill(pid_t(pid), SIGKILL);
            // Detached (setsid) and not our child: wait until it is gone.
            for (int i = 0; i < 200 && ::kill(pid_t(pid), 0) == 0; ++i)
                std::this_thread::sleep_for(10ms);
        }
    }
    // Sets the LOCKSMITH_TEST_* variables of `services.sh env` in this process.
    void export_env() {
        const auto out = dir_ / "env.out";
        script("env >" + out.string() + " 2>/dev/null; true");
        std::ifstream in(out);
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("export ", 0) != 0) continue;
            auto eq = line.find('=');
            auto name = line.substr(7, eq - 7);
            auto value = line.substr(eq + 1);
            if (value.size() >= 2 && value.front() == '\'')
                value = value.substr(1, value.size() - 2);
            ::setenv(name.c_str(), value.c_str(), 1);
        }
    }

  private:
    int script(const std::string& command) const {
        std::string upper = service_;
        for (auto& c : upper) c = char(std::toupper(c));
        const auto line = environment_ + "LOCKSMITH_SERVICES_DIR=" + dir_.string() +
                          " LOCKSMITH_SERVICES=" + service_ + " LOCKSMITH_" + upper +
                          "_PORT=" + std::to_string(port_) + " " + test::services_script() + " " +
                          command;
        const auto logged = command.find('>') == std::string::npos
                                ? line + " >>" + (dir_ / "services.log").string() + " 2>&1"
                                : line;
        return std::system(logged.c_str());
    }
    std::string service_;
    fs::path dir_;
    std::string environment_;
    int port_;
};

// The services.sh service behind an entry of strategies_under_test(), for `restart`.
std::optional<std::string> service_of(const std::string& id) {
    static const std::map<std::string, std::string> services = {
        {"redis", "redis"},          {"memcached", "memcached"},
        {"pg_advisory", "postgres"}, {"sql.postgresql", "postgres"},
        {"zookeeper", "zookeeper"},  {"etcd", "etcd"}};
    auto s = services.find(id);
    if (s == services.end()) return std::nullopt;
    return s->second;
}

// ------------------------------------------------------------------ the network

// The server a strategy's options name (the first "127.0.0.1:PORT" in them: URL, DSN, endpoints
// or hosts), for the partition and stall nemeses; 0 when none.
int server_port_in(const nlohmann::json& options) {
    const auto text = options.dump();
    const std::string host = "127.0.0.1:";
    const auto at = text.find(host);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + host.size());
}

// The options with every "127.0.0.1:PORT" of that server replaced by `address` (a proxy's).
nlohmann::json through(const nlohmann::json& options, int port, const std::string& address) {
    const std::regex server("127\\.0\\.0\\.1:" + std::to_string(port) + "(?![0-9])");
    return nlohmann::json::parse(std::regex_replace(options.dump(), server, address));
}

bool network_nemesis(const std::string& n) {
    return n == "partition" || n == "stall" || n == "cut";
}

// The nemeses that stretch a worker's critical section (SIGUSR1) and strike while it holds.
bool stretching_nemesis(const std::string& n) {
    return network_nemesis(n) || n == "clock";
}

// ------------------------------------------------------------------ the run

std::optional<test::strategy_under_test> find_entry(const std::string& id) {
    for (auto& e : test::strategies_under_test())
        if (e.id() == id) return e;
    return std::nullopt;
}

struct cell {
    std::string strategy;
    std::string nemesis = "none";
    double seconds = 4;
    std::uint64_t seed = 1;
    int workers = 5;
    std::string via = "library";  // or "run": through `locksmith run`
};

struct cell_outcome {
    faults::verdict verdict;
    nlohmann::json json;
    std::vector<std::string> broken;  // invariants that do not hold
    bool skipped = false;
};

// Follows the log as it grows: which processes are inside their critical section now, before
// their write (a pause there makes the write come after the lock is lost: what fencing is for).
class holder_tracker {
  public:
    explicit holder_tracker(const fs::path& path) : in_(path) {}
    std::vector<long> holders() {
        std::string line;
        while (true) {
            auto pos = in_.tellg();
            if (!std::getline(in_, line) || in_.eof()) {
                in_.clear();
                in_.seekg(pos);  // a partial line: read it again next time
                break;
            }
            std::istringstream f(line);
            long long t;
            long pid, seq;
            int worker;
            char kind;
            if (!(f >> t >> pid >> worker >> seq >> kind)) continue;
            if (kind == 'B' || kind == 'R') before_write_[pid] = true;
            if (kind == 'W' || kind == 'V' || kind == 'E' || kind == 'K')
                before_write_[pid] = stretched_[pid] = false;
            if (kind == 'Q') stretched_[pid] = true;
            if (long child; kind == 'P' && f >> child) locksmith_of_[pid] = child;
        }
        std::vector<long> now;
        for (auto [pid, is_before] : before_write_)
            if (is_before) now.push_back(pid);
        return now;
    }

    // The `run` variant: the locksmith process a worker runs now (0: none yet).
    long locksmith_of(long worker_pid) {
        holders();
        auto l = locksmith_of_.find(worker_pid);
        return l == locksmith_of_.end() ? 0 : l->second;
    }

    // Whether `pid` is in a long critical section, asked for by the partition and stall nemeses.
    bool stretched(long pid) {
        holders();
        return stretched_[pid];
    }

  private:
    std::ifstream in_;
    std::map<long, bool> before_write_, stretched_;
    std::map<long, long> locksmith_of_;
};

cell_outcome run_cell(const cell& c) {
    cell_outcome out;
    const auto run_dir = fs::temp_directory_path() /
                         ("locksmith-faults-" + std::to_string(::getpid())) /
                         (c.strategy + "." + c.nemesis);
    fs::remove_all(run_dir);
    fs::create_directories(run_dir);

    std::unique_ptr<private_service> server;
    // The clock nemesis: a private redis-server whose wall clock (which its TTLs run on) moves
    // by the seconds in this file (clock_shift.cpp, preloaded).
    const auto clock_file = run_dir / "clock-shift";
    if (c.nemesis == "clock" && (c.strategy != "redis" || c.via == "run")) {
        out.skipped = true;
        out.json = {{"skipped",
                     "the clock nemesis moves a redis server's clock, through the "
                     "library (the worker's section is stretched)"}};
        return out;
    }
    if (c.nemesis == "restart" || c.nemesis == "clock") {
        auto service = service_of(c.strategy);
        if (!service) {
            out.skipped = true;
            out.json = {{"skipped", "no server to restart for " + c.strategy}};
            return out;
        }
        std::string environment;
        if (c.nemesis == "clock") {
            std::ofstream(clock_file) << "0\n";
            environment = std::string("LD_PRELOAD=") + LOCKSMITH_CLOCK_SHIFT +
                          " LOCKSMITH_CLOCK_SHIFT_FILE=" + clock_file.string() + " ";
        }
        server = std::make_unique<private_service>(*service, run_dir / "server", environment);
        if (!server->start()) {
            out.broken.push_back("the private " + *service + " server did not start (see " +
                                 (run_dir / "server" / "services.log").string() + ")");
            return out;
        }
        server->export_env();
    }
    auto entry = find_entry(c.strategy);
    if (c.via == "run" && test::cli_path().empty()) {
        out.skipped = true;
        out.json = {{"skipped", "this build has no CLI (LOCKSMITH_BUILD_CLI=OFF)"}};
        return out;
    }
    if (!entry || !entry->options) {
        out.skipped = true;
        out.json = {{"skipped", entry ? entry->missing : "no strategy " + c.strategy}};
        return out;
    }
    const auto descriptor = default_registry().find(entry->name);
    const capability caps = descriptor->capabilities_for
                                ? descriptor->capabilities_for(*entry->options)
                                : descriptor->capabilities;
    const bool expiring = has(caps, capability::expiring);
    const bool fencing = has(caps, capability::fencing);
    const bool crash_release = has(caps, capability::crash_release);
    const ms ttl = std::max<ms>(1s, entry->clock_delay);
    // How long a grant can outlive its holder: the TTL, or ZooKeeper's 2 s session.
    const ms lease = entry->name == "zookeeper" ? std::max<ms>(ttl, 2s) : ttl;
    // A pause outlives the TTL (or the session, or a lease's rounding) by seconds.
    const ms pause = expiring || entry->name == "zookeeper" ? lease + 2500ms : 1500ms;
    // The availability goal after a server restart (issue 25): the next grant within one TTL or
    // session timeout plus 1 s of the server being back (what a holder or a waiter that gave up
    // during the outage left behind must not block longer).
    const ms recover_bound = lease + 1s;
    // Partition, stall and cut: each worker reaches the server through a proxy of its own, which
    // the nemesis cuts off (drop: every byte lost; stall: every byte held; cut: its connections
    // closed) for as long as a pause, while the worker holds the lock in a critical section that
    // lasts 1 s longer.
    std::vector<std::unique_ptr<test::tcp_fault_proxy>> proxies;
    const int server_port = network_nemesis(c.nemesis) ? server_port_in(*entry->options) : 0;
    if (network_nemesis(c.nemesis)) {
        if (server_port == 0) {
            out.skipped = true;
            out.json = {{"skipped", c.strategy + " has no TCP server to cut off"}};
            return out;
        }
        for (int i = 0; i < c.workers; ++i)
            proxies.push_back(std::make_unique<test::tcp_fault_proxy>("127.0.0.1", server_port));
    }

    const auto log_path = run_dir / "history.log";
    const auto register_path = run_dir / "register";
    const auto stop_file = run_dir / "stop";
    faults::resource::initialise(register_path.string());
    // The `run` variant's configuration: the strategy with the entry's options.
    const auto config_path = run_dir / "locksmith.json";
    std::ofstream(config_path)
        << nlohmann::json{{"strategies", {{entry->name, {{"options", *entry->options}}}}}}.dump();
    faults::history_log log(log_path.string());
    std::mt19937_64 random(c.seed);
    const auto resource_name =
        "faults." + std::to_string(::getpid()) + "." + c.strategy + "." + c.nemesis + "." + c.via;

    // The `run` variant through the proxies: a configuration per worker, with its proxy.
    auto worker_config = [&](int index) {
        if (proxies.empty()) return config_path;
        const auto path = run_dir / ("locksmith-" + std::to_string(index) + ".json");
        std::ofstream(path) << nlohmann::json{{"strategies",
                                               {{entry->name,
                                                 {{"options",
                                                   through(*entry->options, server_port,
                                                           proxies[index]->address())}}}}}}
                                   .dump();
        return path;
    };
    auto spawn = [&](int index) -> pid_t {
        nlohmann::json spec = {
            {"log", log_path.string()},
            {"register", register_path.string()},
            {"fenced", fencing},
            {"fencing", fencing},
            {"strategy", entry->name},
            {"options", proxies.empty()
                            ? *entry->options
                            : through(*entry->options, server_port, proxies[index]->address())},
            {"stretch_ms", stretching_nemesis(c.nemesis) ? (pause + 1s).count() : 0},
            {"resource", resource_name},
            {"worker", index},
            {"fresh", index % 2 == 1},
            {"ttl_ms", ttl.count()},
            {"auto_refresh", expiring},
            {"acquire_ms", 5000},
            {"hold_us", 5000},
            {"stop_file", stop_file.string()},
            {"seed", random()},
            {"via", c.via},
            {"locksmith", test::cli_path()},
            {"config", worker_config(index).string()}};
        const auto text = spec.dump();
        const auto err = (run_dir / ("worker-" + std::to_string(index) + ".err")).string();
        pid_t pid = ::fork();
        if (pid == 0) {
            int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (fd >= 0) ::dup2(fd, 2);
            ::execl("/proc/self/exe", "locksmith_faults", "worker", text.c_str(), nullptr);
            ::_exit(127);
        }
        return pid;
    };
    std::map<int, pid_t> workers;
    for (int i = 0; i < c.workers; ++i) workers[i] = spawn(i);
    auto index_of = [&](long pid) {
        for (auto [i, p] : workers)
            if (p == pid) return i;
        return -1;
    };

    holder_tracker tracker(log_path);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(c.seconds));
    auto sleep_until_or_end = [&](std::chrono::steady_clock::duration d) {
        std::this_thread::sleep_until(std::min(std::chrono::steady_clock::now() + d, end));
    };
    auto pick = [&](double holder_chance) -> long {
        auto holders = tracker.holders();
        std::erase_if(holders, [&](long p) { return index_of(p) < 0; });
        // Waits a little for a holder when the dice want one (sections come and go in ms).
        const auto wait_until = std::chrono::steady_clock::now() + 2s;
        const bool want_holder = std::uniform_real_distribution<>(0, 1)(random) < holder_chance;
        while (want_holder && holders.empty() && std::chrono::steady_clock::now() < wait_until) {
            std::this_thread::sleep_for(1ms);
            holders = tracker.holders();
            std::erase_if(holders, [&](long p) { return index_of(p) < 0; });
        }
        if (want_holder && !holders.empty()) return holders[random() % holders.size()];
        return workers[int(random() % workers.size())];
    };
    // Asks the worker to make its next critical section a long one and waits (6 s at most)
    // until it holds it: the clock and network nemeses strike inside that section.
    auto stretch = [&](long victim) {
        ::kill(pid_t(victim), SIGUSR1);
        const auto until = std::chrono::steady_clock::now() + 6s;
        while (!tracker.stretched(victim)) {
            if (std::chrono::steady_clock::now() >= until) return false;
            std::this_thread::sleep_for(1ms);
        }
        return true;
    };
    long faults_done = 0;
    long clock_shift_s = 0;  // the clock nemesis: how far the server's clock has jumped
    const bool via_run = c.via == "run";
    std::this_thread::sleep_for(1s);  // grants before the first fault (availability's baseline)
    while (c.nemesis != "none" && std::chrono::steady_clock::now() < end) {
        ++faults_done;
        if (c.nemesis == "pause") {
            std::this_thread::sleep_for(ms(random() % 200));
            const long victim = pick(1.0);
            // The `run` variant: the locksmith process and its command (its process group).
            const long stopped = via_run ? -tracker.locksmith_of(victim) : victim;
            if (stopped == 0) continue;
            log.record(0, -1, 0, 'N', 1);
            log.record(victim, index_of(victim), 0, 'S', stopped);
            ::kill(pid_t(stopped), SIGSTOP);
            std::this_thread::sleep_for(pause);
            log.record(victim, index_of(victim), 0, 'C', stopped);
            ::kill(pid_t(stopped), SIGCONT);
            log.record(0, -1, 0, 'N', 0);
            sleep_until_or_end(2s);
        } else if (c.nemesis == "kill") {
            std::this_thread::sleep_for(ms(200 + random() % 400));
            const long victim = pick(0.7);
            const int index = index_of(victim);
            if (via_run) {
                // The locksmith process alone: the kernel sends its command SIGTERM
                // (PR_SET_PDEATHSIG), and the worker goes on with its next `locksmith run`.
                const long locksmith = tracker.locksmith_of(victim);
                if (locksmith == 0) continue;
                log.record(0, -1, 0, 'N', 1);
                log.record(victim, index, 0, 'K', locksmith);
                ::kill(pid_t(locksmith), SIGKILL);
                log.record(0, -1, 0, 'N', 0);
                continue;
            }
            log.record(0, -1, 0, 'N', 1);
            log.record(victim, index, 0, 'K');
            ::kill(pid_t(victim), SIGKILL);
            ::waitpid(pid_t(victim), nullptr, 0);
            workers[index] = spawn(index);
            log.record(0, -1, 0, 'N', 0);
        } else if (c.nemesis == "restart") {
            std::this_thread::sleep_for(ms(random() % 300));
            log.record(0, -1, 0, 'N', 1);
            server->kill();
            std::this_thread::sleep_for(1500ms);
            if (!server->start()) out.broken.push_back("the private server did not restart");
            log.record(0, -1, 0, 'N', 0);
            // Past the end of the run if need be: the availability goal is checked over this.
            std::this_thread::sleep_for(std::max<ms>(3s, recover_bound + 500ms));
        } else if (c.nemesis == "clock") {
            // The server's clock jumps forward past the holder's TTL while it holds: the server
            // expires its grant at once and grants the next, though no time passed for the
            // holder. It must hear of it (its next renewal fails) and stop; fencing must refuse
            // what it writes late.
            std::this_thread::sleep_for(ms(random() % 200));
            if (!stretch(workers[int(random() % workers.size())])) continue;
            clock_shift_s += std::chrono::ceil<std::chrono::seconds>(lease + 1s).count();
            log.record(0, -1, 0, 'N', 1);
            std::ofstream(clock_file) << clock_shift_s << "\n";
            std::this_thread::sleep_for(pause);
            log.record(0, -1, 0, 'N', 0);
            sleep_until_or_end(2s);
        } else if (network_nemesis(c.nemesis)) {
            std::this_thread::sleep_for(ms(random() % 200));
            const int index = int(random() % workers.size());
            // Its next critical section is a long one: cut it off once it has begun.
            if (!stretch(workers[index])) continue;
            auto& proxy = *proxies[std::size_t(index)];
            log.record(0, -1, 0, 'N', 1);
            if (c.nemesis == "cut") {
                // The connections end (both sides see it) and new ones go through at once.
                proxy.cut_all();
                std::this_thread::sleep_for(pause);
            } else {
                proxy.set_mode(c.nemesis == "partition" ? test::tcp_fault_proxy::mode::drop
                                                        : test::tcp_fault_proxy::mode::stall);
                std::this_thread::sleep_for(pause);
                proxy.set_mode(test::tcp_fault_proxy::mode::pass);
            }
            log.record(0, -1, 0, 'N', 0);
            sleep_until_or_end(2s);
        } else {
            out.broken.push_back("unknown nemesis " + c.nemesis);
            break;
        }
    }
    sleep_until_or_end(end - std::chrono::steady_clock::now());

    // Stop: every worker finishes its iteration (acquisitions are bounded) and exits.
    { std::ofstream(stop_file) << "stop\n"; }
    const auto stop_bound =
        std::chrono::steady_clock::now() + test::patience(std::chrono::seconds(20));
    for (auto [index, pid] : workers) {
        int status = 0;
        while (::waitpid(pid, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > stop_bound) {
                log.record(pid, index, 0, 'H');
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &status, 0);
                break;
            }
            std::this_thread::sleep_for(20ms);
        }
    }
    // Nothing left behind blocks the next owner: waiters that gave up, holders killed (after
    // their TTL or session at most), the server restarted.
    bool free_after = false;
    try {
        named_lock probe(descriptor->create(*entry->options), std::make_shared<key>(resource_name),
                         lock_options{});
        free_after = probe.try_lock_for(ttl + test::patience(std::chrono::seconds(10)));
    } catch (const std::exception& e) {
        std::cerr << "final probe: " << e.what() << "\n";
    }

    out.verdict = faults::check_history(log_path.string());
    const auto& v = out.verdict;
    if (v.hangs) out.broken.push_back("workers hung");
    if (!free_after) out.broken.push_back("the lock was not free after the run");
    if (v.grants == 0) out.broken.push_back("no grant at all: the run checked nothing");
    if (stretching_nemesis(c.nemesis) && v.faults == 0)
        out.broken.push_back("no worker was cut off: the run checked nothing");
    if (v.acted_untold) out.broken.push_back("(d) holders acted on a lost lock and were not told");
    if (fencing && v.stale_accepted) out.broken.push_back("(b) stale writes accepted (fencing)");
    if (v.stale_grants)
        out.broken.push_back("(b) grants whose fencing token was below an earlier grant's");
    if (crash_release && c.nemesis == "kill" && v.overlaps)
        out.broken.push_back("(a) overlaps under SIGKILL (crash_release)");
    if (c.nemesis == "none" && (v.overlaps || v.lost_increments))
        out.broken.push_back("(a)/(c) overlaps or lost increments without a fault");
    const long late = v.late_recoveries(double(recover_bound.count()));
    if (c.nemesis == "restart" && late)
        out.broken.push_back("(e) " + std::to_string(late) + " of " +
                             std::to_string(v.recoveries.size()) +
                             " restarts without a grant within " +
                             std::to_string(recover_bound.count()) + " ms of the server's return");
    out.json = v.to_json();
    out.json["strategy"] = c.strategy;
    out.json["nemesis"] = c.nemesis;
    out.json["seed"] = c.seed;
    out.json["seconds"] = c.seconds;
    out.json["workers"] = c.workers;
    out.json["via"] = c.via;
    out.json["fencing"] = fencing;
    out.json["crash_release"] = crash_release;
    out.json["expiring"] = expiring;
    out.json["faults_injected"] = faults_done;
    out.json["free_after"] = free_after;
    out.json["recover_bound_ms"] = recover_bound.count();
    out.json["late_recoveries"] = late;
    out.json["broken"] = out.broken;
    out.json["command"] = "locksmith_faults run --strategy " + c.strategy + " --nemesis " +
                          c.nemesis + " --seconds " + std::to_string(c.seconds) + " --seed " +
                          std::to_string(c.seed) + " --workers " + std::to_string(c.workers) +
                          (c.via == "run" ? " --via run" : "");
    server.reset();
    if (out.broken.empty()) {  // keep the evidence of a failure only
        std::error_code ignored;
        fs::remove_all(run_dir);
        fs::remove(run_dir.parent_path(), ignored);  // when no other cell left its evidence
    } else {
        out.json["history"] = log_path.string();
    }
    return out;
}

int report(const cell_outcome& o, const std::optional<std::string>& json_file) {
    std::cout << o.json.dump() << std::endl;
    if (json_file) std::ofstream(*json_file, std::ios::app) << o.json.dump() << "\n";
    if (o.skipped) return test::running_in_ci() ? 1 : skip_status;
    for (const auto& b : o.broken) std::cerr << "BROKEN: " << b << "\n";
    return o.broken.empty() ? 0 : 1;
}

// The CI-sized cells of one strategy: seconds, not minutes (the full run is scripts/faults.sh).
// `via` "network": the partition, stall and cut cells (one fault each), through the library;
// "network-run": the same through `locksmith run`.
int run_ci(const std::string& id, const std::string& via) {
    int worst = 0;
    if (via == "network" || via == "network-run") {
        for (const auto* n : {"partition", "stall", "cut"}) {
            cell c;
            c.strategy = id;
            c.nemesis = n;
            c.via = via == "network" ? "library" : "run";
            c.seconds = 1.5;  // the first fault comes after 1 s, and the run outlasts it
            c.seed = 25;
            const int status = report(run_cell(c), std::nullopt);
            if (status == skip_status) return status;
            worst = std::max(worst, status);
        }
        return worst;
    }
    std::vector<std::string> nemeses = {"none", "pause", "kill"};
    // Restarting a private server: the quick ones in CI, and etcd (about a second to start),
    // whose leases outlive a restart (PostgreSQL's initdb and ZooKeeper's start-up cost seconds
    // of CPU each: the full run covers them).
    if (id == "redis" || id == "memcached" || id == "etcd") nemeses.push_back("restart");
    for (const auto& n : nemeses) {
        cell c;
        c.strategy = id;
        c.nemesis = n;
        c.seconds = n == "pause" ? 3 : n == "restart" ? 4 : 3;
        c.seed = 25;
        c.via = via;
        const int status = report(run_cell(c), std::nullopt);
        if (status == skip_status) return status;
        worst = std::max(worst, status);
    }
    return worst;
}

int usage() {
    std::cerr << "usage: locksmith_faults run --strategy ID --nemesis "
                 "none|pause|kill|restart|partition|stall|cut|clock "
                 "[--seconds S] [--seed N] [--workers K] [--via library|run] [--json FILE]\n"
                 "       locksmith_faults ci ID [run|network|network-run]\n"
                 "       locksmith_faults check LOG\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage();
    const std::string command = argv[1];
    try {
        if (command == "worker" && argc == 3) return run_worker(nlohmann::json::parse(argv[2]));
        if (command == "client" && argc == 3) return run_client(nlohmann::json::parse(argv[2]));
        if (command == "check" && argc == 3) {
            std::cout << faults::check_history(argv[2]).to_json().dump(2) << std::endl;
            return 0;
        }
        const std::string ci_via = argc == 4 ? argv[3] : "library";
        if (command == "ci" &&
            (argc == 3 ||
             (argc == 4 && (ci_via == "run" || ci_via == "network" || ci_via == "network-run")))) {
            const int status = run_ci(argv[2], ci_via);
            test::remove_test_lock_dirs();
            return status;
        }
        if (command == "run") {
            cell c;
            std::optional<std::string> json_file;
            for (int i = 2; i + 1 < argc; i += 2) {
                const std::string flag = argv[i], value = argv[i + 1];
                if (flag == "--strategy")
                    c.strategy = value;
                else if (flag == "--nemesis")
                    c.nemesis = value;
                else if (flag == "--seconds")
                    c.seconds = std::stod(value);
                else if (flag == "--seed")
                    c.seed = std::stoull(value);
                else if (flag == "--workers")
                    c.workers = std::stoi(value);
                else if (flag == "--json")
                    json_file = value;
                else if (flag == "--via" && (value == "library" || value == "run"))
                    c.via = value;
                else
                    return usage();
            }
            if (c.strategy.empty() || c.workers < 1 || c.seconds <= 0) return usage();
            const int status = report(run_cell(c), json_file);
            test::remove_test_lock_dirs();
            return status;
        }
    } catch (const std::exception& e) {
        std::cerr << "locksmith_faults: " << e.what() << "\n";
        return 1;
    }
    return usage();
}
