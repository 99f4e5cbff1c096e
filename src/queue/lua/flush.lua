-- flush: empties the line (sessions untouched). Returns {-1} unknown room, else {removed}.
if redis.call('EXISTS', K_CONF) == 0 then
  return {-1}
end
local n = redis.call('ZCARD', K_LINE)
redis.call('UNLINK', K_LINE, K_SEEN)
return {n}
