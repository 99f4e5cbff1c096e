-- queue: the admin's Queue view. ARGV[2] = 'head', ARGV[3] = limit: returns {-1} unknown
-- room, else {id1, position1, joined1, seen1, id2, ...} for the head of the line.
-- ARGV[2] = 'find', ARGV[3] = 'line' or 'draw', ARGV[4] = a cursor (0 to start), ARGV[5] =
-- about how many to read, ARGV[6] = the 5 id bytes of a reference: scans that many of the
-- line (from the cursor-th chunk) or of the draw (from that rank). Returns {1, id,
-- position, joined, seen} for the match nearest the head, {0, next cursor} when there is
-- more to scan, {2} when the scan is past the end.
-- joined is 0 when unknown (a draw entrant); seen is wall-clock ms.
local r = load_room()
if not r then
  return {-1}
end
open_doors(phase_of(r))

-- score: the chunk score of one in line (nil for a draw entrant).
local function entry(out, id, score)
  local position, o = position_of(id)
  local joined, seen = 0, r.live
  if o then
    local _
    _, joined = line_get(id)
    seen = score % SLOT
  else
    seen = tonumber(redis.call('ZSCORE', K_DSEEN, id)) or r.live
  end
  out[#out + 1] = id
  out[#out + 1] = position or 0
  out[#out + 1] = fmt(joined)
  out[#out + 1] = fmt(seen + r.gap)
end

-- The line's chunks from the `first`-th, in order, until about `n` members are read:
-- calls each(id, score) until it returns true. Returns the next cursor, or nil at the end.
local function walk(first, n, each)
  local read = 0
  local cursor = first
  while read < n do
    local cs = redis.call('ZRANGE', K_CHUNKS, cursor, cursor)[1]
    if not cs then
      return nil
    end
    cursor = cursor + 1
    local all = redis.call('ZRANGE', chunk_key(tonumber(cs)), 0, -1, 'WITHSCORES')
    for i = 1, #all, 2 do
      if each(all[i], tonumber(all[i + 1])) then
        return cursor
      end
    end
    read = read + #all / 2
  end
  return cursor
end

if ARGV[2] == 'head' then
  local out = {}
  local limit = tonumber(ARGV[3]) or 0
  local got = 0
  if limit > 0 then
    walk(0, limit, function(id, score)
      entry(out, id, score)
      got = got + 1
      return got >= limit
    end)
  end
  return out
end

local first, n, prefix = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
if ARGV[3] == 'draw' then
  local ids = redis.call('ZRANGE', K_DRAW, first, first + n - 1)
  for _, id in ipairs(ids) do
    if string.sub(id, 1, 5) == prefix then
      local out = {1}
      entry(out, id, nil)
      return out
    end
  end
  if #ids < n then
    return {2}
  end
  return {0, first + n}
end
local found = nil
local next_cursor = walk(first, n, function(id, score)
  if string.sub(id, 1, 5) == prefix then
    found = {1}
    entry(found, id, score)
    return true
  end
  return false
end)
if found then
  return found
end
if not next_cursor then
  return {2}
end
return {0, next_cursor}
