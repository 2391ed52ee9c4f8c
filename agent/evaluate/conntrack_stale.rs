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
        None if facts.service_ports == 0 && facts.undecoded.values().any(|n| *n > 0) => {
            "no decoded service ports to check: every service port kube-proxy's rules list leads through rules the decoder does not understand (see conntrack_stale_partial)".to_string()
        }
        None if facts.service_ports == 0 => "no service ports to check: no kube-proxy rules in nf_tables (iptables-nft, nftables), in the iptables probe's latest iptables-legacy-save, or in IPVS".to_string(),
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
                "first_seen_timestamp_seconds": g.first_seen_seconds,
                "checks": g.checks,
            })
        })
        .collect();
    let mut f = Finding::new(severity, summary)
        .evidence("stale_entries", entries)
        .evidence("pairs", persisting.len() as u64)
        .evidence("services", Value::Array(evidence))
        .evidence("source", facts.source.as_str())
        .evidence("generation", facts.generation);
    if severity != Severity::Ok {
        let first = persisting[0];
        let ipvs = facts.source.split('+').any(|s| s == "ipvs");
        let cmd = format!(
            "Delete the stale entries now: conntrack -D -p {} --orig-dst {} --reply-src {} (per pair listed; {}).",
            first.group.protocol,
            first.group.address,
            first
                .group
                .endpoint
                .rsplit_once(':')
                .map_or(first.group.endpoint.as_str(), |(a, _)| a)
                .trim_matches(|c| c == '[' || c == ']'),
            if ipvs {
                "in IPVS mode IPVS keeps its own connection to the removed real server too (ipvsadm -Lnc) and drops the clients' packets until it expires"
            } else {
                "clients recover at their next packet"
            }
        );
        f.remediation = vec![cmd];
        if ipvs {
            f.remediation.push(
                "IPVS mode: set net.ipv4.vs.expire_nodest_conn=1 (kube-proxy's setting; see ipvs_expire_sysctls): on kernels 5.9 and later, removing a real server then expires its IPVS connections and their conntrack entries at once, and the clients move on at their next packet.".into(),
            );
        }
        f.remediation.extend([
            "Check kube-proxy's version against the known stale-entry bugs: kubernetes#125467, #126468, #101607 and #139629 (scale to zero leaves flows blackholed); upgrade if affected.".into(),
            "Check kube-proxy's conntrack cleanup: its logs for conntrack deletion errors and its metrics (kubeproxy_sync_proxy_rules_* and conntrack cleanup counters such as kubeproxy_conntrack_reconciler_deleted_entries_total where present); the conntrack binary must exist in kube-proxy's image for older versions.".into(),
        ]);
    }
    Some(f)
}

/// Service ports listed in the partial finding's evidence.
const UNDECODED_EVIDENCE_CAP: usize = 10;

/// Stale detection is partial: some service ports lead through rules the
/// decoder does not understand, and their entries are not judged (unknown is
/// not empty: they are neither stale nor fine).
pub fn stale_detection_partial(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.conntrack_stale.as_ref()?;
    let total: u64 = facts.undecoded.values().sum();
    if total == 0 && !facts.legacy_errors.is_empty() {
        let mut f = Finding::new(
            Severity::Info,
            format!(
                "stale conntrack detection is partial: kube-proxy's iptables-legacy rules could not be read ({}); the other sources still count",
                facts.legacy_errors.join("; ")
            ),
        )
        .evidence("legacy_errors", json!(facts.legacy_errors));
        f.remediation = vec![
            "Check the iptables probe (probe_failed, proxywatch_probe_success{probe=\"iptables\"}): its iptables-legacy-save failed or printed text the decoder could not read; run iptables-legacy-save -t nat on the node to see it.".into(),
        ];
        return Some(f);
    }
    if total == 0 {
        return Some(Finding::new(Severity::Ok, "every service port's path was decoded"));
    }
    let by_source: Vec<String> = facts
        .undecoded
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(s, n)| format!("{n} from {s}"))
        .collect();
    let first = facts.undecoded_ports.first();
    let summary = format!(
        "stale conntrack detection is partial: {total} service ports ({}) lead through rules the decoder does not understand, and their {} conntrack entries are not judged{}",
        by_source.join(", "),
        facts.undecoded_entries,
        first.map_or(String::new(), |u| format!(" (first: {}: {})", u.service, u.reason))
    );
    let ports: Vec<Value> = facts
        .undecoded_ports
        .iter()
        .take(UNDECODED_EVIDENCE_CAP)
        .map(|u| json!({"service": u.service, "source": u.source, "reason": u.reason}))
        .collect();
    let mut f = Finding::new(Severity::Info, summary)
        .evidence("undecoded_service_ports", total)
        .evidence("undecoded_entries", facts.undecoded_entries)
        .evidence("by_source", json!(facts.undecoded))
        .evidence("service_ports", Value::Array(ports));
    f.remediation = vec![
        "Nothing is wrong with the node for this alone: kube-proxy wrote a rule layout this proxywatch version does not decode (a newer kube-proxy, another proxy, or hand-made rules in its chains). Compare the reason with the rules (nft list table ip kube-proxy, iptables-save -t nat) and upgrade proxywatch when kube-proxy's layout changed.".into(),
    ];
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::stale::StaleHistory;
    use crate::probe::conntrack_stale::{ConntrackStaleFacts, StaleGroup};

    fn snapshot(source: &str, groups: &[(&str, &str, u16, &str)], checks: u32) -> Snapshot {
        let facts = ConntrackStaleFacts {
            source: source.into(),
            service_ports: 3,
            stale: groups
                .iter()
                .map(|(svc, proto, port, ep)| StaleGroup {
                    service: format!("{svc}:{port}/{proto}"),
                    address: svc.parse().unwrap(),
                    port: *port,
                    protocol: proto.to_string(),
                    node_port: false,
                    endpoint: ep.to_string(),
                    entries: 4,
                })
                .collect(),
            ..Default::default()
        };
        let mut h = StaleHistory::default();
        let mut s = Snapshot::new("n");
        for i in 0..checks {
            s.derived.conntrack_stale = Some(h.observe(&facts, f64::from(i)));
        }
        s.facts.conntrack_stale = Some(facts);
        s
    }

    fn check(s: &Snapshot) -> Finding {
        let mode = super::super::mode::effective_mode(s, &crate::config::default_thresholds());
        stale_endpoint_entries(s, &crate::config::default_thresholds(), &mode).unwrap()
    }

    #[test]
    fn severity_follows_persistence_and_dns() {
        let web = [("10.96.0.20", "tcp", 80, "10.244.0.9:8080")];
        assert_eq!(
            check(&snapshot("nftables", &web, 1)).severity,
            Severity::Ok,
            "one check is not yet persisting"
        );
        let f = check(&snapshot("nftables", &web, 2));
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.remediation[0].contains("conntrack -D -p tcp --orig-dst 10.96.0.20 --reply-src 10.244.0.9"),
            "{:?}",
            f.remediation
        );
        let dns = [("10.96.0.10", "udp", 53, "[fd00::9]:53")];
        let f = check(&snapshot("iptables-nft", &dns, 2));
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.remediation[0].contains("--reply-src fd00::9 "), "{:?}", f.remediation);
    }

    #[test]
    fn ipvs_mode_says_ipvs_keeps_its_own_connection() {
        let dns = [("10.96.0.10", "udp", 53, "10.244.0.9:53")];
        let f = check(&snapshot("ipvs", &dns, 2));
        assert!(f.remediation[0].contains("ipvsadm -Lnc"), "{:?}", f.remediation);
        assert!(!f.remediation[0].contains("recover at their next packet"));
        assert!(f.remediation[1].contains("net.ipv4.vs.expire_nodest_conn=1"));
        let f = check(&snapshot("iptables-nft", &dns, 2));
        assert!(f.remediation.iter().all(|r| !r.contains("expire_nodest_conn")));
    }

    #[test]
    fn undecoded_ports_make_an_info_finding() {
        let mut s = snapshot("nftables", &[], 1);
        let mode = super::super::mode::effective_mode(&s, &crate::config::default_thresholds());
        let t = crate::config::default_thresholds();
        assert_eq!(stale_detection_partial(&s, &t, &mode).unwrap().severity, Severity::Ok);
        let f = s.facts.conntrack_stale.as_mut().unwrap();
        f.undecoded.insert("nftables".into(), 2);
        f.undecoded_entries = 7;
        f.undecoded_ports.push(crate::probe::conntrack_stale::UndecodedPort {
            service: "10.96.0.10:53/udp".into(),
            source: "nftables".into(),
            reason: "service-ips sends it to chain weird-X".into(),
        });
        let p = stale_detection_partial(&s, &t, &mode).unwrap();
        assert_eq!(p.severity, Severity::Info);
        assert!(
            p.summary.contains("2 from nftables") && p.summary.contains("weird-X"),
            "{}",
            p.summary
        );
        assert_eq!(p.evidence["undecoded_entries"], 7);
        // Undecoded ports are never stale: the stale finding stays ok.
        assert_eq!(check(&s).severity, Severity::Ok);
    }

    #[test]
    fn no_rules_read_is_said() {
        let mut s = snapshot("none", &[], 1);
        s.facts.conntrack_stale.as_mut().unwrap().service_ports = 0;
        let f = check(&s);
        assert_eq!(f.severity, Severity::Ok);
        assert!(f.summary.contains("iptables-legacy-save"), "{}", f.summary);
    }
}
