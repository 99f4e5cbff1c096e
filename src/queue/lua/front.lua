-- front(id): ARGV[2] = visitor id. Moves a waiting visitor to position 1 (the admin's move
-- to the front; the id was found by reference with queue.lua).
-- Returns {-1} unknown room, {0} not waiting, else {1, position, waiting, paused, phase}.
local r = load_room()
if not r then
  return {-1}
end
local ph = phase_of(r)
open_doors(ph)
if not to_front(r, ARGV[2]) then
  return {0}
end
return {1, position_of(ARGV[2]), waiting_count(), paused_flag(r), ph}
