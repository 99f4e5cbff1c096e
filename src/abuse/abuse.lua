-- The abuse registry's shared state (docs/security.md), one atomic step per call. Every key carries
-- the hash tag {abuse}, so a Redis Cluster keeps them all in one slot.
--
-- KEYS[1] bans     HASH    target (CIDR text) -> ban JSON
-- KEYS[2] expiry   ZSET    target -> until (unix ms); permanent bans are absent
-- KEYS[3] log      LIST    ban log entry JSON, newest first, capped at ARGV[3]
-- KEYS[4] seq      STRING  last log seq; a ban's seq is its `banned` entry's, so the log's
--                          seqs are contiguous and a cursor maps to a list index
-- KEYS[5] ver      STRING  bumped on every change of `bans`: replicas reload only then
-- KEYS[6] evict    ZSET    target -> until, automatic and ban-path bans only: what a new
--                          ban displaces first at abuse.max_bans (operator bans never)
-- KEYS[7] strikes  ZSET    (strike only) this client's strikes "nonce:weight" -> unix ms,
--                          expiring with the window
-- KEYS[8] repeat   STRING  (strike only) this client's automatic bans so far, forgotten
--                          max_cooldown after the last one ends
-- KEYS[9] struck   STREAM  (strike only) every counted strike's client and new total
--                          (fields c, t, at; t is 0 when the strike ended in a ban),
--                          capped near ARGV[13] entries: how each replica learns the
--                          totals of strikes other replicas recorded
-- ARGV[1] op, ARGV[2] now (unix ms, the calling replica's clock), ARGV[3] log cap
--
-- JSON is assembled here with string.format('%d') for times, because cjson would print
-- millisecond timestamps in floating-point notation; reasons arrive JSON-encoded.

local K_BANS, K_EXP, K_LOG, K_SEQ, K_VER = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_EVICT = KEYS[6]
local op, now, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local function fmt_until(u)
  if u then return string.format('%d', u) end
  return 'null'
end

local function log(action, target, source, reason, until_)
  local seq = redis.call('INCR', K_SEQ)
  redis.call('LPUSH', K_LOG, string.format(
    '{"seq":%d,"at_ms":%d,"action":"%s","target":"%s","source":"%s","reason":%s,"until_ms":%s}',
    seq, now, action, target, source, reason, fmt_until(until_)))
  redis.call('LTRIM', K_LOG, 0, cap - 1)
  return seq
end

local function put_ban(target, source, reason, until_)
  local seq = log('banned', target, source, reason, until_)
  local json = string.format(
    '{"seq":%d,"target":"%s","source":"%s","reason":%s,"since_ms":%d,"until_ms":%s}',
    seq, target, source, reason, now, fmt_until(until_))
  redis.call('HSET', K_BANS, target, json)
  if until_ then
    redis.call('ZADD', K_EXP, string.format('%d', until_), target)
  else
    redis.call('ZREM', K_EXP, target)
  end
  if until_ and source ~= 'admin' then
    redis.call('ZADD', K_EVICT, string.format('%d', until_), target)
  else
    redis.call('ZREM', K_EVICT, target)
  end
  redis.call('INCR', K_VER)
  return json
end

local function forget(target)
  redis.call('HDEL', K_BANS, target)
  redis.call('ZREM', K_EXP, target)
  redis.call('ZREM', K_EVICT, target)
end

-- Removes the ban on target before or at its end, logging `action` and appending its
-- JSON to out (nothing logged when it was already gone).
local function remove_logged(target, action, out)
  local json = redis.call('HGET', K_BANS, target)
  forget(target)
  if json then
    local ban = cjson.decode(json)
    log(action, target, ban.source, cjson.encode(ban.reason), nil)
    table.insert(out, json)
  end
end

-- Room for a ban on target within max active bans: none needed to replace one; at the
-- cap the automatic or ban-path ban ending soonest is displaced. -> the displaced bans'
-- JSON, or nil when only operator bans are left (nothing changed).
local function make_room(target, max)
  local out = {}
  if redis.call('HEXISTS', K_BANS, target) == 1 then return out end
  while redis.call('HLEN', K_BANS) >= max do
    local victim = redis.call('ZRANGE', K_EVICT, 0, 0)[1]
    if not victim then return nil end
    remove_logged(victim, 'displaced', out)
  end
  return out
end

-- The active ban on target and its end (nil when permanent); an ended ban not yet swept
-- is no ban.
local function active(target)
  local json = redis.call('HGET', K_BANS, target)
  if not json then return nil, nil end
  local u = redis.call('ZSCORE', K_EXP, target)
  if u and tonumber(u) <= now then return nil, nil end
  return json, u and tonumber(u)
end

if op == 'strike' then
  -- ARGV[4] target, [5] weight, [6] window ms, [7] strikes, [8] cooldown ms,
  -- [9] max_cooldown ms, [10] reason JSON, [11] nonce, [12] max bans, [13] the struck
  -- stream's cap.  -> {1} already banned, {0, total} counted, {2, ban JSON, displaced
  -- JSON...} banned now, {3} no room.
  local K_STRIKES, K_REPEAT, K_STRUCK = KEYS[7], KEYS[8], KEYS[9]
  local target, weight, window = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local threshold, cooldown, maxc = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  if active(target) then return {1} end
  redis.call('ZREMRANGEBYSCORE', K_STRIKES, '-inf', string.format('%d', now - window))
  redis.call('ZADD', K_STRIKES, string.format('%d', now), ARGV[11] .. ':' .. ARGV[5])
  local total = 0
  for _, m in ipairs(redis.call('ZRANGE', K_STRIKES, 0, -1)) do
    total = total + (tonumber(string.match(m, ':(%d+)$')) or 0)
  end
  -- Every replica learns the client's new total from the stream (0 once its strikes are
  -- spent on a ban).
  local function tell(t)
    redis.call('XADD', K_STRUCK, 'MAXLEN', '~', ARGV[13], '*',
      'c', target, 't', string.format('%d', t), 'at', string.format('%d', now))
  end
  if total < threshold then
    redis.call('PEXPIRE', K_STRIKES, string.format('%d', window))
    tell(total)
    return {0, total}
  end
  redis.call('DEL', K_STRIKES)
  tell(0)
  local displaced = make_room(target, tonumber(ARGV[12]))
  if not displaced then return {3} end
  local earlier = tonumber(redis.call('GET', K_REPEAT) or '0') or 0
  local d = cooldown * math.pow(2, math.min(earlier, 100))
  if d > maxc then d = maxc end
  redis.call('SET', K_REPEAT, string.format('%d', earlier + 1), 'PX', string.format('%d', d + maxc))
  local reply = {2, put_ban(target, 'automatic', ARGV[10], now + d)}
  for _, json in ipairs(displaced) do table.insert(reply, json) end
  return reply
elseif op == 'ban' then
  -- ARGV[4] target, [5] source, [6] reason JSON, [7] until ms or '' (permanent),
  -- [8] 'replace' (admin) or 'extend' (keep a longer ban), [9] max bans.
  -- -> {1, ban JSON, displaced JSON...} stored, {0} a longer ban kept, {3} no room.
  local target, until_ = ARGV[4], nil
  if ARGV[7] ~= '' then until_ = tonumber(ARGV[7]) end
  if ARGV[8] == 'extend' then
    local json, u = active(target)
    if json and (u == nil or (until_ ~= nil and u >= until_)) then return {0} end
  end
  local displaced = make_room(target, tonumber(ARGV[9]))
  if not displaced then return {3} end
  local reply = {1, put_ban(target, ARGV[5], ARGV[6], until_)}
  for _, json in ipairs(displaced) do table.insert(reply, json) end
  return reply
elseif op == 'unban' then
  -- ARGV[4] target. -> the lifted ban's JSON, or nil.
  local target = ARGV[4]
  local json = active(target)
  if not json then return false end
  local ban = cjson.decode(json)
  forget(target)
  redis.call('INCR', K_VER)
  log('unbanned', target, ban.source, cjson.encode(ban.reason), nil)
  return json
elseif op == 'sweep' then
  -- ARGV[4] budget. -> the JSON of each ban that ended (only the caller that removed it
  -- gets it, so one replica reports each expiry).
  local ended = redis.call('ZRANGEBYSCORE', K_EXP, '-inf', string.format('%d', now), 'LIMIT', 0, tonumber(ARGV[4]))
  local out = {}
  for _, target in ipairs(ended) do
    remove_logged(target, 'expired', out)
  end
  if #out > 0 then redis.call('INCR', K_VER) end
  return out
elseif op == 'log' then
  -- ARGV[4] cursor ('' = newest), [5] count. -> entries with seq < cursor, newest first.
  local count = tonumber(ARGV[5])
  local start = 0
  if ARGV[4] ~= '' then
    local head = redis.call('LINDEX', K_LOG, 0)
    if not head then return {} end
    local top = tonumber(string.match(head, '^{"seq":(%d+)')) or 0
    start = top - tonumber(ARGV[4]) + 1
    if start < 0 then start = 0 end
  end
  return redis.call('LRANGE', K_LOG, start, start + count - 1)
end
return redis.error_reply('unknown op ' .. tostring(op))
