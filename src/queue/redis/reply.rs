//! Reading the scripts' replies: every reply that is not what the script returns is
//! [`StoreError::Unavailable`] with what came back, never a panic (a different version's
//! data, or a key someone else wrote).

use redis::Value;

use crate::queue::{Phase, Place, StoreError, StoreResult, VisitorId, WaitingEntry};

pub(super) fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

pub(super) fn bad_reply(what: &str, detail: impl std::fmt::Debug) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected reply to {what}: {detail:?}"))
}

pub(super) fn ints(what: &str, value: Value) -> StoreResult<Vec<i64>> {
    redis::from_redis_value_ref::<Vec<i64>>(&value).map_err(|_| bad_reply(what, value))
}

pub(super) fn ids(what: &str, value: Value) -> StoreResult<Vec<VisitorId>> {
    let raw: Vec<Vec<u8>> =
        redis::from_redis_value(value.clone()).map_err(|_| bad_reply(what, &value))?;
    raw.into_iter()
        .map(|bytes| {
            <[u8; 16]>::try_from(bytes.as_slice())
                .map(VisitorId)
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "redis: bad data: a visitor id of {} bytes in {what} (expected 16)",
                        bytes.len()
                    ))
                })
        })
        .collect()
}

/// Visitor ids packed 16 bytes apiece, in strings of a list (the other replicas'
/// admissions an `admit_pass` reads, oldest first). A hint, never an error: anything of
/// another shape is passed over (those visitors hear at their streams' next heartbeat).
pub(super) fn packed_ids(value: Value) -> Vec<VisitorId> {
    let Value::Array(packs) = value else {
        return Vec::new();
    };
    packs
        .iter()
        .filter_map(|pack| match pack {
            Value::BulkString(bytes) if bytes.len() % 16 == 0 => Some(bytes),
            _ => None,
        })
        .flat_map(|bytes| bytes.chunks_exact(16))
        .map(|id| {
            let mut bytes = [0; 16];
            bytes.copy_from_slice(id);
            VisitorId(bytes)
        })
        .collect()
}

/// A place from a script's reply; position 0 is none (a lottery draw before the doors).
pub(super) fn place(position: i64, waiting: i64, paused: i64, phase: i64) -> StoreResult<Place> {
    let phase = match phase {
        0 => Phase::Queueing,
        1 => Phase::BeforeOpen,
        2 => Phase::Draw,
        3 => Phase::Closed,
        other => return Err(bad_reply("a phase", other)),
    };
    Ok(Place {
        position: (position > 0).then_some(position as u64),
        waiting: waiting.max(0) as u64,
        paused: paused == 1,
        phase,
    })
}

/// One waiting visitor from a `queue.lua` reply: id, position, joined ms (0: unknown),
/// last seen ms.
pub(super) fn waiting_entry(fields: &[Value]) -> StoreResult<WaitingEntry> {
    let [id, position, joined, seen] = fields else {
        return Err(bad_reply("queue", fields));
    };
    let int = |v: &Value| -> StoreResult<i64> {
        redis::from_redis_value::<i64>(v.clone()).map_err(|_| bad_reply("queue", v))
    };
    let visitor = ids("queue", Value::Array(vec![id.clone()]))?
        .pop()
        .ok_or_else(|| bad_reply("queue", id))?;
    let position = int(position)?;
    let joined = int(joined)?;
    Ok(WaitingEntry {
        visitor,
        reference: visitor.reference(),
        position: (position > 0).then_some(position as u64),
        joined_at_ms: (joined > 0).then_some(joined as u64),
        last_seen_ms: int(seen)?.max(0) as u64,
    })
}

pub(super) fn parse<T: std::str::FromStr>(field: &str, s: &str) -> StoreResult<T> {
    s.parse().map_err(|_| {
        StoreError::Unavailable(format!("redis: bad data: {field} is {s:?} in the store"))
    })
}
