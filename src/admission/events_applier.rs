//! Scheduled events applied to their rooms: once a second (with the statistics refresh)
//! and right after an events write through this replica, each room's current event is
//! worked out from its changes and this replica's clock (the store's, where the store has
//! one in this process); when it differs from the one applied last, its times, its
//! overrides and the new marker go to the store in one settings patch
//! ([`crate::config::events::apply_patch`]), logged and audited with the actor `event`.
//! Every replica runs this; two writing the same event at once write the same values.
//!
//! The rule and the keys are the config layer's ([`crate::config::events`]); this file only
//! decides when to write, and records it.

use std::sync::OnceLock;

use serde_json::json;

use super::Admission;
use crate::audit::{AuditEntry, AuditLog};
use crate::config::events::{applied_of, apply_patch, current, events_of};
use crate::queue::{RoomChanges, StoreResult};

/// Where the applier writes its audit lines: set once by the wiring.
#[derive(Default)]
pub(super) struct EventAudit(OnceLock<AuditLog>);

impl Admission {
    /// The audit log the events' applications are written to (the admin's).
    pub fn set_audit(&self, log: AuditLog) {
        let _ = self.event_audit.0.set(log);
    }

    /// Applies `room`'s current event if it is not the one applied (see the module
    /// documentation); `changes` are the room's as just read. Whether it wrote.
    pub async fn apply_events(&self, room: &str, changes: &RoomChanges) -> StoreResult<bool> {
        let events = events_of(changes);
        let applied = applied_of(changes);
        let now = self.now_ms();
        let event = current(&events, now);
        let Some(patch) = apply_patch(event, applied.as_ref()) else {
            return Ok(false);
        };
        self.update_settings(room, &patch).await?;
        let (action, new) = match event {
            Some(e) => ("event.apply", e.to_json()),
            None => ("event.clear", json!(null)),
        };
        let old = applied.map_or(json!(null), |e| e.to_json());
        tracing::info!(room, action, event = %new, "event: the room's current event applied");
        self.events.publish(crate::events::Event::config_changed(
            room,
            json!({ "action": action, "old": old.clone(), "new": new.clone() }),
        ));
        if let Some(log) = self.event_audit.0.get() {
            // A failed write is logged by the audit log; the change stands.
            let _ = log
                .append(&AuditEntry::by_actor(room, action, old, new, "event"))
                .await;
        }
        Ok(true)
    }
}
