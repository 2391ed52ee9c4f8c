//! A netlink recording (`netlink::replay`, a fixture node's `netlink/<protocol>.txt`):
//! the text parsed, then replayed to every reader a recorded node runs on it.
//!
//! Beyond panics: the format round-trips (`format` then `parse` gives the same
//! exchanges); a replay answers a recorded request with exactly the datagrams
//! recorded for it (seq aside), then an error, never more; the readers' results
//! hold together (source NAT rules of the family asked, at a position from 1,
//! in a table the walk starts from; the SNAT grouping counts every entry given).
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nft::Family;
use proxywatch::netlink::replay::{self, Replay};
use proxywatch::netlink::{ct_dump, ctnetlink, nfacct, nft_count, nft_snat, Conn, Session};
use proxywatch::probe::iptables::node::IptTally;
use proxywatch::probe::nftables::NftTally;
use proxywatch::probe::snat;

/// Recorded requests replayed one by one (each is a linear search of the recording).
const MAX_CHECKED: usize = 64;

fuzz_target!(|data: &[u8]| {
    // Replay::load reads the file as UTF-8; lossy decoding covers that and more.
    let text = String::from_utf8_lossy(data);
    let Ok(exchanges) = replay::parse(&text) else {
        return;
    };
    assert_eq!(
        replay::parse(&replay::format("fuzz\nround trip", &exchanges)).as_ref(),
        Ok(&exchanges),
        "format and parse agree"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let open = || Replay::new("fuzz", exchanges.clone());

    // The replay itself: each request answered by the first exchange recorded for it.
    let mut r = open();
    for e in exchanges.iter().take(MAX_CHECKED) {
        let mut key = e.request.clone();
        replay::stamp(&mut key, 0);
        let recorded = exchanges.iter().find(|x| x.request == key);
        match (r.send(&e.request), recorded) {
            (Ok(()), Some(x)) => {
                for want in &x.replies {
                    let mut got = r.recv(deadline).expect("a recorded datagram").to_vec();
                    let mut want = want.clone();
                    replay::stamp(&mut got, 0);
                    replay::stamp(&mut want, 0);
                    assert_eq!(got, want, "the datagram as recorded, seq aside");
                }
                assert!(r.recv(deadline).is_err(), "an answer ends where its recording does");
            }
            (Err(_), None) => assert!(r.recv(deadline).is_err(), "nothing to read after a refused request"),
            (sent, recorded) => panic!("send answered {sent:?}, the recording holds {recorded:?}"),
        }
    }

    // The readers, as the probes run them on a recorded node.
    let mut rules = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        if let Ok((found, _skipped)) = nft_snat::read(open(), family, deadline) {
            for f in &found {
                assert_eq!(f.family, family);
                assert!(f.position >= 1, "positions count from 1");
                assert!(nft_snat::ROOTS.iter().any(|(t, _)| *t == f.table), "{}", f.table);
                assert!(matches!(f.action.kind, "MASQUERADE" | "SNAT"));
                let _ = snat::rule_of(f);
            }
            rules.extend(found);
        }
        for sets in [false, true] {
            let plan = nft_count::Plan { family, sets };
            if let Ok(c) = nft_count::count(&mut || Ok(open()), plan, deadline, &IptTally::default) {
                assert!((1..=nft_count::ATTEMPTS).contains(&c.attempts));
                let _ = c.tally.finish();
            }
            if let Ok(c) = nft_count::count(&mut || Ok(open()), plan, deadline, &NftTally::default) {
                assert!((1..=nft_count::ATTEMPTS).contains(&c.attempts));
                let _ = c.tally.finish();
            }
        }
    }
    let _ = nft_count::generation(open(), deadline);
    if let Ok(s) = ctnetlink::read(open(), deadline) {
        assert!(s.cpus >= 1, "statistics without a CPU are an error");
    }
    let _ = proxywatch::probe::neighbour_tables::dump(open(), deadline);
    let _ = proxywatch::probe::ipvs::interface::dump_addresses(open(), deadline);
    // The nfacct object, as netlink::nfacct::read asks for it.
    if let Ok((ty, payload)) = Session::new(open(), deadline).request(&mut nfacct::get(nfacct::CT_STATE_INVALID)) {
        let _ = nfacct::decode(ty, &payload);
    }
    // The conntrack dump into the SNAT grouping: every source-NATed entry counted once.
    for family in [0, 2, 10] {
        let mut grouper = snat::Grouper::default();
        let mut src_nat = 0;
        let dumped = ct_dump::dump(open(), deadline, family, None, 0, |e| {
            src_nat += u64::from(e.src_nat());
            grouper.add(e);
        });
        if dumped.is_ok() {
            let f = grouper.facts(&rules);
            assert_eq!(f.entries, src_nat);
            assert!(f.entries_ungrouped <= f.entries && f.groups_dropped <= f.groups);
            assert!(f.top.len() <= snat::MAX_LISTED);
            let listed: u64 = f.top.iter().map(|g| g.ports_in_use).sum();
            assert!(listed <= f.entries);
            for g in &f.top {
                assert!(g.range_size >= 1 && g.ports_in_use >= 1);
            }
        }
    }
});
