//! The sysctls kube-proxy depends on, read from `/proc/sys`.
//!
//! What each one should be, and why, lives in `evaluate`; this probe only reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::parse::{quote, ParseError};

/// The sysctls read, by their dotted name.
pub const WATCHED: &[&str] = &[
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_buckets",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.conn_reuse_mode",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SysctlFacts {
    /// Value of each watched sysctl; `null` when the sysctl does not exist on this kernel.
    pub values: BTreeMap<String, Option<i64>>,
}

impl SysctlFacts {
    pub fn get(&self, name: &str) -> Option<i64> {
        self.values.get(name).copied().flatten()
    }
}

/// `/proc/sys` path of a dotted sysctl name.
pub fn proc_path(name: &str) -> String {
    format!("/proc/sys/{}", name.replace('.', "/"))
}

/// A single-integer sysctl value, as the kernel prints it (`1\n`).
pub fn parse_value(source: &str, text: &str) -> Result<i64, ParseError> {
    let t = text.trim();
    if t.lines().count() > 1 || t.split_whitespace().count() != 1 {
        return Err(ParseError::new(
            source,
            1,
            format!("expected one integer, found {}", quote(t)),
        ));
    }
    t.parse::<i64>()
        .map_err(|_| ParseError::new(source, 1, format!("expected an integer, found {}", quote(t))))
}

/// The probe: reads the files on the blocking pool, behind the hang guard.
pub async fn probe(ctx: &ProbeContext, _deadline: Deadline) -> Result<Probed<SysctlFacts>, ProbeError> {
    let host = ctx.host.clone();
    super::blocking(ProbeName::Sysctls, move || read(&host).map(Probed::Present)).await
}

/// Reads every watched sysctl; a missing one is None (its module is not loaded).
pub fn read(host: &Host) -> Result<SysctlFacts, ProbeError> {
    let mut values = BTreeMap::new();
    for name in WATCHED {
        let path = proc_path(name);
        let value = match host.read_optional(&path)? {
            None => None,
            Some(text) => Some(parse_value(&host.path(&path).display().to_string(), &text)?),
        };
        values.insert(name.to_string(), value);
    }
    Ok(SysctlFacts { values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_values() {
        assert_eq!(
            proc_path("net.bridge.bridge-nf-call-iptables"),
            "/proc/sys/net/bridge/bridge-nf-call-iptables"
        );
        // Local capture of this machine's /proc/sys/net/netfilter (tests/fixtures/samples/SOURCES.md).
        let max = include_str!(
            "../../tests/fixtures/samples/proc-sys-net-netfilter/debian12-kernel6.18-rootns/nf_conntrack_max"
        );
        assert_eq!(parse_value("max", max).unwrap(), 262_144);
        let est = include_str!(
            "../../tests/fixtures/samples/proc-sys-net-netfilter/debian12-kernel6.18-rootns/nf_conntrack_tcp_timeout_established"
        );
        assert_eq!(parse_value("est", est).unwrap(), 432_000);
    }

    #[test]
    fn garbage_values() {
        assert!(parse_value("f", "").is_err());
        assert!(parse_value("f", "1 2\n").is_err());
        assert!(parse_value("f", "one\n").is_err());
        assert!(parse_value("f", "99999999999999999999999\n").is_err());
        assert_eq!(parse_value("f", "-1\n").unwrap(), -1);
    }
}
