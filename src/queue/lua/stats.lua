-- stats: returns {-1} unknown room, else {waiting, active, joined, admitted, expired,
-- abandoned, refused, rate, max_active, session_ttl_ms, abandon_after_ms, paused, mode, passed_through, phase,
-- the latest ended sessions' total length in ms and their count} as strings (a room without a mode is in the queue mode), then the operator's changes of
-- other settings as pairs: name, value as JSON.
local r = load_room()
if not r then
  return {-1}
end
local c = redis.call('HMGET', K_STATE, 'total_joined', 'total_admitted', 'total_expired', 'total_abandoned', 'total_refused',
  'total_passed_through')
local c2 = redis.call('HMGET', K_CONF, 'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused', 'mode')
local out = {
  tostring(waiting_count()),
  tostring(redis.call('ZCARD', K_ACTIVE)),
  c[1] or '0', c[2] or '0', c[3] or '0', c[4] or '0', c[5] or '0',
  c2[1], c2[2], c2[3], c2[4], c2[5] or '0', c2[6] or 'queue', c[6] or '0',
  tostring(phase_of(r)),
}
-- The latest sessions' lengths: their sum and count.
local lengths = redis.call('LRANGE', PREFIX .. 'lengths', 0, -1)
local total = 0
for _, l in ipairs(lengths) do
  total = total + tonumber(l)
end
out[#out + 1] = string.format('%d', total)
out[#out + 1] = tostring(#lengths)
local all = redis.call('HGETALL', K_CONF)
for j = 1, #all, 2 do
  if string.sub(all[j], 1, 5) == 'live:' then
    out[#out + 1] = string.sub(all[j], 6)
    out[#out + 1] = all[j + 1]
  end
end
return out
