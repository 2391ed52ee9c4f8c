//! nf_tables answers over netlink (netlink::messages, attrs, nft::decode_*):
//! every message of the datagram through every decoder, both tallies and the
//! reject/drop rule counters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nft::{self, *};
use proxywatch::netlink::nft_count::Tally;
use proxywatch::probe::iptables_nft::IptTally;
use proxywatch::probe::nftables::NftTally;

fuzz_target!(|data: &[u8]| {
    let (mut ipt, mut nftt) = (IptTally::default(), NftTally::default());
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
                let _ = proxywatch::netlink::nft_snat::snat_action(family, &r);
            }
            let _ = ipt.rule(&r);
            let _ = nftt.rule(&r);
            // The reject/drop rules' counters (probe::rule_counters).
            let _ = proxywatch::probe::rule_counters::nft_rule(Family::Ip, &r);
            let _ = proxywatch::probe::rule_counters::nft_rule(Family::Ip6, &r);
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
