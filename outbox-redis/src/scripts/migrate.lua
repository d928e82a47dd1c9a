-- Upgrade in place: move unfinished deliveries from the first layout's due sets, one per
-- source (`q:h:<consumer>`, `q:w`, `q:e`, registered in `qs`), into their groups (`g:`,
-- indexed by `G:`); register every consumer's group index. Run at start-up until it answers
-- 0; each call is atomic and moves at most `limit` rows, so a large outbox is upgraded in
-- steps without blocking Redis.
-- ARGV: limit. Returns how many rows it moved.
local limit = tonumber(ARGV[1])
local done = 0
-- Every consumer's group index is registered in `qs` (`put_consumer` does it since enqueue
-- stopped doing it), so `stats.lua` still sees its deliveries after the consumer is deleted.
for _, c in ipairs(redis.call('HKEYS', K_CONSUMERS)) do redis.call('SADD', K_QS, k_G('handler', c)) end
for _, q in ipairs(redis.call('SMEMBERS', K_QS)) do
  if string.sub(q, 1, #P + 3) == P .. ':q:' then
    local r = redis.call('ZRANGE', q, 0, limit - done - 1, 'WITHSCORES')
    for j = 1, #r, 2 do
      local m = r[j]
      local d = load(member_id(m))
      if d and not finished(d.status) then
        redis.call('ZADD', k_g(d.kind, d.target, d.tenant), r[j + 1], m)
        touch(d.kind, d.target, d.tenant)
        redis.call('SADD', K_QS, k_G(d.kind, d.target))
      end
      redis.call('ZREM', q, m)
      done = done + 1
    end
    if redis.call('EXISTS', q) == 0 then redis.call('SREM', K_QS, q) end
    if done >= limit then return done end
  end
end
return done
