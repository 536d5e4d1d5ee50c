-- Sliding-window counter, the "Redis + Lua" form of RL.CHECK ... ALGO SLIDING.
--
-- KEYS[1]  the key (a hash: s = current window start in microseconds, p = previous window's
--          count, c = current window's count)
-- ARGV     limit, period_ms, cost
-- Returns  {allowed, limit, remaining, retry_after_ms, reset_after_ms}: RL.CHECK's reply.
--
-- Windows are aligned to multiples of the period since the Unix epoch, as in Sluice. At
-- `elapsed` into the current window the estimate is curr + prev * (period - elapsed) / period;
-- a request is allowed iff estimate + cost <= limit. The hash expires when neither count
-- weighs anything any more.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local p = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local start = now - now % p
local elapsed = now - start

local h = redis.call('HMGET', key, 's', 'p', 'c')
local s = tonumber(h[1])
local prev, curr = 0, 0
if s ~= nil then
  local sp = math.min(tonumber(h[2]) or 0, limit)
  local sc = math.min(tonumber(h[3]) or 0, limit)
  if s >= start then
    prev, curr = sp, sc
  elseif s + p >= start then
    prev, curr = sc, 0
  end
end

local weight = p - elapsed
local estimate = curr + prev * weight / p
local allowed = 0
local retry_ms = -1
local remaining
if estimate + cost <= limit then
  allowed = 1
  curr = curr + cost
  remaining = math.floor(limit - estimate - cost)
else
  remaining = math.floor(math.max(0, limit - estimate))
  local wait
  if curr + cost <= limit then
    -- prev's weight must decay: prev * (p - e) / p <= limit - curr - cost.
    wait = (p - (limit - curr - cost) * p / prev) - elapsed
  else
    -- Next window: prev becomes curr, curr becomes 0.
    wait = weight + math.max(0, p - (limit - cost) * p / curr)
  end
  retry_ms = math.ceil(wait / 1000)
end

local reset_us = 0
if curr > 0 then
  reset_us = 2 * p - elapsed
elseif prev > 0 then
  reset_us = weight
end
local reset_ms = math.ceil(reset_us / 1000)

if allowed == 1 and cost > 0 then
  if reset_ms > 0 then
    redis.call('HSET', key, 's', string.format('%.0f', start), 'p', prev, 'c', curr)
    redis.call('PEXPIRE', key, reset_ms)
  else
    redis.call('DEL', key)
  end
end
return {allowed, limit, remaining, retry_ms, reset_ms}
