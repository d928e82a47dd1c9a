-- Claim up to `batch` due deliveries: kill the exhausted candidates, then take the rest in
-- (next_attempt_at, sequence) order across the due sets of the served sources, skipping
-- excluded topics and rows held back by the ordering barrier.
-- ARGV: now, lease_until, batch, nsrc, (kind, target, budget) x nsrc,
--       nexcl, excluded topics..., ndorm, dormant topics..., tokens (batch of them)
-- Returns {claimed_from, token, delivery fields, message fields} per claimed delivery.
local now_s, until_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local batch = tonumber(ARGV[3])
local a = 4
local sources = {}
local nsrc = tonumber(ARGV[a])
a = a + 1
for _ = 1, nsrc do
  sources[#sources + 1] = { key = k_q(ARGV[a], ARGV[a + 1]), x = k_x(ARGV[a], ARGV[a + 1]),
    budget = ARGV[a + 2], buf = {}, pos = 1, done = false }
  a = a + 3
end
local excluded = {}
local nexcl = tonumber(ARGV[a])
a = a + 1
for _ = 1, nexcl do
  excluded[ARGV[a]] = true
  a = a + 1
end
local dormant = {}
local ndorm = tonumber(ARGV[a])
a = a + 1
for _ = 1, ndorm do
  dormant[ARGV[a]] = true
  a = a + 1
end
local tok_base = a

local CHUNK = math.min(math.max(batch * 2, 64), 1000)

-- The next unexamined entry of a source. Rows examined and left in place (skipped) are
-- remembered as the anchor; the next chunk starts right after it. Claimed rows move past
-- `now` and killed rows leave, so neither shifts the ranks of what is still to come.
local function head(src)
  while true do
    if src.pos <= #src.buf then return src.buf[src.pos] end
    if src.done then return nil end
    local start = 0
    if src.anchor then
      local r = redis.call('ZRANK', src.key, src.anchor)
      if r then start = r + 1 end
    end
    local r = redis.call('ZRANGEBYSCORE', src.key, '-inf', now_s, 'WITHSCORES', 'LIMIT', start, CHUNK)
    src.buf = {}
    src.pos = 1
    for j = 1, #r, 2 do src.buf[#src.buf + 1] = { r[j], tonumber(r[j + 1]) } end
    if #src.buf < CHUNK then src.done = true end
    if #src.buf == 0 then return nil end
  end
end

local function kill(d)
  set_status(d, 'dead')
  d[I_COMPLETED] = now_s
  redis.call('HSET', k_d(d[I_ID]), 'status', 'dead', 'dead', 'max_attempts',
    'completed', now_s, 'updated', now_s, 'token', '', 'lease', '')
  place(d, false)
end

-- Step 1: every candidate that is not held and has spent its source's budget dies. The
-- attempts index holds every queued (not claimed), unfinished, non-held row that spent
-- attempts, and every claimed row whose claim spent its claimer's last attempt (and
-- finished rows not yet cleaned up, removed here).
for _, src in ipairs(sources) do
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', src.x, src.budget, '+inf')) do
    local d = load(member_id(m))
    if not d or finished(d[I_STATUS]) then
      redis.call('ZREM', src.x, m)
    elseif d[I_STATUS] ~= 'held' and tonumber(d[I_NEXT]) <= now and not excluded[d[I_TOPIC]] then
      kill(d)
    end
  end
end

-- Step 2: the per-key barrier. An older unfinished delivery with the same tenant,
-- destination and ordering key blocks, unless its topic is dormant.
local function blocked(d, m)
  local ok = k_o(d[I_TENANT], d[I_KIND], d[I_TARGET], d[I_OKEY])
  local off = 0
  while true do
    local r = redis.call('ZRANGE', ok, off, off + 15)
    if #r == 0 then return false end
    local gone = 0
    for _, x in ipairs(r) do
      if x == m then return false end
      local xd = redis.call('HMGET', k_d(member_id(x)), 'status', 'topic')
      if not xd[1] or finished(xd[1]) then
        redis.call('ZREM', ok, x)
        gone = gone + 1
      elseif not dormant[xd[2]] then
        return true
      end
    end
    off = off + #r - gone
  end
end

-- Step 3: take the rest in order.
local claimed = {}
local msgs = {}
while #claimed < batch do
  local best, bs = nil, nil
  for _, src in ipairs(sources) do
    local h = head(src)
    if h and (not best or h[2] < best[2] or (h[2] == best[2] and lt(h[1], best[1]))) then
      best, bs = h, src
    end
  end
  if not best then break end
  bs.pos = bs.pos + 1
  local m = best[1]
  local d = load(member_id(m))
  if not d or finished(d[I_STATUS]) then
    redis.call('ZREM', bs.key, m)
  elseif tonumber(d[I_NEXT]) > now then
    redis.call('ZADD', bs.key, d[I_NEXT], m)
  elseif excluded[d[I_TOPIC]] then
    bs.anchor = m
  elseif d[I_STATUS] ~= 'held' and tonumber(d[I_ATTEMPTS]) >= tonumber(bs.budget) then
    kill(d)
  elseif d[I_OKEY] and blocked(d, m) then
    bs.anchor = m
  else
    local from = d[I_STATUS]
    local tok = ARGV[tok_base + #claimed]
    if from ~= 'held' then d[I_ATTEMPTS] = S(tonumber(d[I_ATTEMPTS]) + 1) end
    set_status(d, 'processing')
    d[I_TOKEN], d[I_LEASE], d[I_NEXT], d[I_UPDATED] = tok, until_s, until_s, now_s
    redis.call('HSET', k_d(d[I_ID]), 'status', 'processing', 'attempts', d[I_ATTEMPTS],
      'token', tok, 'lease', until_s, 'next', until_s, 'updated', now_s)
    redis.call('ZADD', bs.key, until_s, m)
    -- A claimed row is stale-able: index it when this claim spent the last attempt of
    -- the claimer's budget (other rows are not exhausted when their lease ends).
    if tonumber(d[I_ATTEMPTS]) >= tonumber(bs.budget) then
      redis.call('ZADD', bs.x, d[I_ATTEMPTS], m)
    end
    local mid = d[I_MID]
    local msg = msgs[mid]
    if not msg then
      msg = redis.call('HMGET', k_m(mid), unpack(MF))
      msgs[mid] = msg
    end
    claimed[#claimed + 1] = { from, tok, d, msg }
  end
end
flush()
return claimed
