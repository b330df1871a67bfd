// SPDX-License-Identifier: MIT
// Whether a file that decides what this process does (a plugin it loads, a config it obeys) can
// have been written or swapped by another user. Private; one rule for every such file.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace locksmith {

struct path_trust {
    // Why the file must not be used, or empty when it may. Begins with the component at fault
    // ("/tmp/x is writable by group or others (mode 0777)").
    std::string problem;
    // errno when a component could not be examined (ENOENT: the path does not exist); then
    // `problem` says which. 0 otherwise.
    int error = 0;
    // Whether the walk got to the file; then `resolved` and `st` are set, also when `problem`
    // is about the file or its own folder.
    bool reached = false;
    // The file's path without symlinks, . or ..: what to open, so that nothing is looked up
    // again through the components checked here.
    std::filesystem::path resolved;
    struct stat st {};  // the file's lstat
};

// Walks `path` (relative to the working directory when relative) as the kernel would, following
// each symlink, and checks every component it meets: every folder searched, every symlink, the
// file. A file this process obeys may be changed by whoever can write it or rename or replace a
// component on the way to it, so each must be owned by the caller (geteuid) or root, and no
// folder may be writable by group or others — except that a folder above the file's own folder
// may be a sticky one owned by root (/tmp), where others cannot rename what is not theirs. The
// file itself must not be writable by group or others. Does not look at the file's type.
path_trust check_trusted_path(const std::filesystem::path& path);

}  // namespace locksmith
