//! The embedded store's persistence: the snapshot in `data_dir`, written straight from the
//! live rooms, and read back in any of its four formats (the current one, the third
//! without the operator's changes of settings, the second also without the drawn
//! entrants' hashes, and the first without a salt or a draw), so an upgrade never loses
//! anyone's place.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::line::{LaneKind, NewPlace, WaitingLine};
use super::{ClientRef, Counters, Entrant, FRONT, Room};
use crate::fairness::draw::DrawHash;
use crate::queue::{RoomSettings, StoreError, StoreResult, VisitorId};

pub(super) const SNAPSHOT_FILE: &str = "queue.snapshot";

/// Opens a snapshot in the current layout. Ten 0xff bytes are not a valid postcard varint,
/// so no snapshot of the first layout (which started with one) can be mistaken for it.
pub(super) const SNAPSHOT_MAGIC: &[u8] =
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-4";
/// The third layout: as the fourth, without the operator's changes of settings.
pub(super) const SNAPSHOT_MAGIC_V3: &[u8] =
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-3";
/// The second layout: as the third, without the drawn entrants' hashes.
pub(super) const SNAPSHOT_MAGIC_V2: &[u8] =
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffanteroom-snapshot-2";

/// Writes the snapshot atomically (exclusive no-follow temporary file, fsync, rename) with
/// mode 0600, through [`crate::fsutil::write_atomic_with`]. Each room is encoded straight
/// from its live state into the file under its lock in turn (see [`LiveSnapshot`]): no
/// copy of a line of millions is made, so a snapshot costs no memory beyond a buffer. The
/// fsync and rename come after every lock is released.
pub(super) fn write_snapshot(dir: &Path, rooms: &[(String, Arc<Mutex<Room>>)]) -> StoreResult<()> {
    use std::io::Write;
    crate::fsutil::write_atomic_with(dir, SNAPSHOT_FILE, |file| {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
        out.write_all(SNAPSHOT_MAGIC)?;
        postcard::to_io(&LiveSnapshot(rooms), &mut out).map_err(std::io::Error::other)?;
        out.flush()
    })
    .map_err(|e| StoreError::Unavailable(format!("snapshot write in {}: {e}", dir.display())))
}

/// The current layout ([`Snapshot`]) serialized from the live rooms, field for field what
/// the derived form of `Snapshot` writes (a test holds the two byte for byte).
pub(super) struct LiveSnapshot<'a>(pub(super) &'a [(String, Arc<Mutex<Room>>)]);

impl Serialize for LiveSnapshot<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Snapshot", 1)?;
        st.serialize_field("rooms", &LiveRooms(self.0))?;
        st.end()
    }
}

struct LiveRooms<'a>(&'a [(String, Arc<Mutex<Room>>)]);

impl Serialize for LiveRooms<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (name, room) in self.0 {
            let room = room.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            seq.serialize_element(&(name, LiveRoom(&room)))?;
        }
        seq.end()
    }
}

/// One room as a [`RoomSnapshot`].
struct LiveRoom<'a>(&'a Room);

impl Serialize for LiveRoom<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let room = self.0;
        let mut st = s.serialize_struct("RoomSnapshot", 10)?;
        st.serialize_field("settings", &room.settings)?;
        st.serialize_field("tokens", &room.tokens)?;
        st.serialize_field("next_ticket", &room.line.next_ticket())?;
        st.serialize_field("line", &LiveLine(&room.line))?;
        st.serialize_field("sessions", &Ids(room.sessions.ids()))?;
        st.serialize_field("counters", &room.counters)?;
        st.serialize_field("salt", &room.salt)?;
        st.serialize_field("draw", &Ids(room.draw.keys()))?;
        st.serialize_field("drawn", &Drawn(&room.drawn))?;
        st.serialize_field("changes", &changes_text(&room.settings.changes))?;
        st.end()
    }
}

/// The line as `(ticket, visitor)` in line order; the front lane rides in it with its
/// marker bit, so the layout stays.
struct LiveLine<'a>(&'a WaitingLine);

impl Serialize for LiveLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (lane, t, w) in self.0.by_ticket() {
            let ticket = match lane {
                LaneKind::Front => FRONT | t,
                LaneKind::Line => t,
            };
            seq.serialize_element(&(ticket, w.visitor))?;
        }
        seq.end()
    }
}

/// The operator's changes as the snapshot keeps them: JSON text (postcard cannot carry a
/// JSON value), empty for none.
fn changes_text(changes: &crate::queue::RoomChanges) -> String {
    if changes.is_empty() {
        String::new()
    } else {
        serde_json::to_string(changes).unwrap_or_default()
    }
}

struct Ids<I>(I);

impl<'a, I: Iterator<Item = &'a VisitorId> + ExactSizeIterator + Clone> Serialize for Ids<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

struct Drawn<'a>(&'a [DrawHash]);

impl Serialize for Drawn<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|h| h.0))
    }
}

impl Room {
    /// The room in the snapshot layout, owned: what [`LiveRoom`] writes without the copy.
    #[cfg(test)]
    pub(super) fn snapshot(&self) -> RoomSnapshot {
        RoomSnapshot {
            settings: self.settings.clone(),
            tokens: self.tokens,
            next_ticket: self.line.next_ticket(),
            // The front lane rides in the line with its marker bit, so the layout stays.
            line: self
                .line
                .by_ticket()
                .map(|(lane, t, w)| match lane {
                    LaneKind::Front => (FRONT | t, w.visitor),
                    LaneKind::Line => (t, w.visitor),
                })
                .collect(),
            sessions: self.sessions.ids().copied().collect(),
            counters: self.counters,
            salt: self.salt,
            draw: self.draw.keys().copied().collect(),
            drawn: self.drawn.iter().map(|h| h.0).collect(),
            changes: changes_text(&self.settings.changes),
        }
    }

    /// Rebuilds a room from its snapshot. Everyone restored counts as seen `now`: the time
    /// the process was down must not abandon the line or reclaim the site. The policy
    /// comes back when the room is opened. Clients are not in the snapshot: restored
    /// places and sessions count against no client's share.
    pub(super) fn restore(snapshot: RoomSnapshot, now: u64) -> Self {
        let mut settings = snapshot.settings;
        settings.changes = serde_json::from_str(&snapshot.changes).unwrap_or_default();
        let mut room = Room::new(settings, now);
        room.salt = snapshot.salt;
        room.drawn = snapshot.drawn.into_iter().map(DrawHash).collect();
        room.tokens = snapshot.tokens.min(room.settings.burst());
        room.counters = snapshot.counters;
        // Each lane in ticket order (stable sorts: already sorted input costs O(n)); the
        // tickets are numbered afresh, consecutively, which keeps every order.
        let (mut front, mut line): (Vec<_>, Vec<_>) = snapshot
            .line
            .into_iter()
            .partition(|&(t, _)| t & FRONT != 0);
        front.sort_by_key(|&(t, _)| t);
        line.sort_by_key(|&(t, _)| t);
        room.line
            .start_at(line.first().map_or(snapshot.next_ticket, |&(t, _)| t));
        for (lane, places) in [(LaneKind::Front, front), (LaneKind::Line, line)] {
            for (_, visitor) in places {
                // A visitor listed twice (never written so) keeps their first place.
                if room.line.find(visitor).is_none() {
                    room.line.join(
                        lane,
                        NewPlace {
                            visitor,
                            seen_ms: now,
                            joined_ms: now,
                            client: ClientRef::NONE,
                        },
                    );
                }
            }
        }
        for visitor in snapshot.sessions {
            // The snapshot keeps no starts: this one's length is unknown.
            room.sessions.insert(visitor, now, Vec::new(), false);
        }
        for visitor in snapshot.draw {
            room.draw.insert(
                visitor,
                Entrant {
                    seen_ms: now,
                    client: ClientRef::NONE,
                },
            );
            room.draw_by_seen.insert((now, visitor));
        }
        room
    }
}

/// Reads a snapshot of any layout: an older one is read in its own form and each room
/// brought up to the current one ([`RoomSnapshot`]'s `From` impls below).
pub(super) fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, postcard::Error> {
    /// The rooms of a layout whose room form is `R`, each brought up to the current one.
    fn upgraded<R>(bytes: &[u8]) -> Result<Snapshot, postcard::Error>
    where
        R: serde::de::DeserializeOwned + Into<RoomSnapshot>,
    {
        let old: Layout<R> = postcard::from_bytes(bytes)?;
        Ok(Snapshot {
            rooms: (old.rooms.into_iter())
                .map(|(name, room)| (name, room.into()))
                .collect(),
        })
    }
    if let Some(current) = bytes.strip_prefix(SNAPSHOT_MAGIC) {
        postcard::from_bytes(current)
    } else if let Some(v3) = bytes.strip_prefix(SNAPSHOT_MAGIC_V3) {
        upgraded::<RoomSnapshotV3>(v3)
    } else if let Some(v2) = bytes.strip_prefix(SNAPSHOT_MAGIC_V2) {
        upgraded::<RoomSnapshotV2>(v2)
    } else {
        upgraded::<LegacyRoomSnapshot>(bytes)
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct Snapshot {
    pub(super) rooms: Vec<(String, RoomSnapshot)>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct RoomSnapshot {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    /// (ticket, visitor) in line order.
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
    salt: [u8; 16],
    /// A lottery draw still being collected (no tickets yet).
    draw: Vec<VisitorId>,
    /// The last draw's hashes, ascending (see `Room::drawn`).
    drawn: Vec<[u8; 32]>,
    /// The operator's changes of settings as JSON text ([`changes_text`]).
    changes: String,
}

/// An older layout's rooms, each in that layout's form.
#[derive(Deserialize)]
struct Layout<R> {
    rooms: Vec<(String, R)>,
}

/// The third layout's room: before the operator's changes of settings were kept.
#[derive(Deserialize)]
struct RoomSnapshotV3 {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
    salt: [u8; 16],
    draw: Vec<VisitorId>,
    drawn: Vec<[u8; 32]>,
}

impl From<RoomSnapshotV3> for RoomSnapshot {
    fn from(r: RoomSnapshotV3) -> Self {
        RoomSnapshot {
            settings: r.settings,
            tokens: r.tokens,
            next_ticket: r.next_ticket,
            line: r.line,
            sessions: r.sessions,
            counters: r.counters,
            salt: r.salt,
            draw: r.draw,
            drawn: r.drawn,
            changes: String::new(),
        }
    }
}

/// The second layout's room: the third's without the drawn entrants' hashes.
#[derive(Deserialize)]
struct RoomSnapshotV2 {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
    salt: [u8; 16],
    draw: Vec<VisitorId>,
}

impl From<RoomSnapshotV2> for RoomSnapshot {
    fn from(r: RoomSnapshotV2) -> Self {
        RoomSnapshotV3 {
            settings: r.settings,
            tokens: r.tokens,
            next_ticket: r.next_ticket,
            line: r.line,
            sessions: r.sessions,
            counters: r.counters,
            salt: r.salt,
            draw: r.draw,
            drawn: Vec::new(),
        }
        .into()
    }
}

/// The first layout's room: before rooms had a salt and a draw.
#[derive(Deserialize)]
struct LegacyRoomSnapshot {
    settings: RoomSettings,
    tokens: f64,
    next_ticket: u64,
    line: Vec<(u64, VisitorId)>,
    sessions: Vec<VisitorId>,
    counters: Counters,
}

impl From<LegacyRoomSnapshot> for RoomSnapshot {
    /// A fresh salt is drawn: the room had none.
    fn from(r: LegacyRoomSnapshot) -> Self {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random generator failed");
        RoomSnapshotV2 {
            settings: r.settings,
            tokens: r.tokens,
            next_ticket: r.next_ticket,
            line: r.line,
            sessions: r.sessions,
            counters: r.counters,
            salt,
            draw: Vec::new(),
        }
        .into()
    }
}
