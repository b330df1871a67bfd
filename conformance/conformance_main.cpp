// SPDX-License-Identifier: MIT
// locksmith-conformance: runs the conformance cases (<locksmith/conformance.hpp>) against one
// strategy. Exit 0 when none failed, 1 when one did, 2 for bad usage or a strategy that cannot
// be set up.
#include <cstring>
#include <iostream>
#include <string>

#include <locksmith/conformance.hpp>

int main(int argc, char** argv) {
    locksmith::conformance::subject s;
    const char* usage =
        "usage: locksmith-conformance --strategy NAME [--options JSON] [--plugin FILE]...\n"
        "                             [--hostile-options JSON]\n";
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) {
            std::cerr << usage;
            return 2;
        }
        if (arg == "--strategy") {
            s.strategy = argv[++i];
        } else if (arg == "--options") {
            try {
                s.options = nlohmann::json::parse(argv[++i]);
            } catch (const std::exception&) {
                std::cerr << "locksmith-conformance: --options is not valid JSON\n";
                return 2;
            }
        } else if (arg == "--hostile-options") {
            try {
                s.hostile_options = nlohmann::json::parse(argv[++i]);
            } catch (const std::exception&) {
                std::cerr << "locksmith-conformance: --hostile-options is not valid JSON\n";
                return 2;
            }
        } else if (arg == "--plugin") {
            s.plugins.push_back(argv[++i]);
        } else {
            std::cerr << usage;
            return 2;
        }
    }
    if (s.strategy.empty()) {
        std::cerr << usage;
        return 2;
    }
    try {
        return locksmith::conformance::all_passed(locksmith::conformance::run(s, &std::cout)) ? 0
                                                                                              : 1;
    } catch (const std::exception& e) {
        std::cerr << "locksmith-conformance: " << e.what() << '\n';
        return 2;
    }
}
