//! The service_traffic probe's tries over time, per target: the connect (or
//! DNS answer) times as a histogram since the agent started (for Prometheus),
//! their p50 and p99 over the latest [`WINDOW_TRIES`] successful tries (what
//! `check`'s text, the `/` text and the status page's chart show), and the tries
//! counted by result. Targets are at most the probe's ([`MAX_TARGETS`] flags,
//! each with its NodePort, and the three built-in tries), so memory is bounded.
//!
//! The window's times stay here, out of the snapshot: every publication renders and keeps
//! the snapshot whole, and 60 points for each of 23 targets made `/snapshot` nine times the
//! size it is without tries (docs/benchmarks.md, issue 37); what is shown of them is their
//! p50, p99 and count.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::probe::service_traffic::{ServiceTrafficFacts, MAX_TARGETS};

/// The histogram's upper bounds, in seconds (`le`): from loopback-fast to the try timeout.
pub const BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Tries the percentiles are over, per target.
pub const WINDOW_TRIES: usize = 60;
/// Targets remembered, at most: the three built-in tries, each flag's and its NodePort's.
const MAX_KEPT: usize = 2 * MAX_TARGETS + 3;

/// One target's tries so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetHistory {
    pub target: String,
    /// Cumulative counts of the successful tries' times per bound of [`BUCKETS`].
    pub buckets: Vec<u64>,
    /// Sum of those times, in seconds.
    pub sum_seconds: f64,
    /// Successful tries with a time.
    pub count: u64,
    /// Tries since the agent started, by result (`ok`, `refused`, `timeout`...).
    pub tries: BTreeMap<String, u64>,
    /// p50 and p99 of the latest [`WINDOW_TRIES`] successful tries' times, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_seconds: Option<f64>,
    /// Tries the percentiles are over.
    pub window_tries: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceTrafficDerived {
    /// Shared with every publication's copy of the snapshot (see the facts' tries).
    pub targets: Arc<Vec<TargetHistory>>,
}

#[derive(Debug, Default)]
pub struct ServiceTrafficHistory {
    /// Each target's history and the times of its latest successful tries, oldest first, in seconds.
    targets: BTreeMap<String, (TargetHistory, VecDeque<f64>)>,
    /// The window sorted, reused from try to try.
    sorted: Vec<f64>,
}

/// The `q` quantile (nearest rank) of `v`, sorted.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

impl ServiceTrafficHistory {
    /// Takes one run's tries.
    pub fn observe(&mut self, f: &ServiceTrafficFacts) -> ServiceTrafficDerived {
        for t in f.tries.iter() {
            if !self.targets.contains_key(&t.target) && self.targets.len() >= MAX_KEPT {
                continue;
            }
            let (h, recent) = self.targets.entry(t.target.clone()).or_insert_with(|| {
                (
                    TargetHistory {
                        target: t.target.clone(),
                        buckets: vec![0; BUCKETS.len()],
                        ..TargetHistory::default()
                    },
                    VecDeque::with_capacity(WINDOW_TRIES),
                )
            });
            *h.tries.entry(t.result.clone()).or_default() += 1;
            if let (true, Some(s)) = (t.ok(), t.seconds) {
                for (n, le) in h.buckets.iter_mut().zip(BUCKETS) {
                    *n += u64::from(s <= *le);
                }
                h.sum_seconds += s;
                h.count += 1;
                if recent.len() == WINDOW_TRIES {
                    recent.pop_front();
                }
                recent.push_back(s);
            }
            let sorted = &mut self.sorted;
            sorted.clear();
            sorted.extend(recent.iter().copied());
            sorted.sort_by(f64::total_cmp);
            h.p50_seconds = quantile(sorted, 0.5);
            h.p99_seconds = quantile(sorted, 0.99);
            h.window_tries = sorted.len();
        }
        ServiceTrafficDerived {
            targets: Arc::new(self.targets.values().map(|(h, _)| h.clone()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::service_traffic::{Path, Role, Try};

    fn try_(target: &str, result: &str, s: Option<f64>) -> Try {
        Try {
            target: target.into(),
            role: Role::Target,
            service: None,
            result: result.into(),
            detail: None,
            seconds: s,
            answer_seconds: None,
            source: None,
            endpoint: None,
            path: Path::Current,
            path_detail: None,
            rule_endpoints: vec![],
        }
    }

    #[test]
    fn histogram_percentiles_and_results() {
        let mut h = ServiceTrafficHistory::default();
        let mut d = ServiceTrafficDerived::default();
        for i in 1..=100 {
            let f = ServiceTrafficFacts {
                tries: Arc::new(vec![
                    try_("a", "ok", Some(i as f64 / 1000.0)),
                    try_("b", if i % 2 == 0 { "ok" } else { "refused" }, Some(0.2)),
                ]),
                ..Default::default()
            };
            d = h.observe(&f);
        }
        let a = &d.targets[0];
        assert_eq!((a.target.as_str(), a.count, a.window_tries), ("a", 100, WINDOW_TRIES));
        // The latest 60: 41..100 ms.
        assert_eq!((a.p50_seconds, a.p99_seconds), (Some(0.07), Some(0.1)));
        assert_eq!(a.buckets[0], 1, "1 ms");
        assert_eq!(a.buckets[6], 100, "100 ms");
        assert!((a.sum_seconds - 5.05).abs() < 1e-9);
        let b = &d.targets[1];
        assert_eq!(b.tries, BTreeMap::from([("ok".into(), 50), ("refused".into(), 50)]));
        assert_eq!(
            (b.count, b.buckets[6], b.buckets[7]),
            (50, 0, 50),
            "only successes are timed"
        );
        // Bounded.
        let many = ServiceTrafficFacts {
            tries: Arc::new((0..100).map(|i| try_(&format!("t{i}"), "ok", Some(0.001))).collect()),
            ..Default::default()
        };
        assert_eq!(h.observe(&many).targets.len(), MAX_KEPT);
    }
}
