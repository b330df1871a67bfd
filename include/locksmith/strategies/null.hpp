// SPDX-License-Identifier: MIT
// The `null` strategy: locking switched off (Symfony's NullStore, TYPO3's "disable locking").
//
// Contract: every acquire succeeds at once, in either mode, and nothing is excluded: two owners
// of one name both hold it. Disabled by default; a config enables it (the switch that turns
// locking off), and then it wins selection (priority 100) for every request it can serve. It
// claims the capabilities whose promise is empty when nothing is excluded (exclusive, shared,
// noblock, native_wait, expiring, distributed, serializable, crash_release, fair, counting:
// every permit is granted whatever the limit, so semaphores are off too), never fencing
// or consensus: those promise a token or a replicated decision that a resource or a program may
// rely on. Each owner sees its own grant (is_acquired() is true until it releases; its key
// carries that, so a serialized key continues it); status() says "free". Tools warn that
// locking is off (strategy_descriptor::excludes_nothing). For development and tests, or to rule
// out locking while debugging; never where the locks protect anything.
#pragma once

#include <memory>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

std::shared_ptr<store> make_null_store();

}  // namespace locksmith::strategies
