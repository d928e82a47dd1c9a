-- Tenant-scoped counts (operator calls: they read every delivery of the tenants asked for).
-- ARGV: op ('stats' | 'tenants'), now, tenant, endpoint ('' = every destination)
-- 'stats' returns {counts as a flat status/count list, oldest due or false}; 'tenants'
-- returns one {tenant, counts, oldest due or false, messages} per tenant, by name.
local op, now = ARGV[1], tonumber(ARGV[2])

-- Counts of one tenant's deliveries (to `endpoint` when not ''), its oldest due time, and
-- the ids of the messages they belong to.
local function count(t, endpoint)
  local c, oldest, oldest_s, mids = {}, nil, false, {}
  for _, id in ipairs(redis.call('ZRANGE', k_td(t), 0, -1)) do
    local r = redis.call('HMGET', k_d(id), 'h', 's')
    if r[1] then
      local status, _, next = parse_h(r[1])
      local _, mid, _, _, kind, target = parse_s(r[2])
      if endpoint == '' or (kind == 'webhook' and target == endpoint) then
        c[status] = (c[status] or 0) + 1
        mids[mid] = true
        if not finished(status) and tonumber(next) <= now
            and (not oldest or tonumber(next) < oldest) then
          oldest, oldest_s = tonumber(next), next
        end
      end
    end
  end
  local flat = {}
  for s, n in pairs(c) do
    flat[#flat + 1] = s
    flat[#flat + 1] = n
  end
  return flat, oldest_s, mids
end

if op == 'stats' then
  local flat, oldest = count(ARGV[3], ARGV[4])
  return { flat, oldest }
end

-- Every tenant with a delivery or a message left without deliveries: found by the keys of
-- its indexes (one SCAN of the keys under the prefix).
local function glob(s) return (string.gsub(s, '([%*%?%[%]\\])', '\\%1')) end
local names = {}
for _, kind in ipairs({ 'td', 'tm' }) do
  local base = P .. ':' .. kind .. ':'
  local cursor = '0'
  repeat
    local r = redis.call('SCAN', cursor, 'MATCH', glob(base) .. '*', 'COUNT', 1000)
    cursor = r[1]
    for _, k in ipairs(r[2]) do names[string.sub(k, #base + 1)] = true end
  until cursor == '0'
end
local sorted = {}
for t in pairs(names) do sorted[#sorted + 1] = t end
table.sort(sorted, lt)
local out = {}
for _, t in ipairs(sorted) do
  local flat, oldest, mids = count(t, '')
  local n = 0
  for _ in pairs(mids) do n = n + 1 end
  for _, mid in ipairs(redis.call('ZRANGE', k_tm(t), 0, -1)) do
    if not mids[mid] and redis.call('EXISTS', k_m(mid)) == 1 then n = n + 1 end
  end
  if #flat > 0 or n > 0 then out[#out + 1] = { t, flat, oldest, n } end
end
return out
