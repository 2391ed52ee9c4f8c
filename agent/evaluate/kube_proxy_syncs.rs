//! kube-proxy's view against the kernel's: failing syncs, and rules that
//! kube-proxy says it wrote but the kernel no longer holds (flushed behind its
//! back by a firewall reload, a node script that flushes a whole table...).

use super::{Finding, ModeDecision, ProxyMode, Severity, Thresholds};
use crate::probe::ProbeName;
use crate::snapshot::{ProbeStatus, Snapshot};

/// Whether kube-proxy's syncs failed within the history's window.
pub(super) fn failing(s: &Snapshot) -> bool {
    s.derived
        .kube_proxy_sync_failures
        .as_ref()
        .is_some_and(|f| f.increase > 0)
}

pub fn sync_failing(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    s.facts.kube_proxy.as_ref()?;
    let f = s.derived.kube_proxy_sync_failures.as_ref()?;
    let k = s.derived.kube_proxy.clone().unwrap_or_default();
    let age = k.last_sync_age_seconds;
    let severity = if f.increase == 0 {
        Severity::Ok
    } else if age.is_some_and(|a| a >= t.kube_proxy_sync_failing_critical_seconds) {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let since = match age {
        Some(a) => format!("; its last successful sync was {a:.0} s ago"),
        None => String::new(),
    };
    Some(
        Finding::new(
            severity,
            format!(
                "{} kube-proxy sync(s) failed in the last {:.0} s{since}",
                f.increase, f.seconds
            ),
        )
        .evidence("failures_in_window", f.increase)
        .evidence("window_seconds", f.seconds)
        .evidence("failures_total", f.total)
        .evidence("last_sync_age_seconds", age)
        .evidence("queued_unsynced_seconds", k.queued_unsynced_seconds)
        .evidence("critical_after_seconds", t.kube_proxy_sync_failing_critical_seconds)
        .remediation_owned(vec![
            "Service and endpoint changes are not reaching the kernel: the rules in place are the last ones that synced.".into(),
            "Read why: kubectl -n kube-system logs <kube-proxy pod on this node> --since=10m | grep -iE 'fail|restore|error'.".into(),
            match super::lock_holder::holder_line(s) {
                Some(holder) => format!("The xtables lock is held by another process: {holder}. Other causes: iptables-restore of the other backend (see iptables_backend_mismatch), a kernel without a feature the nftables rules use."),
                None => "Common causes: another process holding the xtables lock (iptables_lock_held names it, from /proc/locks), iptables-restore of the other backend (see iptables_backend_mismatch), a kernel without a feature the nftables rules use.".into(),
            },
            "Once the cause is gone kube-proxy recovers on its next sync; if it does not: kubectl -n kube-system delete pod <kube-proxy pod on this node> (the DaemonSet recreates it).".into(),
        ]),
    )
}

/// kube-proxy's rules are compared with the kernel's only when its last
/// successful sync ended before the kernel was read (so the kernel should hold
/// what it reports); a share below these is a warning / critical.
const LOST_WARNING_SHARE: f64 = 0.9;
const LOST_CRITICAL_SHARE: f64 = 0.5;

pub fn rules_lost(s: &Snapshot, _: &Thresholds, mode: &ModeDecision) -> Option<Finding> {
    if mode.mode == ProxyMode::Nftables {
        return nftables_table_lost(s);
    }
    // Only kube-proxy's iptables mode reports how many rules it wrote per table (v1.21+).
    if mode.mode != ProxyMode::Iptables {
        return None;
    }
    let m = s.facts.kube_proxy.as_ref()?.metrics.as_ref()?;
    if m.iptables_rules.values().all(|&n| n < 1.0) {
        return None;
    }
    let ipt = s.facts.iptables.as_ref()?;
    let read = s.probes.get(&ProbeName::Iptables)?;
    let read_start = read.last_run_seconds - read.duration_seconds;
    let last_sync = m.last_sync_timestamp_seconds?;
    // A sync after the read began may have changed the rules: no comparison, never a guess.
    if last_sync >= read_start {
        return None;
    }
    // The backend kube-proxy's rules are in; none when no backend has KUBE rules left.
    let backend = ipt.backend_in_use.as_str();
    let runs: Vec<_> = ipt.saves.iter().filter(|r| r.backend == backend).collect();
    let kube_rules: u64 = runs.iter().map(|r| r.counts.kube_rules).sum();
    let mut worst = Severity::Ok;
    let mut tables = serde_json::Map::new();
    let mut lost_tables = Vec::new();
    for (table, &reported) in &m.iptables_rules {
        if reported < 1.0 {
            continue;
        }
        let kernel: u64 = runs
            .iter()
            .filter_map(|r| r.counts.tables.get(table))
            .map(|c| c.rules)
            .sum();
        let share = kernel as f64 / reported;
        // The kernel's count includes every owner's rules, so a share below 1 is rules missing.
        let severity = if kube_rules == 0 || share < LOST_CRITICAL_SHARE {
            Severity::Critical
        } else if share < LOST_WARNING_SHARE {
            Severity::Warning
        } else {
            Severity::Ok
        };
        if severity > Severity::Ok {
            lost_tables.push(format!("{table}: {kernel} of {reported:.0}"));
        }
        worst = worst.max(severity);
        tables.insert(
            table.clone(),
            serde_json::json!({ "kube_proxy_reported": reported, "kernel": kernel }),
        );
    }
    let summary = if worst == Severity::Ok {
        "the kernel holds the rules kube-proxy reports".to_string()
    } else if kube_rules == 0 {
        format!(
            "kube-proxy reports {} rules but the kernel holds no KUBE rules: Service traffic is not translated",
            m.iptables_rules.values().sum::<f64>()
        )
    } else {
        format!(
            "the kernel holds fewer rules than kube-proxy wrote ({}): rules were removed behind its back",
            lost_tables.join(", ")
        )
    };
    Some(
        Finding::new(worst, summary)
            .evidence("tables", serde_json::Value::Object(tables))
            .evidence("backend", backend)
            .evidence("kernel_kube_rules", kube_rules)
            .evidence("kube_proxy_last_sync_timestamp_seconds", last_sync)
            .evidence("kernel_read_timestamp_seconds", read_start)
            .remediation(&[
                "Something removed kube-proxy's rules after its last sync: a firewall reload (firewalld, ufw), a node script that flushes a whole table or runs iptables-restore without --noflush, another agent.",
                "Prove it: journalctl --since -1h | grep -iE 'firewalld|ufw|iptables' on the node, and compare iptables-save -t nat | grep -c KUBE- with kube-proxy's kubeproxy_sync_proxy_rules_iptables_total.",
                "kube-proxy restores its rules on its next full sync (it notices a flushed KUBE-PROXY-CANARY chain); to restore them now: kubectl -n kube-system delete pod <kube-proxy pod on this node>.",
                "Stop the cause: firewalld and ufw must not manage iptables on Kubernetes nodes, or must keep kube-proxy's chains (node bootstrap scripts: iptables-restore --noflush).",
            ]),
    )
}

/// nftables mode: kube-proxy reports no rule counts (only sync and cleanup failures), but
/// every sync it makes writes its table (`ip kube-proxy`, `ip6 kube-proxy`): after a sync
/// that ended before the nftables probe read the kernel, no table in any family is rules
/// lost. A table that is there is not compared further (nothing to compare it with).
fn nftables_table_lost(s: &Snapshot) -> Option<Finding> {
    let kp = s.facts.kube_proxy.as_ref()?;
    let last_sync = kp.metrics.as_ref()?.last_sync_timestamp_seconds?;
    let read = s.probes.get(&ProbeName::Nftables)?;
    let read_start = read.last_run_seconds - read.duration_seconds;
    if last_sync >= read_start {
        return None;
    }
    let tables: Vec<String> = match (read.status, s.facts.nftables.as_ref()) {
        (ProbeStatus::Ok, Some(n)) => n
            .tables
            .iter()
            .map(|t| format!("{} kube-proxy", t.nft_family()))
            .collect(),
        (ProbeStatus::Absent, _) => Vec::new(),
        // Failed (its last reading held, or none): nothing read at this moment, nothing said.
        _ => return None,
    };
    let lost = tables.is_empty();
    let (severity, summary) = if lost {
        (
            Severity::Critical,
            "kube-proxy (nftables mode) synced, but the kernel has no kube-proxy table: Service traffic is not translated"
                .to_string(),
        )
    } else {
        (
            Severity::Ok,
            format!("the kernel holds kube-proxy's nftables table ({})", tables.join(", ")),
        )
    };
    let mut f = Finding::new(severity, summary)
        .evidence("kernel_tables", tables)
        .evidence("kube_proxy_last_sync_timestamp_seconds", last_sync)
        .evidence("kernel_read_timestamp_seconds", read_start);
    if lost {
        f = f.remediation(&[
            "Something deleted kube-proxy's nftables table after its last sync: a restart of the nftables service (a ruleset file that begins with a `flush ruleset` line, as Debian's /etc/nftables.conf does), a firewall manager, a node script.",
            "Prove it: nft list tables (no `table ip kube-proxy`), and journalctl --since -1h | grep -iE 'nftables|firewalld|ufw' on the node.",
            "kube-proxy writes its table again on its next full sync; to restore it now: kubectl -n kube-system delete pod <kube-proxy pod on this node> (the DaemonSet recreates it).",
            "Stop the cause: the node's nftables ruleset file must not flush the whole ruleset on a Kubernetes node (delete only the tables it owns), or the service must not be restarted under kube-proxy.",
        ]);
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_thresholds;
    use crate::evaluate::effective_mode;
    use crate::probe::iptables::{IptablesFacts, SaveCounts, SaveRun, TableCounts};
    use crate::probe::kube_proxy::metrics::KubeProxyMetrics;
    use crate::probe::kube_proxy::KubeProxyFacts;
    use crate::snapshot::{ProbeOutcome, ProbeStatus};

    /// kube-proxy (iptables mode) reporting 100 nat rules synced at `last_sync`; the kernel
    /// read at 1000-1001 s holding `kernel` nat rules, `kube` of them kube-proxy's.
    fn node(last_sync: f64, kernel: u64, kube: u64) -> Snapshot {
        let mut s = Snapshot::new("n");
        s.facts.kube_proxy = Some(KubeProxyFacts {
            mode: Some(ProxyMode::Iptables),
            metrics_up: true,
            metrics: Some(KubeProxyMetrics {
                iptables_rules: [("nat".to_string(), 100.0)].into(),
                last_sync_timestamp_seconds: Some(last_sync),
                ..Default::default()
            }),
            ..Default::default()
        });
        s.facts.iptables = Some(IptablesFacts {
            backend_in_use: "nft".into(),
            saves: vec![SaveRun {
                backend: "nft".into(),
                family: "ipv4".into(),
                counts: SaveCounts {
                    tables: [(
                        "nat".to_string(),
                        TableCounts {
                            chains: 10,
                            rules: kernel,
                        },
                    )]
                    .into(),
                    kube_rules: kube,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        });
        s.probes.insert(
            ProbeName::Iptables,
            ProbeOutcome {
                status: ProbeStatus::Ok,
                duration_seconds: 1.0,
                error: None,
                last_run_seconds: 1001.0,
                last_success_seconds: Some(1001.0),
                reading_seconds: None,
            },
        );
        s
    }

    fn judge(s: &Snapshot) -> Option<Finding> {
        let t = default_thresholds();
        rules_lost(s, &t, &effective_mode(s, &t))
    }

    /// kube-proxy (nftables mode) synced at `last_sync`; the nftables probe read the kernel
    /// at 1000-1001 s with `status`, finding `tables` (ipv4 and/or ipv6).
    fn nft_node(last_sync: f64, status: ProbeStatus, tables: &[&str]) -> Snapshot {
        use crate::probe::nftables::{NftTable, NftablesFacts};
        let mut s = Snapshot::new("n");
        s.facts.kube_proxy = Some(KubeProxyFacts {
            mode: Some(ProxyMode::Nftables),
            metrics_up: true,
            metrics: Some(KubeProxyMetrics {
                last_sync_timestamp_seconds: Some(last_sync),
                ..Default::default()
            }),
            ..Default::default()
        });
        if status == ProbeStatus::Ok {
            s.facts.nftables = Some(NftablesFacts {
                tables: tables
                    .iter()
                    .map(|f| NftTable {
                        family: f.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            });
        }
        s.probes.insert(
            ProbeName::Nftables,
            ProbeOutcome {
                status,
                duration_seconds: 1.0,
                error: None,
                last_run_seconds: 1001.0,
                last_success_seconds: Some(1001.0),
                reading_seconds: None,
            },
        );
        s
    }

    #[test]
    fn nftables_mode_without_its_table_after_a_sync_is_rules_lost() {
        let f = judge(&nft_node(990.0, ProbeStatus::Absent, &[])).unwrap();
        assert_eq!(f.severity, Severity::Critical, "{f:?}");
        assert!(f.summary.contains("no kube-proxy table"), "{}", f.summary);
        let ok = judge(&nft_node(990.0, ProbeStatus::Ok, &["ipv6"])).unwrap();
        assert_eq!(ok.severity, Severity::Ok, "an IPv6-only node's table");
        assert_eq!(ok.evidence["kernel_tables"][0], "ip6 kube-proxy");
        // A sync after the read began may have written the table since: nothing is said.
        assert!(judge(&nft_node(1000.5, ProbeStatus::Absent, &[])).is_none());
        // A failed read is not an empty kernel.
        assert!(judge(&nft_node(990.0, ProbeStatus::Failed, &[])).is_none());
    }

    #[test]
    fn rules_are_compared_only_after_a_sync_that_ended_before_the_read() {
        assert_eq!(
            judge(&node(990.0, 120, 110)).unwrap().severity,
            Severity::Ok,
            "intact, others' rules too"
        );
        assert_eq!(judge(&node(990.0, 80, 70)).unwrap().severity, Severity::Warning);
        let f = judge(&node(990.0, 30, 20)).unwrap();
        assert_eq!(f.severity, Severity::Critical, "{f:?}");
        assert_eq!(f.evidence["tables"]["nat"]["kernel"], 30);
        assert_eq!(
            judge(&node(990.0, 95, 0)).unwrap().severity,
            Severity::Critical,
            "no KUBE rule left"
        );
        // kube-proxy synced after the kernel read began: the counts may differ, nothing is said.
        assert!(judge(&node(1000.5, 0, 0)).is_none());
    }
}
