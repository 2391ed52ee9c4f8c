//! The kernel's neighbour (ARP/NDP) tables: filling toward gc_thresh3
//! (warning), and refusing neighbours now (critical: `table_fulls` rose
//! within `--neighbour-tables.window`; new flows to an unresolved next hop
//! fail with ENOBUFS and "neighbour table overflow" in the kernel log).

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::neighbour_tables::NeighbourTable;
use crate::snapshot::Snapshot;

/// The drop-in file the remediation appends to.
pub const DROP_IN: &str = "/etc/sysctl.d/90-kubernetes-neighbour.conf";

/// The sysctl prefix of a family's table.
fn sysctl_prefix(family: &str) -> Option<&'static str> {
    match family {
        "ipv4" => Some("net.ipv4.neigh.default"),
        "ipv6" => Some("net.ipv6.neigh.default"),
        _ => None,
    }
}

/// Thresholds to raise to: gc_thresh3 at least 65536 and twice the entries,
/// gc_thresh2 half of it, gc_thresh1 an eighth: the ratios and the values of
/// OpenShift's node tuning (8192 / 32768 / 65536, quoted in
/// redhat-performance/jetlag#261).
pub fn raised(t: &NeighbourTable) -> (u64, u64, u64) {
    let want = t
        .entries
        .unwrap_or(0)
        .saturating_mul(2)
        .max(t.gc_thresh3.unwrap_or(0).saturating_mul(2))
        .max(65_536);
    let t3 = want
        .checked_next_power_of_two()
        .unwrap_or(want)
        .min(u64::from(i32::MAX as u32));
    (t3 / 8, t3 / 2, t3)
}

fn remediation(tables: &[&NeighbourTable]) -> Vec<String> {
    let mut set = Vec::new();
    for t in tables {
        if let Some(p) = sysctl_prefix(&t.family) {
            let (a, b, c) = raised(t);
            set.push(format!("{p}.gc_thresh1={a} {p}.gc_thresh2={b} {p}.gc_thresh3={c}"));
        }
    }
    let words = set.join(" ");
    vec![
        format!(
            "Raise gc_thresh1, gc_thresh2 and gc_thresh3 together (gc_thresh1 < gc_thresh2 < gc_thresh3; raising only gc_thresh3 leaves the collector purging at gc_thresh2): sysctl -w {words}"
        ),
        format!(
            "Persist it in a drop-in of its own (appended, never overwritten): printf '%s\\n' {} | tee -a {DROP_IN}",
            set.iter()
                .flat_map(|s| s.split(' ').map(|kv| format!("'{}'", kv.replacen('=', " = ", 1))))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        "These limits are the kernel's, one table per family for all network namespaces; the sysctls exist in the host's namespace only, so set them on the node (a privileged pod with hostNetwork), not in a pod's namespace. node_exporter's per-device ARP entry counts do not show the limit or the refusals: the table counts every device and namespace, and only table_fulls (ip -s ntable show) says the kernel refused one.".into(),
    ]
}

fn table_evidence(t: &NeighbourTable) -> Value {
    json!({
        "family": t.family,
        "name": t.name,
        "entries": t.entries,
        "gc_thresh1": t.gc_thresh1,
        "gc_thresh2": t.gc_thresh2,
        "gc_thresh3": t.gc_thresh3,
        "fill": t.fill(),
        "table_fulls": t.counters.as_ref().map(|c| c.table_fulls),
        "forced_gc_runs": t.counters.as_ref().map(|c| c.forced_gc_runs),
        "undecoded": t.undecoded,
    })
}

pub fn fill(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.neighbour_tables.as_ref()?;
    let limit = t.neighbour_table_fill_warning;
    let known: Vec<&NeighbourTable> = facts.tables.iter().filter(|t| t.fill().is_some()).collect();
    if known.is_empty() {
        return None;
    }
    let over: Vec<&NeighbourTable> = known
        .iter()
        .copied()
        .filter(|t| t.fill().is_some_and(|f| f >= limit))
        .collect();
    let worst = known
        .iter()
        .copied()
        .max_by(|a, b| a.fill().unwrap_or(0.0).total_cmp(&b.fill().unwrap_or(0.0)))?;
    let describe = |t: &NeighbourTable| {
        format!(
            "{} {} entries of gc_thresh3 {} ({:.0} %)",
            t.family,
            t.entries.unwrap_or(0),
            t.gc_thresh3.unwrap_or(0),
            t.fill().unwrap_or(0.0) * 100.0
        )
    };
    let severity = if over.is_empty() {
        Severity::Ok
    } else {
        Severity::Warning
    };
    let summary = if over.is_empty() {
        format!(
            "neighbour tables below {:.0} % of gc_thresh3 (fullest: {})",
            limit * 100.0,
            describe(worst)
        )
    } else {
        format!(
            "neighbour table filling: {}; past gc_thresh3 the kernel refuses new neighbours and flows to them fail",
            over.iter().map(|t| describe(t)).collect::<Vec<_>>().join(", ")
        )
    };
    let mut f = Finding::new(severity, summary)
        .evidence(
            "tables",
            Value::Array(facts.tables.iter().map(table_evidence).collect()),
        )
        .evidence("fill_warning", limit);
    if severity > Severity::Ok {
        f.remediation = remediation(&over);
    }
    Some(f)
}

pub fn overflow(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let facts = s.facts.neighbour_tables.as_ref()?;
    let windows = s.derived.neighbour_tables.as_ref().map(|d| &d.windows);
    let mut rising = Vec::new();
    let mut since_boot = Vec::new();
    let mut seconds = 0.0f64;
    for t in &facts.tables {
        let Some(c) = &t.counters else {
            continue;
        };
        match windows.and_then(|w| w.get(&t.family)) {
            Some(d) => {
                seconds = seconds.max(d.seconds);
                let n = d.get("table_fulls");
                if n > 0 {
                    rising.push((t, n));
                }
            }
            None if c.table_fulls > 0 => since_boot.push(t),
            None => {}
        }
    }
    let (severity, summary) = if !rising.is_empty() {
        (
            Severity::Critical,
            format!(
                "the kernel is refusing neighbours: {} in the last {seconds:.0} s; new flows to those next hops fail (ENOBUFS, \"neighbour table overflow\")",
                rising
                    .iter()
                    .map(|(t, n)| format!(
                        "{} table_fulls +{n} ({} entries, gc_thresh3 {})",
                        t.family,
                        t.entries.map_or("?".into(), |e| e.to_string()),
                        t.gc_thresh3.map_or("?".into(), |e| e.to_string())
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else if !since_boot.is_empty() {
        (
            Severity::Info,
            format!(
                "neighbour tables refused neighbours since boot ({}); one reading cannot tell whether it is still happening",
                since_boot
                    .iter()
                    .map(|t| format!("{} table_fulls {}", t.family, t.counters.as_ref().map_or(0, |c| c.table_fulls)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else {
        (Severity::Ok, "no neighbour refused (table_fulls unchanged)".to_string())
    };
    let mut f = Finding::new(severity, summary)
        .evidence(
            "tables",
            Value::Array(facts.tables.iter().map(table_evidence).collect()),
        )
        .evidence(
            "table_fulls_increase",
            Value::Object(rising.iter().map(|(t, n)| (t.family.clone(), json!(n))).collect()),
        )
        .evidence("window_seconds", seconds);
    if severity == Severity::Critical {
        f.remediation = remediation(&rising.iter().map(|(t, _)| *t).collect::<Vec<_>>());
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::neighbour::NeighbourHistory;
    use crate::probe::neighbour_tables::{NeighbourCounters, NeighbourFacts};

    fn table(family: &str, entries: u64, thresh3: u64, fulls: u64) -> NeighbourTable {
        NeighbourTable {
            family: family.into(),
            name: "arp_cache".into(),
            entries: Some(entries),
            gc_thresh1: Some(128),
            gc_thresh2: Some(512),
            gc_thresh3: Some(thresh3),
            counters: Some(NeighbourCounters {
                table_fulls: fulls,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn fill_warns_past_the_threshold_with_all_three_raised() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        s.facts.neighbour_tables = Some(NeighbourFacts {
            tables: vec![table("ipv4", 900, 1024, 0), table("ipv6", 10, 1024, 0)],
        });
        let f = judge(fill, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.summary.contains("ipv4 900 entries of gc_thresh3 1024 (88 %)"),
            "{}",
            f.summary
        );
        assert!(!f.summary.contains("ipv6"), "{}", f.summary);
        assert!(
            f.remediation[0].ends_with(
                "sysctl -w net.ipv4.neigh.default.gc_thresh1=8192 net.ipv4.neigh.default.gc_thresh2=32768 net.ipv4.neigh.default.gc_thresh3=65536"
            ),
            "{}",
            f.remediation[0]
        );
        assert!(
            f.remediation[1].contains("'net.ipv4.neigh.default.gc_thresh3 = 65536' | tee -a"),
            "{}",
            f.remediation[1]
        );
        s.facts.neighbour_tables.as_mut().unwrap().tables[0].entries = Some(100);
        assert_eq!(judge(fill, &s, &t).unwrap().severity, Severity::Ok);
        // Unknown entries are no fill, and no verdict.
        s.facts.neighbour_tables.as_mut().unwrap().tables = vec![NeighbourTable {
            entries: None,
            ..table("ipv4", 0, 1024, 0)
        }];
        assert!(judge(fill, &s, &t).is_none());
    }

    #[test]
    fn raised_thresholds_keep_their_order() {
        assert_eq!(raised(&table("ipv4", 100_000, 100_000, 0)), (32_768, 131_072, 262_144));
        let (a, b, c) = raised(&table("ipv4", u64::MAX, u64::MAX, 0));
        assert!(a < b && b < c && c <= i32::MAX as u64);
    }

    #[test]
    fn overflow_is_critical_while_table_fulls_rises_then_clears() {
        let t = crate::config::default_thresholds();
        let mut h = NeighbourHistory::new(300.0);
        let mut s = healthy();
        let mut at = |s: &mut Snapshot, fulls: u64, mono: f64| {
            let facts = NeighbourFacts {
                tables: vec![table("ipv4", 1024, 1024, fulls)],
            };
            s.derived.neighbour_tables = Some(h.observe(&facts, mono));
            s.facts.neighbour_tables = Some(facts);
        };
        at(&mut s, 40, 0.0);
        assert_eq!(
            judge(overflow, &s, &t).unwrap().severity,
            Severity::Info,
            "since boot, one reading"
        );
        at(&mut s, 47, 15.0);
        let f = judge(overflow, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.summary.contains("ipv4 table_fulls +7"), "{}", f.summary);
        assert_eq!(f.evidence["table_fulls_increase"]["ipv4"], 7);
        assert!(f.remediation[0].contains("gc_thresh1=8192"));
        at(&mut s, 47, 200.0);
        assert_eq!(
            judge(overflow, &s, &t).unwrap().severity,
            Severity::Critical,
            "still in the window"
        );
        at(&mut s, 47, 400.0);
        assert_eq!(
            judge(overflow, &s, &t).unwrap().severity,
            Severity::Ok,
            "the window passed"
        );
    }
}
