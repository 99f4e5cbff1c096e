-- queue: the admin's Queue view. ARGV[2] = 'head', ARGV[3] = limit: returns {-1} unknown
-- room, else {id1, position1, joined1, seen1, id2, ...} for the head of the line.
-- ARGV[2] = 'find', ARGV[3] = 'line' or 'draw', ARGV[4] = first rank, ARGV[5] = how many,
-- ARGV[6] = the 5 id bytes of a reference: scans that many of the line (or draw) from that
-- rank. Returns {1, id, position, joined, seen} for the match nearest the head, {0} when
-- there is more to scan, {2} when the scan is past the end.
-- joined is 0 when unknown (a draw entrant); seen is wall-clock ms.
local r = load_room()
if not r then
  return {-1}
end
open_doors(phase_of(r))

local function entry(out, id, key)
  local ticket = 0
  if key == K_LINE then
    ticket = tonumber(redis.call('ZSCORE', K_LINE, id)) or 0
  end
  local seen = tonumber(redis.call('ZSCORE', K_SEEN, id)) or r.live
  out[#out + 1] = id
  out[#out + 1] = position_of(id) or 0
  out[#out + 1] = joined_ms(ticket)
  out[#out + 1] = string.format('%d', seen + r.gap)
end

if ARGV[2] == 'head' then
  local out = {}
  local limit = tonumber(ARGV[3]) or 0
  if limit > 0 then
    for _, id in ipairs(redis.call('ZRANGE', K_LINE, 0, limit - 1)) do
      entry(out, id, K_LINE)
    end
  end
  return out
end

local key = K_LINE
if ARGV[3] == 'draw' then
  key = K_DRAW
end
local first, n, prefix = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local ids = redis.call('ZRANGE', key, first, first + n - 1)
for _, id in ipairs(ids) do
  if string.sub(id, 1, 5) == prefix then
    local out = {1}
    entry(out, id, key)
    return out
  end
end
if #ids < n then
  return {2}
end
return {0}
