-- End claims with their settled rows (`Lease::settle`, packed by the Rust side), append
-- attempts, disable endpoints.
-- ARGV: now, attempts cap, then per item 12 fields:
--   id, tenant, token, status, attempts, next, completed (''), h, v,
--   last outcome json ('' keeps the old one), ledger entry ('' when nothing was tried;
--   `probe|record json`, then \30 and the attempt's detail json when it has one),
--   disable the endpoint (1 for a 410), or w when the delivery waits for its endpoint
--   (written as pending, due now, when the endpoint is active again or gone), else 0
-- Returns per item 0 (lease lost), or 1 (written), or for a written webhook row its endpoint.
local now, cap = ARGV[1], tonumber(ARGV[2])
local out = {}
-- Index writes of finished rows, batched into one command per group and per tenant at the
-- end (a command costs far more than the Lua around it): group key -> members leaving it,
-- group key -> its source's group index, tenant -> {completed, member, ...} for `tf`.
local leave, source, done = {}, {}, {}
local a = 3
while a <= #ARGV do
  local id, tenant, token, status = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local dk = k_d(id)
  local r = redis.call('HMGET', dk, 'h', 's', 'r', 'du', 'b')
  local st, tk, m, dtenant, kind, target, okey
  if r[1] then
    st, tk = string.match(r[1], '^(%l+)|%d+|%d+|(%x*)|')
    -- member, tenant, kind, target and okey.
    m, dtenant, kind, target, okey = string.match(r[2],
      '^([^\31]*)\31[^\31]*\31([^\31]*)\31[^\31]*\31([^\31]*)\31([^\31]*)\31[^\31]*\31(.*)$')
    -- Its barrier key: a FIFO endpoint's one slot (`b`), else its ordering key.
    if r[5] then okey = r[5] end
  end
  if not r[1] or token == '' or tk ~= token or dtenant ~= tenant
      or (st ~= 'processing' and st ~= 'sending') then
    out[#out + 1] = 0
  else
    local h, next = ARGV[a + 7], ARGV[a + 5]
    if ARGV[a + 11] == 'w' then
      -- A resume or delete while the delivery was claimed did not see it: do not wait.
      local es = redis.call('HMGET', k_e(target), 'status', 'tenant')
      if not es[1] or es[1] == 'active' or es[2] ~= tenant then
        status, next = 'pending', now
        h = make_h('pending', ARGV[a + 4], now, '', now)
      end
    end
    moved(id, kind, target, st, status)
    local last, entry = ARGV[a + 9], ARGV[a + 10]
    if entry ~= '' then
      -- The entry gets the run and the due time of this claim: `probe|run|due|record`.
      local record = string.sub(entry, 3)
      entry = string.sub(entry, 1, 2) .. (r[3] or '1') .. '|' .. (r[4] or '') .. '|' .. record
      if kind == 'webhook' then
        -- The endpoint's last status: this attempt's record, in the same script, without
        -- the attempt in full that may follow it after a \30 (`entry.rs`).
        local ek = k_e(target)
        if redis.call('EXISTS', ek) == 1 then
          local cut = string.find(record, '\30', 1, true)
          if cut then record = string.sub(record, 1, cut - 1) end
          redis.call('HSET', ek, 'last', record)
        end
      end
      local ak = k_a(id)
      -- Activity: the delivery by its latest attempt (one command per attempt).
      redis.call('ZADD', k_tx(tenant), now, id)
      local len = redis.call('RPUSH', ak, entry)
      if len > cap then
        redis.call('LTRIM', ak, -cap, -1)
        redis.call('HINCRBY', dk, 'tr', len - cap)
      end
    end
    if last ~= '' then
      redis.call('HSET', dk, 'h', h, 'v', ARGV[a + 8], 'l', last)
    else
      redis.call('HSET', dk, 'h', h, 'v', ARGV[a + 8])
    end
    if finished(status) then
      -- `place` for the common case, inline and batched.
      local g = k_g(kind, target, tenant)
      local l = leave[g]
      if not l then
        l = {}
        leave[g], source[g] = l, k_G(kind, target)
      end
      l[#l + 1] = m
      if okey ~= '' then redis.call('ZREM', k_o(tenant, kind, target, okey), m) end
      local f = done[tenant]
      if not f then
        f = {}
        done[tenant] = f
      end
      f[#f + 1] = ARGV[a + 6]
      f[#f + 1] = m
      purgeable[tenant] = true
    else
      place({ id = id, m = m, tenant = tenant, kind = kind, target = target,
        okey = okey ~= '' and okey, status = status, attempts = ARGV[a + 4],
        next = next }, false)
    end
    if ARGV[a + 11] == '1' and kind == 'webhook' then
      local ek = k_e(target)
      if redis.call('EXISTS', ek) == 1 then
        redis.call('HSET', ek, 'status', 'disabled', 'reason', 'gone', 'updated', now)
        redis.call('HINCRBY', ek, 'ver', 1)
      end
    end
    -- A webhook row answers its endpoint, so that with several shards the caller can copy
    -- the endpoint's new last status (and a 410's disable) to the other shards' copies.
    out[#out + 1] = kind == 'webhook' and target or 1
  end
  a = a + 12
end
-- `unpack` takes at most a few thousand values at once.
local STEP = 1000
for g, l in pairs(leave) do
  for i = 1, #l, STEP do redis.call('ZREM', g, unpack(l, i, math.min(i + STEP - 1, #l))) end
  touch_g(g, source[g])
end
for t, f in pairs(done) do
  for i = 1, #f, 2 * STEP do
    redis.call('ZADD', k_tf(t), unpack(f, i, math.min(i + 2 * STEP - 1, #f)))
  end
end
flush()
return out
