-- Operator calls on one tenant's deliveries.
-- ARGV: op ('replay' | 'retry' | 'reset' | 'release_held'), tenant, id (delivery or
-- endpoint), now
local op, tenant, id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op == 'release_held' then
  local n = release_held(tenant, id, now)
  flush()
  if n > 0 then wake() end
  return n
end
local d = load(id)
if not d or d.tenant ~= tenant then return redis.error_reply('OUTBOX_NOT_FOUND delivery') end
local dk = k_d(id)
if op == 'replay' then
  if d.status ~= 'dead' then
    return redis.error_reply('OUTBOX_CONFLICT only a dead delivery can be replayed')
  end
  set_status(d, 'pending')
  d.attempts, d.next = '0', now
  local run = tonumber(redis.call('HGET', dk, 'r') or '1') + 1
  redis.call('HSET', dk, 'h', make_h('pending', '0', now, '', now), 'v', '0||', 'r', S(run))
  -- A new run: its barrier key with the endpoint's FIFO flag as it is now.
  d.okey = barrier_of(d.tenant, d.kind, d.target, d.key)
  if d.okey == FIFO_BARRIER then redis.call('HSET', dk, 'b', d.okey) else redis.call('HDEL', dk, 'b') end
  place(d, true)
elseif op == 'reset' then
  if d.status ~= 'held' then
    return redis.error_reply('OUTBOX_CONFLICT only a held delivery can be reset')
  end
  set_status(d, 'pending')
  d.attempts, d.next = '0', now
  redis.call('HSET', dk, 'h', make_h('pending', '0', now, '', now), 'v', '0||')
  place(d, false)
else
  if d.status ~= 'pending' and d.status ~= 'held' then
    return redis.error_reply('OUTBOX_CONFLICT only a pending or held delivery can be retried now')
  end
  set_status(d, 'pending')
  d.next = now
  redis.call('HSET', dk, 'h', make_h('pending', d.attempts, now, '', now))
  place(d, false)
end
flush()
wake()
return 1
