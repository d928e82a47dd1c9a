-- Endpoint writes and listing.
-- ARGV: op, then
--   create: id, tenant, created, field/value pairs...
--   update: id, tenant, version, releases held (0/1), now, hold until ('' or a time), nset,
--           pairs..., fields to delete...
--   delete: id, tenant, now
--   list:   tenant
--   mirror: now, (id, tenant, last record, disable) per endpoint
--   consumer: name, paused (0/1), now — pause or resume a consumer (holding or releasing its
--           deliveries in this shard); returns the number released
local op = ARGV[1]
if op == 'consumer' then
  local name, paused, now = ARGV[2], ARGV[3], ARGV[4]
  if redis.call('HEXISTS', K_CONSUMERS, name) == 0 then
    return redis.error_reply('OUTBOX_NOT_FOUND consumer')
  end
  local n = 0
  if paused == '1' then
    redis.call('SADD', K_PAUSED, name)
    hold_for_consumer(name, false, now)
  else
    redis.call('SREM', K_PAUSED, name)
    n = hold_for_consumer(name, true, now)
  end
  flush()
  if n > 0 then wake() end
  return n
end
if op == 'list' then
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', k_te(ARGV[2]), 0, -1)) do
    local r = redis.call('HGETALL', k_e(id))
    if #r > 0 then out[#out + 1] = r end
  end
  return out
end
if op == 'mirror' then
  -- Copy completions' endpoint writes made in another shard: ARGV: now, then (id, tenant,
  -- last record or '', disable 0/1) per endpoint.
  local now = ARGV[2]
  for j = 3, #ARGV, 4 do
    local ek = k_e(ARGV[j])
    if redis.call('HGET', ek, 'tenant') == ARGV[j + 1] then
      if ARGV[j + 2] ~= '' then redis.call('HSET', ek, 'last', ARGV[j + 2]) end
      if ARGV[j + 3] == '1' then
        redis.call('HSET', ek, 'status', 'disabled', 'reason', 'gone', 'updated', now)
        redis.call('HINCRBY', ek, 'ver', 1)
      end
    end
  end
  return 1
end
local id, tenant = ARGV[2], ARGV[3]
local ek = k_e(id)
if op == 'create' then
  if redis.call('EXISTS', ek) == 1 then
    return redis.error_reply('OUTBOX_CONFLICT an endpoint with this id exists')
  end
  local created = ARGV[4]
  local args = {}
  for j = 5, #ARGV do args[#args + 1] = ARGV[j] end
  redis.call('HSET', ek, unpack(args))
  redis.call('HSET', ek, 'ver', '1')
  redis.call('ZADD', k_te(tenant), created, id)
  return 1
end
if redis.call('HGET', ek, 'tenant') ~= tenant then
  return redis.error_reply('OUTBOX_NOT_FOUND endpoint')
end
if op == 'delete' then
  redis.call('DEL', ek)
  redis.call('ZREM', k_te(tenant), id)
  -- Its held deliveries become due, so the next claim ends them (`endpoint-removed`).
  local n = release_held(tenant, id, ARGV[4])
  flush()
  if n > 0 then wake() end
  return 1 + n
end
-- update: compare-and-set on the version read by the caller ('' when shard 0 already took
-- the change and this shard's copy follows it).
if ARGV[4] ~= '' and redis.call('HGET', ek, 'ver') ~= ARGV[4] then return { 0, 0 } end
local releases, now, hold = ARGV[5], ARGV[6], ARGV[7]
local nset = tonumber(ARGV[8])
local args = {}
for j = 9, 8 + 2 * nset do args[#args + 1] = ARGV[j] end
redis.call('HSET', ek, unpack(args))
for j = 9 + 2 * nset, #ARGV do redis.call('HDEL', ek, ARGV[j]) end
redis.call('HINCRBY', ek, 'ver', 1)
local n = 0
if releases == '1' then
  n = release_held(tenant, id, now)
end
if hold ~= '' then
  hold_for_endpoint(tenant, id, hold, now)
end
flush()
if n > 0 then wake() end
return { 1, n }
