-- grant: KEYS[13] = ar:{room}:grant:<nonce> (same slot as the room), ARGV[2] = visitor id,
-- ARGV[3] = the grant's expiry in unix ms. Spends a priority grant's nonce once (docs/security.md):
-- the key holds the visitor who spent it and expires with the grant, so Redis forgets it
-- on its own. Store time decides expiry, like everything else.
-- Returns {-1} unknown room, {1} first use, {2} spent before by this visitor, {0} spent by
-- someone else or already expired.
local K_GRANT = KEYS[13]
if redis.call('EXISTS', K_CONF) == 0 then
  return {-1}
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
