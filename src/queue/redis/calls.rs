//! How a call reaches Redis: on which connection (the shared one, or a serving worker's
//! own), and when a call that met a broken connection is sent once more.
//!
//! Outages: every connection, I/O or timeout error is [`StoreError::Unavailable`] (admission
//! fails closed). The single-node connection is a [`redis::aio::ConnectionManager`] with short timeouts
//! that reconnects in the background, so a dead Redis answers "unavailable" within a couple
//! of seconds and recovery needs no restart. Time the store was unreachable (or every replica
//! was down) is forgiven in the reaping clock, so an outage never abandons the line.
//!
//! After an outage: every connection (the shared one and each serving worker's) is PINGed
//! every half second by a [`KeepAlive`] on its own runtime, so it is reconnected when Redis
//! answers again rather than by the first visitor who uses it; and a call that meets a
//! broken connection anyway (between Redis's return and the next PING) is sent once more
//! before it is answered as unavailable (`redis_client::once_more!`), when that is safe.
//! Whether a call may be repeated ([`Repeat`]) depends on what running it twice does, for a
//! reset or closed connection cannot tell whether the script ran before the connection died
//! (a refused connection can: nothing was sent, and every call may then be repeated):
//! - repeated after any broken connection ([`Repeat::Safe`]), since a second run does what
//!   the first did: `heartbeat` (heartbeats are times, set again to now; doors open by the
//!   clock), `stats`, `queue` and `draw` (reads, and the doors), `grant` (`SET NX` with the
//!   visitor: a second run by the same visitor answers "spent by you", which admits as
//!   "fresh" does), `session touch` (activity times), `update_settings` (absolute values;
//!   a resume's empty bucket only on the first; a write with a precondition that landed
//!   finds the unique value it wrote and answers as written), `adaptive` (a replica's report replaces
//!   its own; a repeated exchange finds the claim taken, by itself, and skips one decision),
//!   and `resolve`, made safe by telling the script it repeats (`ARGV[8]`): a visitor the
//!   first attempt admitted or placed is in `active` or in line and is answered as such
//!   (never a second admission, token or place; only the reply's `newly` / `joined` flag is
//!   then false, so at most one admitted or joined event is missed, never doubled), and a
//!   repeat counts no refusal, in the join-limit window or in `total_refused` (at worst one
//!   goes uncounted);
//! - repeated only when nothing was sent ([`Repeat::IfUnsent`]): `admit_pass` (a second pass
//!   would report only its own admissions: the first's would reach this replica's streams
//!   and ETA ledger only through the next pass, which reads them back from the room's
//!   admissions stream as if another replica's, and never its events or time-in-line
//!   histogram; the admission loop comes back within a tick anyway), `flush` (would also flush who joined
//!   in between), `front` (an admin's move, answered to the admin), `session end` (a second
//!   run answers "there was none"), `open_room` (at start, which retries itself).
//!
//! A response timeout is never repeated: the connection is not known broken, and a second
//! wait would double a visitor's. Below all this, a Cluster connection (redis-rs) follows
//! redirections and, after reconnecting a node, sends a request again by itself, whatever
//! the operation (it is not told which are safe; the repeat flag of `resolve` is not set
//! then).

use std::sync::atomic::Ordering;

use redis::Value;

use super::reply::unavailable;
use super::scripts::{Args, Op};
use super::{Local, RedisStore};
use crate::queue::redis_client::{KeepAlive, RedisConn, Repeat, once_more};
use crate::queue::{StoreError, StoreResult};

impl RedisStore {
    /// The connection for a call. On a serving worker, its own, made on its runtime: the
    /// shared one's task runs on the main runtime's threads, so each call through it woke a
    /// thread there to send, and was woken back with the reply, two thread switches a call
    /// on a box where the load, Redis and anteroom share two cores. Elsewhere (background
    /// loops, tests), and while a worker's own is being made (in the background, so no
    /// request waits on a connect, even with Redis down), the shared one. A worker's own
    /// connection is kept through outages: it reconnects itself, PINGed by its
    /// [`KeepAlive`].
    pub(super) fn conn(&self) -> RedisConn {
        if !crate::worker::on_serving_worker() {
            return self.conn.clone();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.conn.clone();
        };
        let id = runtime.id();
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        match local.get(&id) {
            Some(Local::Ready { conn, .. }) => return conn.clone(),
            Some(Local::Connecting) => return self.conn.clone(),
            None => {}
        }
        local.insert(id, Local::Connecting);
        drop(local);
        let (connector, local) = (self.connector.clone(), self.local.clone());
        runtime.spawn(async move {
            let made = connector.connect().await;
            let mut local = local.lock().unwrap_or_else(|p| p.into_inner());
            match made {
                Ok(conn) => {
                    let _keep_alive = KeepAlive::start(&conn);
                    local.insert(id, Local::Ready { conn, _keep_alive });
                }
                // The next call on this worker tries again; the shared one serves meanwhile.
                Err(_) => {
                    local.remove(&id);
                }
            }
        });
        self.conn.clone()
    }

    /// A call failed as unavailable (after its repeat, if any): the next successful pass
    /// forgives the time since the room's last one as downtime.
    pub(super) fn failed(&self) {
        self.recovering.store(true, Ordering::SeqCst);
    }

    /// Runs one script on `room` with `args` after the clock offset.
    pub(super) async fn call(
        &self,
        op: &Op,
        room: &str,
        args: impl FnOnce(&mut Args),
    ) -> StoreResult<Value> {
        self.call_as(op, op.repeat, room, &[], args).await
    }

    /// [`RedisStore::call`] with more keys after the room's.
    pub(super) async fn call_with(
        &self,
        op: &Op,
        room: &str,
        extra_keys: &[String],
        args: impl FnOnce(&mut Args),
    ) -> StoreResult<Value> {
        self.call_as(op, op.repeat, room, extra_keys, args).await
    }

    /// [`RedisStore::call_with`], repeated after a broken connection as `repeat` says
    /// (rather than as the operation's default).
    pub(super) async fn call_as(
        &self,
        op: &Op,
        repeat: Repeat,
        room: &str,
        extra_keys: &[String],
        args: impl FnOnce(&mut Args),
    ) -> StoreResult<Value> {
        let room_keys = self.room_keys(room);
        let keys: Vec<&str> = room_keys
            .iter()
            .chain(extra_keys)
            .map(String::as_str)
            .collect();
        let mut rest = Args::default();
        rest.arg(self.clock_arg());
        args(&mut rest);
        let mut conn = self.conn();
        let result = once_more!(repeat, |again| {
            let mark = op.marks_repeat.then_some(if again { "1" } else { "0" });
            if self.eval_only.load(Ordering::Relaxed) {
                Self::eval(op, &keys, &rest, mark, &mut conn).await
            } else {
                self.fcall(op, &keys, &rest, mark, &mut conn).await
            }
        });
        match result {
            Ok(value) => {
                if let Value::Array(items) = &value
                    && let [Value::Int(-1)] = items.as_slice()
                {
                    return Err(StoreError::UnknownRoom(room.to_owned()));
                }
                Ok(value)
            }
            Err(e) => {
                self.failed();
                Err(unavailable(e))
            }
        }
    }
}
