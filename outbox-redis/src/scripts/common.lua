-- Shared prelude of the outbox scripts: `scripts/mod.rs` prepends to each script the
-- definitions below that its body reaches (the comment lines right above a definition go with
-- it; keep each `local` at the start of its line and refer to earlier definitions only).
--
-- Cluster safety: KEYS[1] is the configured prefix, which contains a hash tag such as
-- `{outbox}`. Every key below is built as `prefix .. ':' .. suffix`, so every key a script
-- touches hashes to the prefix's slot; passing the prefix as KEYS[1] routes the call to that
-- slot's node. User-supplied parts (tenant, kind, target, keys) come after the prefix, so a
-- `{` inside them cannot change the hash tag.
--
-- Numbers: Lua turns numbers into strings with 14 significant digits, which would corrupt
-- millisecond timestamps. Times therefore arrive as strings in ARGV and are written back as
-- those strings; integers computed here are written with `S()` (`%d`).
local P = KEYS[1]
local function S(n) return string.format('%d', n) end
local function lp(s) return S(#s) .. ':' .. s end

local K_SEQ = P .. ':seq'
local K_STATS = P .. ':stats'
local K_QS = P .. ':qs'
local K_CONSUMERS = P .. ':consumers'
-- The names of the paused consumers (absent: none is paused).
local K_PAUSED = P .. ':consumers:paused'
local K_PT = P .. ':pt'
local K_PURGE = P .. ':purge'
local K_WAKE = P .. ':wake'
local function k_d(id) return P .. ':d:' .. id end
local function k_m(id) return P .. ':m:' .. id end
local function k_a(id) return P .. ':a:' .. id end
local function k_e(id) return P .. ':e:' .. id end
local function k_h(id) return P .. ':h:' .. id end
local function k_td(t) return P .. ':td:' .. t end
local function k_tf(t) return P .. ':tf:' .. t end
local function k_tm(t) return P .. ':tm:' .. t end
-- A tenant's deliveries by the time of their latest attempt (activity for the console).
local function k_tx(t) return P .. ':tx:' .. t end
local function k_te(t) return P .. ':te:' .. t end
local function k_i(t, topic, key) return P .. ':i:' .. lp(t) .. lp(topic) .. key end
local function k_o(t, kind, target, okey)
  return P .. ':o:' .. lp(t) .. lp(kind) .. lp(target) .. okey
end
-- Fair claiming works on groups: one tenant and one destination (endpoint, consumer or
-- e-mail recipient). `g:<kind, tenant>target` holds the group's unfinished deliveries by
-- `next_attempt_at` (a claimed row's is its lease end, so an expired lease is simply due);
-- `G:h:<consumer>`, `G:w`, `G:e` index a source's groups by the score of their head, so a
-- claim finds the groups with due work, oldest first, without reading any backlog.
local function k_g(kind, target, tenant) return P .. ':g:' .. lp(kind) .. lp(tenant) .. target end
local function k_G(kind, target)
  if kind == 'handler' then return P .. ':G:h:' .. target end
  if kind == 'webhook' then return P .. ':G:w' end
  return P .. ':G:e'
end
-- The kind, tenant and target of a group key.
local function parse_g(g)
  local pos = #P + 4
  local parts = {}
  for _ = 1, 2 do
    local colon = string.find(g, ':', pos, true)
    local n = tonumber(string.sub(g, pos, colon - 1))
    parts[#parts + 1] = string.sub(g, colon + 1, colon + n)
    pos = colon + n + 1
  end
  return parts[1], parts[2], string.sub(g, pos)
end
-- Give group `g` of source key `G` its head's score in `G` (or take it out when empty).
local function touch_g(g, G)
  local r = redis.call('ZRANGE', g, 0, 0, 'WITHSCORES')
  if #r == 0 then
    redis.call('ZREM', G, g)
  else
    redis.call('ZADD', G, r[2], g)
  end
end
local function touch(kind, target, tenant)
  touch_g(k_g(kind, target, tenant), k_G(kind, target))
end
-- Unfinished, non-held deliveries that have spent attempts, by attempts: the claim finds
-- exhausted rows (attempts >= budget) with one range query instead of a scan.
local function k_x(kind, target)
  if kind == 'handler' then return P .. ':x:h:' .. target end
  if kind == 'webhook' then return P .. ':x:w' end
  return P .. ':x:e'
end
-- Members of the due, ordering and retention sets: the zero-padded sequence, then the id,
-- so ties on the score sort by enqueue order.
local function member(seq, id) return string.format('%015d', tonumber(seq)) .. id end
local function member_id(m) return string.sub(m, 16) end

-- Byte-wise `a < b` (Lua's `<` follows the server's locale).
local function lt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Rows are packed so that few values cross between Lua and Redis (the main cost of a
-- script). A delivery hash holds:
--   h = status|attempts|next|token|updated   (token '' when not claimed; Lua reads it often)
--   s = member SEP mid SEP tenant SEP topic SEP kind SEP target SEP created SEP okey
--       (immutable; okey '' when none; the member is the zero-padded sequence and the id)
--   v = snoozes|completed|dead               ('' for absent values)
--   l = the last outcome (json), absent until an attempt is recorded
--   tr = ledger entries dropped by the cap (absent = 0)
-- A message hash holds p (the payload), x (its other fields, packed by the Rust side) and
-- nd (its deliveries not yet purged). SEP is the unit separator (0x1f), which no stored
-- name, key or json text contains.
local function parse_h(h) return string.match(h, '^(%l+)|(%d+)|(%d+)|(%x*)|(%d+)$') end
local function parse_s(s)
  return string.match(s, '^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$')
end
local function make_h(status, attempts, next, token, updated)
  return status .. '|' .. attempts .. '|' .. next .. '|' .. token .. '|' .. updated
end

-- A delivery's fields as a table (for the less frequent paths), or nil.
-- `d.okey` is its barrier key (`b`, a FIFO endpoint's one slot, when the delivery has one;
-- else its ordering key): the key of its ordering set.
local function load(id)
  local r = redis.call('HMGET', k_d(id), 'h', 's', 'v', 'b')
  if not r[1] then return nil end
  local d = { id = id, v = r[3] }
  d.status, d.attempts, d.next, d.token, d.updated = parse_h(r[1])
  d.m, d.mid, d.tenant, d.topic, d.kind, d.target, d.created, d.okey = parse_s(r[2])
  if d.okey == '' then d.okey = false end
  d.key = d.okey
  if r[4] then d.okey = r[4] end
  return d
end

-- The barrier key of a delivery of `tenant` to (kind, target) with ordering key `key` (false
-- when none) with the endpoint's flag as it is now (core's `barrier_key`): FIFO_BARRIER for a
-- strict-FIFO endpoint's, else the key.
local FIFO_BARRIER = ' fifo'
local function barrier_of(tenant, kind, target, key)
  if kind == 'webhook' then
    local e = redis.call('HMGET', k_e(target), 'tenant', 'fifo')
    if e[1] == tenant and e[2] == '1' then return FIFO_BARRIER end
  end
  return key
end

local function finished(s) return s == 'succeeded' or s == 'dead' end

-- Deliveries waiting for a paused endpoint are due never (`Timestamp::MAX`); for a disabled
-- one, `DISABLED_HOLD` (7 days) after they began to wait. Checked against outboxkit-core by
-- a unit test in `scripts.rs`.
local HOLD_NEVER = '253402300799999'
local DISABLED_HOLD_MS = 604800000
local function hold_until(status, now)
  if status == 'paused' then return HOLD_NEVER end
  if status == 'disabled' then return S(tonumber(now) + DISABLED_HOLD_MS) end
  return nil
end

-- Whether a lease (tenant, token) still owns `d`: same token and tenant, still claimed.
local function owns(d, tenant, token)
  return d and token ~= '' and d.token == token and d.tenant == tenant
    and (d.status == 'processing' or d.status == 'sending')
end

-- Per-status counters and touched tenants, written once per script call by `flush()`.
local counts = {}
local purgeable = {}
local function flush()
  for s, n in pairs(counts) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, s, n) end
  end
  for t in pairs(purgeable) do redis.call('ZADD', K_PT, 0, t) end
end

-- Count a move from status `old` to `new`; the held index follows.
local function moved(id, kind, target, old, new)
  if old == new then return end
  counts[old] = (counts[old] or 0) - 1
  counts[new] = (counts[new] or 0) + 1
  if kind == 'webhook' then
    if old == 'held' then redis.call('SREM', k_h(target), id) end
    if new == 'held' then redis.call('SADD', k_h(target), id) end
  end
end

local function set_status(d, new)
  moved(d.id, d.kind, d.target, d.status, new)
  d.status = new
end

-- Put `d` (status, attempts, next and completed already updated) into the indexes its status
-- calls for: unfinished rows sit in their due set (and ordering set) and, once they have
-- spent attempts and unless held, in the attempts index; finished ones leave the due and
-- ordering sets and join the tenant's retention index. A finished row's attempts-index
-- entry is left behind and removed lazily (by the next claim that meets it, or at purge).
local function place(d, was_finished)
  local m = d.m
  local q = k_g(d.kind, d.target, d.tenant)
  local okey = d.okey
  if finished(d.status) then
    if not was_finished then
      redis.call('ZREM', q, m)
      touch(d.kind, d.target, d.tenant)
      if okey then redis.call('ZREM', k_o(d.tenant, d.kind, d.target, okey), m) end
    end
    redis.call('ZADD', k_tf(d.tenant), d.completed, m)
    purgeable[d.tenant] = true
  else
    redis.call('ZADD', q, d.next, m)
    touch(d.kind, d.target, d.tenant)
    local x = k_x(d.kind, d.target)
    if d.status == 'held' or tonumber(d.attempts) == 0 then
      redis.call('ZREM', x, m)
    else
      redis.call('ZADD', x, d.attempts, m)
    end
    if was_finished then
      redis.call('SADD', K_QS, k_G(d.kind, d.target))
      if okey then redis.call('ZADD', k_o(d.tenant, d.kind, d.target, okey), string.sub(m, 1, 15), m) end
      redis.call('ZREM', k_tf(d.tenant), m)
    end
  end
end

-- Whether a stored topic filter (`*`, `a.b`, `a.*`, comma-separated) matches `topic`.
local function matches(filter, topic)
  for pat in string.gmatch(filter, '[^,]+') do
    if pat == '*' or pat == topic then return true end
    if string.sub(pat, -2) == '.*' then
      local p = string.sub(pat, 1, -3)
      if #topic > #p + 1 and string.sub(topic, 1, #p) == p
          and string.sub(topic, #p + 1, #p + 1) == '.' then
        return true
      end
    end
  end
  return false
end

-- When message `mid` may first be sent: its `available_at` (the sixth packed field of its
-- `x`), or nil when the message is gone.
local function message_available(mid)
  local x = redis.call('HGET', k_m(mid), 'x')
  if not x then return nil end
  return string.match(x, '^[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31(%d+)')
end

-- Every held delivery of `endpoint` that belongs to `tenant` becomes pending, due at the
-- later of now and its message's `available_at` (a delayed message published during a pause
-- keeps its time).
local function release_held(tenant, endpoint, now)
  local n = 0
  for _, id in ipairs(redis.call('SMEMBERS', k_h(endpoint))) do
    local d = load(id)
    if not d then
      redis.call('SREM', k_h(endpoint), id)
    elseif d.status == 'held' and d.tenant == tenant then
      set_status(d, 'pending')
      local due = message_available(d.mid)
      if not due or tonumber(due) < tonumber(now) then due = now end
      d.next = due
      redis.call('HSET', k_d(id), 'h', make_h('pending', d.attempts, due, '', now))
      place(d, false)
      n = n + 1
    end
  end
  return n
end

-- Every pending or held webhook delivery of `endpoint` that belongs to `tenant` waits for
-- it: held, due at `due_at`. Reads the endpoint's group (a pause is a rare operator action).
local function hold_for_endpoint(tenant, endpoint, due_at, now)
  local n = 0
  for _, m in ipairs(redis.call('ZRANGE', k_g('webhook', endpoint, tenant), 0, -1)) do
    local d = load(member_id(m))
    if d and d.target == endpoint and d.tenant == tenant
        and (d.status == 'pending' or d.status == 'held') then
      set_status(d, 'held')
      d.next = due_at
      redis.call('HSET', k_d(d.id), 'h', make_h('held', d.attempts, due_at, '', now))
      place(d, false)
      n = n + 1
    end
  end
  return n
end

-- Every pending delivery of consumer `name` (of every tenant) is held, due never (a pause);
-- or, when `release`, every held one becomes pending, due at the later of now and its
-- message's `available_at`. Reads the consumer's groups (a pause is a rare operator action).
local function hold_for_consumer(name, release, now)
  local n = 0
  for _, g in ipairs(redis.call('ZRANGE', k_G('handler', name), 0, -1)) do
    for _, m in ipairs(redis.call('ZRANGE', g, 0, -1)) do
      local d = load(member_id(m))
      if d and d.kind == 'handler' and d.target == name then
        if release and d.status == 'held' then
          set_status(d, 'pending')
          local due = message_available(d.mid)
          if not due or tonumber(due) < tonumber(now) then due = now end
          d.next = due
          redis.call('HSET', k_d(d.id), 'h', make_h('pending', d.attempts, due, '', now))
          place(d, false)
          n = n + 1
        elseif not release and d.status == 'pending' then
          set_status(d, 'held')
          d.next = HOLD_NEVER
          redis.call('HSET', k_d(d.id), 'h', make_h('held', d.attempts, HOLD_NEVER, '', now))
          place(d, false)
        end
      end
    end
  end
  return n
end

local function wake() redis.call('PUBLISH', K_WAKE, '1') end
