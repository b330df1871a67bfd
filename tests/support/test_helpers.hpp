// SPDX-License-Identifier: MIT
// Small inline helpers that test files used to define again each, one copy per file.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace locksmith::test {

// Milliseconds since `since`, for messages and for BOOST_TEST comparisons.
inline double ms_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
        .count();
}

// Whether `needle` occurs in `haystack`: for checks of what a message or an output says.
inline bool contains(std::string_view haystack, std::string_view needle) {
    return haystack.find(needle) != std::string_view::npos;
}

// The whole content of the file at `path` (bytes as they are); empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace locksmith::test
