//! The reverse-path filter's drops over a window: `IPReversePathFilter` rising means packets
//! are dropped now, not once since boot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::window::CounterWindow;
use crate::probe::rp_filter::RpFilterFacts;

/// Readings kept, at most (one a second for the default 5-minute window and more).
const CAPACITY: usize = 1024;

/// Drops over the window; from the second reading on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RpFilterDrops {
    /// Packets dropped within the window.
    pub increase: u64,
    /// Seconds the window spans (first to latest reading in it).
    pub seconds: f64,
    /// increase / seconds.
    pub per_second: f64,
}

#[derive(Debug)]
pub struct RpFilterHistory {
    window: CounterWindow,
}

impl RpFilterHistory {
    /// Drops count over `window_seconds` (`--rp-filter.window`).
    pub fn new(window_seconds: f64) -> Self {
        RpFilterHistory {
            window: CounterWindow::new(window_seconds, CAPACITY),
        }
    }

    pub fn observe(&mut self, f: &RpFilterFacts, mono: f64) -> Option<RpFilterDrops> {
        let total = f.drops_total?;
        let counters: BTreeMap<String, u64> = [("drops".to_string(), total)].into();
        let d = self.window.push(mono, &counters)?;
        let increase = d.get("drops");
        (d.seconds > 0.0).then(|| RpFilterDrops {
            increase,
            seconds: d.seconds,
            per_second: increase as f64 / d.seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_from_the_second_reading() {
        let mut h = RpFilterHistory::new(300.0);
        let f = |n| RpFilterFacts {
            drops_total: Some(n),
            ..Default::default()
        };
        assert_eq!(
            h.observe(&f(1000), 0.0),
            None,
            "one reading: totals since boot are no rate"
        );
        let d = h.observe(&f(1400), 4.0).unwrap();
        assert_eq!((d.increase, d.seconds, d.per_second), (400, 4.0, 100.0));
        assert_eq!(h.observe(&RpFilterFacts::default(), 5.0), None, "no counter: no rate");
        // Past the window the burst no longer counts: 0 per second, not the rate of 4 s ago.
        let mut h = RpFilterHistory::new(10.0);
        h.observe(&f(0), 0.0);
        assert_eq!(h.observe(&f(200), 1.0).unwrap().increase, 200);
        h.observe(&f(200), 6.0);
        let d = h.observe(&f(200), 12.0).unwrap();
        assert_eq!((d.increase, d.seconds), (0, 11.0));
    }
}
