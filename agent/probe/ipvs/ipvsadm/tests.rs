use super::*;
use crate::probe::ipvs::fixtures::*;

// --- ipvsadm -Ln ---------------------------------------------------------

#[test]
fn list_kind_ipv4() {
    let l = parse_ipvsadm_list(SRC, KIND).unwrap();
    assert_eq!(l.len(), 12);
    assert_eq!(l.iter().filter(|v| v.protocol == "TCP").count(), 11);
    let api = find(&l, "TCP", "10.96.0.1", 443);
    assert_eq!(api.scheduler, "rr");
    assert_eq!(api.persistent_seconds, None);
    assert_eq!(api.fwmark, None);
    assert_eq!(api.real_servers, vec![rs("192.168.224.3", 6443, "Masq", 1, 0, 0)]);
    let dns = find(&l, "UDP", "10.96.0.10", 53);
    assert_eq!(
        dns.real_servers,
        vec![
            rs("10.244.0.3", 53, "Masq", 1, 0, 8),
            rs("10.244.0.4", 53, "Masq", 1, 0, 8)
        ]
    );
    let np = find(&l, "TCP", "127.0.0.1", 31730);
    assert_eq!(np.real_servers.len(), 2);
    let total: usize = l.iter().map(|v| v.real_servers.len()).sum();
    assert_eq!(total, 20);
    assert!(l.iter().all(|v| v.stats.is_none()));
}

#[test]
fn list_ipv6_only() {
    let l = parse_ipvsadm_list(SRC, IPV6).unwrap();
    assert_eq!(l.len(), 3);
    let api = find(&l, "TCP", "fd20::1", 443);
    assert_eq!(api.real_servers, vec![rs("2001:db8:0:f101::2", 6443, "Masq", 1, 5, 0)]);
    let dns = find(&l, "TCP", "fd20::a", 53);
    assert_eq!(dns.real_servers[1], rs("fd20::7042", 53, "Masq", 1, 0, 0));
    assert_eq!(find(&l, "TCP", "fd20::a", 9153).real_servers.len(), 1);
}

#[test]
fn list_persistent_with_real_trailing_spaces() {
    let l = parse_ipvsadm_list(SRC, PERSIST_TRAILING).unwrap();
    assert_eq!(l.len(), 7);
    let api = find(&l, "TCP", "10.254.0.1", 443);
    assert_eq!(api.persistent_seconds, Some(10800));
    assert_eq!(api.real_servers.len(), 2);
    assert_eq!(api.real_servers[1], rs("172.16.16.82", 6443, "Masq", 1, 0, 0));
    assert_eq!(find(&l, "TCP", "10.253.102.0", 32429).real_servers.len(), 4);
    let last = find(&l, "TCP", "10.254.20.57", 1);
    assert_eq!(last.real_servers[2], rs("172.16.16.83", 1, "Masq", 1, 0, 0));
    assert_eq!(l.iter().filter(|v| v.persistent_seconds.is_some()).count(), 1);
}

#[test]
fn list_headerless_fwm_tunnel() {
    let l = parse_ipvsadm_list(SRC, FWM_TUNNEL).unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].address, "10.110.76.40");
    assert_eq!(l[0].port, 80);
    assert_eq!(l[0].real_servers[1], rs("10.244.3.9", 80, "Masq", 1, 0, 0));
    let fwm = &l[1];
    assert_eq!(fwm.protocol, "FWM");
    assert_eq!(fwm.fwmark, Some(1481));
    assert_eq!(fwm.address, "");
    assert_eq!(fwm.port, 0);
    assert_eq!(fwm.scheduler, "rr");
    assert_eq!(
        fwm.real_servers,
        vec![
            rs("10.244.2.11", 80, "Tunnel", 1, 0, 0),
            rs("10.244.3.9", 80, "Tunnel", 1, 0, 0)
        ]
    );
}

#[test]
fn list_persistent_mask() {
    let l = parse_ipvsadm_list(SRC, PERSIST_MASK).unwrap();
    assert_eq!(l.len(), 5);
    assert_eq!(l[0].address, "10.3.0.1");
    assert_eq!(l[0].persistent_seconds, Some(10800));
    assert_eq!(l[0].scheduler, "rr");
    let etcd = find(&l, "TCP", "10.3.0.15", 2379);
    assert_eq!(etcd.real_servers, vec![rs("10.10.3.3", 2379, "Masq", 1, 45, 0)]);
    assert_eq!(find(&l, "UDP", "10.3.0.10", 53).real_servers.len(), 1);
}

#[test]
fn list_wrr_weights() {
    let l = parse_ipvsadm_list(SRC, WRR).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].scheduler, "wrr");
    assert_eq!(
        l[0].real_servers,
        vec![
            rs("172.80.0.2", 80, "Masq", 3, 2, 4),
            rs("172.80.0.3", 80, "Masq", 1, 0, 6),
            rs("172.80.0.4", 80, "Masq", 1, 0, 6),
        ]
    );
}

#[test]
fn list_zero_services() {
    // What ipvsadm 1.31 `list_all` prints with an empty table: the version
    // line, then `print_title`, then nothing (ipvsadm.c, list_all and
    // print_title; header text as in every fixture above).
    let empty = "IP Virtual Server version 1.2.1 (size=4096)\n\
                 Prot LocalAddress:Port Scheduler Flags\n  \
                 -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n";
    assert_eq!(parse_ipvsadm_list(SRC, empty).unwrap(), vec![]);
}

#[test]
fn list_flags_and_odd_values() {
    let text = "TCP  10.0.0.1:80 sh (sh-fallback,sh-port) persistent 60 pe sip ops\n\
                \t->\t10.0.0.2:80\tRoute\t0\t0\t0\t\n\
                SCTP 10.0.0.3:0 rr persistent 300 mask 255.255.255.0\n\
                FWM  -1 IPv6 wlc\n\
                TCP  [::ffff:10.0.0.9]:443 rr\n";
    let l = parse_ipvsadm_list(SRC, text).unwrap();
    assert_eq!(l.len(), 4);
    assert_eq!(l[0].scheduler, "sh");
    assert_eq!(
        l[0].scheduler_flags,
        Some(vec!["sh-fallback".to_string(), "sh-port".to_string()])
    );
    assert!(l[0].persistent);
    assert_eq!(l[0].persistent_seconds, Some(60));
    assert_eq!(l[0].real_servers, vec![rs("10.0.0.2", 80, "Route", 0, 0, 0)]);
    assert_eq!(l[1].protocol, "SCTP");
    assert_eq!(l[1].scheduler_flags, Some(vec![]), "ipvsadm prints none: none set");
    assert_eq!(l[1].persistent_seconds, Some(300));
    assert_eq!(l[2].fwmark, Some(u32::MAX));
    assert!(!l[2].persistent);
    assert_eq!(l[3].address, "::ffff:10.0.0.9");
    // Flags that are no flag names are garbage, not flags.
    let e = parse_ipvsadm_list(SRC, "TCP  10.0.0.1:80 sh (sh-port,) \n").unwrap_err();
    assert!(e.message.contains("scheduler flags"), "{e}");
}

#[test]
fn list_errors_name_the_line() {
    let dest_first = "IP Virtual Server version 1.2.1 (size=4096)\n  -> 10.0.0.1:80 Masq 1 0 0\n";
    let e = parse_ipvsadm_list(SRC, dest_first).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("before any service"), "{e}");

    let bad_weight = "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq x 0 0\n";
    let e = parse_ipvsadm_list(SRC, bad_weight).unwrap_err();
    assert_eq!((e.line, e.source_name.as_str()), (2, SRC));
    assert!(e.message.contains("Weight"), "{e}");

    let hostname = "TCP  kubernetes:https rr\n";
    let e = parse_ipvsadm_list(SRC, hostname).unwrap_err();
    assert!(e.message.contains("-n"), "{e}");

    for bad in [
        "TCP  10.0.0.1:80 rr bogus\n",
        "TCP  10.0.0.1:80\n",
        "TCP  10.0.0.1:99999 rr\n",
        "ICMP 10.0.0.1:80 rr\n",
        "TCP  10.0.0.1:80 rr persistent\n",
        "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 0\n",
        "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 0 0 9\n",
        "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 -1 0\n",
        "TCP  10.0.0.1:80 rr\n\nTCP  10.0.0.2:80 rr\n",
        "TCP  10.0.0.1:80 rr\nProt LocalAddress:Port Scheduler Flags\n",
        "FWM  99999999999 rr\n",
        "",
        " \n\t\n",
    ] {
        assert!(parse_ipvsadm_list(SRC, bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn list_rejects_connection_table() {
    let e = parse_ipvsadm_list("ipvsadm -Lnc", LNC).unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.message.contains("connection table"), "{e}");
    assert!(e.to_string().starts_with("ipvsadm -Lnc: line 1:"), "{e}");
}

#[test]
fn list_rejects_stats_and_rate_layouts() {
    let e = parse_ipvsadm_list(SRC, STATS_WRR).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("--stats"), "{e}");
    let e = parse_ipvsadm_list(SRC, RATE).unwrap_err();
    assert!(e.message.contains("--rate"), "{e}");
}

// --- ipvsadm -Ln --stats --------------------------------------------------

#[test]
fn stats_wrr() {
    let s = parse_ipvsadm_stats("ipvsadm -Ln --stats", STATS_WRR).unwrap();
    assert_eq!(s, vec![(key("TCP", "1.2.3.4", 80), st(24, 112, 110, 7578, 7568))]);
}

#[test]
fn stats_pr160() {
    let s = parse_ipvsadm_stats("ipvsadm -Ln --stats", STATS_PR160).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[0], (key("TCP", "10.3.0.1", 443), st(0, 0, 0, 0, 0)));
    assert_eq!(
        s[2],
        (key("TCP", "10.3.0.42", 80), st(14209, 111769, 74613, 7207174, 8334358))
    );
}

#[test]
fn stats_km_suffix_and_hostname_destinations() {
    // `830843K` is ipvsadm's `i / 1000` of a value in [830843000, 830844000).
    let s = parse_ipvsadm_stats("ipvsadm -l --stats", STATS_KM).unwrap();
    assert_eq!(
        s,
        vec![(
            key("TCP", "20.20.20.1", 2020),
            st(401, 8939187, 8953980, 830_843_000, 1_135_000_000)
        )]
    );
}

#[test]
fn largenum_rule() {
    let p = |t: &str| parse_largenum("x", 1, "f", t);
    assert_eq!(p("99999999").unwrap(), 99_999_999);
    assert_eq!(p("100000K").unwrap(), 100_000_000);
    assert_eq!(p("1000M").unwrap(), 1_000_000_000);
    assert_eq!(p("100G").unwrap(), 100_000_000_000);
    assert_eq!(p("100T").unwrap(), 100_000_000_000_000);
    assert_eq!(p("18446744T").unwrap(), 18_446_744_000_000_000_000);
    assert_eq!(p("18446744073709551615").unwrap(), u64::MAX);
    for bad in ["", "K", "1k", "1KB", "-1", "1.5M", "99999999T", "1 K"] {
        assert!(p(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn stats_exact_and_fwm() {
    let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
                Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n  \
                -> RemoteAddress:Port\n\
                FWM  1481                            3       4        5  123456789012 1\n  \
                -> 10.244.2.11:80                    3       4        5  123456789012 1\n\
                FWM  7 IPv6                          0       0        0        0        0\n\
                TCP  [fd20::1]:443                   1       2        3        4        5\n";
    let s = parse_ipvsadm_stats("ipvsadm -Ln --stats --exact", text).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].0.fwmark, Some(1481));
    assert_eq!(s[0].0.protocol, "FWM");
    assert_eq!(s[0].1.incoming_bytes, 123_456_789_012);
    assert_eq!(s[1].0.fwmark, Some(7));
    assert_eq!(s[2].0, key("TCP", "fd20::1", 443));
}

#[test]
fn stats_rejects_rate_layout() {
    let e = parse_ipvsadm_stats("ipvsadm -Ln --rate", RATE).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("unexpected header"), "{e}");
    assert!(e.message.contains("CPS"), "{e}");
    assert!(e.message.contains("--rate"), "{e}");
}

#[test]
fn stats_rejects_other_inputs() {
    let e = parse_ipvsadm_stats(SRC, KIND).unwrap_err();
    assert!(e.message.contains("plain `ipvsadm -Ln`"), "{e}");
    // Headerless: could be --rate, so refuse.
    let e = parse_ipvsadm_stats(SRC, "TCP  10.0.0.1:80 1 2 3 4 5\n").unwrap_err();
    assert_eq!(e.line, 1);
    let header_only = "IP Virtual Server version 1.2.1 (size=4096)\n";
    assert!(parse_ipvsadm_stats(SRC, header_only).is_err());
    assert!(parse_ipvsadm_stats(SRC, LNC).is_err());
    let short = "Prot LocalAddress:Port Conns InPkts OutPkts InBytes OutBytes\nTCP  10.0.0.1:80 1 2 3 4\n";
    assert_eq!(parse_ipvsadm_stats(SRC, short).unwrap_err().line, 2);
    // Zero services with the stats header is fine.
    let none = "IP Virtual Server version 1.2.1 (size=4096)\n\
                Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n  \
                -> RemoteAddress:Port\n";
    assert_eq!(parse_ipvsadm_stats(SRC, none).unwrap(), vec![]);
}
