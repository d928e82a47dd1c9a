-- Extend a lease or mark a claim `sending`.
-- ARGV: op ('extend' | 'sending'), id, tenant, token, now, until (extend only)
-- Returns 1, or 0 when the lease is lost.
local op, id, tenant, token, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local d = load(id)
if not owns(d, tenant, token) then
  return 0
end
if op == 'extend' then
  local u = ARGV[6]
  redis.call('HSET', k_d(id), 'lease', u, 'next', u)
  redis.call('ZADD', k_q(d[I_KIND], d[I_TARGET]), u, member(d[I_SEQ], id))
else
  set_status(d, 'sending')
  redis.call('HSET', k_d(id), 'status', 'sending', 'updated', now)
end
flush()
return 1
