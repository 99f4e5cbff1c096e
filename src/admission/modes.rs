//! The room modes' side of admission on this replica: each room's live mode as last read
//! (by the statistics refresh every second, and at once after a change made through this
//! replica), and the sold-out mode's decision.
//!
//! The passthrough mode needs nothing here: the store admits everybody while it is on.
//! The sold-out mode is decided before the store is asked to resolve anyone: a visitor
//! the store has on the site goes on as usual (one heartbeat read tells), everyone else
//! (waiting or new) is [`Decision::SoldOut`] and is not put in line. A waiting visitor
//! keeps their place, so switching back to the queue mode picks the line up where it was.

use std::collections::HashMap;
use std::sync::RwLock;

use super::{Admission, Decision};
use crate::queue::{Mode, VisitorId, VisitorState};

/// The live mode of every room, as this replica last read it.
#[derive(Default)]
pub(super) struct Modes {
    rooms: RwLock<HashMap<String, Mode>>,
}

impl Modes {
    /// `room`'s mode; the queue mode until one has been read.
    pub(super) fn get(&self, room: &str) -> Mode {
        let rooms = self.rooms.read().unwrap_or_else(|p| p.into_inner());
        rooms.get(room).copied().unwrap_or_default()
    }

    /// Records `room`'s mode as just read or changed.
    pub(super) fn set(&self, room: &str, mode: Mode) {
        let mut rooms = self.rooms.write().unwrap_or_else(|p| p.into_inner());
        match rooms.get_mut(room) {
            Some(m) => *m = mode,
            None => {
                rooms.insert(room.to_owned(), mode);
            }
        }
    }
}

impl Admission {
    /// `room`'s live mode as this replica last read it (at most about a second old).
    pub fn mode(&self, room: &str) -> Mode {
        self.modes.get(room)
    }

    /// In the sold-out mode, the decision for `visitor` unless the store has them on the
    /// site (`None`: decide as usual). A store that does not answer leaves them out too.
    pub(super) async fn sold_out(&self, room: &str, visitor: VisitorId) -> Option<Decision> {
        if self.modes.get(room) != Mode::SoldOut {
            return None;
        }
        match self.heartbeat(room, &[visitor]).await {
            Ok(states) if states.first() == Some(&VisitorState::Admitted) => None,
            _ => Some(Decision::SoldOut),
        }
    }
}
