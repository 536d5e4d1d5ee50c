-- Token bucket, the classic "Redis + Lua" rate limiter that RL.CHECK ... ALGO TOKEN replaces.
--
-- KEYS[1]  the bucket key (a hash: tokens, ts)
-- ARGV     limit, period_ms, burst, cost
-- Returns  {allowed, burst, remaining, retry_after_ms, reset_after_ms}: RL.CHECK's reply.
--
-- Capacity `burst`, continuous refill of `limit` tokens per `period_ms`, taken lazily on each
-- call; the server's clock (TIME) is the only clock. The hash expires when the bucket would be
-- full again (PEXPIRE), so, like Sluice, Redis forgets fresh buckets. Times are kept in
-- microseconds; fractional tokens are kept as they are (a double), so decisions match RL.CHECK's
-- up to rounding at the microsecond.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period_us = tonumber(ARGV[2]) * 1000
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = limit / period_us -- tokens per microsecond

local h = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(h[1])
local ts = tonumber(h[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)

local allowed = 0
local retry_ms = -1
if tokens >= cost then
  allowed = 1
  tokens = tokens - cost
else
  retry_ms = math.ceil((cost - tokens) / rate / 1000)
end
local reset_ms = math.ceil((burst - tokens) / rate / 1000)

if allowed == 1 and cost > 0 then
  if reset_ms > 0 then
    redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.0f', now))
    redis.call('PEXPIRE', key, reset_ms)
  else
    redis.call('DEL', key)
  end
end
return {allowed, burst, math.floor(tokens), retry_ms, reset_ms}
