//! The conntrack dumps of one run (step 4 of the probe's run): which dumps to
//! make, each with its family, protocol and status filter for the kernel
//! (`dump_plans`), and making them into the run's counter and SNAT grouper
//! (`Run::dump`), every entry checked here again against the same filters.

use super::{Counter, Run};
use crate::netlink::{ct_dump, NlError, NETLINK_NETFILTER};
use crate::probe::service_endpoints::ServiceTable;
use crate::probe::ProbeError;

/// An error of the conntrack dump itself.
fn nl(e: NlError) -> ProbeError {
    ProbeError::NfNetlink {
        what: "conntrack entries over ctnetlink".into(),
        source: e,
    }
}

/// One conntrack dump: `(family, protocol, (status, mask))`, as
/// [`ct_dump::dump_nat`] takes them.
type DumpPlan = (u8, Option<u8>, (u32, u32));

/// The dumps of one run. Each dump walks the whole conntrack hash table (shared by
/// every namespace), so a dump per protocol would walk it once more per protocol.
/// Without the SNAT grouping: one dump per family with service ports, the protocol
/// filtered in the kernel only when the family's service ports have a single one.
/// With it, only NATed entries cross to user space, each once (the kernel's status
/// filter is `(status & mask) == value`, no "DST_NAT or SRC_NAT", hence two): the
/// DST_NAT entries of both families (AF_UNSPEC: one walk), counted and grouped, then
/// the SRC_NAT entries without DST_NAT, grouped; without service ports, the second
/// alone; under IPVS (no DST_NAT to filter on), one whole dump.
///
/// `stale_in` says, for IPv4 and IPv6, whether `table` has service ports in it.
fn dump_plans(table: &ServiceTable, stale_in: [bool; 2], snat_groups: bool, dst_nat_only: bool) -> Vec<DumpPlan> {
    let (dnat, snat) = (ct_dump::IPS_DST_NAT, ct_dump::IPS_SRC_NAT);
    let mut plans: Vec<DumpPlan> = Vec::new();
    if snat_groups {
        if !stale_in.contains(&true) {
            plans.push((0, None, (snat, snat)));
        } else if dst_nat_only {
            plans.push((0, None, (dnat, dnat)));
            plans.push((0, None, (snat, snat | dnat)));
        } else {
            plans.push((0, None, (0, 0)));
        }
    } else {
        for (family, v6) in [(2u8, false), (10u8, true)] {
            let protocols = table.protocols(v6);
            if protocols.is_empty() {
                continue;
            }
            let only = (protocols.len() == 1).then(|| protocols.first().copied()).flatten();
            let status = if dst_nat_only { dnat } else { 0 };
            plans.push((family, only, (status, status)));
        }
    }
    plans
}

impl Run<'_> {
    /// Dumps the conntrack entries ([`dump_plans`]) into `counter` (those that can be
    /// stale, against `table`) and, with the SNAT grouping, `grouper`; or says why the
    /// dump must be redone. Every entry is checked here again.
    pub(super) fn dump(
        &self,
        table: &ServiceTable,
        dst_nat_only: bool,
        counter: &mut Counter,
        grouper: &mut crate::probe::snat::Grouper,
    ) -> Result<Result<(), String>, ProbeError> {
        let stale_in = [!table.protocols(false).is_empty(), !table.protocols(true).is_empty()];
        for (family, only, status) in dump_plans(table, stale_in, self.snat, dst_nat_only) {
            let conn = self.host.netlink(NETLINK_NETFILTER).map_err(nl)?;
            let each = |n: &ct_dump::NatEntry| {
                let e = &n.entry;
                let stale = stale_in[usize::from(e.orig_dst.is_ipv6())];
                // ICMP entries (their id in place of ports) are for the SNAT grouping only.
                if stale && !n.icmp && (e.dst_nat() || !dst_nat_only) && only.is_none_or(|p| p == e.l4proto) {
                    counter.add(table, e);
                }
                if self.snat {
                    grouper.add_nat(n);
                }
            };
            match ct_dump::dump_nat(conn, self.deadline, family, only, status, each) {
                Ok(_) => {}
                // The conntrack table itself changed under the dump (NLM_F_DUMP_INTR).
                Err(NlError::Changed(w)) => {
                    return Ok(Err(format!("the conntrack table changed during its dump ({w})")))
                }
                Err(e) => return Err(nl(e)),
            }
        }
        Ok(Ok(()))
    }
}
