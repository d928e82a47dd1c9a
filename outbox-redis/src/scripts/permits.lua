-- Rate-limit permits (`take_permits`): core's `PermitLog::take` rule over one hash per tenant
-- and endpoint, on shard 0 (where endpoint writes are decided), field = grant time in ms of
-- the callers' clock, value = permits granted then (at most one field per millisecond of the
-- window, so at most 1,000 whatever the rate). Grants at least a second old are deleted; up
-- to `want` of what the rest leaves free under `rate` are granted, recorded at `now` (or at
-- the newest field when another relay's clock ran ahead). The key expires 60 s (server time)
-- after its last grant, so an idle endpoint leaves nothing behind.
-- ARGV: tenant, endpoint, rate, want, now
-- Returns {granted, next permit frees at (ms)}.
local tenant, endpoint = ARGV[1], ARGV[2]
local rate, want, now = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local key = KEYS[1] .. ':permits:' .. endpoint .. ':' .. tenant
local fields = redis.call('HGETALL', key)
local used, oldest, newest = 0, nil, nil
for i = 1, #fields, 2 do
  local t, c = tonumber(fields[i]), tonumber(fields[i + 1])
  if t + 1000 <= now then
    redis.call('HDEL', key, fields[i])
  else
    used = used + c
    if oldest == nil or t < oldest then oldest = t end
    if newest == nil or t > newest then newest = t end
  end
end
local granted = math.min(want, math.max(rate - used, 0))
if granted > 0 then
  local at = now
  if newest ~= nil and newest > now then at = newest end
  redis.call('HINCRBY', key, string.format('%d', at), granted)
  redis.call('PEXPIRE', key, 60000)
  if oldest == nil or at < oldest then oldest = at end
  used = used + granted
end
local next_at = now
if used >= rate then next_at = math.max(oldest + 1000, now) end
return {granted, next_at}
