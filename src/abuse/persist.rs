//! The embedded registry's file, `data_dir/abuse.json`: active bans and the ban log,
//! written atomically through an exclusive, no-follow temporary file with mode 0600,
//! so a crash leaves the old or the new file and a planted symlink is never
//! followed.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{AbuseError, Ban, LogEntry};

/// The embedded abuse state's file (bans and ban log) in `data_dir`.
pub const ABUSE_FILE: &str = "abuse.json";
const TMP_FILE: &str = "abuse.json.tmp";
pub(super) const VERSION: u32 = 1;

/// What the file holds.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Saved {
    pub version: u32,
    pub next_seq: u64,
    /// Oldest first.
    pub bans: Vec<Ban>,
    /// Newest first.
    pub log: Vec<LogEntry>,
}

fn file_error(dir: &Path, reason: impl std::fmt::Display) -> AbuseError {
    AbuseError::File {
        path: dir.join(ABUSE_FILE).display().to_string(),
        reason: reason.to_string(),
    }
}

/// The saved state, or `None` when there is no file yet.
pub(super) fn load(dir: &Path) -> Result<Option<Saved>, AbuseError> {
    let path = dir.join(ABUSE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(file_error(dir, e)),
    };
    let saved: Saved = serde_json::from_slice(&bytes).map_err(|e| {
        file_error(
            dir,
            format!("unreadable ({e}); move it away to start without it"),
        )
    })?;
    if saved.version != VERSION {
        return Err(file_error(
            dir,
            format!("written by a newer anteroom (format {})", saved.version),
        ));
    }
    Ok(Some(saved))
}

/// Writes the state atomically: exclusive no-follow temp file (0600), fsync, rename,
/// fsync of the directory.
pub(super) fn save(dir: &Path, saved: &Saved) -> Result<(), AbuseError> {
    let bytes = serde_json::to_vec(saved).map_err(|e| file_error(dir, e))?;
    let tmp = dir.join(TMP_FILE);
    let open = || {
        OpenOptions::new()
            .write(true)
            // O_CREAT|O_EXCL: never open something already there (a planted file or
            // symlink); O_NOFOLLOW on top, so even a racing symlink is refused.
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o600)
            .open(&tmp)
    };
    let mut file = match open() {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            // A leftover from a crash, or something planted: unlink the name itself
            // (unlinking a symlink never touches its target) and try once more.
            std::fs::remove_file(&tmp)
                .map_err(|e| file_error(dir, format!("remove {TMP_FILE}: {e}")))?;
            open().map_err(|e| file_error(dir, format!("create {TMP_FILE}: {e}")))?
        }
        Err(e) => return Err(file_error(dir, format!("create {TMP_FILE}: {e}"))),
    };
    let written = file.write_all(&bytes).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(file_error(dir, format!("write: {e}")));
    }
    std::fs::rename(&tmp, dir.join(ABUSE_FILE))
        .map_err(|e| file_error(dir, format!("rename: {e}")))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
