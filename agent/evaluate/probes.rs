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
    let names: Vec<&str> = failed.iter().map(|(p, _)| *p).collect();
    let mut f = Finding::new(
        "probe_failed",
        if failed.is_empty() { Severity::Ok } else { Severity::Warning },
        format!("probe failed: {}; its facts are not reported until it succeeds", names.join(", ")),
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
    }
}
