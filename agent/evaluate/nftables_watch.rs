//! Who changed the rules: `rules_changed_by_other_process`, from the nf_tables watcher's journal
//! (`derived.nftables_watch`, the history stage's). kube-proxy's own commits never raise it.

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::snapshot::Snapshot;
use crate::timefmt::{human_duration, rfc3339};
use crate::watch::TableChange;

/// One line per table: `ip nat: 12 rules removed (12 of kube-proxy's, 2 in built-in chains)`.
fn removed(t: &TableChange) -> String {
    let mut parts = Vec::new();
    if t.table_deleted {
        parts.push("table deleted".to_string());
    }
    if t.rules_removed > 0 {
        let mut s = format!(
            "{} rule{} removed",
            t.rules_removed,
            if t.rules_removed == 1 { "" } else { "s" }
        );
        if t.kube_rules_removed > 0 || t.base_rules_removed > 0 {
            s.push_str(&format!(
                " ({} of kube-proxy's, {} in built-in chains)",
                t.kube_rules_removed, t.base_rules_removed
            ));
        }
        parts.push(s);
    }
    if t.chains_deleted > 0 {
        parts.push(format!(
            "{} chain{} deleted ({})",
            t.chains_deleted,
            if t.chains_deleted == 1 { "" } else { "s" },
            t.chains_deleted_names.join(", ")
        ));
    }
    if t.rules_added > 0 {
        parts.push(format!("{} added", t.rules_added));
    }
    if parts.is_empty() {
        parts.push("changed".into());
    }
    format!("{} {}: {}", t.family, t.table, parts.join(", "))
}

/// Another process removed kube-proxy's rules (critical: rules of its chains or tables, or a
/// table holding them), or rules of the built-in chains of the iptables tables it hooks
/// (warning: its jump rules live there), and kube-proxy has not written them back since,
/// within `--nftables-watch.window`.
pub fn changed_by_other_process(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let w = s.derived.nftables_watch.as_ref()?;
    let o = w.changed_by_other.as_ref()?;
    let age = s.collected_mono - o.mono;
    if age > t.rules_changed_window_seconds {
        return None;
    }
    let c = &o.commit;
    let writer = &c.writer;
    let severity = if o.removed_kube_rules {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let what: Vec<String> = c
        .tables
        .iter()
        .filter(|t| t.rules_removed > 0 || t.table_deleted || t.chains_deleted > 0)
        .map(removed)
        .collect();
    let summary = format!(
        "{} {} at {}: {}{}",
        writer.describe(),
        if o.removed_kube_rules {
            "removed kube-proxy's rules"
        } else {
            "removed rules where kube-proxy hooks its chains"
        },
        rfc3339(c.at_seconds),
        what.join("; "),
        if o.commits > 1 {
            format!(" ({} such commits since {})", o.commits, rfc3339(o.first_seconds))
        } else {
            String::new()
        }
    );
    let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::from);
    let mut f = Finding::new(severity, summary)
        .evidence("writer_name", opt(&writer.name))
        .evidence("writer_pid", writer.pid.map_or(Value::Null, Value::from))
        .evidence("parent_pid", writer.parent_pid.map_or(Value::Null, Value::from))
        .evidence(
            "parent_name",
            match (&writer.parent_name, writer.gone) {
                (Some(n), _) => Value::from(n.clone()),
                (None, true) => Value::from("unknown (the writer had exited)"),
                (None, false) => Value::Null,
            },
        )
        .evidence("unit", opt(&writer.unit))
        .evidence("pod_uid", opt(&writer.pod_uid))
        .evidence("container_id", opt(&writer.container_id))
        .evidence("timestamp", rfc3339(c.at_seconds))
        .evidence("timestamp_seconds", c.at_seconds)
        .evidence("generation", c.generation)
        .evidence("removed", what.clone())
        .evidence("tables", json!(c.tables))
        .evidence("commits_since_first", o.commits)
        .evidence("first_timestamp_seconds", o.first_seconds)
        .evidence(
            "clears",
            format!(
                "when kube-proxy has written back, in every table the change took from, its chains' rules (as many in one commit as were removed) and each jump from a built-in chain that was removed, or {} after this change",
                human_duration(t.rules_changed_window_seconds)
            ),
        );
    let mut steps = vec![format!(
        "The writer: {}. On the node: ps -o pid,ppid,comm,args -p {} (it may have exited), and its parent's.",
        writer.describe(),
        writer.pid.unwrap_or(0)
    )];
    if let Some(u) = &writer.unit {
        steps.push(format!(
            "It runs as {u}: systemctl status {u}; journalctl -u {u} --since -1h shows what it did."
        ));
    }
    if let Some(p) = &writer.pod_uid {
        steps.push(format!(
            "It runs in pod {p}: kubectl get pods -A -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid | grep {p}"
        ));
    }
    steps.extend(
        [
            "See every commit since, with its writer: proxywatch check, or curl -s localhost:9877/snapshot | jq .derived.nftables_watch.journal (the agent's address as deployed).",
            "kube-proxy restores its rules on its next full sync only if it notices (a flushed nat table that keeps KUBE-PROXY-CANARY is never noticed); to restore them now: kubectl -n kube-system delete pod <kube-proxy pod on this node>.",
            "Stop the cause: firewalld, ufw and node scripts must not flush or restore whole tables on Kubernetes nodes (iptables-restore --noflush, or leave the KUBE-* chains and the kube-proxy nftables table alone).",
        ]
        .map(String::from),
    );
    f = f.remediation_owned(steps);
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::nftables_watch::WatchHistory;
    use crate::watch::{Commit, Event, Writer};

    fn flush(pid: u32, kube: u64) -> Event {
        Event::Commit(Commit {
            at_seconds: 1_700_000_000.0,
            generation: 7,
            writer: Writer {
                pid: Some(pid),
                name: Some("iptables".into()),
                parent_pid: Some(880),
                parent_name: Some("firewalld".into()),
                unit: Some("firewalld.service".into()),
                ..Default::default()
            },
            named_kube_proxy: false,
            tables: vec![TableChange {
                family: "ip".into(),
                table: "nat".into(),
                rules_removed: 12,
                kube_rules_removed: kube,
                base_rules_removed: 2,
                ..Default::default()
            }],
            more_tables: 0,
            notifications: 13,
            undecoded: 0,
            filtered: false,
        })
    }

    #[test]
    fn names_the_writer_and_what_it_removed_until_the_window_ends() {
        let t = crate::config::default_thresholds();
        let mut s = healthy();
        assert!(judge(changed_by_other_process, &s, &t).is_none());
        let mut h = WatchHistory::default();
        s.derived.nftables_watch = Some(h.observe(&flush(4242, 10), Some(10), 100.0).clone());
        s.collected_mono = 100.0;
        let f = judge(changed_by_other_process, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.evidence["writer_pid"], 4242);
        assert_eq!(f.evidence["parent_name"], "firewalld");
        assert_eq!(f.evidence["unit"], "firewalld.service");
        assert!(
            f.summary.starts_with("iptables (PID 4242), parent firewalld (PID 880), unit firewalld.service removed kube-proxy's rules at 2023-11-14T22:13:20.000Z: ip nat: 12 rules removed (10 of kube-proxy's, 2 in built-in chains)"),
            "{}",
            f.summary
        );
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("systemctl status firewalld.service")));
        s.collected_mono = 100.0 + t.rules_changed_window_seconds + 1.0;
        assert!(judge(changed_by_other_process, &s, &t).is_none(), "past the window");
        // Only built-in chains' rules: a warning.
        let mut h = WatchHistory::default();
        s.derived.nftables_watch = Some(h.observe(&flush(4243, 0), Some(10), 200.0).clone());
        s.collected_mono = 200.0;
        assert_eq!(
            judge(changed_by_other_process, &s, &t).unwrap().severity,
            Severity::Warning
        );
    }
}
