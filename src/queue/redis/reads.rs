//! What the Redis store reads outside its scripts, each in steps that never hold Redis
//! long: the lottery salt (once per room), the draw's published hashes, and a search of
//! the line by reference.

use redis::Value;

use super::RedisStore;
use super::reply::{bad_reply, unavailable, waiting_entry};
use super::scripts::QUEUE;
use crate::fairness::draw::DrawHash;
use crate::queue::redis_client::{Repeat, once_more};
use crate::queue::{StoreError, StoreResult, VisitorRef, WaitingEntry};

/// How many fields of a draw's record one `HSCAN` step asks for: a draw of any size is
/// read in steps of well under a millisecond of Redis time each.
const DRAW_SCAN_STEP: usize = 1_000;

/// How many of the line one step of a search by reference reads: a few milliseconds of
/// Redis time, so an admin's search never blocks the room's admissions for long.
const FIND_STEP: usize = 20_000;

impl RedisStore {
    /// One read-only command on the shared connection, sent once more after a broken
    /// connection (a read is always safe to repeat); a failure marks the store recovering,
    /// as a failed script call does.
    async fn read<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> StoreResult<T> {
        let mut conn = self.conn.clone();
        once_more!(Repeat::Safe, |_again| command.query_async(&mut conn).await).map_err(|e| {
            self.failed();
            unavailable(e)
        })
    }

    /// The room's lottery salt: cached, else read from the store (and cached once there).
    /// Empty when the room was never opened.
    pub(super) async fn salt(&self, room: &str) -> StoreResult<Vec<u8>> {
        if let Some(salt) = self
            .salts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(room)
        {
            return Ok(salt.clone());
        }
        let key = format!("ar:{{{room}}}:state");
        let salt: Option<Vec<u8>> = self.read(redis::cmd("HGET").arg(&key).arg("salt")).await?;
        let salt = salt.unwrap_or_default();
        if !salt.is_empty() {
            self.salts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(room.to_owned(), salt.clone());
        }
        Ok(salt)
    }

    /// Every field of the draw's record (`ar:{room}:drawh`), read in `HSCAN` steps of
    /// [`DRAW_SCAN_STEP`]; the record no longer changes once the doors are open, so the
    /// scan sees all of it. Sorted, without the repeats a scan may return.
    pub(super) async fn drawn_hashes(&self, room: &str) -> StoreResult<Vec<DrawHash>> {
        let key = format!("ar:{{{room}}}:drawh");
        let mut cursor = 0u64;
        let mut hashes = Vec::new();
        loop {
            let mut scan = redis::cmd("HSCAN");
            scan.arg(&key).arg(cursor).arg("COUNT").arg(DRAW_SCAN_STEP);
            let (next, pairs): (u64, Vec<Vec<u8>>) = self.read(&scan).await?;
            for value in pairs.chunks_exact(2).map(|pair| &pair[1]) {
                let bytes = <[u8; 32]>::try_from(value.as_slice()).map_err(|_| {
                    StoreError::Unavailable(format!(
                        "redis: bad data: a draw hash of {} bytes in {key} (expected 32)",
                        value.len()
                    ))
                })?;
                hashes.push(DrawHash(bytes));
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        hashes.sort_unstable();
        hashes.dedup();
        Ok(hashes)
    }

    /// The waiting visitor with `reference`: the line from its head, then the draw, in
    /// steps of [`FIND_STEP`] (each one script, so Redis is never blocked for long; a
    /// visitor moving between steps may be missed, and the admin simply searches again).
    /// Chosen over an index by reference, which would cost memory per waiting visitor
    /// against the ≤ 120 B goal for a rare admin search.
    pub(super) async fn find(
        &self,
        room: &str,
        reference: VisitorRef,
    ) -> StoreResult<WaitingEntry> {
        let prefix = reference.prefix();
        for key in ["line", "draw"] {
            let mut first = 0i64;
            loop {
                let reply = self
                    .call(&QUEUE, room, |inv| {
                        inv.arg("find")
                            .arg(key)
                            .arg(first)
                            .arg(FIND_STEP)
                            .arg(&prefix[..]);
                    })
                    .await?;
                let Value::Array(items) = reply else {
                    return Err(bad_reply("queue", reply));
                };
                match items.split_first() {
                    Some((Value::Int(1), entry)) => return waiting_entry(entry),
                    Some((Value::Int(0), [Value::Int(next)])) if *next > first => first = *next,
                    Some((Value::Int(2), [])) => break,
                    _ => return Err(bad_reply("queue", items)),
                }
            }
        }
        Err(StoreError::NotWaiting(reference))
    }
}
