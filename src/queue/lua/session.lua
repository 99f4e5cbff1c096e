-- session: ARGV[2] = 'end', ARGV[3] = visitor id: ends that session now. Returns {-1}
-- unknown room, {1} ended, {0} there was none.
-- ARGV[2] = 'touch', ARGV[3..] = visitor ids: records activity (at most one write a
-- second each). Returns {-1} unknown room, else {on1, on2, ...}, 1 while on the site.
local r = load_room()
if not r then
  return {-1}
end
if ARGV[2] == 'end' then
  if redis.call('ZREM', K_ACTIVE, ARGV[3]) == 0 then
    return {0}
  end
  drop_sessions({ARGV[3]}, r.live)
  return {1}
end
local out = {}
for i = 3, #ARGV do
  local last = tonumber(redis.call('ZSCORE', K_ACTIVE, ARGV[i]))
  if last == nil then
    out[#out + 1] = 0
  else
    if r.live >= last + TOUCH_MS then
      redis.call('ZADD', K_ACTIVE, r.live, ARGV[i])
    end
    out[#out + 1] = 1
  end
end
return out
