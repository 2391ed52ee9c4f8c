//! nfnetlink_acct answers (`netlink::nfacct::decode`, kube-proxy's
//! `ct_state_invalid_dropped_pkts` object): each message of a datagram, and an
//! object decoded merged into a reading as the iptables probe merges it
//! (`rule_counters::nfacct::merge`).
//!
//! Beyond panics: a decoded object's name has no NUL, and the object as the
//! kernel would send it decodes to itself; the merge replaces exactly the
//! conntrack-invalid rules counting into that object with the object's one count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nfacct;
use proxywatch::probe::rule_counters::{self, CountedRule, Reason, RuleCounters};

/// `NFNL_MSG_ACCT_NEW` of `NFNL_SUBSYS_ACCT`.
const ACCT_NEW: u16 = 7 << 8;

fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
    a.extend(kind.to_ne_bytes());
    a.extend(value);
    a.resize(a.len().next_multiple_of(4), 0);
    a
}

/// The object as nfnl_acct_fill_info writes it: nfgenmsg, name, packets, bytes, use count.
fn encode(a: &nfacct::Acct) -> Vec<u8> {
    let mut name = a.name.as_bytes().to_vec();
    name.push(0);
    let mut p = vec![0, 0, 0, 0];
    p.extend(attr(1, &name));
    p.extend(attr(2, &a.packets.to_be_bytes()));
    p.extend(attr(3, &a.bytes.to_be_bytes()));
    p.extend(attr(4, &1u32.to_be_bytes()));
    p
}

fn rule(reason: Reason, target: String) -> CountedRule {
    CountedRule {
        backend: "legacy",
        family: "ipv4",
        chain: "KUBE-FORWARD",
        id: 1,
        reason,
        protocol: "any".into(),
        service: None,
        target,
        packets: 5,
        bytes: 300,
    }
}

fuzz_target!(|data: &[u8]| {
    for m in proxywatch::netlink::messages(data).flatten() {
        // Whatever the message type says, as the answer to the request.
        for ty in [m.ty, ACCT_NEW] {
            let Ok(a) = nfacct::decode(ty, m.payload) else {
                continue;
            };
            assert_eq!(ty, ACCT_NEW, "only an nfacct object decodes as one");
            assert!(!a.name.contains('\0'));
            assert_eq!(nfacct::decode(ACCT_NEW, &encode(&a)).as_ref(), Ok(&a), "round trip");

            let theirs = rule_counters::nfacct::target(&a.name);
            let other = rule_counters::nfacct::target(&format!("{}-other", a.name));
            let mut c = RuleCounters::default();
            std::sync::Arc::make_mut(&mut c.rules).extend([
                rule(Reason::Invalid, theirs.clone()),
                rule(Reason::Invalid, other.clone()),
                rule(Reason::Invalid, "*".into()),
                rule(Reason::NoEndpoints, theirs.clone()),
            ]);
            rule_counters::nfacct::merge(&mut c, Ok(Some(a.clone())));
            let got: Vec<_> = c
                .rules
                .iter()
                .map(|r| (r.backend, r.reason, r.target.as_str()))
                .collect();
            assert_eq!(
                got,
                [
                    ("legacy", Reason::Invalid, other.as_str()),
                    ("legacy", Reason::Invalid, "*"),
                    ("legacy", Reason::NoEndpoints, theirs.as_str()),
                    ("nfacct", Reason::Invalid, theirs.as_str()),
                ]
            );
            let last = c.rules.last().unwrap();
            assert_eq!((last.packets, last.bytes), (a.packets, a.bytes));
            assert_eq!(c.sources, [rule_counters::nfacct::SOURCE]);
            assert!(c.unavailable.is_empty());
        }
    }
});
