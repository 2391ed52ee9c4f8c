//! What the iptables probe keeps between its runs, only to make the next one cheaper (its row's
//! `memory` in the probe table): its iptables-nft counts and the nat chains holding kube-proxy's
//! older eTP=Local drop, both by ruleset generation; the tables decoded from its legacy saves, by
//! the text's hash; and the iptables-nft-save cross-check's last result, reused until the next
//! is due.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::delta::CountDelta;
use super::{CrossCheck, SaveCounts};
use crate::netlink::nft::Family;
use crate::probe::counted::CountCache;
use crate::probe::service_endpoints::iptables::LegacyTables;

#[derive(Debug, Default)]
pub struct Memory {
    /// iptables-nft's tables per family.
    pub counts: CountCache<SaveCounts>,
    /// The nat chains holding kube-proxy's older eTP=Local drop, per family, learned by the count.
    pub nat_drop_chains: CountCache<Vec<String>>,
    /// The tables decoded from the legacy saves, by the text's hash.
    pub legacy_tables: LegacyTables,
    /// When the iptables-nft-save cross-check last ran, and what it found.
    cross_check: Mutex<Option<(Instant, CrossCheck)>>,
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
    pub fn last_cross_check(&self) -> Option<CrossCheck> {
        self.cross_check
            .lock()
            .ok()
            .and_then(|l| l.as_ref().map(|(_, c)| c.clone()))
    }

    pub fn record_cross_check(&self, at: Instant, check: CrossCheck) {
        if let Ok(mut l) = self.cross_check.lock() {
            *l = Some((at, check));
        }
    }

    /// Carries one family's counts, with the nat drop chains they were learned with, from
    /// generation `before` to `generation` through that commit's notifications (`delta`), or
    /// neither: whether both were carried (`crate::probe::Memory::advance`).
    pub fn advance(&self, family: Family, before: u32, generation: u32, at_seconds: f64, delta: &CountDelta) -> bool {
        self.nat_drop_chains
            .advance(family, before, generation, at_seconds, |c| Some(c.clone()))
            && self.counts.advance(family, before, generation, at_seconds, |c| {
                super::node::advance(c, delta)
            })
    }
}
