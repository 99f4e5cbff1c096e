-- Shared by every anteroom script (prepended at build time). One script is one atomic step
-- on one room; every key carries the room's hash tag, so a room lives in one Cluster slot.
--
-- KEYS[1] conf    HASH  rate, max_active, session_ttl_ms, abandon_after_ms, paused
-- KEYS[2] state   HASH  tokens, refilled_ms (the bucket), seq (last ticket), pass_ms (last
--                       pass), gap_ms (store/fleet downtime forgiven so far), counters
-- KEYS[3] line    ZSET  16-byte visitor id -> ticket; position is ZRANK + 1
-- KEYS[4] seen    ZSET  visitor id -> last heartbeat (liveness time), for abandonment
-- KEYS[5] active  ZSET  visitor id -> last activity (liveness time), for reclaim
-- ARGV[1]         clock offset in ms: always 0 in production; tests move it, or freeze the
--                 clock with '@<unix ms>'
--
-- Time: the server's TIME, read once per script. The bucket refills in wall time. Reaping
-- runs in "liveness time" = wall time minus the downtime forgiven so far, so an outage of
-- the store or of every replica never abandons the line or reclaims the site.

local K_CONF, K_STATE, K_LINE, K_SEEN, K_ACTIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- Heartbeats and activity closer together than this do not rewrite a score.
local TOUCH_MS = 1000

local function clock_now()
  -- Tests only: '@<ms>' is a frozen clock they advance themselves.
  if string.sub(ARGV[1], 1, 1) == '@' then
    return tonumber(string.sub(ARGV[1], 2))
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
end

local NOW = clock_now()

-- The room, or nil when it was never opened.
local function load_room()
  local c = redis.call('HMGET', K_CONF, 'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused')
  if not c[1] then
    return nil
  end
  local s = redis.call('HMGET', K_STATE, 'tokens', 'refilled_ms', 'gap_ms')
  local r = {
    rate = tonumber(c[1]),
    max_active = tonumber(c[2]),
    ttl = tonumber(c[3]),
    abandon = tonumber(c[4]),
    paused = c[5] == '1',
    tokens = tonumber(s[1]),
    refilled = tonumber(s[2]) or NOW,
    gap = tonumber(s[3]) or 0,
  }
  if not (r.rate and r.max_active and r.ttl and r.abandon) then
    error('anteroom: bad data in ' .. K_CONF)
  end
  if r.tokens == nil then
    r.tokens = math.max(r.rate, 1)
  end
  r.live = NOW - r.gap
  return r
end

local function burst(r)
  return math.max(r.rate, 1)
end

-- Credits the bucket for the time since the last refill, capped at one second's worth.
local function refill(r)
  local elapsed = NOW - r.refilled
  if elapsed < 0 then
    elapsed = 0
  end
  r.tokens = math.min(r.tokens + elapsed * r.rate / 1000.0, burst(r))
  if NOW > r.refilled then
    r.refilled = NOW
  end
end

local function save_bucket(r)
  redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', r.tokens), 'refilled_ms', string.format('%d', r.refilled))
end

local function can_admit(r)
  return (not r.paused) and r.tokens >= 1 and redis.call('ZCARD', K_ACTIVE) < r.max_active
end

-- Records a waiting visitor's heartbeat (at most one write a second).
local function heard(r, id)
  local seen = tonumber(redis.call('ZSCORE', K_SEEN, id))
  if seen == nil or r.live >= seen + TOUCH_MS then
    redis.call('ZADD', K_SEEN, r.live, id)
  end
end

local function paused_flag(r)
  if r.paused then
    return 1
  end
  return 0
end

-- Runs `cmd key <prefix...> <items...>` in chunks, keeping Lua's stack small.
local function chunked(cmd, key, items, pair_score)
  local CHUNK = 1000
  for i = 1, #items, CHUNK do
    local args = {}
    for j = i, math.min(i + CHUNK - 1, #items) do
      if pair_score then
        args[#args + 1] = pair_score
      end
      args[#args + 1] = items[j]
    end
    redis.call(cmd, key, unpack(args))
  end
end
