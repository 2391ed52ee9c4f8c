//! Since when each finding has been active, and what changed: the memory
//! evaluation does not have (it is pure). Fed each verdict, in order, it stamps
//! every active finding with the time it became active at its current severity
//! (`Finding::since`) and returns the transitions — appeared, severity changed,
//! cleared — that the scheduler logs one line each, through a [`LogBudget`].
//!
//! Only what this process saw counts: a restarted agent starts every `since`
//! afresh at its first verdict (nothing is written on the node). A finding that
//! clears and comes back starts afresh too. Memory is one entry per active
//! finding, so bounded by the number of checks.

use std::collections::BTreeMap;

use crate::evaluate::{Finding, Severity};

/// What happened to one finding between two verdicts.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Appeared,
    SeverityChanged {
        from: Severity,
    },
    /// It was active at `severity` since `since`; it is not any more.
    Cleared,
}

/// One finding's transition, with what a log line shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub id: String,
    pub change: Change,
    /// The new severity; for `Cleared`, the one it had.
    pub severity: Severity,
    /// The new summary; for `Cleared`, its last one.
    pub summary: String,
    /// When it became active at `severity` (for `Cleared`, how long it lasted).
    pub since: f64,
}

#[derive(Debug, Clone)]
struct Active {
    severity: Severity,
    since: f64,
    summary: String,
}

/// The active findings of the previous verdict, with their `since`.
#[derive(Debug, Default)]
pub struct FindingTracker {
    active: BTreeMap<String, Active>,
}

impl FindingTracker {
    /// Stamps `since` on each of a verdict's active findings and returns the
    /// transitions from the previous verdict. `now` is the wall clock (Unix seconds).
    pub fn stamp(&mut self, findings: &mut [Finding], now: f64) -> Vec<Transition> {
        let mut transitions = Vec::new();
        let mut next = BTreeMap::new();
        for f in findings.iter_mut() {
            let since = match self.active.remove(&f.id) {
                Some(a) if a.severity == f.severity => a.since,
                previous => {
                    let change = match previous {
                        Some(a) => Change::SeverityChanged { from: a.severity },
                        None => Change::Appeared,
                    };
                    transitions.push(Transition {
                        id: f.id.clone(),
                        change,
                        severity: f.severity,
                        summary: f.summary.clone(),
                        since: now,
                    });
                    now
                }
            };
            f.since = Some(since);
            next.insert(
                f.id.clone(),
                Active {
                    severity: f.severity,
                    since,
                    summary: f.summary.clone(),
                },
            );
        }
        for (id, a) in std::mem::replace(&mut self.active, next) {
            transitions.push(Transition {
                id,
                change: Change::Cleared,
                severity: a.severity,
                summary: a.summary,
                since: a.since,
            });
        }
        transitions
    }
}

/// Log lines allowed in a burst, and the sustained rate after it: enough for a
/// node going bad all at once (every check changing), few enough that a
/// flapping finding cannot flood `kubectl logs`.
pub const LOG_BURST: f64 = 20.0;
pub const LOG_LINES_PER_SECOND: f64 = 1.0 / 3.0;

/// A token bucket for log lines, on monotonic seconds: pure, so testable.
#[derive(Debug, Clone)]
pub struct LogBudget {
    tokens: f64,
    last: Option<f64>,
    /// Lines refused since the last one allowed.
    pub suppressed: u64,
}

impl Default for LogBudget {
    fn default() -> Self {
        LogBudget {
            tokens: LOG_BURST,
            last: None,
            suppressed: 0,
        }
    }
}

impl LogBudget {
    /// May a line be logged at `mono`? On yes, returns how many were refused
    /// before it (for the line to say so) and resets that count.
    pub fn admit(&mut self, mono: f64) -> Option<u64> {
        if let Some(last) = self.last {
            self.tokens = (self.tokens + (mono - last).max(0.0) * LOG_LINES_PER_SECOND).min(LOG_BURST);
        }
        self.last = Some(mono);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(id: &str, severity: Severity) -> Finding {
        Finding {
            id: id.into(),
            severity,
            since: None,
            summary: format!("{id} is {}", severity.as_str()),
            evidence: Default::default(),
            remediation: vec![],
        }
    }

    #[test]
    fn since_survives_repeated_verdicts_and_restarts_on_severity_change() {
        let mut t = FindingTracker::default();
        let mut v = vec![finding("conntrack_table_fill", Severity::Warning)];
        let tr = t.stamp(&mut v, 100.0);
        assert_eq!(v[0].since, Some(100.0));
        assert_eq!(tr.len(), 1);
        assert_eq!(
            (tr[0].change.clone(), tr[0].severity),
            (Change::Appeared, Severity::Warning)
        );
        // The same severity, many times over: since does not move, nothing to log.
        for now in [105.0, 110.0, 500.0] {
            let mut v = vec![finding("conntrack_table_fill", Severity::Warning)];
            assert!(t.stamp(&mut v, now).is_empty());
            assert_eq!(v[0].since, Some(100.0), "at {now}");
        }
        // Worse: since restarts, one transition naming the old severity.
        let mut v = vec![finding("conntrack_table_fill", Severity::Critical)];
        let tr = t.stamp(&mut v, 600.0);
        assert_eq!(v[0].since, Some(600.0));
        assert_eq!(
            tr[0].change,
            Change::SeverityChanged {
                from: Severity::Warning
            }
        );
        // Cleared: reported once with how long it lasted at its last severity.
        let tr = t.stamp(&mut [], 700.0);
        assert_eq!(tr.len(), 1);
        assert_eq!(
            (tr[0].change.clone(), tr[0].severity, tr[0].since),
            (Change::Cleared, Severity::Critical, 600.0)
        );
        assert!(t.stamp(&mut [], 710.0).is_empty(), "cleared is said once");
        // Back again: afresh.
        let mut v = vec![finding("conntrack_table_fill", Severity::Critical)];
        assert_eq!(t.stamp(&mut v, 800.0)[0].change, Change::Appeared);
        assert_eq!(v[0].since, Some(800.0));
    }

    #[test]
    fn each_finding_has_its_own_since() {
        let mut t = FindingTracker::default();
        t.stamp(&mut [finding("a", Severity::Warning)], 1.0);
        let mut v = vec![finding("a", Severity::Warning), finding("b", Severity::Critical)];
        let tr = t.stamp(&mut v, 2.0);
        assert_eq!((v[0].since, v[1].since), (Some(1.0), Some(2.0)));
        assert_eq!(tr.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn budget_allows_a_burst_then_a_line_every_three_seconds_and_counts_the_rest() {
        let mut b = LogBudget::default();
        for _ in 0..20 {
            assert_eq!(b.admit(0.0), Some(0));
        }
        assert_eq!(b.admit(0.0), None);
        assert_eq!(b.admit(1.0), None);
        assert_eq!(b.suppressed, 2);
        // 3 s after the first refusal a token is back; the line says 2 were left out.
        assert_eq!(b.admit(3.0), Some(2));
        assert_eq!(b.admit(3.5), None);
        // A long quiet spell refills the burst, not more.
        for _ in 0..20 {
            assert!(b.admit(10_000.0).is_some());
        }
        assert_eq!(b.admit(10_000.0), None);
    }
}
