-- adaptive (closed-loop admission, docs/fairness.md). KEYS[13] = the room's origin reports.
-- ARGV[2] = 'x': exchange. ARGV[3] replica id, ARGV[4] its report (JSON), ARGV[5] how old a
--   report may be (ms), ARGV[6] how long a decision claim lasts (ms). Stores the report,
--   drops stale ones, claims the decision when the last claim is over.
--   Returns {-1} unknown room, else {now_ms, rate, claimed (0/1), state JSON or '',
--   '<store ms> <report>'...}.
-- ARGV[2] = 's': set. ARGV[3] the effective rate, ARGV[4] the state (JSON); both '' to
--   clear. The bucket is credited at the old rate up to now. Returns {-1} or {1}.
local r = load_room()
if not r then
  return {-1}
end
local K_ORIGIN = KEYS[13]
if ARGV[2] == 'x' then
  local stale, claim_every = tonumber(ARGV[5]), tonumber(ARGV[6])
  redis.call('HSET', K_ORIGIN, ARGV[3], string.format('%d', NOW) .. ' ' .. ARGV[4])
  -- Outlives its last writer by a little, so a room nobody reports on leaves nothing.
  redis.call('PEXPIRE', K_ORIGIN, stale * 4)
  local out = {}
  local all = redis.call('HGETALL', K_ORIGIN)
  for i = 1, #all, 2 do
    local v = all[i + 1]
    local sp = string.find(v, ' ', 1, true)
    local at = sp and tonumber(string.sub(v, 1, sp - 1))
    if (not at) or NOW - at > stale or at > NOW + stale then
      redis.call('HDEL', K_ORIGIN, all[i])
    else
      out[#out + 1] = v
    end
  end
  local st = redis.call('HMGET', K_STATE, 'adaptive_claim_ms', 'adaptive')
  local claim = tonumber(st[1])
  local claimed = 0
  -- A claim from the future (a frozen test clock moved back) is void too.
  if (not claim) or claim > NOW or NOW - claim >= claim_every then
    redis.call('HSET', K_STATE, 'adaptive_claim_ms', string.format('%d', NOW))
    claimed = 1
  end
  local reply = {string.format('%d', NOW), string.format('%.17g', r.rate), tostring(claimed), st[2] or ''}
  for _, v in ipairs(out) do
    reply[#reply + 1] = v
  end
  return reply
end
refill(r)
if ARGV[3] == '' then
  redis.call('HDEL', K_STATE, 'eff_rate', 'adaptive', 'adaptive_claim_ms')
  redis.call('DEL', K_ORIGIN)
  r.eff_rate = nil
else
  redis.call('HSET', K_STATE, 'eff_rate', ARGV[3], 'adaptive', ARGV[4])
  r.eff_rate = tonumber(ARGV[3])
end
r.tokens = math.min(r.tokens, burst(r))
save_bucket(r)
return {1}
