-- open_room: ARGV[2..5] = the file's rate, max_active, session_ttl_ms, abandon_after_ms;
-- ARGV[6] = 1 to reseed; ARGV[7..12] = the policy: jl_limit, jl_window_ms, opens_ms,
-- admits_ms, closes_ms ('' for none), lottery (1/0); ARGV[13] = a fresh random salt, kept
-- only if the room has none (the salt is never replaced, not even by a reseed);
-- ARGV[14..17] = max_places, max_sessions, session_clients, max_waiting (0: off);
-- ARGV[18] = the file's mode (a runtime setting like the rate).
-- Returns {0} fresh, {1} unchanged, {2} kept live, {3} reseeded.
--
-- The policy is config, not a runtime setting: it is written on every open, with the
-- operator's live changes of it applied over the file's: the `pol:<field>` values
-- update_settings kept beside each change (the store's own form: a schedule's times are
-- RFC 3339 in the change, which a script cannot parse), and, for a room last changed
-- before those were kept, the changes (`live:<setting>` fields, JSON) of the settings
-- whose JSON is the store's form.
--
-- Opening a room is also how a replica starts: the time since the last pass (nobody ran
-- one, so no replica was up) is forgiven as downtime, as the embedded store does when it
-- restores a snapshot.
local LIVE_POLICY = {lottery = 'lottery', max_places_per_client = 'max_places',
  max_sessions_per_client = 'max_sessions', session_clients = 'session_clients', max_waiting = 'max_waiting'}
local function write_policy()
  redis.call('HSET', K_CONF, 'jl_limit', ARGV[7], 'jl_window_ms', ARGV[8], 'opens_ms', ARGV[9],
    'admits_ms', ARGV[10], 'closes_ms', ARGV[11], 'lottery', ARGV[12],
    'max_places', ARGV[14], 'max_sessions', ARGV[15], 'session_clients', ARGV[16], 'max_waiting', ARGV[17])
  for name, field in pairs(LIVE_POLICY) do
    local v = redis.call('HGET', K_CONF, 'live:' .. name)
    if v then
      if name == 'lottery' then
        v = (v == 'true') and '1' or '0'
      end
      if tonumber(v) then
        redis.call('HSET', K_CONF, field, v)
      end
    end
  end
  local kept = redis.call('HGETALL', K_CONF)
  for j = 1, #kept, 2 do
    if string.sub(kept[j], 1, 4) == 'pol:' then
      redis.call('HSET', K_CONF, string.sub(kept[j], 5), kept[j + 1])
    end
  end
  redis.call('HSETNX', K_STATE, 'salt', ARGV[13])
end
local function live_fields()
  local out = {}
  for _, f in ipairs(redis.call('HKEYS', K_CONF)) do
    if string.sub(f, 1, 5) == 'live:' or string.sub(f, 1, 4) == 'pol:' then
      out[#out + 1] = f
    end
  end
  return out
end

if redis.call('EXISTS', K_CONF) == 0 then
  redis.call('HSET', K_CONF, 'rate', ARGV[2], 'max_active', ARGV[3], 'session_ttl_ms', ARGV[4],
    'abandon_after_ms', ARGV[5], 'paused', '0', 'mode', ARGV[18])
  redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', math.max(tonumber(ARGV[2]), 1)),
    'refilled_ms', string.format('%d', NOW), 'pass_ms', string.format('%d', NOW))
  write_policy()
  return {0}
end
-- The upgrade from the first layout, where the line was one ZSET `line` (id -> ticket) and
-- every waiter's heartbeat another, `seen` (~255 B a waiter against the 120 B goal): the
-- line moves into chunks and the index in its order, with its heartbeats and join times,
-- here in one step (about 5 us of Redis time a waiter, so some seconds for a million);
-- draw entrants' heartbeats move to `dseen`. Replicas of both versions must not run on
-- one room at once: stop the old ones, then start the new.
local function upgrade(r)
  local old_line, old_seen = PREFIX .. 'line', PREFIX .. 'seen'
  if redis.call('EXISTS', old_line) == 0 and redis.call('EXISTS', old_seen) == 0 then
    return
  end
  -- A draw's reservation was in tickets; it becomes ordinals at the same place.
  local tnxt, tlast = draw_tickets()
  local pending = tlast - tnxt
  local dnxt = nil
  local function reserve()
    dnxt = issue(pending) - 1
  end
  local STEP = 10000
  local i = 0
  while true do
    local batch = redis.call('ZRANGE', old_line, i, i + STEP - 1, 'WITHSCORES')
    if #batch == 0 then
      break
    end
    for j = 1, #batch, 2 do
      local id, ticket = batch[j], tonumber(batch[j + 1])
      if pending > 0 and not dnxt and ticket > tlast then
        reserve()
      end
      local seen = tonumber(redis.call('ZSCORE', old_seen, id)) or r.live
      line_put(id, issue(1), seen, joined_ms(ticket))
    end
    i = i + STEP
  end
  if pending > 0 then
    if not dnxt then
      reserve()
    end
    set_draw(dnxt, dnxt + pending)
  else
    set_draw(0, 0)
  end
  i = 0
  while true do
    local batch = redis.call('ZRANGE', K_DRAW, i, i + STEP - 1)
    if #batch == 0 then
      break
    end
    for _, id in ipairs(batch) do
      redis.call('ZADD', K_DSEEN, tonumber(redis.call('ZSCORE', old_seen, id)) or r.live, id)
    end
    i = i + STEP
  end
  save_ls()
  redis.call('UNLINK', old_line, old_seen)
end

write_policy()
local r = load_room()
upgrade(r)
local last_pass = tonumber(redis.call('HGET', K_STATE, 'pass_ms'))
if last_pass and NOW > last_pass then
  r.gap = r.gap + (NOW - last_pass)
  redis.call('HSET', K_STATE, 'gap_ms', string.format('%d', r.gap), 'pass_ms', string.format('%d', NOW))
end
local differs = r.rate ~= tonumber(ARGV[2]) or r.max_active ~= tonumber(ARGV[3])
  or r.ttl ~= tonumber(ARGV[4]) or r.abandon ~= tonumber(ARGV[5])
  or (redis.call('HGET', K_CONF, 'mode') or 'queue') ~= ARGV[18]
local live = live_fields()
differs = differs or #live > 0
if not differs then
  return {1}
end
if ARGV[6] ~= '1' then
  return {2}
end
-- `paused` is an incident control, not a file value: a reseed keeps it. The operator's
-- other changes go: the file's settings hold again.
if #live > 0 then
  redis.call('HDEL', K_CONF, unpack(live))
  write_policy()
end
redis.call('HSET', K_CONF, 'rate', ARGV[2], 'max_active', ARGV[3], 'session_ttl_ms', ARGV[4],
  'abandon_after_ms', ARGV[5], 'mode', ARGV[18])
r.rate = tonumber(ARGV[2])
r.tokens = math.min(r.tokens, burst(r))
redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', r.tokens))
return {3}
