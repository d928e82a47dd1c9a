-- Put unstarted claims back (`Lease::release`).
-- ARGV: now, then per lease 7 fields: id, tenant, token, status, attempts, snoozes, next
-- Returns {released, lost}.
local now = ARGV[1]
local released, lost = 0, 0
local a = 2
while a <= #ARGV do
  local id, tenant, token, status = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local d = load(id)
  if not owns(d, tenant, token) then
    lost = lost + 1
  else
    set_status(d, status)
    d[I_ATTEMPTS], d[I_NEXT] = ARGV[a + 4], ARGV[a + 6]
    redis.call('HSET', k_d(id), 'status', status, 'attempts', d[I_ATTEMPTS],
      'snoozes', ARGV[a + 5], 'next', d[I_NEXT], 'updated', now, 'token', '', 'lease', '')
    place(d, false)
    released = released + 1
  end
  a = a + 7
end
flush()
if released > 0 then wake() end
return { released, lost }
