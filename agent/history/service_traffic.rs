//! The service_traffic probe's tries over time, per target: the connect (or
//! DNS answer) times as a histogram since the agent started (for Prometheus),
//! their p50 and p99 over the latest [`WINDOW_TRIES`] successful tries (with
//! those tries' times and values, which `check`'s text and the status page's
//! chart show), and the tries counted by result. Targets are at most the probe's ([`MAX_TARGETS`] flags,
//! each with its NodePort, and the three built-in tries), so memory is bounded.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::series::Point;
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
    /// Those tries, oldest first: Unix time of the run, seconds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<Point>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceTrafficDerived {
    pub targets: Vec<TargetHistory>,
}

#[derive(Debug, Default)]
pub struct ServiceTrafficHistory {
    targets: BTreeMap<String, (TargetHistory, VecDeque<Point>)>,
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
    /// Takes one run's tries, made at `now` (Unix seconds: the time shown beside each try).
    pub fn observe(&mut self, f: &ServiceTrafficFacts, now: f64) -> ServiceTrafficDerived {
        for t in &f.tries {
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
                    VecDeque::new(),
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
                recent.push_back([now, s]);
            }
            let mut sorted: Vec<f64> = recent.iter().map(|p| p[1]).collect();
            sorted.sort_by(f64::total_cmp);
            h.p50_seconds = quantile(&sorted, 0.5);
            h.p99_seconds = quantile(&sorted, 0.99);
            h.window_tries = sorted.len();
            h.recent = recent.iter().copied().collect();
        }
        ServiceTrafficDerived {
            targets: self.targets.values().map(|(h, _)| h.clone()).collect(),
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
                tries: vec![
                    try_("a", "ok", Some(i as f64 / 1000.0)),
                    try_("b", if i % 2 == 0 { "ok" } else { "refused" }, Some(0.2)),
                ],
                ..Default::default()
            };
            d = h.observe(&f, 1000.0 + i as f64);
        }
        let a = &d.targets[0];
        assert_eq!((a.target.as_str(), a.count, a.window_tries), ("a", 100, WINDOW_TRIES));
        // The latest 60: 41..100 ms.
        assert_eq!((a.p50_seconds, a.p99_seconds), (Some(0.07), Some(0.1)));
        assert_eq!(a.recent.len(), WINDOW_TRIES);
        assert_eq!(
            (a.recent[0], a.recent[59]),
            ([1041.0, 0.041], [1100.0, 0.1]),
            "each try with its time"
        );
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
            tries: (0..100).map(|i| try_(&format!("t{i}"), "ok", Some(0.001))).collect(),
            ..Default::default()
        };
        assert_eq!(h.observe(&many, 2000.0).targets.len(), MAX_KEPT);
    }
}
