// SPDX-License-Identifier: MIT
// The `memory` strategy: locks that live in one store object, in this process.
//
// Contract: meant for tests and single-process programs; disabled by default. Owners are keys;
// threads wait on a condition variable (native_wait); grants expire after their TTL; shared
// locks follow Symfony's InMemoryStore (a sole reader may promote; a writer may demote) without
// its empty-reader-set bug. Nothing survives the process, and keys are not serializable. A lock
// object may move between threads.
#pragma once

#include <memory>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

std::shared_ptr<store> make_memory_store();

}  // namespace locksmith::strategies
