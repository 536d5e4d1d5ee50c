-- In-flight leases, the usual "Redis + Lua" recipe that RL.ACQUIRE replaces: a sorted set of
-- request ids scored by their expiry, stale ones dropped on every acquire, ZREM to release.
--
-- KEYS[1]  the key's sorted set
-- ARGV     max, ttl_ms, id (the caller makes the id unique: a UUID, a counter)
-- Returns  {allowed, max, in_flight, retry_after_ms, id | nil}: RL.ACQUIRE's reply.
-- Release: ZREM KEYS[1] id (1 released, 0 unknown or already dropped).
--
-- The set expires with its newest lease (PEXPIRE ttl on every grant), so an idle key is
-- forgotten; the server's clock (TIME) is the only clock.
local key = KEYS[1]
local max = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if held < max then
  redis.call('ZADD', key, now + ttl, ARGV[3])
  redis.call('PEXPIRE', key, ttl)
  return {1, max, held + 1, -1, ARGV[3]}
end
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, max, held, tonumber(first[2]) - now, false}
