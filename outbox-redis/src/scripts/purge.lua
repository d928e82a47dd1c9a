-- Retention for one tenant per call, rotating over tenants by name.
-- ARGV: before, limit
-- Returns {tenant or false, deliveries removed, messages removed}.
local before, limit = ARGV[1], tonumber(ARGV[2])
local cut = '(' .. before
local stale = {}

local function has_work(t)
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
if cursor then
  tenant = scan('(' .. cursor, '+') or scan('-', '[' .. cursor)
else
  tenant = scan('-', '+')
end
for _, t in ipairs(stale) do redis.call('ZREM', K_PT, t) end
if not tenant then return { false, 0, 0 } end

local nd, nm = 0, 0
-- Oldest completion first; ties in enqueue order (members start with the sequence).
for _, m in ipairs(redis.call('ZRANGEBYSCORE', k_tf(tenant), '-inf', cut, 'LIMIT', 0, limit)) do
  local id = member_id(m)
  local r = redis.call('HMGET', k_d(id), 'status', 'mid', 'kind', 'target')
  if r[1] then
    counts[r[1]] = (counts[r[1]] or 0) - 1
    redis.call('ZREM', k_x(r[3], r[4]), m)
    redis.call('DEL', k_d(id), k_a(id))
    local mk = k_m(r[2])
    if redis.call('EXISTS', mk) == 1 and redis.call('HINCRBY', mk, 'ndel', -1) <= 0 then
      redis.call('ZADD', k_tm(tenant), redis.call('HGET', mk, 'created'), r[2])
      purgeable[tenant] = true
    end
    nd = nd + 1
  end
  redis.call('ZREM', k_td(tenant), id)
  redis.call('ZREM', k_tf(tenant), m)
end
for _, mid in ipairs(redis.call('ZRANGEBYSCORE', k_tm(tenant), '-inf', cut, 'LIMIT', 0, limit)) do
  local mk = k_m(mid)
  local r = redis.call('HMGET', mk, 'topic', 'ikey')
  if r[2] then
    local ik = k_i(tenant, r[1], r[2])
    if redis.call('GET', ik) == mid then redis.call('DEL', ik) end
  end
  if redis.call('DEL', mk) == 1 then nm = nm + 1 end
  redis.call('ZREM', k_tm(tenant), mid)
end
redis.call('SET', K_PURGE, tenant)
flush()
return { tenant, nd, nm }
