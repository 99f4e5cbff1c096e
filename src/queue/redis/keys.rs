//! A room's keys, and the layout of its line in them.
//!
//! Keys of room `main` (see `src/queue/lua/common.lua` for the fields): `ar:{main}:conf`
//! (runtime settings), `ar:{main}:state` (bucket, counters, the line's bookkeeping,
//! downtime bookkeeping), the line (below), `ar:{main}:active` (ZSET id → last activity),
//! `ar:{main}:draw` (ZSET id → lottery score, during a draw) and `ar:{main}:dseen` (ZSET id
//! → last heartbeat of a draw entrant), `ar:{main}:drawh` (id → draw hash: the draw's
//! entrants, fixed from the doors on, docs/fairness.md), `ar:{main}:places` (client → its
//! visitors' ids, while `max_places_per_client` is set), `ar:{main}:sess` (session → the
//! clients it was used from) and `ar:{main}:scount` (client → sessions), while a session
//! cap is set, `ar:{main}:joins:<client>` (one client's join-limit window, expiring with
//! it), `ar:{main}:grant:<nonce>` and `ar:{main}:chal:<id>` (a spent priority grant's nonce
//! and a spent challenge's id, each holding the visitor who spent it and expiring with it), `ar:{main}:origin` (closed-loop admission: each replica's latest report of the
//! origin's latency and errors, expiring with its last writer), `ar:{main}:admitted` (a
//! stream of the last 64 admitting passes' ids, which every replica's pass reads from its
//! own cursor: see `src/queue/lua/admit_pass.lua`), `ar:{main}:since` (HASH id → when its
//! session began) and `ar:{main}:lengths` (LIST, the latest 128 ended sessions' lengths;
//! both in `src/queue/lua/common.lua`, by `drop_sessions`). Members are the raw 16-byte
//! visitor ids; clients are [`ClientKey::to_bytes`].
//!
//! The line, and why: the goal is ≤ 120 B of Redis memory per waiting visitor. The first
//! layout kept each waiter in two big sorted sets (`line`: id → ticket, `seen`: id → last
//! heartbeat), ~257 B a waiter: a big ZSET costs ~130 B a member (dict entry, key string,
//! skiplist node, bucket), whatever the member. Small hashes and sorted sets are stored as
//! listpacks (a flat array, ~20–30 B an entry) below `*-max-listpack-entries` (128), so the
//! line is many small structures instead (~70 B a waiter, measured at 100,000):
//! - every waiter has an ordinal (1, 2, 3, … at the back; −1, −2, … in the front lane, the
//!   newest first), and ordinals are grouped in chunks of 128: `ar:{main}:c:<chunk>` is a
//!   ZSET id → `slot · 2⁴⁴ + last heartbeat in ms` (exact in a double). The slot orders
//!   the chunk; the heartbeat rides in the same score (rewritten in place at most once a
//!   second, as the heartbeat always was; nobody moves), so abandonment needs no second
//!   structure per waiter;
//! - `ar:{main}:i:<bucket>` (HASH id → ordinal and join time, 10 bytes) finds a waiter's
//!   chunk; buckets are a linear-hashing table on the id's first 4 bytes, split one at a time
//!   as the line grows so each stays a listpack;
//! - position is O(log n): a Fenwick tree of the chunks' counts (`ar:{main}:fen`) gives how
//!   many wait in the chunks before, plus the rank inside the chunk. The chunk at the back
//!   enters the tree when the back moves past it, so a join writes no tree;
//! - `ar:{main}:chunks` lists the non-empty chunks in order (admission pops the first), and
//!   `ar:{main}:cseen` holds a lower bound of each chunk's oldest heartbeat: a pass reads only
//!   chunks that may hold someone not heard for `abandon_after`, drops exactly those, when
//!   they are due (the model test holds it to the millisecond), and tightens the
//!   bound.
//!   Bounded per pass ([`REAP_BUDGET`](crate::queue::REAP_BUDGET) waiters, twice that over 128
//!   chunks read), catching up.
//!
//! Upgrade from the first layout: `open_room` finds `ar:{room}:line` / `ar:{room}:seen`
//! and moves them into this layout in one script, in order, with heartbeats and join times
//! (about 5 µs of Redis time a waiter). Old and new replicas must not share a room: stop
//! the old ones first.

use super::RedisStore;
use crate::queue::ClientKey;

impl RedisStore {
    fn keys(room: &str) -> [String; 12] {
        [
            "conf", "state", "chunks", "dseen", "active", "draw", "places", "sess", "scount",
            "drawh", "cseen", "fen",
        ]
        .map(|k| format!("ar:{{{room}}}:{k}"))
    }

    /// [`RedisStore::keys`], kept for the rooms called so far (at most a few thousand: a
    /// name that is no room, say from an admin's typo, costs one formatting a call beyond).
    pub(super) fn room_keys(&self, room: &str) -> std::sync::Arc<[String; 12]> {
        const KEPT: usize = 4_096;
        let mut kept = self.room_keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(keys) = kept.get(room) {
            return keys.clone();
        }
        let keys = std::sync::Arc::new(Self::keys(room));
        if kept.len() < KEPT {
            kept.insert(room.to_owned(), keys.clone());
        }
        keys
    }

    /// The key of one spent priority-grant nonce in `room` (same slot as the room). The
    /// nonce is `[A-Za-z0-9_-]` only (checked before the store is asked), so it is safe in
    /// a key.
    pub(super) fn grant_key(room: &str, nonce: &str) -> String {
        format!("ar:{{{room}}}:grant:{nonce}")
    }

    /// The key of one spent challenge id in `room` (same slot as the room), holding the
    /// visitor it let join and expiring with the challenge. The id is a signed base64url
    /// nonce (`[A-Za-z0-9_-]`, 22 characters, checked before the store is asked), so it is
    /// safe in a key.
    pub(super) fn challenge_key(room: &str, id: &str) -> String {
        format!("ar:{{{room}}}:chal:{id}")
    }

    /// The key of `room`'s admissions stream (same slot as the room): one entry per
    /// admitting pass, read by the other replicas' passes.
    pub(super) fn admitted_key(room: &str) -> String {
        format!("ar:{{{room}}}:admitted")
    }

    /// The key of the origin reports of `room`'s replicas (same slot as the room).
    pub(super) fn origin_key(room: &str) -> String {
        format!("ar:{{{room}}}:origin")
    }

    /// The key of one client's join-limit window in `room` (same slot as the room).
    pub(super) fn joins_key(room: &str, client: ClientKey) -> String {
        format!("ar:{{{room}}}:joins:{client}")
    }
}
