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
  redis.call('HSET', k_d(id), 'h', make_h(d.status, d.attempts, u, d.token, d.updated))
  redis.call('ZADD', k_g(d.kind, d.target, d.tenant), u, d.m)
  touch(d.kind, d.target, d.tenant)
else
  set_status(d, 'sending')
  redis.call('HSET', k_d(id), 'h', make_h('sending', d.attempts, d.next, d.token, now))
end
flush()
return 1
