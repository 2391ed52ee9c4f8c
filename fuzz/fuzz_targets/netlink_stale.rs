//! The conntrack_stale probe's decoders: every message of the datagram as an
//! nf_tables rule (nft::decode_rule → nft_expr::rule_facts in both families →
//! service_endpoints::IptEndpoints, then finish) and as a ctnetlink entry
//! (ct_dump::fuzz_decode, decode_entry → conntrack_stale::Counter::add against
//! the service table the same datagram's rules made, then facts, which must
//! account for every entry given).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::ct_dump;
use proxywatch::netlink::nft::{decode_rule, msg_type, Family, NFT_MSG_NEWRULE};
use proxywatch::netlink::nft_count::Tally;
use proxywatch::netlink::nft_expr::rule_facts;
use proxywatch::probe::conntrack_stale::Counter;
use proxywatch::probe::service_endpoints::{IptEndpoints, ServicePort, ServiceTable};

/// `IPCTNL_MSG_CT_NEW` of `NFNL_SUBSYS_CTNETLINK`: what a conntrack dump answers.
const CT_NEW: u16 = 1 << 8;

fuzz_target!(|data: &[u8]| {
    let msgs: Vec<_> = proxywatch::netlink::messages(data).flatten().collect();
    let (mut v4, mut v6) = (IptEndpoints::new(Family::Ip), IptEndpoints::new(Family::Ip6));
    for m in &msgs {
        if let Ok(r) = decode_rule(msg_type(NFT_MSG_NEWRULE), m.payload) {
            let _ = rule_facts(Family::Ip, &r);
            let _ = rule_facts(Family::Ip6, &r);
            let _ = v4.rule(&r);
            let _ = v6.rule(&r);
        }
    }
    // A fixed service next to what the input built, so an entry can hit a service
    // port without the input also having to carry the rules that make it.
    let mut table = ServiceTable::default();
    table.services.insert(
        ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        },
        vec![("10.244.1.2".parse().unwrap(), Some(53))],
    );
    table.merge(v4.finish());
    table.merge(v6.finish());
    let _ = (table.endpoints(), table.protocols(false), table.protocols(true));
    let (mut counter, mut added) = (Counter::default(), 0);
    for m in &msgs {
        ct_dump::fuzz_decode(m.payload);
        if let Ok(Some(e)) = ct_dump::decode_entry(CT_NEW, m.payload) {
            let _ = e.dst_nat();
            counter.add(&table, &e);
            added += 1;
        }
    }
    // Beyond panics: every entry given is counted once, and never more are stale.
    let f = counter.facts();
    assert_eq!(f.dst_nat_entries, added);
    assert!(f.stale_entries.values().sum::<u64>() <= added);
    assert!(f.stale.len() as u64 <= f.stale_groups && f.stale_groups <= added);
});
