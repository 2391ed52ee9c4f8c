//! History: the only stage with memory. It takes each probe's reading of one
//! moment and derives what needs more than one reading — counter increases
//! over a window, the conntrack growth trend and time to full, kube-proxy's
//! latency over the last interval, its restarts and the age of its last sync.
//!
//! Probes know nothing of the past; evaluation is pure. Everything derived here
//! lands in [`Derived`], the snapshot's part beside the readings, so a reader
//! can tell a value read from the node from one computed over time.

pub mod kube_proxy;
pub mod neighbour;
pub mod stale;
pub mod trend;
pub mod window;

use serde::{Deserialize, Serialize};

use crate::probe::{ProbeName, Reading};
use kube_proxy::{KubeProxyDerived, KubeProxyHistory};
use trend::{ConntrackTrend, TrendHistory};
use window::{CounterDeltas, CounterWindow};

/// What the history stage derived from the readings so far. A slot is empty
/// while its probe's latest run failed or found its source absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackDerived>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxyDerived>,
    /// Stale conntrack entries with their first-seen times (the conntrack_stale probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack_stale: Option<stale::StaleDerived>,
    /// The neighbour tables' counter increases (the neighbour_tables probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_tables: Option<neighbour::NeighbourDerived>,
}

impl Derived {
    pub fn is_empty(&self) -> bool {
        *self == Derived::default()
    }
}

/// conntrack over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackDerived {
    /// Counter increases (drop, early_drop, insert_failed...) over
    /// `--conntrack.window`; absent after a single reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<CounterDeltas>,
    /// Growth of the entry count over `--conntrack.trend-window` and the time
    /// until the table is full; absent until the readings cover half the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend: Option<ConntrackTrend>,
}

/// How far back the history looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryConfig {
    /// Counter increases count over this many seconds (`--conntrack.window`).
    pub conntrack_window_seconds: f64,
    /// The conntrack trend is fitted over this many seconds (`--conntrack.trend-window`).
    pub conntrack_trend_window_seconds: f64,
    /// How often the conntrack probe reads, in seconds: sizes the trend's history.
    pub conntrack_interval_seconds: f64,
    /// Neighbour table counter increases count over this many seconds (`--neighbour-tables.window`).
    pub neighbour_tables_window_seconds: f64,
}

/// Readings kept for the counter window, at most (a reading every second for an hour).
const WINDOW_CAPACITY: usize = 4096;
/// The trend's readings are kept this long (seconds), or the fit window if longer.
const TREND_HISTORY_SECONDS: f64 = 3600.0;
/// The trend keeps at most this many readings.
const TREND_CAPACITY: usize = 4096;

/// Everything the agent remembers between probe runs.
#[derive(Debug)]
pub struct History {
    conntrack_window: CounterWindow,
    conntrack_trend: TrendHistory,
    kube_proxy: KubeProxyHistory,
    stale: stale::StaleHistory,
    neighbour: neighbour::NeighbourHistory,
}

impl History {
    pub fn new(c: HistoryConfig) -> Self {
        let span = TREND_HISTORY_SECONDS.max(c.conntrack_trend_window_seconds);
        let capacity = (span / c.conntrack_interval_seconds.max(0.001)).ceil() as usize + 1;
        History {
            conntrack_window: CounterWindow::new(c.conntrack_window_seconds, WINDOW_CAPACITY),
            conntrack_trend: TrendHistory::new(c.conntrack_trend_window_seconds, span, capacity.min(TREND_CAPACITY)),
            kube_proxy: KubeProxyHistory::default(),
            stale: stale::StaleHistory::default(),
            neighbour: neighbour::NeighbourHistory::new(c.neighbour_tables_window_seconds),
        }
    }

    /// Takes one probe's reading and updates what derives from it. `now` is the
    /// wall clock (Unix seconds, for timestamps and ages), `mono` a monotonic
    /// time in seconds (for windows).
    pub fn observe(&mut self, reading: &Reading, now: f64, mono: f64, derived: &mut Derived) {
        match reading {
            Reading::Conntrack(ct) => {
                let d = ConntrackDerived {
                    window: self.conntrack_window.push(mono, &ct.stats),
                    trend: self.conntrack_trend.push(mono, ct.entries, ct.max),
                };
                // Nothing derived yet (a first reading): no slot, as in `check`.
                derived.conntrack = (d != ConntrackDerived::default()).then_some(d);
            }
            Reading::KubeProxy(kp) => derived.kube_proxy = Some(self.kube_proxy.observe(kp, now)),
            Reading::ConntrackStale(f) => derived.conntrack_stale = Some(self.stale.observe(f, now)),
            Reading::NeighbourTables(f) => derived.neighbour_tables = Some(self.neighbour.observe(f, mono)),
            _ => {}
        }
    }

    /// A probe ran without a reading (failed or absent): what derived from its
    /// readings is no longer current. What was remembered stays, so a single
    /// failed run does not restart the windows.
    pub fn missed(&mut self, probe: ProbeName, derived: &mut Derived) {
        match probe {
            ProbeName::Conntrack => derived.conntrack = None,
            ProbeName::KubeProxy => derived.kube_proxy = None,
            ProbeName::ConntrackStale => derived.conntrack_stale = None,
            ProbeName::NeighbourTables => derived.neighbour_tables = None,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::conntrack::ConntrackFacts;

    fn ct(entries: u64, drop: u64) -> Reading {
        Reading::Conntrack(ConntrackFacts {
            entries,
            max: 1000,
            stats: [("drop".to_string(), drop)].into(),
            ..Default::default()
        })
    }

    #[test]
    fn windows_need_two_readings_and_a_miss_clears_only_the_derived_slot() {
        let mut h = History::new(HistoryConfig {
            conntrack_window_seconds: 60.0,
            conntrack_trend_window_seconds: 600.0,
            conntrack_interval_seconds: 5.0,
            neighbour_tables_window_seconds: 300.0,
        });
        let mut d = Derived::default();
        assert!(d.is_empty());
        h.observe(&ct(10, 5), 100.0, 0.0, &mut d);
        assert_eq!(d.conntrack, None, "one reading: nothing derived yet");
        h.missed(ProbeName::Conntrack, &mut d);
        assert!(d.is_empty());
        h.observe(&ct(10, 9), 110.0, 10.0, &mut d);
        let w = d.conntrack.as_ref().unwrap().window.clone().unwrap();
        assert_eq!((w.seconds, w.get("drop")), (10.0, 4), "the window spans the failed run");
    }
}
