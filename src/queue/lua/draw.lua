-- draw: the lottery record (docs/fairness.md), opening the doors if their time has come.
-- Returns {-1} unknown room, else {phase, salt, entrants}: before the doors the entrants
-- now in the draw, after them the entrants drawn (the fields of KEYS[10], which the
-- replica reads with HSCAN in bounded steps).
local r = load_room()
if not r then
  return {-1}
end
local ph = phase_of(r)
open_doors(ph)
local salt = redis.call('HGET', K_STATE, 'salt') or ''
local entrants
if before_doors(ph) then
  entrants = redis.call('ZCARD', K_DRAW)
else
  entrants = redis.call('HLEN', K_DRAWH)
end
return {ph, salt, entrants}
