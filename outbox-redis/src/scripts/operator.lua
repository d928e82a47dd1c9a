-- Operator calls on one tenant's deliveries.
-- ARGV: op ('replay' | 'retry' | 'release_held'), tenant, id (delivery or endpoint), now
local op, tenant, id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op == 'release_held' then
  local n = release_held(tenant, id, now)
  flush()
  if n > 0 then wake() end
  return n
end
local d = load(id)
if not d or d[I_TENANT] ~= tenant then return redis.error_reply('OUTBOX_NOT_FOUND delivery') end
local dk = k_d(id)
if op == 'replay' then
  if d[I_STATUS] ~= 'dead' then
    return redis.error_reply('OUTBOX_CONFLICT only a dead delivery can be replayed')
  end
  set_status(d, 'pending')
  d[I_ATTEMPTS], d[I_NEXT] = '0', now
  redis.call('HSET', dk, 'status', 'pending', 'attempts', '0', 'snoozes', '0', 'next', now,
    'updated', now, 'dead', '', 'completed', '', 'token', '', 'lease', '')
  place(d, true)
else
  if d[I_STATUS] ~= 'pending' and d[I_STATUS] ~= 'held' then
    return redis.error_reply('OUTBOX_CONFLICT only a pending or held delivery can be retried now')
  end
  set_status(d, 'pending')
  d[I_NEXT] = now
  redis.call('HSET', dk, 'status', 'pending', 'next', now, 'updated', now)
  place(d, false)
end
flush()
wake()
return 1
