//! IPVS-mode checks: the sysctls kube-proxy's IPVS mode needs, virtual
//! servers without backends, kube-ipvs0 in sync with the virtual servers.

use super::{Finding, ModeDecision, ProxyMode, Severity, Thresholds};
use crate::snapshot::Snapshot;

fn in_ipvs_mode(m: &ModeDecision) -> bool {
    m.mode == ProxyMode::Ipvs
}

/// `major.minor` of a kernel release such as `5.4.0-100-generic`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn vs_conntrack(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    if !in_ipvs_mode(m) {
        return None;
    }
    let v = s.facts.sysctls.as_ref()?.get("net.ipv4.vs.conntrack")?;
    Some(
        Finding::new(
            if v == 1 { Severity::Ok } else { Severity::Critical },
            format!("net.ipv4.vs.conntrack is {v} in IPVS mode: IPVS connections skip conntrack, so kube-proxy's SNAT/masquerade rules do not apply"),
        )
        .evidence("net.ipv4.vs.conntrack", v)
        .evidence("expected", 1)
        .remediation(&[
            "kube-proxy sets it at start; if it is 0, something reset it: sysctl -w net.ipv4.vs.conntrack=1 and find the sysctl.d file or tool that changed it.",
            "Restart kube-proxy on the node afterwards so it re-checks its kernel settings.",
        ]),
    )
}

/// conn_reuse_mode=1 on kernels before 5.9 drops the SYN of a new connection
/// that reuses the port of one in TIME_WAIT, for 1 s (kubernetes/kubernetes#81775;
/// fixed in 5.9 by "ipvs: allow connection reuse for unconfirmed conntrack").
pub fn conn_reuse_mode(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    if !in_ipvs_mode(m) {
        return None;
    }
    let v = s.facts.sysctls.as_ref()?.get("net.ipv4.vs.conn_reuse_mode")?;
    let release = s.facts.node.as_ref()?.kernel_release.clone()?;
    let old_kernel = kernel_version(&release).is_some_and(|k| k < (5, 9));
    Some(
        Finding::new(
            if v == 1 && old_kernel { Severity::Warning } else { Severity::Ok },
            format!("net.ipv4.vs.conn_reuse_mode=1 on kernel {release} (< 5.9): new connections reusing a source port can stall 1 s"),
        )
        .evidence("net.ipv4.vs.conn_reuse_mode", v)
        .evidence("kernel_release", release)
        .remediation(&[
            "Upgrade the node kernel to 5.9 or later, where the 1 s delay is fixed (kubernetes/kubernetes#81775).",
            "Or set conn_reuse_mode=0 (kube-proxy does this on old kernels), knowing that then reused connections may go to removed endpoints during rolling updates.",
        ]),
    )
}

/// kube-proxy's IPVS mode sets both to 1 at start: with expire_nodest_conn=0
/// connections to a removed endpoint keep being sent to it until they time out
/// (clients hang after a rollout); with expire_quiescent_template=0 persistent
/// clients (sessionAffinity: ClientIP) stay pinned to a weight-0, terminating one.
pub fn expire_sysctls(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    if !in_ipvs_mode(m) {
        return None;
    }
    let sys = s.facts.sysctls.as_ref()?;
    let nodest = sys.get("net.ipv4.vs.expire_nodest_conn")?;
    let quiescent = sys.get("net.ipv4.vs.expire_quiescent_template")?;
    let off: Vec<&str> = [("expire_nodest_conn", nodest), ("expire_quiescent_template", quiescent)]
        .iter()
        .filter(|(_, v)| *v != 1)
        .map(|(n, _)| *n)
        .collect();
    Some(
        Finding::new(
            if off.is_empty() { Severity::Ok } else { Severity::Warning },
            format!("net.ipv4.vs.{} not 1 in IPVS mode: connections to removed or weight-0 endpoints are kept instead of expired, so clients hang after endpoints change", off.join(" and ")),
        )
        .evidence("net.ipv4.vs.expire_nodest_conn", nodest)
        .evidence("net.ipv4.vs.expire_quiescent_template", quiescent)
        .evidence("expected", 1)
        .remediation(&[
            "kube-proxy sets both to 1 at start; 0 means something reset them: sysctl -w net.ipv4.vs.expire_nodest_conn=1 net.ipv4.vs.expire_quiescent_template=1 and find the sysctl.d file or tool that changed them.",
            "Restart kube-proxy on the node afterwards so it re-checks its kernel settings.",
        ]),
    )
}

pub fn without_backends(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipvs = s.facts.ipvs.as_ref()?;
    let n = ipvs.without_backends;
    Some(
        Finding::new(
            if n > 0 { Severity::Warning } else { Severity::Ok },
            format!("{n} of {} IPVS virtual servers have no usable real server (none, or weight 0 only): connections to them fail", ipvs.virtual_servers),
        )
        .evidence("count", n)
        .evidence("first", ipvs.without_backends_sample.clone())
        .remediation(&[
            "Check the Services behind these addresses: kubectl get endpointslices -A | grep <ip or port>; a Service without ready pods has no backend by design.",
            "If the pods are ready but IPVS has no real server, kube-proxy is not syncing: check its logs and kubeproxy_sync_proxy_rules_last_timestamp_seconds.",
        ]),
    )
}

pub fn interface_out_of_sync(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    let ipvs = s.facts.ipvs.as_ref()?;
    let iface = ipvs.interface.as_ref()?;
    if !in_ipvs_mode(m) {
        return None;
    }
    let unbound = &ipvs.unbound_service_ips;
    let orphaned = &ipvs.bound_without_service;
    let bad = !iface.exists || !unbound.is_empty() || !orphaned.is_empty();
    let sample = |v: &Vec<String>| {
        v.iter()
            .take(super::super::probe::ipvs::SAMPLE)
            .cloned()
            .collect::<Vec<_>>()
    };
    Some(
        Finding::new(
            if bad { Severity::Warning } else { Severity::Ok },
            if iface.exists {
                format!(
                    "kube-ipvs0 and IPVS disagree: {} virtual-server IPs are bound nowhere, {} kube-ipvs0 addresses have no virtual server",
                    unbound.len(),
                    orphaned.len()
                )
            } else {
                "IPVS mode but no kube-ipvs0 interface: service IPs are not bound, so the node does not accept their traffic".to_string()
            },
        )
        .evidence("kube_ipvs0_exists", iface.exists)
        .evidence("unbound_service_ips", unbound.len())
        .evidence("unbound_first", sample(unbound))
        .evidence("bound_without_service", orphaned.len())
        .evidence("bound_without_service_first", sample(orphaned))
        .remediation(&[
            "kube-proxy reconciles kube-ipvs0 on each sync; a lasting difference means its syncs fail: read its logs.",
            "ip addr show kube-ipvs0 and ipvsadm -Ln on the node show both sides; restarting kube-proxy rebuilds them.",
        ]),
    )
}

pub fn scheduler(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipvs = s.facts.ipvs.as_ref()?;
    let mut schedulers: Vec<String> = ipvs.groups.iter().map(|g| g.scheduler.clone()).collect();
    schedulers.sort();
    schedulers.dedup();
    if schedulers.is_empty() {
        return None;
    }
    Some(
        Finding::new(
            Severity::Info,
            format!("IPVS schedulers in use: {}", schedulers.join(", ")),
        )
        .evidence("schedulers", schedulers)
        .remediation(&[
            "Round-robin (rr) ignores load; for long-lived or uneven connections consider lc (least connections), or sh (source hashing) for affinity: set ipvs.scheduler in the kube-proxy ConfigMap and document why.",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::ipvs::{IpvsFacts, IpvsInterface, ServiceGroup};

    fn ipvs_node() -> (Snapshot, Thresholds) {
        let mut s = healthy();
        s.facts.ipvs = Some(IpvsFacts {
            source: "ipvsadm".into(),
            virtual_servers: 3,
            real_servers: 4,
            groups: vec![ServiceGroup {
                protocol: "TCP".into(),
                scheduler: "rr".into(),
                count: 3,
            }],
            interface: Some(IpvsInterface {
                exists: true,
                addresses: vec!["10.96.0.1".into()],
            }),
            ..Default::default()
        });
        let sys = s.facts.sysctls.as_mut().unwrap();
        sys.values.insert("net.ipv4.vs.conntrack".into(), Some(1));
        sys.values.insert("net.ipv4.vs.conn_reuse_mode".into(), Some(1));
        (s, crate::config::default_thresholds())
    }

    #[test]
    fn mode_is_inferred_from_virtual_servers_and_kube_ipvs0() {
        let (s, t) = ipvs_node();
        let m = crate::evaluate::effective_mode(&s, &t);
        assert_eq!(m.mode, ProxyMode::Ipvs);
        assert!(m.source.starts_with("inferred"), "{}", m.source);
    }

    #[test]
    fn vs_conntrack_off_is_critical_in_ipvs_mode_only() {
        let (mut s, mut t) = ipvs_node();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.conntrack", 0);
        assert_eq!(judge(vs_conntrack, &s, &t).unwrap().severity, Severity::Critical);
        // Declared iptables, but the node shows IPVS: it is judged by what runs.
        t.proxy_mode = ProxyMode::Iptables;
        assert_eq!(judge(vs_conntrack, &s, &t).unwrap().severity, Severity::Critical);
        // A node that shows no IPVS, declared iptables: not an IPVS node.
        s.facts.ipvs.as_mut().unwrap().interface = None;
        assert!(judge(vs_conntrack, &s, &t).is_none());
    }

    #[test]
    fn expire_sysctls_off_is_a_warning_in_ipvs_mode_only() {
        let (mut s, mut t) = ipvs_node();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_nodest_conn", 1);
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_quiescent_template", 1);
        assert_eq!(judge(expire_sysctls, &s, &t).unwrap().severity, Severity::Ok);
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_quiescent_template", 0);
        let f = judge(expire_sysctls, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.summary.contains("expire_quiescent_template") && !f.summary.contains("nodest"));
        // Judged by what runs: declared iptables on a node that shows IPVS is still IPVS.
        t.proxy_mode = ProxyMode::Iptables;
        assert_eq!(judge(expire_sysctls, &s, &t).unwrap().severity, Severity::Warning);
        // A node that shows no IPVS, declared iptables: not an IPVS node.
        s.facts.ipvs.as_mut().unwrap().interface = None;
        assert!(judge(expire_sysctls, &s, &t).is_none());
    }

    #[test]
    fn conn_reuse_mode_by_kernel() {
        let (mut s, t) = ipvs_node();
        s.facts.node.as_mut().unwrap().kernel_release = Some("4.18.0-372.9.1.el8.x86_64".into());
        assert_eq!(judge(conn_reuse_mode, &s, &t).unwrap().severity, Severity::Warning);
        s.facts.node.as_mut().unwrap().kernel_release = Some("5.10.0-9-amd64".into());
        assert_eq!(judge(conn_reuse_mode, &s, &t).unwrap().severity, Severity::Ok);
        assert_eq!(kernel_version("6.18.44-fc-v857"), Some((6, 18)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn backends_and_interface() {
        let (mut s, t) = ipvs_node();
        assert_eq!(judge(without_backends, &s, &t).unwrap().severity, Severity::Ok);
        let ipvs = s.facts.ipvs.as_mut().unwrap();
        ipvs.without_backends = 2;
        ipvs.without_backends_sample = vec!["TCP 10.96.0.10:53".into(), "UDP 10.96.0.10:53".into()];
        ipvs.unbound_service_ips = vec!["10.96.5.5".into()];
        let f = judge(without_backends, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["first"][0], "TCP 10.96.0.10:53");
        let f = judge(interface_out_of_sync, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["unbound_first"], serde_json::json!(["10.96.5.5"]));
        assert_eq!(judge(scheduler, &s, &t).unwrap().summary, "IPVS schedulers in use: rr");
    }
}
