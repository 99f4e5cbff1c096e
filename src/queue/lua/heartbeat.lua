-- heartbeat(ids...): ARGV[2..] = visitor ids. Never joins anyone.
-- Returns {-1} unknown room, else {waiting, paused, phase, state1, position1, state2,
-- position2, ...} with state 0 unknown, 1 admitted, 2 waiting (position 0 = none yet).
local r = load_room()
if not r then
  return {-1}
end
local ph = phase_of(r)
open_doors(ph)
local out = {waiting_count(), paused_flag(r), ph}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', K_ACTIVE, id) then
    out[#out + 1] = 1
    out[#out + 1] = 0
  else
    local position, o = position_of(id)
    if position then
      heard(r, id, o)
      out[#out + 1] = 2
      out[#out + 1] = position
    else
      out[#out + 1] = 0
      out[#out + 1] = 0
    end
  end
end
return out
