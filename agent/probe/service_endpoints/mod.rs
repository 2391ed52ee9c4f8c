//! Each service address's current endpoints, read from the data plane.
//!
//! iptables-nft mode, per family, from the kernel over netlink (the same
//! consistent, generation-checked walk as the iptables count,
//! [`nft_count::count`]): in `nat`, a `KUBE-SERVICES` rule matching an exact
//! destination address, protocol and port names a service port and jumps to
//! its chain (`KUBE-SVC-*`, `KUBE-EXT-*` for external/LB IPs, `KUBE-FW-*`);
//! following the jumps between `KUBE-*` chains (`KUBE-MARK-MASQ` aside) leads
//! to `KUBE-SEP-*` chains whose `DNAT --to-destination` is an endpoint. In
//! `filter`, kube-proxy's `KUBE-SERVICES` / `KUBE-EXTERNAL-SERVICES` REJECT
//! for the same match is a service port with no endpoints at all (the
//! scale-to-zero case, kubernetes#139629): every entry NATed for it is stale.
//!
//! NodePorts (`KUBE-NODEPORTS`, no address) are not listed: a NodePort
//! entry's original destination is a node address, never a service address,
//! so it is never counted — a missed count, never a false one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::netlink::nft::{Chain, Family, Rule, Set};
use crate::netlink::nft_count::Tally;
use crate::netlink::nft_expr::rule_facts;
use crate::netlink::NlError;

/// A service port: the address clients send to, its port and L4 protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServicePort {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: u8,
}

/// An endpoint: address, and port when the DNAT gives one.
pub type Endpoint = (IpAddr, Option<u16>);

/// Every service port's current endpoints (empty: none, kube-proxy rejects).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceTable {
    pub services: HashMap<ServicePort, Vec<Endpoint>>,
}

impl ServiceTable {
    pub fn endpoints(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }

    /// Whether `(addr, port)` is one of `svc`'s current endpoints; None when
    /// `svc` is not a service port of the data plane.
    pub fn is_current(&self, svc: &ServicePort, addr: IpAddr, port: u16) -> Option<bool> {
        let eps = self.services.get(svc)?;
        Some(eps.iter().any(|(a, p)| *a == addr && p.is_none_or(|p| p == port)))
    }

    /// The L4 protocols of the service ports of one family.
    pub fn protocols(&self, v6: bool) -> BTreeSet<u8> {
        self.services
            .keys()
            .filter(|k| k.address.is_ipv6() == v6)
            .map(|k| k.protocol)
            .collect()
    }

    pub fn merge(&mut self, other: ServiceTable) {
        self.services.extend(other.services);
    }
}

/// Chains that mark packets, never lead to an endpoint.
const NOT_A_PATH: &[&str] = &["KUBE-MARK-MASQ", "KUBE-MARK-DROP", "KUBE-POSTROUTING"];

/// Reads kube-proxy's iptables-nft chains into a [`ServiceTable`] (one per attempt).
#[derive(Debug)]
pub struct IptEndpoints {
    family: Family,
    entries: Vec<(ServicePort, String)>,
    no_endpoints: Vec<ServicePort>,
    edges: HashMap<String, Vec<String>>,
    dnat: HashMap<String, Vec<Endpoint>>,
}

impl IptEndpoints {
    pub fn new(family: Family) -> Self {
        IptEndpoints {
            family,
            entries: Vec::new(),
            no_endpoints: Vec::new(),
            edges: HashMap::new(),
            dnat: HashMap::new(),
        }
    }

    /// Follows each service's jumps to the DNATs they reach.
    pub fn finish(self) -> ServiceTable {
        let mut services: HashMap<ServicePort, Vec<Endpoint>> = HashMap::new();
        for (svc, chain) in &self.entries {
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            let mut stack = vec![chain.as_str()];
            let mut eps: BTreeSet<Endpoint> = BTreeSet::new();
            while let Some(c) = stack.pop() {
                if !seen.insert(c) || seen.len() > 10_000 {
                    continue;
                }
                eps.extend(self.dnat.get(c).into_iter().flatten().copied());
                stack.extend(self.edges.get(c).into_iter().flatten().map(String::as_str));
            }
            services.entry(*svc).or_default().extend(eps);
        }
        for svc in self.no_endpoints {
            services.entry(svc).or_default();
        }
        for eps in services.values_mut() {
            eps.sort();
            eps.dedup();
        }
        ServiceTable { services }
    }
}

impl Tally for IptEndpoints {
    fn wants(&self, table: &str) -> bool {
        table == "nat" || table == "filter"
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if !r.chain.starts_with("KUBE-") {
            return Ok(());
        }
        let f = rule_facts(self.family, r)?;
        let svc = match (f.daddr, f.dport, f.l4proto) {
            (Some(address), Some(port), Some(protocol)) => Some(ServicePort {
                address,
                port,
                protocol,
            }),
            _ => None,
        };
        if r.table == "filter" {
            if let (Some(svc), true, "KUBE-SERVICES" | "KUBE-EXTERNAL-SERVICES") = (svc, f.reject, r.chain) {
                self.no_endpoints.push(svc);
            }
            return Ok(());
        }
        if r.table != "nat" {
            return Ok(());
        }
        let jumps: Vec<String> = f
            .jumps
            .into_iter()
            .filter(|j| j.starts_with("KUBE-") && !NOT_A_PATH.contains(&j.as_str()))
            .collect();
        if r.chain == "KUBE-SERVICES" {
            if let (Some(svc), Some(j)) = (svc, jumps.first()) {
                self.entries.push((svc, j.clone()));
            }
            return Ok(());
        }
        if !jumps.is_empty() {
            self.edges.entry(r.chain.to_string()).or_default().extend(jumps);
        }
        if let Some(d) = f.dnat {
            self.dnat.entry(r.chain.to_string()).or_default().push(d);
        }
        Ok(())
    }

    fn set(&mut self, _: &Set<'_>) -> bool {
        false
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}
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
    use crate::netlink::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
    use crate::netlink::nft_expr::captured::*;

    #[test]
    fn captured_chains_resolve_to_their_dnat() {
        let mut t = IptEndpoints::new(Family::Ip);
        for capture in [SERVICES, SVC, SEP] {
            for l in capture.lines() {
                let b = hex(l);
                t.rule(&decode_rule(msg_type(NFT_MSG_NEWRULE), &b).unwrap()).unwrap();
            }
        }
        let table = t.finish();
        let svc = ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        };
        assert_eq!(table.services[&svc], vec![("10.244.1.2".parse().unwrap(), Some(53))]);
        assert_eq!(table.is_current(&svc, "10.244.1.2".parse().unwrap(), 53), Some(true));
        assert_eq!(table.is_current(&svc, "10.244.1.3".parse().unwrap(), 53), Some(false));
        let other = ServicePort { port: 54, ..svc };
        assert_eq!(table.is_current(&other, "10.244.1.2".parse().unwrap(), 53), None);
        assert_eq!(service_label(&svc), "10.96.0.10:53/udp");
        assert_eq!(table.protocols(false), BTreeSet::from([17]));
    }

    #[test]
    fn loops_and_shared_endpoints() {
        let svc = |p| ServicePort {
            address: "10.96.0.1".parse().unwrap(),
            port: p,
            protocol: 6,
        };
        let mut t = IptEndpoints::new(Family::Ip);
        t.entries.push((svc(80), "KUBE-SVC-A".into()));
        t.entries.push((svc(81), "KUBE-SVC-B".into()));
        t.edges
            .insert("KUBE-SVC-A".into(), vec!["KUBE-SEP-X".into(), "KUBE-SVC-A".into()]);
        t.edges.insert("KUBE-SVC-B".into(), vec!["KUBE-SEP-X".into()]);
        t.dnat
            .insert("KUBE-SEP-X".into(), vec![("10.0.0.1".parse().unwrap(), Some(8080))]);
        t.no_endpoints.push(svc(82));
        let table = t.finish();
        assert_eq!(table.services[&svc(80)], table.services[&svc(81)]);
        assert!(table.services[&svc(82)].is_empty());
        assert_eq!(table.endpoints(), 2);
    }
}
