-- Shared prelude of every outbox script (prepended by `scripts.rs`).
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
local function k_te(t) return P .. ':te:' .. t end
local function k_i(t, topic, key) return P .. ':i:' .. lp(t) .. lp(topic) .. key end
local function k_o(t, kind, target, okey)
  return P .. ':o:' .. lp(t) .. lp(kind) .. lp(target) .. okey
end
local function k_q(kind, target)
  if kind == 'handler' then return P .. ':q:h:' .. target end
  if kind == 'webhook' then return P .. ':q:w' end
  return P .. ':q:e'
end
-- Unfinished, non-held deliveries that have spent attempts, by attempts: the claim finds
-- exhausted rows (attempts >= budget) with one range query instead of a scan.
local function k_x(kind, target)
  if kind == 'handler' then return P .. ':x:h:' .. target end
  if kind == 'webhook' then return P .. ':x:w' end
  return P .. ':x:e'
end
-- Members of the due and ordering sets: the zero-padded sequence, then the id, so ties on
-- the score sort by enqueue order.
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

-- The delivery hash's fields, in the order the Rust side decodes them. Scripts work on the
-- `HMGET` array directly; the I_* constants name its positions.
local DF = { 'id', 'mid', 'tenant', 'topic', 'okey', 'kind', 'target', 'status', 'attempts',
  'snoozes', 'next', 'lease', 'token', 'last', 'dead', 'created', 'updated', 'completed', 'seq',
  'na' }
local I_ID, I_MID, I_TENANT, I_TOPIC, I_OKEY, I_KIND, I_TARGET, I_STATUS = 1, 2, 3, 4, 5, 6, 7, 8
local I_ATTEMPTS, I_SNOOZES, I_NEXT, I_LEASE, I_TOKEN, I_LAST, I_DEAD = 9, 10, 11, 12, 13, 14, 15
local I_CREATED, I_UPDATED, I_COMPLETED, I_SEQ, I_NA = 16, 17, 18, 19, 20
-- The message hash's fields, in the order the Rust side decodes them.
local MF = { 'id', 'topic', 'payload', 'tenant', 'okey', 'ikey', 'avail', 'headers', 'cause',
  'created' }

-- Cleared fields are written as '' (read back as absent) so that one HSET does a whole
-- update.

-- A delivery's row (the `HMGET` array), or nil.
local function load(id)
  local d = redis.call('HMGET', k_d(id), unpack(DF))
  if not d[I_ID] then return nil end
  return d
end

local function finished(s) return s == 'succeeded' or s == 'dead' end

-- Whether a lease (tenant, token) still owns `d`: same token and tenant, still claimed.
local function owns(d, tenant, token)
  return d and token ~= '' and d[I_TOKEN] == token and d[I_TENANT] == tenant
    and (d[I_STATUS] == 'processing' or d[I_STATUS] == 'sending')
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

-- Move `d` to status `new`: the counters and the held index follow.
local function set_status(d, new)
  local old = d[I_STATUS]
  if old == new then return end
  counts[old] = (counts[old] or 0) - 1
  counts[new] = (counts[new] or 0) + 1
  if d[I_KIND] == 'webhook' then
    if old == 'held' then redis.call('SREM', k_h(d[I_TARGET]), d[I_ID]) end
    if new == 'held' then redis.call('SADD', k_h(d[I_TARGET]), d[I_ID]) end
  end
  d[I_STATUS] = new
end

-- Put `d` (status, attempts, next and completed already updated) into the indexes its status
-- calls for: unfinished rows sit in their due set (and ordering set) and, once they have
-- spent attempts and unless held, in the attempts index; finished ones leave the due and
-- ordering sets and join the tenant's retention index. A finished row's attempts-index
-- entry is left behind and removed lazily (by the next claim that meets it, or at purge).
local function place(d, was_finished, m)
  m = m or member(d[I_SEQ], d[I_ID])
  local q = k_q(d[I_KIND], d[I_TARGET])
  local okey = d[I_OKEY]
  if okey == '' then okey = false end
  if finished(d[I_STATUS]) then
    if not was_finished then
      redis.call('ZREM', q, m)
      if okey then redis.call('ZREM', k_o(d[I_TENANT], d[I_KIND], d[I_TARGET], okey), m) end
    end
    redis.call('ZADD', k_tf(d[I_TENANT]), d[I_COMPLETED], m)
    purgeable[d[I_TENANT]] = true
  else
    redis.call('ZADD', q, d[I_NEXT], m)
    local x = k_x(d[I_KIND], d[I_TARGET])
    if d[I_STATUS] == 'held' or tonumber(d[I_ATTEMPTS]) == 0 then
      redis.call('ZREM', x, m)
    else
      redis.call('ZADD', x, d[I_ATTEMPTS], m)
    end
    if was_finished then
      redis.call('SADD', K_QS, q)
      if okey then redis.call('ZADD', k_o(d[I_TENANT], d[I_KIND], d[I_TARGET], okey), d[I_SEQ], m) end
      redis.call('ZREM', k_tf(d[I_TENANT]), m)
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

-- Every held delivery of `endpoint` that belongs to `tenant` becomes pending, due now.
local function release_held(tenant, endpoint, now)
  local n = 0
  for _, id in ipairs(redis.call('SMEMBERS', k_h(endpoint))) do
    local d = load(id)
    if not d then
      redis.call('SREM', k_h(endpoint), id)
    elseif d[I_STATUS] == 'held' and d[I_TENANT] == tenant then
      set_status(d, 'pending')
      d[I_NEXT] = now
      redis.call('HSET', k_d(id), 'status', 'pending', 'next', now, 'updated', now)
      place(d, false)
      n = n + 1
    end
  end
  return n
end

local function wake() redis.call('PUBLISH', K_WAKE, '1') end
