//! The files anteroom writes: `data_dir` private (0700), every file 0600, and
//! every write through an exclusive, no-follow temporary file and an atomic rename, so a
//! symlink or file planted in the directory is never followed or overwritten.
//!
//! The one place for this: the snapshot, the audit log and the abuse registry write
//! through here.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of `data_dir` (and the demo's directory).
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file anteroom writes.
pub const FILE_MODE: u32 = 0o600;
/// Tries at a fresh temporary name before giving up (each name is random, so a clash
/// means someone is planting names).
const TRIES: usize = 8;

/// Creates `dir` (and its parents) with mode 0700. An existing directory that others can
/// read or enter is tightened to 0700 with a warning: it holds the queue and the audit log.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{mode:o}"),
            "data_dir is readable by others; tightening it to 0700"
        );
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// A fresh private directory `<parent>/<prefix><random>` (0700), created exclusively (like
/// `mkdtemp`): an existing path of that name, link or not, is never reused.
pub fn fresh_private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    let mut last = None;
    for _ in 0..TRIES {
        let path = parent.join(format!("{prefix}{}", random_suffix()));
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no fresh directory name")))
}

/// Writes `bytes` to `dir/name` atomically: a new temporary file in `dir` opened with
/// `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0600), written, synced, renamed over `name`, and the
/// directory synced. A rename replaces a link planted at `name` rather than following it.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(dir, name, |file| file.write_all(bytes))
}

/// As [`write_atomic`], with the contents written by `write` into the temporary file, so a
/// large file can be streamed rather than built in memory first.
pub fn write_atomic_with(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let (tmp, mut file) = create_temp(dir, name)?;
    let written = write(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Opens `path` for appending (creating it 0600), refusing to follow a symlink at `path`;
/// an existing file is tightened to 0600.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..TRIES {
        let tmp = dir.join(format!(".{name}.{}.tmp", random_suffix()));
        // `create_new` is O_CREAT|O_EXCL: it fails on any existing entry, a dangling
        // symlink included; O_NOFOLLOW says the same twice.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no fresh temporary name")))
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn data_dir_is_created_0700_and_a_loose_one_is_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn atomic_write_is_0600_and_never_follows_a_planted_link() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        private_dir(&dir).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // A link planted where the file goes is replaced, not written through.
        std::os::unix::fs::symlink(&victim, dir.join("snap")).unwrap();
        write_atomic(&dir, "snap", b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(dir.join("snap")).unwrap(), b"new");
        assert!(
            !std::fs::symlink_metadata(dir.join("snap"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(mode(&dir.join("snap")), 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_link_planted_at_the_temporary_path_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = root.path().join("planted");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        // The exclusive open refuses an existing link (what a fixed temp name would hit).
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&link);
        assert!(opened.is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // And open_append refuses to follow a link at the log's path.
        assert!(open_append(&link).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn append_creates_0600() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("log");
        let mut f = open_append(&path).unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn fresh_private_dirs_are_0700_and_distinct() {
        let root = tempfile::tempdir().unwrap();
        let a = fresh_private_dir(root.path(), "demo-").unwrap();
        let b = fresh_private_dir(root.path(), "demo-").unwrap();
        assert_ne!(a, b);
        assert_eq!(mode(&a), 0o700);
    }
}
