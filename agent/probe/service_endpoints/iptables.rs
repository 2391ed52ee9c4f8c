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
use crate::netlink::nft_expr::rule_facts;
use crate::netlink::NlError;

/// Chains that mark packets, never lead to an endpoint.
const NOT_A_PATH: &[&str] = &["KUBE-MARK-MASQ", "KUBE-MARK-DROP", "KUBE-POSTROUTING"];

/// Reads kube-proxy's iptables-nft chains of one family (one per attempt).
#[derive(Debug)]
pub struct IptEndpoints {
    family: Family,
    graph: Graph,
}

impl IptEndpoints {
    pub fn new(family: Family) -> Self {
        IptEndpoints {
            family,
            graph: Graph::default(),
        }
    }

    pub fn finish(self) -> ServiceTable {
        self.graph.finish()
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
        let node_ports = r.chain == "KUBE-NODEPORTS"
            || (r.table == "filter" && r.chain == "KUBE-EXTERNAL-SERVICES" && f.daddr.is_none());
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
        if r.table == "filter" {
            if let (Some(svc), true, "KUBE-SERVICES" | "KUBE-EXTERNAL-SERVICES" | "KUBE-NODEPORTS") =
                (svc, f.reject, r.chain)
            {
                self.graph.no_endpoints(svc);
            }
            return Ok(());
        }
        if r.table != "nat" {
            return Ok(());
        }
        let mut jumps = f
            .jumps
            .iter()
            .filter(|j| j.starts_with("KUBE-") && !NOT_A_PATH.contains(&j.as_str()));
        if r.chain == "KUBE-SERVICES" || r.chain == "KUBE-NODEPORTS" {
            if let (Some(svc), Some(j)) = (svc, jumps.next()) {
                self.graph.entry(svc, j);
            }
            return Ok(());
        }
        for j in jumps {
            self.graph.edge(r.chain, j);
        }
        if let Some(d) = f.dnat {
            self.graph.dnat(r.chain, d);
        }
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
