//! kube-proxy's failed syncs over a window: its failure counters
//! (`…_iptables_restore_failures_total`, `…_iptables_partial_restore_failures_total`,
//! `…_nftables_sync_failures_total`) only grow while kube-proxy runs and start
//! again at 0 when it restarts; what an SRE needs is "are syncs failing now".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::window::CounterWindow;
use crate::probe::kube_proxy::KubeProxyFacts;

/// Failed syncs are counted over this long (seconds): kube-proxy retries a
/// failed sync within its `--iptables-min-sync-period` (1 s by default) and
/// resyncs every `--iptables-sync-period` (30 s), so five minutes hold many
/// attempts whatever the settings.
pub const SYNC_FAILURE_WINDOW_SECONDS: f64 = 300.0;
/// Readings kept, at most (one every second for the whole window and more).
const CAPACITY: usize = 512;
const KEY: &str = "sync_failures";

/// Failed syncs over the recent window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncFailures {
    /// Length of the window covered (oldest reading kept to newest), in seconds.
    pub seconds: f64,
    /// Failed syncs within it (a counter that went back, kube-proxy restarted,
    /// counts from 0).
    pub increase: u64,
    /// Failed syncs since kube-proxy started, as it reports them.
    pub total: u64,
}

#[derive(Debug)]
pub struct SyncFailureHistory {
    window: CounterWindow,
}

impl Default for SyncFailureHistory {
    fn default() -> Self {
        SyncFailureHistory {
            window: CounterWindow::new(SYNC_FAILURE_WINDOW_SECONDS, CAPACITY),
        }
    }
}

impl SyncFailureHistory {
    /// Takes one kube-proxy reading at `mono` (monotonic seconds). None while
    /// kube-proxy exports no failure counter (its version or mode has none) or
    /// before a second reading.
    pub fn observe(&mut self, facts: &KubeProxyFacts, mono: f64) -> Option<SyncFailures> {
        let total = facts.metrics.as_ref()?.sync_failures_total?;
        // A counter of whole syncs: anything else is kube-proxy's to explain, never a negative.
        let total = if total.is_finite() && total >= 0.0 {
            total as u64
        } else {
            return None;
        };
        let d = self.window.push(mono, &BTreeMap::from([(KEY.to_string(), total)]))?;
        Some(SyncFailures {
            seconds: d.seconds,
            increase: d.get(KEY),
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::kube_proxy::metrics::KubeProxyMetrics;

    fn facts(failures: Option<f64>) -> KubeProxyFacts {
        KubeProxyFacts {
            metrics: Some(KubeProxyMetrics {
                sync_failures_total: failures,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn failures_within_the_window_a_restart_and_a_version_without_the_counter() {
        let mut h = SyncFailureHistory::default();
        assert_eq!(h.observe(&facts(Some(3.0)), 0.0), None, "one reading");
        let f = h.observe(&facts(Some(7.0)), 15.0).unwrap();
        assert_eq!((f.increase, f.total, f.seconds), (4, 7, 15.0));
        // kube-proxy restarted: its counter starts again; 2 failures since, never a negative.
        let f = h.observe(&facts(Some(2.0)), 30.0).unwrap();
        assert_eq!(f.increase, 6);
        // Older than the window: gone.
        for t in 1..=30 {
            h.observe(&facts(Some(2.0)), 30.0 + t as f64 * 15.0);
        }
        assert_eq!(h.observe(&facts(Some(2.0)), 500.0).unwrap().increase, 0);
        assert_eq!(h.observe(&facts(None), 515.0), None);
        assert_eq!(h.observe(&facts(Some(f64::NAN)), 530.0), None);
    }
}
