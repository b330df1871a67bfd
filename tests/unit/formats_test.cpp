// SPDX-License-Identifier: MIT
// The frozen formats (doc/FORMATS.md): where every strategy puts a lock name, pinned for a few
// names. Two locksmith versions on one host or cluster that derive a name's file, slot, key or
// row differently give that name to two holders at once, so every expected value below is a
// literal, written once and never regenerated: a change that fails here changes the format.
#define BOOST_TEST_MODULE formats
#include <boost/test/unit_test.hpp>

#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <locksmith/author/strategy_support.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/strategies/file.hpp>
#include <locksmith/strategies/semaphore.hpp>
#include <locksmith/strategies/shm.hpp>
#include <locksmith/strategies/simple.hpp>
#ifdef LOCKSMITH_FORMATS_REDIS
#include <locksmith/strategies/redis.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_MEMCACHED
#include <locksmith/strategies/memcached.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_SQL
#include <locksmith/strategies/sql.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_PG_ADVISORY
#include <locksmith/strategies/pg_advisory.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_MYSQL_GET_LOCK
#include <locksmith/strategies/mysql_get_lock.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_ZOOKEEPER
#include <locksmith/strategies/zookeeper.hpp>
#endif
#ifdef LOCKSMITH_FORMATS_ETCD
#include <locksmith/strategies/etcd.hpp>
#endif

#include "local/local_helpers.hpp"
#include "strategies/shm/shm_segment.hpp"

using namespace locksmith;
using namespace locksmith::strategies;
using locksmith::test::temp_dir;

namespace {

// The names pinned: plain ASCII, UTF-8 with a '/', a path climbing out with "..", one longer
// than every backend's readable limit, and one with spaces (memcached hashes it, MariaDB not).
const std::string long_name = std::string(300, 'z') + "/end";
struct pinned {
    const char* label;
    std::string name;
    const char* hash;         // stable_name_hash(name).hex(); also sql's key_id
    const char* file;         // `file`'s lock file (`simple`'s: .slock instead of .lock)
    const char* memcached;    // memcached_item_key("locksmith:", name)
    std::int64_t pg;          // pg_advisory_lock_key(name)
    const char* mysql;        // mysql_get_lock_name(name)
    const char* redis_tag;    // the hash tag of the name's keys in Redis Cluster
    std::uint32_t shm_slot;   // the slot of a new name in an empty table of 4096
    std::uint32_t semaphore;  // the semaphore of the name in a set of 128
    std::int32_t permit_key;  // semaphore_permit_key(1000, name)
};

const pinned names[] = {
    {"ascii", "nightly-backup", "5c689657bc6da78f6add995f8ae8e545",
     "nightly-backup.5c689657bc6da78f6add995f8ae8e545.lock", "locksmith:nightly-backup",
     6658737352634902415LL, "locksmith:nightly-backup", "{2287787f}", 1349, 69, 60779196},
    {"utf8", "d\xc3\xa9ploiement/\xc3\xa9t\xc3\xa9", "e3476da35e8998648cf2c0cc2dcabc91",
     "d-ploiement-t-.e3476da35e8998648cf2c0cc2dcabc91.lock",
     "locksmith:#8c52b2755155b5fe4400c40012a44be1ecee9709cc376089bb9e7ef0bb70d562",
     -2069564955320280988LL, "locksmith#e3476da35e8998648cf2c0cc2dcabc91", "{31481f3d}", 3217, 17,
     2009156316},
    {"dots", "../../etc/passwd", "60399af2505e8e88988626f35d7a1d65",
     "etc-passwd.60399af2505e8e88988626f35d7a1d65.lock", "locksmith:../../etc/passwd",
     6933743466834726536LL, "locksmith:../../etc/passwd", "{6fadc99a}", 3429, 101, 2115776087},
    {"long", long_name, "d1e6f57c8c6943f3ae6fdd75b27abca0",
     "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz.d1e6f57c8c6943f3ae6fdd75b27abca0.lock",
     "locksmith:#4df7d4632fa3161b9119b77c6289ef4ba79f276f5c6485b1b27e2f8fac2abe5b",
     -3321697759858703373LL, "locksmith#d1e6f57c8c6943f3ae6fdd75b27abca0", "{1e449b1b}", 3232, 32,
     619327109},
    {"spaces", "a name with spaces", "7cd91739d1f01b95b096805e0146f35d",
     "a-name-with-spaces.7cd91739d1f01b95b096805e0146f35d.lock",
     "locksmith:#43998174df22ca59f03f9a084c8dcef22368d044cf206acc8e7e4d6c17655e1f",
     8996247267752024981LL, "locksmith:a name with spaces", "{4b0dadb4}", 861, 93, 1035345333},
};

template <class T, class U>
void pin(const pinned& p, const char* what, const T& got, const U& expected) {
    BOOST_TEST(got == expected,
               what << " of the name '" << p.label << "' is now " << got << ", pinned " << expected
                    << ": this changes the format (doc/FORMATS.md), and this version would give "
                       "that name to a second holder beside older ones: bump the major version "
                       "and say so in CHANGELOG.md, or keep the derivation");
}

// The one lock file in `dir` (the guard file of `simple` aside).
std::string file_in(const std::filesystem::path& dir) {
    std::string found;
    for (auto& e : std::filesystem::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (name == ".locksmith-simple.guard") continue;
        BOOST_TEST(found.empty(), "a second file in the lock directory: " << name);
        found = name;
    }
    return found;
}

named_lock lock_of(const std::shared_ptr<store>& s, const std::string& name) {
    return named_lock(s, std::make_shared<key>(name), lock_options{});
}

}  // namespace

BOOST_AUTO_TEST_CASE(name_hash_is_pinned) {
    for (const auto& p : names) pin(p, "stable_name_hash", stable_name_hash(p.name).hex(), p.hash);
    // The hash reads the name as little-endian words on every host: pinned through its first
    // word's byte order too (a big-endian host must not compute another value).
    BOOST_TEST(stable_name_hash("").hex() == "27b11bdadf60c71157484e755d1fcfd5");
    BOOST_TEST(stable_name_hash("abcdefgh").hex() == "8b91e273d91841408c1e15abe4c2881d");
}

BOOST_AUTO_TEST_CASE(file_and_simple_lock_files_are_pinned) {
    for (const auto& p : names) {
        temp_dir dir("formats"), sdir("formats");
        file_options fo;
        fo.lock_dir = dir.path();
        auto lock = lock_of(make_file_store(fo), p.name);
        BOOST_REQUIRE(lock.try_lock());
        pin(p, "file's lock file", file_in(dir.path()), p.file);
        lock.unlock();

        simple_options so;
        so.lock_dir = sdir.path();
        auto slock = lock_of(make_simple_store(so), p.name);
        BOOST_REQUIRE(slock.try_lock());
        std::string slock_file = p.file;
        slock_file.replace(slock_file.size() - 5, 5, ".slock");
        pin(p, "simple's lock file", file_in(sdir.path()), slock_file);
        slock.unlock();
    }
}

BOOST_AUTO_TEST_CASE(shm_slots_are_pinned) {
    BOOST_TEST(default_shm_segment() == "locksmith-" + std::to_string(::getuid()));
    for (const auto& p : names) {
        const std::string segment_name = locksmith::test::run_unique("locksmith-formats");
        shm_options o;
        o.segment = segment_name;
        o.slots = 4096;
        {
            auto lock = lock_of(make_shm_store(o), p.name);
            BOOST_REQUIRE(lock.try_lock());
            shm::segment seen(segment_name, 4096, 0600, false);
            const auto slot = seen.find(stable_name_hash(p.name));
            BOOST_REQUIRE(slot.has_value());
            pin(p, "shm's slot", *slot, p.shm_slot);
            lock.unlock();
        }
        remove_shm_segment(segment_name);
    }
}

BOOST_AUTO_TEST_CASE(semaphore_keys_and_slots_are_pinned) {
    // The default set's key: per user, from "locksmith.semaphore.<uid>".
    BOOST_TEST(
        default_semaphore_key() ==
        std::int32_t(stable_name_hash("locksmith.semaphore." + std::to_string(::getuid())).low &
                     0x7fffffff));
    BOOST_TEST(std::int32_t(stable_name_hash("locksmith.semaphore.0").low & 0x7fffffff) ==
               487906989);
    BOOST_TEST(std::int32_t(stable_name_hash("locksmith.semaphore.1000").low & 0x7fffffff) ==
               1877317278);
    for (const auto& p : names) {
        pin(p, "semaphore_permit_key(1000, name)", semaphore_permit_key(1000, p.name),
            p.permit_key);
        // A set of its own, to see which of its 128 semaphores the name takes.
        semaphore_options o;
        o.key = 0x4c000000 | std::int32_t(::getpid() & 0xffffff);
        o.semaphores = 128;
        auto lock = lock_of(make_semaphore_store(o), p.name);
        BOOST_REQUIRE(lock.try_lock());
        const int id = ::semget(o.key, 0, 0);
        BOOST_REQUIRE(id >= 0);
        int taken = -1;
        for (int i = 0; i < 128; ++i)
            if (::semctl(id, i, GETVAL) == 0) taken = i;
        pin(p, "the semaphore of the name", taken, int(p.semaphore));
        lock.unlock();
        ::semctl(id, 0, IPC_RMID);
    }
}

#ifdef LOCKSMITH_FORMATS_REDIS
BOOST_AUTO_TEST_CASE(redis_keys_are_pinned) {
    for (const auto& p : names) {
        pin(p, "redis lock key", redis_key("locksmith:", redis_key_kind::lock, p.name, false),
            "locksmith:lock:" + p.name);
        pin(p, "redis fence key", redis_key("app:", redis_key_kind::fence, p.name, false),
            "app:fence:" + p.name);
        pin(p, "redis cluster lock key",
            redis_key("locksmith:", redis_key_kind::lock, p.name, true),
            "locksmith:lock:" + std::string(p.redis_tag) + p.name);
        pin(p, "redis cluster queue key",
            redis_key("locksmith:", redis_key_kind::queue, p.name, true),
            "locksmith:queue:" + std::string(p.redis_tag) + p.name);
        pin(p, "redis cluster fence key",
            redis_key("locksmith:", redis_key_kind::fence, p.name, true),
            "locksmith:fence:" + std::string(p.redis_tag) + p.name);
        // Every kind, once each: a kind's text is part of the frozen format too.
        const std::pair<redis_key_kind, const char*> kinds[] = {
            {redis_key_kind::lock, "lock:"},       {redis_key_kind::fence, "fence:"},
            {redis_key_kind::wait, "wait:"},       {redis_key_kind::queue, "queue:"},
            {redis_key_kind::readers, "readers:"}, {redis_key_kind::chan, "chan:"},
            {redis_key_kind::permits, "permits:"}, {redis_key_kind::limit, "limit:"}};
        for (const auto& [kind, text] : kinds)
            pin(p, (std::string("redis ") + text + " key").c_str(),
                redis_key("x:", kind, p.name, false), "x:" + std::string(text) + p.name);
    }
}
#endif

#ifdef LOCKSMITH_FORMATS_MEMCACHED
BOOST_AUTO_TEST_CASE(memcached_keys_and_servers_are_pinned) {
    for (const auto& p : names) {
        pin(p, "memcached item key", memcached_item_key("locksmith:", p.name), p.memcached);
        // A semaphore's items: <base>.limit and <base>.permit.<i>.
        pin(p, "memcached semaphore base", memcached_semaphore_key("locksmith:", p.name),
            p.memcached);
    }
    // A name that fits an item key but not with ".permit.NNNN" after it: hashed.
    const std::string fits_a_lock_only(235, 'y');
    BOOST_TEST(memcached_item_key("locksmith:", fits_a_lock_only) ==
               "locksmith:" + fits_a_lock_only);
    BOOST_TEST(memcached_semaphore_key("locksmith:", fits_a_lock_only) ==
               "locksmith:#" + sha256_hex(fits_a_lock_only));
    // Which of two servers holds an item: the higher weight.
    BOOST_TEST(memcached_server_weight("10.0.0.1:11211", "locksmith:nightly-backup") ==
               16266320370169891104u);
    BOOST_TEST(memcached_server_weight("10.0.0.2:11211", "locksmith:nightly-backup") ==
               2091071105312699466u);
}
#endif

#ifdef LOCKSMITH_FORMATS_SQL
BOOST_AUTO_TEST_CASE(sql_rows_are_pinned) {
    for (const auto& p : names) pin(p, "sql key_id", sql_key_id(p.name), p.hash);
}
#endif

#ifdef LOCKSMITH_FORMATS_PG_ADVISORY
BOOST_AUTO_TEST_CASE(pg_advisory_keys_are_pinned) {
    for (const auto& p : names) pin(p, "pg_advisory key", pg_advisory_lock_key(p.name), p.pg);
}
#endif

#ifdef LOCKSMITH_FORMATS_MYSQL_GET_LOCK
BOOST_AUTO_TEST_CASE(mysql_get_lock_names_are_pinned) {
    for (const auto& p : names) pin(p, "GET_LOCK name", mysql_get_lock_name(p.name), p.mysql);
}
#endif

#ifdef LOCKSMITH_FORMATS_ZOOKEEPER
BOOST_AUTO_TEST_CASE(zookeeper_paths_are_pinned) {
    for (const auto& p : names)
        pin(p, "zookeeper parent node", zookeeper_lock_parent("/locksmith", p.name),
            "/locksmith/" + std::string(p.hash));
    for (const auto& p : names) {
        pin(p, "zookeeper permits parent", zookeeper_permit_parent("/locksmith", p.name),
            "/locksmith/" + std::string(p.hash) + ".permits");
        pin(p, "zookeeper limit node", zookeeper_permit_limit_node("/locksmith", p.name),
            "/locksmith/" + std::string(p.hash) + ".limit");
    }
}
#endif

#ifdef LOCKSMITH_FORMATS_ETCD
BOOST_AUTO_TEST_CASE(etcd_keys_are_pinned) {
    for (const auto& p : names)
        pin(p, "etcd queue prefix", etcd_lock_queue("locksmith/", p.name),
            "locksmith/" + std::string(p.hash) + "/");
    for (const auto& p : names) {
        pin(p, "etcd permits prefix", etcd_permit_queue("locksmith/", p.name),
            "locksmith/" + std::string(p.hash) + ".permits/");
        pin(p, "etcd limit key", etcd_permit_limit_key("locksmith/", p.name),
            "locksmith/" + std::string(p.hash) + ".limit");
    }
}
#endif
