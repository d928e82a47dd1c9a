-- Claim up to `batch` due deliveries: kill the exhausted candidates, then fill the batch in
-- rounds over the groups (tenant, destination) of the served sources that have due work:
-- round 1 takes the first claimable delivery of every group, round 2 the second, and so on;
-- groups go in the order of their oldest due delivery, and within a group deliveries go in
-- (next_attempt_at, sequence) order, skipping rows held back by the ordering barrier. Groups of excluded endpoints are left untouched.
-- ARGV: now, lease_until, batch, nsrc, (kind, target, budget) x nsrc,
--       nexe, excluded endpoints..., ndorm, dormant topics...,
--       endpoint limit (0: none), nroom, (endpoint, room) x nroom,
--       nquota, (group, quota) x nquota, tokens (batch of them)
-- With quotas (a claim over several shards, whose rounds the caller played across all of
-- them) only the groups named are read, in the order given, each up to its quota; a group
-- is named by its key after the prefix (`:g:...`).
-- Returns {claimed_from, h, s, v, l, message payload, message fields} per claimed delivery.
local now_s, until_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local batch = tonumber(ARGV[3])
local a = 4
local sources = {}
local nsrc = tonumber(ARGV[a])
a = a + 1
for _ = 1, nsrc do
  sources[#sources + 1] = { G = k_G(ARGV[a], ARGV[a + 1]), x = k_x(ARGV[a], ARGV[a + 1]),
    kind = ARGV[a], budget = tonumber(ARGV[a + 2]) }
  a = a + 3
end
local excluded_ep = {}
local nexe = tonumber(ARGV[a])
a = a + 1
for _ = 1, nexe do
  excluded_ep[ARGV[a]] = true
  a = a + 1
end
local dormant = {}
local ndorm = tonumber(ARGV[a])
a = a + 1
for _ = 1, ndorm do
  dormant[ARGV[a]] = true
  a = a + 1
end
-- The most rows of one endpoint's group this claim takes: its room, else the limit.
local ep_limit = tonumber(ARGV[a])
if ep_limit == 0 then ep_limit = nil end
a = a + 1
local rooms = {}
local nroom = tonumber(ARGV[a])
a = a + 1
for _ = 1, nroom do
  rooms[ARGV[a]] = tonumber(ARGV[a + 1])
  a = a + 2
end
local function cap_of(key)
  local kind, _, target = parse_g(key)
  if kind ~= 'webhook' then return nil end
  return rooms[target] or ep_limit
end
local quotas = {}
local nquota = tonumber(ARGV[a])
a = a + 1
-- nquota = -1: a dry run for a claim over several shards. Nothing is claimed; only the
-- exhausted rows die (step 1), as at every claim. The answer is {member, group, score} for each row the claim would take, in order.
local peek = nquota < 0
if peek then nquota = 0 end
for _ = 1, nquota do
  quotas[#quotas + 1] = { key = P .. ARGV[a], quota = tonumber(ARGV[a + 1]) }
  a = a + 2
end
local tok_base = a

-- The groups with due work, oldest head first, across the sources. A claim looks at the
-- first `batch + 16` of each source (plus the excluded ones, which it skips); a group further
-- down has its turn once those have nothing claimable left.
local GLIMIT = math.min(batch + 16 + nexe, 2000)
local groups = {}
for _, q in ipairs(quotas) do
  local kind, _, target = parse_g(q.key)
  for _, src in ipairs(sources) do
    if src.kind == kind and (kind ~= 'handler' or src.G == k_G(kind, target)) then
      groups[#groups + 1] = { key = q.key, score = 0, src = src, buf = {}, pos = 1,
        done = false, quota = q.quota, cap = cap_of(q.key) }
      break
    end
  end
end
for _, src in ipairs(nquota > 0 and {} or sources) do
  local r = redis.call('ZRANGEBYSCORE', src.G, '-inf', now_s, 'WITHSCORES', 'LIMIT', 0, GLIMIT)
  for j = 1, #r, 2 do
    local skip = false
    if src.kind == 'webhook' then
      local _, _, target = parse_g(r[j])
      skip = excluded_ep[target]
    end
    if not skip then
      groups[#groups + 1] = { key = r[j], score = tonumber(r[j + 1]), src = src, buf = {},
        pos = 1, done = false, cap = cap_of(r[j]) }
    end
  end
end
if #sources > 1 and nquota == 0 then
  table.sort(groups, function(x, y)
    if x.score ~= y.score then return x.score < y.score end
    return lt(x.key, y.key)
  end)
end
local CHUNK = math.min(math.floor(batch / math.max(#groups, 1)) + 8, 1000)

-- A group's claimed rows move to their lease end in one `ZADD` per group (a command costs
-- far more than the Lua around it), written before the group is read again and at the end.
local function settle(g)
  local l = g.leased
  if l and #l > 0 then
    for i = 1, #l, 2000 do redis.call('ZADD', g.key, unpack(l, i, math.min(i + 1999, #l))) end
    g.leased = {}
  end
end

-- The next unexamined entry of a group. Rows examined and left in place (skipped) are
-- remembered as the anchor; the next chunk starts right after it. Claimed rows move past
-- `now` (settled before the read) and killed rows leave, so neither shifts the ranks of what
-- is still to come.
local function head(g)
  while true do
    if g.pos <= #g.buf then return g.buf[g.pos] end
    if g.done then return nil end
    settle(g)
    local start = 0
    if g.anchor then
      local r = redis.call('ZRANK', g.key, g.anchor)
      if r then start = r + 1 end
    end
    g.pos = 1
    g.buf = redis.call('ZRANGEBYSCORE', g.key, '-inf', now_s, 'LIMIT', start, CHUNK)
    if #g.buf < CHUNK then g.done = true end
    if #g.buf == 0 then return nil end
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
-- entries over all the sources (per shard), so a claim stays bounded however many rows are
-- exhausted at once;
-- rows beyond it die in a later claim, or in step 3 when the claim meets them in due order.
-- The dry run of a claim over several shards takes this step too: the rounds may give a
-- shard nothing to claim, and its exhausted rows must die at this claim all the same.
local EXHAUSTED_STEP = 1000 -- outboxkit_core::claim_rules::EXHAUSTED_PER_CLAIM (checked by a test)
local exhausted_left = EXHAUSTED_STEP
for _, src in ipairs(sources) do
  if exhausted_left <= 0 then break end
  local spent = redis.call('ZRANGEBYSCORE', src.x, src.budget, '+inf', 'LIMIT', 0, exhausted_left)
  exhausted_left = exhausted_left - #spent
  for _, m in ipairs(spent) do
    local d = load(member_id(m))
    if not d or finished(d.status) then
      redis.call('ZREM', src.x, m)
    elseif d.status ~= 'held' and tonumber(d.next) <= now
        and not (d.kind == 'webhook' and excluded_ep[d.target]) then
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

-- Step 3: rounds over the groups. `take` claims the next claimable row of a group and
-- answers whether it found one (a group with none left drops out of the rounds).
local claimed = {}
local msgs = {}
local function take(g)
  local src = g.src
  while true do
    local m = head(g)
    if not m then return false end
    g.pos = g.pos + 1
    local id = member_id(m)
    local dk = k_d(id)
    local r = redis.call('HMGET', dk, 'h', 's', 'v', 'l', 'r', 'b')
    if not r[1] then
      if not peek then redis.call('ZREM', g.key, m) end
    else
      local st, at, nx = parse_h(r[1])
      -- mid, tenant, topic, kind, target and okey (the member is known, created is not needed).
      local mid, tenant, topic, kind, target, okey = string.match(r[2],
        '^[^\31]*\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31[^\31]*\31(.*)$')
      -- Its barrier key: a FIFO endpoint's one slot (`b`), else its ordering key.
      if r[6] then okey = r[6] end
      if peek and (finished(st) or tonumber(nx) > now
          or (st ~= 'held' and tonumber(at) >= src.budget)) then
        -- A dry run leaves rows that would be cleaned up or killed as they are: they are
        -- examined, so the next chunk starts after them (else a chunk of nothing but such
        -- rows would be read again and again).
        g.anchor = m
      elseif finished(st) then
        redis.call('ZREM', g.key, m)
      elseif tonumber(nx) > now then
        redis.call('ZADD', g.key, nx, m)
      elseif st ~= 'held' and tonumber(at) >= src.budget then
        kill({ id = id, m = m, v = r[3], mid = mid, tenant = tenant, topic = topic, kind = kind,
          target = target, okey = okey ~= '' and okey, status = st, attempts = at, next = nx })
      elseif okey ~= '' and blocked(k_o(tenant, kind, target, okey), m) then
        g.anchor = m
      elseif peek then
        -- A dry run moves nothing: the row stays where it is, examined.
        g.anchor = m
        claimed[#claimed + 1] = { m, string.sub(g.key, #P + 1), nx }
        return true
      else
        if st ~= 'held' then at = S(tonumber(at) + 1) end
        moved(id, kind, target, st, 'processing')
        local h = make_h('processing', at, until_s, ARGV[tok_base + #claimed], now_s)
        -- `du`: when this attempt was due (the ledger's scheduled time).
        redis.call('HSET', dk, 'h', h, 'du', nx)
        local l = g.leased
        if not l then
          l = {}
          g.leased = l
        end
        l[#l + 1] = until_s
        l[#l + 1] = m
        -- A claimed row is stale-able: index it when this claim spent the last attempt of
        -- the claimer's budget (other rows are not exhausted when their lease ends).
        if tonumber(at) >= src.budget then redis.call('ZADD', src.x, at, m) end
        local msg = msgs[mid]
        if not msg then
          msg = redis.call('HMGET', k_m(mid), 'p', 'x')
          msgs[mid] = msg
        end
        claimed[#claimed + 1] = { st, h, r[2], r[3], r[4], r[5], msg[1], msg[2] }
        return true
      end
    end
  end
end

-- Whether a group may take another row: within its quota and its endpoint's room.
local function open(g)
  return not ((g.cap and g.cap <= 0) or (g.quota and g.quota <= 0))
end

local active = groups
while #claimed < batch and #active > 0 do
  local still = {}
  for _, g in ipairs(active) do
    if #claimed >= batch then break end
    if open(g) and take(g) then
      if g.cap then g.cap = g.cap - 1 end
      if g.quota then g.quota = g.quota - 1 end
      if open(g) then still[#still + 1] = g end
    end
  end
  active = still
end
if peek then
  flush()
  return claimed
end
-- Every group read gets its new head's score in its source's group index.
for _, g in ipairs(groups) do
  if g.pos > 1 then
    settle(g)
    touch_g(g.key, g.src.G)
  end
end
flush()
return claimed
