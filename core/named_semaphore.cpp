// SPDX-License-Identifier: MIT
#include <locksmith/named_semaphore.hpp>

namespace locksmith {

namespace {

// The store, once the pair is fit for a semaphore (checked before named_lock takes them).
std::shared_ptr<store> counting_store(std::shared_ptr<store> s, const std::shared_ptr<key>& owner) {
    if (!s || !owner) throw invalid_argument_error("named_semaphore needs a store and a key");
    if (owner->limit() == 0)
        throw invalid_argument_error("semaphore '" + owner->resource() +
                                     "' needs a limit (key::set_limit)");
    if (!has(s->capabilities(), capability::counting))
        throw invalid_argument_error("strategy '" + s->strategy() +
                                     "' has no counting semaphores (capability counting)");
    return s;
}

}  // namespace

named_semaphore::named_semaphore(std::shared_ptr<store> store, std::shared_ptr<key> owner,
                                 lock_options options)
    : lock_(counting_store(std::move(store), owner), owner, std::move(options)) {}

std::string named_semaphore::permit() const {
    if (!held()) return {};
    const auto& state = lock_.owner()->portable_state();
    if (auto it = state.find("permit"); it != state.end()) {
        if (it->is_string()) return it->get<std::string>();
        if (it->is_number_unsigned()) return std::to_string(it->get<std::uint64_t>());
    }
    return lock_.owner()->token();
}

}  // namespace locksmith
