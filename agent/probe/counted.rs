//! Rule-set counts kept between probe runs, keyed by the nf_tables ruleset
//! generation (the cache itself; the probe context owns one per probe, see
//! `Memory` in probe/mod.rs).
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
//! the entry; nothing of another generation is ever served. The nftables
//! watch moves an entry on by one generation ([`CountCache::advance`]) when it
//! read every notification of the commit that made it: the counts of that
//! generation, said carried (`notified`), not counted by a dump.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::netlink::nft::Family;
use crate::netlink::{nft_count, NlError, NETLINK_NETFILTER};

/// How a netlink-read count was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetlinkCount {
    /// The nf_tables ruleset generation every part of the count was made at.
    pub generation: u32,
    /// Unix time the count was made, in seconds (before this run when reused).
    #[serde(rename = "counted_timestamp_seconds", alias = "counted_at_seconds")]
    pub counted_at_seconds: f64,
    /// Made by an earlier run at this same generation and reused: nothing changed since.
    pub reused: bool,
    /// Counts started before a consistent one (1 unless the ruleset changed meanwhile).
    pub attempts: u32,
    /// Netlink bytes received by the count, in bytes.
    pub bytes: u64,
    /// Wall time of the count itself (0 when reused), in seconds.
    pub count_seconds: f64,
    /// Not counted at this generation but carried from the count of an earlier one by the
    /// notifications of every commit since (the nftables watch saw each change: no dump).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notified: bool,
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

    /// Replaces the family's entry made at generation `from` by `f` of it, as of generation `to`
    /// at `at_seconds` ([`NetlinkCount::notified`]): the commit that made `to` changed what `f`
    /// applies. False, and the entry left as it is, when it is of another generation (a count
    /// missed, or made meanwhile) or when `f` cannot carry it.
    pub fn advance(
        &self,
        family: Family,
        from: u32,
        to: u32,
        at_seconds: f64,
        f: impl FnOnce(&T) -> Option<T>,
    ) -> bool {
        let Ok(mut entries) = self.entries.lock() else {
            return false;
        };
        let Some(e) = entries.get_mut(&family).filter(|e| e.how.generation == from) else {
            return false;
        };
        let Some(value) = f(&e.value) else {
            return false;
        };
        e.value = value;
        e.how = NetlinkCount {
            generation: to,
            counted_at_seconds: at_seconds,
            notified: true,
            ..Default::default()
        };
        true
    }

    /// Keeps `value`, counted as `how` says, replacing the family's entry.
    pub fn put(&self, family: Family, value: T, how: NetlinkCount) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(family, Entry { how, value });
        }
    }
}

/// What a fresh count returns: the value, and the generation, attempts and
/// bytes of the count.
pub type Fresh<T> = (T, u32, u32, u64);

/// Each family's counts as of now, on the blocking pool: one `NFT_MSG_GETGEN`
/// for all families (the generation is the namespace's), then per family the
/// cached counts when they were made at that generation, else `count` (and
/// the result is kept). An error names the family it happened in.
pub fn counts_now<T: Clone>(
    host: &crate::host::Host,
    cache: &CountCache<T>,
    families: &[Family],
    deadline: std::time::Instant,
    count: impl Fn(Family) -> Result<Fresh<T>, NlError>,
) -> Result<Vec<(T, NetlinkCount)>, (Family, NlError)> {
    let first = families.first().copied().unwrap_or(Family::Ip);
    let gen = host
        .netlink(NETLINK_NETFILTER)
        .and_then(|s| nft_count::generation(s, deadline))
        .map_err(|e| (first, e))?;
    let mut out = Vec::with_capacity(families.len());
    for &family in families {
        if let Some(hit) = cache.get(family, gen) {
            out.push(hit);
            continue;
        }
        let started = std::time::Instant::now();
        let (value, generation, attempts, bytes) = count(family).map_err(|e| (family, e))?;
        let how = NetlinkCount {
            generation,
            counted_at_seconds: crate::timefmt::unix_seconds(std::time::SystemTime::now()),
            reused: false,
            attempts,
            bytes,
            count_seconds: started.elapsed().as_secs_f64(),
            notified: false,
        };
        cache.put(family, value.clone(), how.clone());
        out.push((value, how));
    }
    Ok(out)
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

    /// The watcher carries a count from the generation just before only: it is served at the
    /// new one, said carried; from any other generation, or when it cannot, the entry stays.
    #[test]
    fn carried_only_from_the_generation_before() {
        let c: CountCache<u64> = CountCache::default();
        let how = NetlinkCount {
            generation: 7,
            attempts: 1,
            ..Default::default()
        };
        c.put(Family::Ip, 42, how);
        assert!(!c.advance(Family::Ip, 6, 7, 1.0, |v| Some(v + 1)), "not of 6");
        assert!(!c.advance(Family::Ip, 7, 8, 1.0, |_| None), "cannot carry");
        assert_eq!(c.get(Family::Ip, 8), None);
        assert!(c.advance(Family::Ip, 7, 8, 101.5, |v| Some(v + 1)));
        let (v, h) = c.get(Family::Ip, 8).unwrap();
        assert_eq!(
            (v, h.notified, h.reused, h.counted_at_seconds, h.attempts),
            (43, true, true, 101.5, 0)
        );
        assert_eq!(c.get(Family::Ip, 7), None, "the old generation is no longer served");
        assert!(!c.advance(Family::Ip6, 7, 8, 1.0, |v| Some(*v)), "no entry");
    }
}
