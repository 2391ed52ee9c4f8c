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
//! - a `service-*` chain picks an endpoint with `numgen random mod N vmap { 0 :
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

/// Chains on the way from a service port to its endpoints.
const PATH_PREFIXES: &[&str] = &["service-", "external-", "endpoint-"];

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
        }
    }

    fn v6(&self) -> bool {
        self.family == Family::Ip6
    }

    /// `ADDR . inet_proto . inet_service`.
    fn address_key(&self, set: &str, key: &[u8]) -> Result<ServicePort, NlError> {
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
    fn port_key(&self, set: &str, key: &[u8]) -> Result<ServicePort, NlError> {
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
        for (set, chain) in std::mem::take(&mut self.lookups) {
            for (_, to) in super::with_key(&self.targets, set) {
                self.graph.edge_ids(chain, *to);
            }
        }
        self.graph.finish()
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
        for j in f.jumps.iter().filter(|j| on_path(j)) {
            self.graph.edge(r.chain, j);
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
                let svc = self.address_key(set, e.key)?;
                if let Some(c) = e.chain {
                    self.graph.entry(svc, c);
                }
            }
            "service-nodeports" => {
                let svc = self.port_key(set, e.key)?;
                if let Some(c) = e.chain {
                    self.graph.entry(svc, c);
                }
            }
            "no-endpoint-services" => {
                let svc = self.address_key(set, e.key)?;
                self.graph.no_endpoints(svc);
            }
            "no-endpoint-nodeports" => {
                let svc = self.port_key(set, e.key)?;
                self.graph.no_endpoints(svc);
            }
            _ => {
                if let Some(c) = e.chain.filter(|c| on_path(c)) {
                    self.targets.push((chain_id(set), chain_id(c)));
                }
            }
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
        put("__map0", &[2, 0, 0, 0], Some("reject-chain"));
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
    }

    #[test]
    fn short_keys_are_an_error() {
        let mut t = NftEndpoints::new(Family::Ip6);
        let short = key4([10, 96, 0, 10], 17, 53);
        let e = Element {
            key: &short,
            chain: Some("service-x"),
        };
        let err = t.element("service-ips", e).unwrap_err().to_string();
        assert!(err.contains("service-ips") && err.contains("12 bytes"), "{err}");
        assert!(t
            .element(
                "service-nodeports",
                Element {
                    key: &[6, 0],
                    chain: None
                }
            )
            .is_err());
        // The decoder is only reached through a real element message.
        assert!(crate::netlink::nft::each_element(msg_type(NFT_MSG_NEWSETELEM), &[2, 0], |_| Ok(())).is_err());
    }
}
