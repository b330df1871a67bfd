// SPDX-License-Identifier: MIT
#include "command.hpp"

#include <algorithm>

namespace locksmith::cli {

namespace {

std::vector<command*>& registered() {
    static std::vector<command*> list;
    return list;
}

}  // namespace

command::command(int help_position) : help_position_(help_position) {
    registered().push_back(this);
}

void command::reword_usage_error(const CLI::ParseError&, const std::vector<std::string>&,
                                 std::string&, std::string&) const {}

const std::vector<command*>& commands() {
    // Sorted on first use, after every static object has registered (main() runs after them).
    static const std::vector<command*> sorted = [] {
        auto list = registered();
        std::stable_sort(list.begin(), list.end(), [](const command* a, const command* b) {
            return a->help_position() < b->help_position();
        });
        return list;
    }();
    return sorted;
}

std::string command_names(const std::string& last_separator) {
    std::string out;
    const auto& list = commands();
    for (std::size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += i + 1 == list.size() ? last_separator : ", ";
        out += list[i]->name();
    }
    return out;
}

}  // namespace locksmith::cli
