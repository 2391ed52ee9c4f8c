//! The proxy mode: what `--kube-proxy.mode` declares against what runs
//! (kube-proxy's `/proxyMode`, else what the data plane shows), the state a
//! previous mode left behind, and what stands in the way of nftables mode.
//!
//! The runbook's main change is a mode switch (iptables -> IPVS, more and more
//! -> nftables) with a rollback; its silent failure is kube-proxy falling back
//! to iptables while the ConfigMap says `ipvs`. These checks make both visible.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ipvs::kernel_version;
use super::{Finding, ProxyMode, Severity, Thresholds};
use crate::probe::modules::IPVS_MODULES;
use crate::snapshot::Snapshot;

/// What the node shows of kube-proxy's mode, and how that was seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedMode {
    pub mode: ProxyMode,
    /// `kube-proxy` (its /proxyMode) or `inferred: ...` (the data plane).
    pub source: String,
}

/// The mode the checks judge the node by, with what was declared and what was
/// seen side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeDecision {
    /// What runs when the node shows it, else what was declared, else unknown.
    pub mode: ProxyMode,
    /// Where `mode` came from: `kube-proxy`, `inferred: ...`, `flag`, or `unknown`.
    pub source: String,
    /// What `--kube-proxy.mode` declares; null with `auto`.
    #[serde(default)]
    pub declared: Option<ProxyMode>,
    /// What the node shows; null when it shows nothing (no kube-proxy, no rules).
    #[serde(default)]
    pub observed: Option<ObservedMode>,
}

/// kube-proxy's own word first; without it, the data plane: IPVS virtual
/// servers with kube-ipvs0, kube-proxy's nftables table, or KUBE-SVC chains
/// with kube-proxy's canary in iptables.
fn observe(s: &Snapshot) -> Option<ObservedMode> {
    let seen = |mode, source: &str| {
        Some(ObservedMode {
            mode,
            source: source.to_string(),
        })
    };
    if let Some(mode) = s.facts.kube_proxy.as_ref().and_then(|k| k.mode.as_ref()) {
        if mode.is_linux_mode() {
            return seen(mode.clone(), "kube-proxy");
        }
    }
    if let Some(ipvs) = &s.facts.ipvs {
        if ipvs.virtual_servers > 0 && ipvs.interface.as_ref().is_some_and(|i| i.exists) {
            return seen(ProxyMode::Ipvs, "inferred: IPVS virtual servers and kube-ipvs0 exist");
        }
    }
    if s.facts.nftables.as_ref().is_some_and(|n| !n.tables.is_empty()) {
        return seen(ProxyMode::Nftables, "inferred: kube-proxy's nftables table exists");
    }
    if let Some(ipt) = &s.facts.iptables {
        if ipt.saves.iter().any(|r| r.counts.kube.svc > 0 && r.counts.proxy_canary) {
            return seen(
                ProxyMode::Iptables,
                "inferred: KUBE-SVC chains with kube-proxy's canary",
            );
        }
    }
    None
}

/// Decides the mode the checks judge the node by: what runs wins over what was
/// declared, so a node that fell back to iptables is judged as an iptables node
/// (and `mismatch` says so).
pub fn effective_mode(s: &Snapshot, t: &Thresholds) -> ModeDecision {
    let declared = (t.proxy_mode != ProxyMode::Unknown).then(|| t.proxy_mode.clone());
    let observed = observe(s);
    let (mode, source) = match (&observed, &declared) {
        // No kube-proxy here on purpose: what the data plane shows of one is left over.
        (Some(o), Some(ProxyMode::NoKubeProxy)) if o.source != "kube-proxy" => {
            (ProxyMode::NoKubeProxy, "flag".to_string())
        }
        (Some(o), _) => (o.mode.clone(), o.source.clone()),
        (None, Some(d)) => (d.clone(), "flag".to_string()),
        (None, None) => (ProxyMode::Unknown, "unknown".to_string()),
    };
    ModeDecision {
        mode,
        source,
        declared,
        observed,
    }
}

/// The IPVS modules the node lacks, as far as the modules probe saw.
fn missing_ipvs_modules(s: &Snapshot) -> Vec<&'static str> {
    let Some(m) = &s.facts.modules else {
        return Vec::new();
    };
    IPVS_MODULES
        .iter()
        .copied()
        .filter(|name| m.modules.get(*name).is_none_or(|st| !st.is_present()))
        .collect()
}

/// kube-proxy's nftables mode refuses kernels older than this (kubernetes
/// pkg/util/kernel: NFTablesKubeProxyKernelVersion).
const NFTABLES_MIN_KERNEL: (u32, u32) = (5, 13);

fn kernel(s: &Snapshot) -> Option<(String, (u32, u32))> {
    let release = s.facts.node.as_ref()?.kernel_release.clone()?;
    let v = kernel_version(&release)?;
    Some((release, v))
}

pub fn mismatch(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    let declared = m.declared.as_ref()?;
    let observed = m.observed.as_ref()?;
    if *declared == ProxyMode::NoKubeProxy && observed.source != "kube-proxy" {
        return None; // its state without kube-proxy: proxy_mode_leftovers
    }
    let differs = *declared != observed.mode;
    let missing = missing_ipvs_modules(s);
    let cause = match (declared, &observed.mode) {
        (ProxyMode::Ipvs, _) if !missing.is_empty() => format!(
            "IPVS kernel modules missing ({}): kube-proxy falls back to iptables when it cannot load them",
            missing.join(", ")
        ),
        (ProxyMode::Nftables, _) if kernel(s).is_some_and(|(_, v)| v < NFTABLES_MIN_KERNEL) => format!(
            "kernel {} is older than 5.13, which kube-proxy's nftables mode requires",
            kernel(s).map(|(r, _)| r).unwrap_or_default()
        ),
        _ => "the ConfigMap changed without a kube-proxy restart, or --kube-proxy.mode is out of date".to_string(),
    };
    Some(
        Finding::new(
            if differs { Severity::Critical } else { Severity::Ok },
            format!(
                "kube-proxy runs in {} mode ({}) but {} mode is declared; likely cause: {cause}",
                observed.mode, observed.source, declared
            ),
        )
        .evidence("declared", declared.as_str())
        .evidence("actual", observed.mode.as_str())
        .evidence("actual_source", observed.source.as_str())
        .evidence("likely_cause", cause.as_str())
        .remediation(&[
            "Check what kube-proxy was told and what it did: kubectl -n kube-system get cm kube-proxy -o yaml | grep mode, then kubectl -n kube-system logs <kube-proxy pod on this node> | grep -i -E 'proxier|mode|fall'.",
            "IPVS declared but iptables running: load the modules (modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack), persist them in /etc/modules-load.d/ipvs.conf, then kubectl -n kube-system rollout restart ds kube-proxy.",
            "If the declaration is what is wrong, set --kube-proxy.mode (or PROXYWATCH_KUBE_PROXY_MODE) to the mode the cluster really uses.",
            "Roll back: restore the ConfigMap backup and restart kube-proxy again; `proxywatch compare BASELINE` tells whether the node is back where it was.",
        ]),
    )
}

/// State of a mode that is not running: what, where and how much.
fn leftover_items(s: &Snapshot, running: &ProxyMode) -> Vec<Value> {
    let mut items = Vec::new();
    if *running != ProxyMode::Ipvs {
        if let Some(ipvs) = &s.facts.ipvs {
            if ipvs.virtual_servers > 0 {
                items
                    .push(json!({"what": "IPVS virtual servers", "where": ipvs.source, "count": ipvs.virtual_servers}));
            }
            if let Some(i) = ipvs.interface.as_ref().filter(|i| i.exists) {
                items.push(json!({"what": "kube-ipvs0 interface", "where": "kube-ipvs0", "count": i.addresses.len()}));
            }
        }
    }
    if *running != ProxyMode::Iptables {
        for run in s.facts.iptables.iter().flat_map(|f| &f.saves) {
            let k = &run.counts.kube;
            let chains = k.svc + k.sep + k.ext + k.fw + k.svl;
            if chains > 0 {
                items.push(json!({
                    "what": "iptables service chains (KUBE-SVC/SEP/EXT/FW/SVL)",
                    "where": format!("{} {}", run.backend, run.family),
                    "count": chains,
                }));
            }
        }
    }
    if *running != ProxyMode::Nftables {
        for t in s.facts.nftables.iter().flat_map(|f| &f.tables) {
            items.push(json!({
                "what": "kube-proxy nftables table",
                "where": format!("table {} kube-proxy", t.nft_family()),
                "count": t.counts.chains,
                "rules": t.counts.rules,
            }));
        }
    }
    items
}

pub fn leftovers(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    // Without knowing what runs, nothing can be called left over; with no kube-proxy declared
    // (`--kube-proxy.mode none`), all of its state is.
    if !m.mode.is_linux_mode() && m.mode != ProxyMode::NoKubeProxy {
        return None;
    }
    let items = leftover_items(s, &m.mode);
    let summary: Vec<String> = items
        .iter()
        .map(|i| {
            format!(
                "{} {} ({})",
                i["count"],
                i["what"].as_str().unwrap_or(""),
                i["where"].as_str().unwrap_or("")
            )
        })
        .collect();
    Some(
        Finding::new(
            if items.is_empty() { Severity::Ok } else { Severity::Warning },
            format!("state of another proxy mode in {} mode: {}", m.mode, summary.join(", ")),
        )
        .evidence("mode", m.mode.as_str())
        .evidence("leftovers", items)
        .remediation_owned(vec![
            "State left by a previous mode keeps intercepting traffic (IPVS virtual servers, KUBE-SVC chains) or costs memory and sync time: clean it once the new mode is confirmed healthy.".to_string(),
            "First make sure it is not in use: the running mode is the one above (kube-proxy's /proxyMode, or none declared); nothing else on the node (a CNI, a former kube-proxy DaemonSet) should own these rules.".to_string(),
            "Clean up with the old mode's own tool: kube-proxy --cleanup (run once on the node, from the kube-proxy image). By hand, in a maintenance window, only what the evidence lists:".to_string(),
            "IPVS: delete kube-proxy's virtual servers one by one (ipvsadm -Ln lists them; ipvsadm -D -t <service IP>:<port> for each), then ip link del kube-ipvs0. Warning: ipvsadm -C clears every virtual server on the node, keepalived's or kube-vip's included; use it only when ipvsadm -Ln shows nothing but Service IPs.".to_string(),
            format!("iptables: {}.", super::iptables::per_chain_cleanup("iptables")),
            "nftables: nft delete table ip kube-proxy (and nft delete table ip6 kube-proxy): kube-proxy's own tables, nothing else.".to_string(),
            "Then compare with the baseline saved before the switch: proxywatch compare BASELINE.".to_string(),
        ]),
    )
}

pub fn nftables_migration_blockers(s: &Snapshot, _: &Thresholds, m: &ModeDecision) -> Option<Finding> {
    if !matches!(m.mode, ProxyMode::Iptables | ProxyMode::Ipvs) {
        return None;
    }
    let mut blockers: Vec<Value> = Vec::new();
    let metrics = s.facts.kube_proxy.as_ref().and_then(|k| k.metrics.as_ref());
    if let Some(n) = metrics
        .and_then(|m| m.localhost_nodeports_accepted_packets_total)
        .filter(|&n| n > 0.0)
    {
        blockers.push(json!({
            "blocker": "NodePorts reached on localhost",
            "evidence": format!("kubeproxy_iptables_localhost_nodeports_accepted_packets_total = {n}"),
            "why": "nftables mode does not serve NodePorts on 127.0.0.1",
        }));
    }
    if let Some(n) = metrics
        .and_then(|m| m.ct_state_invalid_dropped_packets_total)
        .filter(|&n| n > 0.0)
    {
        blockers.push(json!({
            "blocker": "packets dropped as conntrack-invalid",
            "evidence": format!("kubeproxy_iptables_ct_state_invalid_dropped_packets_total = {n}"),
            "why": "nftables mode does not drop them; clients relying on the drop see resets instead",
        }));
    }
    if let Some((release, v)) = kernel(s).filter(|(_, v)| *v < NFTABLES_MIN_KERNEL) {
        blockers.push(json!({
            "blocker": "kernel too old",
            "evidence": format!("kernel {release} ({}.{})", v.0, v.1),
            "why": "kube-proxy's nftables mode requires kernel 5.13 or later",
        }));
    }
    let names: Vec<String> = blockers
        .iter()
        .filter_map(|b| b["blocker"].as_str().map(str::to_string))
        .collect();
    Some(
        Finding::new(
            if blockers.is_empty() { Severity::Ok } else { Severity::Info },
            format!("before moving to nftables mode: {}", names.join("; ")),
        )
        .evidence("blockers", blockers)
        .remediation(&[
            "NodePorts on localhost: find the clients (conntrack -L -d 127.0.0.1 | grep dport) and point them at the node IP, or keep iptables mode.",
            "conntrack-invalid drops: expect some TCP resets after the switch; check the applications that produce out-of-window packets.",
            "Kernel below 5.13: upgrade the node's kernel before switching kube-proxy to nftables mode.",
            "Re-check after the switch: the counters above are exported by kube-proxy 1.31+ in iptables mode only.",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::probe::iptables::{IptablesFacts, SaveRun};
    use crate::probe::kube_proxy::metrics::KubeProxyMetrics;
    use crate::probe::kube_proxy::KubeProxyFacts;
    use crate::probe::modules::ModuleState;
    use crate::probe::nftables::{NftTable, NftablesFacts};

    fn thresholds(declared: ProxyMode) -> Thresholds {
        Thresholds {
            proxy_mode: declared,
            ..crate::config::default_thresholds()
        }
    }

    fn reporting(mode: ProxyMode) -> Snapshot {
        let mut s = healthy();
        s.facts.kube_proxy = Some(KubeProxyFacts {
            mode: Some(mode),
            ..Default::default()
        });
        s
    }

    #[test]
    fn what_runs_wins_over_what_is_declared() {
        let s = reporting(ProxyMode::Iptables);
        let m = effective_mode(&s, &thresholds(ProxyMode::Ipvs));
        assert_eq!((m.mode.clone(), m.source.as_str()), (ProxyMode::Iptables, "kube-proxy"));
        assert_eq!(m.declared, Some(ProxyMode::Ipvs));
        let m = effective_mode(&healthy(), &thresholds(ProxyMode::Ipvs));
        assert_eq!((m.mode, m.source.as_str(), m.observed), (ProxyMode::Ipvs, "flag", None));
        let m = effective_mode(&healthy(), &thresholds(ProxyMode::Unknown));
        assert_eq!((m.mode, m.declared), (ProxyMode::Unknown, None));
    }

    #[test]
    fn declared_ipvs_running_iptables_is_critical_and_names_the_missing_modules() {
        let mut s = reporting(ProxyMode::Iptables);
        s.facts
            .modules
            .as_mut()
            .unwrap()
            .modules
            .insert("ip_vs".into(), ModuleState::Missing);
        let t = thresholds(ProxyMode::Ipvs);
        let f = judge(mismatch, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            (f.evidence["declared"].as_str(), f.evidence["actual"].as_str()),
            (Some("ipvs"), Some("iptables"))
        );
        assert!(f.evidence["likely_cause"].as_str().unwrap().contains("ip_vs"), "{f:?}");
        // The node is then judged as the iptables node it is: missing IPVS modules are not critical.
        let v = crate::evaluate::evaluate(&s, &t);
        let missing = v.findings.iter().find(|f| f.id == "ipvs_modules_missing");
        assert!(missing.is_none_or(|f| f.severity < Severity::Critical), "{missing:?}");
        // Same mode: no finding; nothing declared: nothing to compare.
        assert_eq!(
            judge(mismatch, &reporting(ProxyMode::Ipvs), &t).unwrap().severity,
            Severity::Ok
        );
        assert!(judge(mismatch, &s, &thresholds(ProxyMode::Unknown)).is_none());
    }

    fn with_iptables_chains(s: &mut Snapshot, svc: u64, sep: u64) {
        let mut run = SaveRun {
            backend: "nft".into(),
            family: "ipv4".into(),
            ..Default::default()
        };
        run.counts.kube.svc = svc;
        run.counts.kube.sep = sep;
        s.facts.iptables = Some(IptablesFacts {
            saves: vec![run],
            ..Default::default()
        });
    }

    #[test]
    fn iptables_chains_in_nftables_mode_are_leftovers_with_counts() {
        let mut s = reporting(ProxyMode::Nftables);
        with_iptables_chains(&mut s, 3, 6);
        let t = thresholds(ProxyMode::Unknown);
        let f = judge(leftovers, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["leftovers"][0]["count"], 9);
        assert_eq!(f.evidence["leftovers"][0]["where"], "nft ipv4");
        // The same chains in iptables mode are the running mode's own.
        let mut s = reporting(ProxyMode::Iptables);
        with_iptables_chains(&mut s, 3, 6);
        assert_eq!(judge(leftovers, &s, &t).unwrap().severity, Severity::Ok);
        // kube-proxy's nftables table after a rollback to iptables.
        s.facts.nftables = Some(NftablesFacts {
            tables: vec![NftTable {
                family: "ipv4".into(),
                ..Default::default()
            }],
        });
        let f = judge(leftovers, &s, &t).unwrap();
        assert_eq!(f.evidence["leftovers"][0]["where"], "table ip kube-proxy");
        // Unknown mode: nothing is called left over.
        assert!(judge(leftovers, &healthy(), &t).is_none());
    }

    #[test]
    fn migration_blockers_only_when_there_is_one() {
        let t = thresholds(ProxyMode::Unknown);
        let mut s = reporting(ProxyMode::Iptables);
        s.facts.node.as_mut().unwrap().kernel_release = Some("6.1.0".into());
        let metrics = |local: Option<f64>, invalid: Option<f64>| KubeProxyMetrics {
            localhost_nodeports_accepted_packets_total: local,
            ct_state_invalid_dropped_packets_total: invalid,
            ..Default::default()
        };
        s.facts.kube_proxy.as_mut().unwrap().metrics = Some(metrics(Some(0.0), None));
        assert_eq!(
            judge(nftables_migration_blockers, &s, &t).unwrap().severity,
            Severity::Ok
        );
        s.facts.kube_proxy.as_mut().unwrap().metrics = Some(metrics(Some(12.0), Some(3.0)));
        s.facts.node.as_mut().unwrap().kernel_release = Some("5.10.0-28-amd64".into());
        let f = judge(nftables_migration_blockers, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info);
        let b = f.evidence["blockers"].as_array().unwrap();
        assert_eq!(b.len(), 3, "{b:?}");
        assert!(b[0]["evidence"].as_str().unwrap().ends_with("= 12"));
        // Already on nftables: nothing to migrate.
        assert!(judge(nftables_migration_blockers, &reporting(ProxyMode::Nftables), &t).is_none());
    }
}
