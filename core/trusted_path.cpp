// SPDX-License-Identifier: MIT
#include "core/trusted_path.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>

namespace locksmith {
namespace {

namespace fs = std::filesystem;

// Linux's limit on the symlinks one lookup follows.
constexpr int max_symlinks = 40;

std::string mode_text(const struct stat& st) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return mode;
}

std::string owner_problem(const fs::path& p, const struct stat& st) {
    const uid_t me = ::geteuid();
    if (st.st_uid == 0 || st.st_uid == me) return {};
    return p.string() + " is owned by uid " + std::to_string(st.st_uid) + ", neither you (uid " +
           std::to_string(me) + ") nor root";
}

// Whoever can write to a folder can rename or replace what is in it. A sticky folder of root's
// lets others replace only their own entries, whose owners are checked in turn.
std::string folder_problem(const fs::path& p, const struct stat& st, bool sticky_allowed) {
    if (auto why = owner_problem(p, st); !why.empty()) return why;
    const bool sticky_root = sticky_allowed && (st.st_mode & S_ISVTX) && st.st_uid == 0;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_root)
        return p.string() + " is writable by group or others (mode " + mode_text(st) + ")";
    return {};
}

// Only blanks, "." and "/" remain: `name` was the last component.
bool only_dots(const std::deque<std::string>& todo) {
    for (const auto& c : todo)
        if (!c.empty() && c != ".") return false;
    return true;
}

}  // namespace

path_trust check_trusted_path(const fs::path& path) {
    path_trust out;
    auto fail = [&](std::string why, int error) {
        out.problem = std::move(why);
        out.error = error;
        return out;
    };
    std::error_code ec;
    // The path as written, components and symlinks included: resolving it first would check
    // where a planted symlink points, not the folder it was planted in.
    const fs::path written = fs::absolute(path, ec);
    if (ec) return fail(path.string() + ": " + ec.message(), ec.value());
    std::deque<std::string> todo;
    for (const auto& c : written.relative_path()) todo.push_back(c.string());

    fs::path folder = "/";
    struct stat root_st {};
    if (::lstat("/", &root_st) != 0) return fail(std::string("/: ") + std::strerror(errno), errno);
    if (auto why = folder_problem("/", root_st, true); !why.empty()) return fail(why, 0);
    struct stat folder_st = root_st;
    int links = 0;
    while (!todo.empty()) {
        const std::string name = std::move(todo.front());
        todo.pop_front();
        if (name.empty() || name == ".") continue;
        if (name == "..") {
            // `folder` has no symlink in it, so its parent is the one the kernel goes to.
            folder = folder.parent_path();
            if (::lstat(folder.c_str(), &folder_st) != 0)
                return fail(folder.string() + ": " + std::strerror(errno), errno);
            continue;
        }
        const fs::path next = folder / name;
        struct stat st {};
        if (::lstat(next.c_str(), &st) != 0)
            return fail(next.string() + ": " + std::strerror(errno), errno);
        if (auto why = owner_problem(next, st); !why.empty()) return fail(why, 0);
        if (S_ISLNK(st.st_mode)) {
            if (++links > max_symlinks)
                return fail(path.string() + ": " + std::strerror(ELOOP), ELOOP);
            const fs::path target = fs::read_symlink(next, ec);
            if (ec) return fail(next.string() + ": " + ec.message(), ec.value());
            std::deque<std::string> more;
            for (const auto& c : target.relative_path()) more.push_back(c.string());
            todo.insert(todo.begin(), more.begin(), more.end());
            if (target.is_absolute()) {
                folder = "/";
                folder_st = root_st;
            }
            continue;
        }
        if (!only_dots(todo)) {
            if (!S_ISDIR(st.st_mode))
                return fail(next.string() + ": " + std::strerror(ENOTDIR), ENOTDIR);
            if (auto why = folder_problem(next, st, true); !why.empty()) return fail(why, 0);
            folder = next;
            folder_st = st;
            continue;
        }
        out.reached = true;
        out.resolved = next;
        out.st = st;
        // The file, and its own folder: no sticky exception there.
        if (auto why = folder_problem(folder, folder_st, false); !why.empty()) return fail(why, 0);
        if (st.st_mode & (S_IWGRP | S_IWOTH))
            return fail(
                next.string() + " is writable by group or others (mode " + mode_text(st) + ")", 0);
        return out;
    }
    // The path ends in a folder ("/", "a/.."): the caller refuses it by its type.
    out.reached = true;
    out.resolved = folder;
    out.st = folder_st;
    return out;
}

}  // namespace locksmith
