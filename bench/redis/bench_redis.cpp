// SPDX-License-Identifier: MIT
// bench_redis: the redis (and memcached) strategies beside raw client loops on the same server.
//
//   uncontended pairs/s  named_lock::lock() + unlock() on one name, one thread, versus a raw
//                        hiredis loop sending the very same commands (SET NX PX, EVALSHA of our
//                        release script) on one connection, and the classic raw pair
//                        (SET NX PX + EVALSHA compare-and-delete)
//   hand-over latency    a holder releases while a waiter blocks in try_lock_for: time from the
//                        release call to the waiter's return, with pub/sub waiting and with the
//                        same store polled (named_lock's backoff, native_wait hidden)
//
//   sentinel             uncontended pairs behind Sentinel (WAIT per grant) beside the single
//                        server and beside the same master without WAIT
//   cluster              uncontended pairs on a Redis Cluster, with and without WAIT, beside the
//                        single server
//
// Usage: bench_redis [pairs] [rounds]; endpoints from LOCKSMITH_TEST_REDIS_URL,
// LOCKSMITH_TEST_REDIS_SENTINELS (with _SENTINEL_MASTER and _SENTINEL_PASSWORD),
// LOCKSMITH_TEST_REDIS_CLUSTER (with _CLUSTER_PASSWORD) and
// LOCKSMITH_TEST_MEMCACHED (scripts/services.sh env). Benchmarks are not tests: nothing here
// asserts a speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>
#include <libmemcached/memcached.h>
#include <netinet/tcp.h>

#include <locksmith/locksmith.hpp>
#include <locksmith/strategies/memcached.hpp>
#include <locksmith/strategies/redis.hpp>

#include "redis_scripts.hpp"  // locksmith_redis_scripts (strategies/redis/CMakeLists.txt)

using namespace locksmith;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

double seconds_since(steady::time_point t) {
    return std::chrono::duration<double>(steady::now() - t).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void row(const char* what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("| %s | %.0f | %.0f | %.0f |\n", what, v.front(), v[v.size() / 2], v.back());
}

lock_options long_ttl() {
    lock_options o;
    o.ttl = 30s;
    return o;
}

// Hides native_wait, so that named_lock polls the same backend with its backoff.
class polling_store final : public store {
  public:
    explicit polling_store(std::shared_ptr<store> inner)
        : store(inner->strategy(), inner->capabilities() & ~capability::native_wait),
          inner_(std::move(inner)) {}

  protected:
    bool do_try_acquire(key& k, lock_mode m, std::chrono::milliseconds ttl) override {
        return inner_->try_acquire(k, m, ttl);
    }
    bool do_refresh(key& k, std::chrono::milliseconds ttl) override {
        return inner_->refresh(k, ttl);
    }
    void do_release(key& k) override { inner_->release(k); }
    bool do_holds(const key& k) override { return inner_->holds(k); }

  private:
    std::shared_ptr<store> inner_;
};

redisReply* must(redisContext* c, void* r) {
    if (r == nullptr) {
        std::fprintf(stderr, "hiredis: %s\n", c->errstr);
        std::exit(1);
    }
    auto* reply = static_cast<redisReply*>(r);
    if (reply->type == REDIS_REPLY_ERROR) {
        std::fprintf(stderr, "redis: %s\n", reply->str);
        std::exit(1);
    }
    return reply;
}

std::string load(redisContext* c, const char* script) {
    auto* r = must(c, redisCommand(c, "SCRIPT LOAD %s", script));
    std::string sha(r->str, r->len);
    freeReplyObject(r);
    return sha;
}

// The commands named_lock sends for one pair, on one connection, with nothing around them.
double raw_same_scripts(redisContext* c, const std::string& prefix, int pairs) {
    const std::string release = load(c, strategies::redis_detail::release_script);
    const std::string token = random_token();
    const std::string lock = prefix + "lock:raw", wait = prefix + "wait:raw",
                      queue = prefix + "queue:raw", readers = prefix + "readers:raw",
                      chan = prefix + "chan:raw";
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        freeReplyObject(
            must(c, redisCommand(c, "SET %s %s NX PX %s", lock.c_str(), token.c_str(), "30000")));
        freeReplyObject(must(c, redisCommand(c, "EVALSHA %s 4 %s %s %s %s %s %s", release.c_str(),
                                             lock.c_str(), wait.c_str(), queue.c_str(),
                                             readers.c_str(), token.c_str(), chan.c_str())));
    }
    return pairs / seconds_since(start);
}

// The textbook pair: SET NX PX, then a compare-and-delete script.
double raw_classic(redisContext* c, const std::string& prefix, int pairs) {
    const std::string del =
        load(c,
             "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
             "return 0");
    const std::string token = random_token();
    const std::string lock = prefix + "lock:classic";
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        freeReplyObject(
            must(c, redisCommand(c, "SET %s %s NX PX 30000", lock.c_str(), token.c_str())));
        freeReplyObject(must(
            c, redisCommand(c, "EVALSHA %s 1 %s %s", del.c_str(), lock.c_str(), token.c_str())));
    }
    return pairs / seconds_since(start);
}

double library_pairs(const std::shared_ptr<store>& s, const std::string& name, int pairs) {
    named_lock lock(s, std::make_shared<key>(name), long_ttl());
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        lock.lock();
        lock.unlock();
    }
    return pairs / seconds_since(start);
}

// One owner taking and giving back a permit of `name`, a counting semaphore of `limit` permits
// whose other limit - 1 are held by other owners all along: each grant takes the last permit.
double permit_pairs(const std::shared_ptr<store>& s, const std::string& name, std::uint32_t limit,
                    int pairs) {
    auto permit = [&] {
        auto k = std::make_shared<key>(name);
        k->set_limit(limit);
        return named_semaphore(s, k, long_ttl());
    };
    std::vector<named_semaphore> others;
    for (std::uint32_t i = 1; i < limit; ++i) {
        others.push_back(permit());
        others.back().acquire();
    }
    auto mine = permit();
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        mine.acquire();
        mine.release();
    }
    return pairs / seconds_since(start);
}

// The textbook memcached pair with libmemcached (classic protocol): add, then a blind delete.
double raw_memcached_textbook(memcached_st* m, int pairs) {
    const std::string token = random_token();
    const std::string item = "locksmith-bench:raw";
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        if (memcached_add(m, item.data(), item.size(), token.data(), token.size(), 31, 0) !=
            MEMCACHED_SUCCESS)
            std::exit(1);
        memcached_delete(m, item.data(), item.size(), 0);
    }
    return pairs / seconds_since(start);
}

// A connected, blocking TCP socket with TCP_NODELAY to host:port.
int memcached_socket(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
        std::exit(1);
    int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) std::exit(1);
    ::freeaddrinfo(found);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Sends `request` and reads the reply line (through "\r\n") into `reply`.
void round_trip(int fd, const std::string& request, std::string& reply) {
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size()))
        std::exit(1);
    reply.clear();
    char buffer[256];
    while (reply.size() < 2 || reply.compare(reply.size() - 2, 2, "\r\n") != 0) {
        ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) std::exit(1);
        reply.append(buffer, std::size_t(n));
    }
}

// The commands the memcached strategy sends for one pair, on one plain socket: `ms ... ME c`
// (add, returns the CAS id), then `md ... C<cas>` (delete if the CAS is still ours).
double raw_memcached_meta(int fd, int pairs) {
    const std::string token = random_token();
    const std::string item = "locksmith-bench:raw-meta";
    const std::string add = "ms " + item + " 32 T31 ME c\r\n" + token + "\r\n";
    std::string reply, remove;
    auto start = steady::now();
    for (int i = 0; i < pairs; ++i) {
        round_trip(fd, add, reply);  // "HD c<cas>\r\n"
        if (reply.compare(0, 4, "HD c") != 0) std::exit(1);
        remove.assign("md ").append(item).append(" C").append(reply, 4, reply.size() - 6);
        remove.append("\r\n");
        round_trip(fd, remove, reply);
        if (reply != "HD\r\n") std::exit(1);
    }
    return pairs / seconds_since(start);
}

// Milliseconds from the holder's unlock() to the waiter's return, `rounds` times.
std::vector<double> handover(const std::shared_ptr<store>& holder_store,
                             const std::shared_ptr<store>& waiter_store, const std::string& name,
                             int rounds) {
    std::vector<double> out;
    for (int r = 0; r < rounds; ++r) {
        named_lock holder(holder_store, std::make_shared<key>(name), long_ttl());
        named_lock waiter(waiter_store, std::make_shared<key>(name), long_ttl());
        holder.lock();
        steady::time_point got{};
        std::thread t([&] {
            if (waiter.try_lock_for(10s)) got = steady::now();
        });
        std::this_thread::sleep_for(20ms);
        auto released = steady::now();
        holder.unlock();
        t.join();
        out.push_back(std::chrono::duration<double, std::milli>(got - released).count());
        waiter.unlock();
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The cost of WAIT: the same pairs on the single server, on the Sentinel rig's master by URL
// (replicated, no WAIT) and behind Sentinel (every grant waits for the replica: WAIT 1).
void sentinel_rows(const std::shared_ptr<store>& single, const std::string& sentinels, int pairs,
                   int rounds) {
    const char* master = std::getenv("LOCKSMITH_TEST_REDIS_SENTINEL_MASTER");
    const char* password = std::getenv("LOCKSMITH_TEST_REDIS_SENTINEL_PASSWORD");
    if (!master || !password) return;
    auto list = nlohmann::json::array();
    for (std::size_t from = 0; from <= sentinels.size();) {
        const auto to = std::min(sentinels.find(',', from), sentinels.size());
        list.push_back(sentinels.substr(from, to - from));
        from = to + 1;
    }
    const nlohmann::json j{{"sentinels", list},
                           {"master_name", master},
                           {"sentinel_password", password},
                           {"password", password},
                           {"key_prefix", "locksmith-bench:"}};
    auto behind = strategies::make_redis_store(strategies::redis_options::from_json(j));
    // The master's address, as the Sentinels name it: the same server without WAIT.
    const auto first = list.front().get<std::string>();
    redisContext* c = redisConnect(first.substr(0, first.rfind(':')).c_str(),
                                   std::atoi(first.c_str() + first.rfind(':') + 1));
    if (!c || c->err) return;
    redisReply* auth = static_cast<redisReply*>(redisCommand(c, "AUTH %s", password));
    if (auth) freeReplyObject(auth);
    redisReply* addr =
        static_cast<redisReply*>(redisCommand(c, "SENTINEL get-master-addr-by-name %s", master));
    if (!addr || addr->type != REDIS_REPLY_ARRAY || addr->elements != 2) return;
    strategies::redis_options direct;
    direct.endpoint.host = addr->element[0]->str;
    direct.endpoint.port = std::atoi(addr->element[1]->str);
    direct.endpoint.password = password;
    direct.key_prefix = "locksmith-bench:";
    freeReplyObject(addr);
    redisFree(c);
    auto unreplicated = strategies::make_redis_store(direct);
    std::vector<double> one, master_only, waited;
    for (int r = 0; r < rounds; ++r) {  // alternating, as above
        one.push_back(library_pairs(single, "bench-single", pairs));
        master_only.push_back(library_pairs(unreplicated, "bench-master", pairs));
        waited.push_back(library_pairs(behind, "bench-sentinel", pairs));
    }
    std::printf(
        "\nredis behind Sentinel: %d pairs x %d rounds\n\n| loop | min pairs/s | median pairs/s "
        "| max pairs/s |\n|---|---:|---:|---:|\n",
        pairs, rounds);
    row("`named_lock::lock(); unlock()` on the single server (`url`)", one);
    row("the same on the Sentinel rig's master by `url` (replicated, no WAIT)", master_only);
    row("the same behind Sentinel (`sentinels`: SET NX PX, WAIT 1; release)", waited);
    std::printf("\nratio sentinel / single server: %.2f; / its master without WAIT: %.2f\n",
                median(waited) / median(one), median(waited) / median(master_only));
}

// The cost of a cluster: the same pairs on the single server and on a Redis Cluster (the slot's
// master found from the client's slot map), without WAIT (routing alone) and with WAIT 1.
void cluster_rows(const std::shared_ptr<store>& single, const std::string& nodes, int pairs,
                  int rounds) {
    const char* password = std::getenv("LOCKSMITH_TEST_REDIS_CLUSTER_PASSWORD");
    if (!password) return;
    auto list = nlohmann::json::array();
    for (std::size_t from = 0; from <= nodes.size() && list.size() < 3;) {
        const auto to = std::min(nodes.find(',', from), nodes.size());
        list.push_back(nodes.substr(from, to - from));
        from = to + 1;
    }
    auto make = [&](int wait_replicas) {
        const nlohmann::json j{{"cluster", list},
                               {"password", password},
                               {"wait_replicas", wait_replicas},
                               {"key_prefix", "locksmith-bench:"}};
        return strategies::make_redis_store(strategies::redis_options::from_json(j));
    };
    auto routed = make(0);
    auto waited = make(1);
    std::vector<double> one, unconfirmed, confirmed;
    for (int r = 0; r < rounds; ++r) {  // alternating, as above
        one.push_back(library_pairs(single, "bench-single", pairs));
        unconfirmed.push_back(library_pairs(routed, "bench-cluster", pairs));
        confirmed.push_back(library_pairs(waited, "bench-cluster-wait", pairs));
    }
    std::printf(
        "\nredis cluster: %d pairs x %d rounds\n\n| loop | min pairs/s | median pairs/s "
        "| max pairs/s |\n|---|---:|---:|---:|\n",
        pairs, rounds);
    row("`named_lock::lock(); unlock()` on the single server (`url`)", one);
    row("the same on a Redis Cluster (`cluster`, `wait_replicas` 0)", unconfirmed);
    row("the same on a Redis Cluster (`cluster`, `wait_replicas` 1: WAIT per grant)", confirmed);
    std::printf("\nratio cluster / single server: %.2f without WAIT, %.2f with WAIT 1\n",
                median(unconfirmed) / median(one), median(confirmed) / median(one));
}

}  // namespace

int main(int argc, char** argv) {
    const int pairs = argc > 1 ? std::atoi(argv[1]) : 20000;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const char* url = std::getenv("LOCKSMITH_TEST_REDIS_URL");
    if (!url) {
        std::fprintf(stderr,
                     "LOCKSMITH_TEST_REDIS_URL is unset (scripts/services.sh start; "
                     "eval \"$(scripts/services.sh env)\")\n");
        return 2;
    }
    strategies::redis_options o;
    o.endpoint = strategies::parse_redis_url(url);
    o.key_prefix = "locksmith-bench:";
    auto s = strategies::make_redis_store(o);
    redisContext* c = redisConnect(o.endpoint.host.c_str(), o.endpoint.port);
    if (!c || c->err) return 1;

    std::vector<double> lib, same, classic;
    for (int r = 0; r < rounds; ++r) {  // alternating, so that drift hits all loops alike
        lib.push_back(library_pairs(s, "bench", pairs));
        same.push_back(raw_same_scripts(c, o.key_prefix, pairs));
        classic.push_back(raw_classic(c, o.key_prefix, pairs));
    }
    std::printf(
        "redis: %d pairs x %d rounds\n\n| loop | min pairs/s | median pairs/s | max pairs/s |\n"
        "|---|---:|---:|---:|\n",
        pairs, rounds);
    row("raw hiredis, our commands (SET NX PX; EVALSHA of our release script), one connection",
        same);
    row("raw hiredis, SET NX PX + EVALSHA compare-and-delete", classic);
    row("`named_lock::lock(); unlock()` on `redis`", lib);
    std::printf("\nratio library / raw same commands: %.2f; / raw classic: %.2f\n",
                median(lib) / median(same), median(lib) / median(classic));

    // Permits beside the lock, in the same rounds.
    std::vector<double> locks, permits1, permits4, permits8;
    for (int r = 0; r < rounds; ++r) {
        locks.push_back(library_pairs(s, "bench", pairs));
        permits1.push_back(permit_pairs(s, "bench-permits-1", 1, pairs));
        permits4.push_back(permit_pairs(s, "bench-permits-4", 4, pairs));
        permits8.push_back(permit_pairs(s, "bench-permits-8", 8, pairs));
    }
    std::printf(
        "\ncounting semaphores: %d pairs x %d rounds (N - 1 permits held by others)\n\n"
        "| loop | min pairs/s | median pairs/s | max pairs/s |\n|---|---:|---:|---:|\n",
        pairs, rounds);
    row("`named_lock::lock(); unlock()` (the baseline)", locks);
    row("`named_semaphore::acquire(); release()`, N = 1", permits1);
    row("`named_semaphore::acquire(); release()`, N = 4", permits4);
    row("`named_semaphore::acquire(); release()`, N = 8", permits8);
    std::printf("\nratio permits / lock: N = 1 %.2f, N = 4 %.2f, N = 8 %.2f\n",
                median(permits1) / median(locks), median(permits4) / median(locks),
                median(permits8) / median(locks));

    auto waiter_store = strategies::make_redis_store(o);
    auto pubsub = handover(s, waiter_store, "handover", 200);
    auto polled = handover(s, std::make_shared<polling_store>(waiter_store), "handover-poll", 200);
    auto pct = [](const std::vector<double>& v, double p) {
        return v[std::size_t(p * (v.size() - 1))];
    };
    std::printf(
        "\nhand-over latency, 200 rounds (ms from unlock() to the waiter's return)\n\n"
        "| waiter | p50 | p99 | max |\n|---|---:|---:|---:|\n"
        "| pub/sub (native_wait) | %.3f | %.3f | %.3f |\n"
        "| polling (named_lock backoff 0.5 ms .. 50 ms) | %.3f | %.3f | %.3f |\n",
        pct(pubsub, 0.5), pct(pubsub, 0.99), pubsub.back(), pct(polled, 0.5), pct(polled, 0.99),
        polled.back());
    redisFree(c);

    if (const char* sentinels = std::getenv("LOCKSMITH_TEST_REDIS_SENTINELS"))
        sentinel_rows(s, sentinels, pairs, rounds);
    if (const char* nodes = std::getenv("LOCKSMITH_TEST_REDIS_CLUSTER"))
        cluster_rows(s, nodes, pairs, rounds);

    if (const char* servers = std::getenv("LOCKSMITH_TEST_MEMCACHED")) {
        strategies::memcached_options mo;
        mo.servers = strategies::parse_memcached_servers(servers);
        mo.key_prefix = "locksmith-bench:";
        auto ms = strategies::make_memcached_store(mo);
        memcached_st* m = memcached_create(nullptr);
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
        memcached_server_add(m, mo.servers[0].first.c_str(), in_port_t(mo.servers[0].second));
        const int fd = memcached_socket(mo.servers[0].first, mo.servers[0].second);
        std::vector<double> mlib, mmeta, mtextbook;
        for (int r = 0; r < rounds; ++r) {  // alternating, as above
            mlib.push_back(library_pairs(ms, "bench", pairs));
            mmeta.push_back(raw_memcached_meta(fd, pairs));
            mtextbook.push_back(raw_memcached_textbook(m, pairs));
        }
        std::printf(
            "\nmemcached: %d pairs x %d rounds\n\n| loop | min pairs/s | median pairs/s | "
            "max pairs/s |\n|---|---:|---:|---:|\n",
            pairs, rounds);
        row("raw socket, the strategy's meta commands: ms ME c + md C<cas>", mmeta);
        row("raw libmemcached add + blind delete (classic protocol)", mtextbook);
        row("`named_lock::lock(); unlock()` on `memcached` (ms ME c; md C<cas>)", mlib);
        std::printf("\nratio library / raw same commands: %.2f; / raw textbook: %.2f\n",
                    median(mlib) / median(mmeta), median(mlib) / median(mtextbook));
        ::close(fd);
        memcached_free(m);
    }
    return 0;
}
