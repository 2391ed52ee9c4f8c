//! Stale conntrack entries: UDP flows still NATed to an endpoint no longer in
//! the service's endpoints, what kube-proxy's reconciler would clear
//! (kubernetes/kubernetes `pkg/proxy/conntrack/cleanup.go`: "we only deal
//! with UDP protocol entries"). Warning once a (service, removed endpoint)
//! pair persisted across two checks (kube-proxy's own cleanup needs a
//! moment), critical when such a pair is to port 53 (DNS is blackholed for
//! the clients).
//!
//! Draining entries: TCP and SCTP flows to such an endpoint, which kube-proxy
//! never deletes: during a rolling update a terminating pod leaves the rules
//! while it still serves, and its connections finish cleanly (or are reset
//! once it is gone). Info while the oldest pair has been seen for less than
//! `--conntrack-stale.drain-window`, warning past it; a delete is only ever
//! suggested for pairs past it.

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
            "no stale UDP conntrack entries persisting ({} entries checked against {} service ports from {})",
            facts.examined_entries, facts.service_ports, facts.source
        ),
        Some(g) => format!(
            "{entries} UDP conntrack entries still NATed to endpoints no longer in the service's endpoints, across {} service/endpoint pairs (largest: {} → {}, {} entries){}",
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
            "Delete the stale entries now: {} (per pair listed; {}).",
            delete_command(&first.group),
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

/// The `conntrack -D` of one pair: its protocol, original destination and
/// reply source (kube-proxy's own filter: `filterForIPPortNAT`); a NodePort
/// by its port, as the address the client used may be any of the node's.
fn delete_command(g: &crate::probe::conntrack_stale::StaleGroup) -> String {
    let endpoint = endpoint_address(g);
    format!(
        "conntrack -D -p {} --orig-dst {} --orig-port-dst {} --reply-src {endpoint}",
        g.protocol, g.address, g.port
    )
}

/// The address of a pair's endpoint, without its port or brackets.
fn endpoint_address(g: &crate::probe::conntrack_stale::StaleGroup) -> &str {
    g.endpoint
        .rsplit_once(':')
        .map_or(g.endpoint.as_str(), |(a, _)| a)
        .trim_matches(|c| c == '[' || c == ']')
}

/// TCP and SCTP entries to endpoints no longer in the service's endpoints:
/// draining, never stale (kube-proxy leaves them be). Info within the drain
/// window, warning for pairs seen past it.
pub fn draining_to_removed_endpoints(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.conntrack_stale.as_ref()?;
    let derived = s.derived.conntrack_stale.as_ref()?;
    let window = t.conntrack_drain_window_seconds;
    let entries: u64 = facts.draining_entries.values().sum();
    let past: Vec<_> = derived
        .draining
        .iter()
        .filter(|g| g.seen_for_seconds >= window)
        .collect();
    let severity = match (derived.draining.is_empty(), past.is_empty()) {
        (true, _) => Severity::Ok,
        (false, true) => Severity::Info,
        (false, false) => Severity::Warning,
    };
    let oldest = derived
        .draining
        .iter()
        .max_by(|a, b| a.seen_for_seconds.total_cmp(&b.seen_for_seconds));
    let summary = match oldest {
        None => "no TCP or SCTP conntrack entries to endpoints no longer in the service's endpoints".to_string(),
        Some(g) if past.is_empty() => format!(
            "{entries} TCP/SCTP conntrack entries draining to endpoints no longer in the service's endpoints, across {} service/endpoint pairs, the oldest seen for {:.0} s of the {:.0} s drain window ({} → {}): connections finishing on a terminating pod (a rolling update); kube-proxy leaves them be",
            facts.draining_groups,
            g.seen_for_seconds,
            window,
            g.group.service,
            g.group.endpoint
        ),
        Some(g) => format!(
            "{} TCP/SCTP service/endpoint pairs still have conntrack entries to endpoints no longer in the service's endpoints past the {:.0} s drain window (oldest: {} → {}, {} entries, seen for {:.0} s): longer than a pod's termination grace period, the endpoint is likely gone and its clients hang until they time out",
            past.len(),
            window,
            g.group.service,
            g.group.endpoint,
            g.group.entries,
            g.seen_for_seconds
        ),
    };
    let evidence: Vec<Value> = derived
        .draining
        .iter()
        .take(EVIDENCE_CAP)
        .map(|g| {
            json!({
                "service": g.group.service,
                "node_port": g.group.node_port,
                "removed_endpoint": g.group.endpoint,
                "entries": g.group.entries,
                "seen_for_seconds": g.seen_for_seconds,
                "past_drain_window": g.seen_for_seconds >= window,
            })
        })
        .collect();
    let mut f = Finding::new(severity, summary)
        .evidence("draining_entries", entries)
        .evidence("pairs", facts.draining_groups)
        .evidence("pairs_past_drain_window", past.len() as u64)
        .evidence("drain_window_seconds", window)
        .evidence("services", Value::Array(evidence))
        .evidence("source", facts.source.as_str());
    f.remediation = match (past.first(), oldest) {
        (_, None) => vec![],
        (None, Some(g)) => vec![
            "Nothing to do while a rolling update or scale-down runs: these connections are draining to a terminating pod that still serves them, and kube-proxy leaves TCP and SCTP entries alone. Deleting them would cut connections that are finishing cleanly.".into(),
            format!(
                "See which pod left the service (oldest pair): kubectl get endpointslices -A -o wide | grep -wF {} (a terminating endpoint is listed with serving true, ready false).",
                endpoint_address(&g.group)
            ),
        ],
        (Some(g), _) => vec![
            format!(
                "Check that the endpoint is gone: kubectl get endpointslices -A -o wide | grep -wF {0} (absent, or serving false) and kubectl get pods -A -o wide | grep -wF {0}.",
                endpoint_address(&g.group)
            ),
            format!(
                "If it is gone, its clients hang until their TCP timeout (kube-proxy sets 24 h for established connections); delete that pair's entries so they reconnect at once: {} (per pair past the window).",
                delete_command(&g.group)
            ),
        ],
    };
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
        snapshot_every(source, groups, checks, 1.0)
    }

    /// `checks` checks `every` seconds apart (monotonic) with these pairs:
    /// TCP and SCTP ones are draining, the others stale.
    fn snapshot_every(source: &str, groups: &[(&str, &str, u16, &str)], checks: u32, every: f64) -> Snapshot {
        let all: Vec<StaleGroup> = groups
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
            .collect();
        let (draining, stale): (Vec<_>, Vec<_>) = all.into_iter().partition(|g| g.protocol != "udp");
        let facts = ConntrackStaleFacts {
            source: source.into(),
            service_ports: 3,
            draining_groups: draining.len() as u64,
            draining_entries: [("tcp".to_string(), 4 * draining.len() as u64)].into(),
            stale,
            draining,
            ..Default::default()
        };
        let mut h = StaleHistory::default();
        let mut s = Snapshot::new("n");
        for i in 0..checks {
            s.derived.conntrack_stale = Some(h.observe(&facts, f64::from(i), f64::from(i) * every));
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
        let web = [("10.96.0.20", "udp", 8125, "10.244.0.9:8125")];
        assert_eq!(
            check(&snapshot("nftables", &web, 1)).severity,
            Severity::Ok,
            "one check is not yet persisting"
        );
        let f = check(&snapshot("nftables", &web, 2));
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.remediation[0]
                .contains("conntrack -D -p udp --orig-dst 10.96.0.20 --orig-port-dst 8125 --reply-src 10.244.0.9"),
            "{:?}",
            f.remediation
        );
        assert!(
            f.summary.contains("no longer in the service's endpoints"),
            "{}",
            f.summary
        );
        let dns = [("10.96.0.10", "udp", 53, "[fd00::9]:53")];
        let f = check(&snapshot("iptables-nft", &dns, 2));
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.remediation[0].contains("--reply-src fd00::9 "), "{:?}", f.remediation);
    }

    fn draining(s: &Snapshot, window: f64) -> Finding {
        let t = Thresholds {
            conntrack_drain_window_seconds: window,
            ..crate::config::default_thresholds()
        };
        let mode = super::super::mode::effective_mode(s, &t);
        draining_to_removed_endpoints(s, &t, &mode).unwrap()
    }

    /// A rolling update: TCP to a terminating pod that left the rules is
    /// never stale; info (no delete) within the drain window, warning past it.
    #[test]
    fn tcp_to_a_removed_endpoint_drains_info_then_warning() {
        let web = [("10.96.0.20", "tcp", 80, "10.244.0.9:8080")];
        let s = snapshot_every("nftables", &web, 3, 60.0);
        assert_eq!(check(&s).severity, Severity::Ok, "TCP is never stale");
        let f = draining(&s, 300.0);
        assert_eq!(f.severity, Severity::Info, "{}", f.summary);
        assert!(
            f.remediation.iter().all(|r| !r.contains("conntrack -D")),
            "{:?}",
            f.remediation
        );
        assert_eq!(f.evidence["pairs_past_drain_window"], 0);
        assert!(f.summary.contains("120 s of the 300 s drain window"), "{}", f.summary);
        let f = draining(&s, 120.0);
        assert_eq!(f.severity, Severity::Warning, "{}", f.summary);
        assert!(
            f.remediation[1]
                .contains("conntrack -D -p tcp --orig-dst 10.96.0.20 --orig-port-dst 80 --reply-src 10.244.0.9"),
            "{:?}",
            f.remediation
        );
        let none = snapshot("nftables", &[("10.96.0.10", "udp", 53, "10.244.0.9:53")], 2);
        let f = draining(&none, 300.0);
        assert_eq!((f.severity, f.remediation.len()), (Severity::Ok, 0));
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
