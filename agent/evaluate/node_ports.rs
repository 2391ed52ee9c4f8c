//! NodePorts an outgoing connection can take: inside `ip_local_port_range`
//! and not in `ip_local_reserved_ports` (kubernetes#111682, #111823). A
//! warning: the NodePort fails on this node only while a local connection
//! holds the port, which makes it intermittent and hard to trace.

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::node_ports::{format_ranges, PortKind};
use crate::snapshot::Snapshot;

/// Ports listed in the finding's evidence.
const EVIDENCE_CAP: usize = 50;

/// The drop-in file the remediation appends to (a new name: nothing else writes it).
pub const DROP_IN: &str = "/etc/sysctl.d/90-kubernetes-nodeports-reserved.conf";

pub fn in_ephemeral_range(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let f = s.facts.node_ports.as_ref()?;
    let range = f.ip_local_port_range?;
    let range_text = format!("{}-{}", range.first, range.last);
    let reserved = format_ranges(&f.ip_local_reserved_ports);
    let listed = |kind: Option<PortKind>| -> Vec<String> {
        f.exposed
            .iter()
            .filter(|p| kind.is_none_or(|k| p.kind == k))
            .take(EVIDENCE_CAP)
            .map(|p| format!("{}/{}", p.port, p.protocol))
            .collect()
    };
    let unseen = {
        let mut u = Vec::new();
        if f.undecoded > 0 {
            u.push(format!("{} rules or map elements not decoded", f.undecoded));
        }
        if !f.unread.is_empty() {
            u.push(format!("not read: {}", f.unread.join(", ")));
        }
        if u.is_empty() {
            String::new()
        } else {
            format!(" ({})", u.join("; "))
        }
    };
    let severity = if f.in_ephemeral_range > 0 {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let summary = if f.in_ephemeral_range > 0 {
        format!(
            "{} NodePorts are inside the ephemeral port range {range_text} and not reserved: an outgoing connection of this node can take one and the NodePort then fails here ({}){unseen}",
            f.in_ephemeral_range,
            listed(None).join(", ")
        )
    } else if f.node_ports == 0 {
        format!("no NodePorts in the data plane (source {}){unseen}", f.source)
    } else {
        format!(
            "none of the {} NodePorts ({}) is inside the ephemeral port range {range_text} unreserved{unseen}",
            f.node_ports, f.source
        )
    };
    let exposed: Vec<Value> = f
        .exposed
        .iter()
        .take(EVIDENCE_CAP)
        .map(|p| json!({"port": p.port, "protocol": p.protocol, "kind": p.kind, "families": p.families}))
        .collect();
    let mut finding = Finding::new(severity, summary)
        .evidence("ip_local_port_range", range_text.as_str())
        .evidence("ip_local_reserved_ports", reserved.as_str())
        .evidence("node_ports", f.node_ports)
        .evidence("in_ephemeral_range", f.in_ephemeral_range)
        .evidence("exposed", Value::Array(exposed))
        .evidence("health_check_node_ports", listed(Some(PortKind::HealthCheck)))
        .evidence("source", f.source.as_str())
        .evidence("undecoded", f.undecoded);
    if let (Severity::Warning, Some(value)) = (severity, f.reserve_value.as_deref()) {
        finding.remediation = vec![
            format!(
                "Reserve them now (the value keeps what is reserved today, {}): sysctl -w net.ipv4.ip_local_reserved_ports={value}",
                if reserved.is_empty() { "nothing" } else { reserved.as_str() }
            ),
            format!(
                "Persist it in a drop-in of its own (appended, never overwritten; the last file in sysctl.d order wins): echo 'net.ipv4.ip_local_reserved_ports = {value}' | tee -a {DROP_IN}; check that no other file sets it: grep -r ip_local_reserved_ports /etc/sysctl.conf /etc/sysctl.d/"
            ),
            "Or reserve the whole NodePort range at once (kube-apiserver --service-node-port-range, 30000-32767 by default), appended to the current value, or move net.ipv4.ip_local_port_range so it no longer overlaps it. Reserving only stops new connections from taking a port: one that holds it now keeps it until it closes (ss -tanup 'sport = :PORT' names it).".into(),
        ];
    }
    Some(finding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::probe::node_ports::{NodePort, NodePortFacts, PortRange};

    fn facts(exposed: &[(u16, PortKind)], reserved: Vec<PortRange>) -> NodePortFacts {
        NodePortFacts {
            ip_local_port_range: Some(PortRange {
                first: 1024,
                last: 65535,
            }),
            ip_local_reserved_ports: reserved,
            source: "iptables-nft".into(),
            node_ports: 3,
            in_ephemeral_range: exposed.len() as u64,
            exposed: exposed
                .iter()
                .map(|(port, kind)| NodePort {
                    port: *port,
                    protocol: "tcp".into(),
                    kind: *kind,
                    families: vec!["ipv4".into()],
                    sources: vec!["iptables-nft".into()],
                })
                .collect(),
            reserve_value: (!exposed.is_empty()).then(|| "9100,30080,30081".into()),
            ..Default::default()
        }
    }

    #[test]
    fn exposed_ports_warn_with_the_value_that_reserves_them() {
        let mut s = healthy();
        let t = crate::config::default_thresholds();
        s.facts.node_ports = Some(facts(
            &[(30080, PortKind::NodePort), (30081, PortKind::HealthCheck)],
            vec![PortRange {
                first: 9100,
                last: 9100,
            }],
        ));
        let f = judge(in_ephemeral_range, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.summary.contains("30080/tcp, 30081/tcp"), "{}", f.summary);
        assert_eq!(f.evidence["health_check_node_ports"], json!(["30081/tcp"]));
        assert!(f.remediation[0].ends_with("sysctl -w net.ipv4.ip_local_reserved_ports=9100,30080,30081"));
        assert!(f.remediation[0].contains("reserved today, 9100"));
        assert!(f.remediation[1].contains(&format!("| tee -a {DROP_IN}")));
        assert!(
            f.remediation.iter().all(|r| !r.contains(" > ")),
            "never overwrites a file"
        );
    }

    #[test]
    fn nothing_exposed_is_ok_and_says_what_was_seen() {
        let mut s = healthy();
        let t = crate::config::default_thresholds();
        assert!(judge(in_ephemeral_range, &s, &t).is_none(), "not read: no verdict");
        let mut none = facts(&[], vec![]);
        none.undecoded = 2;
        s.facts.node_ports = Some(none);
        let f = judge(in_ephemeral_range, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Ok);
        assert!(
            f.summary.contains("2 rules or map elements not decoded"),
            "{}",
            f.summary
        );
        assert!(f.remediation.is_empty());
    }
}
