//! The stale gauge and finding through a storm of rule commits, on the real
//! kernel (issue 28: `proxywatch_conntrack_stale_entries` read 685 → 0 → 606
//! when a run met a commit, which reset the stale alert's `for:`).
//!
//! A "node" namespace holds kube-proxy-shaped iptables-nft rules for a UDP
//! service (10.96.0.10:53) and a TCP service (10.96.0.20:80), and DST_NAT
//! conntrack entries made with `conntrack -I --dst-nat` (no traffic): some to
//! current endpoints, 5 UDP and 3 TCP to endpoints no rule set here has
//! (stale). The agent serves in the namespace, checking every second, while a
//! loop of the test commits for CHURN without a pause, so that commits land
//! during every dump and between the two families' table walks: rule set A,
//! then rule set C, whose DNS service has one more endpoint (another service
//! table: a run whose dump met such a commit must start again), then an
//! unrelated chain created and deleted (the same table at a new generation).
//!
//! What users rely on, sampled from `/metrics` every second: the stale gauge
//! reads the exact count at every sample (never 0: a run that cannot
//! complete keeps the last good reading, with its time in
//! `proxywatch_probe_reading_timestamp_seconds`), and the finding stays
//! critical (udp/53) at every sample; every failure the agent logged names
//! the rules as what changed, not the conntrack entries. It prints how many
//! runs succeeded and failed (timing-dependent: not asserted).
//!
//! Cleanup: the namespace is deleted on drop (also on panic), the agent is
//! stopped by its PID, the churn loop stops and is joined before the
//! namespace goes. Nothing global is touched, so no global lock.
use crate::churn::{insert_dnat, run_in, Churn};
use crate::common;

use std::time::{Duration, Instant};

use common::{Netns, Serve};

const DNS_IP: &str = "10.96.0.10";
const WEB_IP: &str = "10.96.0.20";
const STALE_UDP: u64 = 5;
const STALE_TCP: u64 = 3;
/// How long the commits go on: the minute issue 28 asks for, the agent checking
/// every second, so that commits meet every dump.
const CHURN: Duration = Duration::from_secs(60);

/// Rule set `A`, or `C` (the DNS service with a third endpoint).
fn rules(variant: char) -> String {
    let mut dns = vec![
        ("KUBE-SEP-DNSA1".to_string(), "10.250.1.2".to_string()),
        ("KUBE-SEP-DNSA2".to_string(), "10.250.2.2".to_string()),
    ];
    if variant == 'C' {
        dns.push(("KUBE-SEP-DNSC3".into(), "10.250.5.2".into()));
    }
    let web = vec![("KUBE-SEP-WEBA1".to_string(), "10.250.3.2".to_string())];
    common::KubeNat::new()
        .service("DNSDNSDNSDNSDNS1", DNS_IP, "udp", 53, 53, &dns)
        .service("WEBWEBWEBWEBWEB1", WEB_IP, "tcp", 80, 8080, &web)
        .render()
}

/// The value of one series in a /metrics body.
fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn the_stale_gauge_and_finding_hold_through_commits_during_every_dump() {
    if !common::can_run(&["ip", "iptables-nft-restore", "iptables-nft", "conntrack"]) {
        return;
    }
    let node = Netns::new("ctsc");
    run_in(&node.name, "iptables-nft-restore", &[], &rules('A'));
    let mut sport = 40_000;
    let mut insert = |proto: &str, dst: &str, dport: u16, to: &str, n: u64| {
        for _ in 0..n {
            insert_dnat(&node, proto, sport, dst, dport, to);
            sport += 1;
        }
    };
    insert("udp", DNS_IP, 53, "10.250.1.2:53", 3);
    insert("udp", DNS_IP, 53, "10.250.9.2:53", STALE_UDP);
    insert("tcp", WEB_IP, 80, "10.250.3.2:8080", 2);
    insert("tcp", WEB_IP, 80, "10.250.8.2:8080", STALE_TCP);

    let agent = Serve::new()
        .in_netns(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--conntrack-stale.interval", "1s", "--iptables.save-interval", "0"])
        .start();
    let udp = "proxywatch_conntrack_stale_entries{protocol=\"udp\"}";
    // TCP to the removed endpoint: draining, its own series.
    let tcp = "proxywatch_conntrack_draining_entries{protocol=\"tcp\"}";
    let severity = "proxywatch_finding_severity{id=\"conntrack_stale_endpoint_entries\"}";
    // Before the churn: the pairs persisted over two checks, the finding is critical.
    common::poll("the critical stale finding", Duration::from_secs(30), || {
        let (_, m) = agent.get("/metrics")?;
        match (series(&m, udp), series(&m, severity)) {
            (Some(u), Some(s)) if u == STALE_UDP as f64 && s == 3.0 => Ok(()),
            got => Err(format!("{got:?}")),
        }
    });

    let churn = Churn::start(&node, rules('A'), rules('C'));
    let started = Instant::now();
    let mut bad = Vec::new();
    let (mut samples, mut held, mut oldest) = (0, 0, 0.0f64);
    while started.elapsed() < CHURN {
        std::thread::sleep(Duration::from_secs(1));
        let at = started.elapsed();
        let m = match agent.get("/metrics") {
            Ok((200, m)) => m,
            other => {
                bad.push(format!("{at:?}: /metrics {other:?}"));
                continue;
            }
        };
        samples += 1;
        let got = (series(&m, udp), series(&m, tcp), series(&m, severity));
        if got != (Some(STALE_UDP as f64), Some(STALE_TCP as f64), Some(3.0)) {
            bad.push(format!("{at:?}: udp, tcp, severity {got:?}"));
        }
        let success = series(&m, "proxywatch_probe_success{probe=\"conntrack_stale\"}");
        if success == Some(0.0) {
            held += 1;
            let reading = series(
                &m,
                "proxywatch_probe_reading_timestamp_seconds{probe=\"conntrack_stale\"}",
            );
            let run = agent
                .snapshot()
                .ok()
                .and_then(|d| d["probes"]["conntrack_stale"]["last_run_timestamp_seconds"].as_f64());
            if let (Some(r), Some(now)) = (reading, run) {
                oldest = oldest.max(now - r);
            }
        }
    }
    let commits = churn.stop();
    let log = agent.log();
    let failures: Vec<&str> = log
        .lines()
        // The probe's own failure lines (the probe_failed finding's lines only repeat them).
        .filter(|l| l.contains("probe failed") && l.contains("probe=conntrack_stale"))
        .collect();
    eprintln!(
        "{commits} commits in {CHURN:?}; {samples} samples, {held} while the latest check had failed \
         (last good reading up to {oldest:.1} s old); {} failed checks logged",
        failures.len()
    );
    for l in failures.iter().take(5) {
        eprintln!("  {l}");
    }
    assert!(
        bad.is_empty(),
        "samples that did not read the stale entries:\n{}",
        bad.join("\n")
    );
    assert!(samples as u64 >= CHURN.as_secs() - 3, "only {samples} samples");
    assert!(commits >= 40, "only {commits} commits: the churn did not run");
    for l in &failures {
        assert!(
            l.contains("kube-proxy's rules changed") || l.contains("kube-proxy's service table"),
            "a failure that does not name the rules: {l}"
        );
        assert!(
            !l.contains("conntrack entries over ctnetlink"),
            "blames the conntrack entries: {l}"
        );
    }
    agent.stop_cleanly();
}
