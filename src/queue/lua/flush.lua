-- flush: empties the line and any draw (sessions untouched). Returns {-1} unknown room,
-- else {removed}.
-- A draw flushed before the doors leaves no record; after them the record stays.
local r = load_room()
if not r then
  return {-1}
end
local ph = phase_of(r)
open_doors(ph)
local n = redis.call('ZCARD', K_LINE) + redis.call('ZCARD', K_DRAW)
redis.call('UNLINK', K_LINE, K_SEEN, K_DRAW, K_PLACES)
if before_doors(ph) then
  redis.call('UNLINK', K_DRAWH)
end
local nxt, last = draw_tickets()
redis.call('HSET', K_STATE, 'draw_next', string.format('%d', last))
return {n}
