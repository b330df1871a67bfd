// SPDX-License-Identifier: MIT
// test_strategy: a strategy double for registry, selection, config and factory tests.
//
// It builds a strategy_descriptor whose probe and factory count their calls and can be told to
// fail: the probe answers "unsupported" with a given reason, the factory throws backend_error
// (a server that is down). The knobs live in shared state captured by the descriptor, so a test
// can flip them after the descriptor was registered. Stores are recording_stores, so a test can
// also see what the locks did. Model: spdlog's tests/test_sink.h.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <locksmith/capability.hpp>
#include <locksmith/registry.hpp>

#include "support/recording_store.hpp"

namespace locksmith::test {

class test_strategy {
  public:
    test_strategy(std::string name, int priority, capability caps);

    // --- shape of the descriptor (call before descriptor()) ---
    test_strategy& disabled_by_default();
    test_strategy& needs_configuration();
    // validate_options rejects every option object that has the key `forbidden`, with a
    // config_error whose pointer is "/forbidden".
    test_strategy& reject_option(std::string forbidden);

    // --- behaviour (may change at any time) ---
    // The probe answers no(reason); an empty reason makes it answer yes again.
    test_strategy& unsupported(std::string reason);
    // The factory throws backend_error(name, "test", message); empty message: it succeeds.
    test_strategy& fail_construction(std::string message);

    strategy_descriptor descriptor() const;
    const std::string& name() const noexcept { return name_; }

    // --- counters ---
    int probes() const;
    int constructions() const;         // successful factory calls
    int failed_constructions() const;  // factory calls that threw
    nlohmann::json last_options() const;
    std::shared_ptr<recording_store> last_store() const;

  private:
    struct state;
    std::string name_;
    int priority_;
    capability caps_;
    bool enabled_by_default_ = true;
    bool needs_configuration_ = false;
    std::string forbidden_option_;
    std::shared_ptr<state> state_;
};

}  // namespace locksmith::test
