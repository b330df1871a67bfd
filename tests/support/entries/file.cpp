// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"

namespace locksmith::test {

strategy_under_test entry_file() {
    return {"file", nlohmann::json{{"lock_dir", private_lock_dir()}}, ""};
}

}  // namespace locksmith::test
