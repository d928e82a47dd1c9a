-- Enqueue messages with their fan-out, atomically.
-- ARGV: now, count, sequence bases ('' = draw from this shard's `seq`; with several shards
--   the caller reserves SEQ_BLOCK numbers per message from shard 0's `seq`, so that one
--   order holds across shards, and passes each message's first one, comma-separated), then
--   per message 10 fields:
--   id, tenant, topic, okey, ikey, available_at, packed fields (`x`), payload,
--   id base (a UUIDv7 from the injected entropy), recipients (newline-separated)
-- Returns one {message id, deliveries, duplicate (0/1)} per message.
local now = ARGV[1]
local count = tonumber(ARGV[2])
local seqbases = {}
for b in string.gmatch(ARGV[3], '%d+') do seqbases[#seqbases + 1] = tonumber(b) end
local SEQ_BLOCK = 4096

-- Delivery ids: the first destination's is the base itself (a fresh UUIDv7 from the caller's
-- entropy); the others keep the base's time part, the rest from SHA-1 of the base and the
-- index (a `sha1hex` and its string work cost about 5 % of a one-message enqueue).
local VARIANT = { '8', '9', 'a', 'b' }
local function derive_id(base, i)
  local h = redis.sha1hex(base .. ':' .. S(i))
  return string.sub(base, 1, 13) .. '-7' .. string.sub(h, 1, 3) .. '-'
    .. VARIANT[tonumber(string.sub(h, 4, 4), 16) % 4 + 1] .. string.sub(h, 5, 7) .. '-'
    .. string.sub(h, 8, 19)
end

local consumers = nil
local function all_consumers()
  if consumers then return consumers end
  consumers = {}
  local r = redis.call('HGETALL', K_CONSUMERS)
  local paused = {}
  for _, name in ipairs(redis.call('SMEMBERS', K_PAUSED)) do paused[name] = true end
  for j = 1, #r, 2 do
    local v = r[j + 1]
    local bar = string.find(v, '|', 1, true)
    consumers[#consumers + 1] = { name = r[j], filter = string.sub(v, bar + 1),
                                  paused = paused[r[j]] }
  end
  table.sort(consumers, function(a, b) return lt(a.name, b.name) end)
  return consumers
end

local endpoints = {}
local function tenant_endpoints(t)
  if endpoints[t] then return endpoints[t] end
  local list = {}
  -- Ordered by (created_at, id): the score, then the id.
  for _, id in ipairs(redis.call('ZRANGE', k_te(t), 0, -1)) do
    local r = redis.call('HMGET', k_e(id), 'status', 'filter', 'fifo')
    if r[1] then list[#list + 1] = { id = id, status = r[1], filter = r[2], fifo = r[3] == '1' } end
  end
  endpoints[t] = list
  return list
end

local out = {}
local woke = false
-- Groups written to: each gets its head's score once, at the end.
local touched = {}
local a = 4
for msg_i = 1, count do
  local mid, tenant, topic, okey, ikey = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local avail, meta, payload = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local base, emails = ARGV[a + 8], ARGV[a + 9]
  a = a + 10
  local ik = nil
  local existing = false
  if ikey ~= '' then
    ik = k_i(tenant, topic, ikey)
    existing = redis.call('GET', ik)
  end
  if existing then
    out[#out + 1] = { existing, 0, 1 }
  else
    local dests = {}
    for _, c in ipairs(all_consumers()) do
      if matches(c.filter, topic) then
        -- A paused consumer's delivery waits, held, due never, until it is resumed.
        dests[#dests + 1] = { 'handler', c.name, c.paused and HOLD_NEVER or nil }
      end
    end
    for _, e in ipairs(tenant_endpoints(tenant)) do
      if matches(e.filter, topic) then
        dests[#dests + 1] = { 'webhook', e.id, hold_until(e.status, now), e.fifo }
      end
    end
    for r in string.gmatch(emails, '[^\n]+') do dests[#dests + 1] = { 'email', r } end

    local n = #dests
    redis.call('HSET', k_m(mid), 'p', payload, 'x', meta, 'nd', S(n))
    if ik then redis.call('SET', ik, mid) end
    if n == 0 then
      redis.call('ZADD', k_tm(tenant), now, mid)
      purgeable[tenant] = true
    else
      local last
      -- A message with more destinations than its reserved block takes this shard's own
      -- numbers (its order against other shards is then only by due time).
      if seqbases[msg_i] and n <= SEQ_BLOCK then
        last = seqbases[msg_i] + n
      else
        last = redis.call('INCRBY', K_SEQ, n)
      end
      counts.pending = (counts.pending or 0) + n
      local h = make_h('pending', '0', avail, '', now)
      local tail = '\31' .. mid .. '\31' .. tenant .. '\31' .. topic .. '\31'
      for i, dest in ipairs(dests) do
        local id = i == 1 and base or derive_id(base, i)
        local seq = last - n + i
        local kind, target, hold, fifo = dest[1], dest[2], dest[3], dest[4]
        local m = member(seq, id)
        local row_h, due = h, avail
        if hold then
          -- Waiting for a paused consumer, or a paused or disabled endpoint: held (an
          -- endpoint's indexed like a 401 hold).
          row_h, due = make_h('held', '0', hold, '', now), hold
          counts.pending = counts.pending - 1
          counts.held = (counts.held or 0) + 1
          if kind == 'webhook' then redis.call('SADD', k_h(target), id) end
        end
        redis.call('HSET', k_d(id), 'h', row_h, 'v', '0||',
          's', m .. tail .. kind .. '\31' .. target .. '\31' .. now .. '\31' .. okey)
        local g = k_g(kind, target, tenant)
        redis.call('ZADD', g, due, m)
        local t = touched[g]
        if not t then
          touched[g] = { G = k_G(kind, target), due = due, n = tonumber(due) }
        elseif tonumber(due) < t.n then
          t.due, t.n = due, tonumber(due)
        end
        redis.call('ZADD', k_td(tenant), now, id)
        -- The barrier key (core's `barrier_key`): a FIFO endpoint's one slot, kept in `b`.
        if fifo then
          redis.call('HSET', k_d(id), 'b', FIFO_BARRIER)
          redis.call('ZADD', k_o(tenant, kind, target, FIFO_BARRIER), S(seq), m)
        elseif okey ~= '' then
          redis.call('ZADD', k_o(tenant, kind, target, okey), S(seq), m)
        end
      end
      woke = true
    end
    out[#out + 1] = { mid, n, 0 }
  end
end
-- A new row can only bring its group's head forward: the group's score in its source's
-- index becomes the earlier of the two (`LT`; a new group is added), without reading the head.
-- (Source indexes need no registration here: `stats.lua` finds them from the consumers.)
for g, t in pairs(touched) do redis.call('ZADD', t.G, 'LT', t.due, g) end
flush()
if woke then wake() end
return out
