//! Rule-set counts kept between probe runs, keyed by the nf_tables ruleset
//! generation, and the iptables-nft-save cross-check's schedule.
//!
//! Why here and not in the history stage: history sees a reading after the
//! probe made it, so it can derive from counts but cannot spare the work of
//! counting. The memory that spares it must be asked before the count, by the
//! probe, hence a small cache the probe context owns (one per agent, shared
//! by the iptables and nftables probes' runs). It stays honest because the key
//! is the kernel's own: a count is served only to a run that has just read the
//! **same** generation with `NFT_MSG_GETGEN` (every commit bumps it), and every
//! reading says when its counts were made and at which generation
//! ([`NetlinkCount`]). A run at another generation counts anew and replaces
//! the entry; nothing of another generation is ever served.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::netlink::nft::Family;

/// How a netlink-read count was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetlinkCount {
    /// The nf_tables ruleset generation every part of the count was made at.
    pub generation: u32,
    /// Unix time the count was made, in seconds (before this run when reused).
    pub counted_at_seconds: f64,
    /// Made by an earlier run at this same generation and reused: nothing changed since.
    pub reused: bool,
    /// Counts started before a consistent one (1 unless the ruleset changed meanwhile).
    pub attempts: u32,
    /// Netlink bytes received by the count, in bytes.
    pub bytes: u64,
    /// Wall time of the count itself (0 when reused), in seconds.
    pub count_seconds: f64,
}

/// The latest count of one family, at one generation.
#[derive(Debug)]
struct Entry<T> {
    how: NetlinkCount,
    value: T,
}

/// Counts per family, each valid for exactly one generation.
#[derive(Debug)]
pub struct CountCache<T> {
    entries: Mutex<HashMap<Family, Entry<T>>>,
}

impl<T> Default for CountCache<T> {
    fn default() -> Self {
        CountCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> CountCache<T> {
    /// The counts made at `generation`, marked reused; None when the entry is of
    /// another generation (or there is none).
    pub fn get(&self, family: Family, generation: u32) -> Option<(T, NetlinkCount)> {
        let entries = self.entries.lock().ok()?;
        let e = entries.get(&family)?;
        (e.how.generation == generation).then(|| {
            let how = NetlinkCount {
                reused: true,
                count_seconds: 0.0,
                ..e.how.clone()
            };
            (e.value.clone(), how)
        })
    }

    /// Keeps `value`, counted as `how` says, replacing the family's entry.
    pub fn put(&self, family: Family, value: T, how: NetlinkCount) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(family, Entry { how, value });
        }
    }
}

/// What the agent remembers for its rule-set probes.
#[derive(Debug, Default)]
pub struct Memory {
    /// iptables-nft's tables per family (the iptables probe).
    pub iptables: CountCache<crate::probe::iptables::SaveCounts>,
    /// kube-proxy's nftables table per family; None: no such table at that generation.
    pub nftables: CountCache<Option<crate::probe::nftables::NftTableCounts>>,
    /// The conntrack_stale probe's service table, by generation.
    pub stale: crate::probe::conntrack_stale::StaleMemory,
    /// When the iptables-nft-save cross-check last ran, and what it found.
    cross_check: Mutex<Option<(Instant, crate::probe::iptables::CrossCheck)>>,
}

impl Memory {
    /// Whether the cross-check is due: never with no interval, at once the
    /// first time (so `check` runs it once), then every `interval`.
    pub fn cross_check_due(&self, interval: Option<Duration>, now: Instant) -> bool {
        let Some(interval) = interval else {
            return false;
        };
        match self.cross_check.lock() {
            Ok(last) => last.as_ref().is_none_or(|(at, _)| now.duration_since(*at) >= interval),
            Err(_) => false,
        }
    }

    /// The latest cross-check, whatever run made it (it says when).
    pub fn last_cross_check(&self) -> Option<crate::probe::iptables::CrossCheck> {
        self.cross_check
            .lock()
            .ok()
            .and_then(|l| l.as_ref().map(|(_, c)| c.clone()))
    }

    pub fn record_cross_check(&self, at: Instant, check: crate::probe::iptables::CrossCheck) {
        if let Ok(mut l) = self.cross_check.lock() {
            *l = Some((at, check));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_only_at_the_same_generation() {
        let c: CountCache<u64> = CountCache::default();
        assert_eq!(c.get(Family::Ip, 7), None);
        let how = NetlinkCount {
            generation: 7,
            counted_at_seconds: 100.0,
            attempts: 1,
            count_seconds: 0.4,
            ..Default::default()
        };
        c.put(Family::Ip, 42, how);
        let (v, h) = c.get(Family::Ip, 7).unwrap();
        assert_eq!(
            (v, h.reused, h.counted_at_seconds, h.count_seconds),
            (42, true, 100.0, 0.0)
        );
        assert_eq!(c.get(Family::Ip, 8), None, "another generation is never served");
        assert_eq!(c.get(Family::Ip6, 7), None);
    }

    #[test]
    fn cross_check_schedule() {
        let m = Memory::default();
        let t0 = Instant::now();
        assert!(!m.cross_check_due(None, t0), "0 = never");
        let every = Some(Duration::from_secs(600));
        assert!(m.cross_check_due(every, t0), "the first run checks");
        m.record_cross_check(t0, Default::default());
        assert!(!m.cross_check_due(every, t0 + Duration::from_secs(599)));
        assert!(m.cross_check_due(every, t0 + Duration::from_secs(600)));
        assert!(m.last_cross_check().is_some());
    }
}
