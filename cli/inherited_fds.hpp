// SPDX-License-Identifier: MIT
// The descriptors locksmith was started with, so that `run`'s command gets exactly those and none
// locksmith (its library, a backend's client library, a plugin) opened meanwhile: a server
// session's socket kept open in the command would keep the session — and its locks — alive after
// locksmith died, and let the command write into a session it does not own.
//
//   remember_inherited_fds()  called first thing in main(): what the caller passed
//   fds_to_close              the ranges a child closes before exec (computed before the fork)
#pragma once

#include <cstddef>
#include <vector>

namespace locksmith::cli {

// Effects: records every open descriptor (number and the file it refers to). A standard
//   descriptor (0, 1, 2) that is closed is then opened on /dev/null, not recorded: otherwise the
//   first socket locksmith opens would take its number and locksmith's own messages would go to
//   a server. Call once, before anything opens a descriptor.
void remember_inherited_fds();

// An inclusive range of descriptor numbers.
struct fd_range {
    unsigned first;
    unsigned last;
};

// Returns: the ranges of descriptor numbers a child must close so that only the remembered
//   descriptors that still refer to the same file, and `also_keep` (-1: none), stay open. The
//   last range ends at the largest descriptor number. Without remember_inherited_fds(): only 0,
//   1 and 2 are kept.
std::vector<fd_range> fds_to_close(int also_keep);

// Returns: the largest descriptor number this process may have (RLIMIT_NOFILE less one, at most
//   2^20, the kernel's default nr_open).
unsigned largest_fd();

// Effects: closes the descriptors of `ranges`; async-signal-safe, no allocation (for a vfork()ed
//   child). Where the kernel has no close_range(2) (before Linux 5.9) they are closed one by one
//   up to `fallback_last` (largest_fd() of the parent).
void close_fd_ranges(const fd_range* ranges, std::size_t count, unsigned fallback_last) noexcept;

}  // namespace locksmith::cli
