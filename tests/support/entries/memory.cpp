// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"

namespace locksmith::test {

strategy_under_test entry_memory() {
    return {"memory", nlohmann::json::object(), "", true};
}

}  // namespace locksmith::test
