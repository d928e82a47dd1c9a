-- End claims with their settled rows (`Lease::settle`), append attempts, disable endpoints.
-- ARGV: now, attempts cap, then per item 13 fields:
--   id, tenant, token, status, attempts, snoozes, next, completed (''), dead reason (''),
--   last outcome json ('' keeps the old one), disable endpoint (0/1), attempt json (''),
--   probe (0/1)
-- Returns 1 (written) or 0 (lease lost) per item.
local now, cap = ARGV[1], tonumber(ARGV[2])
local out = {}
local a = 3
while a <= #ARGV do
  local id, tenant, token, status = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local dk = k_d(id)
  local d = redis.call('HMGET', dk, 'token', 'tenant', 'status', 'kind', 'target', 'm', 'okey',
    'na', 'seq')
  if token == '' or d[1] ~= token or d[2] ~= tenant
      or (d[3] ~= 'processing' and d[3] ~= 'sending') then
    out[#out + 1] = 0
  else
    -- The row as `set_status` and `place` read it.
    local row = {}
    row[I_ID], row[I_TENANT], row[I_STATUS], row[I_KIND], row[I_TARGET] = id, tenant, d[3], d[4], d[5]
    row[I_OKEY], row[I_SEQ] = d[7], d[9]
    row[I_ATTEMPTS], row[I_NEXT], row[I_COMPLETED] = ARGV[a + 4], ARGV[a + 6], ARGV[a + 7]
    set_status(row, status)
    local last, attempt = ARGV[a + 9], ARGV[a + 11]
    local na = d[8]
    if attempt ~= '' then
      na = S((tonumber(na) or 0) + 1)
      local ak = k_a(id)
      if redis.call('RPUSH', ak, na .. '|' .. ARGV[a + 12] .. '|' .. attempt) > cap then
        redis.call('LTRIM', ak, -cap, -1)
      end
    end
    if last ~= '' then
      redis.call('HSET', dk, 'status', status, 'attempts', row[I_ATTEMPTS], 'snoozes', ARGV[a + 5],
        'next', row[I_NEXT], 'updated', now, 'token', '', 'lease', '', 'completed', ARGV[a + 7],
        'dead', ARGV[a + 8], 'na', na or '0', 'last', last)
    else
      redis.call('HSET', dk, 'status', status, 'attempts', row[I_ATTEMPTS], 'snoozes', ARGV[a + 5],
        'next', row[I_NEXT], 'updated', now, 'token', '', 'lease', '', 'completed', ARGV[a + 7],
        'dead', ARGV[a + 8], 'na', na or '0')
    end
    place(row, false, d[6] or nil)
    if ARGV[a + 10] == '1' and row[I_KIND] == 'webhook' then
      local ek = k_e(row[I_TARGET])
      if redis.call('EXISTS', ek) == 1 then
        redis.call('HSET', ek, 'status', 'disabled', 'reason', 'gone', 'updated', now)
        redis.call('HINCRBY', ek, 'ver', 1)
      end
    end
    out[#out + 1] = 1
  end
  a = a + 13
end
flush()
return out
