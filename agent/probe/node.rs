//! The node itself: name, kernel release, CPU count.
//!
//! The CPU count drives kube-proxy's conntrack sizing rule
//! (max(131072, 32768 × cores)). It is read from
//! `/sys/devices/system/cpu/online` under the host root so fixture nodes are
//! honest. Where that file is absent: on the node itself (`--host-root /`)
//! sysinfo, which reads this machine's /proc; under any other root the `cpuN`
//! lines of its `/proc/stat`, never the CPUs of the machine the agent runs on.

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::parse::{quote, ParseError};

const CPU_ONLINE: &str = "/sys/devices/system/cpu/online";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel_release: Option<String>,
    /// Online CPUs.
    pub cpus: u32,
    /// Where `cpus` came from: the sysfs file, sysinfo or `/proc/stat`.
    pub cpus_source: String,
}

/// Counts CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(source: &str, text: &str) -> Result<u32, ParseError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::whole(source, "empty CPU list"));
    }
    let bad = || {
        ParseError::new(
            source,
            1,
            format!("expected a CPU list like `0-3,8`, found {}", quote(t)),
        )
    };
    let mut total: u32 = 0;
    for part in t.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|_| bad())?,
                b.parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let n = part.parse::<u32>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if hi < lo || hi - lo >= 1 << 16 {
            return Err(bad());
        }
        total = total.saturating_add(hi - lo + 1);
    }
    Ok(total)
}

const STAT: &str = "/proc/stat";

/// Counts the per-CPU lines (`cpu0`, `cpu1`, ...) of `/proc/stat`: the CPUs online.
pub fn parse_stat_cpus(source: &str, text: &str) -> Result<u32, ParseError> {
    let n = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .and_then(|r| r.split(|c: char| c.is_ascii_whitespace()).next())
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    match n {
        0 => Err(ParseError::whole(source, "no cpuN line")),
        n => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

/// The probe: reads the files on the blocking pool, behind the hang guard.
pub async fn probe(ctx: &ProbeContext, _deadline: Deadline) -> Result<Probed<NodeFacts>, ProbeError> {
    let host = ctx.host.clone();
    super::blocking(ProbeName::Node, move || read(&host).map(Probed::Present)).await
}

/// Reads the kernel release and the online CPUs.
pub fn read(host: &Host) -> Result<NodeFacts, ProbeError> {
    let kernel_release = host
        .read_optional("/proc/sys/kernel/osrelease")?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let (cpus, cpus_source) = match host.read_optional(CPU_ONLINE)? {
        Some(text) => (
            parse_cpu_list(&host.path(CPU_ONLINE).display().to_string(), &text)?,
            CPU_ONLINE.to_string(),
        ),
        // sysinfo reads this machine's /proc: the node's only when the host root is /.
        None if host.root() == std::path::Path::new("/") => {
            let mut sys = sysinfo::System::new();
            sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
            (sys.cpus().len() as u32, "sysinfo".to_string())
        }
        None => (
            parse_stat_cpus(&host.path(STAT).display().to_string(), &host.read(STAT)?)?,
            STAT.to_string(),
        ),
    };
    Ok(NodeFacts {
        kernel_release,
        cpus,
        cpus_source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("f", "0-1\n").unwrap(), 2);
        assert_eq!(parse_cpu_list("f", "0\n").unwrap(), 1);
        assert_eq!(parse_cpu_list("f", "0-3,8,10-11\n").unwrap(), 7);
        assert!(parse_cpu_list("f", "").is_err());
        assert!(parse_cpu_list("f", "3-1").is_err());
        assert!(parse_cpu_list("f", "a-b").is_err());
        assert!(parse_cpu_list("f", "0-4294967295").is_err());
    }

    #[test]
    fn stat_cpus() {
        let stat = "cpu  4 0 1 7\ncpu0 2 0 1 3\ncpu1 2 0 0 4\nintr 5 0\ncpufreq x\nctxt 9\n";
        assert_eq!(parse_stat_cpus("s", stat).unwrap(), 2);
        assert!(parse_stat_cpus("s", "cpu  1 2 3\nintr 0\n").is_err());
        assert!(parse_stat_cpus("s", "").is_err());
    }

    /// A host root without the sysfs file counts its own /proc/stat (16 CPUs), not the
    /// machine's; without either file the probe fails, never reports 0.
    #[test]
    fn without_cpu_online_another_root_counts_its_proc_stat() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc")).unwrap();
        let host = Host::new(root.path());
        let e = read(&host).unwrap_err().to_string();
        assert!(e.contains("proc/stat: does not exist"), "{e}");
        let mut stat = String::from("cpu  1 2 3 4\n");
        for i in 0..16 {
            stat += &format!("cpu{i} 1 2 3 4\n");
        }
        std::fs::write(root.path().join("proc/stat"), stat).unwrap();
        let facts = read(&host).unwrap();
        assert_eq!((facts.cpus, facts.cpus_source.as_str()), (16, STAT));
    }
}
