//! Who committed: what `/proc` still tells of the process a NEWGEN names, read at once (the
//! writer of a commit is still in its `sendmsg` or just out of it when the notification
//! arrives; kube-proxy's `iptables-restore` and `nft -f -` children exit right after).
//!
//! Pure parsers of `/proc/<pid>/stat` (name, parent) and of a `/proc/<pid>/cgroup` path
//! (systemd unit, pod UID, container ID), then [`attribute`], which reads them through the
//! Host (under `--host-root`, as every probe does).

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::probe::kube_proxy::cgroup::parse_proc_cgroup;

/// The process behind one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    /// NFTA_GEN_PROC_PID: in the initial PID namespace (the node's, with hostPID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// NFTA_GEN_PROC_NAME: its comm at the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its parent, from `/proc/<pid>/stat`; none when the writer was gone before it was looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// The systemd unit of its cgroup (`firewalld.service`, `session-3.scope`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The pod UID and container ID of its cgroup, when it runs in a pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// `/proc/<pid>` was gone (or unreadable) when looked at: its parent is unknown, unless the
    /// kernel's process events told it at the fork (`parent_from_fork`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// The writer had exited; its parent is the kube-proxy the kernel's process events saw it
    /// (or its parent) forked from (`watch::proc_events`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parent_from_fork: bool,
}

impl Writer {
    /// One line: `iptables (PID 4242), parent firewalld (PID 880), unit firewalld.service`.
    pub fn describe(&self) -> String {
        let name = self.name.as_deref().unwrap_or("unknown process");
        let mut s = match self.pid {
            Some(pid) => format!("{name} (PID {pid})"),
            None => name.to_string(),
        };
        match (&self.parent_name, self.parent_pid) {
            (Some(n), Some(p)) => s.push_str(&format!(", parent {n} (PID {p})")),
            (None, Some(p)) => s.push_str(&format!(", parent PID {p}")),
            _ => s.push_str(", parent unknown (the writer had exited)"),
        }
        if let Some(u) = &self.pod_uid {
            s.push_str(&format!(", pod {u}"));
            if let Some(c) = &self.container_id {
                s.push_str(&format!(" container {}", &c[..c.len().min(12)]));
            }
        } else if let Some(u) = &self.unit {
            s.push_str(&format!(", unit {u}"));
        }
        s
    }
}

/// `/proc/<pid>/stat`'s name (comm) and parent PID. The name is between the first `(` and the
/// last `)`: a comm may hold either.
pub fn parse_stat(text: &str) -> Option<(String, i32)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((name, ppid))
}

/// What a cgroup path says of its process: (systemd unit, pod UID, container ID).
pub fn parse_cgroup_path(path: &str) -> (Option<String>, Option<String>, Option<String>) {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut pod = None;
    let mut container = None;
    for (i, p) in parts.iter().enumerate() {
        // systemd driver: kubepods-burstable-pod<uid with _>.slice; cgroupfs: pod<uid>.
        let stem = p.strip_suffix(".slice").unwrap_or(p);
        if let Some(at) = stem.rfind("pod") {
            let uid = &stem[at + 3..];
            let before = &stem[..at];
            if uid.len() >= 32
                && (before.is_empty() || before.ends_with('-'))
                && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'_' || b == b'-')
            {
                pod = Some(uid.replace('_', "-"));
                if let Some(next) = parts.get(i + 1) {
                    let id = next.strip_suffix(".scope").unwrap_or(next);
                    let id = id.rsplit('-').next().unwrap_or(id);
                    if id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                        container = Some(id.to_string());
                    }
                }
            }
        }
    }
    let unit = if pod.is_some() {
        None
    } else {
        parts
            .iter()
            .rev()
            .find(|p| p.ends_with(".service") || p.ends_with(".scope"))
            .map(|p| p.to_string())
    };
    (unit, pod, container)
}

/// The cgroup path of `/proc/<pid>/cgroup`'s text: the unified (v2) line, else the first named
/// hierarchy's (v1 `name=systemd`), else the first.
pub fn cgroup_path(text: &str) -> Option<String> {
    let lines = parse_proc_cgroup(text);
    lines
        .iter()
        .find(|l| l.controllers.is_empty())
        .or_else(|| lines.iter().find(|l| l.controllers.iter().any(|c| c == "name=systemd")))
        .or_else(|| lines.first())
        .map(|l| l.path.clone())
}

pub(crate) fn stat(host: &Host, pid: i64) -> Option<(String, i32)> {
    host.read_optional(&format!("/proc/{pid}/stat"))
        .ok()
        .flatten()
        .and_then(|t| parse_stat(&t))
}

/// What `/proc` says of the writer `pid` (named `name` by the NEWGEN) now.
pub fn attribute(host: &Host, pid: Option<u32>, name: Option<String>) -> Writer {
    let mut w = Writer {
        pid,
        name,
        ..Default::default()
    };
    let Some(pid) = pid else {
        w.gone = true;
        return w;
    };
    // A process being reaped still has its /proc/<pid>/stat a moment, with its parent as 0
    // (the kernel reports no parent once the task is no longer alive, fs/proc/array.c): that is
    // a writer gone, not one without a parent. Only PID 1 (and kernel threads' 2) have none.
    let Some((_, ppid)) = stat(host, pid.into()).filter(|&(_, ppid)| ppid != 0 || pid <= 2) else {
        w.gone = true;
        return w;
    };
    w.parent_pid = Some(ppid);
    w.parent_name = stat(host, ppid.into()).map(|(n, _)| n);
    if let Some(path) = host
        .read_optional(&format!("/proc/{pid}/cgroup"))
        .ok()
        .flatten()
        .and_then(|t| cgroup_path(&t))
    {
        (w.unit, w.pod_uid, w.container_id) = parse_cgroup_path(&path);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_with_parentheses_and_spaces() {
        // This machine's /proc/self/stat, shortened; and a comm that holds ") (".
        assert_eq!(
            parse_stat("14071 (iptables-nft-re) S 14060 14071 14060 0 -1 4194560 140"),
            Some(("iptables-nft-re".into(), 14060))
        );
        assert_eq!(parse_stat("7 (a) (b) R 1 7 7"), Some(("a) (b".into(), 1)));
        assert_eq!(parse_stat("7 (a"), None);
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("7 (x) S notanumber"), None);
    }

    #[test]
    fn cgroups_name_units_pods_and_containers() {
        // systemd driver (kubelet's default with cgroup v2), cgroupfs driver, a service, a session.
        assert_eq!(
            parse_cgroup_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3f1a2b4c_5d6e_7f80_9a1b_2c3d4e5f6a7b.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"),
            (
                None,
                Some("3f1a2b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b".into()),
                Some("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into())
            )
        );
        assert_eq!(
            parse_cgroup_path("/kubepods/besteffort/pod3f1a2b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b/0123456789abcdef0123"),
            (
                None,
                Some("3f1a2b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b".into()),
                Some("0123456789abcdef0123".into())
            )
        );
        assert_eq!(
            parse_cgroup_path("/system.slice/firewalld.service"),
            (Some("firewalld.service".into()), None, None)
        );
        assert_eq!(
            parse_cgroup_path("/user.slice/user-0.slice/session-3.scope"),
            (Some("session-3.scope".into()), None, None)
        );
        assert_eq!(parse_cgroup_path("/"), (None, None, None));
        assert_eq!(
            cgroup_path("12:pids:/a\n1:name=systemd:/system.slice/x.service\n0::/system.slice/y.service\n"),
            Some("/system.slice/y.service".into())
        );
        assert_eq!(
            cgroup_path("12:pids:/a\n1:name=systemd:/system.slice/x.service\n"),
            Some("/system.slice/x.service".into())
        );
    }

    #[test]
    fn a_writer_gone_is_named_with_its_parent_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let w = attribute(&host, Some(4242), Some("iptables".into()));
        assert!(w.gone);
        assert_eq!(
            w.describe(),
            "iptables (PID 4242), parent unknown (the writer had exited)"
        );
        // And one that is there, with its parent and cgroup.
        std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc/880")).unwrap();
        std::fs::write(dir.path().join("proc/4242/stat"), "4242 (iptables) S 880 1 1 0").unwrap();
        std::fs::write(dir.path().join("proc/880/stat"), "880 (firewalld) S 1 1 1 0").unwrap();
        std::fs::write(
            dir.path().join("proc/4242/cgroup"),
            "0::/system.slice/firewalld.service\n",
        )
        .unwrap();
        let w = attribute(&host, Some(4242), Some("iptables".into()));
        assert_eq!(
            w.describe(),
            "iptables (PID 4242), parent firewalld (PID 880), unit firewalld.service"
        );
    }

    /// Read while it is being reaped, a writer's stat names parent 0: it is gone, and the
    /// process events or its name decide whose it was, not "no parent".
    #[test]
    fn a_writer_read_while_reaped_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
        std::fs::write(dir.path().join("proc/4242/stat"), "4242 (iptables-nft-re) X 0 0 0 0").unwrap();
        let w = attribute(&host, Some(4242), Some("iptables-nft-re".into()));
        assert!(w.gone, "{w:?}");
        assert_eq!(w.parent_pid, None);
        // PID 1 has no parent and is there.
        std::fs::create_dir_all(dir.path().join("proc/1")).unwrap();
        std::fs::write(dir.path().join("proc/1/stat"), "1 (systemd) S 0 1 1 0").unwrap();
        let w = attribute(&host, Some(1), Some("systemd".into()));
        assert!(!w.gone);
        assert_eq!(w.parent_pid, Some(0));
    }
}
