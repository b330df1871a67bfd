// SPDX-License-Identifier: MIT
// The `combined` strategy: one lock on N member stores, granted when a quorum of them grants
// (Symfony's CombinedStore, with Redlock's time accounting).
//
//   quorum_rule              consensus (a strict majority) or unanimous (every member)
//   quorum_met / quorum_can_be_met
//                            the rule's two questions (Symfony's isMet / canBeMet)
//   combined_member          a member: its strategy name and its store
//   combined_capabilities    what a combined lock offers, from its members' capabilities
//   make_combined_store
//   combined_strategy_for    the registry entry, creating its members through `members`
//
// Config:
//   "combined": {"options": {"quorum": "consensus",
//                            "members": [{"strategy": "redis", "options": {"url": "..."}}, ...]}}
// A member is any strategy of the registry (a module is loaded on first use), except combined
// and strategies that do not exclude across processes (spans_processes false, as `memory`, or
// excludes_nothing, as `null`: every owner would get their vote), each listed once (same
// strategy and options twice is one backend with two votes), no two on one server as their
// options name it (strategy_descriptor::backends: one restart takes both votes); config check
// refuses the others.
// Its options are checked by its own strategy. Every process must use the same member list.
//
// Contract:
//  - Owner: the key's token, the same on every member (each member keeps its own state in the
//    key). Every request asks the members at once, a thread each, and a round ends as soon as
//    its answer is decided (a grant: the quorum reached, or out of reach), or at its bound: the
//    caller's deadline (caller_deadline(), set while named_lock polls until a deadline) and,
//    for expiring members, the TTL's validity (a refresh: the lock's lifetime). A member without
//    an answer by then counts as failed (as a refusal past the caller's deadline); its request
//    goes on, and when it ends the member is brought to what the owner wants by then (a late
//    grant of a missed quorum is released). A request to a member still busy with an earlier
//    one of the same owner waits for it (up to 16; more count as late). A member that cannot
//    start is tried again only after a pause (0.5 s, doubling up to 30 s).
//    Such a request runs on, detached, inside its member's client library, also after the store
//    is gone: a program that calls exit() meanwhile runs that library's finalizers under it
//    (seen: GSSAPI's, under libpq connecting). Leave with _exit/_Exit once locks are released,
//    as the locksmith command does, or give the slow member time to answer first.
//  - Time: for expiring members, the grant counts only when the quorum was reached with time
//    left: validity = ttl - elapsed - drift, drift = ttl/100 + 2 ms (Redlock). The lifetime
//    the lock reports (remaining_lifetime) is that validity: ttl from before the attempt, less
//    the drift.
//  - Rollback: when the quorum is not reached, or is reached too late, every member that granted
//    or failed (its reply may have been lost after it granted) is released with this owner's
//    token; members that refused are left alone. Nothing of a failed attempt is kept: members
//    that answered are released before the call returns (waiting up to the round's bound), a
//    member still without an answer when it answers.
//  - Waiting polls with the core's backoff (no native_wait, no fairness), as Symfony does.
//  - refresh refreshes every member that granted; fewer than a quorum refreshed = the lock is
//    lost (the others are released). holds() = a quorum of members hold. release releases every
//    member that granted, waits for them, and reports those that failed to release (only they
//    can keep the name from others); a member that may have granted (its grant request failed)
//    is released without waiting and not reported; a member that never granted is not asked.
//  - Loss: loss_fd merges the loss descriptors of the members that granted (an epoll set), so a
//    member whose server ends its session (pg_advisory, zookeeper) is heard of at once and
//    holds() tells whether the quorum survived; nullopt when no member has one.
//  - Shared: when every member has read locks, a read lock is a read lock on a quorum of
//    members (readers exclude a writer there, as on one store). A promotion that misses the
//    quorum demotes the members that promoted, so the owner keeps its read lock.
//  - Capabilities: exclusive and noblock, plus what every member has among shared, expiring,
//    distributed, serializable, crash_release and consensus. Members must agree on expiring
//    (all or none). No native_wait, no fairness. fencing only under
//    `unanimous` with a fencing member: every grant then passes through that member, whose
//    tokens increase in its grant order; under `consensus` two grants may share no member
//    that issued both tokens, so there is no token (Kleppmann: Redlock cannot make one).
//  - Errors: a try that misses the quorum where any member refused (another owner holds it) is
//    `false` (contention), even with members down; one that misses it with no refusal, only
//    failures, throws backend_error naming each failed member (transient when every failure
//    was); a quorum not reached within the TTL's validity throws expired_error.
//
// What the quorum guarantees, and what not:
//  - consensus over 2f+1 independent members survives f of them down or unreachable, and no two
//    owners hold a majority at once *as long as* every member keeps its grants for their TTL.
//    A member that restarts without its data (Redis without fsync=always) forgets grants and
//    may grant again: keep a restarted member out for longer than the longest TTL.
//  - Expiry is measured on several clocks: the members' (their TTLs) and this host's (the
//    validity). A member whose clock runs fast, or jumps, expires a grant early; the drift term
//    covers 1% of rate error, not a jump.
//  - A holder that pauses (GC, SIGSTOP, swap) or a delayed network packet outlives its
//    validity without noticing: two owners then act at once, whatever the quorum. The quorum
//    does not make leases safe for correctness (Kleppmann, "How to do distributed locking");
//    for that use a fencing token checked by the resource (`unanimous` with a fencing member,
//    or the zookeeper/etcd strategies), or accept that the lock is an efficiency lock.
//  - unanimous adds no availability: any member down refuses every grant. It is for locks that
//    must hold on each of several independent backends.
//  - The members are not a consensus group: the combined lock has `consensus` only when every
//    member itself is a consensus service.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <locksmith/author/store.hpp>
#include <locksmith/registry.hpp>

namespace locksmith::strategies {

enum class quorum_rule { consensus, unanimous };

// consensus: successes > total/2; unanimous: successes == total.
bool quorum_met(quorum_rule rule, std::size_t successes, std::size_t total) noexcept;
// consensus: failures < total/2 (strictly, so 2 members tolerate none); unanimous: failures == 0.
bool quorum_can_be_met(quorum_rule rule, std::size_t failures, std::size_t total) noexcept;

struct combined_member {
    std::string strategy;  // for messages
    std::shared_ptr<locksmith::store> backend;
};

// What a combined store over members with these capabilities offers (see the contract).
capability combined_capabilities(quorum_rule rule, const std::vector<capability>& members);

// Requires: at least one member; members agree on capability::expiring.
// Throws invalid_argument_error otherwise.
std::shared_ptr<store> make_combined_store(quorum_rule rule, std::vector<combined_member> members);

// The registry entry `combined`, whose members are created by the strategies of `members`
// (looked up at use, so a plugin or module registered later serves too). The built-in entry
// uses default_registry().
strategy_descriptor combined_strategy_for(strategy_registry& members);

}  // namespace locksmith::strategies
