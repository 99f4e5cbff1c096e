-- flush: empties the line and any draw (sessions untouched). Returns {-1} unknown room,
-- else {removed}.
-- A draw flushed before the doors leaves no record; after them the record stays.
local r = load_room()
if not r then
  return {-1}
end
local ph = phase_of(r)
open_doors(ph)
local n = waiting_count()
-- Every chunk is listed in K_CHUNKS; the index's buckets are 0 .. 2^l + s - 1.
local st = ls()
local keys = {}
local function unlink(k)
  keys[#keys + 1] = k
  if #keys >= 1000 then
    redis.call('UNLINK', unpack(keys))
    keys = {}
  end
end
for _, cs in ipairs(redis.call('ZRANGE', K_CHUNKS, 0, -1)) do
  unlink(chunk_key(tonumber(cs)))
end
for b = 0, 2 ^ st.l + st.s - 1 do
  unlink(PREFIX .. 'i:' .. fmt(b))
end
unlink(K_CHUNKS)
unlink(K_CSEEN)
unlink(K_FEN)
unlink(K_DSEEN)
unlink(K_DRAW)
unlink(K_PLACES)
redis.call('UNLINK', unpack(keys))
draw_changed()
if before_doors(ph) then
  redis.call('UNLINK', K_DRAWH)
end
st.n, st.ord, st.ford, st.l, st.s = 0, 0, 0, 0, 0
save_ls()
set_draw(0, 0)
return {n}
