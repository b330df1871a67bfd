// SPDX-License-Identifier: MIT
// Helpers for the integration suites, which talk to real servers:
//
//   server_precondition  skips a suite (with the reason) when its endpoint variable is unset,
//                        except under CI=true, where the tests run and fail on the missing value
//   endpoint             the variable's value, or a test failure naming the variable
//   private_server       a server process of the test's own (fork/exec), on a free port, that a
//                        test may stop and restart (fault tests cannot stop the shared one)
//   private_postgres     a PostgreSQL of the test's own, through scripts/services.sh
//   shared_counter       an unsynchronised counter in a file: mutual exclusion is what keeps
//                        its read-modify-write from losing updates
//   stuck_refresh_gives_up_at_the_lease_end
//                        a refresh through a proxy that holds every byte ends with the lease
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <locksmith/locksmith.hpp>

#include "support/suite_helpers.hpp"
#include "support/tcp_fault_proxy.hpp"
#include "support/test_environment.hpp"
#include "support/test_paths.hpp"

namespace locksmith::test {

// A precondition decorator: the suite runs when `variable` is set, or under CI (where the
// missing value then fails the tests). Otherwise it is skipped with a message.
struct server_precondition {
    const char* variable;
    boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
        if (env(variable) || running_in_ci()) return true;
        boost::test_tools::assertion_result r(false);
        r.message() << variable << " is unset: start the servers with scripts/services.sh start "
                    << "and eval \"$(scripts/services.sh env)\" (skipped; under CI=true this "
                    << "fails)";
        return r;
    }
};

inline std::string endpoint(const char* variable) {
    auto value = env(variable);
    if (!value)
        BOOST_FAIL(std::string(variable) +
                   " is unset and CI=true: the integration server must be running");
    return *value;
}

// `count` consecutive TCP ports on 127.0.0.1 that nobody has bound right now; the first is
// returned. They lie below Linux's ephemeral range (32768-60999), away from the shared servers'
// ports (scripts/services.sh): a server given a port inside that range can find it taken, when it
// starts or restarts (a ZooKeeper member becoming leader binds its quorum port only then), by the
// local end of any outgoing connection of the machine - an election that never ends, seen in CI.
inline int free_ports(int count) {
    static unsigned next = unsigned(::getpid()) * 7919u;
    constexpr unsigned first = 24000, span = 8000;
    for (int attempt = 0; attempt < 1000; ++attempt) {
        const int base = int(first + (next += 97) % (span - unsigned(count)));
        bool all_free = true;
        for (int port = base; all_free && port < base + count; ++port) {
            const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            // As the servers bind (redis, etcd and ZooKeeper set SO_REUSEADDR): a port that only
            // a closed connection's TIME_WAIT holds is free for them, and without this it blocked
            // every window around it (a 1006-port window found none in CI's rehearsal).
            const int one = 1;
            ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons(std::uint16_t(port));
            all_free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
            ::close(fd);
        }
        if (all_free) return base;
    }
    BOOST_FAIL("no " << count << " free consecutive ports between 24000 and 32000");
    return 0;
}

// A TCP port nobody has bound right now.
inline int free_port() {
    return free_ports(1);
}

inline bool port_answers(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(std::uint16_t(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

class private_server {
  public:
    // `argv` is run as is; it must listen on 127.0.0.1:`port`. stop() sends `stop_signal`
    // (PostgreSQL needs SIGINT, a fast shutdown: after SIGKILL its orphaned backends keep the
    // data folder from starting again).
    private_server(std::vector<std::string> argv, int port, int stop_signal = SIGKILL)
        : argv_(std::move(argv)), port_(port), stop_signal_(stop_signal) {
        start();
    }
    ~private_server() { stop(); }
    private_server(const private_server&) = delete;
    private_server& operator=(const private_server&) = delete;

    int port() const noexcept { return port_; }

    void start() {
        BOOST_REQUIRE(pid_ <= 0);
        pid_ = ::fork();
        BOOST_REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            int null = ::open("/dev/null", O_RDWR);
            ::dup2(null, 0);
            ::dup2(null, 1);
            ::dup2(null, 2);
            std::vector<char*> args;
            for (auto& a : argv_) args.push_back(a.data());
            args.push_back(nullptr);
            ::execvp(args[0], args.data());
            ::_exit(127);
        }
        for (int i = 0; i < 400; ++i) {
            if (port_answers(port_)) return;
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                BOOST_FAIL("private server " + argv_[0] + " exited at start (is it installed?)");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        BOOST_FAIL("private server " + argv_[0] + " did not listen within 10 s");
    }

    // Freezes the server (SIGSTOP): connections stay open but nothing answers, which is what
    // command timeouts are for.
    void pause() const { ::kill(pid_, SIGSTOP); }
    void resume() const { ::kill(pid_, SIGCONT); }

    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, stop_signal_);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
    }

  private:
    std::vector<std::string> argv_;
    int port_;
    int stop_signal_;
    pid_t pid_ = -1;
};

inline std::vector<std::string> private_redis_argv(int port,
                                                   const std::string& password = std::string()) {
    std::vector<std::string> argv = {"redis-server",
                                     "--bind",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(port),
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     std::filesystem::temp_directory_path().string()};
    if (!password.empty()) {
        argv.push_back("--requirepass");
        argv.push_back(password);
    }
    return argv;
}

inline std::vector<std::string> private_memcached_argv(int port) {
    std::vector<std::string> argv = {"memcached", "-l", "127.0.0.1", "-p", std::to_string(port),
                                     "-U",        "0",  "-m",        "16"};
    if (::getuid() == 0) {
        argv.push_back("-u");
        argv.push_back("root");
    }
    return argv;
}

// A counter in a file, incremented with a plain read and write: without mutual exclusion,
// concurrent increments get lost.
class shared_counter {
  public:
    shared_counter() {
        char path[] = "/tmp/locksmith-counter-XXXXXX";
        fd_ = ::mkstemp(path);
        BOOST_REQUIRE(fd_ >= 0);
        path_ = path;
        write(0);
    }
    ~shared_counter() {
        ::close(fd_);
        ::unlink(path_.c_str());
    }
    long read() const {
        char buf[32] = {};
        ::pread(fd_, buf, sizeof buf - 1, 0);
        return std::strtol(buf, nullptr, 10);
    }
    void write(long v) const {
        char buf[32];
        int n = std::snprintf(buf, sizeof buf, "%020ld", v);
        ::pwrite(fd_, buf, std::size_t(n), 0);
    }
    // The race window is widened by a yield between read and write.
    void increment() const {
        long v = read();
        std::this_thread::yield();
        write(v + 1);
    }

  private:
    int fd_ = -1;
    std::string path_;
};

// scripts/services.sh of this tree, which starts the private servers of the fault cases.
inline std::string services_script() {
    return source_path("scripts/services.sh");
}

// A PostgreSQL of the test's own (trusting 127.0.0.1, user postgres, database locktest),
// started and stopped with scripts/services.sh in a state folder and on a port of its own.
class private_postgres {
  public:
    private_postgres()
        : dir_("/tmp/locksmith-pg-private-" + std::to_string(::getpid())), port_(free_port()) {
        start();
    }
    ~private_postgres() {
        run("stop");
        std::system(("rm -rf '" + dir_ + "'").c_str());
    }
    private_postgres(const private_postgres&) = delete;
    private_postgres& operator=(const private_postgres&) = delete;
    int port() const noexcept { return port_; }
    std::string dsn() const {
        return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/locktest";
    }
    void start() { BOOST_REQUIRE_MESSAGE(run("start") == 0, "could not start postgres"); }
    void stop() { BOOST_REQUIRE(run("stop") == 0); }

  private:
    int run(const char* what) const {
        const std::string cmd =
            "LOCKSMITH_SERVICES_DIR='" + dir_ +
            "' LOCKSMITH_SERVICES=postgres LOCKSMITH_POSTGRES_PORT=" + std::to_string(port_) +
            " '" + services_script() + "' " + what + " >/dev/null 2>&1";
        return std::system(cmd.c_str());
    }
    std::string dir_;
    int port_;
};

// A MariaDB of the test's own (user locktest, password locktest-pw, database locktest; root over
// TCP without password, for the test's own looks), started and stopped with scripts/services.sh
// in a state folder and on a port of its own.
class private_mariadb {
  public:
    private_mariadb() : port_(free_port()) {
        char templ[] = "/tmp/locksmith-mariadb-XXXXXX";
        BOOST_REQUIRE(::mkdtemp(templ));
        dir_ = templ;
        start();
    }
    ~private_mariadb() {
        stop();
        std::system(("rm -rf '" + dir_ + "'").c_str());
    }
    private_mariadb(const private_mariadb&) = delete;
    private_mariadb& operator=(const private_mariadb&) = delete;
    int port() const noexcept { return port_; }
    std::string dsn() const {
        return "mysql://locktest:locktest-pw@127.0.0.1:" + std::to_string(port_) + "/locktest";
    }
    void start() { BOOST_REQUIRE_MESSAGE(script("start") == 0, "services.sh start failed"); }
    void stop() { script("stop"); }

  private:
    int script(const std::string& command) const {
        const std::string line =
            "LOCKSMITH_SERVICES_DIR='" + dir_ +
            "' LOCKSMITH_SERVICES=mariadb LOCKSMITH_MARIADB_PORT=" + std::to_string(port_) + " '" +
            services_script() + "' " + command + " >>'" + dir_ + "/script.log' 2>&1";
        return std::system(line.c_str());
    }
    int port_;
    std::string dir_;
};

// A refresh on a dead network (a tcp_fault_proxy in front of host:port that holds every byte)
// gives up at the lease's end, not at the store's request timeout: a reply after it would be of
// no use (issue 25). `make_store(proxy)`: the strategy's store on the proxy, its request timeout
// 30 s.
inline void stuck_refresh_gives_up_at_the_lease_end(
    const std::string& host, int port,
    const std::function<std::shared_ptr<store>(const tcp_fault_proxy&)>& make_store) {
    using namespace std::chrono_literals;
    tcp_fault_proxy proxy(host, port);
    lock_options o;
    o.ttl = 2s;
    named_lock lock(make_store(proxy), std::make_shared<key>(unique_resource("stuck_refresh")), o);
    BOOST_REQUIRE(lock.try_lock());
    proxy.set_mode(tcp_fault_proxy::mode::stall);
    const auto asked = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW(lock.refresh(), error);
    const auto took = std::chrono::steady_clock::now() - asked;
    BOOST_TEST_MESSAGE("the stuck refresh gave up after "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                       << " ms");
    // The lease ends within 2 s; 30 s without the bound. Generous for a loaded machine.
    BOOST_TEST(took < 12s);
    lock.set_auto_release(false);  // its release would wait for the stalled proxy
}

}  // namespace locksmith::test
