-- Counts per status and the oldest due time.
-- ARGV: now
-- Returns {counter hash as a flat list, oldest due or false}.
local now = ARGV[1]
local oldest, oldest_s = nil, false
-- The source indexes: webhooks, e-mail, every consumer's, and those registered in `qs` (by
-- earlier versions at enqueue, by `put_consumer`, by a replay).
local sources = { [k_G('webhook', '')] = true, [k_G('email', '')] = true }
for _, c in ipairs(redis.call('HKEYS', K_CONSUMERS)) do sources[k_G('handler', c)] = true end
for _, q in ipairs(redis.call('SMEMBERS', K_QS)) do sources[q] = true end
for q in pairs(sources) do
  local r = redis.call('ZRANGEBYSCORE', q, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
  if #r > 0 then
    local s = tonumber(r[2])
    if not oldest or s < oldest then oldest, oldest_s = s, r[2] end
  end
end
return { redis.call('HGETALL', K_STATS), oldest_s }
