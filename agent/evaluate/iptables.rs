//! Rule-set checks: iptables work is O(n) in rules, so size and save time
//! predict kube-proxy's sync latency ("p99 sync > 5 s after scaling").

use super::{grade, Finding, ModeDecision, Severity, Thresholds};
use crate::probe::iptables::{IptablesFacts, SaveRun};
use crate::snapshot::Snapshot;

fn label(s: &SaveRun) -> String {
    format!("{}/{}", s.backend, s.family)
}

const SHRINK: &[&str] = &[
    "Each Service port and endpoint adds rules; kube-proxy rewrites the whole set on each sync. Check for Services nobody uses and for very large Endpoints.",
    "Switch kube-proxy to IPVS or nftables mode (hash lookups, incremental updates): set mode in the kube-proxy ConfigMap, then kubectl -n kube-system rollout restart ds kube-proxy, one node pool at a time. Load the IPVS modules first for IPVS.",
    "Or raise iptables.syncPeriod / minSyncPeriod (e.g. 60s / 10s) to sync less often, at the cost of slower updates.",
    "Roll back: restore the ConfigMap backup and restart kube-proxy again.",
];

pub fn rules_large(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipt = s.facts.iptables.as_ref()?;
    let (run, rules) = ipt
        .saves
        .iter()
        .map(|r| (r, r.counts.tables.get("nat").map_or(0, |n| n.rules)))
        // The first of equals (IPv4 before IPv6): min of the reverse, not max_by_key's last.
        .min_by_key(|&(_, n)| std::cmp::Reverse(n))?;
    let severity = grade(
        rules as f64,
        t.iptables_rules_warning as f64,
        t.iptables_rules_critical as f64,
    );
    Some(
        Finding::new(
            severity,
            format!(
                "{rules} rules in the nat table ({}); every kube-proxy sync rewrites them all",
                label(run)
            ),
        )
        .evidence("nat_rules", rules)
        .evidence("backend", run.backend.as_str())
        .evidence("family", run.family.as_str())
        .evidence("kube_svc_chains", run.counts.kube.svc)
        .evidence("kube_sep_chains", run.counts.kube.sep)
        .evidence("warning_at", t.iptables_rules_warning)
        .evidence("critical_at", t.iptables_rules_critical)
        .remediation(SHRINK),
    )
}

pub fn save_slow(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipt = s.facts.iptables.as_ref()?;
    // Save commands only (legacy saves, the cross-check's iptables-nft-save):
    // their wall time is what kube-proxy's own save costs; a netlink count's is not.
    let run = ipt
        .save_runs()
        .max_by(|a, b| a.duration_seconds.total_cmp(&b.duration_seconds))?;
    let d = run.duration_seconds;
    let severity = grade(d, t.iptables_save_warning_seconds, t.iptables_save_critical_seconds);
    Some(
        Finding::new(
            severity,
            format!(
                "{} took {d:.2} s; kube-proxy's syncs do at least this much work each time",
                run.command
            ),
        )
        .evidence("duration_seconds", (d * 1000.0).round() / 1000.0)
        .evidence("command", run.command.as_str())
        .evidence("bytes", run.counts.bytes)
        .evidence("warning_at_seconds", t.iptables_save_warning_seconds)
        .evidence("critical_at_seconds", t.iptables_save_critical_seconds)
        .remediation(SHRINK),
    )
}

/// The cross-check: iptables-nft-save's counts against the netlink counts of
/// the same generation. A difference means one of the two reads is wrong
/// (or iptables cannot show the table), so the counts cannot be trusted.
pub fn count_mismatch(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let check = s.facts.iptables.as_ref()?.cross_check.as_ref()?;
    let first = check.mismatches.first();
    let severity = if first.is_some() || check.error.is_some() {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let summary = match (first, &check.error) {
        (Some(m), _) => format!(
            "iptables-nft-save and netlink disagree: {} {} is {} by iptables-nft-save, {} over netlink ({} difference(s))",
            m.family,
            m.what,
            m.save,
            m.netlink,
            check.mismatches.len()
        ),
        (None, Some(e)) => format!("the iptables-nft-save cross-check failed: {e}"),
        (None, None) => "iptables-nft-save agrees with the netlink counts".to_string(),
    };
    let mut f = Finding::new(severity, summary)
        .evidence("mismatches", serde_json::to_value(&check.mismatches).unwrap_or_default())
        .evidence("generations", serde_json::to_value(&check.generations).unwrap_or_default())
        .evidence("checked_at_seconds", check.at_seconds)
        .remediation(&[
            "Compare by hand at a quiet moment: iptables-nft-save | grep -c '^-A' and nft list table ip nat | grep -c ... per table; a kube-proxy sync in between changes both.",
            "A table iptables calls incompatible holds rules written with nft (not iptables): find who writes them (nft list table ip nat) and keep kube-proxy's tables to iptables tools.",
            "If the numbers differ at a quiet moment, report it with both numbers: the agent's netlink reader or this iptables version miscounts.",
        ]);
    if let Some(e) = &check.error {
        f = f.evidence("error", e.as_str());
    }
    Some(f)
}

/// Removes kube-proxy's iptables-mode chains from one table, naming each (never a table-wide
/// `-F`/`-X`, which would take the CNI's masquerade rules with them). `{ipt}` is the command of the
/// backend and family to clean.
pub(crate) fn per_chain_cleanup(ipt: &str) -> String {
    format!(
        "By hand, naming only kube-proxy's chains (nat table; the same for -t filter, and ip6tables for IPv6): \
         {ipt} -t nat -F KUBE-SERVICES; {ipt} -t nat -F KUBE-NODEPORTS; \
         then list the service chains: {ipt} -t nat -S | grep -E '^-N KUBE-(SVC|SEP|EXT|FW|SVL)-' \
         and for each chain it lists, its name in place of KUBE-SVC-XXXXXXXXXXXXXXXX: \
         {ipt} -t nat -F KUBE-SVC-XXXXXXXXXXXXXXXX && {ipt} -t nat -X KUBE-SVC-XXXXXXXXXXXXXXXX"
    )
}

pub fn backend_mismatch(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipt: &IptablesFacts = s.facts.iptables.as_ref()?;
    let both = ipt.is_mismatch();
    // The stale set is the one without kube-proxy's canary; legacy when nothing tells.
    let stale = ipt
        .saves
        .iter()
        .find(|r| {
            let k = &r.counts.kube;
            k.svc + k.sep + k.ext + k.fw + k.svl > 0 && !r.counts.proxy_canary
        })
        .map_or("legacy", |r| r.backend.as_str());
    let ipt_cmd = if stale == "nft" {
        "iptables-nft"
    } else {
        "iptables-legacy"
    };
    Some(
        Finding::new(
            if both { Severity::Critical } else { Severity::Ok },
            format!(
                "kube-proxy rules in more than one iptables backend ({}): two rule sets fight over the same packets",
                ipt.backends_with_kube_rules.join(" and ")
            ),
        )
        .evidence("backends_with_kube_rules", ipt.backends_with_kube_rules.clone())
        .evidence("backend_in_use", ipt.backend_in_use.as_str())
        .evidence("reason", ipt.backend_reason.as_str())
        .remediation_owned(vec![
            "Some component on the node (a CNI plugin, kubelet, a host firewall) uses a different iptables backend than kube-proxy; its image's iptables must match the host (kubernetes-sigs/iptables-wrappers picks the backend by the KUBE-IPTABLES-HINT chain).".to_string(),
            "Find the stale set: iptables-legacy-save | grep -c KUBE- and iptables-nft-save | grep -c KUBE-; the one without KUBE-PROXY-CANARY is stale.".to_string(),
            format!("Remove the stale backend's kube-proxy chains in a maintenance window, then restart kube-proxy: kube-proxy --cleanup with the stale backend's binary, or {}", per_chain_cleanup(ipt_cmd)),
        ]),
    )
}

pub fn stale_kube_rules(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipt = s.facts.iptables.as_ref()?;
    let stale: Vec<String> = ipt
        .saves
        .iter()
        .filter(|r| {
            let k = &r.counts.kube;
            k.svc + k.sep + k.ext + k.fw + k.svl > 0 && !r.counts.proxy_canary
        })
        .map(label)
        .collect();
    Some(
        Finding::new(
            if stale.is_empty() { Severity::Ok } else { Severity::Warning },
            format!(
                "kube-proxy service chains without KUBE-PROXY-CANARY in {}: rules left by a kube-proxy that no longer runs",
                stale.join(", ")
            ),
        )
        .evidence("backends", stale.clone())
        .remediation(&[
            "If kube-proxy was replaced (e.g. by Cilium or nftables mode), clean the old rules: kube-proxy --cleanup on the node, or, in a maintenance window, flush and delete the KUBE-* chains one by one, by name (see proxy_mode_leftovers for the commands).",
            "If kube-proxy should be running here, check its pod: kubectl -n kube-system get pods -o wide | grep kube-proxy.",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::iptables::{detect_backend, SaveCounts, TableCounts};

    fn run(backend: &str, nat_rules: u64, hint: bool, canary: bool, secs: f64) -> SaveRun {
        let mut counts = SaveCounts::default();
        counts.tables.insert(
            "nat".into(),
            TableCounts {
                chains: 10,
                rules: nat_rules,
            },
        );
        counts.hint_chain = hint;
        counts.proxy_canary = canary;
        counts.kube_rules = nat_rules;
        counts.kube.svc = (nat_rules > 0) as u64 * 3;
        SaveRun {
            backend: backend.into(),
            family: "ipv4".into(),
            command: format!("iptables-{backend}-save"),
            duration_seconds: secs,
            counts,
            netlink: None,
        }
    }

    fn snapshot(saves: Vec<SaveRun>) -> Snapshot {
        let (backend_in_use, backend_reason, backends_with_kube_rules) = detect_backend(&saves);
        let mut s = healthy();
        s.facts.iptables = Some(IptablesFacts {
            saves,
            backend_in_use,
            backend_reason,
            backends_with_kube_rules,
            not_run: Vec::new(),
            cross_check: None,
            rule_counters: None,
            legacy: Default::default(),
        });
        s
    }

    #[test]
    fn backend_matrix() {
        let t = crate::config::default_thresholds();
        // Hint only in nft -> nft, no mismatch.
        let s = snapshot(vec![
            run("nft", 500, true, true, 0.1),
            run("legacy", 0, false, false, 0.1),
        ]);
        let ipt = s.facts.iptables.as_ref().unwrap();
        assert_eq!(ipt.backend_in_use, "nft");
        assert_eq!(judge(backend_mismatch, &s, &t).unwrap().severity, Severity::Ok);
        // Hint only in legacy -> legacy.
        let s = snapshot(vec![
            run("nft", 0, false, false, 0.1),
            run("legacy", 500, true, true, 0.1),
        ]);
        assert_eq!(s.facts.iptables.as_ref().unwrap().backend_in_use, "legacy");
        // KUBE rules in both -> critical mismatch.
        let s = snapshot(vec![
            run("nft", 500, true, true, 0.1),
            run("legacy", 300, false, true, 0.1),
        ]);
        let f = judge(backend_mismatch, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            f.evidence["backends_with_kube_rules"],
            serde_json::json!(["legacy", "nft"])
        );
        // None -> "none".
        let s = snapshot(vec![
            run("nft", 0, false, false, 0.1),
            run("legacy", 0, false, false, 0.1),
        ]);
        assert_eq!(s.facts.iptables.as_ref().unwrap().backend_in_use, "none");
        // No hint: more rules wins.
        let s = snapshot(vec![
            run("nft", 10, false, true, 0.1),
            run("legacy", 20, false, true, 0.1),
        ]);
        assert_eq!(s.facts.iptables.as_ref().unwrap().backend_in_use, "legacy");
    }

    #[test]
    fn size_and_time_thresholds() {
        let t = crate::config::default_thresholds();
        let s = snapshot(vec![run("nft", 19_999, true, true, 0.99)]);
        assert_eq!(judge(rules_large, &s, &t).unwrap().severity, Severity::Ok);
        assert_eq!(judge(save_slow, &s, &t).unwrap().severity, Severity::Ok);
        let s = snapshot(vec![run("nft", 20_000, true, true, 1.5)]);
        assert_eq!(judge(rules_large, &s, &t).unwrap().severity, Severity::Warning);
        assert_eq!(judge(save_slow, &s, &t).unwrap().severity, Severity::Warning);
        let s = snapshot(vec![run("nft", 100_000, true, true, 6.0)]);
        let f = judge(rules_large, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.evidence["nat_rules"], 100_000);
        assert_eq!(judge(save_slow, &s, &t).unwrap().severity, Severity::Critical);
    }

    #[test]
    fn netlink_counts_do_not_feed_save_slow_and_mismatches_warn() {
        use crate::probe::counted::NetlinkCount;
        use crate::probe::iptables::{CountMismatch, CrossCheck};
        let t = crate::config::default_thresholds();
        let mut nl = run("nft", 500, true, true, 9.0);
        nl.command = "netlink".into();
        nl.netlink = Some(NetlinkCount::default());
        let mut s = snapshot(vec![nl]);
        assert!(judge(save_slow, &s, &t).is_none(), "no save ran");
        assert!(judge(count_mismatch, &s, &t).is_none(), "no cross-check yet");
        let ipt = s.facts.iptables.as_mut().unwrap();
        ipt.cross_check = Some(CrossCheck {
            saves: vec![run("nft", 500, true, true, 1.5)],
            ..Default::default()
        });
        assert_eq!(judge(save_slow, &s, &t).unwrap().severity, Severity::Warning);
        assert_eq!(judge(count_mismatch, &s, &t).unwrap().severity, Severity::Ok);
        s.facts
            .iptables
            .as_mut()
            .unwrap()
            .cross_check
            .as_mut()
            .unwrap()
            .mismatches = vec![CountMismatch {
            family: "ipv4".into(),
            what: "nat rules".into(),
            netlink: 500,
            save: 501,
        }];
        let f = judge(count_mismatch, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["mismatches"][0]["netlink"], 500);
        assert_eq!(f.evidence["mismatches"][0]["save"], 501);
        assert!(f.summary.contains("501") && f.summary.contains("500"), "{}", f.summary);
    }

    #[test]
    fn stale_rules_without_canary() {
        let t = crate::config::default_thresholds();
        let s = snapshot(vec![run("nft", 500, true, false, 0.1)]);
        let f = judge(stale_kube_rules, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["backends"], serde_json::json!(["nft/ipv4"]));
        let s = snapshot(vec![run("nft", 500, true, true, 0.1)]);
        assert_eq!(judge(stale_kube_rules, &s, &t).unwrap().severity, Severity::Ok);
    }
}
