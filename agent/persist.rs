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

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: not a file name")]
    NotAFile { path: PathBuf },
    #[error("creating a temporary file in {dir}: {source}")]
    Create { dir: PathBuf, source: std::io::Error },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("replacing {path}: {source}")]
    Replace { path: PathBuf, source: std::io::Error },
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
        .map_err(|source| WriteError::Create {
            dir: dir.to_path_buf(),
            source,
        })?;
    // On any error below, dropping `tmp` removes the temporary file.
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|source| WriteError::Write {
            path: tmp.path().to_path_buf(),
            source,
        })?;
    tmp.persist(path).map_err(|e| WriteError::Replace {
        path: path.to_path_buf(),
        source: e.error,
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
        assert!(matches!(
            write_atomically(&missing, b"x"),
            Err(WriteError::Create { .. })
        ));
        // The target is a directory: the rename fails, the temporary file goes.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("keep"), "x").unwrap();
        let e = write_atomically(&sub, b"x").unwrap_err();
        assert!(matches!(e, WriteError::Replace { .. }), "{e}");
        assert_eq!(names(dir.path()), ["sub"]);
        assert!(matches!(
            write_atomically(Path::new("/"), b"x"),
            Err(WriteError::NotAFile { .. })
        ));
    }
}
