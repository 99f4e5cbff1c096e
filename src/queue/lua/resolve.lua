-- resolve(id, client, join): ARGV[2] = visitor id, ARGV[3] = client (16 bytes), ARGV[4] =
-- '0' for the back of the line, '1' for a priority join (position 1), '2' for nobody new (a
-- newcomer is answered {7} and not joined), '3' for now or not at all (a newcomer the fast
-- path does not admit is answered {7} and not joined), ARGV[5] = the visitor's lottery score and
-- ARGV[6] their 32-byte draw hash (see KEYS[6] and KEYS[10]), used only to enter a draw.
-- KEYS[13] = this client's join-limit window. KEYS[14], when given, = a solved challenge's
-- key (ar:{room}:chal:<id>, same slot), spent for a newcomer before they join (a visitor
-- waiting or on the site spends nothing), with ARGV[7] = the challenge's expiry in unix ms
-- (store time decides it): SET NX PX with the visitor, so the same visitor again (a repeat)
-- goes on and anyone else is a replay. ARGV[8] = '1' when this call repeats one whose
-- connection broke (the replica's one repeat, see redis_client.rs): the first may have
-- run, so a repeat counts no refusal (neither in the window nor in total_refused).
-- Everything else is safe to repeat as it is: a visitor the first attempt admitted or
-- placed is found in `active` or in line and answered as such, never admitted or placed
-- twice; a repeated front join moves them to the front again, where they already are.
-- Returns {-1} unknown room, {1, newly} admitted (newly = 1 when this call admitted them),
-- {2, position, waiting, paused, joined, phase} waiting (joined = 1 when this call added
-- them; position 0 = none yet, in a lottery draw), {3, retry_after_ms, reason} refused
-- (reason 0 join limit, 1 places per client, 2 sessions per client, 3 session clients),
-- {4} not open yet, {5} closed, {6} full (the queue breaker), {7} a newcomer not joined
-- (ARGV[4] = '2', or '3' past the fast path), {8} the challenge spent by someone else or expired (nothing done).
local r = load_room()
if not r then
  return {-1}
end
local id, client, front, known_only = ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[4] == '2'
local now_only = ARGV[4] == '3'
local K_CHAL = KEYS[14]
local again = ARGV[8] == '1'
-- A refusal: counted in total_refused, except on a repeat.
local function refused(reply)
  if not again then
    redis.call('HINCRBY', K_STATE, 'total_refused', 1)
  end
  return reply
end
local ph = phase_of(r)
open_doors(ph)

local last = tonumber(redis.call('ZSCORE', K_ACTIVE, id))
if last ~= nil then
  -- The session's clients: the first carries its share, at most session_clients are let in.
  if tracks_sessions(r) then
    local c = redis.call('HGET', K_SESS, id)
    if not c then
      charge_session(id, client)
    else
      local known = false
      for i = 1, #c - 15, 16 do
        if string.sub(c, i, i + 15) == client then
          known = true
          break
        end
      end
      if not known and r.session_clients > 0 then
        if #c / 16 >= r.session_clients then
          -- This request only; it does not keep the session alive either.
          return {3, 0, 3}
        end
        redis.call('HSET', K_SESS, id, c .. client)
      end
    end
  end
  if r.live >= last + TOUCH_MS then
    redis.call('ZADD', K_ACTIVE, r.live, id)
  end
  return {1, 0}
end

if front and ph ~= CLOSED then
  if to_front(r, id) then
    return {2, position_of(id), waiting_count(), paused_flag(r), 0, ph}
  end
else
  local position, o = position_of(id)
  if position then
    if ph == CLOSED then
      return {5}
    end
    heard(r, id, o)
    return {2, position, waiting_count(), paused_flag(r), 0, ph}
  end
end

if ph == BEFORE_OPEN then
  return {4}
elseif ph == CLOSED then
  return {5}
end
if known_only then
  return {7}
end

-- The challenge this newcomer solved, spent before anything else counts them.
if K_CHAL then
  local ttl = tonumber(ARGV[7]) - NOW
  if ttl <= 0 then
    return {8}
  end
  if not redis.call('SET', K_CHAL, id, 'NX', 'PX', ttl) and redis.call('GET', K_CHAL) ~= id then
    return {8}
  end
end

-- The join limit: a fixed window per client, in store time; refusals count too. The key's
-- TTL only collects it once the window is over.
if r.jl_limit > 0 and r.jl_window > 0 then
  local w = redis.call('HMGET', K_JOINS, 's', 'n')
  local start, n = tonumber(w[1]), tonumber(w[2]) or 0
  if start == nil or NOW >= start + r.jl_window then
    start, n = NOW, 0
  end
  n = n + 1
  -- A repeat decides as a first call would but counts nothing in the window: the first
  -- attempt may have counted this request already (at worst one join goes uncounted).
  if not again then
    redis.call('HSET', K_JOINS, 's', string.format('%d', start), 'n', n)
    if n == 1 then
      redis.call('PEXPIRE', K_JOINS, r.jl_window + 1000)
    end
  end
  if n > r.jl_limit then
    return refused({3, math.max(start + r.jl_window - NOW, 1), 0})
  end
end

-- The client's shares (docs/visitors.md): not strikes, but counted as refusals.
if r.max_places > 0 and places_of(client, r.max_places) >= r.max_places then
  return refused({3, 0, 1})
end
if r.max_sessions > 0 and (tonumber(redis.call('HGET', K_SCOUNT, client)) or 0) >= r.max_sessions then
  return refused({3, 0, 2})
end

if ph == QUEUEING then
  refill(r)
  -- In passthrough, newcomers go in on the spot even with a line (drained by the next pass).
  if (waiting_count() == 0 or r.passthrough) and can_admit(r) then
    r.tokens = math.max(r.tokens - 1, 0)
    save_bucket(r)
    redis.call('ZADD', K_ACTIVE, r.live, id)
    if not r.passthrough then
      sessions_started({id}, r.live)
    end
    if tracks_sessions(r) then
      charge_session(id, client)
    end
    count_admitted(r, 1)
    return {1, 1}
  end
end
if now_only then
  return {7}
end

-- The breaker; the fast path above only runs with nobody waiting, so it is never affected.
if not front and r.max_waiting > 0 and waiting_count() >= r.max_waiting then
  return refused({6})
end

add_place(r, client, id)
if front then
  local st = ls()
  st.ford = st.ford + 1
  count_join()
  line_put(id, -st.ford, r.live, NOW, nil, true)
  return {2, 1, waiting_count(), paused_flag(r), 1, ph}
end
if ph == DRAW and r.lottery then
  -- Collected, never admitted on the spot.
  -- The record is the current drop's: one of an earlier drop in this room goes.
  local doors = string.format('%d', r.admits or 0)
  if redis.call('HGET', K_STATE, 'drawh_doors') ~= doors then
    redis.call('UNLINK', K_DRAWH)
    redis.call('HSET', K_STATE, 'drawh_doors', doors)
  end
  redis.call('HINCRBY', K_STATE, 'total_joined', 1)
  redis.call('ZADD', K_DRAW, ARGV[5], id)
  draw_changed()
  redis.call('ZADD', K_DSEEN, r.live, id)
  redis.call('HSET', K_DRAWH, id, ARGV[6])
  return {2, 0, waiting_count(), paused_flag(r), 1, ph}
end
count_join()
line_put(id, issue(1), r.live, NOW, nil, true)
-- Ordinals only grow, so a newcomer is last.
local waiting = waiting_count()
return {2, waiting, waiting, paused_flag(r), 1, ph}
