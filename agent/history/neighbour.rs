//! The neighbour tables' counters over a window: `table_fulls` rising means
//! the kernel is refusing neighbours now, not once since boot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::window::{CounterDeltas, CounterWindow};
use crate::probe::neighbour_tables::NeighbourFacts;

/// Readings kept per table, at most (a reading every second for an hour).
const CAPACITY: usize = 4096;

/// Counter increases per table family over `--neighbour-tables.window`; a
/// family appears from its second reading on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeighbourDerived {
    pub windows: BTreeMap<String, CounterDeltas>,
}

/// One window per family, started when the family's table is first seen (a
/// table that appears later, IPv6 loaded at run time, never counts its
/// counters since boot as a rise).
#[derive(Debug)]
pub struct NeighbourHistory {
    span: f64,
    windows: BTreeMap<String, CounterWindow>,
}

impl NeighbourHistory {
    pub fn new(span_seconds: f64) -> Self {
        NeighbourHistory {
            span: span_seconds,
            windows: BTreeMap::new(),
        }
    }

    pub fn observe(&mut self, facts: &NeighbourFacts, mono: f64) -> NeighbourDerived {
        let mut out = NeighbourDerived::default();
        self.windows
            .retain(|family, _| facts.tables.iter().any(|t| &t.family == family && t.counters.is_some()));
        for t in &facts.tables {
            let Some(c) = &t.counters else {
                continue;
            };
            let counters: BTreeMap<String, u64> = [
                ("table_fulls", c.table_fulls),
                ("forced_gc_runs", c.forced_gc_runs),
                ("allocs", c.allocs),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let span = self.span;
            let w = self
                .windows
                .entry(t.family.clone())
                .or_insert_with(|| CounterWindow::new(span, CAPACITY));
            if let Some(d) = w.push(mono, &counters) {
                out.windows.insert(t.family.clone(), d);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::neighbour_tables::{NeighbourCounters, NeighbourTable};

    fn facts(tables: &[(&str, u64)]) -> NeighbourFacts {
        NeighbourFacts {
            tables: tables
                .iter()
                .map(|(f, fulls)| NeighbourTable {
                    family: f.to_string(),
                    counters: Some(NeighbourCounters {
                        table_fulls: *fulls,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn rises_within_the_window_and_a_late_table_starts_at_zero() {
        let mut h = NeighbourHistory::new(60.0);
        assert!(
            h.observe(&facts(&[("ipv4", 500)]), 0.0).windows.is_empty(),
            "one reading"
        );
        let d = h.observe(&facts(&[("ipv4", 503), ("ipv6", 9000)]), 10.0);
        assert_eq!(d.windows["ipv4"].get("table_fulls"), 3);
        assert!(!d.windows.contains_key("ipv6"), "its totals since boot are no rise");
        let d = h.observe(&facts(&[("ipv4", 503), ("ipv6", 9000)]), 80.0);
        assert_eq!(d.windows["ipv4"].get("table_fulls"), 0, "the rise left the window");
        assert_eq!(d.windows["ipv6"].get("table_fulls"), 0);
    }
}
