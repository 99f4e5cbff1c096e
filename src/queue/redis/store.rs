//! [`QueueStore`] on Redis: each operation's arguments to its script, and its reply back
//! to the store's types. What is read outside the scripts is `reads.rs`'s.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::RedisStore;
use super::reply::{bad_reply, ids, ints, packed_ids, parse, place, unavailable, waiting_entry};
use super::scripts::{
    ADAPTIVE, ADMIT_PASS, DRAW, FLUSH, FRONT, GRANT, HEARTBEAT, OPEN_ROOM, QUEUE, RESOLVE, SESSION,
    STATS, UPDATE_SETTINGS,
};
use crate::clock::ms;
use crate::fairness::draw::DrawHash;
use crate::queue::redis_client::{Repeat, once_more};
use crate::queue::{
    AdaptiveState, ChallengeSpend, ClientKey, DrawRecord, GrantUse, Join, OriginExchange,
    OriginReport, PassReport, Place, QueueQuery, QueueStore, REAP_BUDGET, RefusedReason,
    Resolution, RoomPolicy, RoomSettings, RoomStats, SHARE_RETRY_AFTER, Seeded, SettingsPatch,
    Spent, StoreError, StoreResult, VisitorId, VisitorRef, VisitorState, WaitingEntry,
};

/// How old this replica's last pass of a room may be for the next to read the other
/// replicas' admissions since (see [`RedisStore::admitted_cursor`]): a few heartbeats.
const ADMITTED_HORIZON: Duration = Duration::from_secs(10);

impl RedisStore {
    /// This replica's cursor in `room`'s admissions stream; empty before its first pass,
    /// and when its last pass is older than [`ADMITTED_HORIZON`] (a room removed and added
    /// back, a replica cut off for a while): what was admitted before that has been heard
    /// at the streams' heartbeat, and telling it now could tell a visitor who has since
    /// come back to the line that they were admitted.
    fn admitted_cursor(&self, room: &str) -> String {
        let cursors = self
            .admitted_cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match cursors.get(room) {
            Some((cursor, at)) if at.elapsed() < ADMITTED_HORIZON => cursor.clone(),
            _ => String::new(),
        }
    }

    /// Keeps `cursor` for `room`'s next pass (empty: read from the stream's end again).
    fn set_admitted_cursor(&self, room: &str, cursor: String) {
        let mut cursors = self
            .admitted_cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        // Not an insert: the room's name is copied at its first pass only.
        match cursors.get_mut(room) {
            Some(kept) => *kept = (cursor, now),
            None => {
                cursors.insert(room.to_owned(), (cursor, now));
            }
        }
    }

    /// Makes every cursor's last pass `by` older (tests only: the horizon is real time).
    #[cfg(test)]
    pub(super) fn age_admitted_cursors_for_tests(&self, by: Duration) {
        let mut cursors = self
            .admitted_cursors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (_, at) in cursors.values_mut() {
            *at = at
                .checked_sub(by)
                .expect("a machine up longer than the test's age");
        }
    }

    /// One run of the `resolve` script: `join` as [`QueueStore::resolve_with`] takes it,
    /// and with `challenge` its id spent for a newcomer in the same run (same slot as the
    /// room: `ar:{room}:chal:<id>`).
    async fn resolve_call(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
        challenge: Option<ChallengeSpend<'_>>,
    ) -> StoreResult<Spent> {
        // The lottery's order, by the published rule: the draw hash (SHA-256(salt ‖ id))
        // and its first 52 bits as the score, exact in a ZSET's double.
        let salt = self.salt(room).await?;
        let hash = DrawHash::of(&salt, visitor);
        let score = hash.score() >> 12;
        let joins = Self::joins_key(room, client);
        let (keys, expires_at_ms) = match challenge {
            Some(c) => (
                vec![joins, Self::challenge_key(room, c.id)],
                c.expires_at_ms,
            ),
            None => (vec![joins], 0),
        };
        let reply = self
            .call_with(&RESOLVE, room, &keys, |inv| {
                inv.arg(&visitor.0[..])
                    .arg(&client.to_bytes()[..])
                    .arg(match join {
                        Join::Back => "0",
                        Join::Front => "1",
                        Join::Known => "2",
                        Join::Now => "3",
                    })
                    .arg(score.to_string())
                    .arg(&hash.0[..])
                    .arg(expires_at_ms);
            })
            .await?;
        let resolution = match ints("resolve", reply)?.as_slice() {
            &[1, newly] => Resolution::Admitted { newly: newly == 1 },
            &[2, position, waiting, paused, joined, phase] => Resolution::Waiting {
                place: place(position, waiting, paused, phase)?,
                joined: joined == 1,
            },
            &[3, retry_after_ms, 0] => Resolution::Refused {
                reason: RefusedReason::JoinLimit,
                retry_after: Duration::from_millis(retry_after_ms.max(1) as u64),
            },
            &[3, _, reason @ 1..=3] => Resolution::Refused {
                reason: match reason {
                    1 => RefusedReason::PlacesPerClient,
                    2 => RefusedReason::SessionsPerClient,
                    _ => RefusedReason::SessionClients,
                },
                retry_after: SHARE_RETRY_AFTER,
            },
            [4] => Resolution::NotOpen,
            [5] => Resolution::Closed,
            [6] => Resolution::Full,
            [7] => Resolution::Newcomer,
            [8] if challenge.is_some() => return Ok(Spent::Replayed),
            other => return Err(bad_reply("resolve", other)),
        };
        Ok(Spent::Resolved(resolution))
    }
}

#[async_trait]
impl QueueStore for RedisStore {
    async fn open_room(
        &self,
        room: &str,
        seed: &RoomSettings,
        policy: &RoomPolicy,
        reseed: bool,
    ) -> StoreResult<Seeded> {
        seed.validate()?;
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random generator failed");
        let time = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_default();
        let [opens, admits, closes] = policy.schedule_ms();
        let reply = self
            .call(&OPEN_ROOM, room, |inv| {
                inv.arg(seed.rate.to_string())
                    .arg(seed.max_active)
                    .arg(ms(seed.session_ttl))
                    .arg(ms(seed.abandon_after))
                    .arg(if reseed { "1" } else { "0" })
                    .arg(policy.join_limit_per_ip)
                    .arg(ms(policy.join_limit_window))
                    .arg(time(opens))
                    .arg(time(admits))
                    .arg(time(closes))
                    .arg(if policy.lottery { "1" } else { "0" })
                    .arg(&salt[..])
                    .arg(policy.max_places_per_client)
                    .arg(policy.max_sessions_per_client)
                    .arg(policy.session_clients)
                    .arg(policy.max_waiting)
                    .arg(seed.mode.as_str());
            })
            .await?;
        self.file_policies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(room.to_owned(), policy.clone());
        // The salt in the store is the one that counts (another replica may have set it).
        self.salts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(room);
        self.salt(room).await?;
        match ints("open_room", reply)?.as_slice() {
            [0] => Ok(Seeded::Fresh),
            [1] => Ok(Seeded::Unchanged),
            [2] => Ok(Seeded::KeptLive(self.stats(room).await?.settings)),
            [3] => Ok(Seeded::Reseeded),
            other => Err(bad_reply("open_room", other)),
        }
    }

    async fn resolve_with(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        join: Join,
    ) -> StoreResult<Resolution> {
        match self.resolve_call(room, visitor, client, join, None).await? {
            Spent::Resolved(resolution) => Ok(resolution),
            Spent::Replayed => Err(bad_reply("resolve", "replayed without a challenge")),
        }
    }

    async fn resolve_spending(
        &self,
        room: &str,
        visitor: VisitorId,
        client: ClientKey,
        challenge: ChallengeSpend<'_>,
    ) -> StoreResult<Spent> {
        self.resolve_call(room, visitor, client, Join::Back, Some(challenge))
            .await
    }

    async fn queue(&self, room: &str, query: QueueQuery) -> StoreResult<Vec<WaitingEntry>> {
        match query {
            QueueQuery::Head { limit } => {
                let limit = limit.min(QueueQuery::MAX_LIMIT);
                let reply = self
                    .call(&QUEUE, room, |inv| {
                        inv.arg("head").arg(limit);
                    })
                    .await?;
                let Value::Array(items) = reply else {
                    return Err(bad_reply("queue", reply));
                };
                items.chunks(4).map(waiting_entry).collect()
            }
            QueueQuery::Ref(reference) => Ok(vec![self.find(room, reference).await?]),
        }
    }

    async fn move_to_front(&self, room: &str, reference: VisitorRef) -> StoreResult<Place> {
        let visitor = self.find(room, reference).await?.visitor;
        let reply = self
            .call(&FRONT, room, |inv| {
                inv.arg(&visitor.0[..]);
            })
            .await?;
        match ints("front", reply)?.as_slice() {
            [0] => Err(StoreError::NotWaiting(reference)),
            &[1, position, waiting, paused, phase] => place(position, waiting, paused, phase),
            other => Err(bad_reply("front", other)),
        }
    }

    async fn spend_grant(
        &self,
        room: &str,
        nonce: &str,
        visitor: VisitorId,
        expires_at_ms: u64,
    ) -> StoreResult<GrantUse> {
        let reply = self
            .call_with(&GRANT, room, &[Self::grant_key(room, nonce)], |inv| {
                inv.arg(&visitor.0[..]).arg(expires_at_ms).arg("spend");
            })
            .await?;
        match ints("grant", reply)?.as_slice() {
            [1] => Ok(GrantUse::Fresh),
            [2] => Ok(GrantUse::Again),
            [0] => Ok(GrantUse::Taken),
            other => Err(bad_reply("grant", other)),
        }
    }

    async fn release_grant(&self, room: &str, nonce: &str, visitor: VisitorId) -> StoreResult<()> {
        let reply = self
            .call_with(&GRANT, room, &[Self::grant_key(room, nonce)], |inv| {
                inv.arg(&visitor.0[..]).arg(0).arg("release");
            })
            .await?;
        match ints("grant", reply)?.as_slice() {
            [3] => Ok(()),
            other => Err(bad_reply("grant", other)),
        }
    }

    async fn end_session(&self, room: &str, visitor: VisitorId) -> StoreResult<bool> {
        let reply = self
            .call_as(&SESSION, Repeat::IfUnsent, room, &[], |inv| {
                inv.arg("end").arg(&visitor.0[..]);
            })
            .await?;
        match ints("end_session", reply)?.as_slice() {
            [0] => Ok(false),
            [1] => Ok(true),
            other => Err(bad_reply("end_session", other)),
        }
    }

    async fn touch_sessions(&self, room: &str, visitors: &[VisitorId]) -> StoreResult<Vec<bool>> {
        if visitors.is_empty() {
            // Still answers whether the room exists, like every other operation.
            self.call(&STATS, room, |_| {}).await?;
            return Ok(Vec::new());
        }
        let reply = self
            .call(&SESSION, room, |inv| {
                inv.arg("touch");
                for v in visitors {
                    inv.arg(&v.0[..]);
                }
            })
            .await?;
        let on = ints("touch_sessions", reply)?;
        if on.len() != visitors.len() {
            return Err(bad_reply("touch_sessions", on));
        }
        Ok(on.into_iter().map(|n| n == 1).collect())
    }

    async fn heartbeat(
        &self,
        room: &str,
        visitors: &[VisitorId],
    ) -> StoreResult<Vec<VisitorState>> {
        let reply = self
            .call(&HEARTBEAT, room, |inv| {
                for v in visitors {
                    inv.arg(&v.0[..]);
                }
            })
            .await?;
        let reply = ints("heartbeat", reply)?;
        let Some((&[waiting, paused, phase], states)) = reply.split_first_chunk::<3>() else {
            return Err(bad_reply("heartbeat", &reply));
        };
        if states.len() != visitors.len() * 2 {
            return Err(bad_reply("heartbeat", &reply));
        }
        states
            .chunks_exact(2)
            .map(|pair| match *pair {
                [0, _] => Ok(VisitorState::Unknown),
                [1, _] => Ok(VisitorState::Admitted),
                [2, position] => Ok(VisitorState::Waiting(place(
                    position, waiting, paused, phase,
                )?)),
                _ => Err(bad_reply("heartbeat", pair)),
            })
            .collect()
    }

    async fn admit_pass(&self, room: &str) -> StoreResult<PassReport> {
        let forgive = self.recovering.swap(false, Ordering::SeqCst);
        let cursor = self.admitted_cursor(room);
        let result = self
            .call_with(&ADMIT_PASS, room, &[Self::admitted_key(room)], |inv| {
                // Fixed, unlike the embedded store's: a pass holds Redis for its whole
                // length (about 4 µs a place reaped), and a join costs Redis ten times
                // what reaping its place does, so a flood of joins saturates Redis before
                // this budget falls behind (BENCHMARKS.md, "Reaping a flood of abandoned
                // places with Redis").
                inv.arg(REAP_BUDGET)
                    .arg(if forgive { "1" } else { "0" })
                    .arg(cursor.as_str());
            })
            .await;
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                if forgive {
                    self.recovering.store(true, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        let Value::Array(parts) = reply else {
            return Err(bad_reply("admit_pass", reply));
        };
        let Ok::<[Value; 6], _>([admitted, abandoned, expired, joined, elsewhere, cursor]) =
            parts.try_into()
        else {
            return Err(bad_reply("admit_pass", "not six parts"));
        };
        let joined_ms = match joined {
            Value::Array(times) => times
                .into_iter()
                .map(|t| match t {
                    Value::Int(ms) if ms > 0 => Ok(Some(ms as u64)),
                    Value::Int(_) => Ok(None),
                    other => Err(bad_reply("the admitted's join times", other)),
                })
                .collect::<StoreResult<Vec<_>>>()?,
            other => return Err(bad_reply("the admitted's join times", other)),
        };
        let report = PassReport {
            admitted: ids("the admitted list", admitted)?,
            joined_ms,
            abandoned: ids("the abandoned list", abandoned)?,
            expired: ids("the expired list", expired)?,
            admitted_elsewhere: packed_ids(elsewhere),
        };
        // The pass itself has happened: a cursor of another shape only costs the next
        // pass's hearing (it reads from the stream's end again).
        let cursor = match cursor {
            Value::BulkString(id) => String::from_utf8(id).unwrap_or_default(),
            Value::SimpleString(id) => id,
            _ => String::new(),
        };
        self.set_admitted_cursor(room, cursor);
        Ok(report)
    }

    async fn stats(&self, room: &str) -> StoreResult<RoomStats> {
        let reply = self.call(&STATS, room, |_| {}).await?;
        let mut fields: Vec<String> =
            redis::from_redis_value(reply.clone()).map_err(|_| bad_reply("stats", &reply))?;
        let live = fields.split_off(fields.len().min(17));
        let mut changes = crate::queue::RoomChanges::default();
        for pair in live.chunks(2) {
            let [name, json] = pair else {
                return Err(bad_reply("stats", &live));
            };
            let value = serde_json::from_str(json).map_err(|_| bad_reply("stats", json))?;
            changes.0.insert(name.clone(), value);
        }
        let [
            waiting,
            active,
            joined,
            admitted,
            expired,
            abandoned,
            refused,
            rate,
            max_active,
            ttl,
            abandon,
            paused,
            mode,
            passed,
            schedule,
            lengths_ms,
            lengths,
        ] = fields.as_slice()
        else {
            return Err(bad_reply("stats", &fields));
        };
        Ok(RoomStats {
            waiting: parse("waiting", waiting)?,
            active: parse("active", active)?,
            total_joined: parse("total_joined", joined)?,
            total_admitted: parse("total_admitted", admitted)?,
            total_expired: parse("total_expired", expired)?,
            total_abandoned: parse("total_abandoned", abandoned)?,
            total_refused: parse("total_refused", refused)?,
            total_passed_through: parse("total_passed_through", passed)?,
            schedule: place(0, 0, 0, parse("phase", schedule)?)?.phase,
            settings: RoomSettings {
                rate: parse("rate", rate)?,
                max_active: parse("max_active", max_active)?,
                session_ttl: Duration::from_millis(parse("session_ttl_ms", ttl)?),
                abandon_after: Duration::from_millis(parse("abandon_after_ms", abandon)?),
                paused: paused == "1",
                // A room opened before modes existed has none: the queue.
                mode: crate::queue::Mode::parse(mode).unwrap_or_default(),
                changes,
            },
            ended_sessions: crate::queue::EndedSessions {
                total_ms: parse("lengths_ms", lengths_ms)?,
                count: parse("lengths", lengths)?,
            },
        })
    }

    async fn draw(&self, room: &str, hashes: bool) -> StoreResult<DrawRecord> {
        let reply = self.call(&DRAW, room, |_| {}).await?;
        let Value::Array(parts) = &reply else {
            return Err(bad_reply("draw", reply));
        };
        let (phase, salt, entrants) = match parts.as_slice() {
            [Value::Int(phase), salt, Value::Int(entrants)] => {
                let salt: Vec<u8> =
                    redis::from_redis_value(salt.clone()).map_err(|_| bad_reply("draw", salt))?;
                (*phase, salt, (*entrants).max(0) as u64)
            }
            _ => return Err(bad_reply("draw", parts)),
        };
        let phase = place(0, 0, 0, phase)?.phase;
        let mut record = DrawRecord {
            salt,
            phase,
            entrants,
            hashes: None,
        };
        if hashes && record.doors_open() {
            let list = self.drawn_hashes(room).await?;
            record.entrants = list.len() as u64;
            record.hashes = Some(list);
        }
        Ok(record)
    }

    async fn update_settings(
        &self,
        room: &str,
        patch: &SettingsPatch,
    ) -> StoreResult<RoomSettings> {
        // Every rule is about one field, so checking the patch over any valid settings names
        // the same first bad field as checking it over the live ones.
        RoomSettings {
            rate: 1.0,
            max_active: 1,
            session_ttl: Duration::from_secs(1),
            abandon_after: Duration::from_secs(1),
            paused: false,
            mode: crate::queue::Mode::Queue,
            changes: Default::default(),
        }
        .patched(patch)?;
        let opt = |v: Option<String>| v.unwrap_or_default();
        // The policy in force for each policy setting the patch names: its value, or the
        // file's when it is given back.
        let policy = {
            let files = self.file_policies.lock().unwrap_or_else(|p| p.into_inner());
            let file = files.get(room).cloned().unwrap_or_default();
            crate::queue::RoomChanges::default()
                .merged(&patch.changes)
                .policy(&file)
        };
        let time = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_default();
        // A change as the store keeps it: its JSON, or '' for none (`null`).
        let json = |value: &serde_json::Value| {
            if value.is_null() {
                String::new()
            } else {
                value.to_string()
            }
        };
        // The store's fields of each policy setting, with the values now in force.
        let policy_fields = |name: &str| -> Vec<(&'static str, String)> {
            match name {
                "lottery" => vec![("lottery", if policy.lottery { "1" } else { "0" }.to_owned())],
                "max_waiting" => vec![("max_waiting", policy.max_waiting.to_string())],
                "max_places_per_client" => {
                    vec![("max_places", policy.max_places_per_client.to_string())]
                }
                "max_sessions_per_client" => {
                    vec![("max_sessions", policy.max_sessions_per_client.to_string())]
                }
                "session_clients" => vec![("session_clients", policy.session_clients.to_string())],
                "join_limit_per_ip" => vec![("jl_limit", policy.join_limit_per_ip.to_string())],
                "join_limit_window" => {
                    vec![("jl_window_ms", ms(policy.join_limit_window).to_string())]
                }
                "schedule" => {
                    let [opens, admits, closes] = policy.schedule_ms();
                    vec![
                        ("opens_ms", time(opens)),
                        ("admits_ms", time(admits)),
                        ("closes_ms", time(closes)),
                    ]
                }
                _ => Vec::new(),
            }
        };
        let reply = self
            .call(&UPDATE_SETTINGS, room, |inv| {
                inv.arg(opt(patch.rate.map(|r| r.to_string())))
                    .arg(opt(patch.max_active.map(|m| m.to_string())))
                    .arg(opt(patch.session_ttl.map(|d| ms(d).to_string())))
                    .arg(opt(patch.abandon_after.map(|d| ms(d).to_string())))
                    .arg(opt(patch
                        .paused
                        .map(|p| if p { "1" } else { "0" }.to_owned())))
                    .arg(opt(patch.mode.map(|m| m.as_str().to_owned())));
                match &patch.expect {
                    Some((name, value)) => inv.arg(name).arg(json(value)),
                    None => inv.arg("").arg(""),
                };
                for (name, value) in &patch.changes.0 {
                    let fields = policy_fields(name);
                    let (field, now) = fields.first().cloned().unwrap_or(("", String::new()));
                    inv.arg(name).arg(json(value)).arg(field).arg(now);
                    // A setting of several fields: the others follow with no name.
                    for (field, now) in fields.into_iter().skip(1) {
                        inv.arg("").arg("").arg(field).arg(now);
                    }
                }
            })
            .await?;
        match ints("update_settings", reply)?.as_slice() {
            [1] => Ok(self.stats(room).await?.settings),
            [-2] => Err(StoreError::Conflict(
                patch
                    .expect
                    .as_ref()
                    .map_or_else(String::new, |(name, _)| name.clone()),
            )),
            other => Err(bad_reply("update_settings", other)),
        }
    }

    async fn flush(&self, room: &str) -> StoreResult<u64> {
        let reply = self.call(&FLUSH, room, |_| {}).await?;
        match ints("flush", reply)?.as_slice() {
            &[n] if n >= 0 => Ok(n as u64),
            other => Err(bad_reply("flush", other)),
        }
    }

    async fn exchange_origin(
        &self,
        room: &str,
        replica: &str,
        report: &OriginReport,
    ) -> StoreResult<OriginExchange> {
        use crate::fairness::adaptive::{CLAIM_EVERY_MS, REPORT_STALE_MS};
        let json = serde_json::to_string(report)
            .map_err(|e| StoreError::Unavailable(format!("cannot encode a report: {e}")))?;
        let reply = self
            .call_with(&ADAPTIVE, room, &[Self::origin_key(room)], |inv| {
                inv.arg("x")
                    .arg(replica)
                    .arg(json)
                    .arg(REPORT_STALE_MS)
                    .arg(CLAIM_EVERY_MS);
            })
            .await?;
        let fields: Vec<String> = redis::from_redis_value(reply.clone())
            .map_err(|_| bad_reply("exchange_origin", &reply))?;
        let [now, rate, claimed, state, reports @ ..] = fields.as_slice() else {
            return Err(bad_reply("exchange_origin", &fields));
        };
        // Another replica's bad JSON (a different version, say) is skipped, not fatal:
        // the decision is made on what can be read.
        let state = (!state.is_empty())
            .then(|| serde_json::from_str::<AdaptiveState>(state).ok())
            .flatten();
        let reports = reports
            .iter()
            .filter_map(|v| {
                let (at, json) = v.split_once(' ')?;
                Some((at.parse().ok()?, serde_json::from_str(json).ok()?))
            })
            .collect();
        Ok(OriginExchange {
            now_ms: parse("now", now)?,
            configured_rate: parse("rate", rate)?,
            decide: claimed == "1",
            state,
            reports,
        })
    }

    async fn set_adaptive(&self, room: &str, state: Option<&AdaptiveState>) -> StoreResult<()> {
        let (rate, json) = match state {
            Some(s) => (
                format!("{:.17}", s.effective_rate.max(0.0)),
                serde_json::to_string(s)
                    .map_err(|e| StoreError::Unavailable(format!("cannot encode a state: {e}")))?,
            ),
            None => (String::new(), String::new()),
        };
        let reply = self
            .call_with(&ADAPTIVE, room, &[Self::origin_key(room)], |inv| {
                inv.arg("s").arg(rate).arg(json);
            })
            .await?;
        match ints("set_adaptive", reply)?.as_slice() {
            [1] => Ok(()),
            other => Err(bad_reply("set_adaptive", other)),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn();
        let pong = once_more!(Repeat::Safe, |_again| {
            redis::cmd("PING").query_async::<String>(&mut conn).await
        });
        match pong {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed();
                Err(unavailable(e))
            }
        }
    }

    async fn persist(&self) -> StoreResult<()> {
        // Redis is durable by itself (as configured by its operator).
        Ok(())
    }
}
