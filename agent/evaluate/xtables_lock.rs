//! The xtables lock held by another process than kube-proxy while kube-proxy (or anyone
//! waiting for the lock) suffers: kube-proxy's `iptables-restore -w 5 -W 100000` gives up after
//! 5 s ("Another app is currently holding the xtables lock"), so its syncs fail or lag.

use super::lock_holder::is_kube_proxy;
use super::{Finding, ModeDecision, ProxyMode, Severity, Thresholds};
use crate::snapshot::Snapshot;

/// What kube-proxy's syncs show now: failing, slow or late (None: fine or not seen).
fn kube_proxy_suffers(s: &Snapshot, t: &Thresholds, mode: &ModeDecision) -> Option<&'static str> {
    // In nftables mode kube-proxy takes no xtables lock: its syncs say nothing of it.
    if mode.mode == ProxyMode::Nftables {
        return None;
    }
    let active = |f: Option<Finding>| f.is_some_and(|f| f.severity > Severity::Ok);
    if super::kube_proxy_syncs::failing(s) {
        Some("kube-proxy's syncs are failing")
    } else if active(super::kube_proxy::sync_slow(s, t, mode)) {
        Some("kube-proxy's syncs are slow")
    } else if active(super::kube_proxy::sync_stale(s, t, mode)) {
        Some("kube-proxy's changes wait for a sync")
    } else {
        None
    }
}

pub fn held(s: &Snapshot, t: &Thresholds, mode: &ModeDecision) -> Option<Finding> {
    let f = s.facts.xtables_lock.as_ref()?;
    let Some(holder) = &f.holder else {
        return Some(Finding::new(Severity::Ok, "the xtables lock is free"));
    };
    let held = s.derived.xtables_lock.as_ref().map_or(0.0, |h| h.held_seconds);
    let since = s.derived.xtables_lock.as_ref().map(|h| h.since_timestamp_seconds);
    let other = !is_kube_proxy(s, holder);
    let suffers = kube_proxy_suffers(s, t, mode);
    let waiting = f.waiters_total > 0;
    let severity = if other && held >= t.xtables_lock_held_warning_seconds && (suffers.is_some() || waiting) {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let who = holder.process.describe();
    let mut why: Vec<String> = suffers.into_iter().map(str::to_string).collect();
    if waiting {
        why.push(format!("{} process(es) wait for it", f.waiters_total));
    }
    let summary = format!(
        "{who} has held {} for {held:.0} s{}",
        f.path,
        if why.is_empty() {
            String::new()
        } else {
            format!(" while {}", why.join(" and "))
        }
    );
    let pid = holder.process.pid.map_or("<PID>".to_string(), |p| p.to_string());
    let mut steps = vec![
        format!("{who} holds the xtables lock ({}): every iptables-legacy change on the node waits for it, and kube-proxy's iptables-restore (-w 5) gives up after 5 s.", f.path),
        format!("See what it is doing: tr '\\0' ' ' < /proc/{pid}/cmdline; echo; ls -l /proc/{pid}/exe; cat /proc/{pid}/wchan; echo"),
    ];
    if let Some(pod) = &holder.process.pod_uid {
        steps.push(format!(
            "It runs in pod {pod}: kubectl get pods -A -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid | grep {pod}"
        ));
    } else if let Some(unit) = &holder.process.unit {
        steps.push(format!(
            "It runs in {unit}: systemctl status {unit}; journalctl -u {unit} --since -1h"
        ));
    }
    steps.push(format!(
        "If it is stuck (a hung iptables-legacy, a script waiting on input), stop that process only, by its PID after checking the name above: kill {pid} (never killall iptables: kube-proxy's own restore is one of them)."
    ));
    steps.push("kube-proxy recovers on its next sync once the lock is free; make the other writer use iptables --wait with a timeout and hold the lock briefly (one iptables-restore, not one iptables call per rule).".into());
    Some(
        Finding::new(severity, summary)
            .evidence("holder_pid", holder.process.pid)
            .evidence("holder_name", holder.process.name.clone())
            .evidence("holder_parent_pid", holder.process.parent_pid)
            .evidence("holder_parent_name", holder.process.parent_name.clone())
            .evidence("holder_unit", holder.process.unit.clone())
            .evidence("holder_pod_uid", holder.process.pod_uid.clone())
            .evidence("holder_command", holder.command.clone())
            .evidence("holder_is_kube_proxy", !other)
            .evidence("held_seconds", held)
            .evidence("held_since_timestamp_seconds", since)
            .evidence("waiters", f.waiters_total)
            .evidence("kube_proxy_syncs", suffers)
            .evidence("warning_after_seconds", t.xtables_lock_held_warning_seconds)
            .remediation_owned(steps),
    )
}

#[cfg(test)]
mod tests {
    use super::super::lock_holder::holder_line;
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::xtables_lock::XtablesLockHold;
    use crate::probe::xtables_lock::{LockProcess, XtablesLockFacts};
    use crate::watch::attribute::Writer;

    fn locked(pid: u32, parent: i32, held: f64, waiters: u32) -> Snapshot {
        let mut s = healthy();
        s.facts.xtables_lock = Some(XtablesLockFacts {
            path: "/run/xtables.lock".into(),
            holder: Some(LockProcess {
                process: Writer {
                    pid: Some(pid),
                    name: Some("flock".into()),
                    parent_pid: Some(parent),
                    parent_name: Some("bash".into()),
                    unit: Some("backup.service".into()),
                    ..Default::default()
                },
                command: Some("flock /run/xtables.lock sleep 600".into()),
            }),
            waiters_total: waiters,
            ..Default::default()
        });
        s.derived.xtables_lock = Some(XtablesLockHold {
            held_seconds: held,
            since_timestamp_seconds: 1000.0,
        });
        s
    }

    #[test]
    fn another_holder_past_the_threshold_with_a_waiter_is_named() {
        let t = crate::config::default_thresholds();
        let f = judge(held, &locked(4242, 880, 12.0, 1), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.summary,
            "flock (PID 4242), parent bash (PID 880), unit backup.service has held /run/xtables.lock for 12 s while 1 process(es) wait for it"
        );
        assert!(
            f.remediation.iter().any(|r| r.contains("kill 4242")),
            "{:?}",
            f.remediation
        );
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("systemctl status backup.service")));
        // Below the threshold, or nobody waiting and kube-proxy fine: no warning.
        assert_eq!(
            judge(held, &locked(4242, 880, 4.0, 1), &t).unwrap().severity,
            Severity::Ok
        );
        assert_eq!(
            judge(held, &locked(4242, 880, 60.0, 0), &t).unwrap().severity,
            Severity::Ok
        );
        // Free, or no reading: nothing to say.
        let mut free = locked(1, 1, 0.0, 0);
        free.facts.xtables_lock.as_mut().unwrap().holder = None;
        assert_eq!(judge(held, &free, &t).unwrap().severity, Severity::Ok);
        assert!(judge(held, &healthy(), &t).is_none());
    }

    #[test]
    fn kube_proxys_own_restore_is_never_the_culprit() {
        let t = crate::config::default_thresholds();
        let mut s = locked(4242, 77, 60.0, 3);
        s.facts.kube_proxy = Some(crate::probe::kube_proxy::KubeProxyFacts {
            process: Some(crate::probe::kube_proxy::ProcessFacts {
                pid: 77,
                ..Default::default()
            }),
            ..Default::default()
        });
        let f = judge(held, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Ok);
        assert_eq!(f.evidence["holder_is_kube_proxy"], true);
        assert_eq!(holder_line(&s), None);
        assert!(holder_line(&locked(4242, 880, 9.0, 0))
            .unwrap()
            .starts_with("flock (PID 4242)"));
    }
}
