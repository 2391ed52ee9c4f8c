//! nf_tables answers over netlink (netlink::messages, attrs, nft::decode_*):
//! every message of the datagram through every decoder, both tallies, the
//! reject/drop rule counters (`probe::rule_counters::nft_rule`), the older nat
//! drop (`rule_counters::nat::nft_rule` and the chains `nat::note` learns) and
//! the source NAT action (`netlink::nft_snat::snat_action`).
//!
//! Beyond panics: a counted rule is of a chain and reason kube-proxy writes;
//! the nat drop's chains are remembered once each, within the cap; a source
//! NAT action is MASQUERADE or SNAT.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nft::{self, *};
use proxywatch::netlink::nft_count::Tally;
use proxywatch::probe::iptables::node::IptTally;
use proxywatch::probe::nftables::NftTally;
use proxywatch::probe::rule_counters::{self, nat, Reason};

fuzz_target!(|data: &[u8]| {
    let (mut ipt, mut nftt) = (IptTally::default(), NftTally::default());
    let mut nat_chains: Vec<String> = Vec::new();
    for m in proxywatch::netlink::messages(data).flatten() {
        let p = m.payload;
        let _ = nft::decode_gen(msg_type(NFT_MSG_NEWGEN), p);
        let _ = nft::decode_table(msg_type(NFT_MSG_NEWTABLE), p);
        if let Ok(c) = nft::decode_chain(msg_type(NFT_MSG_NEWCHAIN), p) {
            let _ = ipt.chain(&c);
            let _ = nftt.chain(&c);
        }
        if let Ok(r) = nft::decode_rule(msg_type(NFT_MSG_NEWRULE), p) {
            let _ = r.jumps_to("KUBE-");
            for family in [Family::Ip, Family::Ip6] {
                if let Ok((Some(a), _jumps)) = proxywatch::netlink::nft_snat::snat_action(family, &r) {
                    assert!(matches!(a.kind, "MASQUERADE" | "SNAT"));
                }
                // The reject/drop rules' counters (probe::rule_counters).
                if let Ok(Some(c)) = rule_counters::nft_rule(family, &r) {
                    assert!(rule_counters::CHAINS.contains(&c.chain) && c.chain == r.chain);
                    assert_eq!(Some(c.id), r.handle);
                }
                // The older layout's drop (nat KUBE-XLB-*/KUBE-SVL-* -j KUBE-MARK-DROP).
                if let Ok(Some(c)) = nat::nft_rule(family, &r) {
                    assert_eq!(nat::chain_label(r.chain), Some(c.chain));
                    assert_eq!(
                        (c.reason, c.protocol.as_str(), c.target.as_str()),
                        (Reason::NoLocalEndpoints, "any", "*")
                    );
                    assert_eq!(Some(c.id), r.handle);
                }
            }
            let _ = ipt.rule(&r);
            let _ = nftt.rule(&r);
            let known = nat_chains.len();
            if nat::note(&mut nat_chains, &r).is_ok() && nat_chains.len() > known {
                assert_eq!((r.table, nat_chains.last().map(String::as_str)), ("nat", Some(r.chain)));
                assert!(nat::chain_label(r.chain).is_some());
            }
            assert!(nat_chains.len() <= known + 1 && nat_chains.len() <= nat::MAX_CHAINS);
            assert!(
                nat_chains.windows(2).all(|w| w[0] != w[1]),
                "a chain once per run of its rules"
            );
        }
        if let Ok(s) = nft::decode_set(msg_type(NFT_MSG_NEWSET), p) {
            let _ = (s.anonymous(), s.is_map(), nftt.set(&s));
        }
        let mut n = 0;
        if nft::each_element(msg_type(NFT_MSG_NEWSETELEM), p, |_| {
            n += 1;
            Ok(())
        })
        .is_ok()
        {
            nftt.elements("t", "s", n);
        }
        let _ = proxywatch::netlink::error_code(p);
    }
    let _ = (ipt.finish(), nftt.finish());
});
