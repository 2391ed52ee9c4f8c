//! Service ports and endpoints from kube-proxy's iptables-nft chains.
//!
//! In `nat`, a `KUBE-SERVICES` rule matching an exact destination address,
//! protocol and port names a service port and jumps to its chain (`KUBE-SVC-*`,
//! `KUBE-EXT-*` for external/LB IPs, `KUBE-FW-*`); a `KUBE-NODEPORTS` rule
//! matching a protocol and port (no address) names a NodePort. Following the
//! jumps between `KUBE-*` chains (`KUBE-MARK-MASQ` aside) leads to `KUBE-SEP-*`
//! chains whose `DNAT --to-destination` is an endpoint. In `filter`, kube-proxy's
//! `KUBE-SERVICES` / `KUBE-EXTERNAL-SERVICES` / `KUBE-NODEPORTS` REJECT for the
//! same match is a service port with no endpoints at all.

use super::{Graph, ServicePort, ServiceTable};
use crate::netlink::nft::{Chain, Family, Rule, Set};
use crate::netlink::nft_count::Tally;
use crate::netlink::nft_expr::{rule_facts, RuleFacts};
use crate::netlink::NlError;

/// Chains that mark packets, never lead to an endpoint.
const NOT_A_PATH: &[&str] = &["KUBE-MARK-MASQ", "KUBE-MARK-DROP", "KUBE-POSTROUTING"];

/// Chains on the way from a service port to its endpoints (pkg/proxy/iptables:
/// service, service-local, external, firewall and endpoint chains).
const PATH_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

fn on_path(chain: &str) -> bool {
    PATH_PREFIXES.iter().any(|p| chain.starts_with(p))
}

/// Reads kube-proxy's iptables chains of one family (one per attempt), from
/// iptables-nft over netlink or from `iptables-legacy-save` text.
#[derive(Debug)]
pub struct IptEndpoints {
    family: Family,
    graph: Graph,
    source: &'static str,
}

impl IptEndpoints {
    pub fn new(family: Family) -> Self {
        Self::with_source(family, "iptables-nft")
    }

    pub fn with_source(family: Family, source: &'static str) -> Self {
        IptEndpoints {
            family,
            graph: Graph::default(),
            source,
        }
    }

    pub fn finish(self) -> ServiceTable {
        self.graph.finish(self.source)
    }

    /// One rule of `table`/`chain`, decoded.
    pub fn add(&mut self, table: &str, chain: &str, f: &RuleFacts) {
        let entry_chain = chain == "KUBE-SERVICES" || chain == "KUBE-NODEPORTS";
        if !entry_chain && !(chain == "KUBE-EXTERNAL-SERVICES" && table == "filter") && !on_path(chain) {
            return;
        }
        let node_ports =
            chain == "KUBE-NODEPORTS" || (table == "filter" && chain == "KUBE-EXTERNAL-SERVICES" && f.daddr.is_none());
        let svc = match (f.daddr, f.dport, f.l4proto) {
            (Some(address), Some(port), Some(protocol)) => Some(ServicePort {
                address,
                port,
                protocol,
            }),
            (None, Some(port), Some(protocol)) if node_ports => {
                Some(ServicePort::node_port(self.family == Family::Ip6, protocol, port))
            }
            _ => None,
        };
        if table == "filter" {
            // REJECT: no endpoints at all; DROP: none for this traffic
            // (internalTrafficPolicy / externalTrafficPolicy Local, none on this node).
            if let (Some(svc), true, false) = (svc, f.reject || f.drop, on_path(chain)) {
                self.graph.no_endpoints(svc);
            }
            return;
        }
        if table != "nat" {
            return;
        }
        let mut jumps = f.jumps.iter().filter(|j| !NOT_A_PATH.contains(&j.as_str()));
        if entry_chain {
            match (svc, jumps.next()) {
                (Some(svc), Some(j)) if on_path(j) => self.graph.entry(svc, j),
                (Some(svc), Some(j)) => self.graph.undecoded(
                    svc,
                    format!("{chain} sends it to chain {j}, which kube-proxy's iptables layout does not have"),
                ),
                _ => {}
            }
            return;
        }
        for j in jumps {
            if on_path(j) {
                self.graph.edge(chain, j);
            } else {
                self.graph.unknown(
                    chain,
                    format!("{chain} jumps to chain {j}, which kube-proxy's iptables layout does not have"),
                );
            }
        }
        if let Some(d) = f.dnat {
            self.graph.dnat(chain, d);
        }
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
        self.add(r.table, r.chain, &f);
        Ok(())
    }

    fn set(&mut self, _: &Set<'_>) -> bool {
        false
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}
}

#[cfg(test)]
mod tests {
    use super::super::service_label;
    use super::*;
    use crate::netlink::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
    use crate::netlink::nft_expr::captured::*;
    use std::collections::BTreeSet;

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
}
