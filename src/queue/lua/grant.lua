-- grant: KEYS[13] = ar:{room}:grant:<nonce> (same slot as the room), ARGV[2] = visitor id,
-- ARGV[3] = the grant's expiry in unix ms, ARGV[4] = 'spend' or 'release'. Spends a
-- priority grant's nonce once (docs/security.md): the key holds the visitor who spent it and
-- expires with the grant, so Redis forgets it on its own. Store time decides expiry, like
-- everything else. Release gives back a nonce this visitor spent that gave them no
-- priority: the key goes if it holds them.
-- Returns {-1} unknown room, {1} first use, {2} spent before by this visitor, {0} spent by
-- someone else or already expired, {3} released (or nothing of this visitor's to release).
-- Both are safe to repeat.
local K_GRANT = KEYS[13]
if redis.call('EXISTS', K_CONF) == 0 then
  return {-1}
end
if ARGV[4] == 'release' then
  if redis.call('GET', K_GRANT) == ARGV[2] then
    redis.call('DEL', K_GRANT)
  end
  return {3}
end
local ttl = tonumber(ARGV[3]) - NOW
if ttl <= 0 then
  return {0}
end
if redis.call('SET', K_GRANT, ARGV[2], 'NX', 'PX', ttl) then
  return {1}
end
if redis.call('GET', K_GRANT) == ARGV[2] then
  return {2}
end
return {0}
