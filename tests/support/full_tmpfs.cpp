// SPDX-License-Identifier: MIT
#include "support/full_tmpfs.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "support/child_process.hpp"

namespace locksmith::test {

bool fill_up(const std::filesystem::path& file) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const std::vector<char> page(4096, 'f');
    while (fd >= 0 && ::write(fd, page.data(), page.size()) > 0) {
    }
    const bool full = fd >= 0 && errno == ENOSPC;
    if (fd >= 0) ::close(fd);
    return full;
}

std::optional<int> run_on_a_full_tmpfs(const std::filesystem::path& where, mode_t mode,
                                       const std::function<int()>& body, std::string& why,
                                       std::chrono::seconds limit) {
    // The child reports how far it got in one byte: 'm' mounted and full, else what failed.
    byte_pipe set_up;
    const pid_t pid = fork_child(
        [&] {
            set_up.close_read();
            auto failed = [&](char step) {
                set_up.put(step);
                return 0;
            };
            // Private propagation: the mount must not reach the parent's namespace (a shared
            // "/", as systemd makes it, would pass it on).
            if (::unshare(CLONE_NEWNS) != 0) return failed('u');
            if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
                return failed('p');
            char options[64];
            std::snprintf(options, sizeof options, "size=64k,mode=%04o", unsigned(mode));
            if (::mount("tmpfs", where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
                return failed('m');
            if (!fill_up(where / "filler")) return failed('f');
            set_up.put('r');
            set_up.close_write();
            return body();
        },
        limit);
    set_up.close_write();
    const auto step = set_up.get(std::chrono::seconds(30));
    if (step == 'r') return wait_child(pid, limit + std::chrono::seconds(5));
    wait_child(pid, std::chrono::seconds(5));
    switch (step.value_or('?')) {
        case 'u':
            why =
                "unshare(CLONE_NEWNS) is not permitted (run as root, outside a container that "
                "forbids mount namespaces)";
            break;
        case 'p':
        case 'm':
            why = "mounting a tmpfs at " + where.string() +
                  " in a private mount namespace is not " +
                  "permitted (run as root with CAP_SYS_ADMIN)";
            break;
        case 'f':
            why = "could not fill a 64 KiB tmpfs at " + where.string() + " up to ENOSPC";
            break;
        default:
            why = "the child that mounts a full tmpfs at " + where.string() + " did not report";
    }
    return std::nullopt;
}

}  // namespace locksmith::test
