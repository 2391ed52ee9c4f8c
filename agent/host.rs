//! Where the node's files are. Every file read goes under the host root, so
//! tests point the agent at a fixture node and a container reads a host mount.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::netlink::replay::{KernelSource, NodeConn};
use crate::netlink::NlError;

/// Files larger than this are refused: every file the agent reads is small,
/// and a bounded read keeps memory bounded on any input.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    /// Where kernel answers come from, decided once from the root.
    kernel: KernelSource,
}

/// Why a host file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: does not exist")]
    NotFound { path: String },
    #[error("{path}: permission denied ({hint})")]
    PermissionDenied { path: String, hint: &'static str },
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: String, limit: u64 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

impl ReadError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::NotFound { .. })
    }
}

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Host {
            kernel: KernelSource::of(&root),
            root,
        }
    }

    /// The live kernel of the agent's network namespace, every netlink exchange kept in `log`,
    /// with the node's files under `root`: `/` for the node itself, or a fixture node whose
    /// files stay as they are while its netlink answers are recorded (test code only:
    /// `netlink/record.rs`).
    #[cfg(test)]
    pub fn recording(root: impl Into<PathBuf>, log: std::sync::Arc<crate::netlink::record::Log>) -> Self {
        Host {
            root: root.into(),
            kernel: KernelSource::Recording(log),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where kernel answers come from, the one place that says so: on the live
    /// node (host root `/`) the kernel of the agent's network namespace (the
    /// node's, under hostNetwork); under a fixture root with `netlink/` its
    /// recording (`netlink/replay.rs`); under any other root there is no kernel
    /// to ask, and probes read files and recorded command output only. Every
    /// probe's choice between its netlink and its text path reads this.
    pub fn kernel(&self) -> &KernelSource {
        &self.kernel
    }

    /// Where the files that describe the kernel this host's tools and netlink requests reach
    /// (`/proc/modules`, `/sys/module`) are read: `/` for a live kernel (the tools talk to the
    /// running kernel, whatever `--host-root` says), the host root itself for a recorded one,
    /// which the fixture node's own files describe.
    pub fn kernel_files(&self) -> Host {
        match self.kernel {
            KernelSource::Recorded(_) => self.clone(),
            _ => Host::new("/"),
        }
    }

    /// A netlink connection to this host's kernel (live or recorded) for `protocol`.
    pub fn netlink(&self, protocol: isize) -> Result<NodeConn, NlError> {
        self.kernel.open(protocol)
    }

    /// The on-disk path of a node path such as `/proc/net/stat/nf_conntrack`.
    pub fn path(&self, node_path: &str) -> PathBuf {
        self.root.join(node_path.trim_start_matches('/'))
    }

    pub fn exists(&self, node_path: &str) -> bool {
        self.path(node_path).exists()
    }

    /// Reads a whole (small) file as text. Invalid UTF-8 is replaced, so the
    /// parser reports it as garbage with a line number instead of an I/O error.
    pub fn read(&self, node_path: &str) -> Result<String, ReadError> {
        let path = self.path(node_path);
        let shown = path.display().to_string();
        let map = |e: io::Error| match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound { path: shown.clone() },
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied {
                path: shown.clone(),
                hint: permission_hint(node_path),
            },
            _ => ReadError::Io {
                path: shown.clone(),
                source: e,
            },
        };
        let file = std::fs::File::open(&path).map_err(map)?;
        let mut buf = Vec::new();
        // Read one byte past the limit to tell "exactly the limit" from "more".
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf).map_err(map)?;
        if buf.len() as u64 > MAX_FILE_BYTES {
            return Err(ReadError::TooLarge {
                path: shown,
                limit: MAX_FILE_BYTES,
            });
        }
        Ok(match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Reads a file that may legitimately be absent: `Ok(None)` when it does not exist.
    pub fn read_optional(&self, node_path: &str) -> Result<Option<String>, ReadError> {
        match self.read(node_path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Names of the entries of a directory, or `None` when it does not exist.
    pub fn list_dir(&self, node_path: &str) -> Result<Option<Vec<String>>, ReadError> {
        let path = self.path(node_path);
        match std::fs::read_dir(&path) {
            Ok(rd) => Ok(Some(
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect(),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ReadError::Io {
                path: path.display().to_string(),
                source: e,
            }),
        }
    }
}

/// Which privilege a denied read usually lacks, so the error says what to grant.
fn permission_hint(node_path: &str) -> &'static str {
    if node_path.starts_with("/proc/sys/net") || node_path.starts_with("/proc/net") {
        "run in the host network namespace as root; CAP_NET_ADMIN may be needed"
    } else if node_path.starts_with("/proc/") {
        "run with hostPID and as root"
    } else {
        "mount it read-only into the container and run as root"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_go_under_the_root() {
        let h = Host::new("/tmp/node");
        assert_eq!(
            h.path("/proc/sys/kernel/osrelease"),
            PathBuf::from("/tmp/node/proc/sys/kernel/osrelease")
        );
    }

    #[test]
    fn missing_and_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let h = Host::new(dir.path());
        assert!(h.read("/nope").unwrap_err().is_not_found());
        assert_eq!(h.read_optional("/nope").unwrap(), None);
        std::fs::write(dir.path().join("big"), vec![b'1'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let err = h.read("/big").unwrap_err();
        assert!(matches!(err, ReadError::TooLarge { .. }), "{err}");
        std::fs::write(dir.path().join("bin"), [0xff, b'1', b'\n']).unwrap();
        assert_eq!(h.read("/bin").unwrap(), "\u{fffd}1\n");
    }
}
