-- update_settings: ARGV[2..7] = rate, max_active, session_ttl_ms, abandon_after_ms, paused,
-- mode, each '' to leave alone (already validated by the caller); ARGV[8], ARGV[9] = the
-- precondition: the name of a change ('' for none) and the JSON it must hold now ('' for
-- absent), else nothing is written (unless it holds what this call writes there: the call
-- landed already, and is sent again); then fours of the
-- operator's changes of other settings: name, its value as JSON ('' gives the file's back),
-- and, for a setting the store enforces, its policy field and the value now in force
-- (else '' ''); a setting of several fields (the schedule) is followed by fours with an empty
-- name, one per further field. Each policy field in force because of a change is also kept
-- as `pol:<field>` (gone when the change is), so an open of the room re-applies the changes
-- without parsing them (see open_room.lua). The bucket is credited at the old rate up to now, so a rate change applies
-- from this moment on.
-- Returns {-1} unknown room, {-2} the precondition does not hold, else {1}.
local r = load_room()
if not r then
  return {-1}
end
if ARGV[8] ~= '' then
  local held = redis.call('HGET', K_CONF, 'live:' .. ARGV[8]) or ''
  if held ~= ARGV[9] then
    local j = 10
    while ARGV[j] do
      if ARGV[j] == ARGV[8] and ARGV[j + 1] == held then
        return {1}
      end
      j = j + 4
    end
    return {-2}
  end
end
refill(r)
local fields = {'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused', 'mode'}
for i, f in ipairs(fields) do
  local v = ARGV[i + 1]
  if v ~= '' then
    redis.call('HSET', K_CONF, f, v)
  end
end
local i = 10
local given = false
while ARGV[i] do
  local name, json, field, value = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if name ~= '' then
    given = json ~= ''
    if given then
      redis.call('HSET', K_CONF, 'live:' .. name, json)
    else
      redis.call('HDEL', K_CONF, 'live:' .. name)
    end
  end
  if field ~= '' then
    redis.call('HSET', K_CONF, field, value)
    if given then
      redis.call('HSET', K_CONF, 'pol:' .. field, value)
    else
      redis.call('HDEL', K_CONF, 'pol:' .. field)
    end
  end
  i = i + 4
end
if ARGV[2] ~= '' then
  r.rate = tonumber(ARGV[2])
end
r.tokens = math.min(r.tokens, burst(r))
if r.paused and ARGV[6] == '0' then
  -- A resume starts with an empty bucket; paused time earns nothing.
  r.tokens = 0
end
save_bucket(r)
return {1}
