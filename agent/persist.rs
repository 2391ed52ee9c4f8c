//! Writing a file whole or not at all, safely as root.
//!
//! `baseline save FILE` runs as root, often in a directory others can write
//! (/tmp). The bytes go to a temporary file beside FILE, created with
//! O_CREAT|O_EXCL under a random name (the `tempfile` crate), so a symlink or
//! file planted at any name is never opened, let alone written through; then
//! the temporary file is renamed over FILE, which replaces FILE itself even
//! when FILE is a symlink. A reader sees the old file or the new one, never
//! half of one.

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a file could not be written. Each message names the file asked for and the reason
/// once: not the temporary file's random name (a detail of how it is written), and no error
/// chain to repeat it (the OS reason is kept as text, not as a `source`).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: not a file name")]
    NotAFile { path: PathBuf },
    #[error("cannot write {path}: directory {dir} does not exist (create it first, or choose another path)")]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("cannot write {path}: cannot create a file in {dir}: {reason}")]
    Create {
        path: PathBuf,
        dir: PathBuf,
        reason: String,
    },
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("cannot write {path}: replacing it failed: {reason}")]
    Replace { path: PathBuf, reason: String },
}

/// The OS's reason for an I/O error, once: tempfile wraps errors with the temporary path
/// ("... at path \"/dir/.b.json.x1Yz.tmp\""), whose innermost error is the OS's own.
fn reason(e: &std::io::Error) -> String {
    let mut inner: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    match inner.downcast_ref::<std::io::Error>() {
        Some(io) => io.to_string(),
        None if e.raw_os_error().is_some() => e.to_string(),
        None => std::io::Error::from(e.kind()).to_string(),
    }
}

/// Replaces `path` with `bytes` (mode 0644 less the umask), atomically.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let name = path.file_name().ok_or_else(|| WriteError::NotAFile {
        path: path.to_path_buf(),
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound && !dir.exists() {
                WriteError::NoDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                }
            } else {
                WriteError::Create {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                    reason: reason(&source),
                }
            }
        })?;
    // On any error below, dropping `tmp` removes the temporary file.
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|source| WriteError::Write {
            path: path.to_path_buf(),
            reason: reason(&source),
        })?;
    tmp.persist(path).map_err(|e| WriteError::Replace {
        path: path.to_path_buf(),
        reason: reason(&e.error),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn writes_then_replaces_leaving_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("b.json");
        write_atomically(&f, b"one").unwrap();
        write_atomically(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["b.json"]);
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o644, 0, "{mode:o}");
    }

    #[test]
    fn a_link_planted_at_the_old_temporary_name_is_not_followed() {
        // What an earlier version wrote to: FILE.tmp-<its pid>. This process's pid
        // is the one it would have used here.
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let f = dir.path().join("b.json");
        let planted = dir.path().join(format!("b.json.tmp-{}", std::process::id()));
        symlink(&victim, &planted).unwrap();
        write_atomically(&f, b"snapshot").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read(&f).unwrap(), b"snapshot");
        assert_eq!(std::fs::read_link(&planted).unwrap(), victim);
    }

    #[test]
    fn a_target_that_is_a_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let f = dir.path().join("b.json");
        symlink(&victim, &f).unwrap();
        write_atomically(&f, b"snapshot").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&f).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&f).unwrap(), b"snapshot");
    }

    #[test]
    fn failures_are_typed_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/b.json");
        let e = write_atomically(&missing, b"x").unwrap_err();
        assert!(matches!(e, WriteError::NoDirectory { .. }), "{e}");
        // Said once, about the file asked for: no OS error twice, no temporary name.
        let no_dir = dir.path().join("no/such/dir");
        assert_eq!(
            e.to_string(),
            format!(
                "cannot write {}: directory {} does not exist (create it first, or choose another path)",
                missing.display(),
                no_dir.display()
            )
        );
        assert!(std::error::Error::source(&e).is_none());
        // The target is a directory: the rename fails, the temporary file goes.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("keep"), "x").unwrap();
        let e = write_atomically(&sub, b"x").unwrap_err();
        assert!(matches!(e, WriteError::Replace { .. }), "{e}");
        let msg = e.to_string();
        assert!(!msg.contains(".sub.") && !msg.contains(" at path "), "{msg}");
        assert_eq!(msg.matches("os error").count(), 1, "{msg}");
        assert_eq!(names(dir.path()), ["sub"]);
        assert!(matches!(
            write_atomically(Path::new("/"), b"x"),
            Err(WriteError::NotAFile { .. })
        ));
    }
}
