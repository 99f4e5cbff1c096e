-- Shared by every anteroom script. One script is one atomic step on one room; every key
-- carries the room's hash tag, so a room lives in one Cluster slot.
--
-- How they run (see redis.rs): as one Redis Functions library, this file and every script
-- as a function of it, loaded once and called with FCALL; or, where Functions are not
-- available, each script prefixed with this file as its own EVAL script. Either way a call
-- first runs begin(KEYS, ARGV) (at the end of this file), which sets every per-call value
-- below. Nothing else here may depend on the call: in the library these definitions run
-- once, at load, which is what makes FCALL cheaper (no closures made per call: about 8 us
-- of Redis time a join).
--
-- KEYS[1] conf    HASH  rate, max_active, session_ttl_ms, abandon_after_ms, paused, mode (runtime
--                       settings); jl_limit, jl_window_ms, opens_ms, admits_ms, closes_ms,
--                       lottery, max_places, max_sessions, session_clients, max_waiting
--                       (the room's policy, rewritten by every open_room)
-- KEYS[2] state   HASH  tokens, refilled_ms (the bucket), pass_ms (last pass), gap_ms
--                       (store/fleet downtime forgiven so far), counters, salt (lottery,
--                       set once), draw_next/draw_end (ordinals reserved for a draw at the
--                       doors: the next one issued is draw_next + 1) and doors_ms (when
--                       they opened); eff_rate (closed-loop admission's effective rate:
--                       the bucket refills at min(rate, eff_rate)), adaptive (the
--                       controller's state, JSON) and adaptive_claim_ms (the last claimed
--                       decision; docs/fairness.md). The line's bookkeeping: n (how many in it),
--                       ord (last ordinal issued at the back), ford (last one issued to the
--                       front lane), ix_l/ix_s (the index's level and split pointer),
--                       layout (2: this layout; see open_room.lua for the upgrade)
-- KEYS[3] chunks  ZSET  chunk number -> itself: the line's non-empty chunks, in order (see
--                       "The line" below)
-- KEYS[4] dseen   ZSET  draw entrant id -> last heartbeat (liveness time), for abandonment of
--                       lottery entrants before the doors have moved them into the line
-- KEYS[5] active  ZSET  visitor id -> last activity (liveness time), for reclaim
-- KEYS[6] draw    ZSET  visitor id -> lottery score, while a draw is collected and until
--                       the doors have moved it all into the line. The score is the first
--                       52 bits of the entrant's draw hash (SHA-256(salt .. id), computed
--                       by the replica, which knows the salt: Redis Lua has no SHA-256),
--                       exact in a double; equal scores are ordered by the whole hash
--                       when the doors move them (drain_draw), so the draw follows the
--                       published rule exactly.
-- KEYS[7] places  HASH  client (16 bytes) -> the ids (16 bytes each) that joined from it
--                       and may still wait, only while max_places is set. Purged against
--                       the line when it reaches the cap, so a client's count is exact
--                       whenever a refusal is decided on; passes sweep it in bounded steps
--                       so clients that never come back are forgotten. Costs 16 B per waiter plus one field per
--                       client, instead of a field per waiter (id -> client).
-- KEYS[8] sess    HASH  session id -> the distinct clients (16 bytes each) it was used
--                       from, the first charged with it; only while a session cap is set
-- KEYS[9] scount  HASH  client -> sessions charged to it; a field is removed at zero
-- KEYS[10] drawh  HASH  visitor id -> their 32-byte draw hash, for every entrant of a
--                       lottery draw. One who leaves the draw before the doors (abandoned,
--                       moved to the front, flushed) is removed; from the doors on it
--                       never changes: it is the draw's published record (docs/fairness.md)
-- KEYS[11] cseen  ZSET  chunk number -> a lower bound of the oldest heartbeat (liveness
--                       seconds) of its waiters: where abandonment looks
-- KEYS[12] fen    HASH  Fenwick tree over chunk numbers: how many wait in each chunk
-- KEYS[13] joins  HASH  (resolve only) this client's join-limit window: s start, n count
-- KEYS[13] origin HASH  (adaptive only) replica id -> '<store ms> <its report, JSON>'
-- KEYS[13] admitted STREAM (admit_pass only) one entry per admitting pass: v = its ids,
--                       packed; the last 64 kept
-- Named from the prefix, in every script that starts or ends a session:
--   ar:{room}:since    HASH  visitor id -> when their session began (liveness ms)
--   ar:{room}:lengths  LIST  the latest SESSIONS_KEPT ended sessions' lengths (ms), newest
--                            first
--
-- The line (the memory goal: <= 120 B of used_memory per waiting visitor; one big ZSET of
-- 16-byte ids alone costs ~130 B a member, in hashtable + skiplist encoding). Each waiter
-- has an ordinal: 1, 2, 3, ... at the back (`ord`), -1, -2, ... in the front lane (`ford`,
-- moved to the front and priority joins, the newest first). Ordinals are grouped in chunks
-- of CHUNK; every one is a small ZSET, so it stays in listpack encoding (~28 B a member):
--   ar:{room}:c:<chunk>  ZSET  id -> slot * 2^44 + last heartbeat (liveness ms, exact
--                              in a double up to 2^53): the slot orders the chunk, the
--                              rest is the heartbeat, rewritten in place (at most once a
--                              TOUCH_MS, as the heartbeat always was) without moving anyone
--   ar:{room}:i:<bucket> HASH  id -> 10 bytes: ordinal (i4) and join time ms (u6); a
--                              linear-hashing index (first 4 id bytes), split one bucket
--                              at a time as the line grows, so buckets stay small
--                              listpacks (~30 B a member)
-- Position is the Fenwick sum over the chunks before one's own (KEYS[12]; the chunk at the
-- back is added when the back moves past it, so a join writes no tree) plus the rank in
-- the chunk: O(log n). Admission pops the first chunk (KEYS[3]); abandonment reads the
-- chunks whose oldest heartbeat may be too old (KEYS[11]) and drops exactly those not heard
-- for abandon_after, exactly when they are due (heartbeats are kept in ms).
-- ARGV[1]         clock offset in ms: always 0 in production; tests move it, or freeze the
--                 clock with '@<unix ms>'
--
-- Time: the server's TIME, read once per script. The bucket refills in wall time. Reaping
-- runs in "liveness time" = wall time minus the downtime forgiven so far, so an outage of
-- the store or of every replica never abandons the line or reclaims the site.

-- Per call (set by begin()): the keys, and the room's other keys' prefix, 'ar:{room}:'.
local K_CONF, K_STATE, K_CHUNKS, K_DSEEN, K_ACTIVE, K_DRAW
local K_PLACES, K_SESS, K_SCOUNT, K_DRAWH
local K_CSEEN, K_FEN
local K_JOINS
local PREFIX

-- Phases (also the reply codes).
local QUEUEING, BEFORE_OPEN, DRAW, CLOSED = 0, 1, 2, 3

-- Heartbeats and activity closer together than this do not rewrite a score.
local TOUCH_MS = 1000

-- offset: ARGV[1].
local function clock_now(offset)
  -- Tests only: '@<ms>' is a frozen clock they advance themselves.
  if string.sub(offset, 1, 1) == '@' then
    return tonumber(string.sub(offset, 2))
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(offset)
end

-- Per call: the store's time.
local NOW

-- Per call: the line's bookkeeping (see ls()) and the draw's reserved ordinals (see
-- draw_tickets()), read with the room.
local LS, DT

-- Per call: total_joined as read with the room, and whether this call added one: a join
-- then writes it with the line's bookkeeping (save_ls), one HSET instead of an HINCRBY more.
local JOINED, JOINED_ADD

-- The line's bookkeeping from an HMGET of n, ord, ford, ix_l, ix_s starting at v[i].
local function line_state(v, i)
  return {
    n = tonumber(v[i]) or 0,
    ord = tonumber(v[i + 1]) or 0,
    ford = tonumber(v[i + 2]) or 0,
    l = tonumber(v[i + 3]) or 0,
    s = tonumber(v[i + 4]) or 0,
  }
end

-- The room, or nil when it was never opened.
local function load_room()
  local c = redis.call('HMGET', K_CONF, 'rate', 'max_active', 'session_ttl_ms', 'abandon_after_ms', 'paused',
    'jl_limit', 'jl_window_ms', 'opens_ms', 'admits_ms', 'closes_ms', 'lottery',
    'max_places', 'max_sessions', 'session_clients', 'max_waiting', 'mode')
  if not c[1] then
    return nil
  end
  local s = redis.call('HMGET', K_STATE, 'tokens', 'refilled_ms', 'gap_ms', 'eff_rate',
    'n', 'ord', 'ford', 'ix_l', 'ix_s', 'draw_next', 'draw_end', 'total_joined')
  LS = line_state(s, 5)
  DT = { tonumber(s[10]) or 0, tonumber(s[11]) or 0 }
  JOINED = tonumber(s[12]) or 0
  local r = {
    rate = tonumber(c[1]),
    max_active = tonumber(c[2]),
    ttl = tonumber(c[3]),
    abandon = tonumber(c[4]),
    paused = c[5] == '1',
    tokens = tonumber(s[1]),
    refilled = tonumber(s[2]) or NOW,
    gap = tonumber(s[3]) or 0,
    jl_limit = tonumber(c[6]) or 0,
    jl_window = tonumber(c[7]) or 0,
    opens = tonumber(c[8]),
    admits = tonumber(c[9]),
    closes = tonumber(c[10]),
    lottery = c[11] == '1',
    max_places = tonumber(c[12]) or 0,
    max_sessions = tonumber(c[13]) or 0,
    session_clients = tonumber(c[14]) or 0,
    max_waiting = tonumber(c[15]) or 0,
    -- The passthrough mode admits everybody, whatever the limits.
    passthrough = c[16] == 'passthrough',
    eff_rate = tonumber(s[4]),
  }
  if not (r.rate and r.max_active and r.ttl and r.abandon) then
    error('anteroom: bad data in ' .. K_CONF)
  end
  if r.tokens == nil then
    r.tokens = math.max(r.rate, 1)
  end
  r.live = NOW - r.gap
  return r
end

-- The rate the bucket refills at: the configured one, capped by closed-loop admission's
-- effective rate when it has one (r.rate stays the configured rate).
local function rate_of(r)
  if r.eff_rate and r.eff_rate > 0 and r.eff_rate < r.rate then
    return r.eff_rate
  end
  return r.rate
end

local function burst(r)
  return math.max(rate_of(r), 1)
end

-- Credits the bucket for the time since the last refill, capped at one second's worth.
local function refill(r)
  local elapsed = NOW - r.refilled
  if elapsed < 0 then
    elapsed = 0
  end
  r.tokens = math.min(r.tokens + elapsed * rate_of(r) / 1000.0, burst(r))
  if NOW > r.refilled then
    r.refilled = NOW
  end
end

local function save_bucket(r)
  redis.call('HSET', K_STATE, 'tokens', string.format('%.17g', r.tokens), 'refilled_ms', string.format('%d', r.refilled))
end

local function can_admit(r)
  return r.passthrough
    or ((not r.paused) and r.tokens >= 1 and redis.call('ZCARD', K_ACTIVE) < r.max_active)
end

-- Counts `n` admissions; those of the passthrough mode are counted apart too.
local function count_admitted(r, n)
  redis.call('HINCRBY', K_STATE, 'total_admitted', n)
  if r.passthrough then
    redis.call('HINCRBY', K_STATE, 'total_passed_through', n)
  end
end

local function paused_flag(r)
  if r.paused then
    return 1
  end
  return 0
end

-- Runs `cmd key <prefix...> <items...>` in chunks, keeping Lua's stack small.
local function chunked(cmd, key, items, pair_score)
  local CHUNK = 1000
  for i = 1, #items, CHUNK do
    local args = {}
    for j = i, math.min(i + CHUNK - 1, #items) do
      if pair_score then
        args[#args + 1] = pair_score
      end
      args[#args + 1] = items[j]
    end
    redis.call(cmd, key, unpack(args))
  end
end

-- Where the schedule stands now (store time). No schedule: always QUEUEING.
local function phase_of(r)
  if r.closes and NOW >= r.closes then
    return CLOSED
  end
  if r.opens and NOW < r.opens then
    return BEFORE_OPEN
  end
  if r.admits and NOW < r.admits then
    return DRAW
  end
  return QUEUEING
end

-- Tickets reserved for the draw: {next issued - 1, last reserved}. A reservation is active
-- while next < last.
local function draw_tickets()
  if not DT then
    local d = redis.call('HMGET', K_STATE, 'draw_next', 'draw_end')
    DT = { tonumber(d[1]) or 0, tonumber(d[2]) or 0 }
  end
  return DT[1], DT[2]
end

-- Sets the reserved ordinals (last: nil to leave it).
local function set_draw(nxt, last)
  if last then
    redis.call('HSET', K_STATE, 'draw_next', string.format('%d', nxt), 'draw_end', string.format('%d', last))
  else
    redis.call('HSET', K_STATE, 'draw_next', string.format('%d', nxt))
  end
  DT = nil
end

-- Whether byte string a sorts before b (plain bytes, whatever the server's locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Puts runs of equal scores in `popped` (ZPOPMIN's id, score, ...) in the order of the
-- entrants' whole draw hashes, the published rule (a 52-bit tie is rare: ~1e-4 in a
-- million-entrant draw). Returns the ids in order.
local function draw_order(popped)
  local ids = {}
  local i = 1
  while i <= #popped do
    local j = i
    while j + 2 <= #popped and popped[j + 3] == popped[i + 1] do
      j = j + 2
    end
    if j == i then
      ids[#ids + 1] = popped[i]
    else
      local group = {}
      for k = i, j, 2 do
        group[#group + 1] = { popped[k], redis.call('HGET', K_DRAWH, popped[k]) or '' }
      end
      table.sort(group, function(x, y) return bytes_less(x[2], y[2]) end)
      for _, g in ipairs(group) do
        ids[#ids + 1] = g[1]
      end
    end
    i = j + 2
  end
  return ids
end

-- Whether the doors are still to open (the draw's record may still change).
local function before_doors(ph)
  return ph == DRAW or ph == BEFORE_OPEN
end

---------------------------------------------------------------------------------------------
-- The line (see "The line" above).

local CHUNK = 128
local SLOT = 17592186044416 -- 2^44: a chunk score is slot * SLOT + heartbeat ms
-- The Fenwick tree's index of chunk c is c + FEN_OFF (front-lane chunks are negative), in
-- 1..FEN_N: 2^31 ordinals each side.
local FEN_OFF = 16777216 -- 2^24
local FEN_N = 67108864 -- 2^26
-- The index splits a bucket when the line holds more than this many per bucket on average
-- (linear hashing keeps the fullest near twice that, below a listpack's 128 entries).
local IX_LOAD = 40

local function fmt(n)
  return string.format('%d', n)
end

local function chunk_of(o)
  if o >= 0 then
    return math.floor(o / CHUNK)
  end
  return -1 - math.floor(-o / CHUNK)
end

-- The order within a chunk; the front lane counts down, so its newest come first.
local function slot_of(o)
  if o >= 0 then
    return o % CHUNK
  end
  return CHUNK - 1 - (-o % CHUNK)
end

local function chunk_key(c)
  return PREFIX .. 'c:' .. fmt(c)
end

local function ls()
  if not LS then
    LS = line_state(redis.call('HMGET', K_STATE, 'n', 'ord', 'ford', 'ix_l', 'ix_s'), 1)
  end
  return LS
end

local function save_ls()
  local st = ls()
  if JOINED_ADD then
    -- JOINED was read with the room (load_room), in this same atomic script.
    JOINED, JOINED_ADD = JOINED + 1, false
    redis.call('HSET', K_STATE, 'n', fmt(st.n), 'ord', fmt(st.ord), 'ford', fmt(st.ford),
      'ix_l', fmt(st.l), 'ix_s', fmt(st.s), 'total_joined', fmt(JOINED))
    return
  end
  redis.call('HSET', K_STATE, 'n', fmt(st.n), 'ord', fmt(st.ord), 'ford', fmt(st.ford),
    'ix_l', fmt(st.l), 'ix_s', fmt(st.s))
end

-- Counts one join, written by the next save_ls (a join always ends in one: line_put).
local function count_join()
  JOINED_ADD = true
end

local function lowbit(i)
  local b = 1
  while i % (b * 2) == 0 do
    b = b * 2
  end
  return b
end

-- Per call: prefix sums of the tree already read (emptied by every change to it).
local FEN_MEMO

-- Per call: how many are in the draw, read at most once between writes to it: a join asks
-- up to four times (the doors, the place, the fast path, the reply). Every write to K_DRAW
-- is followed by draw_changed().
local DRAW_N
local function draw_size()
  if not DRAW_N then
    DRAW_N = redis.call('ZCARD', K_DRAW)
  end
  return DRAW_N
end

local function draw_changed()
  DRAW_N = nil
end

local function fen_add(c, d)
  if d == 0 then
    return
  end
  FEN_MEMO = {}
  local i = c + FEN_OFF
  while i <= FEN_N do
    local f = fmt(i)
    if redis.call('HINCRBY', K_FEN, f, d) == 0 then
      redis.call('HDEL', K_FEN, f)
    end
    i = i + lowbit(i)
  end
end

-- How many wait in chunks up to c (every chunk below the back one is in the tree).
local function fen_prefix(c)
  local m = FEN_MEMO[c]
  if m then
    return m
  end
  local idx = {}
  local i = c + FEN_OFF
  while i > 0 do
    idx[#idx + 1] = fmt(i)
    i = i - lowbit(i)
  end
  local sum = 0
  if #idx > 0 then
    for _, v in ipairs(redis.call('HMGET', K_FEN, unpack(idx))) do
      if v then
        sum = sum + tonumber(v)
      end
    end
  end
  FEN_MEMO[c] = sum
  return sum
end

-- d waiters came into (or, negative, left) chunk c.
local function touch(c, d)
  if c < chunk_of(ls().ord) then
    fen_add(c, d)
  end
end

-- Issues k ordinals at the back; returns the first. When the back moves to a later chunk,
-- the one it leaves goes into the tree.
local function issue(k)
  local st = ls()
  local old = chunk_of(st.ord)
  st.ord = st.ord + k
  if chunk_of(st.ord) > old then
    fen_add(old, redis.call('ZCARD', chunk_key(old)))
  end
  return st.ord - k + 1
end

local function ix_hash(id)
  local h = struct.unpack('>I4', id .. '\0\0\0\0')
  return h
end

local function ix_bucket(h)
  local st = ls()
  local m = 2 ^ st.l
  local a = h % m
  if a < st.s then
    a = h % (2 * m)
  end
  return a
end

local function ix_key(id)
  return PREFIX .. 'i:' .. fmt(ix_bucket(ix_hash(id)))
end

-- Linear hashing: while the line outgrows the buckets, split the next one in turn.
local function ix_grow()
  local st = ls()
  while st.n > IX_LOAD * (2 ^ st.l + st.s) do
    local m = 2 ^ st.l
    local from, to = PREFIX .. 'i:' .. fmt(st.s), PREFIX .. 'i:' .. fmt(st.s + m)
    local all = redis.call('HGETALL', from)
    local move, gone = {}, {}
    for i = 1, #all, 2 do
      if ix_hash(all[i]) % (2 * m) ~= st.s then
        move[#move + 1] = all[i]
        move[#move + 1] = all[i + 1]
        gone[#gone + 1] = all[i]
      end
    end
    if #gone > 0 then
      redis.call('HSET', to, unpack(move))
      redis.call('HDEL', from, unpack(gone))
    end
    st.s = st.s + 1
    if st.s == m then
      st.l, st.s = st.l + 1, 0
    end
  end
end

-- Where id waits in line: its ordinal and join time (unix ms), or nil.
local function line_get(id)
  local v = redis.call('HGET', ix_key(id), id)
  if not v then
    return nil
  end
  local o, joined = struct.unpack('>i4I6', v)
  return o, joined
end

-- Puts id in line on ordinal o, last heard at `live`, joined at `joined` (unix ms). With
-- `batch` (many puts in one script), the tree's counts are gathered there (chunk -> count)
-- and the bookkeeping is not saved: the caller does both once (see put_done).
-- `fresh`: `live` is the liveness time now (a join, a move to the front), not an older
-- heartbeat carried over (a draw entrant, the upgrade).
local function line_put(id, o, live, joined, batch, fresh)
  local c = chunk_of(o)
  local cs = fmt(c)
  redis.call('ZADD', chunk_key(c), fmt(slot_of(o) * SLOT + live), id)
  -- A chunk already listed is not empty, and its heartbeat bound is at most its waiters'
  -- heartbeats, which are at most the liveness time now (it never goes back: downtime is
  -- forgiven by holding it, not rewinding it). So a fresh put there cannot lower the
  -- bound, and the write is skipped: it is most joins (127 in 128 land in a listed chunk).
  if redis.call('ZADD', K_CHUNKS, 'NX', cs, cs) == 1 or not fresh then
    redis.call('ZADD', K_CSEEN, 'LT', fmt(live), cs)
  end
  local st = ls()
  st.n = st.n + 1
  redis.call('HSET', ix_key(id), id, struct.pack('>i4I6', o, joined))
  ix_grow()
  if batch then
    batch[c] = (batch[c] or 0) + 1
  else
    touch(c, 1)
    save_ls()
  end
end

local function put_done(batch)
  for c, d in pairs(batch) do
    touch(c, d)
  end
  save_ls()
end

-- After waiters left: an empty line starts over from ordinal 0 and one index bucket (no
-- key is left behind: every chunk and bucket is empty), unless a draw's tickets are
-- reserved.
local function line_left(k)
  local st = ls()
  st.n = st.n - k
  if st.n <= 0 then
    local nxt, last = draw_tickets()
    st.n, st.l, st.s = 0, 0, 0
    if nxt >= last then
      st.ord, st.ford = 0, 0
      set_draw(0, 0)
      redis.call('UNLINK', K_FEN)
      FEN_MEMO = {}
    end
  end
  save_ls()
end

-- Removes ids (all in chunk c) from the index and the chunk; the chunk is already rid of
-- them when `popped`.
local function chunk_drop(c, ids, popped)
  local ck = chunk_key(c)
  if #ids == 0 then
    return
  end
  if not popped then
    chunked('ZREM', ck, ids)
  end
  for _, id in ipairs(ids) do
    redis.call('HDEL', ix_key(id), id)
  end
  touch(c, -#ids)
  if redis.call('EXISTS', ck) == 0 then
    local cs = fmt(c)
    redis.call('ZREM', K_CHUNKS, cs)
    redis.call('ZREM', K_CSEEN, cs)
  end
end

local function line_del(id, o)
  chunk_drop(chunk_of(o), {id}, false)
  line_left(1)
end

-- Pops up to k from the head of the line: their ids, and when each joined (unix ms, 0 when
-- unknown) in the same order.
local function line_pop(k)
  local out, joined = {}, {}
  while #out < k do
    local head = redis.call('ZRANGE', K_CHUNKS, 0, 0)[1]
    if not head then
      break
    end
    local c = tonumber(head)
    local popped = redis.call('ZPOPMIN', chunk_key(c), k - #out)
    local ids = {}
    for i = 1, #popped, 2 do
      ids[#ids + 1] = popped[i]
      out[#out + 1] = popped[i]
      local _, j = line_get(popped[i])
      joined[#joined + 1] = j or 0
    end
    chunk_drop(c, ids, true)
    if #ids == 0 then
      -- A chunk listed but empty (cannot happen; never loop on it).
      redis.call('ZREM', K_CHUNKS, head)
      redis.call('ZREM', K_CSEEN, head)
    end
  end
  if #out > 0 then
    line_left(#out)
  end
  return out, joined
end

-- How many in line (front lane included) have an ordinal up to o >= 0.
local function line_upto(o)
  local c = chunk_of(o)
  return fen_prefix(c - 1) + redis.call('ZCOUNT', chunk_key(c), '-inf', '(' .. fmt((slot_of(o) + 1) * SLOT))
end

-- 1-based place in line of id on ordinal o, not counting draw entrants not moved yet.
local function line_rank(id, o)
  local c = chunk_of(o)
  local rank = redis.call('ZRANK', chunk_key(c), id)
  if not rank then
    error('anteroom: bad data: ' .. PREFIX .. 'i: lists a visitor missing from chunk ' .. fmt(c))
  end
  return fen_prefix(c - 1) + rank + 1
end

-- Records a heartbeat of id on ordinal o (at most one write a TOUCH_MS).
local function line_heard(r, id, o)
  local ck = chunk_key(chunk_of(o))
  local score = tonumber(redis.call('ZSCORE', ck, id))
  if not score then
    return
  end
  local old = score % SLOT
  if r.live >= old + TOUCH_MS then
    redis.call('ZADD', ck, 'XX', fmt(score - old + r.live), id)
  end
end

-- Drops from the line those not heard since `cutoff` (liveness ms), at most `budget`,
-- reading only the chunks whose oldest heartbeat may be that old (and tightening the
-- bound of those that turn out to have none).
local function line_reap(cutoff, budget, out)
  local scans = math.max(1, math.floor(budget / CHUNK) * 2)
  local due = redis.call('ZRANGEBYSCORE', K_CSEEN, '-inf', fmt(cutoff), 'LIMIT', 0, scans)
  local n = 0
  for _, cs in ipairs(due) do
    if #out + CHUNK > budget then
      break
    end
    local c = tonumber(cs)
    local all = redis.call('ZRANGE', chunk_key(c), 0, -1, 'WITHSCORES')
    local gone, oldest = {}, nil
    for i = 1, #all, 2 do
      local s = tonumber(all[i + 1]) % SLOT
      if s <= cutoff then
        gone[#gone + 1] = all[i]
        out[#out + 1] = all[i]
      elseif not oldest or s < oldest then
        oldest = s
      end
    end
    chunk_drop(c, gone, false)
    n = n + #gone
    if oldest then
      redis.call('ZADD', K_CSEEN, 'XX', fmt(oldest), cs)
    elseif #all == 0 then
      redis.call('ZREM', K_CSEEN, cs)
      redis.call('ZREM', K_CHUNKS, cs)
    end
  end
  if n > 0 then
    line_left(n)
  end
end

-- Draw entrants' heartbeats.
local function draw_heard(r, id)
  local seen = tonumber(redis.call('ZSCORE', K_DSEEN, id))
  if seen == nil or r.live >= seen + TOUCH_MS then
    redis.call('ZADD', K_DSEEN, r.live, id)
  end
end

-- The doors: once the draw is over, reserve one ordinal per entrant right after the last
-- issued one (O(1)), so everyone who comes later gets a place behind the whole draw.
-- The entrants are then moved into the line in score order by admission passes, in bounded
-- chunks (see drain_draw): moving a million at once would block Redis for seconds. Until
-- they all are, positions count the entrants still in the draw (see position_of) and no
-- one behind the reservation is admitted, so the order is the same as moving all at once.
local function open_doors(ph)
  if ph ~= QUEUEING and ph ~= CLOSED then
    return
  end
  local pending = draw_size()
  if pending == 0 then
    return
  end
  local nxt, last = draw_tickets()
  if nxt < last then
    return
  end
  local first = issue(pending)
  save_ls()
  set_draw(first - 1, first - 1 + pending)
  redis.call('HSET', K_STATE, 'doors_ms', fmt(NOW))
end

-- Moves up to `budget` draw entrants, lowest draw hash first, into the line on their
-- reserved ordinals, with their last heartbeat.
local function drain_draw(budget)
  local nxt, last = draw_tickets()
  if nxt >= last then
    return
  end
  local popped = redis.call('ZPOPMIN', K_DRAW, math.min(budget, last - nxt))
  draw_changed()
  if #popped > 0 then
    -- A run of equal scores is never split between two chunks.
    local s = popped[#popped]
    local rest = redis.call('ZRANGEBYSCORE', K_DRAW, s, s)
    for _, id in ipairs(rest) do
      redis.call('ZREM', K_DRAW, id)
      popped[#popped + 1] = id
      popped[#popped + 1] = s
    end
    draw_changed()
  end
  local doors = tonumber(redis.call('HGET', K_STATE, 'doors_ms')) or NOW
  local batch = {}
  for _, id in ipairs(draw_order(popped)) do
    nxt = nxt + 1
    local seen = tonumber(redis.call('ZSCORE', K_DSEEN, id)) or (NOW - (tonumber(redis.call('HGET', K_STATE, 'gap_ms')) or 0))
    redis.call('ZREM', K_DSEEN, id)
    line_put(id, nxt, seen, doors, batch)
  end
  put_done(batch)
  if draw_size() == 0 then
    -- Entrants who left during the drain leave their ordinals unused.
    nxt = last
  end
  set_draw(nxt)
  if nxt >= last and ls().n == 0 then
    line_left(0)
  end
end

local function waiting_count()
  return ls().n + draw_size()
end

-- A waiting visitor's position: a number, 0 for a draw entrant before the doors (no
-- place yet), or nil when not waiting. Also their ordinal when in line.
local function position_of(id)
  local nxt, last = draw_tickets()
  local reserved = nxt < last
  local o = line_get(id)
  if o then
    local rank = line_rank(id, o)
    if reserved and o > last then
      -- Behind the whole draw, including the entrants not yet moved.
      return rank + draw_size(), o
    end
    return rank, o
  end
  -- Most lines have no draw: then no look-up.
  local drank = draw_size() > 0 and redis.call('ZRANK', K_DRAW, id)
  if drank then
    if reserved then
      -- Ahead: everyone in line up to the last ordinal issued to the draw.
      return line_upto(nxt) + drank + 1
    end
    return 0
  end
  return nil
end

-- Records a heartbeat of a waiting visitor (o: their ordinal, from position_of, or nil
-- for a draw entrant).
local function heard(r, id, o)
  if o then
    line_heard(r, id, o)
  else
    draw_heard(r, id)
  end
end

-- When an old-layout ticket's place was taken (unix ms), or 0 for a ticket from before
-- tickets told it (open_room's upgrade only).
local TICKET_SCALE = 1024
local function joined_ms(ticket)
  local t = math.abs(ticket)
  if t < 2 ^ 40 then
    return 0
  end
  return math.floor(t / TICKET_SCALE)
end

local function is_waiting(id)
  return line_get(id) or (draw_size() > 0 and redis.call('ZSCORE', K_DRAW, id))
end

-- How many of `client`'s places are still in line (draw included), dropping from its
-- entry those who left (admitted, abandoned, moved on) and any id listed twice (a rejoin).
-- With `cap` > 0, an entry listing fewer than `cap` ids is taken as it is: an upper bound
-- below the cap lets the newcomer in without a look-up per id, so the purge (O(cap)) runs
-- only when a refusal is at stake and the count decided on is exact. `cap` 0 always purges.
local function places_of(client, cap)
  local v = redis.call('HGET', K_PLACES, client)
  if not v then
    return 0
  end
  if cap > 0 and #v < cap * 16 then
    return math.floor(#v / 16)
  end
  local kept, seen = {}, {}
  for i = 1, #v - 15, 16 do
    local id = string.sub(v, i, i + 15)
    if not seen[id] and is_waiting(id) then
      seen[id] = true
      kept[#kept + 1] = id
    end
  end
  if #kept == 0 then
    redis.call('HDEL', K_PLACES, client)
  elseif #kept * 16 < #v then
    redis.call('HSET', K_PLACES, client, table.concat(kept))
  end
  return #kept
end

-- Counts a newcomer's place against their client (only while the cap is set).
local function add_place(r, client, id)
  if r.max_places > 0 then
    redis.call('HSET', K_PLACES, client, (redis.call('HGET', K_PLACES, client) or '') .. id)
  end
end

local function tracks_sessions(r)
  return r.max_sessions > 0 or r.session_clients > 0
end

-- Charges a session to the client it is first used from.
local function charge_session(id, client)
  redis.call('HSET', K_SESS, id, client)
  redis.call('HINCRBY', K_SCOUNT, client, 1)
end

-- When each session on the site started (liveness time), and the lengths of the latest
-- SESSIONS_KEPT to end, newest first (SESSIONS_KEPT in src/queue/mod.rs): kept here rather
-- than by the replica that saw them, so every replica's ETA reads the same turnover
-- whichever replica's pass or request started, reaped or ended a session.
local SESSIONS_KEPT = 128

-- Notes that the sessions of `ids` started at `at`.
local function sessions_started(ids, at)
  local v = string.format('%d', at)
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = id
    fields[#fields + 1] = v
  end
  -- chunked's chunks are of an even size: a field is never split from its value.
  chunked('HSET', PREFIX .. 'since', fields)
end

-- Forgets sessions that left the site at `at` (already out of `active`): their lengths are
-- kept (where their start is known), their clients' shares freed.
local function drop_sessions(ids, at)
  if #ids == 0 then
    return
  end
  local k_since, k_lengths = PREFIX .. 'since', PREFIX .. 'lengths'
  local shares = redis.call('EXISTS', K_SESS) == 1
  local lengths = {}
  local CHUNK = 1000
  for i = 1, #ids, CHUNK do
    local chunk = {}
    for j = i, math.min(i + CHUNK - 1, #ids) do
      chunk[#chunk + 1] = ids[j]
    end
    -- A missing start (a session begun before starts were kept) is false here: skipped.
    for _, since in ipairs(redis.call('HMGET', k_since, unpack(chunk))) do
      local t = tonumber(since)
      if t then
        lengths[#lengths + 1] = string.format('%d', math.max(at - t, 0))
      end
    end
    redis.call('HDEL', k_since, unpack(chunk))
    if shares then
      local clients = redis.call('HMGET', K_SESS, unpack(chunk))
      for _, c in ipairs(clients) do
        if c then
          local first = string.sub(c, 1, 16)
          if redis.call('HINCRBY', K_SCOUNT, first, -1) <= 0 then
            redis.call('HDEL', K_SCOUNT, first)
          end
        end
      end
      redis.call('HDEL', K_SESS, unpack(chunk))
    end
  end
  if #lengths > 0 then
    -- Only the newest SESSIONS_KEPT can stay.
    redis.call('LPUSH', k_lengths, unpack(lengths, math.max(1, #lengths - SESSIONS_KEPT + 1), #lengths))
    redis.call('LTRIM', k_lengths, 0, SESSIONS_KEPT - 1)
  end
end


-- Moves a waiting visitor (line, front lane or draw) to position 1, recording a heartbeat.
-- False when they are not waiting.
local function to_front(r, id)
  local o = line_get(id)
  if o then
    line_del(id, o)
  elseif redis.call('ZREM', K_DRAW, id) == 1 then
    draw_changed()
    redis.call('ZREM', K_DSEEN, id)
    if before_doors(phase_of(r)) then
      -- Out of the lot before the doors: not an entrant of the draw.
      redis.call('HDEL', K_DRAWH, id)
    end
  else
    return false
  end
  local st = ls()
  st.ford = st.ford + 1
  line_put(id, -st.ford, r.live, NOW, nil, true)
  return true
end

-- Every call's first step: sets the per-call values above from its keys and arguments.
local function begin(keys, args)
  K_CONF, K_STATE, K_CHUNKS, K_DSEEN, K_ACTIVE, K_DRAW = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  K_PLACES, K_SESS, K_SCOUNT, K_DRAWH = keys[7], keys[8], keys[9], keys[10]
  K_CSEEN, K_FEN = keys[11], keys[12]
  K_JOINS = keys[13]
  PREFIX = string.sub(K_CONF, 1, #K_CONF - 4)
  NOW = clock_now(args[1])
  LS, DT = nil, nil
  JOINED, JOINED_ADD = nil, false
  FEN_MEMO = {}
  DRAW_N = nil
end
