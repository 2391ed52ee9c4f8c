//! Service ports and endpoints from kube-proxy's nftables mode: the table
//! `kube-proxy` of family `ip` and `ip6` (kubernetes pkg/proxy/nftables).
//!
//! - `map service-ips { type ADDR . inet_proto . inet_service : verdict }`:
//!   each element is a service port (ClusterIP, external IP or load-balancer
//!   IP) and the chain it goes to (`service-*`, or `external-*` which goes on
//!   to `service-*`);
//! - `map service-nodeports { type inet_proto . inet_service : verdict }`: the NodePorts;
//! - `map no-endpoint-services` / `no-endpoint-nodeports`: the ports kube-proxy
//!   rejects or drops, i.e. with no endpoints at all;
//! - with `internalTrafficPolicy: Local` a ClusterIP goes to the `local-*`
//!   chain (the local endpoints) instead; with `externalTrafficPolicy: Local`
//!   an `external-*` chain goes to `local-*` for traffic from outside and to
//!   `service-*` for pod and host traffic ("short-circuit"), so both count;
//! - a `service-*` (or `local-*`) chain picks an endpoint with `numgen random mod N vmap { 0 :
//!   goto endpoint-A, ... }` (an anonymous map) and, with session affinity,
//!   `... @affinity-X goto endpoint-X`;
//! - an `endpoint-*` chain ends in `meta l4proto tcp dnat to ADDR:PORT` (the
//!   native `nat` expression).
//!
//! Keys of a concatenation pad each field to 4 bytes: an IPv4 service-ips key
//! is `addr(4) . proto(1)+3 . port(2, big endian)+2`.

use super::{chain_id, Graph, ServicePort, ServiceTable};
use crate::netlink::nft::{Chain, Element, Family, Rule, Set};
use crate::netlink::nft_count::Tally;
use crate::netlink::nft_expr::rule_facts;
use crate::netlink::NlError;

pub const TABLE: &str = "kube-proxy";

/// Chains on the way from a service port to its endpoints
/// (pkg/proxy/nftables: `servicePortPolicyClusterChainNamePrefix`,
/// `servicePortPolicyLocalChainNamePrefix`, `serviceExternalChainNamePrefix`,
/// `servicePortEndpointChainNamePrefix`).
const PATH_PREFIXES: &[&str] = &["service-", "local-", "external-", "endpoint-"];

/// Chains a path jumps to that only mark packets.
const SIDE_CHAINS: &[&str] = &["mark-for-masquerade"];

/// Reads kube-proxy's nftables table of one family (one per attempt).
#[derive(Debug)]
pub struct NftEndpoints {
    family: Family,
    graph: Graph,
    /// (map, chain) for each map a chain looks verdicts up in (resolved once
    /// the maps are read), as [`chain_id`]s.
    lookups: Vec<(u64, u64)>,
    /// (map, chain) for the chain each map element goes to.
    targets: Vec<(u64, u64)>,
    /// (map, what) for a map element that goes somewhere not on a path.
    bad_targets: Vec<(u64, String)>,
    /// Elements of the service-port maps whose key could not be read: (map, key length) → count.
    unkeyed: std::collections::BTreeMap<(String, usize), u64>,
}

fn on_path(chain: &str) -> bool {
    PATH_PREFIXES.iter().any(|p| chain.starts_with(p))
}

fn malformed(set: &str, key: &[u8]) -> NlError {
    NlError::Malformed(format!(
        "an element of {TABLE} map {set} with a key of {} bytes",
        key.len()
    ))
}

impl NftEndpoints {
    pub fn new(family: Family) -> Self {
        NftEndpoints {
            family,
            graph: Graph::default(),
            lookups: Vec::new(),
            targets: Vec::new(),
            bad_targets: Vec::new(),
            unkeyed: Default::default(),
        }
    }

    fn v6(&self) -> bool {
        self.family == Family::Ip6
    }

    /// `ADDR . inet_proto . inet_service`.
    pub(crate) fn address_key(&self, set: &str, key: &[u8]) -> Result<ServicePort, NlError> {
        let n = self.family.addr_len();
        match (self.family.addr(key), key.get(n), key.get(n + 4..n + 6)) {
            (Some(address), Some(&protocol), Some(&[hi, lo])) => Ok(ServicePort {
                address,
                port: u16::from_be_bytes([hi, lo]),
                protocol,
            }),
            _ => Err(malformed(set, key)),
        }
    }

    /// `inet_proto . inet_service`.
    pub(crate) fn port_key(&self, set: &str, key: &[u8]) -> Result<ServicePort, NlError> {
        match key {
            [protocol, _, _, _, hi, lo, ..] => Ok(ServicePort::node_port(
                self.v6(),
                *protocol,
                u16::from_be_bytes([*hi, *lo]),
            )),
            _ => Err(malformed(set, key)),
        }
    }

    pub fn finish(mut self) -> ServiceTable {
        self.targets.sort_unstable();
        self.bad_targets.sort_by_key(|(m, _)| *m);
        for (set, chain) in std::mem::take(&mut self.lookups) {
            for (_, to) in super::with_key(&self.targets, set) {
                self.graph.edge_ids(chain, *to);
            }
            if let Some((_, why)) = super::with_key(&self.bad_targets, set).first() {
                self.graph.unknown_id(chain, why.clone());
            }
        }
        let mut table = self.graph.finish("nftables");
        for ((set, len), n) in self.unkeyed {
            let reason = format!(
                "{n} elements of map {set} with a key of {len} bytes, a map type the decoder does not know: their service ports are unknown"
            );
            table.unkeyed.push((
                super::Undecoded {
                    source: "nftables",
                    reason,
                },
                n,
            ));
        }
        table
    }

    /// A service-port map's key could not be read: counted, never guessed.
    fn keyed(&mut self, set: &str, key: &[u8], svc: Result<ServicePort, NlError>) -> Option<ServicePort> {
        if svc.is_err() {
            *self.unkeyed.entry((set.to_string(), key.len())).or_default() += 1;
        }
        svc.ok()
    }

    /// A service port of a named map goes to `chain` (None: a verdict that is no goto/jump).
    fn entry(&mut self, set: &str, svc: ServicePort, chain: Option<&str>) {
        match chain {
            Some(c) if on_path(c) => self.graph.entry(svc, c),
            Some(c) => self.graph.undecoded(
                svc,
                format!("{set} sends it to chain {c}, which kube-proxy's nftables layout does not have"),
            ),
            None => self
                .graph
                .undecoded(svc, format!("{set} gives it a verdict other than goto or jump")),
        }
    }
}

impl Tally for NftEndpoints {
    fn wants(&self, table: &str) -> bool {
        table == TABLE
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if !on_path(r.chain) {
            return Ok(());
        }
        let f = rule_facts(self.family, r)?;
        for j in &f.jumps {
            if on_path(j) {
                // Only external-*'s conditions choose endpoints by source (the
                // eTP=Local short-circuits).
                match f.source {
                    Some(g) if r.chain.starts_with("external-") => self.graph.guarded_edge(r.chain, j, g),
                    _ => self.graph.edge(r.chain, j),
                }
            } else if !SIDE_CHAINS.contains(&j.as_str()) {
                self.graph.unknown(
                    r.chain,
                    format!(
                        "{} jumps to chain {j}, which kube-proxy's nftables layout does not have",
                        r.chain
                    ),
                );
            }
        }
        let chain = chain_id(r.chain);
        for set in f.lookups {
            self.lookups.push((chain_id(&set), chain));
        }
        if let Some(d) = f.dnat {
            self.graph.dnat(r.chain, d);
        }
        Ok(())
    }

    /// Every verdict map: the named entry points and the anonymous `numgen` maps.
    fn set(&mut self, set: &Set<'_>) -> bool {
        set.is_map()
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}

    fn element_detail(&self) -> bool {
        true
    }

    fn element(&mut self, set: &str, e: Element<'_>) -> Result<(), NlError> {
        match set {
            "service-ips" => {
                let svc = self.address_key(set, e.key);
                if let Some(svc) = self.keyed(set, e.key, svc) {
                    self.entry(set, svc, e.chain);
                }
            }
            "service-nodeports" => {
                let svc = self.port_key(set, e.key);
                if let Some(svc) = self.keyed(set, e.key, svc) {
                    self.entry(set, svc, e.chain);
                }
            }
            "no-endpoint-services" => {
                let svc = self.address_key(set, e.key);
                if let Some(svc) = self.keyed(set, e.key, svc) {
                    self.graph.no_endpoints(svc);
                }
            }
            "no-endpoint-nodeports" => {
                let svc = self.port_key(set, e.key);
                if let Some(svc) = self.keyed(set, e.key, svc) {
                    self.graph.no_endpoints(svc);
                }
            }
            _ => match e.chain {
                Some(c) if on_path(c) => self.targets.push((chain_id(set), chain_id(c))),
                Some(c) => self.bad_targets.push((
                    chain_id(set),
                    format!("map {set} goes to chain {c}, which kube-proxy's nftables layout does not have"),
                )),
                None => {}
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nft::{msg_type, NFT_MSG_NEWSETELEM};

    fn key4(addr: [u8; 4], proto: u8, port: u16) -> Vec<u8> {
        let mut k = addr.to_vec();
        k.extend([proto, 0, 0, 0]);
        k.extend(port.to_be_bytes());
        k.extend([0, 0]);
        k
    }

    #[test]
    fn maps_and_chains_lead_to_endpoints() {
        let mut t = NftEndpoints::new(Family::Ip);
        let dns = key4([10, 96, 0, 10], 17, 53);
        let empty = key4([10, 97, 0, 1], 6, 80);
        let mut put = |set: &str, key: &[u8], chain: Option<&str>| t.element(set, Element { key, chain }).unwrap();
        put("service-ips", &dns, Some("service-AAA-ns/dns/udp/dns"));
        put(
            "service-nodeports",
            &[17, 0, 0, 0, 0x75, 0x35, 0, 0],
            Some("external-AAA"),
        );
        put("no-endpoint-services", &empty, Some("reject-chain"));
        put("__map0", &[0, 0, 0, 0], Some("endpoint-B-x"));
        put("__map0", &[1, 0, 0, 0], Some("endpoint-C-x"));
        t.lookups
            .push((chain_id("__map0"), chain_id("service-AAA-ns/dns/udp/dns")));
        t.graph.edge("external-AAA", "service-AAA-ns/dns/udp/dns");
        t.graph
            .dnat("endpoint-B-x", ("10.244.0.2".parse().unwrap(), Some(5353)));
        t.graph
            .dnat("endpoint-C-x", ("10.244.0.3".parse().unwrap(), Some(5353)));
        let table = t.finish();
        let svc = ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        };
        assert_eq!(table.services[&svc].len(), 2);
        assert_eq!(
            table.services[&ServicePort::node_port(false, 17, 30005)],
            table.services[&svc]
        );
        let none = ServicePort {
            address: "10.97.0.1".parse().unwrap(),
            port: 80,
            protocol: 6,
        };
        assert!(table.services[&none].is_empty());
        assert_eq!(table.services.len(), 3);
        assert!(table.undecoded.is_empty());
    }

    fn svc4(addr: [u8; 4], protocol: u8, port: u16) -> ServicePort {
        ServicePort {
            address: std::net::IpAddr::from(addr),
            port,
            protocol,
        }
    }

    /// internalTrafficPolicy: Local: service-ips goes straight to `local-*`
    /// (pkg/proxy/nftables/proxier.go, `servicePortPolicyLocalChainNamePrefix`).
    #[test]
    fn local_chains_are_followed() {
        let mut t = NftEndpoints::new(Family::Ip);
        let dns = key4([10, 96, 0, 10], 17, 53);
        t.element(
            "service-ips",
            Element {
                key: &dns,
                chain: Some("local-AAA-ns/dns/udp/dns"),
            },
        )
        .unwrap();
        t.element(
            "__map1",
            Element {
                key: &[0, 0, 0, 0],
                chain: Some("endpoint-B-x"),
            },
        )
        .unwrap();
        t.lookups
            .push((chain_id("__map1"), chain_id("local-AAA-ns/dns/udp/dns")));
        t.graph.dnat("endpoint-B-x", ("10.244.0.2".parse().unwrap(), Some(53)));
        let table = t.finish();
        assert_eq!(table.services[&svc4([10, 96, 0, 10], 17, 53)].len(), 1);
        assert!(table.undecoded.is_empty());
    }

    /// Never guess: a chain prefix, a map target or a verdict the decoder does
    /// not know makes the port undecoded, not "no endpoints".
    #[test]
    fn unknown_layouts_are_undecoded() {
        let mut t = NftEndpoints::new(Family::Ip);
        let (a, b, c, d) = (
            key4([10, 96, 0, 1], 6, 80),
            key4([10, 96, 0, 2], 6, 80),
            key4([10, 96, 0, 3], 6, 80),
            key4([10, 96, 0, 4], 6, 80),
        );
        let mut put = |set: &str, key: &[u8], chain: Option<&str>| t.element(set, Element { key, chain }).unwrap();
        put("service-ips", &a, Some("weird-AAA-ns/a/tcp/p"));
        put("service-ips", &b, None);
        put("service-ips", &c, Some("service-CCC-ns/c/tcp/p"));
        put("service-ips", &d, Some("service-DDD-ns/d/tcp/p"));
        put("__map2", &[0, 0, 0, 0], Some("weird-endpoint-x"));
        t.lookups.push((chain_id("__map2"), chain_id("service-CCC-ns/c/tcp/p")));
        // service-DDD has rules, but none that leads to a DNAT.
        t.graph.edge("service-DDD-ns/d/tcp/p", "endpoint-nowhere");
        let table = t.finish();
        assert!(table.services.is_empty(), "{table:?}");
        let why = |k: [u8; 4]| table.undecoded[&svc4(k, 6, 80)].reason.clone();
        assert!(
            why([10, 96, 0, 1]).contains("chain weird-AAA-ns/a/tcp/p"),
            "{}",
            why([10, 96, 0, 1])
        );
        assert!(why([10, 96, 0, 2]).contains("verdict other than goto"));
        assert!(why([10, 96, 0, 3]).contains("map __map2 goes to chain weird-endpoint-x"));
        assert!(why([10, 96, 0, 4]).contains("reach no DNAT"));
        assert_eq!(table.undecoded_by_source()["nftables"], 4);
    }

    #[test]
    fn keys_of_an_unknown_map_type_are_undecoded() {
        let mut t = NftEndpoints::new(Family::Ip6);
        let short = key4([10, 96, 0, 10], 17, 53);
        for _ in 0..2 {
            let e = Element {
                key: &short,
                chain: Some("service-x"),
            };
            t.element("service-ips", e).unwrap();
        }
        let e = Element {
            key: &[6, 0],
            chain: None,
        };
        t.element("service-nodeports", e).unwrap();
        let table = t.finish();
        assert!(table.services.is_empty());
        assert_eq!(table.undecoded_by_source()["nftables"], 3);
        let (u, n) = &table.unkeyed[0];
        assert_eq!(*n, 2);
        assert!(
            u.reason.contains("map service-ips with a key of 12 bytes"),
            "{}",
            u.reason
        );
        // The decoder is only reached through a real element message.
        assert!(crate::netlink::nft::each_element(msg_type(NFT_MSG_NEWSETELEM), &[2, 0], |_| Ok(())).is_err());
    }
}
