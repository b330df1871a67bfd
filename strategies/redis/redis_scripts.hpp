// Private to the redis strategy: the server-side scripts. Each runs atomically on the server,
// which is what makes check-then-act on a lock key safe.
//
// Keys of one lock name N (P = key_prefix):
//   P lock: N   exclusive: a string holding the owner token, with PX = the TTL
//               shared: a sorted set of reader tokens scored by their expiry (server ms), and
//               PEXPIREAT = the latest reader expiry, so an abandoned set disappears on its own
//   P fence: N  the fencing counter (INCR for every grant that gets a token: at the grant in the
//               scripts below, on first request for the plain SET NX grant; never deleted)
//   P wait: N   a sorted set of writers that wait, scored by when their registration lapses;
//               while it is not empty, no new reader is admitted (writers are not starved)
//   P chan: N   the pub/sub channel on which a release (or a lapse) is announced
// Times come from the server's TIME, so client clocks do not matter. Needs Redis >= 5 (writes
// after TIME in a script).
#pragma once

namespace locksmith::strategies::redis_detail {

// Shared prologue: the server's clock in ms, and the helper that aligns a reader set's expiry
// with its latest reader. Both are functions, called only on the paths that need them: the
// common exclusive grant and release never read TIME, which keeps each script close to the cost
// of the plain commands it runs (bench/redis/RESULTS.md).
#define LOCKSMITH_REDIS_PROLOGUE                                                      \
    "local function server_ms()\n"                                                    \
    "  local t = redis.call('TIME')\n"                                                \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"            \
    "end\n"                                                                           \
    "local function expire_at_latest(k)\n"                                            \
    "  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')\n"                   \
    "  if top[2] then redis.call('PEXPIREAT', k, math.floor(tonumber(top[2]))) end\n" \
    "end\n"

// KEYS: lock, fence, wait. ARGV: token, ttl ms, mode ("x" or "s"), wait ms (> 0: the caller
// will wait; a writer then registers in the wait set), channel.
// Returns {1, fence} for a new grant, {1, 0} when the owner already held it in that mode (the
// TTL is renewed), {0, ms} when refused, ms being how long the obstacle may last at most
// (-1 or -2: unknown or none).
inline constexpr const char* acquire_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, fence, wait = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, mode, wait_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if mode == 'x' then
  if redis.call('SET', lock, token, 'NX', 'PX', ttl) then
    -- Only a waiting caller can have registered as a waiting writer.
    if wait_ms > 0 then redis.call('ZREM', wait, token) end
    return {1, redis.call('INCR', fence)}
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
    if n == 0 or (n == 1 and redis.call('ZSCORE', lock, token)) then
      -- free, or promotion of the sole reader
      redis.call('DEL', lock)
      redis.call('SET', lock, token, 'PX', ttl)
      redis.call('ZREM', wait, token)
      return {1, redis.call('INCR', fence)}
    end
  end
  local left = redis.call('PTTL', lock)
  if wait_ms > 0 then
    -- Registered until just after this waiter's next scheduled retry: a waiter that died
    -- blocks new readers for at most the holders' TTL plus 2 s.
    local now = server_ms()
    local keep = math.min(wait_ms, math.max(left, 0) + 2000)
    redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
    redis.call('ZADD', wait, now + keep, token)
    expire_at_latest(wait)
  end
  return {0, left}
end
-- shared
local now = server_ms()
local kind = redis.call('TYPE', lock).ok
if kind == 'string' then
  if redis.call('GET', lock) ~= token then return {0, redis.call('PTTL', lock)} end
  -- demotion: the writer becomes the only reader; waiting readers may come in now
  redis.call('DEL', lock)
  redis.call('ZADD', lock, now + ttl, token)
  redis.call('PEXPIREAT', lock, now + ttl)
  redis.call('PUBLISH', ARGV[5], 'demoted')
  return {1, redis.call('INCR', fence)}
end
if kind == 'zset' then redis.call('ZREMRANGEBYSCORE', lock, '-inf', now) end
local renewal = redis.call('ZSCORE', lock, token)
if not renewal then
  redis.call('ZREMRANGEBYSCORE', wait, '-inf', now)
  if redis.call('ZCARD', wait) > 0 then
    return {0, math.max(redis.call('PTTL', lock), redis.call('PTTL', wait))}
  end
end
redis.call('ZADD', lock, now + ttl, token)
expire_at_latest(lock)
if renewal then return {1, 0} end
return {1, redis.call('INCR', fence)}
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

// KEYS: lock, wait. ARGV: token, channel. Compare-and-delete, in either mode; also withdraws
// the owner from the wait set. Publishes when the lock became free or the wait set shrank, so
// that waiters retry. Returns 1 when a grant was released.
inline constexpr const char* release_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, wait, token = KEYS[1], KEYS[2], ARGV[1]
if redis.pcall('GET', lock) == token then
  -- The exclusive owner: it left the wait set when it was granted.
  redis.call('DEL', lock)
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
local released, freed = 0, false
if redis.call('TYPE', lock).ok == 'zset' then
  if redis.call('ZREM', lock, token) == 1 then
    released = 1
    redis.call('ZREMRANGEBYSCORE', lock, '-inf', server_ms())
    if redis.call('ZCARD', lock) == 0 then freed = true else expire_at_latest(lock) end
  end
end
if redis.call('ZREM', wait, token) == 1 then freed = true end
if freed then redis.call('PUBLISH', ARGV[2], 'released') end
return released
)lua";

// KEYS: wait. ARGV: token, channel. A writer that stops waiting withdraws its registration and
// lets blocked readers retry.
inline constexpr const char* unwait_script = R"lua(
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
// SET NX grant of a free name): INCR, but only while the owner still holds the lock, so that it
// is larger than the token of every earlier grant. 0 when the owner holds nothing.
inline constexpr const char* fence_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock, token = KEYS[1], ARGV[1]
if redis.pcall('GET', lock) == token then return redis.call('INCR', KEYS[2]) end
if redis.call('TYPE', lock).ok == 'zset' then
  local expiry = redis.call('ZSCORE', lock, token)
  if expiry and tonumber(expiry) > server_ms() then return redis.call('INCR', KEYS[2]) end
end
return 0
)lua";

// KEYS: lock. Returns {state, holders, pttl}: state 0 free, 1 exclusive, 2 shared, 3 a key of
// another type (not ours); holders = number of live readers.
inline constexpr const char* status_script = LOCKSMITH_REDIS_PROLOGUE R"lua(
local lock = KEYS[1]
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

#undef LOCKSMITH_REDIS_PROLOGUE

}  // namespace locksmith::strategies::redis_detail
