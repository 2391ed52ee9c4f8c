//! The agent's own health: a probe that fails means the node is partly unseen.

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::snapshot::{ProbeStatus, Snapshot};

pub fn failed(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let failed: Vec<(&str, &str)> = s
        .probes
        .iter()
        .filter(|(_, o)| o.status == ProbeStatus::Failed)
        .map(|(p, o)| (p.as_str(), o.error.as_deref().unwrap_or("unknown error")))
        .collect();
    // Each failed probe with what its facts are now: its last good reading
    // (held for a while, so a transient failure clears no finding) or none.
    let names: Vec<String> = failed
        .iter()
        .map(|(p, _)| {
            let o = s.probes.iter().find(|(n, _)| n.as_str() == *p).map(|(_, o)| o);
            match o.and_then(|o| Some(o.last_run_seconds - o.reading_seconds?)) {
                Some(age) => format!("{p} (its last good reading, {age:.0} s old, is shown meanwhile)"),
                None => format!("{p} (its facts are not reported until it succeeds)"),
            }
        })
        .collect();
    let mut f = Finding::new(
        if failed.is_empty() { Severity::Ok } else { Severity::Warning },
        format!("probe failed: {}", names.join(", ")),
    )
    .remediation(&[
        "Read the error below: it names the file or command and, for permission errors, the capability the agent lacks.",
        "proxywatch check on the node runs every probe once and prints the same errors.",
    ]);
    for (p, e) in failed {
        f = f.evidence(p, e);
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::ProbeName;
    use crate::snapshot::ProbeOutcome;

    #[test]
    fn lists_each_failed_probe_with_its_error() {
        let mut s = Snapshot::new("n");
        let outcome = |status, error: Option<&str>| ProbeOutcome {
            status,
            duration_seconds: 0.1,
            error: error.map(str::to_string),
            last_run_seconds: 1.0,
            last_success_seconds: None,
            reading_seconds: None,
        };
        s.probes.insert(ProbeName::Modules, outcome(ProbeStatus::Ok, None));
        assert_eq!(
            judge(failed, &s, &crate::config::default_thresholds())
                .unwrap()
                .severity,
            Severity::Ok
        );
        s.probes.insert(
            ProbeName::Conntrack,
            outcome(ProbeStatus::Failed, Some("/proc/x: line 2: bad")),
        );
        s.probes
            .insert(ProbeName::Sysctls, outcome(ProbeStatus::Absent, Some("gone")));
        let f = judge(failed, &s, &crate::config::default_thresholds()).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["conntrack"], "/proc/x: line 2: bad");
        assert!(!f.evidence.contains_key("sysctls"), "absent is not failed");
        assert!(
            f.summary.contains("conntrack (its facts are not reported"),
            "{}",
            f.summary
        );
        // A failure that holds the last good reading says how old it is.
        let mut held = outcome(ProbeStatus::Failed, Some("changed"));
        held.last_run_seconds = 130.0;
        held.reading_seconds = Some(100.0);
        s.probes.insert(ProbeName::ConntrackStale, held);
        let f = judge(failed, &s, &crate::config::default_thresholds()).unwrap();
        assert!(
            f.summary
                .contains("conntrack_stale (its last good reading, 30 s old, is shown meanwhile)"),
            "{}",
            f.summary
        );
    }
}
