//! kube-proxy's view against the kernel's, on the real kernel: a network namespace with a
//! generated kube-proxy rule set (iptables-nft and iptables-legacy) and a stand-in kube-proxy
//! in it that reports, as the real one does, how many rules it wrote per table, when it last
//! synced and how many syncs failed. Flushing the rules behind the stand-in's back raises
//! `kube_proxy_rules_lost`; restoring them clears it (in nftables mode: its table deleted).
//! A failure counter that rises raises
//! `kube_proxy_sync_failing`, critical once the last good sync is old. Real traffic to Services
//! kube-proxy rejects or drops (both families, both backends, its older nat drop too) and
//! conntrack-invalid segments (its nfacct object) give the rates the kernel's counters give.
use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fake_kube_proxy::{FakeKubeProxy, Reply};
use common::{Netns, Serve};
use serde_json::Value;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// What the stand-in reports: kube-proxy's own series, as v1.28+ names them.
fn metrics(nat: u64, filter: u64, last_sync: f64, failures: u64) -> String {
    format!(
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last_sync}\n\
         # TYPE kubeproxy_sync_proxy_rules_iptables_total gauge\n\
         kubeproxy_sync_proxy_rules_iptables_total{{table=\"nat\"}} {nat}\n\
         kubeproxy_sync_proxy_rules_iptables_total{{table=\"filter\"}} {filter}\n\
         # TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter\n\
         kubeproxy_sync_proxy_rules_iptables_restore_failures_total {failures}\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds 1.7e9\n"
    )
}

fn finding<'a>(findings: &'a Value, id: &str) -> Option<&'a Value> {
    findings.as_array()?.iter().find(|f| f["id"] == id)
}

fn findings(agent: &common::Agent) -> Result<Value, String> {
    let (code, body) = agent.get("/findings")?;
    if code != 200 {
        return Err(format!("/findings: {code}"));
    }
    serde_json::from_str(&body).map_err(|e| e.to_string())
}

/// Rules of `table` in the namespace, as `iptables-save` prints them.
fn kernel_rules(ns: &Netns, save: &str, table: &str) -> u64 {
    let out = ns.exec_ok(save, &["-t", table]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .count() as u64
}

fn rules_lost_then_restored(backend: &str) {
    if !common::can_run(&["ip", &format!("iptables-{backend}-restore"), "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let ns = Netns::new(&format!("kpk-{backend}"));
    let dir = tempfile::tempdir().unwrap();
    let (rules, _) = common::generate_kube_rules(dir.path(), 100, 2, &[]);
    let restore = format!("iptables-{backend}-restore");
    let save = format!("iptables-{backend}-save");
    let text = std::fs::read_to_string(&rules).unwrap();
    ns.exec_input(&restore, &["-w"], &text);
    let (nat, filter) = (kernel_rules(&ns, &save, "nat"), kernel_rules(&ns, &save, "filter"));
    assert!(nat > 300 && filter > 0, "nat {nat} filter {filter}");

    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("iptables"));
    // kube-proxy synced 5 s ago and says it wrote what the kernel holds.
    kp.set("/metrics", Reply::ok(metrics(nat, filter, now() - 5.0, 0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args([
            "--iptables.interval",
            "1s",
            "--kube-proxy.interval",
            "1s",
            "--iptables.save-interval",
            "0",
        ])
        .start();
    let intact = common::poll("a comparison with every rule in place", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => {
                let snap = agent.snapshot()?;
                if snap["facts"]["iptables"]["backend_in_use"] != backend {
                    return Err(format!("backend {}", snap["facts"]["iptables"]["backend_in_use"]));
                }
                Ok(snap)
            }
            Some(x) => Err(format!("rules_lost while intact: {x:#}")),
        }
    });
    eprintln!("intact: backend {}", intact["facts"]["iptables"]["backend_in_use"]);

    // A firewall reload behind kube-proxy's back: the nat table flushed.
    ns.exec_ok(&format!("iptables-{backend}"), &["-w", "-t", "nat", "-F"]);
    let lost = common::poll("kube_proxy_rules_lost after the flush", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        finding(&f, "kube_proxy_rules_lost")
            .cloned()
            .ok_or_else(|| "not yet".to_string())
    });
    assert_eq!(lost["severity"], "critical", "{lost:#}");
    assert_eq!(
        lost["evidence"]["tables"]["nat"]["kube_proxy_reported"], nat as f64,
        "{lost:#}"
    );
    assert_eq!(lost["evidence"]["tables"]["nat"]["kernel"], 0, "{lost:#}");
    assert_eq!(lost["evidence"]["backend"], backend);
    let metrics_body = agent.get_ok("/metrics");
    assert_eq!(
        common::series(&metrics_body, "proxywatch_kube_proxy_iptables_rules{table=\"nat\"}"),
        Some(nat as f64)
    );
    assert_eq!(
        common::series(
            &metrics_body,
            "proxywatch_finding_severity{id=\"kube_proxy_rules_lost\"}"
        ),
        Some(3.0)
    );

    // kube-proxy's next full sync puts them back (here: the test does), and says so.
    ns.exec_input(&restore, &["-w"], &text);
    kp.set("/metrics", Reply::ok(metrics(nat, filter, now(), 0)));
    common::poll("kube_proxy_rules_lost cleared", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => Ok(()),
            Some(x) => Err(format!("{}", x["summary"])),
        }
    });
    agent.stop_cleanly();
}

#[test]
fn rules_flushed_behind_kube_proxy_are_lost_then_restored_nft() {
    rules_lost_then_restored("nft");
}

#[test]
fn rules_flushed_behind_kube_proxy_are_lost_then_restored_legacy() {
    rules_lost_then_restored("legacy");
}

#[test]
fn failing_syncs_warn_then_page_once_the_last_good_sync_is_old() {
    if !common::can_run(&["ip"]) {
        return;
    }
    let ns = Netns::new("kpfail");
    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("iptables"));
    let synced = now();
    kp.set("/metrics", Reply::ok(metrics(0, 0, synced, 0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args([
            "--kube-proxy.interval",
            "1s",
            "--kube-proxy.sync-failing-critical",
            "8s",
        ])
        .start();
    // Two readings without a failure: the window exists and says nothing.
    common::poll("a window of syncs", Duration::from_secs(20), || {
        let snap = agent.snapshot()?;
        let w = &snap["derived"]["kube_proxy_sync_failures"];
        if w.is_null() {
            return Err("no window yet".into());
        }
        assert_eq!(w["increase"], 0, "{w:#}");
        Ok(())
    });
    assert!(finding(&findings(&agent).unwrap(), "kube_proxy_sync_failing").is_none());

    // Every sync now fails: the counter rises, the last good sync stays where it was.
    let mut failures = 0;
    let warn = common::poll("kube_proxy_sync_failing", Duration::from_secs(20), || {
        failures += 1;
        kp.set("/metrics", Reply::ok(metrics(0, 0, synced, failures)));
        finding(&findings(&agent)?, "kube_proxy_sync_failing")
            .cloned()
            .ok_or_else(|| "not yet".to_string())
    });
    assert!(
        warn["evidence"]["failures_in_window"].as_u64().unwrap() >= 1,
        "{warn:#}"
    );
    let page = common::poll(
        "critical once the last good sync is older than 8 s",
        Duration::from_secs(30),
        || {
            failures += 1;
            kp.set("/metrics", Reply::ok(metrics(0, 0, synced, failures)));
            std::thread::sleep(Duration::from_millis(500));
            let f = finding(&findings(&agent)?, "kube_proxy_sync_failing")
                .cloned()
                .ok_or("cleared")?;
            if f["severity"] == "critical" {
                Ok(f)
            } else {
                Err(format!("{}", f["severity"]))
            }
        },
    );
    assert!(
        page["evidence"]["last_sync_age_seconds"].as_f64().unwrap() >= 8.0,
        "{page:#}"
    );
    let body = agent.get_ok("/metrics");
    assert!(common::series(&body, "proxywatch_kube_proxy_sync_failures_total").unwrap() >= 2.0);
    agent.stop_cleanly();
}

// --- rejected and dropped Service traffic, counted from the rules ------------------------------

/// kube-proxy's filter rules (iptables mode, v1.28+ shapes from its TestOverallIPTablesRules)
/// for a Service without endpoints (UDP 172.30.0.46:80: REJECT) and an
/// `externalTrafficPolicy: Local` NodePort without a local endpoint (UDP 30001: DROP), with
/// the jumps kube-proxy adds from the builtin chains.
const REJECT_RULES: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m udp -p udp -d 172.30.0.46 --dport 80 -j REJECT
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m udp -p udp --dport 30001 -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
"#;

/// The same for IPv6 (ip6tables), in ULA space: a Service without endpoints (UDP
/// [fd30::46]:80: REJECT) and the eTP=Local NodePort 30001 (DROP).
const REJECT_RULES6: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m udp -p udp -d fd30::46 --dport 80 -j REJECT
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m udp -p udp --dport 30001 -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
"#;

/// kube-proxy's older eTP=Local drop (up to v1.23, agent/probe/rule_counters/nat.rs): NodePort
/// 30003 of `ns1/svc1:p80` without a local endpoint goes through `KUBE-XLB-*` to
/// `KUBE-MARK-DROP` in nat, kubelet's `KUBE-FIREWALL` drops the mark in filter. Restored with
/// `--noflush` after the rules above (both families: nothing in it is an address).
const OLD_LAYOUT: &str = r#"*filter
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-XLB-AQI2S6QIMU7PVVRP - [0:0]
:KUBE-MARK-DROP - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p udp -m comment --comment "ns1/svc1:p80" -m udp --dport 30003 -j KUBE-XLB-AQI2S6QIMU7PVVRP
-A KUBE-XLB-AQI2S6QIMU7PVVRP -m comment --comment "ns1/svc1:p80 has no local endpoints" -j KUBE-MARK-DROP
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
COMMIT
"#;

/// One family's names and addresses for the traffic test.
struct Family {
    /// `iptables` or `ip6tables`.
    tool: &'static str,
    /// The agent's source label (`ipv4`, `ipv6`).
    label: &'static str,
    rules: &'static str,
    node: &'static str,
    client: &'static str,
    prefix: &'static str,
    service_cidr: &'static str,
    forwarding: &'static str,
    /// Python's address family and the two destinations.
    af: &'static str,
    service: &'static str,
    nodeport: &'static str,
    /// The NodePort of the older layout (nat `KUBE-XLB-*`).
    old_nodeport: &'static str,
    /// The agent's name for the Service's address (decoded from the rule).
    target: &'static str,
}

const V4: Family = Family {
    tool: "iptables",
    label: "ipv4",
    rules: REJECT_RULES,
    node: "10.77.0.1",
    client: "10.77.0.2",
    prefix: "24",
    service_cidr: "172.30.0.0/16",
    forwarding: "net.ipv4.ip_forward=1",
    af: "AF_INET",
    service: "('172.30.0.46', 80)",
    nodeport: "('10.77.0.1', 30001)",
    old_nodeport: "('10.77.0.1', 30003)",
    target: "172.30.0.46:80",
};

const V6: Family = Family {
    tool: "ip6tables",
    label: "ipv6",
    rules: REJECT_RULES6,
    node: "fd77::1",
    client: "fd77::2",
    prefix: "64",
    service_cidr: "fd30::/64",
    forwarding: "net.ipv6.conf.all.forwarding=1",
    af: "AF_INET6",
    service: "('fd30::46', 80)",
    nodeport: "('fd77::1', 30001)",
    old_nodeport: "('fd77::1', 30003)",
    target: "[fd30::46]:80",
};

/// Packets the rule of `chain` (`nat CHAIN` for another table than filter) whose line mentions `what` counted, from `iptables -L -v -x`.
fn listed_packets(ns: &Netns, tool: &str, chain: &str, what: &str) -> u64 {
    let (table, chain) = chain.split_once(' ').unwrap_or(("filter", chain));
    // -w: iptables-legacy takes the (host-wide) xtables lock even to list; wait for it.
    let out = ns.exec_ok(tool, &["-w", "-t", table, "-L", chain, "-v", "-x", "-n"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what} in {chain}:\n{text}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// One reference sample: the counter, timed when the listing returned. iptables-legacy waits
/// for the host-wide xtables lock before it reads (other tests' restores hold it, for seconds
/// under load): a time taken before the command would date the count too early.
fn sample(ns: &Netns, tool: &str, chain: &str, what: &str) -> (f64, u64) {
    let packets = listed_packets(ns, tool, chain, what);
    (now(), packets)
}

/// The agent's packets per second for one Service and reason (0 when it is not listed).
fn agent_rate(snap: &Value, service: &str, reason: &str) -> f64 {
    snap["derived"]["service_rejects"]["services"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["service"] == service && s["reason"] == reason)
        .map_or(0.0, |s| s["packets_per_second"].as_f64().unwrap())
}

/// The reference rate over [from, to] from (time, packets) samples: the samples nearest each end.
fn reference_rate(samples: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let near = |t: f64| {
        *samples
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .unwrap()
    };
    let (a, b) = (near(from), near(to));
    (b.1 - a.1) as f64 / (b.0 - a.0)
}

fn rejected_traffic_is_counted(backend: &str, fam: &Family) {
    let tool = format!("{}-{backend}", fam.tool);
    if !common::can_run(&["ip", &format!("{tool}-restore"), "python3"]) {
        return;
    }
    // No global lock: everything is in this test's own namespaces (legacy's xtables lock,
    // the one thing shared, is waited for with -w).
    let tag = if fam.label == "ipv6" { "6" } else { "" };
    let node = Netns::new(&format!("kprn{tag}-{backend}"));
    let client = Netns::new(&format!("kprc{tag}-{backend}"));
    // A veth pair between the client and the node; the node routes the service CIDR (back
    // out of the veth: any route will do, a Service address is never a real destination),
    // so packets to it pass FORWARD, where kube-proxy's KUBE-SERVICES rules are.
    node.exec_ok(
        "ip",
        &[
            "link",
            "add",
            "vn",
            "type",
            "veth",
            "peer",
            "name",
            "vc",
            "netns",
            &client.name,
        ],
    );
    // nodad: an IPv6 address is usable at once, not after duplicate address detection.
    let addr = |ns: &Netns, a: &str, dev: &str| {
        let cidr = format!("{a}/{}", fam.prefix);
        let mut args = vec!["addr", "add", cidr.as_str(), "dev", dev];
        if fam.label == "ipv6" {
            args.push("nodad");
        }
        ns.exec_ok("ip", &args);
    };
    addr(&node, fam.node, "vn");
    node.exec_ok("ip", &["link", "set", "vn", "up"]);
    // The namespace's own forwarding switch (per network namespace).
    node.exec_ok("sysctl", &["-qw", fam.forwarding]);
    addr(&client, fam.client, "vc");
    client.exec_ok("ip", &["link", "set", "vc", "up"]);
    node.exec_ok("ip", &["route", "add", fam.service_cidr, "via", fam.client]);
    client.exec_ok("ip", &["route", "add", "default", "via", fam.node]);
    node.exec_input(&format!("{tool}-restore"), &["-w"], fam.rules);
    node.exec_input(&format!("{tool}-restore"), &["-w", "--noflush"], OLD_LAYOUT);

    let agent = Serve::new()
        .in_netns(&node)
        .args(["--iptables.interval", "1s", "--iptables.save-interval", "0"])
        .start();
    common::poll("the counters read twice", Duration::from_secs(20), || {
        let snap = agent.snapshot()?;
        let r = &snap["derived"]["service_rejects"];
        let want = format!("{backend} {}", fam.label);
        if r["sources"]
            .as_array()
            .is_some_and(|s| s.iter().any(|x| x == want.as_str()))
        {
            Ok(())
        } else {
            Err(format!("{r:#}"))
        }
    });

    // The client sends 100 datagrams per second to each, on a fixed schedule.
    let dir = tempfile::tempdir().unwrap();
    let sender = common::Process::spawn(
        "udp sender",
        &mut client.command(
            "python3",
            &[
                "-c",
                &format!(
                    "import socket, time\n\
                     s = socket.socket(socket.{}, socket.SOCK_DGRAM)\n\
                     t = time.monotonic()\n\
                     while True:\n\
                     \x20   for a in ({}, {}, {}):\n\
                     \x20       try: s.sendto(b'x', a)\n\
                     \x20       except OSError: pass\n\
                     \x20   t += 0.01\n\
                     \x20   time.sleep(max(0, t - time.monotonic()))\n",
                    fam.af, fam.service, fam.nodeport, fam.old_nodeport
                ),
            ],
        ),
        &dir.path().join("sender.log"),
    );
    // Sample the kernel's counters (the reference) while the agent's window fills.
    let (mut rejects, mut drops, mut old_drops) = (Vec::new(), Vec::new(), Vec::new());
    let started = now();
    while now() - started < 40.0 {
        rejects.push(sample(&node, &tool, "KUBE-SERVICES", "has no endpoints"));
        drops.push(sample(&node, &tool, "KUBE-EXTERNAL-SERVICES", "has no local endpoints"));
        old_drops.push(sample(
            &node,
            &tool,
            "nat KUBE-XLB-AQI2S6QIMU7PVVRP",
            "has no local endpoints",
        ));
        std::thread::sleep(Duration::from_millis(250));
    }
    let snap = agent.snapshot().unwrap();
    let window = snap["derived"]["service_rejects"]["seconds"].as_f64().unwrap();
    let read_at = snap["probes"]["iptables"]["reading_timestamp_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("{:#}", snap["probes"]["iptables"]));
    assert!(window >= 29.0, "{:#}", snap["derived"]["service_rejects"]);
    for (service, reason, samples) in [
        ("ns6/svc6:p80", "no_endpoints", &rejects),
        ("ns2/svc2:p80", "no_local_endpoints", &drops),
        // Every packet, not only each flow's first: a dropped packet's conntrack entry is never
        // confirmed, so the next one passes nat again (the sender sends 100/s).
        ("ns1/svc1:p80", "no_local_endpoints", &old_drops),
    ] {
        let got = agent_rate(&snap, service, reason);
        let want = reference_rate(samples, read_at - window, read_at);
        eprintln!("{tool} {service} {reason}: agent {got:.2}/s, {tool} -L -v -x {want:.2}/s over {window:.1} s");
        assert!(want > 50.0, "the traffic reached the rule: {want}");
        assert!(
            (got - want).abs() <= 0.1 * want,
            "{service}: agent {got} vs kernel {want}"
        );
    }
    // The rules' addresses as decoded (the Service's, and the NodePort's any-address).
    let targets = |service: &str| {
        snap["derived"]["service_rejects"]["services"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["service"] == service)
            .map(|s| s["targets"].clone())
    };
    assert_eq!(targets("ns6/svc6:p80"), Some(serde_json::json!([fam.target])));
    assert_eq!(targets("ns2/svc2:p80"), Some(serde_json::json!(["*:30001"])));
    assert_eq!(
        targets("ns1/svc1:p80"),
        Some(serde_json::json!(["*"])),
        "the old layout's rule matches no address"
    );
    let f = finding(&findings(&agent).unwrap(), "service_traffic_rejected")
        .cloned()
        .expect("service_traffic_rejected while traffic is rejected");
    assert_eq!(f["severity"], "warning");
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("ns6/svc6:p80 udp") && summary.contains("ns2/svc2:p80 udp"),
        "{summary}"
    );
    let m = agent.get_ok("/metrics");
    let per_s = |reason: &str| {
        common::series(
            &m,
            &format!("proxywatch_service_rejected_packets_per_second{{protocol=\"udp\",reason=\"{reason}\"}}"),
        )
    };
    assert!(per_s("no_endpoints").unwrap() > 50.0, "{m}");
    assert!(per_s("no_local_endpoints").unwrap() > 50.0);
    assert_eq!(per_s("invalid"), None, "invalid is exported with protocol any");

    // Traffic stops: the rates go to 0 once the window has passed, and the finding clears.
    drop(sender);
    common::poll("rates back to 0", Duration::from_secs(60), || {
        let snap = agent.snapshot()?;
        let r = &snap["derived"]["service_rejects"];
        let busy: f64 = r["totals"]
            .as_array()
            .ok_or("no totals")?
            .iter()
            .map(|t| t["packets_per_second"].as_f64().unwrap_or(1.0))
            .sum();
        if busy == 0.0 && r["services"].as_array().is_some_and(|s| s.is_empty()) {
            Ok(())
        } else {
            Err(format!("{r:#}"))
        }
    });
    assert!(finding(&findings(&agent).unwrap(), "service_traffic_rejected").is_none());
    let m = agent.get_ok("/metrics");
    assert_eq!(
        common::series(
            &m,
            "proxywatch_service_rejected_packets_per_second{protocol=\"udp\",reason=\"no_endpoints\"}"
        ),
        Some(0.0),
        "a measured 0, exported"
    );
    agent.stop_cleanly();
}

/// Both families at once, each in its own pair of namespaces with its own agent: the rate
/// windows are the production ones (30 s), so one family after the other would double the
/// wait for nothing. A failure names its family (the thread's name, and the panic itself).
fn rejected_traffic_is_counted_in_both_families(backend: &str) {
    std::thread::scope(|s| {
        let runs: Vec<_> = [&V4, &V6]
            .into_iter()
            .map(|fam| {
                let run = std::thread::Builder::new()
                    .name(format!("{backend} {}", fam.label))
                    .spawn_scoped(s, move || rejected_traffic_is_counted(backend, fam))
                    .unwrap();
                (fam.label, run)
            })
            .collect();
        let failed: Vec<&str> = runs
            .into_iter()
            .filter_map(|(label, run)| run.join().is_err().then_some(label))
            .collect();
        assert!(
            failed.is_empty(),
            "{backend}: failed in {failed:?} (their panics above)"
        );
    });
}

#[test]
fn rejected_and_dropped_service_traffic_matches_the_kernels_counters_nft() {
    rejected_traffic_is_counted_in_both_families("nft");
}

#[test]
fn rejected_and_dropped_service_traffic_matches_the_kernels_counters_legacy() {
    rejected_traffic_is_counted_in_both_families("legacy");
}

/// kube-proxy's nftables mode (a generated `kube-proxy` table with its `no-endpoint-services`
/// and `no-endpoint-nodeports` maps, no iptables chain) keeps no counter on its reject and
/// drop verdicts: the agent says the counters are unavailable and exports no rate, never a 0.
#[test]
fn nftables_mode_has_no_reject_counters_and_no_rate_is_invented() {
    if !common::can_run(&["ip", "nft", "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let ns = Netns::new("kprnft");
    let dir = tempfile::tempdir().unwrap();
    let gen = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_nft.py");
    let table = dir.path().join("kp.nft");
    let out = common::run(
        "python3",
        &[gen.to_str().unwrap(), "--services", "50", "--endpoints", "1"],
    );
    std::fs::write(&table, out.stdout).unwrap();
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
    let agent = Serve::new()
        .in_netns(&ns)
        .args(["--iptables.interval", "1s", "--iptables.save-interval", "0"])
        .start();
    let r = common::poll("the counters' verdict", Duration::from_secs(20), || {
        let snap = agent.snapshot()?;
        let r = snap["derived"]["service_rejects"].clone();
        if r.is_null() {
            return Err("not yet".into());
        }
        Ok(r)
    });
    assert_eq!(r["sources"], serde_json::json!([]), "{r:#}");
    assert!(
        r["unavailable"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u.as_str().unwrap().contains("nft ipv4")),
        "{r:#}"
    );
    let m = agent.get_ok("/metrics");
    assert!(
        !m.contains("proxywatch_service_rejected_packets"),
        "no rate where nothing is counted"
    );
    assert!(finding(&findings(&agent).unwrap(), "service_traffic_rejected").is_none());
    agent.stop_cleanly();
}

/// What a stand-in in nftables mode reports: no rule counts (kube-proxy has none there), the
/// last sync and the nftables sync failures.
fn nft_metrics(last_sync: f64) -> String {
    format!(
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last_sync}\n\
         # TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter\n\
         kubeproxy_sync_proxy_rules_nftables_sync_failures_total 0\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds 1.7e9\n"
    )
}

/// nftables mode: kube-proxy's table deleted behind the stand-in's back (`nft delete table`,
/// in the test's own namespace) is `kube_proxy_rules_lost`, critical within a few probe
/// intervals; the table written again by a sync clears it.
#[test]
fn nftables_table_deleted_behind_kube_proxy_is_lost_then_restored() {
    if !common::can_run(&["ip", "nft", "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let ns = Netns::new("kpk-nftables");
    let dir = tempfile::tempdir().unwrap();
    let gen = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_nft.py");
    let table = dir.path().join("kube-proxy.nft");
    let out = common::run(
        "python3",
        &[gen.to_str().unwrap(), "--services", "20", "--endpoints", "2"],
    );
    std::fs::write(&table, out.stdout).unwrap();
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);

    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("nftables"));
    kp.set("/metrics", Reply::ok(nft_metrics(now() - 5.0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args(["--nftables.interval", "1s", "--kube-proxy.interval", "1s"])
        .start();
    common::poll("the table read, nothing lost", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        if let Some(x) = finding(&f, "kube_proxy_rules_lost") {
            return Err(format!("rules_lost with the table in place: {x:#}"));
        }
        let snap = agent.snapshot()?;
        match snap["facts"]["nftables"]["tables"].as_array() {
            Some(t) if !t.is_empty() => Ok(()),
            _ => Err(format!("no table read yet: {}", snap["probes"]["nftables"])),
        }
    });

    ns.exec_ok("nft", &["delete", "table", "ip", "kube-proxy"]);
    let lost = common::poll(
        "kube_proxy_rules_lost after the delete",
        Duration::from_secs(20),
        || {
            let f = findings(&agent)?;
            finding(&f, "kube_proxy_rules_lost")
                .cloned()
                .ok_or_else(|| "not yet".to_string())
        },
    );
    assert_eq!(lost["severity"], "critical", "{lost:#}");
    assert_eq!(lost["evidence"]["kernel_tables"], serde_json::json!([]), "{lost:#}");
    assert_eq!(
        common::series(
            &agent.get_ok("/metrics"),
            "proxywatch_finding_severity{id=\"kube_proxy_rules_lost\"}"
        ),
        Some(3.0)
    );

    // kube-proxy's next sync writes the table again (here: the test does), and says so.
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
    kp.set("/metrics", Reply::ok(nft_metrics(now())));
    common::poll("kube_proxy_rules_lost cleared", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => Ok(()),
            Some(x) => Err(format!("still {x:#}")),
        }
    });
}

// --- the conntrack-invalid drop, counted by kube-proxy's nfacct object ------------------------

/// kube-proxy's KUBE-FORWARD (v1.29+, its TestOverallIPTablesRules): the invalid drop counts
/// into the nfacct object `ct_state_invalid_dropped_pkts`.
const INVALID_RULES: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
"#;

/// Creates the nfacct object as kube-proxy does (NFNL_MSG_ACCT_NEW over nfnetlink; no `nfacct`
/// tool needed), in the namespace it runs in.
const NFACCT_NEW: &str = r#"
import socket, struct
name = b"ct_state_invalid_dropped_pkts\0"
attr = struct.pack("=HH", 4 + len(name), 1) + name
attr += b"\0" * ((4 - len(attr) % 4) % 4)
body = struct.pack("=BBH", 0, 0, 0) + attr
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
# NFNL_SUBSYS_ACCT 7, NFNL_MSG_ACCT_NEW 0; NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE.
s.send(struct.pack("=LHHLL", 16 + len(body), 7 << 8, 1 | 4 | 0x400, 1, 0) + body)
err = struct.unpack("=i", s.recv(4096)[16:20])[0]
assert err == 0, err
"#;

/// 100 TCP segments per second with SYN and FIN both set (conntrack holds them INVALID), from
/// the client to an address the node forwards.
const INVALID_SENDER: &str = r#"
import socket, struct, time
src, dst = "10.77.0.2", "172.30.0.99"
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF
tcp = struct.pack("!HHLLBBHHH", 40000, 80, 1, 0, 5 << 4, 0x03, 1024, 0, 0)
ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
tcp = tcp[:16] + struct.pack("!H", csum(ph + tcp)) + tcp[18:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
t = time.monotonic()
while True:
    try:
        s.sendto(tcp, (dst, 0))
    except OSError:
        pass
    t += 0.01
    time.sleep(max(0, t - time.monotonic()))
"#;

fn invalid_drops_are_counted_by_the_nfacct_object(backend: &str) {
    let tool = format!("iptables-{backend}");
    if !common::can_run(&["ip", &format!("{tool}-restore"), "python3"]) {
        return;
    }
    // No global lock: as for the rejected traffic above.
    let node = Netns::new(&format!("kpin-{backend}"));
    let client = Netns::new(&format!("kpic-{backend}"));
    node.exec_ok(
        "ip",
        &[
            "link",
            "add",
            "vn",
            "type",
            "veth",
            "peer",
            "name",
            "vc",
            "netns",
            &client.name,
        ],
    );
    node.exec_ok("ip", &["addr", "add", "10.77.0.1/24", "dev", "vn"]);
    node.exec_ok("ip", &["link", "set", "vn", "up"]);
    node.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    client.exec_ok("ip", &["addr", "add", "10.77.0.2/24", "dev", "vc"]);
    client.exec_ok("ip", &["link", "set", "vc", "up"]);
    node.exec_ok("ip", &["route", "add", "172.30.0.0/16", "via", "10.77.0.2"]);
    client.exec_ok("ip", &["route", "add", "default", "via", "10.77.0.1"]);
    node.exec_ok("python3", &["-c", NFACCT_NEW]);
    node.exec_input(&format!("{tool}-restore"), &["-w"], INVALID_RULES);

    let agent = Serve::new()
        .in_netns(&node)
        .args(["--iptables.interval", "1s", "--iptables.save-interval", "0"])
        .start();
    common::poll("the nfacct object read twice", Duration::from_secs(20), || {
        let snap = agent.snapshot()?;
        let r = &snap["derived"]["service_rejects"];
        match r["sources"].as_array() {
            Some(s) if s.iter().any(|x| x == "nfacct any") => Ok(()),
            _ => Err(format!("{r:#}")),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let sender = common::Process::spawn(
        "invalid tcp sender",
        &mut client.command("python3", &["-c", INVALID_SENDER]),
        &dir.path().join("sender.log"),
    );
    let mut samples = Vec::new();
    let started = now();
    while now() - started < 40.0 {
        samples.push(sample(&node, &tool, "KUBE-FORWARD", "nfacct"));
        std::thread::sleep(Duration::from_millis(250));
    }
    let snap = agent.snapshot().unwrap();
    let r = &snap["derived"]["service_rejects"];
    let window = r["seconds"].as_f64().unwrap();
    let read_at = snap["probes"]["iptables"]["reading_timestamp_seconds"]
        .as_f64()
        .unwrap();
    let got = r["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["reason"] == "invalid" && t["protocol"] == "any")
        .and_then(|t| t["packets_per_second"].as_f64())
        .unwrap_or_else(|| panic!("{r:#}"));
    let want = reference_rate(&samples, read_at - window, read_at);
    eprintln!("{tool} invalid: agent {got:.2}/s (nfacct object), {tool} -L -v -x {want:.2}/s over {window:.1} s");
    assert!(want > 50.0, "the segments reached the rule: {want}");
    // The rule and the object count the same packets: once, not twice.
    assert!((got - want).abs() <= 0.1 * want, "agent {got} vs kernel {want}");
    let m = agent.get_ok("/metrics");
    assert!(
        common::series(
            &m,
            "proxywatch_service_rejected_packets_per_second{protocol=\"any\",reason=\"invalid\"}"
        )
        .unwrap()
            > 50.0,
        "{m}"
    );
    drop(sender);
    agent.stop_cleanly();
}

#[test]
fn invalid_drops_are_counted_by_kube_proxys_nfacct_object_nft() {
    invalid_drops_are_counted_by_the_nfacct_object("nft");
}

#[test]
fn invalid_drops_are_counted_by_kube_proxys_nfacct_object_legacy() {
    invalid_drops_are_counted_by_the_nfacct_object("legacy");
}
