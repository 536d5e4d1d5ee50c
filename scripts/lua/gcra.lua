-- GCRA in one string, the "Redis + Lua" form of RL.CHECK ... ALGO GCRA (and of TOKEN: the same
-- decisions, kept as one theoretical arrival time).
--
-- KEYS[1]  the key (a string: the theoretical arrival time `tat`, integer microseconds)
-- ARGV     limit, period_ms, burst, cost
-- Returns  {allowed, burst, remaining, retry_after_ms, reset_after_ms}: RL.CHECK's reply.
--
-- Emission interval T = period/limit, tolerance tau = burst*T. A request of `cost` is allowed
-- iff max(tat, now) + cost*T - tau <= now. The key expires when the bucket is full again
-- (SET ... PX reset), so a missing key is a full bucket.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period_us = tonumber(ARGV[2]) * 1000
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = period_us / limit
local tau = burst * interval

local tat = tonumber(redis.call('GET', key)) or now
tat = math.min(math.max(tat, now), now + tau)

local new_tat = tat + cost * interval
if new_tat - tau <= now then
  local reset_ms = math.ceil((new_tat - now) / 1000)
  if cost > 0 then
    if reset_ms > 0 then
      redis.call('SET', key, string.format('%.0f', new_tat), 'PX', reset_ms)
    else
      redis.call('DEL', key)
    end
  end
  return {1, burst, math.floor((tau - (new_tat - now)) / interval), -1, reset_ms}
end
return {0, burst, math.floor((tau - (tat - now)) / interval),
  math.ceil((new_tat - tau - now) / 1000), math.ceil((tat - now) / 1000)}
