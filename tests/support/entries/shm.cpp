// SPDX-License-Identifier: MIT
#include "support/entries/entries.hpp"

namespace locksmith::test {

strategy_under_test entry_shm() {
    return {"shm", nlohmann::json{{"segment", "locksmith-test-" + local_ipc_id()}, {"slots", 1024}},
            ""};
}

}  // namespace locksmith::test
