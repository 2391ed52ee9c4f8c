//! How long each IPVS real server has stood at weight 0. kube-proxy sets a removed endpoint's
//! TCP real server to weight 0 and deletes it once its ActiveConn + InActConn is 0 (UDP and
//! SCTP ones it deletes at once: kubernetes pkg/proxy/ipvs/graceful_termination.go,
//! `IsRsGracefulTerminationNeeded`). IPVS keeps no time of a weight change, so the time counts
//! from the first reading that showed the real server at 0: a lower bound, short of the truth by
//! at most one interval of the ipvs probe. A real server is told apart by its virtual server
//! (protocol, address, port or firewall mark) and its own address and port; it is forgotten as
//! soon as a reading shows it at another weight or no longer shows it.
//!
//! Bounded: the reading lists at most [`WEIGHT_ZERO_CAP`] weight-0 real servers (the counts per
//! protocol cover all), and only those are remembered, so at most that many.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::probe::ipvs::{IpvsFacts, ServiceKey, WeightZeroRealServer, WEIGHT_ZERO_CAP};

/// One weight-0 real server's time at weight 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightZeroAge {
    /// Its virtual server (no unit).
    pub service: ServiceKey,
    /// Its address as text (no unit).
    pub address: String,
    /// Its port.
    pub port: u16,
    /// Seconds since a reading first showed it at weight 0 (a lower bound).
    pub seconds: f64,
    /// Unix time of that first reading, in seconds.
    pub since_timestamp_seconds: f64,
}

/// The weight-0 real servers of the latest reading, with their ages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightZeroAges {
    /// One per real server the reading lists at weight 0, in its order.
    pub real_servers: Vec<WeightZeroAge>,
    /// The longest of their ages, in seconds; 0 when none is at weight 0.
    pub max_seconds: f64,
}

impl WeightZeroAges {
    /// Each remembered real server's age by (virtual server, address, port): one lookup per
    /// real server of a reading, not a scan (up to [`WEIGHT_ZERO_CAP`] of each).
    pub fn by_real_server(&self) -> HashMap<(&ServiceKey, &str, u16), &WeightZeroAge> {
        self.real_servers
            .iter()
            .map(|a| ((&a.service, a.address.as_str(), a.port), a))
            .collect()
    }

    /// The age of `rs`, if it is remembered (a scan: for a few lookups).
    pub fn of(&self, rs: &WeightZeroRealServer) -> Option<&WeightZeroAge> {
        self.real_servers
            .iter()
            .find(|a| a.port == rs.port && a.address == rs.address && a.service == rs.service)
    }
}

type Key = (ServiceKey, String, u16);

/// When each real server now at weight 0 was first seen so (monotonic and wall clock).
#[derive(Debug, Default)]
pub struct WeightZeroHistory {
    first_seen: HashMap<Key, (f64, f64)>,
}

impl WeightZeroHistory {
    pub fn observe(&mut self, f: &IpvsFacts, now: f64, mono: f64) -> WeightZeroAges {
        let mut seen = HashMap::with_capacity(f.weight_zero.len().min(WEIGHT_ZERO_CAP));
        let mut out = WeightZeroAges::default();
        for rs in f.weight_zero.iter().take(WEIGHT_ZERO_CAP) {
            let key = (rs.service.clone(), rs.address.clone(), rs.port);
            let (first_mono, first_wall) = self
                .first_seen
                .get(&key)
                .or_else(|| seen.get(&key))
                .copied()
                .unwrap_or((mono, now));
            let seconds = (mono - first_mono).max(0.0);
            out.max_seconds = out.max_seconds.max(seconds);
            out.real_servers.push(WeightZeroAge {
                service: rs.service.clone(),
                address: rs.address.clone(),
                port: rs.port,
                seconds,
                since_timestamp_seconds: first_wall,
            });
            seen.insert(key, (first_mono, first_wall));
        }
        // What the reading no longer shows at weight 0 (back in service, or deleted) is forgotten.
        self.first_seen = seen;
        out
    }

    /// The probe lost its reading (absent, or failing past the hold): nothing is known to stay at 0.
    pub fn missed(&mut self) {
        self.first_seen.clear();
    }

    /// Real servers remembered (at most [`WEIGHT_ZERO_CAP`]).
    pub fn remembered(&self) -> usize {
        self.first_seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(address: &str, port: u16) -> ServiceKey {
        ServiceKey {
            protocol: "TCP".into(),
            address: address.into(),
            port,
            fwmark: None,
        }
    }

    fn at_zero(list: &[(&str, &str, u64)]) -> IpvsFacts {
        IpvsFacts {
            weight_zero: list
                .iter()
                .map(|(vip, rs, active)| WeightZeroRealServer {
                    service: tcp(vip, 80),
                    address: rs.to_string(),
                    port: 8080,
                    active_connections: *active,
                    inactive_connections: 0,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn age(a: &WeightZeroAges, rs: &str) -> Option<(f64, f64)> {
        a.real_servers
            .iter()
            .find(|x| x.address == rs)
            .map(|x| (x.seconds, x.since_timestamp_seconds))
    }

    #[test]
    fn ages_count_from_the_first_reading_at_zero_and_clear_when_it_leaves() {
        let mut h = WeightZeroHistory::default();
        let a = h.observe(&at_zero(&[]), 1000.0, 0.0);
        assert_eq!(a, WeightZeroAges::default());
        let a = h.observe(&at_zero(&[("10.96.0.1", "10.244.0.5", 3)]), 1030.0, 30.0);
        assert_eq!(age(&a, "10.244.0.5"), Some((0.0, 1030.0)), "first seen now");
        // A second one appears; the first keeps its age (a wall clock step moves neither).
        let a = h.observe(
            &at_zero(&[("10.96.0.1", "10.244.0.5", 3), ("10.96.0.1", "10.244.0.6", 0)]),
            5000.0,
            1830.0,
        );
        assert_eq!(age(&a, "10.244.0.5"), Some((1800.0, 1030.0)));
        assert_eq!(age(&a, "10.244.0.6"), Some((0.0, 5000.0)));
        assert_eq!(a.max_seconds, 1800.0);
        // 10.244.0.5 back at weight 1 (or deleted): forgotten; at 0 again, it starts afresh.
        let a = h.observe(&at_zero(&[("10.96.0.1", "10.244.0.6", 0)]), 5060.0, 1890.0);
        assert_eq!(age(&a, "10.244.0.5"), None);
        assert_eq!((age(&a, "10.244.0.6"), a.max_seconds), (Some((60.0, 5000.0)), 60.0));
        assert_eq!(h.remembered(), 1);
        let a = h.observe(
            &at_zero(&[("10.96.0.1", "10.244.0.5", 3), ("10.96.0.1", "10.244.0.6", 0)]),
            5090.0,
            1920.0,
        );
        assert_eq!(age(&a, "10.244.0.5"), Some((0.0, 5090.0)));
        // The same backend under another virtual server is another real server.
        let mut f = at_zero(&[("10.96.0.1", "10.244.0.6", 0)]);
        f.weight_zero[0].service = tcp("10.96.0.2", 80);
        let a = h.observe(&f, 5100.0, 1930.0);
        assert_eq!(age(&a, "10.244.0.6"), Some((0.0, 5100.0)));
        // The probe lost its reading: the next one starts every age afresh.
        h.missed();
        assert_eq!(h.remembered(), 0);
        let a = h.observe(&f, 5200.0, 2030.0);
        assert_eq!(age(&a, "10.244.0.6"), Some((0.0, 5200.0)));
    }

    #[test]
    fn memory_is_bounded_by_the_readings_cap() {
        let mut h = WeightZeroHistory::default();
        let mut f = IpvsFacts::default();
        for i in 0..(WEIGHT_ZERO_CAP + 10) as u32 {
            f.weight_zero.push(WeightZeroRealServer {
                service: tcp("10.96.0.1", 80),
                address: std::net::Ipv4Addr::from(0x0af4_0000 + i).to_string(),
                port: 80,
                ..Default::default()
            });
        }
        let a = h.observe(&f, 1.0, 1.0);
        assert_eq!(
            (a.real_servers.len(), h.remembered()),
            (WEIGHT_ZERO_CAP, WEIGHT_ZERO_CAP)
        );
        assert!(a.of(&f.weight_zero[0]).is_some());
        assert!(a.of(&f.weight_zero[WEIGHT_ZERO_CAP]).is_none());
        let by = a.by_real_server();
        fn key(r: &WeightZeroRealServer) -> (&ServiceKey, &str, u16) {
            (&r.service, r.address.as_str(), r.port)
        }
        assert_eq!(by.len(), WEIGHT_ZERO_CAP);
        assert!(by.contains_key(&key(&f.weight_zero[WEIGHT_ZERO_CAP - 1])));
        assert!(!by.contains_key(&key(&f.weight_zero[WEIGHT_ZERO_CAP])));
    }
}
