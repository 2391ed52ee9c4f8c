//! `iptables-legacy-save -c` output through the legacy rule readers, as the
//! iptables probe runs each legacy save (probe/iptables/node.rs
//! `legacy_save_and_services`): every line to `rule_counters::LegacyLines`
//! (the reject/drop counters, the old nat `KUBE-MARK-DROP` drop of
//! `rule_counters::nat`, `--nfacct-name`), the whole line, counter included, to
//! `snat::LegacySnatText` (MASQUERADE/SNAT of nat POSTROUTING and the chains
//! it reaches, with their packet counters), and what LegacyLines leaves of the
//! line to `service_endpoints::iptables::SaveText`. Split on `\n`,
//! lossily decoded, as the exec runner hands lines over; the family from the
//! first byte.
//!
//! Beyond panics: a line gives at most one counted or undecoded rule, and what
//! LegacyLines hands on is the line's own tail; every counted rule is of a
//! chain and reason kube-proxy writes, with its own identity; every source NAT
//! rule is MASQUERADE or SNAT of nat, a port range only with the flag that says
//! so; the range a group of ports is measured against holds those ports.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxywatch::netlink::nft::Family;
use proxywatch::netlink::nft_uapi::{NF_NAT_RANGE_PROTO_RANDOM_FULLY, NF_NAT_RANGE_PROTO_SPECIFIED};
use proxywatch::probe::rule_counters::{self, nat, LegacyLines, Reason};
use proxywatch::probe::service_endpoints::iptables::SaveText;
use proxywatch::probe::snat::{self, LegacySnatText};

fuzz_target!(|data: &[u8]| {
    let v6 = data.first().is_some_and(|b| b & 1 == 1);
    let family = if v6 { Family::Ip6 } else { Family::Ip };
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut counted = LegacyLines::new(v6);
    let mut snat_text = LegacySnatText::new(family);
    let mut text = SaveText::new(family);
    let mut decoding = true;
    let mut appended = 0usize;
    for line in &lines {
        let raw = String::from_utf8_lossy(line);
        let before = counted.counters.rules.len() as u64 + counted.counters.undecoded;
        let rest = counted.feed_line(&raw);
        assert!(raw.ends_with(rest), "the line without its counters is its tail");
        let after = counted.counters.rules.len() as u64 + counted.counters.undecoded;
        assert!(after - before <= 1, "one line, one rule at most");
        // A rule line as LegacySnatText reads it: trimmed, without its `[p:b] ` prefix.
        let t = raw.trim();
        let rule = t.strip_prefix('[').and_then(|r| r.split_once("] ")).map_or(t, |(_, r)| r);
        appended += usize::from(rule.starts_with("-A "));
        // As the probe feeds it: the raw line, before the counters are taken off it.
        snat_text.feed_line(&raw);
        if decoding && text.feed_line(rest).is_err() {
            decoding = false;
        }
    }

    let c = &counted.counters;
    let mut ids = std::collections::HashSet::new();
    for r in c.rules.iter() {
        assert_eq!((r.backend, r.family), ("legacy", if v6 { "ipv6" } else { "ipv4" }));
        assert!(ids.insert(r.id), "each counted rule has its own identity");
        match r.chain {
            "KUBE-SERVICES" => assert_eq!(r.reason, Reason::NoEndpoints),
            "KUBE-EXTERNAL-SERVICES" => assert!(matches!(r.reason, Reason::NoEndpoints | Reason::NoLocalEndpoints)),
            "KUBE-FORWARD" => assert_eq!(r.reason, Reason::Invalid),
            label => {
                assert!(nat::PREFIXES.iter().any(|(_, l)| *l == label), "{label}");
                assert_eq!(
                    (r.reason, r.protocol.as_str(), r.target.as_str()),
                    (Reason::NoLocalEndpoints, "any", "*")
                );
            }
        }
        if let Some(s) = &r.service {
            assert!(s.matches('/').count() == 1 && !s.contains(char::is_whitespace), "{s:?}");
        }
    }
    assert!(counted.source().is_some() == counted.found);
    let _ = rule_counters::service_of(Some(&*String::from_utf8_lossy(data)));

    if let Ok(rules) = snat_text.finish() {
        assert!(rules.len() <= appended);
        for r in &rules {
            assert_eq!((r.family, r.table.as_str()), (family, "nat"));
            assert!(matches!(r.action.kind, "MASQUERADE" | "SNAT"));
            assert!(r.position >= 1);
            assert_eq!(
                r.action.ports.is_some(),
                r.action.flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0
            );
            assert_eq!(
                r.action.random_fully(),
                r.action.flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0
            );
            let _ = snat::rule_of(r);
        }
        // The range a group's ports are measured against (snat::capacity) holds them.
        let ranges: Vec<(u16, u16)> = rules.iter().filter_map(|r| r.action.ports).collect();
        let port = |i: usize| data.get(i..i + 2).map_or(1, |b| u16::from_be_bytes([b[0], b[1]]));
        let (lo, hi) = {
            let (a, b) = (port(1), port(3));
            (a.min(b), a.max(b))
        };
        let ((a, b), from) = snat::capacity(&ranges, lo, hi);
        assert!(a <= b && matches!(from, "rule" | "default"));
        if lo >= 1 {
            assert!(a <= lo && hi <= b, "{lo}-{hi} in {a}-{b}");
        }
        if from == "rule" {
            assert!(ranges.contains(&(a, b)));
        }
    }
    if decoding {
        let _ = text.finish(None);
    }
});
