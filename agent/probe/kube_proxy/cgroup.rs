//! kube-proxy's cgroup, as a pod sees it: its memory limit and usage, its CPU quota and how
//! often it was throttled, read from the node's cgroup filesystem (`--host-cgroup-root`,
//! default `<host root>/sys/fs/cgroup`; the DaemonSet mounts the host's there read-only).
//!
//! Finding the directory is the hard part. `/proc/<pid>/cgroup` shows paths relative to the
//! *reader's* cgroup namespace: in a pod (a private namespace, the Kubernetes default on cgroup
//! v2) kube-proxy's path reads `/../../kubepods-besteffort.slice/…`, and the agent's own
//! `/proc/self/cgroup` reads `0::/`, so the agent's place in the host hierarchy, which the path
//! is relative to, cannot be read from `/proc` at all. [`locate`] therefore takes an absolute
//! path as it is when that directory holds the process, and otherwise searches the mount
//! (bounded: [`MAX_SEARCH_DIRS`] directories): for a directory whose path ends with the part
//! after the `..`s, confirmed by the PID in its `cgroup.procs` when that file can be read, or,
//! with nothing to match, for the directory whose `cgroup.procs` lists the PID.
//!
//! cgroup v2: `memory.max`, `memory.current`, `cpu.max`, `cpu.stat` (`nr_periods`,
//! `nr_throttled`, `throttled_usec`). cgroup v1 (or hybrid, where the controllers are v1):
//! `memory.limit_in_bytes`, `memory.usage_in_bytes`, `cpu.cfs_quota_us`, `cpu.cfs_period_us`,
//! `cpu.stat` (`nr_periods`, `nr_throttled`, `throttled_time` in ns).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::Host;

/// Directories the search visits at most, and how deep it goes. A node with 110 pods has a
/// few hundred cgroup directories per hierarchy.
pub const MAX_SEARCH_DIRS: usize = 20_000;
const MAX_DEPTH: usize = 32;
/// cgroup v1 writes "no limit" as a huge number (`9223372036854771712` on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 60;

/// CFS bandwidth statistics of a cgroup: counters since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuStat {
    /// Enforcement periods (`cpu.cfs_period_us` long) in which the cgroup had runnable tasks.
    pub periods_total: u64,
    /// Periods in which it used up its quota and was throttled.
    pub throttled_periods_total: u64,
    /// Total time it was throttled, in seconds.
    pub throttled_seconds_total: f64,
}

/// How the directory was found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// `/proc/<pid>/cgroup`'s absolute path, under the cgroup root.
    #[default]
    Path,
    /// A search of the cgroup root (the path was relative to another namespace, or absent).
    Search,
}

/// kube-proxy's cgroup, read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupFacts {
    /// 1 or 2: the version its memory and cpu controllers are mounted with.
    pub version: u8,
    /// The directory the memory (v1) or unified (v2) files were read from, under the root.
    pub path: String,
    pub found_by: FoundBy,
    /// `memory.max` / `memory.limit_in_bytes`; None when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// `memory.current` / `memory.usage_in_bytes` (page cache included).
    pub memory_usage_bytes: Option<u64>,
    /// `cpu.max` / `cpu.cfs_quota_us ÷ cpu.cfs_period_us`, in cores; None when unlimited.
    pub cpu_limit_cores: Option<f64>,
    /// The CFS quota (CPU time per period), in seconds; None when unlimited.
    #[serde(default)]
    pub cpu_quota_seconds: Option<f64>,
    /// The CFS period, in seconds; None when unlimited.
    #[serde(default)]
    pub cpu_period_seconds: Option<f64>,
    /// `cpu.stat`'s throttling counters, when the cpu controller is there.
    pub cpu: Option<CpuStat>,
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`; malformed lines are skipped.
pub fn parse_proc_cgroup(text: &str) -> Vec<CgroupLine> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            path.starts_with('/').then(|| CgroupLine {
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// Splits a `/proc/<pid>/cgroup` path into its leading `..` count and the components after
/// them; None for a `..` after a name, `.`, or an empty name in the middle.
pub fn split_relative(path: &str) -> Option<(usize, Vec<&str>)> {
    let mut ups = 0;
    let mut tail = Vec::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        match c {
            ".." if tail.is_empty() => ups += 1,
            ".." | "." => return None,
            name => tail.push(name),
        }
    }
    Some((ups, tail))
}

/// Whether `procs` (a `cgroup.procs` file) lists `pid`.
fn lists(procs: &str, pid: i32) -> bool {
    procs.lines().any(|l| l.trim().parse::<i32>() == Ok(pid))
}

/// The directory under `mount` (a cgroup hierarchy's root) that holds `pid`, given the path
/// `/proc/<pid>/cgroup` shows for it. See the module documentation.
pub fn locate(mount: &Path, proc_path: &str, pid: i32) -> Option<(PathBuf, FoundBy)> {
    let (ups, tail) = split_relative(proc_path)?;
    let procs = |dir: &Path| std::fs::read_to_string(dir.join("cgroup.procs")).ok();
    if ups == 0 {
        let dir = tail.iter().fold(mount.to_path_buf(), |d, c| d.join(c));
        if dir.is_dir() && procs(&dir).is_none_or(|p| lists(&p, pid)) {
            return Some((dir, FoundBy::Path));
        }
    }
    let dirs = walk(mount);
    if !tail.is_empty() {
        let ends_with_tail = |dir: &&PathBuf| {
            dir.strip_prefix(mount).is_ok_and(|rel| {
                let names = rel.components().rev().map(|c| c.as_os_str());
                names.take(tail.len()).eq(tail.iter().rev().map(std::ffi::OsStr::new))
            })
        };
        let matches: Vec<&PathBuf> = dirs.iter().filter(ends_with_tail).collect();
        // Several directories can end the same way (a pod slice and a stale copy): the PID
        // decides; a single one without a readable cgroup.procs is taken as is.
        let confirmed: Vec<&&PathBuf> = matches
            .iter()
            .filter(|d| procs(d).is_some_and(|p| lists(&p, pid)))
            .collect();
        match (confirmed.as_slice(), matches.as_slice()) {
            ([one], _) => return Some(((**one).clone(), FoundBy::Search)),
            ([], [only]) if procs(only).is_none() => return Some(((*only).clone(), FoundBy::Search)),
            _ => {}
        }
    }
    // Nothing to match, or the match does not hold the PID: the directory that does.
    dirs.into_iter()
        .find(|d| procs(d).is_some_and(|p| lists(&p, pid)))
        .map(|d| (d, FoundBy::Search))
}

/// Every directory under `mount` (itself included), breadth first, without following symlinks
/// (v1's `cpu -> cpu,cpuacct`), at most [`MAX_SEARCH_DIRS`] of them, [`MAX_DEPTH`] deep.
fn walk(mount: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([(mount.to_path_buf(), 0usize)]);
    while let Some((dir, depth)) = queue.pop_front() {
        if out.len() >= MAX_SEARCH_DIRS {
            break;
        }
        if depth < MAX_DEPTH {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let mut children: Vec<PathBuf> = entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect();
                children.sort();
                queue.extend(children.into_iter().map(|c| (c, depth + 1)));
            }
        }
        out.push(dir);
    }
    out
}

/// A limit file: a number of bytes, or `max` (v2) / a huge number (v1) for none.
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&b| b < V1_UNLIMITED)
}

/// cgroup v2 `cpu.max`: `max 100000` (no limit) or `QUOTA PERIOD`, in cores.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    cpu_max_micros(text).map(|(quota, period)| quota / period)
}

/// cgroup v2 `cpu.max` as (quota, period) in microseconds, as the file has them; None for
/// `max` (no limit) or garbage.
fn cpu_max_micros(text: &str) -> Option<(f64, f64)> {
    let mut it = text.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (period > 0.0 && quota >= 0.0).then_some((quota, period))
}

/// (limit in cores, quota in seconds, period in seconds) of a quota and period in microseconds.
fn cpu_limit(micros: Option<(f64, f64)>) -> (Option<f64>, Option<f64>, Option<f64>) {
    match micros {
        Some((q, p)) => (Some(q / p), Some(q / 1e6), Some(p / 1e6)),
        None => (None, None, None),
    }
}

/// `cpu.stat`, v2 (`throttled_usec`) or v1 (`throttled_time`, ns); None without `nr_periods`.
pub fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse::<u64>().ok()).flatten()
        })
    };
    let throttled_seconds_total = match (field("throttled_usec"), field("throttled_time")) {
        (Some(us), _) => us as f64 / 1e6,
        (None, Some(ns)) => ns as f64 / 1e9,
        (None, None) => 0.0,
    };
    Some(CpuStat {
        periods_total: field("nr_periods")?,
        throttled_periods_total: field("nr_throttled").unwrap_or(0),
        throttled_seconds_total,
    })
}

/// Reads `pid`'s cgroup under `root` (the node's cgroup filesystem). `Err` says why it could
/// not be found; a missing file is only a missing value.
pub fn read(host: &Host, root: &Path, pid: i32) -> Result<CgroupFacts, String> {
    let shown = format!("/proc/{pid}/cgroup");
    let text = host.read(&shown).map_err(|e| e.to_string())?;
    let lines = parse_proc_cgroup(&text);
    let files = Host::new(root);
    let file = |dir: &Path, name: &str| {
        let rel = dir.join(name);
        let rel = rel.strip_prefix(root).unwrap_or(&rel);
        files.read_optional(&rel.to_string_lossy()).ok().flatten()
    };
    let shown_path = |dir: &Path| format!("/{}", dir.strip_prefix(root).unwrap_or(dir).display());
    let v1 = |controller: &str| lines.iter().find(|l| l.controllers.iter().any(|c| c == controller));
    if let Some(mem) = v1("memory") {
        // v1 controllers are mounted one directory each, co-mounted ones by their joined name.
        let mount = |line: &CgroupLine| {
            let joined = root.join(line.controllers.join(","));
            if joined.is_dir() {
                joined
            } else {
                root.join(&line.controllers[0])
            }
        };
        let (mem_dir, found_by) = locate(&mount(mem), &mem.path, pid)
            .ok_or_else(|| format!("{pid}'s memory cgroup {:?} is not under {}", mem.path, root.display()))?;
        let cpu_dir = v1("cpu").and_then(|l| locate(&mount(l), &l.path, pid)).map(|(d, _)| d);
        // Quota -1 when unlimited.
        let (cpu_limit_cores, cpu_quota_seconds, cpu_period_seconds) = cpu_limit(cpu_dir.as_ref().and_then(|d| {
            let quota: f64 = file(d, "cpu.cfs_quota_us")?.trim().parse().ok()?;
            let period: f64 = file(d, "cpu.cfs_period_us")?.trim().parse().ok()?;
            (quota > 0.0 && period > 0.0).then_some((quota, period))
        }));
        return Ok(CgroupFacts {
            version: 1,
            path: shown_path(&mem_dir),
            found_by,
            memory_limit_bytes: file(&mem_dir, "memory.limit_in_bytes").and_then(|t| parse_limit(&t)),
            memory_usage_bytes: file(&mem_dir, "memory.usage_in_bytes").and_then(|t| parse_limit(&t)),
            cpu_limit_cores,
            cpu_quota_seconds,
            cpu_period_seconds,
            cpu: cpu_dir
                .and_then(|d| file(&d, "cpu.stat"))
                .and_then(|t| parse_cpu_stat(&t)),
        });
    }
    let unified = lines
        .iter()
        .find(|l| l.controllers.is_empty())
        .ok_or_else(|| format!("{shown}: no cgroup v2 line and no v1 memory controller"))?;
    // Pure v2 mounts the unified hierarchy at the root; hybrid at root/unified.
    let mount = if root.join("cgroup.controllers").is_file() {
        root.to_path_buf()
    } else {
        root.join("unified")
    };
    let (dir, found_by) = locate(&mount, &unified.path, pid)
        .ok_or_else(|| format!("{pid}'s cgroup {:?} is not under {}", unified.path, mount.display()))?;
    let (cpu_limit_cores, cpu_quota_seconds, cpu_period_seconds) =
        cpu_limit(file(&dir, "cpu.max").and_then(|t| cpu_max_micros(&t)));
    Ok(CgroupFacts {
        version: 2,
        path: format!("/{}", dir.strip_prefix(&mount).unwrap_or(&dir).display()),
        found_by,
        memory_limit_bytes: file(&dir, "memory.max").and_then(|t| parse_limit(&t)),
        memory_usage_bytes: file(&dir, "memory.current").and_then(|t| parse_limit(&t)),
        cpu_limit_cores,
        cpu_quota_seconds,
        cpu_period_seconds,
        cpu: file(&dir, "cpu.stat").and_then(|t| parse_cpu_stat(&t)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("-1 100000\n"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("268435456\n"), Some(268_435_456));
        let v2 =
            "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 200\nnr_throttled 50\nthrottled_usec 2500000\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Some(CpuStat {
                periods_total: 200,
                throttled_periods_total: 50,
                throttled_seconds_total: 2.5
            })
        );
        let v1 = "nr_periods 10\nnr_throttled 3\nthrottled_time 1500000000\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(parse_cpu_stat(v1).unwrap().throttled_seconds_total, 1.5);
        // v2 without the cpu controller enabled has usage only.
        assert_eq!(parse_cpu_stat("usage_usec 100\n"), None);
        assert_eq!(split_relative("/../../a/b"), Some((2, vec!["a", "b"])));
        assert_eq!(split_relative("/"), Some((0, vec![])));
        assert_eq!(split_relative("/a/../b"), None);
        let lines = parse_proc_cgroup("12:memory:/k/p\n4:cpu,cpuacct:/k/p\n0::/\nbad\n");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1].controllers, ["cpu", "cpuacct"]);
        assert!(lines[2].controllers.is_empty());
    }

    fn mkdir(root: &Path, rel: &str, pids: Option<&str>) -> PathBuf {
        let d = root.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        if let Some(p) = pids {
            std::fs::write(d.join("cgroup.procs"), p).unwrap();
        }
        d
    }

    #[test]
    fn locate_relative_paths_by_their_tail_and_the_pid() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let kp = mkdir(root, "kubepods.slice/be.slice/be-pod1.slice/cri-a.scope", Some("42\n"));
        mkdir(root, "kubepods.slice/bu.slice/bu-pod2.slice/cri-b.scope", Some("7\n"));
        // Absolute and right: taken as is.
        let abs = "/kubepods.slice/be.slice/be-pod1.slice/cri-a.scope";
        assert_eq!(locate(root, abs, 42), Some((kp.clone(), FoundBy::Path)));
        // Relative to the agent's namespace: found by its tail.
        let rel = "/../../../be.slice/be-pod1.slice/cri-a.scope";
        assert_eq!(locate(root, rel, 42), Some((kp.clone(), FoundBy::Search)));
        // A stale directory with the same tail elsewhere: the PID decides.
        mkdir(root, "old/be.slice/be-pod1.slice/cri-a.scope", Some(""));
        assert_eq!(locate(root, rel, 42), Some((kp.clone(), FoundBy::Search)));
        // Absolute but not holding the PID (another namespace's view): searched by PID.
        let other = "/old/be.slice/be-pod1.slice/cri-a.scope";
        assert_eq!(locate(root, other, 42), Some((kp.clone(), FoundBy::Search)));
        // Nothing to match ("/" in a private namespace), or a tail found nowhere: the PID alone.
        assert_eq!(locate(root, "/../..", 42), Some((kp.clone(), FoundBy::Search)));
        assert_eq!(locate(root, "/../../nowhere", 42), Some((kp, FoundBy::Search)));
        assert_eq!(locate(root, "/../../nowhere", 99), None);
        assert_eq!(locate(root, "/a/../b", 42), None);
        // A tail without cgroup.procs (a partial copy of a node): one match is taken.
        let t = tempfile::tempdir().unwrap();
        let only = mkdir(t.path(), "a/b/c", None);
        assert_eq!(locate(t.path(), "/../b/c", 42), Some((only, FoundBy::Search)));
        assert_eq!(locate(t.path(), "/nope", 42), None);
    }
}
