//! Source NAT rules over time: whether each rule's packet counter moved since
//! the previous reading (the rule carries traffic). A rule without a counter,
//! a first reading, or a counter that went back (the rule was replaced) has
//! no movement to tell: `packets_delta` is None, never 0.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::probe::snat::{SnatFacts, SnatRule};

/// One rule of the latest reading, with its counter's movement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleTraffic {
    #[serde(flatten)]
    pub rule: SnatRule,
    /// Packets since the previous reading; None: not known (see the module doc).
    pub packets_delta: Option<u64>,
    /// Seconds between the two readings (None with `packets_delta`).
    pub seconds: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnatDerived {
    pub rules: Vec<RuleTraffic>,
}

/// What identifies a rule between readings: where it is and what it does.
type Key = (String, String, String, String, u32, String, bool, Option<String>);

fn key(r: &SnatRule) -> Key {
    (
        r.backend.clone(),
        r.family.clone(),
        r.table.clone(),
        r.chain.clone(),
        r.position,
        r.action.clone(),
        r.random_fully,
        r.ports.clone(),
    )
}

#[derive(Debug, Default)]
pub struct SnatHistory {
    last: HashMap<Key, (u64, f64)>,
}

impl SnatHistory {
    pub fn observe(&mut self, f: &SnatFacts, mono: f64) -> SnatDerived {
        let mut next = HashMap::with_capacity(f.rules.len());
        let rules = f
            .rules
            .iter()
            .map(|r| {
                let k = key(r);
                let (packets_delta, seconds) = match (r.packets, self.last.get(&k)) {
                    (Some(now), Some((before, at))) if now >= *before => (Some(now - before), Some(mono - at)),
                    _ => (None, None),
                };
                if let Some(p) = r.packets {
                    next.insert(k, (p, mono));
                }
                RuleTraffic {
                    rule: r.clone(),
                    packets_delta,
                    seconds,
                }
            })
            .collect();
        self.last = next;
        SnatDerived { rules }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(packets: &[Option<u64>]) -> SnatFacts {
        SnatFacts {
            rules: packets
                .iter()
                .enumerate()
                .map(|(i, p)| SnatRule {
                    backend: "iptables-nft".into(),
                    family: "ipv4".into(),
                    table: "nat".into(),
                    chain: "POSTROUTING".into(),
                    position: i as u32 + 1,
                    action: "MASQUERADE".into(),
                    random_fully: false,
                    ports: None,
                    packets: *p,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn movement_needs_two_readings_and_a_counter() {
        let mut h = SnatHistory::default();
        let d = h.observe(&facts(&[Some(10), None, Some(5)]), 0.0);
        assert!(
            d.rules.iter().all(|r| r.packets_delta.is_none()),
            "a first reading tells no movement"
        );
        let d = h.observe(&facts(&[Some(15), None, Some(5)]), 30.0);
        let deltas: Vec<_> = d.rules.iter().map(|r| r.packets_delta).collect();
        assert_eq!(deltas, [Some(5), None, Some(0)]);
        assert_eq!(d.rules[0].seconds, Some(30.0));
        // A counter that went back (rule replaced): unknown, then counted from there.
        let d = h.observe(&facts(&[Some(2), None, Some(5)]), 60.0);
        assert_eq!(d.rules[0].packets_delta, None);
        let d = h.observe(&facts(&[Some(3), None, Some(5)]), 90.0);
        assert_eq!(d.rules[0].packets_delta, Some(1));
    }
}
