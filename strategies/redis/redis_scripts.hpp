// SPDX-License-Identifier: MIT
// Private to the redis strategy: the server-side scripts. Each runs atomically on the server,
// which is what makes check-then-act on a lock key safe.
//
// Keys of one lock name N (P = key_prefix):
//   P lock: N   exclusive: a string holding the owner token, with PX = the TTL
//               shared: a sorted set of reader tokens scored by their expiry (server ms), and
//               PEXPIREAT = the latest reader expiry, so an abandoned set disappears on its own
//   P fence: N  the last fencing token drawn for N (next_fence, for every grant that gets a
//               token: at the grant in the scripts below, on first request for the plain SET NX
//               grant; never deleted)
//   P wait: N   a sorted set of writers that wait, scored by when their registration lapses;
//               while it is not empty, no new reader is admitted (writers are not starved)
//   P queue: N  the same writers in arrival order (score 1, 2, ...), each member
//               "<ttl ms> <wake channel> <wait number> <token>": a release hands the lock to
//               the first whose registration has not lapsed (SET to its token with its TTL) and
//               PUBLISHes the member on its wake channel, so exactly one waiter wakes and it
//               needs no further round trip. An entry whose registration lapsed (a waiter that
//               died) is dropped when it reaches the head; the wait number tells a waiter's
//               message from one left over from an earlier wait on the same connection
//   P readers: N  present while readers wait (PX: until the latest may retry, plus 2 s)
//   P chan: N   the pub/sub channel on which a release (or a lapse) is announced to readers
//               (and, for a counting semaphore, a permit's release to the waiters for permits)
//   P permits: N  a counting semaphore's holders: a sorted set of tokens scored by their expiry
//               (server ms), PEXPIREAT = the latest expiry; never more than the limit live ones
//   P limit: N  the semaphore's limit, set by the grant that finds none and kept (same
//               PEXPIREAT) while a permit is held, so every user of the name meets the same one;
//               deleted with the last holder, after which the next grant sets it anew
// A semaphore and the lock of one name are separate objects; they share the fence key, so
// fencing tokens increase across both.
// Times come from the server's TIME, so client clocks do not matter. Needs Redis >= 5 (writes
// after TIME in a script).
#pragma once

namespace locksmith::strategies::redis_detail {

// The queue of waiting writers (see P queue: N above). live_head drops the entries at the head
// whose registration lapsed and returns the first live one: member, token, ttl, wake channel.
// hand_over gives the lock to that waiter and wakes it alone. The next in line sleeps until a
// retry at most a third of its own TTL away; when the new grant is shorter than that, it is told
// the grant's TTL, so that it retries when a holder that died would lose the lock, not later.
#define LOCKSMITH_REDIS_QUEUE                                                      \
    "local function live_head(queue, wait)\n"                                      \
    "  local now\n"                                                                \
    "  while true do\n"                                                            \
    "    local m = redis.call('ZRANGE', queue, 0, 0)[1]\n"                         \
    "    if not m then return nil end\n"                                           \
    "    local ttl, chan, tok = string.match(m, '^(%d+) (%S+) %S+ (.*)$')\n"       \
    "    if tok then\n"                                                            \
    "      now = now or server_ms()\n"                                             \
    "      local lapse = redis.call('ZSCORE', wait, tok)\n"                        \
    "      if lapse and tonumber(lapse) > now then return m, tok, ttl, chan end\n" \
    "    end\n"                                                                    \
    "    redis.call('ZREM', queue, m)\n"                                           \
    "  end\n"                                                                      \
    "end\n"                                                                        \
    "local function hand_over(lock, queue, wait, m, tok, ttl, chan)\n"             \
    "  redis.call('SET', lock, tok, 'PX', ttl)\n"                                  \
    "  redis.call('ZREM', queue, m)\n"                                             \
    "  redis.call('ZREM', wait, tok)\n"                                            \
    "  redis.call('PUBLISH', chan, m)\n"                                           \
    "  local n = redis.call('ZRANGE', queue, 0, 0)[1]\n"                           \
    "  local nttl, nchan = string.match(n or '', '^(%d+) (%S+) ')\n"               \
    "  if nttl and tonumber(ttl) * 3 < tonumber(nttl) then\n"                      \
    "    redis.call('PUBLISH', nchan, n .. ' next ' .. ttl)\n"                     \
    "  end\n"                                                                      \
    "end\n"

// Shared prologue: the server's clock in ms, the helper that aligns a reader set's expiry with
// its latest reader, and the next fencing token. All are functions, called only on the paths
// that need them: the common exclusive grant and release never read TIME, which keeps each
// script close to the cost of the plain commands it runs (bench/redis/RESULTS.md).
// A token is the server's clock in microseconds, or one more than the last token when that is
// larger (a plain counter would restart at 1, or at an older snapshot's value, whenever the
// server loses its data: a restart without persistence, kill -9 after the last snapshot, a
// failover to a replica that missed the last writes; a stale holder's token would then beat
// the new holders'). Tokens outgrow the clock only at more than one grant per microsecond of one
// name, which Redis does not reach, so a token drawn after a loss is above every earlier one as
// long as the server's clock (after a failover: the new primary's) is not behind the clock at
// the last grant before the loss. Below 2^53 (the year 2255), so exact in Lua's numbers.
#define LOCKSMITH_REDIS_PROLOGUE                                                      \
    "local function server_ms()\n"                                                    \
    "  local t = redis.call('TIME')\n"                                                \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"            \
    "end\n"                                                                           \
    "local function next_fence(k)\n"                                                  \
    "  local t = redis.call('TIME')\n"                                                \
    "  local n = math.max((tonumber(redis.call('GET', k)) or 0) + 1,\n"               \
    "                     tonumber(t[1]) * 1000000 + tonumber(t[2]))\n"               \
    "  redis.call('SET', k, string.format('%d', n))\n"                                \
    "  return n\n"                                                                    \
    "end\n"                                                                           \
    "local function expire_at_latest(k)\n"                                            \
    "  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')\n"                   \
    "  if top[2] then redis.call('PEXPIREAT', k, math.floor(tonumber(top[2]))) end\n" \
    "end\n"

// KEYS: lock, fence, wait, queue, readers. ARGV: token, ttl ms, mode ("x" or "s"), wait ms (> 0:
// the caller will wait; a writer then registers in the wait set and the queue, a reader marks
// the readers key), channel, queue member (a waiting writer's, else empty).
// Returns {1, fence} for a new grant, {1, 0} when the owner already held it in that mode (the
// TTL is renewed; also how a waiter learns of a hand-over it has not read yet), {0, ms} when
// refused, ms being how long the obstacle may last at most (-1 or -2: unknown or none).
inline constexpr const char* acquire_script = LOCKSMITH_REDIS_PROLOGUE LOCKSMITH_REDIS_QUEUE R"lua(
local lock, fence, wait, queue = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, mode, wait_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local member = ARGV[6]
if mode == 'x' then
  -- First come, first served: while writers queue, a free name goes to the first of them only
  -- (it is free with a queue when its holder expired instead of handing over). A held name,
  -- the common case here, skips the queue's head.
  if redis.call('EXISTS', lock) == 0 then
    local _, first = live_head(queue, wait)
    if (not first or first == token) and redis.call('SET', lock, token, 'NX', 'PX', ttl) then
      -- Only a waiting caller can have registered as a waiting writer.
      if wait_ms > 0 then
        redis.call('ZREM', wait, token)
        redis.call('ZREM', queue, member)
      end
      return {1, next_fence(fence)}
    end
  end
  local kind = redis.call('TYPE', lock).ok
  if kind == 'string' then
    if redis.call('GET', lock) == token then
      redis.call('PEXPIRE', lock, ttl)
      return {1, 0}
    end
  elseif kind == 'zset' then
    redis.call('ZREMRANGEBYSCORE', lock, '-inf', server_ms())
    local n = redis.call('ZCARD', lock)
    if (n == 0 and (not first or first == token)) or (n == 1 and redis.call('ZSCORE', lock, token)) then
      -- free, or promotion of the sole reader (ahead of the queue, which waits for it anyway)
      redis.call('DEL', lock)
      redis.call('SET', lock, token, 'PX', ttl)
      redis.call('ZREM', wait, token)
      redis.call('ZREM', queue, member)
      return {1, next_fence(fence)}
    end
  end
  local left = redis.call('PTTL', lock)
  if wait_ms > 0 then
    -- Registered until well after this waiter's next retry, which comes within 1 s (the
    -- store's waiter_renewal): a waiter that died blocks new readers, and holds its place in
    -- the queue, for 3 s at most, whatever the holder's TTL (a release in that time still
    -- hands the lock to it, for its TTL).
    local now = server_ms()
    local keep = math.min(wait_ms, 3000)
    redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
    redis.call('ZADD', wait, now + keep, token)
    if not redis.call('ZSCORE', queue, member) then
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
      redis.call('ZADD', queue, (tonumber(last) or 0) + 1, member)
    end
    -- Both last as long as the latest registration.
    local latest = math.floor(tonumber(redis.call('ZRANGE', wait, -1, -1, 'WITHSCORES')[2]))
    redis.call('PEXPIREAT', wait, latest)
    redis.call('PEXPIREAT', queue, latest)
  end
  return {0, left}
end
-- shared
local now = server_ms()
-- A reader that will wait marks the name (P readers:N) for as long as it may sleep, plus 2 s:
-- a release announces itself on the channel only while the mark is there.
local function refused(left)
  if wait_ms > 0 then
    local keep = math.min(wait_ms, math.max(left, 0) + 2000)
    if redis.call('PTTL', KEYS[5]) < keep then redis.call('SET', KEYS[5], 1, 'PX', keep) end
  end
  return {0, left}
end
local kind = redis.call('TYPE', lock).ok
if kind == 'string' then
  if redis.call('GET', lock) ~= token then return refused(redis.call('PTTL', lock)) end
  -- demotion: the writer becomes the only reader; waiting readers may come in now
  redis.call('DEL', lock)
  redis.call('ZADD', lock, now + ttl, token)
  redis.call('PEXPIREAT', lock, now + ttl)
  redis.call('PUBLISH', ARGV[5], 'demoted')
  return {1, next_fence(fence)}
end
if kind == 'zset' then redis.call('ZREMRANGEBYSCORE', lock, '-inf', now) end
local renewal = redis.call('ZSCORE', lock, token)
if not renewal then
  redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
  if redis.call('ZCARD', wait) > 0 then
    return refused(math.max(redis.call('PTTL', lock), redis.call('PTTL', wait)))
  end
end
redis.call('ZADD', lock, now + ttl, token)
expire_at_latest(lock)
if renewal then return {1, 0} end
return {1, next_fence(fence)}
)lua";

// KEYS: lock. ARGV: token, ttl ms. Compare-and-pexpire: 1 when the owner's grant was extended,
// 0 when the owner holds nothing (expired readers are purged first, so one cannot be revived).
// GET by pcall: on a reader set it fails (wrong type) instead of aborting the script.
inline constexpr const char* refresh_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
if redis.pcall('GET', lock) == token then
  redis.call('PEXPIRE', lock, ttl)
  return 1
end
if redis.call('TYPE', lock).ok == 'zset' then
  local now = server_ms()
  redis.call('ZREMRANGEBYSCORE', lock, '-inf', now)
  if redis.call('ZSCORE', lock, token) then
    redis.call('ZADD', lock, now + ttl, token)
    expire_at_latest(lock)
    return 1
  end
end
return 0
)lua";

// KEYS: lock, wait, queue, readers (the last two optional: the benchmarks' raw loop, which
// never waits, sends the first two only). ARGV: token, channel. Compare-and-delete, in either
// mode; also withdraws the owner from the wait set. A lock that becomes free goes to the first
// live waiting writer (hand_over); without one, the release is published on the channel, so that
// waiting readers retry (also when the wait set shrank). Returns 1 when a grant was released, 2
// when it was handed over.
inline constexpr const char* release_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, wait, queue, token = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
-- The exclusive owner left the wait set when it was granted. With nobody waiting (one EXISTS
-- for writers and readers), the common release is the plain compare-and-delete, nothing
-- published (and the queue's functions not even defined: each costs the server at every call).
local owner = redis.pcall('GET', lock) == token
if owner and (not queue or redis.call('EXISTS', queue, KEYS[4]) == 0) then
  redis.call('DEL', lock)
  return 1
end
)lua" LOCKSMITH_REDIS_QUEUE R"lua(
if owner then
  local m, tok, ttl, chan = live_head(queue, wait)
  if m then
    hand_over(lock, queue, wait, m, tok, ttl, chan)
    return 2
  end
  redis.call('DEL', lock)
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
local released, freed = 0, false
if redis.call('TYPE', lock).ok == 'zset' then
  if redis.call('ZREM', lock, token) == 1 then
    released = 1
    redis.call('ZREMRANGEBYSCORE', lock, '-inf', server_ms())
    if redis.call('ZCARD', lock) == 0 then
      local head, tok, ttl, chan = live_head(queue, wait)
      if head then
        hand_over(lock, queue, wait, head, tok, ttl, chan)
        return 2
      end
      freed = true
    else
      expire_at_latest(lock)
    end
  end
end
if redis.call('ZREM', wait, token) == 1 then freed = true end
if freed then redis.call('PUBLISH', ARGV[2], 'released') end
return released
)lua";

// KEYS: wait, queue, lock. ARGV: token, channel, queue member. A writer that stops waiting
// withdraws its registration and lets blocked readers retry. Returns 1 when the lock was handed
// to this writer before it withdrew: the wait ended in a grant after all.
inline constexpr const char* unwait_script = R"lua(
if redis.pcall('GET', KEYS[3]) == ARGV[1] then return 1 end
redis.call('ZREM', KEYS[2], ARGV[3])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then redis.call('PUBLISH', ARGV[2], 'unwait') end
return 0
)lua";

// KEYS: lock. ARGV: token. 1 when the owner holds a live grant in either mode.
inline constexpr const char* holds_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, token = KEYS[1], ARGV[1]
if redis.pcall('GET', lock) == token then return 1 end
if redis.call('TYPE', lock).ok == 'zset' then
  local expiry = redis.call('ZSCORE', lock, token)
  if expiry and tonumber(expiry) > server_ms() then return 1 end
end
return 0
)lua";

// KEYS: lock, fence. ARGV: token. The fencing token of a grant made without one (the plain
// SET NX grant of a free name): next_fence, but only while the owner still holds the lock, so
// that it is larger than the token of every earlier grant. 0 when the owner holds nothing.
inline constexpr const char* fence_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, token = KEYS[1], ARGV[1]
if redis.pcall('GET', lock) == token then return next_fence(KEYS[2]) end
if redis.call('TYPE', lock).ok == 'zset' then
  local expiry = redis.call('ZSCORE', lock, token)
  if expiry and tonumber(expiry) > server_ms() then return next_fence(KEYS[2]) end
end
return 0
)lua";

// Counting semaphores (key.limit() = N > 0). Shared: the checks of the two keys, which another
// program may have planted (a foreign key is reported, never overwritten or counted), and the
// expiry of both keys at the latest holder's.
#define LOCKSMITH_REDIS_PERMITS                                                     \
    "local function foreign(k)\n"                                                   \
    "  local kind = redis.call('TYPE', k).ok\n"                                     \
    "  if kind ~= 'zset' and kind ~= 'none' then return {3, 'permits', kind} end\n" \
    "end\n"                                                                         \
    "local function kept_limit(lim)\n"                                              \
    "  local kind = redis.call('TYPE', lim).ok\n"                                   \
    "  if kind == 'none' then return nil end\n"                                     \
    "  if kind ~= 'string' then return nil, {3, 'limit', kind} end\n"               \
    "  local v = redis.call('GET', lim)\n"                                          \
    "  local n = tonumber(v)\n"                                                     \
    "  if not string.match(v, '^[1-9]%d?%d?%d?%d?%d?%d?$') or n > 1000000 then\n"   \
    "    return nil, {3, 'limit', 'value'}\n"                                       \
    "  end\n"                                                                       \
    "  return n\n"                                                                  \
    "end\n"                                                                         \
    "local function expire_both(set, lim)\n"                                        \
    "  local top = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]\n"            \
    "  if not top then\n"                                                           \
    "    redis.call('DEL', set, lim)\n"                                             \
    "    return\n"                                                                  \
    "  end\n"                                                                       \
    "  redis.call('PEXPIREAT', set, math.floor(tonumber(top)))\n"                   \
    "  redis.call('PEXPIREAT', lim, math.floor(tonumber(top)))\n"                   \
    "end\n"

// KEYS: permits, limit, fence. ARGV: token, ttl ms, limit. Drops the holders whose TTL ran out
// (server clock), then grants when fewer than the limit remain. Returns {1, fence} for a new
// permit, {1, 0} when the owner held one already (its TTL renewed), {0, ms} when all are held
// (ms: until the first of them expires), {2, kept} when the name's limit is another, {3, what,
// detail} when a key of the name is not ours (what: "permits" or "limit").
inline constexpr const char* acquire_permit_script =
    LOCKSMITH_REDIS_PROLOGUE LOCKSMITH_REDIS_PERMITS R"lua(
local set, lim, fence = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = foreign(set)
if bad then return bad end
local kept, wrong = kept_limit(lim)
if wrong then return wrong end
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', set, '-inf', now)  -- holders whose TTL ran out (or died)
if kept and kept ~= limit then return {2, kept} end
if redis.call('ZSCORE', set, token) then
  redis.call('ZADD', set, now + ttl, token)
  expire_both(set, lim)
  return {1, 0}
end
if redis.call('ZCARD', set) >= limit then
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  return {0, math.max(math.floor(tonumber(first)) - now, 1)}
end
redis.call('ZADD', set, now + ttl, token)
redis.call('SET', lim, ARGV[3])
expire_both(set, lim)
return {1, next_fence(fence)}
)lua";

// KEYS: permits, limit. ARGV: token, ttl ms. Renews the owner's own permit only: 1 when it was
// live and now lasts ttl from now, 0 when the owner holds none (an expired one is not revived).
inline constexpr const char* refresh_permit_script =
    LOCKSMITH_REDIS_PROLOGUE LOCKSMITH_REDIS_PERMITS R"lua(
local set, lim, token, ttl = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if foreign(set) then return 0 end
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
if not redis.call('ZSCORE', set, token) then return 0 end
redis.call('ZADD', set, 'XX', now + ttl, token)
expire_both(set, lim)
return 1
)lua";

// KEYS: permits, limit. ARGV: token, channel. Gives back the owner's own permit (another's is
// left alone) and announces it on the channel, where the waiters for a permit listen. Returns 1
// when a permit was given back, 0 when the owner held none.
inline constexpr const char* release_permit_script =
    LOCKSMITH_REDIS_PROLOGUE LOCKSMITH_REDIS_PERMITS R"lua(
local set, lim, token = KEYS[1], KEYS[2], ARGV[1]
if foreign(set) then return 0 end
if redis.call('ZREM', set, token) == 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', set, '-inf', server_ms())
expire_both(set, lim)
redis.call('PUBLISH', ARGV[2], 'permit')
return 1
)lua";

// KEYS: lock, permits, limit. Returns {state, holders, pttl[, limit]}: state 0 free, 1
// exclusive, 2 shared, 3 a key of another type (not ours), 4 a counting semaphore (holders = its
// live permits, limit = its kept limit); holders = number of live readers or permits. A name
// with a live permit or a kept limit is a semaphore: that is what status shows for it.
inline constexpr const char* status_script = LOCKSMITH_REDIS_PROLOGUE LOCKSMITH_REDIS_PERMITS R"lua(
local lock, set, lim = KEYS[1], KEYS[2], KEYS[3]
if set then
  local kept, wrong = kept_limit(lim)
  if foreign(set) or wrong then return {3, 0, -1} end
  local n = redis.call('ZCOUNT', set, '(' .. server_ms(), '+inf')
  if kept or n > 0 then return {4, n, redis.call('PTTL', set), kept or 0} end
end
local kind = redis.call('TYPE', lock).ok
if kind == 'string' then return {1, 1, redis.call('PTTL', lock)} end
if kind == 'zset' then
  local n = redis.call('ZCOUNT', lock, '(' .. server_ms(), '+inf')
  if n == 0 then return {0, 0, -2} end
  return {2, n, redis.call('PTTL', lock)}
end
if kind == 'none' then return {0, 0, -2} end
return {3, 0, -1}
)lua";

#undef LOCKSMITH_REDIS_PERMITS
#undef LOCKSMITH_REDIS_QUEUE
#undef LOCKSMITH_REDIS_PROLOGUE

}  // namespace locksmith::strategies::redis_detail
