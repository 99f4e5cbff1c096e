//! The audit log: one JSON line per admin change in `data_dir/audit.log`
//! (mode 0600), rotated by size to `audit.log.1` … `audit.log.9`.
//!
//! Only operators' acts are written here (admin API changes and config reloads, applied or
//! refused; not automatic bans), so at
//! 10 MiB a file the ten files hold hundreds of thousands of them: enough for a drop's
//! whole incident, even one where the operator bans addresses by script.
//!
//! Writes happen on tokio's blocking pool, one at a time behind a mutex, so a slow disk
//! never stalls the async runtime. A write that fails is reported to the caller (the admin
//! API tells the operator in its response and logs an error) but never undoes or refuses
//! the change itself: in an incident, being able to pause the room matters more than the
//! trail, and the operator is told the trail is broken. The last failure is kept for
//! `GET /__anteroom/admin/api/status`.

use std::fs::File;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;

/// The audit log's file name in `data_dir`; rotated files add `.1`, `.2`, ….
pub const AUDIT_FILE: &str = "audit.log";
/// When the log would grow past this, it is moved to `audit.log.1` (the older ones each
/// move up by one) and a fresh file is started.
pub const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated files kept (`audit.log.1` newest); the oldest beyond is deleted.
pub const ROTATED_KEEP: u32 = 9;

/// One admin action, as written.
#[derive(Clone, Debug, Serialize)]
pub struct AuditEntry {
    /// RFC 3339, milliseconds, UTC.
    pub time: String,
    /// The room the action was on; empty (and left out) for a reload, which names its
    /// rooms in `new`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub room: String,
    /// `config`, `pause`, `resume`, `flush`, …; `reload` for a reread config file that
    /// applied, `reload_refused` for one that changed nothing.
    pub action: &'static str,
    /// The affected values before the action (JSON; `null` when not applicable).
    pub old: serde_json::Value,
    /// The affected values after the action (JSON; `null` when not applicable).
    pub new: serde_json::Value,
    /// The caller's address (trusted-proxy aware); `None` (left out) for an act with no
    /// caller, such as a reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<IpAddr>,
    /// The direct TCP peer, `ip:port` (a proxy's, when behind one); `None` as `caller`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Who acted when nobody called the API: `reload` for the config file reread
    /// (SIGHUP, `anteroom reload`), `event` for a scheduled event applied to its room.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<&'static str>,
    /// The name of the admin token the change was made with (`admin` for `admin_token`,
    /// else its `admin_tokens` name); `None` for a change not made through the API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl AuditEntry {
    /// An entry stamped with the current time.
    pub fn now(
        room: &str,
        action: &'static str,
        old: serde_json::Value,
        new: serde_json::Value,
        caller: IpAddr,
        peer: std::net::SocketAddr,
    ) -> AuditEntry {
        AuditEntry {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            room: room.to_owned(),
            action,
            old,
            new,
            caller: Some(caller),
            peer: Some(peer.to_string()),
            actor: None,
            token: None,
        }
    }

    /// A reload's entry (`action` is `reload`, `reload_refused` or `reload_failed`), its
    /// actor `reload`: what changed from `old` to `new`, or why nothing did in `new`.
    pub fn reload(
        action: &'static str,
        old: serde_json::Value,
        new: serde_json::Value,
    ) -> AuditEntry {
        AuditEntry::by_actor("", action, old, new, "reload")
    }

    /// An entry about `room` made by no caller but `actor` (`event`: a scheduled event
    /// applied to its room).
    pub fn by_actor(
        room: &str,
        action: &'static str,
        old: serde_json::Value,
        new: serde_json::Value,
        actor: &'static str,
    ) -> AuditEntry {
        AuditEntry {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            room: room.to_owned(),
            action,
            old,
            new,
            caller: None,
            peer: None,
            actor: Some(actor),
            token: None,
        }
    }

    /// The entry, naming the admin token it was made with.
    pub fn by_token(mut self, name: &str) -> AuditEntry {
        self.token = Some(name.to_owned());
        self
    }
}

/// An entry that could not be written: the log's path and what the file system said.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the audit log {}: {source}", path.display())]
pub struct AuditError {
    /// The audit log's file.
    pub path: PathBuf,
    /// Why the write failed.
    #[source]
    pub source: io::Error,
}

/// The audit log of one process. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Mutex<Writer>>,
    last_error: Arc<Mutex<Option<String>>>,
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    file: Option<File>,
    size: u64,
}

impl AuditLog {
    /// The log in `data_dir`. Nothing is opened until the first write, so a read-only
    /// `data_dir` does not stop anteroom from starting (the first change reports it).
    pub fn new(data_dir: &Path) -> AuditLog {
        AuditLog::with_max_bytes(data_dir, DEFAULT_MAX_BYTES)
    }

    /// The log in `data_dir`, rotated when it would exceed `max_bytes` (at least 1).
    pub fn with_max_bytes(data_dir: &Path, max_bytes: u64) -> AuditLog {
        AuditLog {
            inner: Arc::new(Mutex::new(Writer {
                path: data_dir.join(AUDIT_FILE),
                max_bytes: max_bytes.max(1),
                file: None,
                size: 0,
            })),
            last_error: Arc::default(),
        }
    }

    /// The current log file's path.
    pub fn path(&self) -> PathBuf {
        self.lock().path.clone()
    }

    /// Appends `entry`, off the async runtime. On failure, logs an error, remembers it for
    /// the status endpoint, and returns it.
    pub async fn append(&self, entry: &AuditEntry) -> Result<(), AuditError> {
        let mut line = serde_json::to_string(entry).expect("an audit entry always serializes");
        line.push('\n');
        let inner = self.inner.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut writer = inner.lock().unwrap_or_else(|p| p.into_inner());
            writer.write_line(line.as_bytes())
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
        let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                *last = None;
                Ok(())
            }
            Err(source) => {
                let error = AuditError {
                    path: self.path(),
                    source,
                };
                tracing::error!(room = %entry.room, action = entry.action, "{error}");
                *last = Some(error.to_string());
                Err(error)
            }
        }
    }

    /// Closes the current file, so the next line opens the log's path afresh (a log
    /// rotator moved the file away: SIGUSR1).
    pub fn reopen(&self) {
        self.lock().file = None;
    }

    /// The last write's failure, if the last write failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Writer {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            self.open()?;
        }
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let file = self.file.as_mut().expect("opened above");
        let written = file.write_all(line).and_then(|()| file.flush());
        if written.is_err() {
            // Reopen next time rather than keep writing to a handle in an unknown state.
            self.file = None;
        }
        written?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn open(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            crate::fsutil::private_dir(dir)?;
        }
        // Never through a link planted at the log's path; 0600 even if it existed looser.
        let file = crate::fsutil::open_append(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let rotated = |n: u32| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        // .8 → .9 (replacing the oldest), …, .1 → .2; a gap (never rotated that far) is
        // fine.
        for n in (1..ROTATED_KEEP).rev() {
            match std::fs::rename(rotated(n), rotated(n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, rotated(1))?;
        self.open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry::now(
            "main",
            "config",
            serde_json::json!({"rate": n}),
            serde_json::json!({"rate": n + 1}),
            "127.0.0.1".parse().unwrap(),
            "127.0.0.1:4000".parse().unwrap(),
        )
    }

    #[tokio::test]
    async fn lines_are_json_with_mode_0600_and_rotate_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::with_max_bytes(dir.path(), 600);
        for n in 0..10 {
            log.append(&entry(n)).await.unwrap();
        }
        let current = std::fs::read_to_string(dir.path().join(AUDIT_FILE)).unwrap();
        let rotated = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
        assert!(current.len() <= 600 && rotated.len() <= 600);
        // Older files move up, none is lost until more than ROTATED_KEEP are full.
        let older = std::fs::read_to_string(dir.path().join("audit.log.2")).unwrap();
        let rate = |text: &str| -> u64 {
            let first: serde_json::Value =
                serde_json::from_str(text.lines().next().unwrap()).unwrap();
            first["old"]["rate"].as_u64().unwrap()
        };
        assert!(rate(&older) < rate(&rotated) && rate(&rotated) < rate(&current));
        for n in 0..200 {
            log.append(&entry(n)).await.unwrap();
        }
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 1 + ROTATED_KEEP as usize);
        let lines: Vec<serde_json::Value> = current
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let last = lines.last().unwrap();
        assert_eq!(last["old"]["rate"], 9);
        assert_eq!(last["new"]["rate"], 10);
        assert_eq!(last["caller"], "127.0.0.1");
        let time = last["time"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(time).is_ok(), "{time}");
        assert_eq!(time.len(), "2024-01-01T00:00:00.000Z".len(), "{time}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for name in [AUDIT_FILE, "audit.log.1"] {
                let mode = std::fs::metadata(dir.path().join(name))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600, "{name}");
            }
        }
        assert!(log.last_error().is_none());
    }

    #[tokio::test]
    async fn a_failing_disk_is_reported_not_hidden() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the directory should be: the log cannot be created.
        let blocked = dir.path().join("not-a-dir");
        std::fs::write(&blocked, b"").unwrap();
        let log = AuditLog::new(&blocked);
        let err = log.append(&entry(1)).await.unwrap_err().to_string();
        assert!(err.contains("audit log"), "{err}");
        assert_eq!(log.last_error(), Some(err));
    }
}
