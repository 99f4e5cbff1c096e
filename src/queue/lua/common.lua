-- Shared by every anteroom script (prepended at build time). One script is one atomic step
-- on one room; every key carries the room's hash tag, so a room lives in one Cluster slot.
--
-- KEYS[1] conf    HASH  rate, max_active, session_ttl_ms, abandon_after_ms, paused (runtime
--                       settings); jl_limit, jl_window_ms, opens_ms, admits_ms, closes_ms,
--                       lottery (the room's policy, rewritten by every open_room)
-- KEYS[2] state   HASH  tokens, refilled_ms (the bucket), seq (last ticket), pass_ms (last
--                       pass), gap_ms (store/fleet downtime forgiven so far), counters,
--                       salt (lottery, set once), draw_next/draw_end (tickets reserved for
--                       a draw at the doors: the next one issued is draw_next + 1)
-- KEYS[3] line    ZSET  16-byte visitor id -> ticket; position is ZRANK + 1
-- KEYS[4] seen    ZSET  visitor id -> last heartbeat (liveness time), for abandonment
-- KEYS[5] active  ZSET  visitor id -> last activity (liveness time), for reclaim
-- KEYS[6] draw    ZSET  visitor id -> lottery score, while a draw is collected and until
--                       the doors have moved it all into the line
-- KEYS[7] joins   HASH  (resolve only) this client's join-limit window: s start, n count
-- ARGV[1]         clock offset in ms: always 0 in production; tests move it, or freeze the
--                 clock with '@<unix ms>'
--
-- Time: the server's TIME, read once per script. The bucket refills in wall time. Reaping
-- runs in "liveness time" = wall time minus the downtime forgiven so far, so an outage of
-- the store or of every replica never abandons the line or reclaims the site.

local K_CONF, K_STATE, K_LINE, K_SEEN, K_ACTIVE, K_DRAW = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_JOINS = KEYS[7]

-- Phases (also the reply codes).
local QUEUEING, BEFORE_OPEN, DRAW, CLOSED = 0, 1, 2, 3

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
  local c = redis.call('HMGET', K_CONF, 'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused',
    'jl_limit', 'jl_window_ms', 'opens_ms', 'admits_ms', 'closes_ms', 'lottery')
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
    jl_limit = tonumber(c[6]) or 0,
    jl_window = tonumber(c[7]) or 0,
    opens = tonumber(c[8]),
    admits = tonumber(c[9]),
    closes = tonumber(c[10]),
    lottery = c[11] == '1',
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

-- Where the schedule stands now (store time). No schedule: always QUEUEING.
local function phase_of(r)
  if r.closes and NOW >= r.closes then
    return CLOSED
  end
  if r.opens and NOW < r.opens then
    return BEFORE_OPEN
  end
  if r.admits and NOW < r.admits then
    return DRAW
  end
  return QUEUEING
end

-- Tickets reserved for the draw: {next issued - 1, last reserved}. A reservation is active
-- while next < last.
local function draw_tickets()
  local d = redis.call('HMGET', K_STATE, 'draw_next', 'draw_end')
  return tonumber(d[1]) or 0, tonumber(d[2]) or 0
end

-- The doors: once the draw is over, reserve one ticket per entrant right after the last
-- issued one (O(1)), so everyone who comes later gets a ticket behind the whole draw.
-- The entrants are then moved into the line in score order by admission passes, in bounded
-- chunks (see drain_draw): moving a million at once would block Redis for seconds. Until
-- they all are, positions count the entrants still in the draw (see position_of) and no
-- one behind the reservation is admitted, so the order is the same as moving all at once.
local function open_doors(ph)
  if ph ~= QUEUEING and ph ~= CLOSED then
    return
  end
  local pending = redis.call('ZCARD', K_DRAW)
  if pending == 0 then
    return
  end
  local nxt, last = draw_tickets()
  if nxt < last then
    return
  end
  local seq = tonumber(redis.call('HGET', K_STATE, 'seq')) or 0
  redis.call('HSET', K_STATE, 'draw_next', string.format('%d', seq), 'draw_end', string.format('%d', seq + pending),
    'seq', string.format('%d', seq + pending))
end

-- Moves up to `budget` draw entrants, lowest score first, into the line on their reserved
-- tickets. Their last heartbeat stays in `seen`.
local function drain_draw(budget)
  local nxt, last = draw_tickets()
  if nxt >= last then
    return
  end
  local popped = redis.call('ZPOPMIN', K_DRAW, math.min(budget, last - nxt))
  local args = {}
  for i = 1, #popped, 2 do
    nxt = nxt + 1
    args[#args + 1] = nxt
    args[#args + 1] = popped[i]
    if #args >= 2000 then
      redis.call('ZADD', K_LINE, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', K_LINE, unpack(args))
  end
  if redis.call('ZCARD', K_DRAW) == 0 then
    -- Entrants who left during the drain leave their tickets unused.
    nxt = last
  end
  redis.call('HSET', K_STATE, 'draw_next', string.format('%d', nxt))
end

-- A waiting visitor's position: a number, 0 for a draw entrant before the doors (no
-- place yet), or nil when not waiting.
local function position_of(id)
  local nxt, last = draw_tickets()
  local reserved = nxt < last
  local rank = redis.call('ZRANK', K_LINE, id)
  if rank then
    if reserved and tonumber(redis.call('ZSCORE', K_LINE, id)) > last then
      -- Behind the whole draw, including the entrants not yet moved.
      return rank + 1 + redis.call('ZCARD', K_DRAW)
    end
    return rank + 1
  end
  local drank = redis.call('ZRANK', K_DRAW, id)
  if drank then
    if reserved then
      -- Ahead: everyone in line on a ticket up to the last one issued to the draw.
      return redis.call('ZCOUNT', K_LINE, '-inf', nxt) + drank + 1
    end
    return 0
  end
  return nil
end

local function waiting_count()
  return redis.call('ZCARD', K_LINE) + redis.call('ZCARD', K_DRAW)
end

-- A draw entrant's lottery score: the first 48 bits of SHA-1(salt .. id), exact as a ZSET
-- score (a double). Secret salt, so nobody can predict or choose a good one; the same id
-- always gets the same score. Equal scores fall back to the id's bytes.
local function lottery_score(id)
  local salt = redis.call('HGET', K_STATE, 'salt') or ''
  return tonumber(string.sub(redis.sha1hex(salt .. id), 1, 12), 16)
end
