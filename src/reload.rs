//! Rereading the config file while serving (SIGHUP, which `signals` turns into a call here).
//!
//! The file is loaded exactly as at start ([`crate::config::load`] with the same flags and
//! environment, `*_file` secrets read again) and compared with the config in force:
//!
//! - A file that does not validate is refused whole: the reason is logged and the old
//!   config keeps serving.
//! - A change to a key that cannot apply live (a listen address, the store, the cookie
//!   keys, …) refuses the whole reload: one log
//!   line names every such key, and nothing changes, not even what could have applied.
//! - Otherwise what changed is applied: the admin tokens (`admin_token`, `admin_tokens`,
//!   `metrics_token`) at once; each room's settings that changed in the file (the
//!   runtime ones, `rate`, `max_active`, `session_ttl`, `abandon_after`, `mode`, and every
//!   other live one of [`crate::config::live::LIVE_KEYS`]) are written to the store, as
//!   the admin API's `PUT …/config` would (a setting the file did not
//!   change keeps its live value, so a rate set through the API survives a reload of an
//!   unrelated change); and the rooms themselves:
//!   - A room added is opened in the store (a room the store still holds, from before it
//!     was removed, finds its line and live settings as they were) and served from the
//!     next request: its host, its statistics, its metrics, the admin API's rooms.
//!   - A room removed stops being routed to at once: its host gets what an unconfigured
//!     host gets (the catch-all room if there is one, else the "no such site" answer),
//!     its waiting visitors' live streams and its streams to the origin end, and the
//!     requests already inside it finish. Its line, sessions and settings stay in the
//!     store, untouched: removing a room by mistake, or for a moment (a file edited in
//!     two steps), must not lose anyone's place, and adding it back restores the line.
//!     The cost is the room's store data kept: an operator who wants it gone flushes the
//!     room before removing it.
//!   - A room whose `origin` or `preserve_host` changed is opened anew under the same
//!     name: new requests go to the new origin, the line and sessions (kept by name in
//!     the store) stay, streams to the old origin end.
//!   - A changed `match_host` changes the host table with the rest.
//!
//!   The room table is swapped whole (see `gate`'s room table), so a request sees the
//!   rooms before or after a reload, never a mix.
//! - Every reload is one line in the audit log with the actor `reload`: `reload` with
//!   what changed, `reload_refused` with the keys (or the file's error), `reload_failed`
//!   when the store refused a setting midway.
//!
//! [`plan`] is the comparison alone (no I/O), [`Reloader`] the rereading and applying.

use std::fmt::Debug;

use crate::audit::AuditEntry;
use crate::config::{self, Config, ConfigError, Overrides, RoomConfig};
use crate::gate::{App, BadOrigin};
use crate::queue::{Seeded, SettingsPatch, StoreError};

/// Why a reload changed nothing (or, for [`ReloadError::Store`], not everything).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read or does not validate.
    #[error("the config file is refused; the running config is unchanged: {0}")]
    Config(#[from] ConfigError),
    /// Keys changed that only a restart can change.
    #[error(
        "the reload is refused; nothing changed: {} cannot change without a restart",
        keys.join(", ")
    )]
    NeedsRestart {
        /// The dotted keys, in file order (`listen`, `rooms.main.origin`).
        keys: Vec<String>,
    },
    /// A room's origin cannot be proxied to; nothing changed.
    #[error("the reload is refused; nothing changed: {0}")]
    Origin(#[from] BadOrigin),
    /// The store did not open a room the file adds; nothing changed.
    #[error(
        "the reload is refused; nothing changed: rooms.{room}: the store did not open the room: {source}"
    )]
    Opening {
        /// The room added.
        room: String,
        /// What the store reported.
        #[source]
        source: StoreError,
    },
    /// The store did not take a room's new settings (the rooms before it have theirs;
    /// no room was added or removed, no token replaced).
    #[error("rooms.{room}: the store did not take the new settings: {source}")]
    Store {
        /// The room whose settings were not written.
        room: String,
        /// What the store reported.
        #[source]
        source: StoreError,
    },
}

/// What a reload will change.
#[derive(Debug, Default)]
pub struct Plan {
    /// Rooms new to the file, in its order: opened in the store and served.
    pub added: Vec<String>,
    /// Rooms gone from the file: no longer served (their store data is kept).
    pub removed: Vec<String>,
    /// Rooms whose `origin` or `preserve_host` changed: opened anew under the same name
    /// (the same line in the store).
    pub reopened: Vec<String>,
    /// Whether the host table changes beyond the rooms added and removed (a room's
    /// `match_host`).
    pub hosts: bool,
    /// Per room, the runtime settings the file changed.
    pub settings: Vec<(String, SettingsPatch)>,
    /// Whether an admin or metrics token changed.
    pub tokens: bool,
}

impl Plan {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty() && !self.tokens && !self.rooms_change()
    }

    /// Whether the room table changes (a room added, removed or opened anew, a host).
    pub fn rooms_change(&self) -> bool {
        !self.added.is_empty()
            || !self.removed.is_empty()
            || !self.reopened.is_empty()
            || self.hosts
    }

    /// What the audit line of an applied reload from `old` to `new` says: before and
    /// after, each changed setting's value by room; after, also the rooms added, removed
    /// and opened anew and whether the hosts and the tokens changed.
    pub fn audited(&self, old: &Config, new: &Config) -> (serde_json::Value, serde_json::Value) {
        let values = |config: &Config| -> serde_json::Map<String, serde_json::Value> {
            (self.settings.iter())
                .filter_map(|(room, patch)| {
                    Some((room.clone(), setting_values(patch, config.room(room)?)))
                })
                .collect()
        };
        (
            serde_json::json!({ "settings": values(old) }),
            serde_json::json!({
                "rooms_added": self.added,
                "rooms_removed": self.removed,
                "rooms_reopened": self.reopened,
                "hosts_changed": self.hosts,
                "settings": values(new),
                "tokens_changed": self.tokens,
            }),
        )
    }
}

/// The settings a patch changes, by the file's names (durations in seconds).
fn patch_json(patch: &SettingsPatch) -> serde_json::Value {
    let mut named = serde_json::Map::new();
    let mut put = |key: &str, value: Option<serde_json::Value>| {
        if let Some(value) = value {
            named.insert(key.to_owned(), value);
        }
    };
    put("rate", patch.rate.map(Into::into));
    put("max_active", patch.max_active.map(Into::into));
    put(
        "session_ttl_secs",
        patch.session_ttl.map(|d| d.as_secs_f64().into()),
    );
    put(
        "abandon_after_secs",
        patch.abandon_after.map(|d| d.as_secs_f64().into()),
    );
    put("mode", patch.mode.map(|m| m.as_str().into()));
    for (key, value) in &patch.changes.0 {
        named.insert(key.clone(), value.clone());
    }
    serde_json::Value::Object(named)
}

/// Compares two configs: what can apply live, or every key that cannot.
pub fn plan(old: &Config, new: &Config) -> Result<Plan, Vec<String>> {
    let mut fixed = Vec::new();
    let mut differ = |key: &str, same: bool| {
        if !same {
            fixed.push(key.to_owned());
        }
    };
    let dbg = |a: &dyn Debug, b: &dyn Debug| format!("{a:?}") == format!("{b:?}");
    macro_rules! debug_eq {
        ($($key:literal => $field:ident),* $(,)?) => {
            $( differ($key, dbg(&old.$field, &new.$field)); )*
        };
    }
    debug_eq!(
        "listen" => listen,
        "admit_interval" => admit_interval,
        "secure_cookies" => secure_cookies,
        "public_scheme" => public_scheme,
        "trusted_proxies" => trusted_proxies,
        "data_dir" => data_dir,
        "fail_open" => fail_open,
        "fail_open_after" => fail_open_after,
        "admin_listen" => admin_listen,
        "admin_allow" => admin_allow,
        "access_log" => access_log,
        "abuse" => abuse,
        "pid_file" => pid_file,
    );
    differ("cookie_secret", old.cookie_secret == new.cookie_secret);
    differ(
        "previous_cookie_secrets",
        old.previous_cookie_secrets == new.previous_cookie_secrets,
    );
    differ(
        "priority_secret",
        old.priority_secret == new.priority_secret,
    );
    let public = |c: &Config| {
        c.admission_key
            .as_ref()
            .map(|k| serde_json::to_string(&k.public().document()).unwrap_or_default())
    };
    differ("admission_key", public(old) == public(new));
    differ(
        "waiting_template",
        old.waiting_page.template == new.waiting_page.template,
    );
    differ(
        "waiting_stylesheet",
        old.waiting_page.stylesheet == new.waiting_page.stylesheet,
    );
    differ("origin_ca_file", old.origin_ca_file == new.origin_ca_file);
    differ("redis", old.redis == new.redis);
    differ("kafka", old.kafka == new.kafka);
    differ("server", old.server == new.server);

    let removed: Vec<String> = (old.rooms.iter())
        .filter(|r| new.room(&r.name).is_none())
        .map(|r| r.name.clone())
        .collect();
    let added: Vec<String> = (new.rooms.iter())
        .filter(|r| old.room(&r.name).is_none())
        .map(|r| r.name.clone())
        .collect();
    let mut reopened = Vec::new();
    let mut hosts = false;
    let mut settings = Vec::new();
    for new_room in &new.rooms {
        let Some(old_room) = old.room(&new_room.name) else {
            continue;
        };
        hosts |= old_room.match_host != new_room.match_host;
        if old_room.origin != new_room.origin || old_room.preserve_host != new_room.preserve_host {
            reopened.push(new_room.name.clone());
        }
        let patch = settings_patch(old_room, new_room);
        if patch != SettingsPatch::default() {
            settings.push((new_room.name.clone(), patch));
        }
    }
    if !fixed.is_empty() {
        return Err(fixed);
    }
    let tokens = old.admin_token != new.admin_token
        || old.metrics_token != new.metrics_token
        || old.admin_tokens != new.admin_tokens;
    Ok(Plan {
        added,
        removed,
        reopened,
        hosts,
        settings,
        tokens,
    })
}

/// The runtime settings `new` changes from `old`.
fn settings_patch(old: &RoomConfig, new: &RoomConfig) -> SettingsPatch {
    let changed = |same: bool| !same;
    SettingsPatch {
        rate: changed(old.rate == new.rate).then_some(new.rate),
        max_active: changed(old.max_active == new.max_active).then_some(new.max_active),
        session_ttl: changed(old.session_ttl == new.session_ttl).then_some(new.session_ttl),
        abandon_after: changed(old.abandon_after == new.abandon_after).then_some(new.abandon_after),
        paused: None,
        mode: changed(old.mode == new.mode).then_some(new.mode),
        changes: config::live::changed(old, new),
        expect: None,
    }
}

/// The values in `r` of the settings `patch` changes, under the file's names (durations
/// in seconds): what the audit line shows before and after.
fn setting_values(patch: &SettingsPatch, r: &RoomConfig) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    let mut put = |key: &str, value: serde_json::Value| {
        map.insert(key.to_owned(), value);
    };
    if patch.rate.is_some() {
        put("rate", r.rate.into());
    }
    if patch.max_active.is_some() {
        put("max_active", r.max_active.into());
    }
    if patch.session_ttl.is_some() {
        put("session_ttl_secs", r.session_ttl.as_secs_f64().into());
    }
    if patch.abandon_after.is_some() {
        put("abandon_after_secs", r.abandon_after.as_secs_f64().into());
    }
    if patch.mode.is_some() {
        put("mode", r.mode.as_str().into());
    }
    for key in patch.changes.0.keys() {
        put(key, config::live::canonical(r, key));
    }
    serde_json::Value::Object(map)
}

/// Rereads the config file on request and applies what it can.
pub struct Reloader {
    overrides: Overrides,
    current: tokio::sync::Mutex<Config>,
}

impl Reloader {
    /// A reloader for a process started from `overrides` (naming the config file) with
    /// `config`.
    pub fn new(overrides: Overrides, config: Config) -> Reloader {
        Reloader {
            overrides,
            current: tokio::sync::Mutex::new(config),
        }
    }

    /// Rereads the file and applies it to `app`, logging what changed or why nothing did,
    /// and writing one audit line either way.
    pub async fn reload(&self, app: &App) {
        let entry = match self.try_reload(app).await {
            Ok((plan, entry)) if plan.is_empty() => {
                tracing::info!("config reloaded: nothing that applies live changed");
                entry
            }
            Ok((plan, entry)) => {
                log_applied(&plan);
                entry
            }
            Err(ReloadError::NeedsRestart { keys }) => {
                for key in &keys {
                    tracing::error!(
                        key = %key,
                        "config reload refused: {key} cannot change without a restart; nothing changed"
                    );
                }
                AuditEntry::reload(
                    "reload_refused",
                    serde_json::Value::Null,
                    serde_json::json!({ "keys": keys }),
                )
            }
            Err(e @ ReloadError::Store { .. }) => {
                tracing::error!("config reload failed: {e}");
                AuditEntry::reload(
                    "reload_failed",
                    serde_json::Value::Null,
                    serde_json::json!({ "error": e.to_string() }),
                )
            }
            Err(e) => {
                tracing::error!("config reload failed: {e}");
                AuditEntry::reload(
                    "reload_refused",
                    serde_json::Value::Null,
                    serde_json::json!({ "error": e.to_string() }),
                )
            }
        };
        if let Err(e) = app.admin_state().audit().append(&entry).await {
            tracing::error!(error = %e, "config reload: the audit line could not be written");
        }
    }

    /// The reload itself: what was applied, or why nothing (or not everything) was.
    ///
    /// The order keeps a failure from leaving half a reload behind: the new room table is
    /// built (an origin the proxy cannot use refuses the reload), the rooms added are
    /// opened in the store (a store that does not answer refuses it) and the settings
    /// written (a store failing midway leaves the rooms before it changed, and nothing
    /// else); only then is the table swapped in and the tokens replaced.
    /// Applied, it comes with its audit line (written by [`Reloader::reload`]).
    pub async fn try_reload(&self, app: &App) -> Result<(Plan, AuditEntry), ReloadError> {
        let mut current = self.current.lock().await;
        let loaded = config::load(&self.overrides, &|k| std::env::var(k).ok())?.config;
        let plan = plan(&current, &loaded).map_err(|keys| ReloadError::NeedsRestart { keys })?;
        let table = match plan.rooms_change() {
            true => Some(app.next_rooms(&loaded.rooms, &plan.reopened)?),
            false => None,
        };
        for room in loaded.rooms.iter().filter(|r| plan.added.contains(&r.name)) {
            let seeded =
                app.admission
                    .open_room(room)
                    .await
                    .map_err(|source| ReloadError::Opening {
                        room: room.name.clone(),
                        source,
                    })?;
            if let Seeded::KeptLive(live) = seeded {
                tracing::warn!(
                    room = %room.name,
                    live = ?live,
                    "the store kept this room's live settings from before; they stay"
                );
            }
        }
        for (room, patch) in &plan.settings {
            app.admission
                .update_settings(room, patch)
                .await
                .map_err(|source| ReloadError::Store {
                    room: room.clone(),
                    source,
                })?;
        }
        // The statistics (the control room, the metrics) show the new settings now, and
        // the rooms opened from the moment they are served.
        let changed: Vec<String> = plan.settings.iter().map(|(r, _)| r.clone()).collect();
        app.admission.refresh_stats(&changed).await;
        if let Some(table) = table {
            app.set_rooms(table);
            let opened: Vec<String> = plan.added.iter().chain(&plan.reopened).cloned().collect();
            app.admission.refresh_stats(&opened).await;
        }
        if plan.tokens {
            app.admin_state().set_tokens(&loaded);
        }
        let (old, new) = plan.audited(&current, &loaded);
        *current = loaded;
        Ok((plan, AuditEntry::reload("reload", old, new)))
    }
}

/// The log lines of an applied reload, one per kind of change.
fn log_applied(plan: &Plan) {
    for room in &plan.added {
        tracing::info!(room = %room, "config reloaded: room added; its host is served");
    }
    for room in &plan.removed {
        tracing::info!(
            room = %room,
            "config reloaded: room removed; its host is no longer served (its line stays in the store)"
        );
    }
    for room in &plan.reopened {
        tracing::info!(room = %room, "config reloaded: the room's origin changed; it is served anew");
    }
    if plan.hosts {
        tracing::info!("config reloaded: the host table changed");
    }
    for (room, patch) in &plan.settings {
        tracing::info!(
            room = %room,
            changed = %patch_json(patch),
            "config reloaded: the room's changed settings are live"
        );
    }
    if plan.tokens {
        tracing::info!("config reloaded: the admin tokens are replaced");
    }
}

/// The running process's id in `pid_file` while it runs; the file is removed on drop.
pub struct PidFile {
    path: std::path::PathBuf,
}

/// Why `anteroom reload` could not signal the running instance.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// The pid file could not be read.
    #[error("cannot read the pid file {}: {source}", path.display())]
    Read {
        /// The pid file.
        path: std::path::PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// The pid file holds no process id.
    #[error("the pid file {} holds no process id (got {text:?})", path.display())]
    NotAPid {
        /// The pid file.
        path: std::path::PathBuf,
        /// What it holds.
        text: String,
    },
    /// The signal could not be sent (no such process, or not ours).
    #[error("cannot send SIGHUP to {pid}: {source}")]
    Send {
        /// The process id.
        pid: i32,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Why the pid file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("pid_file: cannot write {}: {source}", path.display())]
pub struct PidFileError {
    /// The pid file.
    pub path: std::path::PathBuf,
    /// Why writing failed.
    #[source]
    pub source: std::io::Error,
}

impl PidFile {
    /// Writes this process's id to `path` (replacing what was there).
    pub fn write(path: &std::path::Path) -> Result<PidFile, PidFileError> {
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|source| {
            PidFileError {
                path: path.to_owned(),
                source,
            }
        })?;
        Ok(PidFile {
            path: path.to_owned(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `anteroom reload`: sends SIGHUP to the process whose id `pid_file` holds.
pub fn signal_reload(pid_file: &std::path::Path) -> Result<i32, SignalError> {
    let text = std::fs::read_to_string(pid_file).map_err(|source| SignalError::Read {
        path: pid_file.to_owned(),
        source,
    })?;
    let not_a_pid = || SignalError::NotAPid {
        path: pid_file.to_owned(),
        text: text.trim().to_owned(),
    };
    let raw: i32 = text.trim().parse().map_err(|_| not_a_pid())?;
    let pid = rustix::process::Pid::from_raw(raw)
        .filter(|_| raw > 0)
        .ok_or_else(not_a_pid)?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).map_err(|e| {
        SignalError::Send {
            pid: raw,
            source: e.into(),
        }
    })?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra_top: &str, room: &str) -> Config {
        let yaml = format!(
            "listen: 127.0.0.1:0\ncookie_secret: {}\nadmin_token: reload-test-admin-token\n{extra_top}rooms:\n  main:\n    origin: http://127.0.0.1:9\n{room}",
            "ab".repeat(32)
        );
        config::from_yaml_str(&yaml, "test.yaml").unwrap()
    }

    #[test]
    fn a_changed_rate_is_a_patch_and_nothing_else_changes() {
        let old = config("", "    rate: 5\n");
        let new = config("", "    rate: 9\n    max_active: 100\n");
        let plan = plan(&old, &new).unwrap();
        assert_eq!(plan.settings.len(), 1);
        let (room, patch) = &plan.settings[0];
        assert_eq!(room, "main");
        assert_eq!(patch.rate, Some(9.0));
        assert_eq!(patch.session_ttl, None);
        assert!(!plan.tokens);
    }

    #[test]
    fn a_changed_live_setting_is_a_change_of_the_store_and_needs_no_restart() {
        let old = config("", "    title: Old\n");
        let new = config(
            "",
            "    title: New\n    bypass_paths: [/health]\n    adaptive: {target_latency: 1s}\n    session_clients: 9\n",
        );
        let plan = plan(&old, &new).unwrap();
        let (_, patch) = &plan.settings[0];
        assert_eq!(
            serde_json::to_value(&patch.changes).unwrap(),
            serde_json::json!({
                "title": "New",
                "bypass_paths": ["/health"],
                "adaptive": {"target_latency": "1s", "max_error_ratio": 0.05, "min_rate": 1.0},
                "session_clients": 9,
            })
        );
        assert_eq!(patch.rate, None);
    }

    #[test]
    fn an_unchanged_file_plans_nothing() {
        let old = config("", "");
        assert!(plan(&old, &config("", "")).unwrap().is_empty());
    }

    #[test]
    fn keys_that_need_a_restart_are_all_named() {
        let old = config("", "");
        let new = {
            let mut c = config("", "    rate: 3\n    join_limit_per_ip: 7\n");
            c.listen = "127.0.0.1:1".parse().unwrap();
            c
        };
        let keys = plan(&old, &new).unwrap_err();
        // The join limit and the schedule are live settings: not among them.
        assert_eq!(keys, ["listen"]);
    }

    #[test]
    fn rooms_added_removed_and_reopened_apply_live() {
        let two = |second: &str, origin: &str| {
            config(
                "",
                &format!(
                    "    match_host: a.example\n  {second}:\n    origin: {origin}\n    match_host: b.example\n"
                ),
            )
        };
        let old = two("shop", "http://127.0.0.1:9");
        let new = two("tickets", "http://127.0.0.1:9");
        let plan = plan(&old, &new).unwrap();
        assert_eq!(plan.added, ["tickets"]);
        assert_eq!(plan.removed, ["shop"]);
        assert!(plan.reopened.is_empty() && !plan.hosts && plan.settings.is_empty());
        assert!(plan.rooms_change() && !plan.is_empty());
        let (_, audited) = plan.audited(&old, &new);
        assert_eq!(audited["rooms_added"][0], "tickets");
        assert_eq!(audited["rooms_removed"][0], "shop");

        let moved = super::plan(&old, &two("shop", "http://127.0.0.1:10")).unwrap();
        assert_eq!(moved.reopened, ["shop"]);
        assert!(moved.added.is_empty() && moved.removed.is_empty());
    }

    #[test]
    fn a_changed_host_changes_the_host_table_only() {
        let old = config("", "    match_host: a.example\n");
        let plan = plan(&old, &config("", "    match_host: c.example\n")).unwrap();
        assert!(plan.hosts && plan.added.is_empty() && plan.reopened.is_empty());
    }

    #[test]
    fn an_applied_reload_audits_each_changed_setting_by_name() {
        let old = config("", "    rate: 5\n");
        let new = config("", "    rate: 9\n    title: Drop\n");
        let plan = plan(&old, &new).unwrap();
        let (before, after) = plan.audited(&old, &new);
        assert_eq!(before["settings"]["main"]["rate"], 5.0);
        assert_eq!(after["settings"]["main"]["rate"], 9.0);
        assert_eq!(after["settings"]["main"]["title"], "Drop");
        assert_eq!(after["tokens_changed"], false);
    }

    #[test]
    fn a_new_admin_token_applies_live() {
        let old = config("", "");
        let mut new = config("", "");
        new.admin_token = crate::config::Secret::from_text("another-admin-token-0123");
        assert!(plan(&old, &new).unwrap().tokens);
    }
}
