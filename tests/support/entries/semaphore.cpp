// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"

namespace locksmith::test {

strategy_under_test entry_semaphore() {
    return {"semaphore", nlohmann::json{{"key", local_semaphore_key()}, {"semaphores", 64}}, ""};
}

}  // namespace locksmith::test
