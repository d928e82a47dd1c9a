-- Put unstarted claims back (`Lease::release`, packed by the Rust side).
-- ARGV: now, then per lease 7 fields: id, tenant, token, status, attempts, next, h
--   (snoozes and the outcome stay as they are)
-- Returns {released, lost}.
local released, lost = 0, 0
local a = 2
while a <= #ARGV do
  local id, tenant, token, status = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local d = load(id)
  if not owns(d, tenant, token) then
    lost = lost + 1
  else
    set_status(d, status)
    d.attempts, d.next = ARGV[a + 4], ARGV[a + 5]
    redis.call('HSET', k_d(id), 'h', ARGV[a + 6])
    place(d, false)
    released = released + 1
  end
  a = a + 7
end
flush()
if released > 0 then wake() end
return { released, lost }
