-- update_settings: ARGV[2..7] = rate, max_active, session_ttl_ms, abandon_after_ms, paused,
-- mode, each '' to leave alone (already validated by the caller). The bucket is credited at the
-- old rate up to now, so a rate change applies from this moment on.
-- Returns {-1} unknown room, else {1}.
local r = load_room()
if not r then
  return {-1}
end
refill(r)
local fields = {'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused', 'mode'}
for i, f in ipairs(fields) do
  local v = ARGV[i + 1]
  if v ~= '' then
    redis.call('HSET', K_CONF, f, v)
  end
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
