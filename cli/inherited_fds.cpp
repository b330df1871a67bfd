// SPDX-License-Identifier: MIT
#include "inherited_fds.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace locksmith::cli {
namespace {

struct inherited {
    int fd;
    dev_t dev;
    ino_t ino;
};

std::vector<inherited>& remembered() {
    static std::vector<inherited> fds;
    return fds;
}

bool remembered_yet = false;

// The open descriptors, from /proc/self/fd; without /proc, every number below the descriptor
// limit (capped: a limit of a million would cost a million calls) that fcntl knows.
std::vector<int> open_fds() {
    std::vector<int> out;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        const int own = ::dirfd(dir);
        while (const dirent* e = ::readdir(dir)) {
            char* end = nullptr;
            const long fd = std::strtol(e->d_name, &end, 10);
            if (end != e->d_name && *end == '\0' && fd != own && fd >= 0 && fd <= INT_MAX)
                out.push_back(int(fd));
        }
        ::closedir(dir);
        return out;
    }
    rlimit limit{};
    rlim_t last = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        last = std::min<rlim_t>(limit.rlim_cur, 65536);
    for (int fd = 0; rlim_t(fd) < last; ++fd)
        if (::fcntl(fd, F_GETFD) >= 0) out.push_back(fd);
    return out;
}

}  // namespace

void remember_inherited_fds() {
    auto& fds = remembered();
    fds.clear();
    for (int fd : open_fds()) {
        struct stat st;
        if (::fstat(fd, &st) == 0) fds.push_back({fd, st.st_dev, st.st_ino});
    }
    remembered_yet = true;
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) >= 0) continue;
        // Opened in order, so each open takes the lowest free number: this one.
        const int null = ::open("/dev/null", O_RDWR);
        if (null >= 0 && null != fd) ::close(null);
    }
}

std::vector<fd_range> fds_to_close(int also_keep) {
    std::vector<int> keep;
    if (!remembered_yet) keep = {0, 1, 2};
    for (const auto& r : remembered()) {
        struct stat st;
        // A number locksmith itself closed and reopened is no longer what the caller passed.
        if (::fstat(r.fd, &st) == 0 && st.st_dev == r.dev && st.st_ino == r.ino)
            keep.push_back(r.fd);
    }
    if (also_keep >= 0) keep.push_back(also_keep);
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    std::vector<fd_range> out;
    unsigned next = 0;
    for (int fd : keep) {
        if (unsigned(fd) > next) out.push_back({next, unsigned(fd) - 1});
        next = unsigned(fd) + 1;
    }
    out.push_back({next, ~0U});
    return out;
}

unsigned largest_fd() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == 0 ||
        limit.rlim_cur > (rlim_t(1) << 20))
        return 1u << 20;
    return unsigned(limit.rlim_cur - 1);
}

void close_fd_ranges(const fd_range* ranges, std::size_t count, unsigned fallback_last) noexcept {
    for (std::size_t i = 0; i < count; ++i) {
#ifdef SYS_close_range
        if (::syscall(SYS_close_range, ranges[i].first, ranges[i].last, 0) == 0) continue;
#endif
        const unsigned last = std::min(ranges[i].last, fallback_last);
        for (unsigned fd = ranges[i].first; fd <= last && fd <= unsigned(INT_MAX); ++fd)
            ::close(int(fd));
    }
}

}  // namespace locksmith::cli
