//! The conntrack_stale probe's decoders: every message of the datagram as an
//! nf_tables rule (nft::decode_rule → nft_expr::rule_facts in both families →
//! service_endpoints' IptEndpoints and NftEndpoints, then finish), as set
//! elements (nft::each_element → NftEndpoints::element for each of kube-proxy's
//! maps and an anonymous one) and as a ctnetlink entry
//! (ct_dump::fuzz_decode, decode_entry → conntrack_stale::Counter::add against
//! the service table the same datagram's rules made, then facts, which must
//! account for every entry given).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::ct_dump;
use proxywatch::netlink::nft::{self, decode_rule, msg_type, Family, NFT_MSG_NEWRULE, NFT_MSG_NEWSETELEM};
use proxywatch::netlink::nft_count::Tally;
use proxywatch::netlink::nft_expr::rule_facts;
use proxywatch::probe::conntrack_stale::Counter;
use proxywatch::probe::service_endpoints::iptables::IptEndpoints;
use proxywatch::probe::service_endpoints::nftables::NftEndpoints;
use proxywatch::probe::service_endpoints::{ServicePort, ServiceTable};

/// kube-proxy's verdict maps, and an anonymous one (numgen's).
const MAPS: &[&str] = &[
    "service-ips",
    "service-nodeports",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "__map0",
];

/// `IPCTNL_MSG_CT_NEW` of `NFNL_SUBSYS_CTNETLINK`: what a conntrack dump answers.
const CT_NEW: u16 = 1 << 8;

fuzz_target!(|data: &[u8]| {
    let msgs: Vec<_> = proxywatch::netlink::messages(data).flatten().collect();
    let (mut v4, mut v6) = (IptEndpoints::new(Family::Ip), IptEndpoints::new(Family::Ip6));
    let (mut n4, mut n6) = (NftEndpoints::new(Family::Ip), NftEndpoints::new(Family::Ip6));
    for (i, m) in msgs.iter().enumerate() {
        if let Ok(r) = decode_rule(msg_type(NFT_MSG_NEWRULE), m.payload) {
            let _ = rule_facts(Family::Ip, &r);
            let _ = rule_facts(Family::Ip6, &r);
            let _ = v4.rule(&r);
            let _ = v6.rule(&r);
            let _ = n4.rule(&r);
            let _ = n6.rule(&r);
        }
        let set = MAPS[i % MAPS.len()];
        let _ = nft::each_element(msg_type(NFT_MSG_NEWSETELEM), m.payload, |e| {
            let _ = n4.element(set, e);
            n6.element(set, e)
        });
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
    table.services.insert(ServicePort::node_port(false, 6, 30080), vec![]);
    for t in [v4.finish(), v6.finish(), n4.finish(), n6.finish()] {
        table.merge(t);
    }
    let _ = (table.endpoints(), table.protocols(false), table.protocols(true));
    let mut counter = Counter::with_local(["192.168.0.2".parse().unwrap(), "::1".parse().unwrap()].into());
    let mut added = 0;
    for m in &msgs {
        ct_dump::fuzz_decode(m.payload);
        if let Ok(Some(e)) = ct_dump::decode_entry(CT_NEW, m.payload) {
            let _ = e.dst_nat();
            counter.add(&table, &e);
            added += 1;
        }
    }
    // Beyond panics: every entry given is counted once, and never more are stale.
    let f = counter.facts(&table);
    assert_eq!(f.examined_entries, added);
    assert!(f.dst_nat_entries <= added);
    assert!(f.stale_entries.values().sum::<u64>() <= added);
    assert!(f.stale.len() as u64 <= f.stale_groups && f.stale_groups <= added);
});
