//! Source NAT: translated source ports running out for one destination, and
//! source NAT rules without `random-fully` that carry traffic.

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::snat::{SnatGroup, SnatRule};
use crate::snapshot::Snapshot;

fn group_evidence(g: &SnatGroup) -> Value {
    json!({
        "source": g.source.to_string(),
        "destination": g.destination.to_string(),
        "port": g.port,
        "protocol": g.protocol,
        "zone": g.zone,
        "ports_in_use": g.ports_in_use,
        "range": g.range,
        "range_from": g.range_from,
        "fill": g.fill,
    })
}

fn icmp(g: &SnatGroup) -> bool {
    g.protocol.starts_with("icmp")
}

fn describe(g: &SnatGroup) -> String {
    let zone = if g.zone == 0 {
        String::new()
    } else {
        format!(" in zone {}", g.zone)
    };
    if icmp(g) {
        return format!(
            "{} → {}/{}{zone} uses {} of {} ids ({:.0} %)",
            g.source,
            g.destination,
            g.protocol,
            g.ports_in_use,
            g.range_size,
            g.fill * 100.0
        );
    }
    format!(
        "{} → {}:{}/{}{zone} uses {} of {} ports ({:.0} %)",
        g.source,
        g.destination,
        g.port,
        g.protocol,
        g.ports_in_use,
        g.range_size,
        g.fill * 100.0
    )
}

/// The conntrack listing of one group's entries (conntrack takes bare IPv6 addresses).
pub fn inspect(g: &SnatGroup) -> String {
    let mut c = format!("conntrack -L -p {} --reply-src {}", g.protocol, g.destination);
    if !icmp(g) {
        c += &format!(" --reply-port-src {}", g.port);
    }
    c += &format!(" --reply-dst {}", g.source);
    if g.zone != 0 {
        c += &format!(" --zone {}", g.zone);
    }
    c
}

pub fn ports_near_exhaustion(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.conntrack_stale.as_ref()?.snat.as_ref()?;
    let limit = t.snat_fill_warning;
    let over: Vec<&SnatGroup> = facts.top.iter().filter(|g| g.fill >= limit).collect();
    let full = over.iter().any(|g| g.ports_in_use >= g.range_size);
    let severity = match (over.is_empty(), full) {
        (true, _) => Severity::Ok,
        (false, false) => Severity::Warning,
        (false, true) => Severity::Critical,
    };
    let summary = match (over.first(), facts.top.first()) {
        (Some(_), _) => format!(
            "SNAT source ports {}: {}; once a group is full, new connections to that destination fail or collide (insert_failed)",
            if full { "exhausted" } else { "running out" },
            over.iter().take(3).map(|g| describe(g)).collect::<Vec<_>>().join(", ")
        ),
        (None, Some(g)) => format!("SNAT groups below {:.0} % of their port range (fullest: {})", limit * 100.0, describe(g)),
        (None, None) => "no source-NATed connection in the conntrack table".into(),
    };
    let mut f = Finding::new(severity, summary)
        .evidence("groups", Value::Array(over.iter().map(|g| group_evidence(g)).collect()))
        .evidence("fill_warning", limit)
        .evidence("max_fill", facts.max_fill)
        .evidence("snat_entries", facts.entries)
        .evidence("snat_groups", facts.groups)
        // Groups beyond the agent's cap were not judged one by one.
        .evidence("groups_not_judged", facts.groups_dropped);
    if let Some(g) = over.first() {
        f = f.remediation_owned(vec![
            format!("See the connections of the fullest group (read-only): {}", inspect(g)),
            "Give the rule more ports or addresses: a wider --to-ports range (MASQUERADE) or a --to-source address range (SNAT), through the component that owns the rule (kube-proxy, ip-masq-agent, the CNI); with range_from=default the rule has none and already uses 1024-65535.".into(),
            "Fewer concurrent connections to that destination from this node: connection reuse (HTTP keep-alive, pools) in the clients, or spread the clients over nodes; connections in TIME_WAIT keep their port until nf_conntrack_tcp_timeout_time_wait (120 s by default) passes.".into(),
            "Use --random-fully on the rule (finding masquerade_without_random_fully) so that ports are not picked in sequence and collide less under load.".into(),
        ]);
    }
    Some(f)
}

fn rule_evidence(r: &SnatRule, delta: Option<u64>) -> Value {
    json!({
        "backend": r.backend,
        "family": r.family,
        "table": r.table,
        "chain": r.chain,
        "position": r.position,
        "action": r.action,
        "ports": r.ports,
        "packets": r.packets,
        "packets_delta": delta,
    })
}

fn place(r: &SnatRule) -> String {
    format!(
        "{} {} {} rule {} ({})",
        r.backend, r.family, r.chain, r.position, r.action
    )
}

pub fn without_random_fully(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.conntrack_stale.as_ref()?.snat.as_ref()?;
    let moved = s.derived.snat_rules.as_ref();
    let delta = |i: usize| moved.and_then(|d| d.rules.get(i)).and_then(|r| r.packets_delta);
    let without: Vec<(usize, &SnatRule)> = facts
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.random_fully)
        .collect();
    let carrying: Vec<&(usize, &SnatRule)> = without
        .iter()
        .filter(|(i, _)| delta(*i).is_some_and(|d| d > 0))
        .collect();
    let unknown: Vec<&(usize, &SnatRule)> = without
        .iter()
        .filter(|(i, r)| r.packets.is_none() || delta(*i).is_none())
        .collect();
    let (severity, summary) = if !carrying.is_empty() {
        (
            Severity::Warning,
            format!(
                "source NAT without random-fully carries traffic: {}; ports picked in sequence collide under load (insert_failed, dropped SYNs)",
                carrying.iter().map(|(_, r)| place(r)).collect::<Vec<_>>().join(", ")
            ),
        )
    } else if unknown.iter().any(|(_, r)| r.packets.is_none()) {
        (
            Severity::Info,
            format!(
                "source NAT rules without random-fully whose traffic is not known (no counter): {}",
                unknown
                    .iter()
                    .filter(|(_, r)| r.packets.is_none())
                    .map(|(_, r)| place(r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else if !facts.rule_errors.is_empty() {
        (
            Severity::Info,
            format!(
                "source NAT rules partly unread, so rules without random-fully may be missing: {}",
                facts.rule_errors.join("; ")
            ),
        )
    } else if without.is_empty() {
        (
            Severity::Ok,
            format!("{} source NAT rules, all with random-fully", facts.rules.len()),
        )
    } else if !unknown.is_empty() {
        // A single reading (`check`, or serve's first): movement needs a second one.
        (
            Severity::Ok,
            format!(
                "{} source NAT rules without random-fully; whether they carry traffic needs a second reading of their counters",
                without.len()
            ),
        )
    } else {
        (
            Severity::Ok,
            format!(
                "{} source NAT rules without random-fully, none carrying traffic since the last reading",
                without.len()
            ),
        )
    };
    let mut f = Finding::new(severity, summary)
        .evidence(
            "rules_without_random_fully",
            Value::Array(without.iter().map(|(i, r)| rule_evidence(r, delta(*i))).collect()),
        )
        .evidence("rules", facts.rules.len())
        .evidence("rule_errors", facts.rule_errors.clone());
    if severity > Severity::Ok {
        let first = carrying.first().or(unknown.first()).map(|(_, r)| *r);
        f = f.remediation_owned(random_fully_steps(first));
    }
    Some(f)
}

/// What to do about source NAT without random-fully: see `first` (the first rule
/// carrying traffic, else of unknown traffic) and have its owner fix it; without
/// one, the rules the agent could not read.
fn random_fully_steps(first: Option<&SnatRule>) -> Vec<String> {
    let Some(r) = first else {
        return vec!["Some source NAT rules could not be read (evidence rule_errors): give the agent CAP_NET_ADMIN in the node's network namespace, or wait for the iptables probe's next legacy save; nothing on the node needs changing for this.".into()];
    };
    vec![
        format!("See the rule and its counters (read-only): {}", list_rule(r)),
        "Have the component that owns the rule add --random-fully (nft: fully-random): kube-proxy does so itself when its iptables supports it; ip-masq-agent, flannel and Calico have a setting for it. A rule edited by hand is rewritten at the owner's next sync.".into(),
    ]
}

/// The read-only command that lists a rule's chain with its counters.
fn list_rule(r: &SnatRule) -> String {
    match (r.backend.as_str(), r.family.as_str()) {
        ("nftables", _) => format!(
            "nft list chain {} {} {}",
            if r.family == "ipv6" { "ip6" } else { "ip" },
            r.table,
            r.chain
        ),
        ("iptables-legacy", "ipv6") => format!("ip6tables-legacy -t nat -L {} -v -n --line-numbers", r.chain),
        ("iptables-legacy", _) => format!("iptables-legacy -t nat -L {} -v -n --line-numbers", r.chain),
        (_, "ipv6") => format!("ip6tables-nft -t nat -L {} -v -n --line-numbers", r.chain),
        _ => format!("iptables-nft -t nat -L {} -v -n --line-numbers", r.chain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::snat::SnatHistory;
    use crate::probe::conntrack_stale::ConntrackStaleFacts;
    use crate::probe::snat::SnatFacts;

    fn group(n: u64, size: u64) -> SnatGroup {
        SnatGroup {
            source: "192.168.0.2".parse().unwrap(),
            destination: "203.0.113.7".parse().unwrap(),
            port: 443,
            protocol: "tcp".into(),
            ports_in_use: n,
            range: format!("20000-{}", 20000 + size - 1),
            range_size: size,
            range_from: "rule".into(),
            fill: n as f64 / size as f64,
            zone: 0,
        }
    }

    #[test]
    fn a_zone_and_an_icmp_group_are_named_and_listed_as_such() {
        let t = crate::config::default_thresholds();
        let g = SnatGroup {
            protocol: "icmp".into(),
            port: 0,
            zone: 7,
            range: "0-65535".into(),
            range_from: "default".into(),
            ..group(60_000, 65536)
        };
        let s = with(SnatFacts {
            max_fill: Some(g.fill),
            top: vec![g],
            ..Default::default()
        });
        let f = judge(ports_near_exhaustion, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.summary.contains("203.0.113.7/icmp in zone 7 uses 60000 of 65536 ids"),
            "{}",
            f.summary
        );
        assert_eq!(
            f.remediation[0],
            "See the connections of the fullest group (read-only): conntrack -L -p icmp --reply-src 203.0.113.7 --reply-dst 192.168.0.2 --zone 7"
        );
        assert_eq!(f.evidence["groups"][0]["zone"], 7);
    }

    fn with(snat: SnatFacts) -> Snapshot {
        let mut s = healthy();
        s.facts.conntrack_stale = Some(ConntrackStaleFacts {
            snat: Some(snat),
            ..Default::default()
        });
        s
    }

    #[test]
    fn fill_warns_at_the_threshold_and_is_critical_when_full() {
        let t = crate::config::default_thresholds();
        for (n, want) in [(7, Severity::Ok), (8, Severity::Warning), (10, Severity::Critical)] {
            let s = with(SnatFacts {
                top: vec![group(n, 10)],
                max_fill: Some(n as f64 / 10.0),
                ..Default::default()
            });
            let f = judge(ports_near_exhaustion, &s, &t).unwrap();
            assert_eq!(f.severity, want, "{n} of 10: {}", f.summary);
            if want > Severity::Ok {
                assert!(
                    f.remediation[0].contains("--reply-src 203.0.113.7 --reply-port-src 443"),
                    "{:?}",
                    f.remediation
                );
            }
        }
        assert!(
            judge(ports_near_exhaustion, &healthy(), &t).is_none(),
            "no SNAT facts: nothing judged"
        );
    }

    fn rule(random_fully: bool, packets: Option<u64>) -> SnatRule {
        SnatRule {
            backend: "iptables-nft".into(),
            family: "ipv4".into(),
            table: "nat".into(),
            chain: "POSTROUTING".into(),
            position: 1,
            action: "MASQUERADE".into(),
            random_fully,
            ports: None,
            packets,
        }
    }

    #[test]
    fn warns_only_for_rules_whose_counters_moved() {
        let t = crate::config::default_thresholds();
        let facts = |p: u64| SnatFacts {
            rules: vec![rule(false, Some(p)), rule(true, Some(p))],
            ..Default::default()
        };
        let mut h = SnatHistory::default();
        let mut s = with(facts(5));
        s.derived.snat_rules = Some(h.observe(&facts(5), 0.0));
        let f = judge(without_random_fully, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Ok, "one reading: no movement known");
        assert!(f.summary.contains("needs a second reading"), "{}", f.summary);
        let mut s = with(facts(5));
        s.derived.snat_rules = Some(h.observe(&facts(5), 10.0));
        assert_eq!(
            judge(without_random_fully, &s, &t).unwrap().severity,
            Severity::Ok,
            "no traffic"
        );
        let mut s = with(facts(9));
        s.derived.snat_rules = Some(h.observe(&facts(9), 20.0));
        let f = judge(without_random_fully, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning, "{}", f.summary);
        assert!(f.remediation[0].contains("iptables-nft -t nat -L POSTROUTING -v -n --line-numbers"));
        // Rules that could not be read: said so (info), never "all with random-fully".
        let s = with(SnatFacts {
            rule_errors: vec!["ip source NAT rules over nf_tables netlink: EPERM".into()],
            ..Default::default()
        });
        let f = judge(without_random_fully, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info, "{}", f.summary);
        // Without a counter: said so, never taken as traffic or as none.
        let s = with(SnatFacts {
            rules: vec![rule(false, None)],
            ..Default::default()
        });
        let f = judge(without_random_fully, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert!(f.summary.contains("not known"), "{}", f.summary);
    }
}
