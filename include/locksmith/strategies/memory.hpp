// SPDX-License-Identifier: MIT
// The `memory` strategy: locks that live in one store object, in this process.
//
// Contract: meant for tests and single-process programs; disabled by default. Owners are keys;
// threads wait on a condition variable (native_wait); grants expire after their TTL; shared
// locks follow Symfony's InMemoryStore (a sole reader may promote; a writer may demote) without
// its empty-reader-set bug. Nothing survives the process, and keys are not serializable. A lock
// object may move between threads.
// Counting semaphores (capability counting): the permits of a name are a table in the store,
// apart from its lock: the limit (the first holder's, kept while any permit is held; another is
// an invalid_argument_error naming both), the holders with their permit's number (the lowest
// free one, 1..N) and expiry. Waiters wait on the store's condition variable, woken by a release
// or at the earliest expiry. Like its locks, the permits exclude owners of this store object
// only: a limit in one process, never across processes.
#pragma once

#include <memory>

#include <locksmith/author/store.hpp>

namespace locksmith::strategies {

std::shared_ptr<store> make_memory_store();

}  // namespace locksmith::strategies
