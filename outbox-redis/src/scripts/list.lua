-- A page of a tenant's deliveries, newest first by (created_at, id).
-- ARGV: tenant, max score, min score, cursor created_at (''), cursor id, how many,
--       status, endpoint, consumer, kind, topic, ordering key, text (lowercase) ('' = any)
-- Returns up to `how many` {h, s, v, l, r} rows.
local t, max, min, cc, cid = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local want = tonumber(ARGV[6])
local fs, fe, fc, fk, ft = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local fo, fx = ARGV[12], ARGV[13]

-- Whether a stored excerpt (inside a json record) contains the text, ignoring ASCII case.
local function has_text(json)
  if not json or json == '' then return false end
  local ok, rec = pcall(cjson.decode, json)
  if not ok or type(rec) ~= 'table' or type(rec.excerpt) ~= 'string' then return false end
  return string.find(string.lower(rec.excerpt), fx, 1, true) ~= nil
end

local function text_matches(id, last)
  if has_text(last) then return true end
  for _, e in ipairs(redis.call('LRANGE', k_a(id), 0, -1)) do
    -- `probe|record` (old) or `probe|run|due|record`, the record up to the \30 that
    -- starts an attempt's detail (`entry.rs`).
    local rec = string.match(e, '^%d|(%{[^\30]*)') or string.match(e, '^%d|%d*|%d*|(%{[^\30]*)')
    if has_text(rec) then return true end
  end
  return false
end
local c = cc ~= '' and tonumber(cc) or nil

local function keep(id, r)
  local status = string.match(r[1], '^(%l+)')
  local _, _, _, topic, kind, target, _, okey = parse_s(r[2])
  return (fs == '' or status == fs)
    and (fo == '' or okey == fo)
    and (fe == '' or (kind == 'webhook' and target == fe))
    and (fc == '' or (kind == 'handler' and target == fc))
    and (fk == '' or kind == fk)
    and (ft == '' or topic == ft)
    and (fx == '' or text_matches(id, r[4]))
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
      local row = redis.call('HMGET', k_d(id), 'h', 's', 'v', 'l', 'r')
      if row[1] and keep(id, row) then
        out[#out + 1] = row
        if #out >= want then break end
      end
    end
  end
  off = off + #r / 2
end
return out
