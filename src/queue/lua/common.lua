-- Shared by every anteroom script (prepended at build time). One script is one atomic step
-- on one room; every key carries the room's hash tag, so a room lives in one Cluster slot.
--
-- KEYS[1] conf    HASH  rate, max_active, session_ttl_ms, abandon_after_ms, paused (runtime
--                       settings); jl_limit, jl_window_ms, opens_ms, admits_ms, closes_ms,
--                       lottery, max_places, max_sessions, session_clients, max_waiting
--                       (the room's policy, rewritten by every open_room)
-- KEYS[2] state   HASH  tokens, refilled_ms (the bucket), seq (last ticket), pass_ms (last
--                       pass), gap_ms (store/fleet downtime forgiven so far), counters,
--                       salt (lottery, set once), draw_next/draw_end (tickets reserved for
--                       a draw at the doors: the next one issued is draw_next + 1)
--                       front_seq (the front lane's counter); eff_rate (closed-loop
--                       admission's effective rate: the bucket refills at min(rate,
--                       eff_rate)), adaptive (the controller's state, JSON) and
--                       adaptive_claim_ms (the last claimed decision), SPEC §14
-- KEYS[3] line    ZSET  16-byte visitor id -> ticket; position is ZRANK + 1. A ticket is
--                       max(last + 1, join time in ms * 1024), so it still orders strictly
--                       and also tells when the place was taken (no per-visitor field: the
--                       memory goal). The front lane (moved to the front, priority joins)
--                       has negative tickets, the newest lowest: -(same scheme).
-- KEYS[4] seen    ZSET  visitor id -> last heartbeat (liveness time), for abandonment
-- KEYS[5] active  ZSET  visitor id -> last activity (liveness time), for reclaim
-- KEYS[6] draw    ZSET  visitor id -> lottery score, while a draw is collected and until
--                       the doors have moved it all into the line. The score is the first
--                       52 bits of the entrant's draw hash (SHA-256(salt .. id), computed
--                       by the replica, which knows the salt: Redis Lua has no SHA-256),
--                       exact in a double; equal scores are ordered by the whole hash
--                       when the doors move them (drain_draw), so the draw follows the
--                       published rule exactly.
-- KEYS[7] places  HASH  client (16 bytes) -> the ids (16 bytes each) that joined from it
--                       and may still wait, only while max_places is set. Purged against
--                       the line when it reaches the cap, so a client's count is exact
--                       whenever a refusal is decided on; passes sweep it in bounded steps
--                       so clients that never come back are forgotten. Costs 16 B per waiter plus one field per
--                       client, instead of a field per waiter (id -> client).
-- KEYS[8] sess    HASH  session id -> the distinct clients (16 bytes each) it was used
--                       from, the first charged with it; only while a session cap is set
-- KEYS[9] scount  HASH  client -> sessions charged to it; a field is removed at zero
-- KEYS[10] drawh  HASH  visitor id -> their 32-byte draw hash, for every entrant of a
--                       lottery draw. One who leaves the draw before the doors (abandoned,
--                       moved to the front, flushed) is removed; from the doors on it
--                       never changes: it is the draw's published record (SPEC §14)
-- KEYS[11] joins  HASH  (resolve only) this client's join-limit window: s start, n count
-- KEYS[11] origin HASH  (adaptive only) replica id -> '<store ms> <its report, JSON>'
-- ARGV[1]         clock offset in ms: always 0 in production; tests move it, or freeze the
--                 clock with '@<unix ms>'
--
-- Time: the server's TIME, read once per script. The bucket refills in wall time. Reaping
-- runs in "liveness time" = wall time minus the downtime forgiven so far, so an outage of
-- the store or of every replica never abandons the line or reclaims the site.

local K_CONF, K_STATE, K_LINE, K_SEEN, K_ACTIVE, K_DRAW = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_PLACES, K_SESS, K_SCOUNT, K_DRAWH = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_JOINS = KEYS[11]

-- Tickets are join times in ms times this, so up to 1024 joins a millisecond keep exact
-- times; below 2^53 until the year 2248.
local TICKET_SCALE = 1024

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
    'jl_limit', 'jl_window_ms', 'opens_ms', 'admits_ms', 'closes_ms', 'lottery',
    'max_places', 'max_sessions', 'session_clients', 'max_waiting')
  if not c[1] then
    return nil
  end
  local s = redis.call('HMGET', K_STATE, 'tokens', 'refilled_ms', 'gap_ms', 'eff_rate')
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
    max_places = tonumber(c[12]) or 0,
    max_sessions = tonumber(c[13]) or 0,
    session_clients = tonumber(c[14]) or 0,
    max_waiting = tonumber(c[15]) or 0,
    eff_rate = tonumber(s[4]),
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

-- The rate the bucket refills at: the configured one, capped by closed-loop admission's
-- effective rate when it has one (r.rate stays the configured rate).
local function rate_of(r)
  if r.eff_rate and r.eff_rate > 0 and r.eff_rate < r.rate then
    return r.eff_rate
  end
  return r.rate
end

local function burst(r)
  return math.max(rate_of(r), 1)
end

-- Credits the bucket for the time since the last refill, capped at one second's worth.
local function refill(r)
  local elapsed = NOW - r.refilled
  if elapsed < 0 then
    elapsed = 0
  end
  r.tokens = math.min(r.tokens + elapsed * rate_of(r) / 1000.0, burst(r))
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

-- Whether byte string a sorts before b (plain bytes, whatever the server's locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Puts runs of equal scores in `popped` (ZPOPMIN's id, score, ...) in the order of the
-- entrants' whole draw hashes, the published rule (a 52-bit tie is rare: ~1e-4 in a
-- million-entrant draw). Returns the ids in order.
local function draw_order(popped)
  local ids = {}
  local i = 1
  while i <= #popped do
    local j = i
    while j + 2 <= #popped and popped[j + 3] == popped[i + 1] do
      j = j + 2
    end
    if j == i then
      ids[#ids + 1] = popped[i]
    else
      local group = {}
      for k = i, j, 2 do
        group[#group + 1] = { popped[k], redis.call('HGET', K_DRAWH, popped[k]) or '' }
      end
      table.sort(group, function(x, y) return bytes_less(x[2], y[2]) end)
      for _, g in ipairs(group) do
        ids[#ids + 1] = g[1]
      end
    end
    i = j + 2
  end
  return ids
end

-- Moves up to `budget` draw entrants, lowest draw hash first, into the line on their
-- reserved tickets. Their last heartbeat stays in `seen`.
local function drain_draw(budget)
  local nxt, last = draw_tickets()
  if nxt >= last then
    return
  end
  local popped = redis.call('ZPOPMIN', K_DRAW, math.min(budget, last - nxt))
  if #popped > 0 then
    -- A run of equal scores is never split between two chunks.
    local s = popped[#popped]
    local rest = redis.call('ZRANGEBYSCORE', K_DRAW, s, s)
    for _, id in ipairs(rest) do
      redis.call('ZREM', K_DRAW, id)
      popped[#popped + 1] = id
      popped[#popped + 1] = s
    end
  end
  local args = {}
  for _, id in ipairs(draw_order(popped)) do
    nxt = nxt + 1
    args[#args + 1] = nxt
    args[#args + 1] = id
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

-- Whether the doors are still to open (the draw's record may still change).
local function before_doors(ph)
  return ph == DRAW or ph == BEFORE_OPEN
end

-- The next ticket at the back of the line (see KEYS[3]).
local function next_ticket()
  local seq = tonumber(redis.call('HGET', K_STATE, 'seq')) or 0
  local t = math.max(seq + 1, NOW * TICKET_SCALE)
  redis.call('HSET', K_STATE, 'seq', string.format('%d', t))
  return t
end

-- The next ticket of the front lane: below every ticket issued so far.
local function next_front()
  local f = tonumber(redis.call('HGET', K_STATE, 'front_seq')) or 0
  f = math.max(f + 1, NOW * TICKET_SCALE)
  redis.call('HSET', K_STATE, 'front_seq', string.format('%d', f))
  return -f
end

-- When a ticket's place was taken (unix ms), or 0 for a ticket from before the scheme.
local function joined_ms(ticket)
  local t = math.abs(ticket)
  if t < 2 ^ 40 then
    return 0
  end
  return math.floor(t / TICKET_SCALE)
end

local function is_waiting(id)
  return redis.call('ZSCORE', K_LINE, id) or redis.call('ZSCORE', K_DRAW, id)
end

-- How many of `client`'s places are still in line (draw included), dropping from its
-- entry those who left (admitted, abandoned, moved on) and any id listed twice (a rejoin).
-- With `cap` > 0, an entry listing fewer than `cap` ids is taken as it is: an upper bound
-- below the cap lets the newcomer in without a look-up per id, so the purge (O(cap)) runs
-- only when a refusal is at stake and the count decided on is exact. `cap` 0 always purges.
local function places_of(client, cap)
  local v = redis.call('HGET', K_PLACES, client)
  if not v then
    return 0
  end
  if cap > 0 and #v < cap * 16 then
    return math.floor(#v / 16)
  end
  local kept, seen = {}, {}
  for i = 1, #v - 15, 16 do
    local id = string.sub(v, i, i + 15)
    if not seen[id] and is_waiting(id) then
      seen[id] = true
      kept[#kept + 1] = id
    end
  end
  if #kept == 0 then
    redis.call('HDEL', K_PLACES, client)
  elseif #kept * 16 < #v then
    redis.call('HSET', K_PLACES, client, table.concat(kept))
  end
  return #kept
end

-- Counts a newcomer's place against their client (only while the cap is set).
local function add_place(r, client, id)
  if r.max_places > 0 then
    redis.call('HSET', K_PLACES, client, (redis.call('HGET', K_PLACES, client) or '') .. id)
  end
end

local function tracks_sessions(r)
  return r.max_sessions > 0 or r.session_clients > 0
end

-- Charges a session to the client it is first used from.
local function charge_session(id, client)
  redis.call('HSET', K_SESS, id, client)
  redis.call('HINCRBY', K_SCOUNT, client, 1)
end

-- Forgets sessions that left the site (already out of `active`), freeing their clients'
-- shares.
local function drop_sessions(ids)
  if #ids == 0 or redis.call('EXISTS', K_SESS) == 0 then
    return
  end
  local CHUNK = 1000
  for i = 1, #ids, CHUNK do
    local chunk = {}
    for j = i, math.min(i + CHUNK - 1, #ids) do
      chunk[#chunk + 1] = ids[j]
    end
    local clients = redis.call('HMGET', K_SESS, unpack(chunk))
    for _, c in ipairs(clients) do
      if c then
        local first = string.sub(c, 1, 16)
        if redis.call('HINCRBY', K_SCOUNT, first, -1) <= 0 then
          redis.call('HDEL', K_SCOUNT, first)
        end
      end
    end
    redis.call('HDEL', K_SESS, unpack(chunk))
  end
end

-- Moves a waiting visitor (line, front lane or draw) to position 1, recording a heartbeat.
-- False when they are not waiting.
local function to_front(r, id)
  if not is_waiting(id) then
    return false
  end
  if redis.call('ZREM', K_DRAW, id) == 1 and before_doors(phase_of(r)) then
    -- Out of the lot before the doors: not an entrant of the draw.
    redis.call('HDEL', K_DRAWH, id)
  end
  redis.call('ZADD', K_LINE, string.format('%d', next_front()), id)
  redis.call('ZADD', K_SEEN, r.live, id)
  return true
end
