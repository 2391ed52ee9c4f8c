//! Who holds the xtables lock: iptables-legacy (and kube-proxy's `iptables-restore -w 5 -W
//! 100000` in its iptables and IPVS modes) takes an exclusive `flock` on `/run/xtables.lock`
//! for each change; another process that keeps it starves kube-proxy's syncs
//! (kubernetes/kubernetes#48107, aws/amazon-vpc-cni-k8s#2948).
//!
//! The kernel names every holder in `/proc/locks` by device and inode, so the lock file is only
//! `stat`ed (never opened, the lock never taken): the line whose `MAJ:MIN:INODE` is the file's
//! is its holder, a line with `->` a process blocked waiting for it (an `iptables --wait`
//! without a timeout; kube-proxy's `-w 5 -W 100000` polls with `LOCK_NB` and is never listed).
//! The holder is then named from `/proc/<pid>` (name, parent, unit or pod: the nftables
//! watch's `attribute`). How long it has held the lock is history's (`history::xtables_lock`).
//!
//! iptables-nft and nftables take no xtables lock: a node without the file, or whose kernel
//! has no legacy tables while nobody holds or waits for the lock, is reported absent, saying so.

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::parse::{quote, ParseError};
use crate::watch::attribute::{attribute, Writer};

/// The lock file iptables 1.6+ takes (iptables' `XT_LOCK_NAME`; kube-proxy's `LockfilePath16x`).
pub const LOCK_PATH: &str = "/run/xtables.lock";
/// Processes waiting for the lock listed at most; more are only counted.
pub const MAX_WAITERS: usize = 8;

/// The kind of lock a `/proc/locks` line describes (its second field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    /// `flock(2)`: what iptables takes.
    Flock,
    /// `fcntl(2)` record lock.
    Posix,
    /// Open file description lock (`F_OFD_SETLK`): no PID (`-1`).
    Ofdlck,
    /// A file lease or an NFS delegation.
    Lease,
    /// Any other word a kernel prints there.
    Other,
}

/// One lock of `/proc/locks` on the file asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLine {
    /// The 1-based line, for errors.
    pub line: usize,
    pub kind: LockKind,
    /// `->`: this process waits for the lock of the line before, it does not hold it.
    pub blocked: bool,
    /// `WRITE` (exclusive) or not.
    pub exclusive: bool,
    /// The owner's PID in the reader's PID namespace; None for OFD locks (`-1`).
    pub pid: Option<u32>,
}

/// The locks of one file in `/proc/locks`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileLocks {
    /// The file's locks and waiters, in the kernel's order.
    pub locks: Vec<LockLine>,
    /// Lines that did not decode (excluded, never taken for "no holder").
    pub undecoded_lines: u64,
}

/// The device (major, minor) and inode of a file, as `/proc/locks` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

impl FileId {
    /// From `stat`'s `st_dev` as glibc encodes it (`gnu_dev_major`, `gnu_dev_minor`) and `st_ino`.
    pub fn from_stat(dev: u64, inode: u64) -> FileId {
        FileId {
            major: (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32,
            minor: ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32,
            inode,
        }
    }
}

/// `/proc/locks`' `MAJ:MIN:INODE` (major and minor in hex, the inode in decimal).
pub fn parse_file_id(text: &str) -> Option<FileId> {
    let mut parts = text.split(':');
    let (maj, min, ino) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some(FileId {
        major: u32::from_str_radix(maj, 16).ok()?,
        minor: u32::from_str_radix(min, 16).ok()?,
        inode: ino.parse().ok()?,
    })
}

/// The locks of `file` in `/proc/locks`' text (`fs/locks.c`, `lock_get_status`):
///
/// ```text
/// 4: FLOCK  ADVISORY  WRITE 27474 fe:00:10059897 0 EOF
/// 4: -> FLOCK  ADVISORY  WRITE 27483 fe:00:10059897 0 EOF
/// ```
///
/// Lines of other files are skipped unread past their file field, so memory is bounded by the
/// file's own locks; a line that does not decode is counted, never guessed. Errors only on text
/// that is no `/proc/locks` at all (no line decodes).
pub fn parse_locks(source: &str, text: &str, file: FileId) -> Result<FileLocks, ParseError> {
    let mut out = FileLocks::default();
    let mut decoded = 0u64;
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        match parse_line(raw) {
            Some((id, mut lock)) => {
                decoded += 1;
                if id == file {
                    lock.line = i + 1;
                    out.locks.push(lock);
                }
            }
            None => out.undecoded_lines += 1,
        }
    }
    if decoded == 0 && out.undecoded_lines > 0 {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(ParseError::new(
            source,
            1,
            format!(
                "expected `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`, found {}",
                quote(first)
            ),
        ));
    }
    Ok(out)
}

fn parse_line(line: &str) -> Option<(FileId, LockLine)> {
    let mut words = line.split_whitespace();
    let id = words.next()?;
    id.strip_suffix(':')?.parse::<u64>().ok()?;
    let mut kind = words.next()?;
    let blocked = kind == "->";
    if blocked {
        kind = words.next()?;
    }
    let kind = match kind {
        "FLOCK" => LockKind::Flock,
        "POSIX" => LockKind::Posix,
        "OFDLCK" => LockKind::Ofdlck,
        "LEASE" | "DELEG" => LockKind::Lease,
        k if k.bytes().all(|b| b.is_ascii_uppercase()) => LockKind::Other,
        _ => return None,
    };
    let _mode = words.next()?;
    let access = words.next()?;
    let pid: i64 = words.next()?.parse().ok()?;
    let file = parse_file_id(words.next()?)?;
    Some((
        file,
        LockLine {
            line: 0,
            kind,
            blocked,
            exclusive: access == "WRITE",
            pid: u32::try_from(pid).ok().filter(|p| *p > 0),
        },
    ))
}

/// A process on the lock: who it is, as `/proc` tells now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LockProcess {
    /// PID, name, parent, unit or pod.
    #[serde(flatten)]
    pub process: Writer,
    /// Its command line, arguments joined by spaces, cut at 256 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// What the lock looked like at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct XtablesLockFacts {
    /// The lock file, as the node names it.
    pub path: String,
    /// Its device and inode, the key of its lines in `/proc/locks`.
    pub file: FileId,
    /// The process holding the lock now; none: free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<LockProcess>,
    /// Processes blocked waiting for it (at most [`MAX_WAITERS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiters: Vec<LockProcess>,
    /// All processes blocked waiting for it, listed or not.
    pub waiters_total: u32,
    /// Lines of `/proc/locks` that did not decode.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undecoded_lines: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub async fn probe(ctx: &ProbeContext, _deadline: Deadline) -> Result<Probed<XtablesLockFacts>, ProbeError> {
    let host = ctx.host.clone();
    super::blocking(ProbeName::XtablesLock, move || read(&host)).await
}

/// Whether the kernel holds any legacy (x_tables) table in this network namespace.
fn legacy_tables(host: &Host) -> bool {
    ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"]
        .iter()
        .any(|p| {
            host.read_optional(p)
                .ok()
                .flatten()
                .is_some_and(|t| !t.trim().is_empty())
        })
}

fn process(host: &Host, pid: u32) -> LockProcess {
    let name = host
        .read_optional(&format!("/proc/{pid}/comm"))
        .ok()
        .flatten()
        .map(|n| n.trim_end_matches('\n').to_string());
    let command = host
        .read_optional(&format!("/proc/{pid}/cmdline"))
        .ok()
        .flatten()
        .map(|c| c.trim_end_matches('\0').replace('\0', " "))
        .filter(|c| !c.is_empty())
        .map(|c| crate::promtext::clip(c, 256));
    LockProcess {
        process: attribute(host, Some(pid), name),
        command,
    }
}

/// Reads the lock's holder and waiters. Only `stat` touches the lock file.
pub fn read(host: &Host) -> Result<Probed<XtablesLockFacts>, ProbeError> {
    use std::os::unix::fs::MetadataExt;
    let path = host.path(LOCK_PATH);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Probed::Absent(format!(
                "no {}: no iptables-legacy ran on this node (iptables-nft and nftables take no xtables lock)",
                path.display()
            )))
        }
        Err(e) => {
            return Err(ProbeError::Read(crate::host::ReadError::Io {
                path: path.display().to_string(),
                source: e,
            }))
        }
    };
    let file = FileId::from_stat(meta.dev(), meta.ino());
    let source = host.path("/proc/locks").display().to_string();
    let locks = parse_locks(&source, &host.read("/proc/locks")?, file)?;
    let holder_pid = locks.locks.iter().find(|l| !l.blocked).and_then(|l| l.pid);
    let waiting: Vec<u32> = locks.locks.iter().filter(|l| l.blocked).filter_map(|l| l.pid).collect();
    if holder_pid.is_none() && waiting.is_empty() && !legacy_tables(host) {
        return Ok(Probed::Absent(
            "no legacy iptables table in the kernel (/proc/net/ip_tables_names empty) and nobody on the lock: this node's backend (iptables-nft, nftables) takes no xtables lock".into(),
        ));
    }
    Ok(Probed::Present(XtablesLockFacts {
        path: LOCK_PATH.to_string(),
        file,
        holder: holder_pid.map(|p| process(host, p)),
        waiters: waiting.iter().take(MAX_WAITERS).map(|p| process(host, *p)).collect(),
        waiters_total: waiting.len() as u32,
        undecoded_lines: locks.undecoded_lines,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's /proc/locks while `flock /run/xtables.lock sleep 4` held a bind copy of
    /// the lock and `iptables-legacy-restore --wait` waited for it (kernel 6.18, 2026-12-02).
    const SAMPLE: &str = "1: FLOCK  ADVISORY  WRITE 26943 fe:00:6627465 0 EOF
2: FLOCK  ADVISORY  WRITE 26624 fe:00:6627461 0 EOF
3: FLOCK  ADVISORY  WRITE 26288 fe:00:10010666 0 EOF
4: FLOCK  ADVISORY  WRITE 27474 fe:00:10059897 0 EOF
4: -> FLOCK  ADVISORY  WRITE 27483 fe:00:10059897 0 EOF
5: FLOCK  ADVISORY  WRITE 26963 fe:00:6545414 0 EOF
7: FLOCK  ADVISORY  READ 26928 fe:00:10133507 0 EOF
8: POSIX  ADVISORY  WRITE 712 00:19:1234 0 EOF
9: OFDLCK ADVISORY  READ  -1 00:06:9 0 EOF
10: LEASE  ACTIVE    READ 880 08:01:77 0 EOF
";
    const LOCK: FileId = FileId {
        major: 0xfe,
        minor: 0,
        inode: 10059897,
    };

    #[test]
    fn the_holder_and_its_waiter_of_one_file() {
        let l = parse_locks("/proc/locks", SAMPLE, LOCK).unwrap();
        assert_eq!(l.undecoded_lines, 0);
        assert_eq!(
            l.locks,
            vec![
                LockLine {
                    line: 4,
                    kind: LockKind::Flock,
                    blocked: false,
                    exclusive: true,
                    pid: Some(27474)
                },
                LockLine {
                    line: 5,
                    kind: LockKind::Flock,
                    blocked: true,
                    exclusive: true,
                    pid: Some(27483)
                },
            ]
        );
        let ofd = parse_locks(
            "/proc/locks",
            SAMPLE,
            FileId {
                major: 0,
                minor: 6,
                inode: 9,
            },
        )
        .unwrap();
        assert_eq!((ofd.locks[0].kind, ofd.locks[0].pid), (LockKind::Ofdlck, None));
        let lease = parse_locks(
            "/proc/locks",
            SAMPLE,
            FileId {
                major: 8,
                minor: 1,
                inode: 77,
            },
        )
        .unwrap();
        assert_eq!(lease.locks[0].kind, LockKind::Lease);
    }

    #[test]
    fn device_numbers_as_glibc_encodes_them() {
        // stat -c %d of the sample's file: 65024 = 0xfe00.
        assert_eq!(
            FileId::from_stat(65024, 1),
            FileId {
                major: 0xfe,
                minor: 0,
                inode: 1
            }
        );
        // A large minor (device-mapper, NVMe partitions): makedev(259, 300).
        let dev = (259u64 & 0xfff) << 8 | (300u64 & 0xff) | (300u64 & !0xff) << 12;
        assert_eq!(
            FileId::from_stat(dev, 1),
            FileId {
                major: 259,
                minor: 300,
                inode: 1
            }
        );
        assert_eq!(
            parse_file_id("103:12c:5"),
            Some(FileId {
                major: 259,
                minor: 300,
                inode: 5
            })
        );
        assert_eq!(parse_file_id("fe:00"), None);
        assert_eq!(parse_file_id("fe:00:1:2"), None);
        assert_eq!(parse_file_id("zz:00:1"), None);
    }

    #[test]
    fn garbage_is_counted_or_refused_never_a_holder() {
        let mixed = "garbage\n4: FLOCK ADVISORY WRITE x fe:00:10059897 0 EOF\n1: FLOCK  ADVISORY  WRITE 26943 fe:00:6627465 0 EOF\n";
        let l = parse_locks("t", mixed, LOCK).unwrap();
        assert_eq!((l.locks.len(), l.undecoded_lines), (0, 2));
        assert!(parse_locks("t", "not /proc/locks at all\n", LOCK).is_err());
        assert_eq!(parse_locks("t", "", LOCK).unwrap(), FileLocks::default());
        for bad in [
            "4:",
            "4: ->",
            "4: -> FLOCK",
            "-1: FLOCK A W 1 fe:00:1 0 EOF",
            "4: flock A W 1 1:1:1",
            "\u{0}:",
        ] {
            let _ = parse_locks("t", bad, LOCK);
        }
        // A PID out of range is no PID.
        let l = parse_locks("t", "1: FLOCK ADVISORY WRITE 99999999999 fe:00:10059897 0 EOF", LOCK).unwrap();
        assert_eq!(l.locks[0].pid, None);
    }

    #[test]
    fn absent_without_the_file_and_named_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        match read(&host).unwrap() {
            Probed::Absent(why) => assert!(why.contains("take no xtables lock"), "{why}"),
            p => panic!("{p:?}"),
        }
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
        std::fs::write(dir.path().join("run/xtables.lock"), "").unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir.path().join("run/xtables.lock")).unwrap();
        let id = FileId::from_stat(m.dev(), m.ino());
        let line = |pid: u32, blocked: &str| {
            format!(
                "1: {blocked}FLOCK  ADVISORY  WRITE {pid} {:02x}:{:02x}:{} 0 EOF\n",
                id.major, id.minor, id.inode
            )
        };
        std::fs::write(
            dir.path().join("proc/locks"),
            "1: FLOCK  ADVISORY  WRITE 1 00:01:1 0 EOF\n",
        )
        .unwrap();
        assert!(
            matches!(read(&host).unwrap(), Probed::Absent(_)),
            "no legacy table, nobody on it"
        );
        std::fs::write(dir.path().join("proc/locks"), line(4242, "") + &line(4243, "-> ")).unwrap();
        std::fs::write(dir.path().join("proc/4242/comm"), "flock\n").unwrap();
        std::fs::write(
            dir.path().join("proc/4242/cmdline"),
            "flock\0/run/xtables.lock\0sleep\x00600\0",
        )
        .unwrap();
        std::fs::write(dir.path().join("proc/4242/stat"), "4242 (flock) S 880 1 1 0").unwrap();
        std::fs::write(dir.path().join("proc/4242/cgroup"), "0::/system.slice/backup.service\n").unwrap();
        let Probed::Present(f) = read(&host).unwrap() else {
            panic!()
        };
        let h = f.holder.unwrap();
        assert_eq!(h.command.as_deref(), Some("flock /run/xtables.lock sleep 600"));
        assert_eq!(
            h.process.describe(),
            "flock (PID 4242), parent PID 880, unit backup.service"
        );
        assert_eq!(
            (f.waiters_total, f.waiters[0].process.pid, f.waiters[0].process.gone),
            (1, Some(4243), true)
        );
    }
}
