//! Kernel checks: the sysctls kube-proxy depends on and the IPVS modules.

use super::{Finding, ModeDecision, ProxyMode, Severity, Thresholds};
use crate::probe::modules::IPVS_MODULES;
use crate::snapshot::Snapshot;

pub fn ip_forward(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let v = s.facts.sysctls.as_ref()?.get("net.ipv4.ip_forward")?;
    Some(
        Finding::new(
            if v == 1 { Severity::Ok } else { Severity::Critical },
            format!("net.ipv4.ip_forward is {v}: the node does not forward packets, so Service traffic to pods on other nodes is dropped"),
        )
        .evidence("net.ipv4.ip_forward", v)
        .evidence("expected", 1)
        .remediation(&[
            "Enable it now: sysctl -w net.ipv4.ip_forward=1",
            "Find what turned it off first: grep -rE 'ip_forward' /etc/sysctl.conf /etc/sysctl.d/ /usr/lib/sysctl.d/ (a sysctl.d file, a firewall or security baseline) and fix that line; or persist it in a file of its own, appending, never replacing: echo 'net.ipv4.ip_forward = 1' | sudo tee -a /etc/sysctl.d/90-proxywatch-ip-forward.conf (a file later in name order wins).",
        ]),
    )
}

pub fn bridge_nf_call_iptables(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    // Only meaningful when br_netfilter is active: without it the sysctl does not exist.
    let v = s.facts.sysctls.as_ref()?.get("net.bridge.bridge-nf-call-iptables")?;
    Some(
        Finding::new(
            if v == 1 { Severity::Ok } else { Severity::Warning },
            format!("net.bridge.bridge-nf-call-iptables is {v}: traffic between pods on the same bridge bypasses kube-proxy's rules"),
        )
        .evidence("net.bridge.bridge-nf-call-iptables", v)
        .evidence("expected", 1)
        .remediation(&[
            "Enable it now: sysctl -w net.bridge.bridge-nf-call-iptables=1 (and bridge-nf-call-ip6tables for IPv6).",
            "Persist it in /etc/sysctl.d/ and make sure br_netfilter is loaded at boot (/etc/modules-load.d/k8s.conf).",
        ]),
    )
}

/// kube-proxy sets these at start (conntrack.tcpEstablishedTimeout 24h,
/// tcpCloseWaitTimeout 1h); other values mean something else manages them.
pub fn conntrack_tcp_timeouts(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let sys = s.facts.sysctls.as_ref()?;
    let est = sys.get("net.netfilter.nf_conntrack_tcp_timeout_established")?;
    let cw = sys.get("net.netfilter.nf_conntrack_tcp_timeout_close_wait")?;
    let off = est != 86_400 || cw != 3_600;
    Some(
        Finding::new(
            if off { Severity::Info } else { Severity::Ok },
            format!(
                "conntrack TCP timeouts are established={est}s close_wait={cw}s; kube-proxy's defaults are 86400s and 3600s"
            ),
        )
        .evidence("nf_conntrack_tcp_timeout_established", est)
        .evidence("nf_conntrack_tcp_timeout_close_wait", cw)
        .remediation(&[
            "Long established timeouts (the kernel default is 432000 s, 5 days) keep dead flows in the table and fill it; kube-proxy lowers it to 86400 s unless conntrack.tcpEstablishedTimeout is 0.",
            "Check kube-proxy's conntrack settings (kubectl -n kube-system get cm kube-proxy -o yaml) or set the sysctls in /etc/sysctl.d/.",
        ]),
    )
}

pub fn ipvs_modules_missing(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    let modules = &s.facts.modules.as_ref()?.modules;
    let missing: Vec<&str> = IPVS_MODULES
        .iter()
        .copied()
        .filter(|m| modules.get(*m).is_none_or(|st| !st.is_present()))
        .collect();
    let mode = &m.mode;
    let severity = match (missing.is_empty(), mode) {
        (true, _) => Severity::Ok,
        (false, ProxyMode::Ipvs) => Severity::Critical,
        (false, ProxyMode::Unknown) => Severity::Info,
        (false, _) => Severity::Ok,
    };
    Some(
        Finding::new(
            severity,
            format!(
                "IPVS kernel modules missing: {} (proxy mode {})",
                missing.join(", "),
                mode.as_str()
            ),
        )
        .evidence("missing", missing.clone())
        .evidence("proxy_mode", mode.as_str())
        .remediation(&[
            "If kube-proxy should run in IPVS mode: load the modules on the node (modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh) and persist them in /etc/modules-load.d/ipvs.conf; without them kube-proxy falls back to iptables or fails ('IPVS required kernel modules not found').",
            "Or stay on iptables mode: set mode: iptables in the kube-proxy ConfigMap and kubectl -n kube-system rollout restart ds kube-proxy.",
            "Roll back: restore the ConfigMap backup and restart kube-proxy again.",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::modules::ModuleState;

    fn set(s: &mut Snapshot, k: &str, v: Option<i64>) {
        s.facts.sysctls.as_mut().unwrap().values.insert(k.into(), v);
    }

    #[test]
    fn forwarding_off_is_critical() {
        let mut s = healthy();
        set(&mut s, "net.ipv4.ip_forward", Some(0));
        let f = judge(ip_forward, &s, &crate::config::default_thresholds()).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.remediation[0].contains("sysctl -w net.ipv4.ip_forward=1"));
    }

    #[test]
    fn bridge_sysctl_only_when_present() {
        let mut s = healthy();
        set(&mut s, "net.bridge.bridge-nf-call-iptables", None);
        assert!(judge(bridge_nf_call_iptables, &s, &crate::config::default_thresholds()).is_none());
        set(&mut s, "net.bridge.bridge-nf-call-iptables", Some(0));
        assert_eq!(
            judge(bridge_nf_call_iptables, &s, &crate::config::default_thresholds())
                .unwrap()
                .severity,
            Severity::Warning
        );
    }

    #[test]
    fn kernel_default_timeouts_are_info() {
        let mut s = healthy();
        set(
            &mut s,
            "net.netfilter.nf_conntrack_tcp_timeout_established",
            Some(432_000),
        );
        let f = judge(conntrack_tcp_timeouts, &s, &crate::config::default_thresholds()).unwrap();
        assert_eq!(f.severity, Severity::Info);
        // The NPD condition's message quotes the node's value, not kube-proxy's default
        // (`proxywatch npd --area conntrack --severity info` printed 86400s).
        let f = Finding {
            id: "sysctl_conntrack_tcp_timeouts".into(),
            ..f
        };
        let (code, line) = crate::expose::npd::verdict(
            std::slice::from_ref(&f),
            &crate::expose::npd::Selection::Area(crate::expose::npd::Area::Conntrack),
            Severity::Info,
            80,
        );
        assert_eq!(
            (code, line.as_str()),
            (1, "info: sysctl_conntrack_tcp_timeouts 432000s")
        );
    }

    #[test]
    fn ipvs_modules_depend_on_mode() {
        let mut s = healthy();
        s.facts
            .modules
            .as_mut()
            .unwrap()
            .modules
            .insert("ip_vs_sh".into(), ModuleState::Missing);
        let mut t = crate::config::default_thresholds();
        let f = judge(ipvs_modules_missing, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.evidence["missing"], serde_json::json!(["ip_vs_sh"]));
        t.proxy_mode = ProxyMode::Ipvs;
        assert_eq!(
            judge(ipvs_modules_missing, &s, &t).unwrap().severity,
            Severity::Critical
        );
        t.proxy_mode = ProxyMode::Iptables;
        assert_eq!(judge(ipvs_modules_missing, &s, &t).unwrap().severity, Severity::Ok);
    }
}
