//! The operator's changes to a room's settings beyond the runtime ones of
//! [`super::RoomSettings`]: title, message, paths, caps, shares, lottery, adaptive.
//!
//! The config file seeds a room; what an operator changes while it runs (through the admin
//! API, or a reload of the file) is kept here, in the store, beside the runtime settings,
//! so it survives a restart and every replica reads it. A change is the setting's name as
//! the file spells it and its value in JSON (as the admin API takes it, already
//! validated); each replica derives the room's effective settings from the file and these
//! (the config layer does), and the store applies the part it enforces itself (the
//! lottery, the queue breaker, the per-client shares) through [`RoomChanges::policy`].
//!
//! The store knows nothing else of the values: a new live setting is a name the config
//! layer accepts, not a change of the store. A new policy setting is a key of
//! [`POLICY_KEYS`], read in [`RoomChanges::policy`] (which the embedded store applies
//! whenever the changes or the file's policy move), and its store fields in the Redis
//! store's `update_settings`. Redis keeps each of those fields' values beside the change
//! (`pol:<field>`) and re-applies them when a room is opened: the open's script cannot
//! read the changes themselves (a schedule is RFC 3339 text, a window `"60s"`), and
//! computing the policy in the replica before the open would race a change made through
//! another replica in between.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::time::SystemTime;

use super::{RoomPolicy, Schedule};

/// The settings of a room an operator changed, by the file's name; a name not here has
/// the file's value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RoomChanges(pub BTreeMap<String, Value>);

/// The changes the store applies to the room's [`RoomPolicy`] itself.
pub const POLICY_KEYS: [&str; 8] = [
    "lottery",
    "max_waiting",
    "max_places_per_client",
    "max_sessions_per_client",
    "session_clients",
    "schedule",
    "join_limit_per_ip",
    "join_limit_window",
];

/// The keys of a `schedule` change, each an RFC 3339 time (UTC, as the config layer
/// writes it) or absent/`null` for none.
pub const SCHEDULE_KEYS: [&str; 3] = ["queue_opens_at", "admits_at", "closes_at"];

impl RoomChanges {
    /// Whether nothing is changed (the file's settings hold).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The changed value of `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// These changes with `patch` applied: a value replaces the change of its name, a
    /// `null` removes it (the file's value holds again).
    pub fn merged(&self, patch: &RoomChanges) -> RoomChanges {
        let mut next = self.0.clone();
        for (key, value) in &patch.0 {
            if value.is_null() {
                next.remove(key);
            } else {
                next.insert(key.clone(), value.clone());
            }
        }
        RoomChanges(next)
    }

    /// The policy the store enforces: `file`'s, with the changes of [`POLICY_KEYS`]. A
    /// value of the wrong type (never written by the admin API, which validates) leaves
    /// the file's.
    pub fn policy(&self, file: &RoomPolicy) -> RoomPolicy {
        let count = |key: &str, file: u32| {
            self.get(key)
                .and_then(Value::as_u64)
                .map_or(file, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        RoomPolicy {
            lottery: self
                .get("lottery")
                .and_then(Value::as_bool)
                .unwrap_or(file.lottery),
            max_waiting: self
                .get("max_waiting")
                .and_then(Value::as_u64)
                .unwrap_or(file.max_waiting),
            max_places_per_client: count("max_places_per_client", file.max_places_per_client),
            max_sessions_per_client: count("max_sessions_per_client", file.max_sessions_per_client),
            session_clients: count("session_clients", file.session_clients),
            join_limit_per_ip: count("join_limit_per_ip", file.join_limit_per_ip),
            join_limit_window: self
                .get("join_limit_window")
                .and_then(Value::as_str)
                .and_then(|t| humantime::parse_duration(t).ok())
                .unwrap_or(file.join_limit_window),
            schedule: self
                .get("schedule")
                .and_then(schedule_of)
                .unwrap_or_else(|| file.schedule.clone()),
        }
    }
}

/// A `schedule` change as the store's [`Schedule`]; `None` when it is not an object or a
/// time does not parse (never written by the admin API, which validates).
fn schedule_of(value: &Value) -> Option<Schedule> {
    let fields = value.as_object()?;
    let time = |key: &str| -> Option<Option<SystemTime>> {
        match fields.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(t)) => humantime::parse_rfc3339_weak(t).ok().map(Some),
            Some(_) => None,
        }
    };
    Some(Schedule {
        queue_opens_at: time(SCHEDULE_KEYS[0])?,
        admits_at: time(SCHEDULE_KEYS[1])?,
        closes_at: time(SCHEDULE_KEYS[2])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn changes(v: Value) -> RoomChanges {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_null_gives_the_file_its_setting_back() {
        let live = changes(json!({"title": "Drop", "max_waiting": 10}));
        let next = live.merged(&changes(json!({"title": null, "message": "soon"})));
        assert_eq!(next, changes(json!({"max_waiting": 10, "message": "soon"})));
    }

    #[test]
    fn the_store_applies_only_the_policy_changes() {
        let file = RoomPolicy {
            join_limit_per_ip: 7,
            max_waiting: 100,
            ..RoomPolicy::default().with_default_shares()
        };
        let live = changes(json!({
            "lottery": true, "max_waiting": 5, "session_clients": 2, "title": "x",
            "max_places_per_client": "wrong type"
        }));
        let policy = live.policy(&file);
        assert!(policy.lottery);
        assert_eq!(policy.max_waiting, 5);
        assert_eq!(policy.session_clients, 2);
        assert_eq!(policy.max_places_per_client, file.max_places_per_client);
        assert_eq!(policy.join_limit_per_ip, 7);
        assert_eq!(RoomChanges::default().policy(&file), file);
    }

    #[test]
    fn the_schedule_and_the_join_limit_are_policy_too() {
        let file = RoomPolicy {
            join_limit_per_ip: 7,
            ..RoomPolicy::default()
        };
        let live = changes(json!({
            "schedule": {"queue_opens_at": "2030-01-01T10:00:00Z", "admits_at": "2030-01-01T10:05:00.5Z"},
            "join_limit_per_ip": 3, "join_limit_window": "2m",
        }));
        let policy = live.policy(&file);
        let at = |s: &str| Some(humantime::parse_rfc3339(s).unwrap());
        assert_eq!(policy.schedule.queue_opens_at, at("2030-01-01T10:00:00Z"));
        assert_eq!(
            policy.schedule.admits_at,
            Some(at("2030-01-01T10:05:00Z").unwrap() + std::time::Duration::from_millis(500))
        );
        assert_eq!(policy.schedule.closes_at, None);
        assert_eq!(policy.join_limit_per_ip, 3);
        assert_eq!(
            policy.join_limit_window,
            std::time::Duration::from_secs(120)
        );
        // An empty object is a room without a schedule; a bad one leaves the file's.
        let file = RoomPolicy {
            schedule: live.policy(&file).schedule,
            ..file
        };
        assert!(
            changes(json!({"schedule": {}}))
                .policy(&file)
                .schedule
                .is_empty()
        );
        assert_eq!(
            changes(json!({"schedule": {"admits_at": "soon"}}))
                .policy(&file)
                .schedule,
            file.schedule
        );
    }
}
