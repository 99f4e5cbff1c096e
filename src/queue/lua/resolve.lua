-- resolve(id): ARGV[2] = visitor id. KEYS[7] = this client's join-limit window.
-- Returns {-1} unknown room, {1, newly} admitted (newly = 1 when this call admitted them),
-- {2, position, waiting, paused, joined, phase} waiting (joined = 1 when this call added
-- them; position 0 = none yet, in a lottery draw), {3, retry_after_ms} refused by the join
-- limit, {4} not open yet, {5} closed.
local r = load_room()
if not r then
  return {-1}
end
local id = ARGV[2]
local ph = phase_of(r)
open_doors(ph)

local last = tonumber(redis.call('ZSCORE', K_ACTIVE, id))
if last ~= nil then
  if r.live >= last + TOUCH_MS then
    redis.call('ZADD', K_ACTIVE, r.live, id)
  end
  return {1, 0}
end

local position = position_of(id)
if position then
  if ph == CLOSED then
    return {5}
  end
  heard(r, id)
  return {2, position, waiting_count(), paused_flag(r), 0, ph}
end

if ph == BEFORE_OPEN then
  return {4}
elseif ph == CLOSED then
  return {5}
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
  redis.call('HSET', K_JOINS, 's', string.format('%d', start), 'n', n)
  if n == 1 then
    redis.call('PEXPIRE', K_JOINS, r.jl_window + 1000)
  end
  if n > r.jl_limit then
    redis.call('HINCRBY', K_STATE, 'total_refused', 1)
    return {3, math.max(start + r.jl_window - NOW, 1)}
  end
end

if ph == DRAW then
  -- Collected, never admitted on the spot.
  if r.lottery then
    redis.call('ZADD', K_DRAW, lottery_score(id), id)
    redis.call('ZADD', K_SEEN, r.live, id)
    redis.call('HINCRBY', K_STATE, 'total_joined', 1)
    return {2, 0, waiting_count(), paused_flag(r), 1, ph}
  end
else
  refill(r)
  if waiting_count() == 0 and can_admit(r) then
    r.tokens = r.tokens - 1
    save_bucket(r)
    redis.call('ZADD', K_ACTIVE, r.live, id)
    redis.call('HINCRBY', K_STATE, 'total_admitted', 1)
    return {1, 1}
  end
end

local ticket = redis.call('HINCRBY', K_STATE, 'seq', 1)
redis.call('ZADD', K_LINE, ticket, id)
redis.call('ZADD', K_SEEN, r.live, id)
redis.call('HINCRBY', K_STATE, 'total_joined', 1)
-- Tickets only grow, so a newcomer is last.
local waiting = waiting_count()
return {2, waiting, waiting, paused_flag(r), 1, ph}
