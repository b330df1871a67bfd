// SPDX-License-Identifier: MIT
// The shm strategy's segment as found in /dev/shm, which any process of the user can write:
// the header check when it is opened (segment::map_existing: size, magic, version, slot count),
// then the slot bookkeeping over whatever the slots hold (reference, unreference, find, in_use,
// average_probes; the reclaim and tombstone clean-up they trigger). The input is a file size
// (4 bytes, little-endian, at most 64 KiB) and the file's first bytes. The mutexes are made
// valid before the bookkeeping runs: a process that writes garbage into a mutex can block its
// lockers, as it could by holding the lock. Properties:
//  - opening throws nothing but backend_error, and accepts only a segment whose slots fit in the
//    file;
//  - the bookkeeping over any slot contents stays within the table and throws nothing but
//    backend_error (a full table).
// The same bytes are then read as a counting semaphore's permits segment (shm_permits.hpp:
// magic, version, limit): opening throws nothing but backend_error and accepts only a limit of
// 1..128 whose permits fit in the file; taking and giving back every permit, counting them and
// a wait that must return at once stay within the mapping.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <locksmith/errors.hpp>

#include "fuzz_support.hpp"
#include "strategies/shm/shm_permits.hpp"
#include "strategies/shm/shm_segment.hpp"

using namespace locksmith;
using namespace locksmith::strategies::shm;
using locksmith::fuzz::check;

namespace {

void make_valid(pthread_mutex_t* m) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 4) return 0;
    std::uint32_t wanted = 0;
    std::memcpy(&wanted, data, 4);
    const auto content = fuzz::as_text(data + 4, size - 4);
    const off_t file_size = off_t(std::max<std::size_t>(wanted % 65537, content.size()));

    static const std::string name = "locksmith-fuzz-" + std::to_string(::getpid());
    const std::string path = std::string(shm_dir) + "/" + name;
    ::unlink(path.c_str());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    check(fd >= 0, "creating the segment file", path);
    const bool written = ::ftruncate(fd, file_size) == 0 &&
                         ::pwrite(fd, content.data(), content.size(), 0) == ssize_t(content.size());
    ::close(fd);
    check(written, "writing the segment file", path);

    std::optional<segment> s;
    try {
        s.emplace(name, 64, 0600, false);
    } catch (const backend_error&) {
    }
    std::optional<permit_file> permits;
    try {
        permits.emplace(path, 0, 0600, false);
    } catch (const backend_error&) {
    }
    ::unlink(path.c_str());
    if (permits) {
        const std::uint32_t n = permits->limit();
        check(n >= 1 && n <= max_permits,
              "a permits segment with a limit out of range was accepted");
        check(permits_size(n) <= std::size_t(file_size),
              "a permits segment whose permits do not fit in the file was accepted");
        for (std::uint32_t i = 0; i < n; ++i) make_valid(&permits->slot(i).mutex);
        for (std::uint32_t i = 0; i < n; ++i) {
            const lock_result r = lock_robust(&permits->slot(i).mutex, true, deadline{});
            check(r == lock_result::acquired, "a fresh permit mutex could not be taken");
        }
        check(permits->held() == n, "held() does not count the permits just taken");
        for (std::uint32_t i = 0; i < n; ++i) unlock_robust(&permits->slot(i).mutex);
        check(permits->held() == 0, "held() counts permits given back");
        (void)permits->wait(deadline{});  // a permit is free: returns at once
    }
    if (!s) return 0;
    const std::uint32_t n = s->slot_count();
    check(n >= 1 && n <= max_slots, "a segment with a slot count out of range was accepted");
    check(reinterpret_cast<char*>(&s->slot(n - 1) + 1) <=
              reinterpret_cast<char*>(s->table_mutex()) - offsetof(shm_table, mutex) + file_size,
          "a segment whose slots do not fit in the file was accepted");

    make_valid(s->table_mutex());
    for (std::uint32_t i = 0; i < n; ++i) make_valid(&s->slot(i).mutex);
    try {
        const name_hash h = stable_name_hash(content.substr(0, 16));
        (void)s->find(h);
        const auto [index, generation] = s->reference(h);
        check(index < n, "reference() gave a slot outside the table");
        check(s->find(h) == index, "find() does not find the slot just referenced");
        s->unreference(index, generation);
        (void)s->in_use();
        (void)s->average_probes();
    } catch (const backend_error&) {
    }
    return 0;
}
