//! Stale and draining conntrack entries over time: when each (service,
//! removed endpoint) pair was first seen, and in how many consecutive checks.
//! kube-proxy's own cleanup needs a moment after an endpoint goes, so only a
//! stale pair seen in two checks in a row is "persisting"; a pair missing
//! from a check starts over.
//!
//! Conntrack entries carry no age (only the time left before they expire), so
//! a draining pair's age is how long it has been seen, on the monotonic clock:
//! since the first check of its unbroken run. A pair that was draining before
//! the agent started is younger here than it is: it leaves the drain window
//! late, never early.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::probe::conntrack_stale::{ConntrackStaleFacts, StaleGroup};

/// One pair of the latest check, with its past.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrackedStale {
    #[serde(flatten)]
    pub group: StaleGroup,
    /// Unix time of the first check (of this unbroken run) that saw it, in seconds.
    #[serde(rename = "first_seen_timestamp_seconds", alias = "first_seen_seconds")]
    pub first_seen_seconds: f64,
    /// Consecutive checks that saw it, this one included.
    pub checks: u32,
    /// Seconds from the first of those checks to this one (monotonic clock).
    #[serde(default)]
    pub seen_for_seconds: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StaleDerived {
    /// The stale pairs (UDP) of the latest check.
    pub groups: Vec<TrackedStale>,
    /// The draining pairs (TCP, SCTP) of the latest check.
    #[serde(default)]
    pub draining: Vec<TrackedStale>,
}

impl StaleDerived {
    /// Pairs seen in at least two checks in a row.
    pub fn persisting(&self) -> impl Iterator<Item = &TrackedStale> {
        self.groups.iter().filter(|g| g.checks >= 2)
    }
}

#[derive(Debug, Default)]
pub struct StaleHistory {
    /// (service, endpoint) -> (first seen: wall clock, monotonic; checks).
    seen: HashMap<(String, String), (f64, f64, u32)>,
}

impl StaleHistory {
    /// Takes a check made at `now` (wall clock, Unix seconds: only shown, as a pair's first
    /// seen time) and `mono` (monotonic seconds: a draining pair's age). Persistence is
    /// counted in checks, not measured in time.
    pub fn observe(&mut self, f: &ConntrackStaleFacts, now: f64, mono: f64) -> StaleDerived {
        let mut next = HashMap::with_capacity(f.stale.len() + f.draining.len());
        let mut track = |groups: &[StaleGroup]| -> Vec<TrackedStale> {
            groups
                .iter()
                .map(|g| {
                    let key = (g.service.clone(), g.endpoint.clone());
                    let (first, first_mono, checks) = self
                        .seen
                        .get(&key)
                        .map_or((now, mono, 1), |(t, m, n)| (*t, *m, n.saturating_add(1)));
                    next.insert(key, (first, first_mono, checks));
                    TrackedStale {
                        group: g.clone(),
                        first_seen_seconds: first,
                        checks,
                        seen_for_seconds: (mono - first_mono).max(0.0),
                    }
                })
                .collect()
        };
        let groups = track(&f.stale);
        let draining = track(&f.draining);
        self.seen = next;
        StaleDerived { groups, draining }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(eps: &[&str]) -> ConntrackStaleFacts {
        ConntrackStaleFacts {
            stale: eps
                .iter()
                .map(|e| StaleGroup {
                    service: "10.96.0.10:53/udp".into(),
                    address: "10.96.0.10".parse().unwrap(),
                    port: 53,
                    protocol: "udp".into(),
                    node_port: false,
                    endpoint: e.to_string(),
                    entries: 1,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn persists_after_two_checks_and_restarts_after_a_gap() {
        let mut h = StaleHistory::default();
        let d = h.observe(&facts(&["a"]), 10.0, 1.0);
        assert_eq!(d.persisting().count(), 0);
        let d = h.observe(&facts(&["a", "b"]), 20.0, 11.0);
        let p: Vec<_> = d.persisting().collect();
        assert_eq!((p.len(), p[0].first_seen_seconds, p[0].checks), (1, 10.0, 2));
        assert_eq!(p[0].seen_for_seconds, 10.0);
        let d = h.observe(&facts(&["b"]), 30.0, 21.0);
        assert_eq!(d.persisting().count(), 1);
        let d = h.observe(&facts(&["a"]), 40.0, 31.0);
        assert_eq!((d.persisting().count(), d.groups[0].first_seen_seconds), (0, 40.0));
    }

    /// A draining pair's age runs on the monotonic clock (a wall clock step
    /// does not age it) and starts over after a check without it.
    #[test]
    fn draining_pairs_age_on_the_monotonic_clock() {
        let mut h = StaleHistory::default();
        let mut f = facts(&[]);
        f.draining = facts(&["d"]).stale;
        let d = h.observe(&f, 1000.0, 5.0);
        assert_eq!((d.draining.len(), d.draining[0].seen_for_seconds), (1, 0.0));
        let d = h.observe(&f, 99999.0, 65.0);
        assert_eq!(d.draining[0].seen_for_seconds, 60.0);
        assert_eq!(d.draining[0].first_seen_seconds, 1000.0);
        assert!(d.groups.is_empty());
        h.observe(&facts(&[]), 99999.0, 125.0);
        let d = h.observe(&f, 99999.0, 185.0);
        assert_eq!(d.draining[0].seen_for_seconds, 0.0, "a gap starts it over");
    }
}
