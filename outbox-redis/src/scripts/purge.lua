-- Retention for one tenant per call, rotating over tenants by name, each tenant with its
-- own cutoff; or for one named tenant outside the rotation.
-- ARGV: default cutoff, limit, tenant ('' = the next in rotation, '>cursor' = only find
--       the next after cursor), then (tenant, cutoff)
--       override pairs
-- Returns {tenant or false, deliveries removed, messages removed}.
local default, limit, only = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local cutoffs = {}
for i = 4, #ARGV - 1, 2 do cutoffs[ARGV[i]] = ARGV[i + 1] end
local function cut_of(t) return '(' .. (cutoffs[t] or default) end
local stale = {}

local function has_work(t)
  local cut = cut_of(t)
  if #redis.call('ZRANGEBYSCORE', k_tf(t), '-inf', cut, 'LIMIT', 0, 1) > 0 then return true end
  if #redis.call('ZRANGEBYSCORE', k_tm(t), '-inf', cut, 'LIMIT', 0, 1) > 0 then return true end
  if redis.call('EXISTS', k_tf(t), k_tm(t)) == 0 then stale[#stale + 1] = t end
  return false
end

local function scan(lo, hi)
  local off = 0
  while true do
    local ts = redis.call('ZRANGEBYLEX', K_PT, lo, hi, 'LIMIT', off, 100)
    for _, t in ipairs(ts) do
      if has_work(t) then return t end
    end
    if #ts < 100 then return nil end
    off = off + 100
  end
end

local cursor = redis.call('GET', K_PURGE)
local tenant
if string.sub(only, 1, 1) == '>' then
  -- With several shards the caller keeps one rotation: `>cursor` only names this shard's
  -- next tenant with work after `cursor` ('>' = from the start), wrapping, and purges nothing.
  local c = string.sub(only, 2)
  if c ~= '' then
    tenant = scan('(' .. c, '+') or scan('-', '[' .. c)
  else
    tenant = scan('-', '+')
  end
  for _, t in ipairs(stale) do redis.call('ZREM', K_PT, t) end
  return { tenant or false, 0, 0 }
end
if only ~= '' then
  tenant = only
elseif cursor then
  tenant = scan('(' .. cursor, '+') or scan('-', '[' .. cursor)
else
  tenant = scan('-', '+')
end
for _, t in ipairs(stale) do redis.call('ZREM', K_PT, t) end
if not tenant then return { false, 0, 0 } end
local cut = cut_of(tenant)

local nd, nm = 0, 0
-- Oldest completion first; ties in enqueue order (members start with the sequence).
for _, m in ipairs(redis.call('ZRANGEBYSCORE', k_tf(tenant), '-inf', cut, 'LIMIT', 0, limit)) do
  local id = member_id(m)
  local d = load(id)
  if d then
    counts[d.status] = (counts[d.status] or 0) - 1
    redis.call('ZREM', k_x(d.kind, d.target), m)
    redis.call('DEL', k_d(id), k_a(id))
    local mk = k_m(d.mid)
    if redis.call('EXISTS', mk) == 1 and redis.call('HINCRBY', mk, 'nd', -1) <= 0 then
      local x = redis.call('HGET', mk, 'x')
      local created = string.match(x, '^[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31([^\31]*)')
      redis.call('ZADD', k_tm(tenant), created, d.mid)
      purgeable[tenant] = true
    end
    nd = nd + 1
  end
  redis.call('ZREM', k_td(tenant), id)
  redis.call('ZREM', k_tx(tenant), id)
  redis.call('ZREM', k_tf(tenant), m)
end
for _, mid in ipairs(redis.call('ZRANGEBYSCORE', k_tm(tenant), '-inf', cut, 'LIMIT', 0, limit)) do
  local mk = k_m(mid)
  local x = redis.call('HGET', mk, 'x')
  if x then
    local topic, ikey = string.match(x, '^[^\31]*\31([^\31]*)\31[^\31]*\31[^\31]*\31([^\31]*)\31')
    if ikey and ikey ~= '' then
      local ik = k_i(tenant, topic, ikey)
      if redis.call('GET', ik) == mid then redis.call('DEL', ik) end
    end
    redis.call('DEL', mk)
    nm = nm + 1
  end
  redis.call('ZREM', k_tm(tenant), mid)
end
if only == '' then redis.call('SET', K_PURGE, tenant) end
flush()
return { tenant, nd, nm }
