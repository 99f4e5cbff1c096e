//! Scheduled events applied to their rooms: once a second (with the statistics refresh)
//! and right after an events write through this replica, each room's current event is
//! worked out from its changes and this replica's clock (the store's, where the store has
//! one in this process); when it differs from the one applied last, its times, its
//! overrides and the new marker go to the store in one settings patch
//! ([`crate::config::events::apply_patch`]), logged and audited with the actor `event`.
//! Every replica runs this; the write is made over the events' revision it read
//! ([`over_revision`], as an operator's write of the events is), so when
//! several replicas see the same event become current, one writes it, and logs and audits
//! it, and the others find it applied.
//!
//! The rule and the keys are the config layer's ([`crate::config::events`]); this file only
//! decides when to write, and records it.

use std::sync::OnceLock;

use serde_json::json;

use super::Admission;
use crate::audit::{AuditEntry, AuditLog};
use crate::config::events::{applied_of, apply_patch, events_of, over_revision, to_apply};
use crate::queue::{RoomChanges, StoreError, StoreResult};

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
        let event = to_apply(&events, applied.as_ref(), now);
        let Some(mut patch) = apply_patch(event, applied.as_ref()) else {
            return Ok(false);
        };
        over_revision(&mut patch, changes);
        match self.update_settings(room, &patch).await {
            Ok(_) => {}
            // Another replica applied it first (or applied another since this read): this
            // one has nothing to write, log or audit.
            Err(StoreError::Conflict(_)) => return Ok(false),
            Err(other) => return Err(other),
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::clock::Clock;
    use crate::config::events::Event;
    use crate::events::EventSink;
    use crate::queue::{
        MemoryStore, Phase, QueueStore, RoomPolicy, SettingsPatch, conformance::settings,
    };

    /// 2030-01-01T00:00:00Z.
    const T0: u64 = 1_893_456_000_000;

    fn event(
        id: &str,
        opens: u64,
        admits: u64,
        closes: Option<u64>,
        rate: f64,
        title: Option<&str>,
    ) -> Event {
        let at =
            |s: u64| std::time::UNIX_EPOCH + Duration::from_millis(T0) + Duration::from_secs(s);
        Event {
            id: id.to_owned(),
            name: String::new(),
            queue_opens_at: at(opens),
            admits_at: at(admits),
            closes_at: closes.map(at),
            rate: Some(rate),
            max_active: None,
            title: title.map(str::to_owned),
            message: None,
            lottery: None,
        }
    }

    fn patch(pairs: Vec<(String, Value)>) -> SettingsPatch {
        SettingsPatch {
            changes: RoomChanges(pairs.into_iter().collect()),
            ..SettingsPatch::default()
        }
    }

    /// A room `main` at T0 in one store, and two replicas' admission layers over it.
    async fn two_replicas() -> (Arc<MemoryStore>, Admission, Admission) {
        let store = Arc::new(MemoryStore::in_memory(Clock::starting_at(T0)));
        store
            .open_room("main", &settings(1.0, 10), &RoomPolicy::default(), false)
            .await
            .unwrap();
        let replica = || Admission::new(store.clone(), None, EventSink::disabled());
        let (a, b) = (replica(), replica());
        (store, a, b)
    }

    #[tokio::test(start_paused = true)]
    async fn each_event_is_applied_once_when_it_becomes_current_by_any_replica() {
        let (store, a, b) = two_replicas().await;
        let one = event("ev-1", 10, 20, Some(30), 5.0, Some("One"));
        let two = event("ev-2", 40, 50, None, 7.0, None);
        store
            .update_settings(
                "main",
                &patch(vec![(one.key(), one.to_json()), (two.key(), two.to_json())]),
            )
            .await
            .unwrap();
        let rooms = ["main".to_owned()];
        let stats = || async { store.stats("main").await.unwrap() };

        // A applies the first; B then has nothing to do.
        a.refresh_stats(&rooms).await;
        let s = stats().await;
        assert_eq!(s.settings.rate, 5.0);
        assert_eq!(s.settings.changes.get("title"), Some(&json!("One")));
        assert_eq!(applied_of(&s.settings.changes), Some(one.clone()));
        assert_eq!(s.schedule, Phase::BeforeOpen);
        assert!(!b.apply_events("main", &s.settings.changes).await.unwrap());

        // Its draw, its doors.
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(stats().await.schedule, Phase::Draw);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(stats().await.schedule, Phase::Queueing);

        // Closed: B applies the next; the first's title stays (overrides stay until changed).
        tokio::time::advance(Duration::from_secs(6)).await;
        b.refresh_stats(&rooms).await;
        let s = stats().await;
        assert_eq!(applied_of(&s.settings.changes), Some(two.clone()));
        assert_eq!((s.settings.rate, s.schedule), (7.0, Phase::BeforeOpen));
        assert_eq!(s.settings.changes.get("title"), Some(&json!("One")));
        assert!(!a.apply_events("main", &s.settings.changes).await.unwrap());

        // The last event stays current, for ever.
        tokio::time::advance(Duration::from_secs(3600)).await;
        let s = stats().await;
        assert_eq!(s.schedule, Phase::Queueing);
        assert!(!a.apply_events("main", &s.settings.changes).await.unwrap());

        // No event left: the marker and the schedule go, the room has none.
        store
            .update_settings(
                "main",
                &patch(vec![(one.key(), Value::Null), (two.key(), Value::Null)]),
            )
            .await
            .unwrap();
        a.refresh_stats(&rooms).await;
        let s = stats().await;
        assert_eq!(
            s.settings.changes.get(crate::config::events::APPLIED_KEY),
            None
        );
        assert_eq!(s.settings.changes.get("schedule"), None);
        assert!(!b.apply_events("main", &s.settings.changes).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_that_read_the_same_revision_apply_an_event_once() {
        let (store, a, b) = two_replicas().await;
        let one = event("ev-1", 10, 20, None, 5.0, None);
        store
            .update_settings("main", &patch(vec![(one.key(), one.to_json())]))
            .await
            .unwrap();
        // Both read the room before either applied its event, as two replicas' refreshes
        // in the same second do: one writes it, the other finds the revision moved.
        let read = store.stats("main").await.unwrap().settings.changes;
        assert!(a.apply_events("main", &read).await.unwrap());
        assert!(!b.apply_events("main", &read).await.unwrap());
        let s = store.stats("main").await.unwrap();
        assert_eq!(applied_of(&s.settings.changes), Some(one));
        assert_eq!(s.settings.rate, 5.0);
    }
}
