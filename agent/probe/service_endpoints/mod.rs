//! Each service port's current endpoints, read from the data plane kube-proxy
//! programs, whichever mode it is in. One file per source:
//!
//! - [`iptables`]: kube-proxy's iptables-nft chains (`KUBE-SERVICES` →
//!   `KUBE-SVC-*` → `KUBE-SEP-*` and its `DNAT`), over netlink;
//! - [`nftables`]: kube-proxy's `kube-proxy` tables (the `service-ips` and
//!   `service-nodeports` verdict maps → `service-*` chains → the anonymous
//!   `numgen` maps → `endpoint-*` chains and their `dnat`), over netlink;
//! - [`ipvs`]: virtual servers and their real servers (`/proc/net/ip_vs`).
//!
//! The two nf_tables sources are read in one generation-checked walk per
//! family ([`crate::netlink::nft_count::count`]); each builds a [`Graph`] of
//! entry points (a service port and the chain it goes to), jumps between
//! chains, and DNATs, and [`Graph::finish`] follows every entry to the DNATs
//! it reaches.
//!
//! A service port is an address, a port and an L4 protocol. A NodePort has no
//! address of its own: it is keyed with the family's unspecified address
//! ([`ServicePort::node_port`]) and matches traffic to any address of the node.
//! A service port listed with no endpoints is one kube-proxy rejects or drops
//! (the scale-to-zero case, kubernetes#139629): every entry NATed for it is stale.
//!
//! Every path is a path: `externalTrafficPolicy: Local` sends outside traffic
//! to an external chain's local endpoints and pod or host traffic (the
//! short-circuits) to all of them; a port's endpoints are the union of what
//! every path reaches (cluster, external, local chains alike: `KUBE-SVC-*`,
//! `KUBE-EXT-*`, `KUBE-SVL-*`; `service-*`, `external-*`, `local-*`), never
//! the local endpoints alone, as kube-proxy's reconciler judges a flow
//! (`pkg/proxy/conntrack/cleanup.go`: "Changes to the service should not
//! affect existing flows, so we do not take traffic policies, topology, or
//! terminating status of the service into account").
//!
//! Unknown is not empty: a service port whose path leads to a chain, map,
//! verdict or expression the decoder does not understand (a chain prefix
//! kube-proxy's layout does not have, a goto to it from a map, a walk that
//! reaches neither a DNAT nor kube-proxy's "no endpoints" verdict) is
//! *undecoded* ([`ServiceTable::undecoded`], with the reason): it is never
//! compared with conntrack, and a port one source decodes and another does
//! not is undecoded.

pub mod both;
pub mod iptables;
pub mod ipvs;
pub mod names;
pub mod nftables;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::netlink::nft_expr::SourceGuard;
pub use both::BothLayouts;

/// A service port: the address clients send to, its port and L4 protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServicePort {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: u8,
}

impl ServicePort {
    /// The key of a NodePort of one family: the unspecified address.
    pub fn node_port(v6: bool, protocol: u8, port: u16) -> ServicePort {
        let address = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        ServicePort {
            address,
            port,
            protocol,
        }
    }

    pub fn is_node_port(&self) -> bool {
        self.address.is_unspecified()
    }
}

/// An endpoint: address, and port when the DNAT gives one.
pub type Endpoint = (IpAddr, Option<u16>);

/// Why a service port could not be decoded, and which source said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecoded {
    /// `iptables-nft`, `iptables-legacy`, `nftables` or `ipvs`.
    pub source: &'static str,
    /// What the decoder met: `goes to chain weird-X, which kube-proxy's layout does not have`.
    pub reason: String,
}

/// Every service port's current endpoints (empty: none, kube-proxy rejects).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceTable {
    pub services: HashMap<ServicePort, Vec<Endpoint>>,
    /// Service ports whose path the decoder did not understand: never judged.
    pub undecoded: HashMap<ServicePort, Undecoded>,
    /// Map elements that name a service port the decoder could not read (a
    /// key of an unexpected type): (what, how many); their ports are unknown,
    /// so no entry is judged against them.
    pub unkeyed: Vec<(Undecoded, u64)>,
}

impl ServiceTable {
    pub fn endpoints(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }

    pub fn node_ports(&self) -> usize {
        self.services.keys().filter(|k| k.is_node_port()).count()
    }

    /// Whether `svc` is a service port whose path was not understood.
    pub fn is_undecoded(&self, svc: &ServicePort) -> bool {
        self.undecoded.contains_key(svc)
    }

    /// Undecoded service ports per source (unreadable map elements included).
    pub fn undecoded_by_source(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for u in self.undecoded.values() {
            *m.entry(u.source).or_default() += 1;
        }
        for (u, n) in &self.unkeyed {
            *m.entry(u.source).or_default() += n;
        }
        m
    }

    /// Whether `addr` is the address of one of `svc`'s current endpoints;
    /// None when `svc` is not a (decoded) service port of the data plane.
    /// The address alone, as kube-proxy's reconciler compares a flow's reply
    /// source with its serving endpoint IPs (`pkg/proxy/conntrack/cleanup.go`).
    pub fn is_current(&self, svc: &ServicePort, addr: IpAddr) -> Option<bool> {
        let eps = self.services.get(svc)?;
        Some(eps.iter().any(|(a, _)| *a == addr))
    }

    /// The L4 protocols of the service ports of one family.
    pub fn protocols(&self, v6: bool) -> BTreeSet<u8> {
        self.services
            .keys()
            .filter(|k| k.address.is_ipv6() == v6)
            .map(|k| k.protocol)
            .collect()
    }

    /// Adds `other`'s service ports; a port both list gets both endpoint lists
    /// (a leftover of another mode can only hide a stale entry, never invent one),
    /// and a port either did not decode is undecoded.
    pub fn merge(&mut self, other: ServiceTable) {
        for (svc, eps) in other.services {
            if self.undecoded.contains_key(&svc) {
                continue;
            }
            let mine = self.services.entry(svc).or_default();
            mine.extend(eps);
            mine.sort();
            mine.dedup();
        }
        self.unkeyed.extend(other.unkeyed);
        for (svc, why) in other.undecoded {
            self.services.remove(&svc);
            self.undecoded.entry(svc).or_insert(why);
        }
    }
}

/// Bound on the chains one service's walk visits (a loop or a huge rule set
/// cannot make it run away).
const MAX_WALK: usize = 10_000;

/// A chain's (or set's) name as a 64-bit hash: the graph keeps no names, so
/// its memory is a few words per chain, rule and DNAT (10,000 services × 5
/// endpoints: about 70,000 chains). Two names with one hash (about 1 in 10^9
/// at 100,000 names) merge two chains, which can only add endpoints to a
/// service: a missed stale count, never a false one.
pub fn chain_id(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The items of a vector sorted by key whose key is `k`.
fn with_key<T>(v: &[(u64, T)], k: u64) -> &[(u64, T)] {
    let lo = v.partition_point(|(c, _)| *c < k);
    let hi = v.partition_point(|(c, _)| *c <= k);
    &v[lo..hi]
}

/// Chains and what they lead to, as one source reads them.
#[derive(Debug, Default)]
pub struct Graph {
    entries: Vec<(ServicePort, u64)>,
    no_endpoints: Vec<ServicePort>,
    edges: Vec<(u64, u64)>,
    dnat: Vec<(u64, Endpoint)>,
    /// Chains holding something the decoder does not understand, and what.
    unknown: Vec<(u64, String)>,
    /// Service ports whose entry itself was not understood.
    undecoded: Vec<(ServicePort, String)>,
}

impl Graph {
    /// Traffic to `svc` goes to `chain`.
    pub fn entry(&mut self, svc: ServicePort, chain: &str) {
        self.entries.push((svc, chain_id(chain)));
    }

    /// kube-proxy rejects or drops `svc`: it has no endpoints.
    pub fn no_endpoints(&mut self, svc: ServicePort) {
        self.no_endpoints.push(svc);
    }

    pub fn edge(&mut self, from: &str, to: &str) {
        self.edge_ids(chain_id(from), chain_id(to));
    }

    pub fn edge_ids(&mut self, from: u64, to: u64) {
        self.edges.push((from, to));
    }

    /// A jump only traffic from the sources `guard` says takes (the
    /// short-circuits of `externalTrafficPolicy: Local`): a path like any other.
    pub fn guarded_edge(&mut self, from: &str, to: &str, _guard: SourceGuard) {
        self.edge(from, to);
    }

    pub fn dnat(&mut self, chain: &str, to: Endpoint) {
        self.dnat.push((chain_id(chain), to));
    }

    /// `chain` holds something the decoder does not understand: every
    /// service port whose path goes through it is undecoded.
    pub fn unknown(&mut self, chain: &str, reason: String) {
        self.unknown_id(chain_id(chain), reason);
    }

    pub fn unknown_id(&mut self, chain: u64, reason: String) {
        self.unknown.push((chain, reason));
    }

    /// Traffic to `svc` goes somewhere the decoder does not understand.
    pub fn undecoded(&mut self, svc: ServicePort, reason: String) {
        self.undecoded.push((svc, reason));
    }

    /// Follows each service's chains to the DNATs they reach. A walk that
    /// meets an unknown chain, or reaches no DNAT at all (kube-proxy lists a
    /// port without endpoints in its "no endpoints" rules instead, never as
    /// a path to nowhere), makes the port undecoded (`source` says whose).
    pub fn finish(mut self, source: &'static str) -> ServiceTable {
        self.edges.sort_unstable();
        self.edges.dedup();
        self.dnat.sort_unstable();
        self.dnat.dedup();
        self.unknown.sort_by_key(|(c, _)| *c);
        self.no_endpoints.sort_unstable();
        let mut services: HashMap<ServicePort, Vec<Endpoint>> = HashMap::with_capacity(self.entries.len());
        let mut undecoded: HashMap<ServicePort, Undecoded> = HashMap::new();
        let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut stack = Vec::new();
        for (svc, chain) in &self.entries {
            seen.clear();
            stack.clear();
            stack.push(*chain);
            let mut eps = Vec::new();
            let mut why = None;
            while let Some(c) = stack.pop() {
                if seen.len() >= MAX_WALK || !seen.insert(c) {
                    continue;
                }
                if let Some((_, reason)) = with_key(&self.unknown, c).first() {
                    why = Some(reason.clone());
                    break;
                }
                eps.extend(with_key(&self.dnat, c).iter().map(|(_, e)| *e));
                stack.extend(with_key(&self.edges, c).iter().map(|(_, to)| *to));
            }
            if why.is_none() && eps.is_empty() && self.no_endpoints.binary_search(svc).is_err() {
                why = Some("its chains reach no DNAT and no \"no endpoints\" verdict".into());
            }
            match why {
                Some(reason) => {
                    undecoded.entry(*svc).or_insert(Undecoded { source, reason });
                }
                None => services.entry(*svc).or_default().extend(eps),
            }
        }
        for (svc, reason) in self.undecoded {
            undecoded.entry(svc).or_insert(Undecoded { source, reason });
        }
        for svc in &self.no_endpoints {
            if !undecoded.contains_key(svc) {
                services.entry(*svc).or_default();
            }
        }
        for svc in undecoded.keys() {
            services.remove(svc);
        }
        for eps in services.values_mut() {
            eps.sort_unstable();
            eps.dedup();
            eps.shrink_to_fit();
        }
        services.shrink_to_fit();
        ServiceTable {
            services,
            undecoded,
            unkeyed: Vec::new(),
        }
    }
}

/// An L4 protocol's name (`udp`), or its number.
pub fn protocol_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// `10.96.0.10:53/udp`, `[fd00::a]:53/udp`.
pub fn service_label(s: &ServicePort) -> String {
    format!("{}/{}", socket(s.address, Some(s.port)), protocol_name(s.protocol))
}

pub fn socket(a: IpAddr, port: Option<u16>) -> String {
    match (a, port) {
        (IpAddr::V6(v6), Some(p)) => format!("[{v6}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

/// Counts per protocol name, with every known protocol present (0 when none).
pub fn per_protocol(counts: impl IntoIterator<Item = (u8, u64)>) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = ["tcp", "udp", "sctp"].iter().map(|p| (p.to_string(), 0)).collect();
    for (p, n) in counts {
        *m.entry(protocol_name(p)).or_default() += n;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(p: u16) -> ServicePort {
        ServicePort {
            address: "10.96.0.1".parse().unwrap(),
            port: p,
            protocol: 6,
        }
    }

    #[test]
    fn loops_and_shared_endpoints() {
        let mut g = Graph::default();
        g.entry(svc(80), "KUBE-SVC-A");
        g.entry(svc(81), "KUBE-SVC-B");
        g.edge("KUBE-SVC-A", "KUBE-SEP-X");
        g.edge("KUBE-SVC-A", "KUBE-SVC-A");
        g.edge("KUBE-SVC-B", "KUBE-SEP-X");
        g.dnat("KUBE-SEP-X", ("10.0.0.1".parse().unwrap(), Some(8080)));
        g.no_endpoints(svc(82));
        let table = g.finish("iptables-nft");
        assert_eq!(table.services[&svc(80)], table.services[&svc(81)]);
        assert!(table.services[&svc(82)].is_empty());
        assert_eq!(table.endpoints(), 2);
        assert_eq!(table.is_current(&svc(82), "10.0.0.1".parse().unwrap()), Some(false));
        assert_eq!(table.is_current(&svc(83), "10.0.0.1".parse().unwrap()), None);
    }

    /// externalTrafficPolicy: Local: pod (10.0.0.0/8) and host traffic
    /// short-circuit to every endpoint, the rest reaches the local one only:
    /// every path counts, so the port has both endpoints, whoever the client
    /// (kube-proxy's reconciler ignores traffic policies).
    #[test]
    fn guarded_jumps_are_paths_like_any_other() {
        let ep = |s: &str| (s.parse().unwrap(), Some(80));
        let mut g = Graph::default();
        g.entry(svc(80), "external-X");
        g.guarded_edge(
            "external-X",
            "service-X",
            SourceGuard::Prefix("10.0.0.0".parse().unwrap(), 8),
        );
        g.guarded_edge("external-X", "service-X", SourceGuard::Local);
        g.edge("external-X", "local-X");
        g.edge("service-X", "endpoint-L");
        g.edge("service-X", "endpoint-R");
        g.edge("local-X", "endpoint-L");
        g.dnat("endpoint-L", ep("10.180.0.20"));
        g.dnat("endpoint-R", ep("10.180.1.20"));
        // No local endpoint: outside traffic reaches nothing, the short-circuit the remote one.
        g.entry(svc(81), "external-Y");
        g.guarded_edge("external-Y", "service-X", SourceGuard::Local);
        let t = g.finish("nftables");
        assert_eq!(t.services[&svc(80)], vec![ep("10.180.0.20"), ep("10.180.1.20")]);
        assert_eq!(t.services[&svc(81)], vec![ep("10.180.0.20"), ep("10.180.1.20")]);
        assert_eq!(t.is_current(&svc(80), "10.180.1.20".parse().unwrap()), Some(true));
        assert_eq!(t.is_current(&svc(81), "10.180.1.20".parse().unwrap()), Some(true));
        assert_eq!(t.is_current(&svc(81), "10.180.9.9".parse().unwrap()), Some(false));
    }

    #[test]
    fn merge_keeps_both_endpoint_lists() {
        let ep = |s: &str| (s.parse().unwrap(), Some(80));
        let mut a = ServiceTable::default();
        a.services.insert(svc(80), vec![ep("10.0.0.1")]);
        let mut b = ServiceTable::default();
        b.services.insert(svc(80), vec![ep("10.0.0.2"), ep("10.0.0.1")]);
        b.services.insert(ServicePort::node_port(true, 17, 30053), vec![]);
        a.merge(b);
        assert_eq!(a.services[&svc(80)], vec![ep("10.0.0.1"), ep("10.0.0.2")]);
        assert_eq!(a.node_ports(), 1);
        assert_eq!(a.protocols(true), BTreeSet::from([17]));
        assert_eq!(
            service_label(&ServicePort::node_port(true, 17, 30053)),
            "[::]:30053/udp"
        );
    }
}
