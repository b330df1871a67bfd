// SPDX-License-Identifier: MIT
// A server's wall clock that a test can move: preloaded into a server (LD_PRELOAD), it adds to
// CLOCK_REALTIME (clock_gettime, gettimeofday, time) the seconds written in the file that
// LOCKSMITH_CLOCK_SHIFT_FILE names, read again at every call; the monotonic clocks stay true.
// The faults run's `clock` nemesis jumps a redis server's clock forward with it (issue 25), the
// clock redis's TTLs run on. Debian's faketime cannot do it: libfaketime and the jemalloc that
// redis-server is built with call each other at start-up, and redis never listens
// (libfaketime#130). So this shim allocates nothing and reaches the kernel by raw system calls.
#include <fcntl.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

namespace {

// The shift in seconds (a decimal integer, may be negative); 0 when there is no file.
long shift() {
    static const char* path = nullptr;
    static bool looked = false;
    if (!looked) {
        // Not getenv: the first call may come before the C library is ready (environ is).
        constexpr char name[] = "LOCKSMITH_CLOCK_SHIFT_FILE=";
        for (char** e = environ; e && *e; ++e) {
            size_t i = 0;
            while (name[i] && (*e)[i] == name[i]) ++i;
            if (!name[i]) path = *e + i;
        }
        looked = true;
    }
    if (!path) return 0;
    const long fd = ::syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[32] = {};
    const long n = ::syscall(SYS_read, fd, text, sizeof text - 1);
    ::syscall(SYS_close, fd);
    long value = 0;
    bool negative = false;
    for (long i = 0; i < n; ++i) {
        if (i == 0 && (text[i] == '-' || text[i] == '+')) {
            negative = text[i] == '-';
        } else if (text[i] >= '0' && text[i] <= '9') {
            value = value * 10 + (text[i] - '0');
        } else {
            break;
        }
    }
    return negative ? -value : value;
}

bool wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) {
    const long r = ::syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && ts && wall(id)) ts->tv_sec += shift();
    return int(r);
}

int gettimeofday(struct timeval* tv, void* tz) {
    const long r = ::syscall(SYS_gettimeofday, tv, tz);
    if (r == 0 && tv) tv->tv_sec += shift();
    return int(r);
}

time_t time(time_t* out) {
    struct timespec ts {};
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}

}  // extern "C"
