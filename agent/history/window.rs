//! Counter increases over a recent window, from successive readings.
//!
//! Kernel counters (conntrack drops...) only grow since boot; what an SRE needs
//! is "how many in the last few minutes". The history stage keeps the readings of
//! one window (bounded) and derives the increase, the way Prometheus'
//! `increase()` would, but without Prometheus. Pure: the caller gives the times.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// How much each counter grew over `seconds`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterDeltas {
    /// Length of the window actually covered (oldest reading kept to newest), in seconds.
    pub seconds: f64,
    /// Increase of each counter over the window. A counter that went backwards
    /// (reset, e.g. a CPU went offline) counts from its reset value.
    pub increase: BTreeMap<String, u64>,
}

impl CounterDeltas {
    pub fn get(&self, name: &str) -> u64 {
        self.increase.get(name).copied().unwrap_or(0)
    }
}

/// The readings of the last `span` seconds, at most `capacity` of them.
#[derive(Debug, Clone)]
pub struct CounterWindow {
    span: f64,
    capacity: usize,
    readings: VecDeque<(f64, BTreeMap<String, u64>)>,
}

impl CounterWindow {
    pub fn new(span_seconds: f64, capacity: usize) -> Self {
        CounterWindow {
            span: span_seconds,
            capacity: capacity.max(2),
            readings: VecDeque::new(),
        }
    }

    /// Adds a reading taken at `now` (seconds, monotonic) and returns the
    /// increases over the window, or None when this is the first reading.
    pub fn push(&mut self, now: f64, counters: &BTreeMap<String, u64>) -> Option<CounterDeltas> {
        self.readings.push_back((now, counters.clone()));
        // Keep one reading at or before the window's start so the window is fully covered.
        while self.readings.len() > 2 && self.readings[1].0 <= now - self.span {
            self.readings.pop_front();
        }
        while self.readings.len() > self.capacity {
            self.readings.pop_front();
        }
        if self.readings.len() < 2 {
            return None;
        }
        let mut increase: BTreeMap<String, u64> = BTreeMap::new();
        for pair in self.readings.iter().collect::<Vec<_>>().windows(2) {
            let (prev, next) = (&pair[0].1, &pair[1].1);
            for (name, &v) in next {
                let before = prev.get(name).copied().unwrap_or(0);
                let inc = if v >= before { v - before } else { v };
                *increase.entry(name.clone()).or_insert(0) += inc;
            }
        }
        Some(CounterDeltas {
            seconds: now - self.readings[0].0,
            increase,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(drop: u64) -> BTreeMap<String, u64> {
        [("drop".to_string(), drop)].into()
    }

    #[test]
    fn first_reading_has_no_window() {
        let mut w = CounterWindow::new(60.0, 100);
        assert_eq!(w.push(0.0, &c(5)), None);
        let d = w.push(10.0, &c(9)).unwrap();
        assert_eq!((d.seconds, d.get("drop")), (10.0, 4));
    }

    #[test]
    fn old_increases_leave_the_window() {
        let mut w = CounterWindow::new(30.0, 100);
        w.push(0.0, &c(0));
        w.push(10.0, &c(100)); // a burst early on
        for t in [20.0, 30.0, 40.0, 50.0] {
            w.push(t, &c(100));
        }
        let d = w.push(60.0, &c(100)).unwrap();
        assert_eq!(d.get("drop"), 0, "the burst at t=10 is older than 30 s");
        assert!(d.seconds >= 30.0 && d.seconds <= 40.0, "{}", d.seconds);
    }

    #[test]
    fn reset_counts_from_zero_and_capacity_bounds_memory() {
        let mut w = CounterWindow::new(1e9, 3);
        w.push(0.0, &c(50));
        w.push(1.0, &c(60));
        let d = w.push(2.0, &c(5)).unwrap();
        assert_eq!(d.get("drop"), 10 + 5);
        for t in 3..1000 {
            w.push(t as f64, &c(t));
        }
        assert_eq!(w.readings.len(), 3);
    }
}
