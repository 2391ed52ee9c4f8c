//! Stale conntrack entries over time: when each (service, dead endpoint) pair
//! was first seen, and in how many consecutive checks. kube-proxy's own
//! cleanup needs a moment after an endpoint goes, so only a pair seen in two
//! checks in a row is "persisting"; a pair missing from a check starts over.

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
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StaleDerived {
    pub groups: Vec<TrackedStale>,
}

impl StaleDerived {
    /// Pairs seen in at least two checks in a row.
    pub fn persisting(&self) -> impl Iterator<Item = &TrackedStale> {
        self.groups.iter().filter(|g| g.checks >= 2)
    }
}

#[derive(Debug, Default)]
pub struct StaleHistory {
    seen: HashMap<(String, String), (f64, u32)>,
}

impl StaleHistory {
    /// Takes a check made at `now` (wall clock, Unix seconds): only shown, as a pair's first
    /// seen time. Persistence is counted in checks, not measured in time, so no clock bounds it.
    pub fn observe(&mut self, f: &ConntrackStaleFacts, now: f64) -> StaleDerived {
        let mut next = HashMap::with_capacity(f.stale.len());
        let groups = f
            .stale
            .iter()
            .map(|g| {
                let key = (g.service.clone(), g.endpoint.clone());
                let (first, checks) = self.seen.get(&key).map_or((now, 1), |(t, n)| (*t, n.saturating_add(1)));
                next.insert(key, (first, checks));
                TrackedStale {
                    group: g.clone(),
                    first_seen_seconds: first,
                    checks,
                }
            })
            .collect();
        self.seen = next;
        StaleDerived { groups }
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
        let d = h.observe(&facts(&["a"]), 10.0);
        assert_eq!(d.persisting().count(), 0);
        let d = h.observe(&facts(&["a", "b"]), 20.0);
        let p: Vec<_> = d.persisting().collect();
        assert_eq!((p.len(), p[0].first_seen_seconds, p[0].checks), (1, 10.0, 2));
        let d = h.observe(&facts(&["b"]), 30.0);
        assert_eq!(d.persisting().count(), 1);
        let d = h.observe(&facts(&["a"]), 40.0);
        assert_eq!((d.persisting().count(), d.groups[0].first_seen_seconds), (0, 40.0));
    }
}
