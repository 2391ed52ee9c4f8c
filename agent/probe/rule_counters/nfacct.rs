//! kube-proxy's conntrack-invalid drop counted by its nfacct object
//! (`ct_state_invalid_dropped_pkts`, see `netlink/nfacct.rs`): what kube-proxy
//! exports as `kubeproxy_iptables_ct_state_invalid_dropped_packets_total`.
//!
//! The object counts from its creation (kube-proxy's start) across rule
//! rewrites, where a legacy rule's counter is zeroed at every restore; and it
//! is one count for both families. So when it exists it is reason `invalid`'s
//! source, and the `KUBE-FORWARD` rules that count into it are left out (the
//! same packets, never twice). Rules without the match (kube-proxy before it
//! created the object) are counted by their own counters as before.

use std::time::Instant;

use crate::netlink::nfacct::{self, Acct, CT_STATE_INVALID};
use crate::netlink::NlError;

use super::{CountedRule, Reason, RuleCounters};

/// The source label of the object's count.
pub const SOURCE: &str = "nfacct any";

/// What a rule counting into `name` is said to match.
pub fn target(name: &str) -> String {
    format!("nfacct {name}")
}

/// The object read (blocking); Ok(None) when asking would load
/// nfnetlink_acct (`ask` false) or there is no such object.
pub fn read(host: &crate::host::Host, ask: bool, deadline: Instant) -> Result<Option<Acct>, NlError> {
    if !ask {
        return Ok(None);
    }
    nfacct::read(host, CT_STATE_INVALID, deadline)
}

/// Puts what [`read`] answered into the reading (once every rule was read).
pub fn merge(into: &mut RuleCounters, read: Result<Option<Acct>, String>) {
    match read {
        Ok(Some(a)) => {
            let theirs = target(&a.name);
            let rules = std::sync::Arc::make_mut(&mut into.rules);
            rules.retain(|r| !(r.reason == Reason::Invalid && r.target == theirs));
            rules.push(CountedRule {
                backend: "nfacct",
                family: "any",
                chain: "KUBE-FORWARD",
                id: 0,
                reason: Reason::Invalid,
                protocol: "any".into(),
                service: None,
                target: theirs,
                packets: a.packets,
                bytes: a.bytes,
            });
            into.sources.push(SOURCE.into());
        }
        Ok(None) => {}
        Err(e) => into.unavailable.push(format!("nfacct {CT_STATE_INVALID}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::rule_counters::LegacyLines;

    #[test]
    fn the_object_replaces_the_rules_that_count_into_it() {
        let mut l = LegacyLines::new(false);
        l.feed_line("*filter");
        l.feed_line(":KUBE-FORWARD - [0:0]");
        // kube-proxy v1.29+ (its TestOverallIPTablesRules), and one without the match.
        l.feed_line("[5:300] -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP");
        l.feed_line("[2:120] -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP");
        let mut c = l.counters;
        assert_eq!(c.rules[0].target, "nfacct ct_state_invalid_dropped_pkts");
        merge(
            &mut c,
            Ok(Some(Acct {
                name: CT_STATE_INVALID.into(),
                packets: 40,
                bytes: 2400,
            })),
        );
        let got: Vec<_> = c
            .rules
            .iter()
            .map(|r| (r.backend, r.target.as_str(), r.packets))
            .collect();
        assert_eq!(
            got,
            [
                ("legacy", "*", 2),
                ("nfacct", "nfacct ct_state_invalid_dropped_pkts", 40)
            ]
        );
        assert_eq!(c.sources, [SOURCE]);
        // Unreadable: said so, nothing counted, the rules' own counters kept.
        let mut c = RuleCounters::default();
        merge(&mut c, Err("EPERM".into()));
        assert!(c.sources.is_empty() && c.rules.is_empty());
        assert_eq!(c.unavailable, ["nfacct ct_state_invalid_dropped_pkts: EPERM"]);
        merge(&mut c, Ok(None));
        assert!(c.sources.is_empty());
    }
}
