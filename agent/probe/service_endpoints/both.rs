//! Both kube-proxy layouts read in one nf_tables walk (see [`BothLayouts`]).

use super::iptables::IptEndpoints;
use super::nftables::{self, NftEndpoints};
use crate::netlink::nft::{Chain, Element, Family, Rule, Set};
use crate::netlink::nft_count::Tally;
use crate::netlink::NlError;

/// One family's walk of both kube-proxy layouts in nf_tables: iptables-nft's KUBE-* chains and
/// kube-proxy's own nftables table, each into its service table.
pub struct BothLayouts {
    pub ipt: IptEndpoints,
    pub nft: NftEndpoints,
}

impl BothLayouts {
    pub fn new(family: Family) -> BothLayouts {
        BothLayouts {
            ipt: IptEndpoints::new(family),
            nft: NftEndpoints::new(family),
        }
    }
}

impl Tally for BothLayouts {
    fn wants(&self, table: &str) -> bool {
        self.ipt.wants(table) || self.nft.wants(table)
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if r.table == nftables::TABLE {
            self.nft.rule(r)
        } else {
            self.ipt.rule(r)
        }
    }

    fn set(&mut self, s: &Set<'_>) -> bool {
        s.table == nftables::TABLE && self.nft.set(s)
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}

    fn element_detail(&self) -> bool {
        true
    }

    /// Only sets of `kube-proxy` get here ([`BothLayouts::set`]).
    fn element(&mut self, set: &str, e: Element<'_>) -> Result<(), NlError> {
        self.nft.element(set, e)
    }
}
