// SPDX-License-Identifier: MIT
// A full file system for one test: a small tmpfs, filled up, mounted in a mount namespace of a
// forked child, so that only that child and the processes it starts see it, and it goes with
// them (nothing to unmount when a test fails). What any local user can arrange on a shared tmpfs
// (/dev/shm, Debian's 5 MiB /run/lock) before someone takes a lock there.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace locksmith::test {

// Runs `body` in a forked child (fork_child: exit status, safety limit) that has its own mount
// namespace with a tmpfs of a few pages mounted at `where` (an existing directory; "/dev/shm"
// replaces the shared memory folder for the child alone), with root directory mode `mode`,
// filled until writing fails with ENOSPC.
// Returns the child's exit status (as wait_child: 128+N for signal N), or nullopt with `why`
// when this process may not make the mount (not root, mounts not permitted in a container): the
// caller skips (skip_case: failing under CI=true).
std::optional<int> run_on_a_full_tmpfs(const std::filesystem::path& where, mode_t mode,
                                       const std::function<int()>& body, std::string& why,
                                       std::chrono::seconds limit = std::chrono::seconds(60));

// Appends to `file` until writing fails; true when it failed with ENOSPC (the file system is
// full). What run_on_a_full_tmpfs does to <where>/filler, for a body that freed room and must
// fill it again.
bool fill_up(const std::filesystem::path& file);

}  // namespace locksmith::test
