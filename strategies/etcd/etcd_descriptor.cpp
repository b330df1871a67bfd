// SPDX-License-Identifier: MIT
// The etcd strategy's registry entry. It is compiled into liblocksmith; the store itself is in
// the module liblocksmith_etcd.so, loaded on first use (include/locksmith/author/module.hpp).
#include "etcd_descriptor.hpp"

#include <locksmith/author/module.hpp>
#include <locksmith/strategies/etcd.hpp>

namespace locksmith::strategies {

strategy_descriptor etcd_metadata() {
    strategy_descriptor d;
    d.name = "etcd";
    d.description =
        "etcd v3 (JSON gateway over HTTP): a key per waiter under a lease, FIFO by create "
        "revision, fenced by it";
    d.default_priority = 88;
    d.capabilities = etcd_capabilities;
    d.needs_configuration = true;
    d.example_options = {{"endpoints", "http://127.0.0.1:2379"}};
    return d;
}

strategy_descriptor etcd_strategy() {
    return load_on_first_use(etcd_metadata());
}

}  // namespace locksmith::strategies
