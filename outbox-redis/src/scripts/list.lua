-- A page of a tenant's deliveries, newest first by (created_at, id).
-- ARGV: tenant, max score, min score, cursor created_at (''), cursor id, how many,
--       status, endpoint, consumer, kind, topic ('' = any)
-- Returns up to `how many` {h, s, v, l} rows.
local t, max, min, cc, cid = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local want = tonumber(ARGV[6])
local fs, fe, fc, fk, ft = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local c = cc ~= '' and tonumber(cc) or nil

local function keep(r)
  local status = string.match(r[1], '^(%l+)')
  local _, _, _, topic, kind, target = parse_s(r[2])
  return (fs == '' or status == fs)
    and (fe == '' or (kind == 'webhook' and target == fe))
    and (fc == '' or (kind == 'handler' and target == fc))
    and (fk == '' or kind == fk)
    and (ft == '' or topic == ft)
end

local out = {}
local off = 0
local key = k_td(t)
while #out < want do
  local r = redis.call('ZREVRANGEBYSCORE', key, max, min, 'WITHSCORES', 'LIMIT', off, 200)
  if #r == 0 then break end
  for j = 1, #r, 2 do
    local id = r[j]
    -- At the cursor's time, only ids below the cursor's id come after it.
    if not (c and tonumber(r[j + 1]) == c and not lt(id, cid)) then
      local row = redis.call('HMGET', k_d(id), 'h', 's', 'v', 'l')
      if row[1] and keep(row) then
        out[#out + 1] = row
        if #out >= want then break end
      end
    end
  end
  off = off + #r / 2
end
return out
