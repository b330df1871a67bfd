#include "support/strategies_under_test.hpp"

#include <filesystem>
#include <unistd.h>

#include <locksmith/registry.hpp>

#include "support/test_environment.hpp"

namespace locksmith::test {
namespace {

// A private lock directory per test process, so parallel test runs do not share files.
std::string private_lock_dir() {
    static const std::string dir = [] {
        auto path = std::filesystem::temp_directory_path() /
                    ("locksmith-test-" + std::to_string(::getuid()) + "-" +
                     std::to_string(::getpid()));
        std::filesystem::create_directories(path);
        std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::replace);
        return path.string();
    }();
    return dir;
}

}  // namespace

std::vector<strategy_under_test> strategies_under_test() {
    std::vector<strategy_under_test> all = {
        {"file", nlohmann::json{{"lock_dir", private_lock_dir()}}, ""},
        {"memory", nlohmann::json::object(), ""},
    };
    // Keep only the strategies this build has.
    std::vector<strategy_under_test> built;
    for (auto& s : all)
        if (default_registry().contains(s.name)) built.push_back(std::move(s));
    return built;
}

}  // namespace locksmith::test
