//! The node itself: name, kernel release, CPU count.
//!
//! The CPU count drives kube-proxy's conntrack sizing rule
//! (max(131072, 32768 × cores)). It is read from
//! `/sys/devices/system/cpu/online` under the host root so fixture nodes are
//! honest; sysinfo is the fallback when that file is absent.

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
    /// Where `cpus` came from: the sysfs file or sysinfo.
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
        None => {
            let mut sys = sysinfo::System::new();
            sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
            (sys.cpus().len() as u32, "sysinfo".to_string())
        }
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
}
