-- resolve(id): ARGV[2] = visitor id.
-- Returns {-1} unknown room, {1, newly} admitted (newly = 1 when this call admitted them),
-- {2, position, waiting, paused, joined} waiting (joined = 1 when this call added them).
local r = load_room()
if not r then
  return {-1}
end
local id = ARGV[2]

local last = tonumber(redis.call('ZSCORE', K_ACTIVE, id))
if last ~= nil then
  if r.live >= last + TOUCH_MS then
    redis.call('ZADD', K_ACTIVE, r.live, id)
  end
  return {1, 0}
end

local rank = redis.call('ZRANK', K_LINE, id)
if rank then
  heard(r, id)
  return {2, rank + 1, redis.call('ZCARD', K_LINE), paused_flag(r), 0}
end

refill(r)
local waiting = redis.call('ZCARD', K_LINE)
if waiting == 0 and can_admit(r) then
  r.tokens = r.tokens - 1
  save_bucket(r)
  redis.call('ZADD', K_ACTIVE, r.live, id)
  redis.call('HINCRBY', K_STATE, 'total_admitted', 1)
  return {1, 1}
end

local ticket = redis.call('HINCRBY', K_STATE, 'seq', 1)
redis.call('ZADD', K_LINE, ticket, id)
redis.call('ZADD', K_SEEN, r.live, id)
redis.call('HINCRBY', K_STATE, 'total_joined', 1)
-- Tickets only grow, so a newcomer is last.
return {2, waiting + 1, waiting + 1, paused_flag(r), 1}
