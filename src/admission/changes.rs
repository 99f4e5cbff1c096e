//! The operator's changes of each room's settings as this replica last read them (by the
//! statistics refresh every second, and at once after a change made through this
//! replica), and the one listener told when they move: the public listener, which
//! derives the room's settings from the file and these and swaps them in. Nothing here
//! runs on the request path.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::Admission;
use crate::fairness::adaptive::AdaptiveConfig;
use crate::queue::RoomChanges;

/// What applying a room's changes asks of admission: `Some(adaptive)` when the room's
/// closed-loop admission is to be configured anew (`None` inside: off).
pub type Applied = Option<Option<AdaptiveConfig>>;

/// Told `(room, changes)` each time a room's changes differ from the last seen (and once
/// for each room at the first read).
pub type ChangesListener = Arc<dyn Fn(&str, &RoomChanges) -> Applied + Send + Sync>;

/// The changes last seen per room, and who to tell.
#[derive(Default)]
pub(super) struct Changes {
    seen: RwLock<HashMap<String, RoomChanges>>,
    listener: RwLock<Option<ChangesListener>>,
}

impl Admission {
    /// Sets the one listener told when a room's changes move (the public listener's).
    /// Rooms already read are told again, so none is missed.
    pub fn on_changes(&self, listener: ChangesListener) {
        *self
            .changes
            .listener
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(listener);
        self.changes
            .seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Forgets `room`'s changes as last seen, so the listener is told them at the next
    /// read (a reload opened the room anew, with the file's settings alone).
    pub fn forget_changes(&self, room: &str) {
        self.changes
            .seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(room);
    }

    /// Records `room`'s changes as just read or written; tells the listener when they
    /// moved and applies what it asks of admission.
    pub(super) async fn record_changes(&self, room: &str, changes: &RoomChanges) {
        {
            let seen = self.changes.seen.read().unwrap_or_else(|p| p.into_inner());
            if seen.get(room) == Some(changes) {
                return;
            }
        }
        let listener = self
            .changes
            .listener
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.changes
            .seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(room.to_owned(), changes.clone());
        let Some(listener) = listener else { return };
        if let Some(adaptive) = listener(room, changes)
            && let Err(e) = self.configure_adaptive(room, adaptive).await
        {
            tracing::warn!(room, error = %e, "closed-loop admission could not be turned off in the store");
        }
    }
}
