//! Stale conntrack entries: flows still NATed to an endpoint the data plane
//! no longer has. Warning once a (service, dead endpoint) pair persisted
//! across two checks (kube-proxy's own cleanup needs a moment), critical when
//! such a pair is UDP to port 53 (DNS is blackholed for the clients).

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::snapshot::Snapshot;

/// Pairs listed in the finding's evidence.
const EVIDENCE_CAP: usize = 20;

pub fn stale_endpoint_entries(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.conntrack_stale.as_ref()?;
    let derived = s.derived.conntrack_stale.as_ref()?;
    let persisting: Vec<_> = derived.persisting().collect();
    let entries: u64 = persisting.iter().map(|g| g.group.entries).sum();
    let dns = persisting
        .iter()
        .any(|g| g.group.protocol == "udp" && g.group.port == 53);
    let severity = match (persisting.is_empty(), dns) {
        (true, _) => Severity::Ok,
        (false, true) => Severity::Critical,
        (false, false) => Severity::Warning,
    };
    let summary = match persisting.first() {
        None if facts.service_ports == 0 => "no service ports to check: no kube-proxy rules in nf_tables (iptables-nft, nftables) or IPVS (iptables-legacy rules are not read)".to_string(),
        None => format!(
            "no stale conntrack entries persisting ({} entries checked against {} service ports from {})",
            facts.examined_entries, facts.service_ports, facts.source
        ),
        Some(g) => format!(
            "{entries} conntrack entries still NATed to endpoints that no longer exist, across {} service/endpoint pairs (largest: {} → {}, {} entries){}",
            persisting.len(),
            g.group.service,
            g.group.endpoint,
            g.group.entries,
            if dns { "; DNS (udp/53) is blackholed for these clients" } else { "" }
        ),
    };
    let evidence: Vec<Value> = persisting
        .iter()
        .take(EVIDENCE_CAP)
        .map(|g| {
            json!({
                "service": g.group.service,
                "node_port": g.group.node_port,
                "dead_endpoint": g.group.endpoint,
                "entries": g.group.entries,
                "first_seen_seconds": g.first_seen_seconds,
                "checks": g.checks,
            })
        })
        .collect();
    let mut f = Finding::new("conntrack_stale_endpoint_entries", severity, summary)
        .evidence("stale_entries", entries)
        .evidence("pairs", persisting.len() as u64)
        .evidence("services", Value::Array(evidence))
        .evidence("source", facts.source.as_str())
        .evidence("generation", facts.generation);
    if severity != Severity::Ok {
        let first = persisting[0];
        let cmd = format!(
            "Delete the stale entries now: conntrack -D -p {} --orig-dst {} --reply-src {} (per pair listed; clients recover at their next packet).",
            first.group.protocol,
            first.group.address,
            first.group.endpoint.rsplit_once(':').map_or(first.group.endpoint.as_str(), |(a, _)| a).trim_matches(|c| c == '[' || c == ']')
        );
        f.remediation = vec![
            cmd,
            "Check kube-proxy's version against the known stale-entry bugs: kubernetes#125467, #126468, #101607 and #139629 (scale to zero leaves flows blackholed); upgrade if affected.".into(),
            "Check kube-proxy's conntrack cleanup: its logs for conntrack deletion errors and its metrics (kubeproxy_sync_proxy_rules_* and conntrack cleanup counters such as kubeproxy_conntrack_reconciler_deleted_entries_total where present); the conntrack binary must exist in kube-proxy's image for older versions.".into(),
        ];
    }
    Some(f)
}
