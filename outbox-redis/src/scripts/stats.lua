-- Counts per status and the oldest due time.
-- ARGV: now
-- Returns {counter hash as a flat list, oldest due or false}.
local now = ARGV[1]
local oldest, oldest_s = nil, false
for _, q in ipairs(redis.call('SMEMBERS', K_QS)) do
  local r = redis.call('ZRANGEBYSCORE', q, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
  if #r > 0 then
    local s = tonumber(r[2])
    if not oldest or s < oldest then oldest, oldest_s = s, r[2] end
  end
end
return { redis.call('HGETALL', K_STATS), oldest_s }
