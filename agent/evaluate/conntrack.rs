//! Conntrack checks: fill, drops ("table full, dropping packet"), insert
//! failures (the SNAT/DNAT race behind 5 s DNS timeouts) and sizing.

use super::{grade, Finding, ModeDecision, Severity, Thresholds};
use crate::history::window::CounterDeltas;
use crate::snapshot::Snapshot;
use crate::timefmt::human_duration;

/// kube-proxy's sizing rule: max(conntrack.min, conntrack.maxPerCore × cores),
/// with its defaults min = 131072 and maxPerCore = 32768.
pub fn recommended_conntrack_max(cpus: u32) -> u64 {
    (32_768u64 * cpus as u64).max(131_072)
}

const RAISE_MAX: &[&str] = &[
    "Raise the limit now: sysctl -w net.netfilter.nf_conntrack_max=<value> (e.g. 1048576; each entry costs ~300 bytes of kernel memory).",
    "Persist it, or set kube-proxy's conntrack.maxPerCore / conntrack.min so kube-proxy sets it at start: first see who sets it (grep -r nf_conntrack_max /etc/sysctl.conf /etc/sysctl.d/), then change that line, or add one to a file of its own, appending, never replacing: echo 'net.netfilter.nf_conntrack_max = <value>' | sudo tee -a /etc/sysctl.d/90-proxywatch-conntrack.conf (a file later in name order wins).",
    "Find who creates the connections (conntrack -L | awk '{print $4}' | sort | uniq -c | sort -rn | head) and reduce churn; IPVS mode tracks fewer entries than iptables mode.",
    "Roll back: sysctl -w net.netfilter.nf_conntrack_max=<previous value> and remove the line you added.",
];

pub fn table_fill(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ct = s.facts.conntrack.as_ref()?;
    let ratio = ct.fill_ratio()?;
    let severity = grade(ratio, t.conntrack_fill_warning, t.conntrack_fill_critical);
    Some(
        Finding::new(
            severity,
            format!(
                "conntrack table {:.1}% full ({} of {} entries)",
                ratio * 100.0,
                ct.entries,
                ct.max
            ),
        )
        .evidence("entries", ct.entries)
        .evidence("max", ct.max)
        .evidence("fill_ratio", round(ratio))
        .evidence(
            "threshold",
            if severity == Severity::Critical {
                t.conntrack_fill_critical
            } else {
                t.conntrack_fill_warning
            },
        )
        .remediation(RAISE_MAX),
    )
}

/// Counter increases over `--conntrack.window`, once there are two readings.
fn window(s: &Snapshot) -> Option<&CounterDeltas> {
    s.derived.conntrack.as_ref()?.window.as_ref()
}

pub fn drops(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ct = s.facts.conntrack.as_ref()?;
    ct.stats_source.as_ref()?;
    match window(s) {
        Some(w) => {
            let (drop, early) = (w.get("drop"), w.get("early_drop"));
            let severity = if drop + early > 0 {
                Severity::Critical
            } else {
                Severity::Ok
            };
            Some(
                Finding::new(
                    severity,
                    format!(
                        "table full, dropping packet: {drop} drops and {early} early evictions in the last {}",
                        human_duration(w.seconds)
                    ),
                )
                .evidence("drop_increase", drop)
                .evidence("early_drop_increase", early)
                .evidence("window_seconds", round(w.seconds))
                .evidence("entries", ct.entries)
                .evidence("max", ct.max)
                .remediation(RAISE_MAX),
            )
        }
        None => {
            // A single reading (proxywatch check): only totals since boot are known.
            let (drop, early) = (ct.stat("drop"), ct.stat("early_drop"));
            let severity = if drop + early > 0 { Severity::Info } else { Severity::Ok };
            Some(
                Finding::new(
                    severity,
                    format!(
                        "{drop} packets dropped and {early} entries evicted since boot because the table was full; one reading cannot tell whether it is still happening"
                    ),
                )
                .evidence("drop_total", drop)
                .evidence("early_drop_total", early)
                .remediation(&[
                    "Watch the counters: proxywatch serve exports proxywatch_conntrack_stat_drop_total; or run conntrack -S twice a minute apart.",
                    "Check the kernel log for 'nf_conntrack: table full, dropping packet' (journalctl -k | grep conntrack).",
                ]),
            )
        }
    }
}

pub fn insert_failed(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    s.facts.conntrack.as_ref()?;
    let w = window(s)?;
    let n = w.get("insert_failed");
    Some(
        Finding::new(
            if n > 0 { Severity::Warning } else { Severity::Ok },
            format!(
                "{n} conntrack insert failures in the last {} (the SNAT/DNAT race behind 5 s DNS timeouts)",
                human_duration(w.seconds)
            ),
        )
        .evidence("insert_failed_increase", n)
        .evidence("window_seconds", round(w.seconds))
        .remediation(&[
            "Usually parallel UDP queries from one socket (glibc resolver A+AAAA) racing in conntrack: add `options single-request-reopen` to pods' dnsConfig, or run NodeLocal DNSCache.",
            "Kernels >= 5.0 resolve most such clashes (the clashres counter); upgrade older kernels.",
            "Check with conntrack -S which CPUs report insert_failed.",
        ]),
    )
}

pub fn max_below_recommended(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ct = s.facts.conntrack.as_ref()?;
    let cpus = s.facts.node.as_ref()?.cpus;
    let want = recommended_conntrack_max(cpus);
    Some(
        Finding::new(
            if ct.max < want { Severity::Warning } else { Severity::Ok },
            format!(
                "nf_conntrack_max is {} but kube-proxy's rule for {cpus} CPUs gives {want} (max(131072, 32768 × cores))",
                ct.max
            ),
        )
        .evidence("max", ct.max)
        .evidence("recommended", want)
        .evidence("cpus", cpus)
        .remediation(RAISE_MAX),
    )
}

/// The table fills at its current growth rate within the thresholds (the trend
/// is a robust fit over `--conntrack.trend-window`, derived by the history stage).
pub fn time_to_full(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ct = s.facts.conntrack.as_ref()?;
    let tr = s.derived.conntrack.as_ref()?.trend.as_ref()?;
    let severity = match tr.seconds_to_full {
        Some(secs) if secs < t.conntrack_time_to_full_critical_seconds => Severity::Critical,
        Some(secs) if secs < t.conntrack_time_to_full_warning_seconds => Severity::Warning,
        _ => Severity::Ok,
    };
    let summary = match tr.seconds_to_full {
        Some(secs) => format!(
            "conntrack table grows by {:.1} entries/s: full in about {} at this rate ({} of {} entries now, fitted over the last {})",
            tr.slope_per_second,
            human_duration(secs),
            ct.entries,
            ct.max,
            human_duration(tr.window_seconds)
        ),
        None => format!(
            "conntrack table is not growing ({:+.1} entries/s over the last {})",
            tr.slope_per_second,
            human_duration(tr.window_seconds)
        ),
    };
    let mut steps = vec![
        "Find what opens the connections now: conntrack -L -o extended | awk '{print $3, $7}' | sort | uniq -c | sort -rn | head (protocol and source), and stop the churn at its source.",
    ];
    steps.extend_from_slice(RAISE_MAX);
    Some(
        Finding::new(severity, summary)
            .evidence("slope_per_second", tr.slope_per_second)
            .evidence("seconds_to_full", tr.seconds_to_full)
            .evidence("window_seconds", tr.window_seconds)
            .evidence("points", tr.points as u64)
            .evidence("entries", ct.entries)
            .evidence("max", ct.max)
            .evidence(
                "threshold_seconds",
                if severity == Severity::Critical {
                    t.conntrack_time_to_full_critical_seconds
                } else {
                    t.conntrack_time_to_full_warning_seconds
                },
            )
            .remediation(&steps),
    )
}

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;

    fn derived(s: &mut Snapshot) -> &mut crate::history::ConntrackDerived {
        s.derived.conntrack.get_or_insert_with(Default::default)
    }

    #[test]
    fn recommended_follows_kube_proxy() {
        assert_eq!(recommended_conntrack_max(2), 131_072);
        assert_eq!(recommended_conntrack_max(4), 131_072);
        assert_eq!(recommended_conntrack_max(16), 524_288);
    }

    #[test]
    fn fill_thresholds() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        let ct = s.facts.conntrack.as_mut().unwrap();
        ct.max = 1000;
        ct.entries = 799;
        assert_eq!(judge(table_fill, &s, &t).unwrap().severity, Severity::Ok);
        s.facts.conntrack.as_mut().unwrap().entries = 800;
        assert_eq!(judge(table_fill, &s, &t).unwrap().severity, Severity::Warning);
        s.facts.conntrack.as_mut().unwrap().entries = 950;
        let f = judge(table_fill, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.evidence["entries"], 950);
        assert!(f.summary.contains("95.0%"), "{}", f.summary);
        s.facts.conntrack.as_mut().unwrap().max = 0;
        assert!(judge(table_fill, &s, &t).is_none(), "no limit, no ratio");
    }

    #[test]
    fn drops_in_window_are_critical() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        let ct = s.facts.conntrack.as_mut().unwrap();
        ct.stats_source = Some("test".into());
        ct.stats.insert("drop".into(), 500);
        // One reading: totals since boot are information only.
        assert_eq!(judge(drops, &s, &t).unwrap().severity, Severity::Info);
        let mut w = CounterDeltas {
            seconds: 300.0,
            ..Default::default()
        };
        w.increase.insert("drop".into(), 0);
        derived(&mut s).window = Some(w.clone());
        assert_eq!(
            judge(drops, &s, &t).unwrap().severity,
            Severity::Ok,
            "old drops, none recently"
        );
        w.increase.insert("early_drop".into(), 3);
        derived(&mut s).window = Some(w);
        let f = judge(drops, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.summary.starts_with("table full, dropping packet"));
        assert_eq!(f.evidence["early_drop_increase"], 3);
    }

    #[test]
    fn insert_failed_needs_a_window() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        assert!(judge(insert_failed, &s, &t).is_none());
        let mut w = CounterDeltas::default();
        w.increase.insert("insert_failed".into(), 2);
        derived(&mut s).window = Some(w);
        assert_eq!(judge(insert_failed, &s, &t).unwrap().severity, Severity::Warning);
    }

    #[test]
    fn time_to_full_reads_the_trend_fact() {
        use crate::history::trend::ConntrackTrend;
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        assert!(judge(time_to_full, &s, &t).is_none(), "no trend yet, no finding");
        let mut trend = ConntrackTrend {
            slope_per_second: 50.0,
            seconds_to_full: Some(1800.0),
            window_seconds: 900.0,
            points: 181,
            ..Default::default()
        };
        derived(&mut s).trend = Some(trend.clone());
        let f = judge(time_to_full, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.summary.contains("full in about 30 minutes"), "{}", f.summary);
        assert_eq!(f.evidence["seconds_to_full"], 1800.0);
        trend.seconds_to_full = Some(300.0);
        derived(&mut s).trend = Some(trend.clone());
        assert_eq!(judge(time_to_full, &s, &t).unwrap().severity, Severity::Critical);
        trend.seconds_to_full = Some(7200.0);
        derived(&mut s).trend = Some(trend.clone());
        assert_eq!(judge(time_to_full, &s, &t).unwrap().severity, Severity::Ok);
        trend.slope_per_second = -3.0;
        trend.seconds_to_full = None;
        derived(&mut s).trend = Some(trend);
        let f = judge(time_to_full, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Ok);
        assert!(f.summary.contains("not growing"), "{}", f.summary);
    }

    #[test]
    fn window_summaries_read_as_sentences() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        let ct = s.facts.conntrack.as_mut().unwrap();
        ct.stats_source = Some("test".into());
        let mut w = CounterDeltas {
            seconds: 301.0,
            ..Default::default()
        };
        w.increase.insert("drop".into(), 412);
        w.increase.insert("insert_failed".into(), 7);
        derived(&mut s).window = Some(w);
        assert_eq!(
            judge(drops, &s, &t).unwrap().summary,
            "table full, dropping packet: 412 drops and 0 early evictions in the last 5 minutes"
        );
        assert!(judge(insert_failed, &s, &t)
            .unwrap()
            .summary
            .starts_with("7 conntrack insert failures in the last 5 minutes"));
    }

    #[test]
    fn sizing() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        s.facts.node.as_mut().unwrap().cpus = 16;
        let f = judge(max_below_recommended, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["recommended"], 524_288);
    }
}
