-- open_room: ARGV[2..5] = the file's rate, max_active, session_ttl_ms, abandon_after_ms;
-- ARGV[6] = 1 to reseed. Returns {0} fresh, {1} unchanged, {2} kept live, {3} reseeded.
--
-- Opening a room is also how a replica starts: the time since the last pass (nobody ran
-- one, so no replica was up) is forgiven as downtime, as the embedded store does when it
-- restores a snapshot.
if redis.call('EXISTS', K_CONF) == 0 then
  redis.call('HSET', K_CONF, 'rate', ARGV[2], 'max_active', ARGV[3], 'session_ttl_ms', ARGV[4],
    'abandon_after_ms', ARGV[5], 'paused', '0')
  redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', math.max(tonumber(ARGV[2]), 1)),
    'refilled_ms', string.format('%d', NOW), 'pass_ms', string.format('%d', NOW))
  return {0}
end
local r = load_room()
local last_pass = tonumber(redis.call('HGET', K_STATE, 'pass_ms'))
if last_pass and NOW > last_pass then
  r.gap = r.gap + (NOW - last_pass)
  redis.call('HSET', K_STATE, 'gap_ms', string.format('%d', r.gap), 'pass_ms', string.format('%d', NOW))
end
local differs = r.rate ~= tonumber(ARGV[2]) or r.max_active ~= tonumber(ARGV[3])
  or r.ttl ~= tonumber(ARGV[4]) or r.abandon ~= tonumber(ARGV[5])
if not differs then
  return {1}
end
if ARGV[6] ~= '1' then
  return {2}
end
-- `paused` is an incident control, not a file value: a reseed keeps it.
redis.call('HSET', K_CONF, 'rate', ARGV[2], 'max_active', ARGV[3], 'session_ttl_ms', ARGV[4],
  'abandon_after_ms', ARGV[5])
r.rate = tonumber(ARGV[2])
r.tokens = math.min(r.tokens, burst(r))
redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', r.tokens))
return {3}
