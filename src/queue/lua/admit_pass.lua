-- admit_pass: ARGV[2] = reap budget, ARGV[3] = 1 when this replica has just seen the store
-- fail (forgive the time since the last pass as downtime), ARGV[4] = this replica's cursor
-- in the room's admissions (KEYS[13], '' at its first pass).
-- Returns {-1} unknown room, else {admitted ids, abandoned ids, expired ids, join times of
-- the admitted (unix ms, 0 when unknown), the other replicas' admissions since the cursor
-- (packed ids, oldest first), the new cursor}.
local r = load_room()
if not r then
  return {-1}
end
local budget = tonumber(ARGV[2])
local ph = phase_of(r)
open_doors(ph)

local last_pass = tonumber(redis.call('HGET', K_STATE, 'pass_ms'))
if ARGV[3] == '1' and last_pass and NOW > last_pass then
  r.gap = r.gap + (NOW - last_pass)
  r.live = NOW - r.gap
  redis.call('HSET', K_STATE, 'gap_ms', string.format('%d', r.gap))
end
redis.call('HSET', K_STATE, 'pass_ms', string.format('%d', NOW))

-- Idle sessions, oldest first, bounded.
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', r.live - r.ttl, 'LIMIT', 0, budget)
if #expired > 0 then
  redis.call('ZREMRANGEBYRANK', K_ACTIVE, 0, #expired - 1)
  redis.call('HINCRBY', K_STATE, 'total_expired', #expired)
  drop_sessions(expired, r.live)
end

-- Abandoned waiters, bounded: in line (by chunk, see line_reap), then in a draw (least
-- recently heard first).
local abandoned = {}
line_reap(r.live - r.abandon, budget, abandoned)
if #abandoned < budget then
  local left = redis.call('ZRANGEBYSCORE', K_DSEEN, '-inf', r.live - r.abandon, 'LIMIT', 0, budget - #abandoned)
  if #left > 0 then
    redis.call('ZREMRANGEBYRANK', K_DSEEN, 0, #left - 1)
    chunked('ZREM', K_DRAW, left)
    draw_changed()
    if before_doors(ph) then
      -- Left the lot before the doors: not entrants of the draw (see KEYS[10]).
      chunked('HDEL', K_DRAWH, left)
    end
    for _, id in ipairs(left) do
      abandoned[#abandoned + 1] = id
    end
  end
end
if #abandoned > 0 then
  redis.call('HINCRBY', K_STATE, 'total_abandoned', #abandoned)
end

-- Sweep a bounded step of the per-client places, so a client whose visitors all left and
-- who never comes back is forgotten (each field is purged against the line as it is read).
if redis.call('EXISTS', K_PLACES) == 1 then
  local cursor = redis.call('HGET', K_STATE, 'places_cursor') or '0'
  local step = redis.call('HSCAN', K_PLACES, cursor, 'COUNT', 100)
  for i = 1, #step[2], 2 do
    places_of(step[2][i], 0)
  end
  redis.call('HSET', K_STATE, 'places_cursor', step[1])
end

-- Move the next chunk of a draw whose doors have opened into the line.
drain_draw(budget)

-- Admit from the head while both limits allow; nobody before the doors or after closing.
refill(r)
local admitted, joined = {}, {}
if ph == QUEUEING and (r.passthrough or (not r.paused and r.tokens >= 1)) then
  local room_left = r.max_active - redis.call('ZCARD', K_ACTIVE)
  local n = math.min(math.floor(r.tokens), room_left)
  if r.passthrough then
    -- The whole line, a budget's worth a pass.
    n = math.min(waiting_count(), budget)
  end
  local nxt, last = draw_tickets()
  if nxt < last and draw_size() > 0 then
    -- Part of the draw is still to be moved: nobody behind it goes first.
    n = math.min(n, line_upto(nxt))
  end
  if n > 0 then
    admitted, joined = line_pop(n)
    if #admitted > 0 then
      r.tokens = math.max(r.tokens - #admitted, 0)
      chunked('ZADD', K_ACTIVE, admitted, r.live)
      if not r.passthrough then
        -- Passthrough has no line to estimate for: its sessions go untimed, saving a
        -- write per admission where a pass admits thousands.
        sessions_started(admitted, r.live)
      end
      count_admitted(r, #admitted)
    end
  end
end
save_bucket(r)

-- The room's admissions, one entry per admitting pass (its ids packed, 16 bytes each), so
-- a replica hears what the others' passes admitted at its own next pass instead of at its
-- live streams' next heartbeat. The cursor is the last entry this replica has seen, and its
-- own entry moves it past itself: whatever follows the cursor is another replica's. At
-- most ADMITTED_READ ids are read a pass, the newest; older ones are heard at the
-- heartbeat, as before. The last ADMITTED_KEPT entries are kept. All of it is a hint: an
-- error here (a cursor or key of another shape) answers nothing heard and no cursor, never
-- a failed pass, whose own writes above have happened.
local ADMITTED_KEPT, ADMITTED_READ = 64, 20000
local K_ADMITTED = KEYS[13]

-- Whether stream id a ('ms-seq') comes before b.
local function stream_id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not (am and bm) then
    return false
  end
  if tonumber(am) ~= tonumber(bm) then
    return tonumber(am) < tonumber(bm)
  end
  return tonumber(as) < tonumber(bs)
end

-- The stream's last entry's id, or nil when it is empty or absent.
local function last_admitted()
  local last = redis.call('XREVRANGE', K_ADMITTED, '+', '-', 'COUNT', 1)[1]
  return last and last[1]
end

local function hear(cursor)
  local elsewhere = {}
  if cursor == '' then
    cursor = last_admitted() or '0-0'
  else
    -- Newest first, a few entries a step (an entry of a passthrough pass is up to 160 KB),
    -- until the budget is spent or the cursor reached.
    local taken, bytes, hi, newest, full = {}, 0, '+', nil, false
    repeat
      local page = redis.call('XREVRANGE', K_ADMITTED, hi, '(' .. cursor, 'COUNT', 8)
      newest = newest or (page[1] and page[1][1])
      for _, entry in ipairs(page) do
        local f = entry[2]
        if f[1] == 'v' and f[2] and #f[2] % 16 == 0 then
          if bytes + #f[2] > ADMITTED_READ * 16 then
            full = true
            break
          end
          bytes = bytes + #f[2]
          taken[#taken + 1] = f[2]
        end
      end
      if #page > 0 then
        hi = '(' .. page[#page][1]
      end
    until full or #page < 8
    for i = #taken, 1, -1 do
      elsewhere[#elsewhere + 1] = taken[i]
    end
    if newest then
      cursor = newest
    else
      -- Nothing after the cursor. A stream lost and begun again (a flush, a Redis restarted
      -- without its data, whose clock may be behind the cursor) is heard from its start,
      -- not once its ids have passed the cursor.
      local last = last_admitted()
      if not last then
        cursor = '0-0'
      elseif stream_id_before(last, cursor) then
        return hear('0-0')
      end
    end
  end
  if #admitted > 0 then
    cursor = redis.call('XADD', K_ADMITTED, 'MAXLEN', ADMITTED_KEPT, '*', 'v', table.concat(admitted))
  end
  return elsewhere, cursor
end

local heard, elsewhere, cursor = pcall(hear, ARGV[4])
if not heard then
  elsewhere, cursor = {}, ''
end
return {admitted, abandoned, expired, joined, elsewhere, cursor}
