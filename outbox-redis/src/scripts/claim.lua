-- Claim up to `batch` due deliveries: kill the exhausted candidates, then take the rest in
-- (next_attempt_at, sequence) order across the due sets of the served sources, skipping
-- excluded topics and rows held back by the ordering barrier.
-- ARGV: now, lease_until, batch, nsrc, (kind, target, budget) x nsrc,
--       nexcl, excluded topics..., ndorm, dormant topics..., tokens (batch of them)
-- Returns {claimed_from, h, s, v, l, message payload, message fields} per claimed delivery.
local now_s, until_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local batch = tonumber(ARGV[3])
local a = 4
local sources = {}
local nsrc = tonumber(ARGV[a])
a = a + 1
for _ = 1, nsrc do
  sources[#sources + 1] = { key = k_q(ARGV[a], ARGV[a + 1]), x = k_x(ARGV[a], ARGV[a + 1]),
    budget = tonumber(ARGV[a + 2]), buf = {}, pos = 1, done = false }
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

local CHUNK = math.min(batch + 16, 1000)
-- Scores are needed only to merge several sources.
local merge = #sources > 1

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
    src.pos = 1
    if merge then
      local r = redis.call('ZRANGEBYSCORE', src.key, '-inf', now_s, 'WITHSCORES', 'LIMIT', start, CHUNK)
      src.buf = {}
      for j = 1, #r, 2 do src.buf[#src.buf + 1] = { r[j], tonumber(r[j + 1]) } end
    else
      src.buf = redis.call('ZRANGEBYSCORE', src.key, '-inf', now_s, 'LIMIT', start, CHUNK)
    end
    if #src.buf < CHUNK then src.done = true end
    if #src.buf == 0 then return nil end
  end
end

local function kill(d)
  set_status(d, 'dead')
  d.completed = now_s
  local snoozes = string.match(d.v, '^(%d*)')
  redis.call('HSET', k_d(d.id), 'h', make_h('dead', d.attempts, d.next, '', now_s),
    'v', snoozes .. '|' .. now_s .. '|max_attempts')
  place(d, false)
end

-- Step 1: every candidate that is not held and has spent its source's budget dies. The
-- attempts index holds every queued (not claimed), unfinished, non-held row that spent
-- attempts, and every claimed row whose claim spent its claimer's last attempt (and
-- finished rows not yet cleaned up, removed here). The step reads at most EXHAUSTED_STEP
-- entries per source, so a claim stays bounded however many rows are exhausted at once;
-- rows beyond it die in a later claim, or in step 3 when the claim meets them in due order.
local EXHAUSTED_STEP = 256
for _, src in ipairs(sources) do
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', src.x, src.budget, '+inf', 'LIMIT', 0, EXHAUSTED_STEP)) do
    local d = load(member_id(m))
    if not d or finished(d.status) then
      redis.call('ZREM', src.x, m)
    elseif d.status ~= 'held' and tonumber(d.next) <= now and not excluded[d.topic] then
      kill(d)
    end
  end
end

-- Step 2: the per-key barrier. An older unfinished delivery with the same tenant,
-- destination and ordering key blocks, unless its topic is dormant.
local function blocked(ok, m)
  local off = 0
  while true do
    local r = redis.call('ZRANGE', ok, off, off + 15)
    if #r == 0 then return false end
    local gone = 0
    for _, x in ipairs(r) do
      if x == m then return false end
      local xd = load(member_id(x))
      if not xd or finished(xd.status) then
        redis.call('ZREM', ok, x)
        gone = gone + 1
      elseif not dormant[xd.topic] then
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
  local m, bs = nil, nil
  if merge then
    local best
    for _, src in ipairs(sources) do
      local hd = head(src)
      if hd and (not best or hd[2] < best[2] or (hd[2] == best[2] and lt(hd[1], best[1]))) then
        best, bs = hd, src
      end
    end
    if best then m = best[1] end
  else
    bs = sources[1]
    m = head(bs)
  end
  if not m then break end
  bs.pos = bs.pos + 1
  local id = member_id(m)
  local dk = k_d(id)
  local r = redis.call('HMGET', dk, 'h', 's', 'v', 'l', 'r')
  if not r[1] then
    redis.call('ZREM', bs.key, m)
  else
    local st, at, nx = parse_h(r[1])
    -- mid, tenant, topic, kind, target and okey (the member is known, created is not needed).
    local mid, tenant, topic, kind, target, okey = string.match(r[2],
      '^[^\31]*\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31[^\31]*\31(.*)$')
    if finished(st) then
      redis.call('ZREM', bs.key, m)
    elseif tonumber(nx) > now then
      redis.call('ZADD', bs.key, nx, m)
    elseif excluded[topic] then
      bs.anchor = m
    elseif st ~= 'held' and tonumber(at) >= bs.budget then
      kill({ id = id, m = m, v = r[3], mid = mid, tenant = tenant, topic = topic, kind = kind,
        target = target, okey = okey ~= '' and okey, status = st, attempts = at, next = nx })
    elseif okey ~= '' and blocked(k_o(tenant, kind, target, okey), m) then
      bs.anchor = m
    else
      if st ~= 'held' then at = S(tonumber(at) + 1) end
      moved(id, kind, target, st, 'processing')
      local h = make_h('processing', at, until_s, ARGV[tok_base + #claimed], now_s)
      -- `du`: when this attempt was due (the ledger's scheduled time).
      redis.call('HSET', dk, 'h', h, 'du', nx)
      redis.call('ZADD', bs.key, until_s, m)
      -- A claimed row is stale-able: index it when this claim spent the last attempt of
      -- the claimer's budget (other rows are not exhausted when their lease ends).
      if tonumber(at) >= bs.budget then redis.call('ZADD', bs.x, at, m) end
      local msg = msgs[mid]
      if not msg then
        msg = redis.call('HMGET', k_m(mid), 'p', 'x')
        msgs[mid] = msg
      end
      claimed[#claimed + 1] = { st, h, r[2], r[3], r[4], r[5], msg[1], msg[2] }
    end
  end
end
flush()
return claimed
