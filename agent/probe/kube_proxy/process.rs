//! Which process is kube-proxy. A name proves nothing: with hostPID any pod's process can be
//! called `kube-proxy` (a binary of that name, or `prctl(PR_SET_NAME)`), and on a node without
//! kube-proxy such an impostor must not page anyone, nor hide the real one behind a lower PID.
//!
//! [`scan`] lists the *candidates*: processes whose name (comm) and argv[0]'s basename are both
//! `kube-proxy`, not zombies, with their start time, command line and cgroup. [`identify`]
//! picks kube-proxy among them: the one whose start time agrees with the
//! `process_start_time_seconds` kube-proxy's own `/metrics` reports (client_golang computes it
//! from the same `/proc/<pid>/stat` field and the boot time), or the only candidate when nothing
//! can be compared (then it is unconfirmed). Several candidates that nothing tells apart are
//! ambiguous: no process is taken for kube-proxy, and evaluation says so.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ProcessFacts;
use crate::host::Host;
use crate::parse::{quote, ParseError};
use crate::probe::ProbeError;

/// kube-proxy's name, as comm and as argv[0]'s basename (`--kube-proxy.process-name`'s default).
pub const NAME: &str = "kube-proxy";
/// The kernel keeps a process's comm to 15 bytes (TASK_COMM_LEN 16, with its NUL).
pub const COMM_BYTES: usize = 15;
/// Start times within this many seconds are the same process: both sides read the same
/// clock-tick field, but `btime` is whole seconds and moves by one when NTP steps the clock.
pub const START_TOLERANCE_SECONDS: f64 = 2.0;
/// Candidates listed at most; more are only counted.
pub const MAX_CANDIDATES: usize = 16;
/// Longest command line and cgroup path kept, in bytes.
const MAX_TEXT_BYTES: usize = 256;

/// How sure the agent is that a process is kube-proxy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Identity {
    /// Its start time agrees with `process_start_time_seconds` from kube-proxy's `/metrics`.
    Confirmed,
    /// The only candidate, with nothing to compare its start time with (`/metrics` does not
    /// answer, or has no `process_start_time_seconds`).
    #[default]
    Unconfirmed,
}

/// A process that looks like kube-proxy (comm and argv[0]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessCandidate {
    pub pid: i32,
    /// Unix time it started, in seconds.
    pub start_time_seconds: f64,
    /// Its command line, arguments joined by spaces, cut at 256 bytes.
    pub command: String,
    /// Its cgroup as `/proc/<pid>/cgroup` shows it (the v2 path, else the v1 memory
    /// controller's): the pod or unit it runs in.
    pub cgroup: Option<String>,
}

/// What [`scan`] found under `/proc`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// Candidates by PID, at most [`MAX_CANDIDATES`], each with its process facts.
    pub candidates: Vec<(ProcessCandidate, ProcessFacts)>,
    /// Candidates beyond [`MAX_CANDIDATES`].
    pub more_candidates: u32,
    /// Processes with kube-proxy's comm whose argv[0] is something else.
    pub named_only: u32,
}

/// The comm a process named `name` shows: its first [`COMM_BYTES`] bytes.
pub fn comm_of(name: &str) -> &str {
    let mut end = name.len().min(COMM_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Lists the processes that look like kube-proxy under `<host root>/proc`: comm and argv[0]'s
/// basename both `name` (comm cut as the kernel cuts it). Processes that exit while they are
/// read are skipped.
pub fn scan(host: &Host, name: &str) -> Result<Scan, ProbeError> {
    let comm = comm_of(name);
    let proc_dir = host.path("/proc");
    let procs = procfs::process::all_processes_with_root(&proc_dir)
        .map_err(|e| ProbeError::Inconsistent(format!("{}: {e}", proc_dir.display())))?;
    let mut out = Scan::default();
    let mut btime = None;
    for p in procs.flatten() {
        let Ok(stat) = p.stat() else { continue };
        if stat.comm != comm || stat.state == 'Z' {
            continue;
        }
        let argv = p.cmdline().unwrap_or_default();
        let argv0 = argv.first().map(|a| Path::new(a).file_name());
        if argv0 != Some(Some(std::ffi::OsStr::new(name))) {
            out.named_only += 1;
            continue;
        }
        if out.candidates.len() >= MAX_CANDIDATES {
            out.more_candidates += 1;
            continue;
        }
        let btime = match btime {
            Some(b) => b,
            None => *btime.insert(boot_time(host)?),
        };
        let ticks = procfs::ticks_per_second() as f64;
        let facts = ProcessFacts {
            pid: stat.pid,
            start_time_seconds: btime + stat.starttime as f64 / ticks,
            cpu_seconds_total: (stat.utime + stat.stime) as f64 / ticks,
            resident_memory_bytes: stat.rss.saturating_mul(procfs::page_size()),
            threads: stat.num_threads,
            ..Default::default()
        };
        let cgroup = host
            .read_optional(&format!("/proc/{}/cgroup", stat.pid))
            .ok()
            .flatten()
            .and_then(|text| shown_cgroup(&text));
        let candidate = ProcessCandidate {
            pid: stat.pid,
            start_time_seconds: facts.start_time_seconds,
            command: crate::promtext::clip(argv.join(" "), MAX_TEXT_BYTES),
            cgroup,
        };
        out.candidates.push((candidate, facts));
    }
    out.candidates.sort_by_key(|(c, _)| c.pid);
    Ok(out)
}

/// The cgroup a candidate is shown with: the v2 (`0::`) path, else the v1 memory controller's.
fn shown_cgroup(text: &str) -> Option<String> {
    let path_of = |want: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            want(controllers).then(|| crate::promtext::clip(path.to_string(), MAX_TEXT_BYTES))
        })
    };
    path_of(&|c| c.split(',').any(|c| c == "memory")).or_else(|| path_of(&|c| c.is_empty()))
}

/// Picks kube-proxy among the candidates' start times, given the `process_start_time_seconds`
/// of kube-proxy's `/metrics`:
///
/// - with a start time from `/metrics`: the one candidate within [`START_TOLERANCE_SECONDS`],
///   confirmed; none when no candidate or several agree;
/// - without: the only candidate, unconfirmed; none when there are several.
pub fn identify(starts: &[f64], metrics_start: Option<f64>) -> Option<(usize, Identity)> {
    match metrics_start {
        Some(t) => {
            let mut agreeing = starts
                .iter()
                .enumerate()
                .filter(|(_, s)| (*s - t).abs() <= START_TOLERANCE_SECONDS);
            match (agreeing.next(), agreeing.next()) {
                (Some((i, _)), None) => Some((i, Identity::Confirmed)),
                _ => None,
            }
        }
        None if starts.len() == 1 => Some((0, Identity::Unconfirmed)),
        None => None,
    }
}

/// The start time of process `pid` under the host's `/proc`, Unix seconds, as [`scan`] computes it.
pub fn start_time(host: &Host, pid: i32) -> Result<f64, ProbeError> {
    let stat = procfs::process::Process::new_with_root(host.path(&format!("/proc/{pid}")))
        .and_then(|p| p.stat())
        .map_err(|e| ProbeError::Inconsistent(format!("/proc/{pid}/stat: {e}")))?;
    Ok(boot_time(host)? + stat.starttime as f64 / procfs::ticks_per_second() as f64)
}

pub(super) fn boot_time(host: &Host) -> Result<f64, ProbeError> {
    let text = host.read("/proc/stat")?;
    parse_btime(&host.path("/proc/stat").display().to_string(), &text).map_err(Into::into)
}

/// `btime` (boot time, Unix seconds) from `/proc/stat`.
pub fn parse_btime(source: &str, text: &str) -> Result<f64, ParseError> {
    for (i, line) in text.lines().enumerate() {
        if let Some(v) = line.strip_prefix("btime ") {
            return v
                .trim()
                .parse::<u64>()
                .map(|b| b as f64)
                .map_err(|_| ParseError::new(source, i + 1, format!("btime: expected seconds, found {}", quote(v))));
        }
    }
    Err(ParseError::whole(source, "no btime line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btime() {
        assert_eq!(
            parse_btime("s", "cpu 1 2\nbtime 1795990000\n").unwrap(),
            1_795_990_000.0
        );
        assert!(parse_btime("s", "cpu 1\n").is_err());
        assert!(parse_btime("s", "btime x\n").is_err());
    }

    #[test]
    fn identify_by_start_time_not_by_pid() {
        use Identity::*;
        // Nothing to compare with: only a lone candidate is taken, unconfirmed.
        assert_eq!(identify(&[], None), None);
        assert_eq!(identify(&[100.0], None), Some((0, Unconfirmed)));
        assert_eq!(identify(&[100.0, 200.0], None), None);
        // /metrics says when kube-proxy started: the candidate that agrees, whatever its PID.
        assert_eq!(identify(&[100.0, 200.0], Some(201.5)), Some((1, Confirmed)));
        assert_eq!(identify(&[100.0], Some(100.0)), Some((0, Confirmed)));
        // A lone process that did not start then is not the kube-proxy answering /metrics.
        assert_eq!(identify(&[100.0], Some(150.0)), None);
        // Two that started within the tolerance cannot be told apart.
        assert_eq!(identify(&[100.0, 101.0], Some(100.5)), None);
        assert_eq!(identify(&[100.0, 200.0], Some(f64::NAN)), None);
    }

    #[test]
    fn cgroup_shown() {
        let v2 = "0::/kubepods.slice/kubepods-besteffort.slice/x.scope\n";
        assert_eq!(
            shown_cgroup(v2).as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/x.scope")
        );
        let hybrid = "12:memory:/kubepods/besteffort/pod1/c1\n4:cpu,cpuacct:/kubepods/besteffort/pod1/c1\n0::/\n";
        assert_eq!(shown_cgroup(hybrid).as_deref(), Some("/kubepods/besteffort/pod1/c1"));
        assert_eq!(shown_cgroup("garbage"), None);
    }
}
