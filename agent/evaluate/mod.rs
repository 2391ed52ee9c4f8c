//! Pure evaluation: (snapshot, thresholds) -> verdict: the proxy mode the node
//! runs in (decided once, with its source) and the findings. No I/O, no clock.
//!
//! Each check is a plain function in the file of its subject, given the
//! snapshot, the thresholds and the decided mode; `CHECKS` is the explicit list. Every check id is always exported as
//! `proxywatch_finding_severity{id}` (0 when fine), so alerts never depend on a
//! series appearing.

mod conntrack;
mod conntrack_stale;
mod iptables;
mod ipvs;
mod ipvs_weight_zero;
mod kernel;
mod kube_proxy;
mod kube_proxy_syncs;
mod lock_holder;
mod mode;
mod neighbour;
mod nftables_watch;
mod node_ports;
mod probes;
mod rp_filter;
mod service_rejects;
mod service_traffic;

mod snat;
mod thresholds;
mod xtables_lock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::area::Area;
use crate::snapshot::Snapshot;

pub use conntrack::recommended_conntrack_max;
pub use mode::{effective_mode, ModeDecision, ObservedMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok = 0,
    Info = 1,
    Warning = 2,
    Critical = 3,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Something worth telling an SRE about, with the numbers behind it and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    /// Unix time since which the finding has been active at this severity, as this
    /// agent saw it (RFC 3339 in JSON). Set by the history stage after evaluation
    /// (`history::findings`), never by a check; a restarted agent starts afresh.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::rfc3339_opt"
    )]
    pub since: Option<f64>,
    /// One line, with the key number.
    pub summary: String,
    /// The facts behind the finding, by name.
    pub evidence: Map<String, Value>,
    /// Concrete steps, in order.
    pub remediation: Vec<String>,
}

impl Finding {
    /// A finding of the check being run. It has no id yet: `evaluate` gives it the id of the
    /// check's `CHECKS` row (`Check::finding`), the one place each id is written.
    fn new(severity: Severity, summary: impl Into<String>) -> Self {
        Finding {
            id: String::new(),
            severity,
            since: None,
            summary: summary.into(),
            evidence: Map::new(),
            remediation: Vec::new(),
        }
    }

    fn evidence(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.evidence.insert(key.to_string(), value.into());
        self
    }

    fn remediation(mut self, steps: &[&str]) -> Self {
        self.remediation = steps.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Steps built at run time (naming the node, so that they run as written).
    fn remediation_owned(mut self, steps: Vec<String>) -> Self {
        self.remediation = steps;
        self
    }
}

pub use crate::probe::kube_proxy::proxy_mode::ProxyMode;

pub use thresholds::Thresholds;

/// One check: an id (stable, used in metrics and alerts), the part of the data plane
/// its finding is about, and a pure function of the snapshot, the thresholds and the
/// mode the node runs in. The id is written here only: the function's finding gets it
/// from its row (`Check::finding`).
pub struct Check {
    pub id: &'static str,
    /// Its area: the NPD condition that reports it (`proxywatch npd --area`). None for
    /// `probe_failed`, which says what cannot be seen, not a problem of the data plane.
    pub area: Option<Area>,
    pub run: fn(&Snapshot, &Thresholds, &ModeDecision) -> Option<Finding>,
}

impl Check {
    /// Runs the check; its finding, if any, carries this row's id.
    pub fn finding(&self, snapshot: &Snapshot, thresholds: &Thresholds, mode: &ModeDecision) -> Option<Finding> {
        let mut f = (self.run)(snapshot, thresholds, mode)?;
        f.id = self.id.to_string();
        Some(f)
    }
}

/// What evaluation concludes about one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The mode the checks judged the node by, and where it came from.
    pub mode: ModeDecision,
    /// Active findings (severity above ok), most severe first, then by id.
    pub findings: Vec<Finding>,
}

#[rustfmt::skip]
pub const CHECKS: &[Check] = &[
    Check { id: "conntrack_table_fill", area: Some(Area::Conntrack), run: conntrack::table_fill },
    Check { id: "conntrack_drops", area: Some(Area::Conntrack), run: conntrack::drops },
    Check { id: "conntrack_insert_failed", area: Some(Area::Conntrack), run: conntrack::insert_failed },
    Check { id: "conntrack_max_below_recommended", area: Some(Area::Conntrack), run: conntrack::max_below_recommended },
    Check { id: "conntrack_time_to_full", area: Some(Area::Conntrack), run: conntrack::time_to_full },
    Check { id: "conntrack_stale_endpoint_entries", area: Some(Area::Conntrack), run: conntrack_stale::stale_endpoint_entries },
    Check { id: "conntrack_draining_to_removed_endpoints", area: Some(Area::Conntrack), run: conntrack_stale::draining_to_removed_endpoints },
    Check { id: "conntrack_stale_partial", area: Some(Area::Conntrack), run: conntrack_stale::stale_detection_partial },
    Check { id: "sysctl_ip_forward", area: Some(Area::Kernel), run: kernel::ip_forward },
    Check { id: "sysctl_bridge_nf_call_iptables", area: Some(Area::Kernel), run: kernel::bridge_nf_call_iptables },
    Check { id: "sysctl_conntrack_tcp_timeouts", area: Some(Area::Conntrack), run: kernel::conntrack_tcp_timeouts },
    Check { id: "sysctl_rp_filter_strict", area: Some(Area::Kernel), run: rp_filter::strict },
    Check { id: "rp_filter_drops", area: Some(Area::Kernel), run: rp_filter::drops },
    Check { id: "node_ports_in_ephemeral_range", area: Some(Area::Kernel), run: node_ports::in_ephemeral_range },
    Check { id: "neighbour_table_fill", area: Some(Area::Kernel), run: neighbour::fill },
    Check { id: "neighbour_table_overflow", area: Some(Area::Kernel), run: neighbour::overflow },
    Check { id: "snat_ports_near_exhaustion", area: Some(Area::Conntrack), run: snat::ports_near_exhaustion },
    Check { id: "masquerade_without_random_fully", area: Some(Area::Rules), run: snat::without_random_fully },
    Check { id: "ipvs_modules_missing", area: Some(Area::Kernel), run: kernel::ipvs_modules_missing },
    Check { id: "iptables_backend_mismatch", area: Some(Area::Rules), run: iptables::backend_mismatch },
    Check { id: "iptables_rules_large", area: Some(Area::Rules), run: iptables::rules_large },
    Check { id: "iptables_save_slow", area: Some(Area::Rules), run: iptables::save_slow },
    Check { id: "iptables_count_mismatch", area: Some(Area::Rules), run: iptables::count_mismatch },
    Check { id: "iptables_stale_kube_rules", area: Some(Area::Rules), run: iptables::stale_kube_rules },
    Check { id: "iptables_lock_held", area: Some(Area::Rules), run: xtables_lock::held },
    Check { id: "ipvs_vs_conntrack", area: Some(Area::Kernel), run: ipvs::vs_conntrack },
    Check { id: "ipvs_conn_reuse_mode", area: Some(Area::Kernel), run: ipvs::conn_reuse_mode },
    Check { id: "ipvs_expire_sysctls", area: Some(Area::Kernel), run: ipvs::expire_sysctls },
    Check { id: "ipvs_virtual_servers_without_backends", area: Some(Area::Rules), run: ipvs::without_backends },
    Check { id: "ipvs_real_servers_lingering", area: Some(Area::Rules), run: ipvs_weight_zero::real_servers_lingering },
    Check { id: "ipvs_interface_out_of_sync", area: Some(Area::Rules), run: ipvs::interface_out_of_sync },
    Check { id: "ipvs_scheduler", area: Some(Area::Rules), run: ipvs::scheduler },
    Check { id: "kube_proxy_down", area: Some(Area::KubeProxy), run: kube_proxy::down },
    Check { id: "kube_proxy_unhealthy", area: Some(Area::KubeProxy), run: kube_proxy::unhealthy },
    Check { id: "kube_proxy_node_draining", area: Some(Area::KubeProxy), run: kube_proxy::node_draining },
    Check { id: "kube_proxy_process_ambiguous", area: Some(Area::KubeProxy), run: kube_proxy::process_ambiguous },
    Check { id: "kube_proxy_sync_slow", area: Some(Area::KubeProxy), run: kube_proxy::sync_slow },
    Check { id: "kube_proxy_network_programming_slow", area: Some(Area::KubeProxy), run: kube_proxy::network_programming_slow },
    Check { id: "kube_proxy_sync_stale", area: Some(Area::KubeProxy), run: kube_proxy::sync_stale },
    Check { id: "kube_proxy_sync_failing", area: Some(Area::KubeProxy), run: kube_proxy_syncs::sync_failing },
    Check { id: "kube_proxy_rules_lost", area: Some(Area::KubeProxy), run: kube_proxy_syncs::rules_lost },
    Check { id: "rules_changed_by_other_process", area: Some(Area::Rules), run: nftables_watch::changed_by_other_process },
    Check { id: "service_traffic_rejected", area: Some(Area::Rules), run: service_rejects::traffic_rejected },
    Check { id: "service_traffic_failing", area: Some(Area::Rules), run: service_traffic::failing },
    Check { id: "service_connect_slow", area: Some(Area::Rules), run: service_traffic::connect_slow },
    Check { id: "kube_proxy_restarted", area: Some(Area::KubeProxy), run: kube_proxy::restarted },
    Check { id: "kube_proxy_resources_near_limit", area: Some(Area::KubeProxy), run: kube_proxy::resources_near_limit },
    Check { id: "kube_proxy_cpu_throttled", area: Some(Area::KubeProxy), run: kube_proxy::cpu_throttled },
    Check { id: "kube_proxy_mode_mismatch", area: Some(Area::KubeProxy), run: mode::mismatch },
    Check { id: "proxy_mode_leftovers", area: Some(Area::Rules), run: mode::leftovers },
    Check { id: "nftables_migration_blockers", area: Some(Area::Rules), run: mode::nftables_migration_blockers },
    Check { id: "probe_failed", area: None, run: probes::failed },
];

/// Grades a value against its warning and critical limits (both inclusive).
pub(crate) fn grade(value: f64, warning: f64, critical: f64) -> Severity {
    if value >= critical {
        Severity::Critical
    } else if value >= warning {
        Severity::Warning
    } else {
        Severity::Ok
    }
}

/// Decides the mode, then runs every check.
pub fn evaluate(snapshot: &Snapshot, thresholds: &Thresholds) -> Verdict {
    let mode = effective_mode(snapshot, thresholds);
    let mut findings: Vec<Finding> = CHECKS
        .iter()
        .filter_map(|c| {
            let f = c.finding(snapshot, thresholds, &mode)?;
            (f.severity > Severity::Ok).then_some(f)
        })
        .collect();
    findings.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.id.cmp(&b.id)));
    Verdict { mode, findings }
}

/// A verdict that waits on time: the probe to read again, and in how many seconds, before the
/// verdict is final (kube-proxy gone within its grace: back, or down?). `check` waits for it;
/// `serve` reads on its intervals anyway.
pub fn recheck(snapshot: &Snapshot, thresholds: &Thresholds) -> Option<(crate::probe::ProbeName, f64)> {
    kube_proxy::down_recheck(snapshot, thresholds, &effective_mode(snapshot, thresholds))
}

/// Why the verdict waits (see [`recheck`]), in the words `check` prints before it does: the first
/// reason kube-proxy belongs on this node.
pub fn recheck_because(snapshot: &Snapshot, thresholds: &Thresholds) -> Option<String> {
    recheck(snapshot, thresholds)?;
    kube_proxy::expected_because(snapshot, thresholds).into_iter().next()
}

/// The node's overall status: the worst finding, where info counts as ok.
pub fn overall(findings: &[Finding]) -> Severity {
    match findings.iter().map(|f| f.severity).max() {
        Some(Severity::Critical) => Severity::Critical,
        Some(Severity::Warning) => Severity::Warning,
        _ => Severity::Ok,
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::{effective_mode, Finding, ModeDecision, Thresholds};
    use crate::probe::conntrack::ConntrackFacts;
    use crate::probe::modules::{ModuleFacts, ModuleState, WATCHED};
    use crate::probe::node::NodeFacts;
    use crate::probe::sysctl::SysctlFacts;
    use crate::snapshot::Snapshot;

    /// Runs one check the way `evaluate` does: with the mode decided from the snapshot.
    pub fn judge(
        check: fn(&Snapshot, &Thresholds, &ModeDecision) -> Option<Finding>,
        s: &Snapshot,
        t: &Thresholds,
    ) -> Option<Finding> {
        check(s, t, &effective_mode(s, t))
    }

    /// Sets one sysctl of a test snapshot.
    pub fn set_sysctl(s: &mut Snapshot, name: &str, value: i64) {
        s.facts
            .sysctls
            .get_or_insert_with(Default::default)
            .values
            .insert(name.into(), Some(value));
    }

    /// A healthy 4-CPU iptables node, for checks to break one fact at a time.
    pub fn healthy() -> Snapshot {
        let mut s = Snapshot::new("node-a");
        s.facts.node = Some(NodeFacts {
            kernel_release: Some("6.1.0".into()),
            cpus: 4,
            cpus_source: "test".into(),
        });
        s.facts.conntrack = Some(ConntrackFacts {
            entries: 1000,
            max: 262_144,
            buckets: Some(65_536),
            ..Default::default()
        });
        s.facts.modules = Some(ModuleFacts {
            kernel_release: Some("6.1.0".into()),
            modules: WATCHED
                .iter()
                .map(|(m, _)| (m.to_string(), ModuleState::Loaded))
                .collect(),
            sources: vec!["/proc/modules".into()],
        });
        let mut sys = SysctlFacts::default();
        for (k, v) in [
            ("net.ipv4.ip_forward", 1),
            ("net.bridge.bridge-nf-call-iptables", 1),
            ("net.netfilter.nf_conntrack_max", 262_144),
            ("net.netfilter.nf_conntrack_tcp_timeout_established", 86_400),
            ("net.netfilter.nf_conntrack_tcp_timeout_close_wait", 3_600),
        ] {
            sys.values.insert(k.into(), Some(v));
        }
        s.facts.sysctls = Some(sys);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_node_has_no_findings() {
        let f = evaluate(&test_support::healthy(), &crate::config::default_thresholds()).findings;
        assert!(f.is_empty(), "{f:#?}");
        assert_eq!(overall(&f), Severity::Ok);
    }

    #[test]
    fn check_ids_are_unique_and_snake_case() {
        let mut ids: Vec<&str> = CHECKS.iter().map(|c| c.id).collect();
        assert!(ids
            .iter()
            .all(|i| i.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), CHECKS.len());
    }

    /// Holds in release builds too (no debug_assert): a check's function writes no id, its
    /// finding takes its row's, so each id is written once, in `CHECKS`.
    #[test]
    fn every_finding_carries_the_id_of_its_row_and_only_that() {
        let t = crate::config::default_thresholds();
        let mut broken = test_support::healthy();
        test_support::set_sysctl(&mut broken, "net.ipv4.ip_forward", 0);
        test_support::set_sysctl(&mut broken, "net.bridge.bridge-nf-call-iptables", 0);
        test_support::set_sysctl(&mut broken, "net.netfilter.nf_conntrack_max", 1024);
        let ct = broken.facts.conntrack.as_mut().unwrap();
        (ct.entries, ct.max) = (1020, 1024);
        ct.stats.insert("drop".into(), 5);
        ct.stats_source = Some("test".into());
        let mut fired = std::collections::BTreeSet::new();
        for s in [test_support::healthy(), broken, Snapshot::new("empty")] {
            let mode = effective_mode(&s, &t);
            for c in CHECKS {
                if let Some(raw) = (c.run)(&s, &t, &mode) {
                    assert_eq!(raw.id, "", "{} writes an id of its own", c.id);
                }
                if let Some(f) = c.finding(&s, &t, &mode) {
                    assert_eq!(f.id, c.id);
                    fired.insert(c.id);
                }
            }
            for f in evaluate(&s, &t).findings {
                assert!(CHECKS.iter().any(|c| c.id == f.id), "{} is no row of CHECKS", f.id);
            }
        }
        // Not vacuous: these snapshots raise findings of several checks.
        for id in ["sysctl_ip_forward", "conntrack_table_fill", "conntrack_drops"] {
            assert!(fired.contains(id), "{id} did not fire: {fired:?}");
        }
    }

    #[test]
    fn findings_sorted_most_severe_first() {
        let mut s = test_support::healthy();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        s.facts.conntrack.as_mut().unwrap().entries = 220_000;
        let f = evaluate(&s, &crate::config::default_thresholds()).findings;
        let ids: Vec<&str> = f.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["sysctl_ip_forward", "conntrack_table_fill"]);
        assert_eq!(overall(&f), Severity::Critical);
    }
}
