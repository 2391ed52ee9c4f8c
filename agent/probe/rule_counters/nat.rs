//! The older layout of kube-proxy's `externalTrafficPolicy: Local` drop: in
//! the `nat` table, through `KUBE-MARK-DROP`.
//!
//! What kube-proxy's iptables mode wrote for external traffic to an eTP=Local
//! port on a node without a local endpoint (kubernetes/kubernetes
//! `pkg/proxy/iptables/proxier.go` and its `proxier_test.go` expectations):
//!
//! - up to v1.23: the port's `KUBE-XLB-<hash>` chain ends with
//!   `-A KUBE-XLB-<hash> -m comment --comment "<ns>/<svc>:<port> has no local endpoints" -j KUBE-MARK-DROP`
//!   (proxier_test.go as PR #106030 left it, 2021-11, the v1.23 cycle; the
//!   logs in kubernetes#36652, 2016, show the older comment
//!   `"<ns>/<svc>:<port>: has no local endpoints"`);
//! - v1.24: PR #109060 ("Kube proxy rule reorg XLB->EXT", in CHANGELOG-1.24's
//!   v1.24.0-rc.0 notes: "changes in the naming and structure of rules")
//!   renamed `KUBE-XLB-*` to `KUBE-EXT-*` and moved the local endpoints to
//!   `KUBE-SVL-<hash>`, which holds the same `KUBE-MARK-DROP` rule;
//! - v1.25 on: PR #110290 ("Don't use KUBE-MARK-DROP for 'no local
//!   endpoints'", KEP-3178, written 2022-05-30 after v1.24.0 shipped)
//!   replaced it with a `filter` `KUBE-EXTERNAL-SERVICES ... -j DROP`, what
//!   `rule_counters.rs` reads.
//!
//! `KUBE-MARK-DROP` only sets mark 0x8000; kubelet's `KUBE-FIREWALL` (filter)
//! drops the marked packet. A dropped packet never confirms its conntrack
//! entry, so every packet of such a flow passes the nat table again: the mark
//! rule's counter counts the dropped packets, not only the first of each flow.
//!
//! Which chains hold such a rule is learned when the iptables probe counts
//! the table (the count walks every rule; cached per ruleset generation with
//! the count), so each run dumps only those chains' rules. The rule has no
//! protocol or address match: its protocol is `any`, its target `*`.

use std::time::Instant;

use crate::netlink::nft::{self, Family, Rule};
use crate::netlink::{NlError, Session, NETLINK_NETFILTER};

use super::{service_of, CountedRule, Reason, RuleCounters};

/// The nat chains that held the drop, per kube-proxy version (see above).
pub const PREFIXES: &[(&str, &str)] = &[("KUBE-XLB-", "KUBE-XLB-*"), ("KUBE-SVL-", "KUBE-SVL-*")];
/// What the comment says.
const SAYS: &str = "has no local endpoints";
/// Chains remembered per family, at most (one per eTP=Local port without a local endpoint).
pub const MAX_CHAINS: usize = 10_000;

/// The label of a chain that may hold the old drop, None for any other chain.
pub fn chain_label(chain: &str) -> Option<&'static str> {
    PREFIXES.iter().find(|(p, _)| chain.starts_with(p)).map(|(_, l)| *l)
}

/// During a count: remembers `r`'s chain when `r` is such a drop (a jump to
/// `KUBE-MARK-DROP` in a [`PREFIXES`] chain of `nat`). Bounded by [`MAX_CHAINS`].
pub fn note(found: &mut Vec<String>, r: &Rule<'_>) -> Result<(), NlError> {
    if r.table != "nat" || chain_label(r.chain).is_none() || found.len() >= MAX_CHAINS {
        return Ok(());
    }
    if r.jumps_to("KUBE-MARK-DROP")? && found.last().is_none_or(|c| c != r.chain) {
        found.push(r.chain.to_string());
    }
    Ok(())
}

/// One rule of such a chain: Some when it is the drop; an error when it is
/// the drop but its counter is missing (undecoded, never 0).
pub fn nft_rule(family: Family, r: &Rule<'_>) -> Result<Option<CountedRule>, NlError> {
    let Some(chain) = chain_label(r.chain) else {
        return Ok(None);
    };
    if !r.jumps_to("KUBE-MARK-DROP")? {
        return Ok(None);
    }
    let x = super::extra(r)?;
    let comment = x.comment.or_else(|| r.userdata.and_then(super::userdata_comment));
    if comment.is_some_and(|c| !c.contains(SAYS)) {
        return Ok(None);
    }
    let (packets, bytes) = x
        .counter
        .ok_or_else(|| NlError::Malformed(format!("a KUBE-MARK-DROP rule of {} without a counter", r.chain)))?;
    Ok(Some(CountedRule {
        backend: "nft",
        family: super::family_label(family),
        chain,
        id: r
            .handle
            .ok_or_else(|| NlError::Malformed("a KUBE-MARK-DROP rule without a handle".into()))?,
        reason: Reason::NoLocalEndpoints,
        protocol: "any".into(),
        service: service_of(comment),
        target: "*".into(),
        packets,
        bytes,
    }))
}

/// The drops of `chains` (nat, learned by the count) over netlink (blocking):
/// one rule dump per chain. A chain gone since the count answers nothing.
pub fn read_nft(
    host: &crate::host::Host,
    family: Family,
    chains: &[String],
    deadline: Instant,
    into: &mut RuleCounters,
) -> Result<(), NlError> {
    if chains.is_empty() {
        return Ok(());
    }
    let mut s = Session::new(host.netlink(NETLINK_NETFILTER)?, deadline);
    for chain in chains {
        let mut req = nft::dump_rules(family, "nat", chain);
        let r = s.dump(&mut req, |p| {
            let r = nft::decode_rule(p.ty, p.payload)?;
            match nft_rule(family, &r) {
                Ok(Some(c)) => std::sync::Arc::make_mut(&mut into.rules).push(c),
                Ok(None) => {}
                Err(_) => into.undecoded += 1,
            }
            Ok(())
        });
        match r {
            Ok(()) => {}
            Err(e) if e.is_not_found() => s = Session::new(host.netlink(NETLINK_NETFILTER)?, deadline),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A line of a legacy save's nat table (without its `[packets:bytes]`): the
/// chain's label and the comment when it is the drop, Err(()) when it is
/// but its words cannot be split (undecoded).
pub(crate) fn legacy_rule(rule: &str) -> Result<Option<(&'static str, Option<String>)>, ()> {
    let Some(rest) = rule.strip_prefix("-A ") else {
        return Ok(None);
    };
    let Some(chain) = chain_label(rest.split_whitespace().next().unwrap_or_default()) else {
        return Ok(None);
    };
    if !rule.contains("KUBE-MARK-DROP") {
        return Ok(None);
    }
    let words = crate::probe::service_endpoints::iptables::split_words(rest).map_err(|_| ())?;
    let value = |flag: &str| words.iter().position(|w| w == flag).and_then(|i| words.get(i + 1));
    if value("-j").map(String::as_str) != Some("KUBE-MARK-DROP") {
        return Ok(None);
    }
    let comment = value("--comment").cloned();
    if comment.as_deref().is_some_and(|c| !c.contains(SAYS)) {
        return Ok(None);
    }
    Ok(Some((chain, comment)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::rule_counters::LegacyLines;

    /// kube-proxy v1.23's nat rules for an eTP=Local NodePort/LoadBalancer
    /// without a local endpoint (`proxier_test.go`'s expectations as PR #106030
    /// shows them, `ns1/svc1`), v1.24's `KUBE-SVL-*` form (PR #109060), and the
    /// older comment with a colon (kubernetes#36652), as `iptables-legacy-save -c` prints them.
    const OLD_NAT: &str = r#"*nat
:KUBE-MARK-DROP - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-XLB-AQI2S6QIMU7PVVRP - [0:0]
:KUBE-SVL-XPGD46QRK7WJZT7O - [0:0]
[12:720] -A KUBE-NODEPORTS -p tcp -m comment --comment "ns1/svc1:p80" -m tcp --dport 3001 -j KUBE-XLB-AQI2S6QIMU7PVVRP
[1:60] -A KUBE-XLB-AQI2S6QIMU7PVVRP -m comment --comment "masquerade LOCAL traffic for ns1/svc1:p80 LB IP" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
[1:60] -A KUBE-XLB-AQI2S6QIMU7PVVRP -m comment --comment "route LOCAL traffic for ns1/svc1:p80 LB IP to service chain" -m addrtype --src-type LOCAL -j KUBE-SVC-AQI2S6QIMU7PVVRP
[11:660] -A KUBE-XLB-AQI2S6QIMU7PVVRP -m comment --comment "ns1/svc1:p80 has no local endpoints" -j KUBE-MARK-DROP
[4:240] -A KUBE-SVL-XPGD46QRK7WJZT7O -m comment --comment "ns2/svc2:p80 has no local endpoints" -j KUBE-MARK-DROP
[2:120] -A KUBE-XLB-4N57TFCL4MD7ZTDA -m comment --comment "default/nginx: has no local endpoints" -j KUBE-MARK-DROP
[23:1380] -A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
[5:300] -A KUBE-SVL-XPGD46QRK7WJZT7O -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
COMMIT
"#;

    #[test]
    fn legacy_old_layout_drops_are_counted() {
        let mut l = LegacyLines::new(false);
        for line in OLD_NAT.lines() {
            l.feed_line(line);
        }
        let got: Vec<_> = l
            .counters
            .rules
            .iter()
            .map(|r| {
                (
                    r.chain,
                    r.reason,
                    r.protocol.as_str(),
                    r.service.as_deref(),
                    r.target.as_str(),
                    r.packets,
                )
            })
            .collect();
        let drop = Reason::NoLocalEndpoints;
        assert_eq!(
            got,
            [
                ("KUBE-XLB-*", drop, "any", Some("ns1/svc1:p80"), "*", 11),
                ("KUBE-SVL-*", drop, "any", Some("ns2/svc2:p80"), "*", 4),
                ("KUBE-XLB-*", drop, "any", Some("default/nginx:"), "*", 2),
            ]
        );
        assert_eq!(l.counters.undecoded, 0);
        // Its counter unreadable: undecoded, never 0.
        l.feed_line("[x:y] -A KUBE-XLB-Z -m comment --comment \"a/b:c has no local endpoints\" -j KUBE-MARK-DROP");
        assert_eq!((l.counters.rules.len(), l.counters.undecoded), (3, 1));
        // The same rule in the filter table, or another nat chain: not this drop.
        assert_eq!(legacy_rule("-A KUBE-SEP-X -j KUBE-MARK-DROP"), Ok(None));
        assert_eq!(
            legacy_rule("-A KUBE-XLB-X -m comment --comment \"x/y has no endpoints\" -j KUBE-MARK-DROP"),
            Ok(None)
        );
        assert_eq!(
            legacy_rule("-A KUBE-XLB-X -m comment --comment \"cut -j KUBE-MARK-DROP"),
            Err(())
        );
        assert_eq!(
            legacy_rule("-A KUBE-XLB-X -j KUBE-MARK-DROP"),
            Ok(Some(("KUBE-XLB-*", None)))
        );
    }

    /// A rule as iptables-nft writes `-A <chain> -m comment --comment C -j KUBE-MARK-DROP`:
    /// a counter, the jump, the comment in userdata.
    fn nft_drop(table: &str, chain: &str, comment: &str, counter: bool) -> Vec<u8> {
        use crate::netlink::nft::samples;
        use crate::netlink::testing::*;
        let mut exprs = Vec::new();
        if counter {
            exprs.push(nested(
                1,
                &[
                    string(1, "counter"),
                    nested(2, &[attr(1, &600u64.to_be_bytes()), attr(2, &10u64.to_be_bytes())]),
                ],
            ));
        }
        // NFT_JUMP (-3).
        exprs.push(samples::immediate(-3, Some("KUBE-MARK-DROP")));
        let mut ud = vec![0u8, comment.len() as u8 + 1];
        ud.extend(comment.as_bytes());
        ud.push(0);
        let mut p = vec![2u8, 0, 0, 1];
        for a in [
            string(1, table),
            string(2, chain),
            attr(3, &42u64.to_be_bytes()),
            nested(4, &exprs),
            attr(7, &ud),
        ] {
            p.extend(a);
        }
        p
    }

    #[test]
    fn nft_old_layout_drops_are_counted_and_their_chains_learned() {
        use crate::netlink::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
        let rule = |b: &[u8]| decode_rule(msg_type(NFT_MSG_NEWRULE), b).map(|r| nft_rule(Family::Ip, &r));
        let p = nft_drop(
            "nat",
            "KUBE-XLB-AQI2S6QIMU7PVVRP",
            "ns1/svc1:p80 has no local endpoints",
            true,
        );
        let c = rule(&p).unwrap().unwrap().unwrap();
        assert_eq!(
            (c.chain, c.reason, c.service.as_deref(), c.packets, c.bytes, c.id),
            (
                "KUBE-XLB-*",
                Reason::NoLocalEndpoints,
                Some("ns1/svc1:p80"),
                10,
                600,
                42
            )
        );
        let mut found = Vec::new();
        let r = decode_rule(msg_type(NFT_MSG_NEWRULE), &p).unwrap();
        note(&mut found, &r).unwrap();
        note(&mut found, &r).unwrap();
        assert_eq!(found, ["KUBE-XLB-AQI2S6QIMU7PVVRP"], "once per chain");
        // Not in nat, or another chain: not learned.
        let f = nft_drop("filter", "KUBE-XLB-A", "x", true);
        note(&mut found, &decode_rule(msg_type(NFT_MSG_NEWRULE), &f).unwrap()).unwrap();
        let s = nft_drop("nat", "KUBE-SEP-A", "x", true);
        note(&mut found, &decode_rule(msg_type(NFT_MSG_NEWRULE), &s).unwrap()).unwrap();
        assert_eq!(found.len(), 1);
        // Without a counter: an error (undecoded), never 0.
        let p = nft_drop("nat", "KUBE-SVL-X", "ns2/svc2:p80 has no local endpoints", false);
        assert!(rule(&p).unwrap().is_err());
        // Another comment: not the drop.
        let p = nft_drop("nat", "KUBE-SVL-X", "ns2/svc2:p80 -> 10.0.0.1:80", true);
        assert_eq!(rule(&p).unwrap().unwrap(), None);
        for cut in 0..p.len() {
            if let Ok(r) = decode_rule(msg_type(NFT_MSG_NEWRULE), &p[..cut]) {
                let _ = nft_rule(Family::Ip6, &r);
                let _ = note(&mut found, &r);
            }
        }
    }
}
