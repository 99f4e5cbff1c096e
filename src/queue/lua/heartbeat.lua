-- heartbeat(ids...): ARGV[2..] = visitor ids. Never joins anyone.
-- Returns {-1} unknown room, else {waiting, paused, state1, position1, state2, position2, ...}
-- with state 0 unknown, 1 admitted, 2 waiting.
local r = load_room()
if not r then
  return {-1}
end
local out = {redis.call('ZCARD', K_LINE), paused_flag(r)}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', K_ACTIVE, id) then
    out[#out + 1] = 1
    out[#out + 1] = 0
  else
    local rank = redis.call('ZRANK', K_LINE, id)
    if rank then
      heard(r, id)
      out[#out + 1] = 2
      out[#out + 1] = rank + 1
    else
      out[#out + 1] = 0
      out[#out + 1] = 0
    end
  end
end
return out
