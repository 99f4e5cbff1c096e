-- flush: empties the line and any draw (sessions untouched). Returns {-1} unknown room,
-- else {removed}.
if redis.call('EXISTS', K_CONF) == 0 then
  return {-1}
end
local n = redis.call('ZCARD', K_LINE) + redis.call('ZCARD', K_DRAW)
redis.call('UNLINK', K_LINE, K_SEEN, K_DRAW, K_PLACES)
local nxt, last = draw_tickets()
redis.call('HSET', K_STATE, 'draw_next', string.format('%d', last))
return {n}
