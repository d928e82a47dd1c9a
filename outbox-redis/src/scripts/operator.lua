-- Operator calls on one tenant's deliveries.
-- ARGV: op ('replay' | 'retry' | 'reset' | 'cancel' | 'cancel_message' | 'release_held'),
-- tenant, id (delivery, message or endpoint), now
local op, tenant, id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op == 'release_held' then
  local n = release_held(tenant, id, now)
  flush()
  if n > 0 then wake() end
  return n
end
-- Cancel a waiting delivery: finished `dead` (`cancelled`), attempts and ledger kept; it
-- leaves its due and ordering sets (`place`), so it no longer holds back its key.
local function cancel(d)
  set_status(d, 'dead')
  d.next, d.completed = now, now
  local snoozes = string.match(d.v or '', '^(%d*)')
  redis.call('HSET', k_d(d.id), 'h', make_h('dead', d.attempts, now, '', now),
    'v', snoozes .. '|' .. now .. '|cancelled')
  place(d, false)
end
local function cancel_refused(status)
  if status == 'processing' or status == 'sending' then
    return redis.error_reply('OUTBOX_CONFLICT the delivery is in flight (it may already be sent) and cannot be cancelled')
  end
  return redis.error_reply('OUTBOX_CONFLICT the delivery is already finished and cannot be cancelled')
end
if op == 'cancel_message' then
  -- A message's deliveries are the tenant's deliveries created with it (`td` scores them by
  -- the enqueue time, the message's created_at) whose row names it.
  local x = redis.call('HGET', k_m(id), 'x')
  local mt, created
  if x then
    mt, created = string.match(x, '^[^\31]*\31[^\31]*\31([^\31]*)\31[^\31]*\31[^\31]*\31[^\31]*\31([^\31]*)\31')
  end
  if not mt or mt ~= tenant then return redis.error_reply('OUTBOX_NOT_FOUND message') end
  local n, skipped = 0, 0
  for _, did in ipairs(redis.call('ZRANGEBYSCORE', k_td(tenant), created, created)) do
    local d = load(did)
    if d and d.mid == id and d.tenant == tenant then
      if d.status == 'pending' or d.status == 'held' then
        cancel(d)
        n = n + 1
      else
        skipped = skipped + 1
      end
    end
  end
  flush()
  if n > 0 then wake() end
  return { n, skipped }
end
local d = load(id)
if not d or d.tenant ~= tenant then return redis.error_reply('OUTBOX_NOT_FOUND delivery') end
if op == 'cancel' then
  if d.status ~= 'pending' and d.status ~= 'held' then return cancel_refused(d.status) end
  cancel(d)
  flush()
  wake()
  return 1
end
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
