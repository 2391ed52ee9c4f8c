//! Stale conntrack entries end to end on the real kernel, once per kube-proxy
//! mode the kernel here can run (iptables on the nft backend, and nftables):
//! a "node" namespace with kube-proxy-shaped rules for a UDP service (port 53,
//! also a NodePort) and a TCP service, each with two "pod" namespaces behind
//! veth pairs running real echo servers (python3); real traffic from the node
//! through the service addresses and the NodePort from fixed source ports;
//! then one endpoint of each service removed the way kube-proxy removes it (a
//! new rule set committed without it) while its conntrack entries stay and the
//! clients keep sending. The agent (serve in the node namespace) must report
//! exactly the entries `conntrack -L` shows NATed to the removed pods, per
//! service (the NodePort on the node address it was sent to), raise the
//! finding after two checks (critical: udp/53), and resolve after
//! `conntrack -D`. A flow DNATed to the removed pod through a non-service
//! address is never counted. IPVS mode is proven in a VM (tests/vm/vm_kernel.rs).
use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Netns;
use serde_json::Value;

const DNS_IP: &str = "10.96.0.10";
const WEB_IP: &str = "10.96.0.20";
/// The DNS service is also NodePort 30053/udp; clients reach it on this node address.
const NODE_IP: &str = "10.250.1.1";
const NODE_PORT: u16 = 30053;

/// How kube-proxy's rules are written and committed.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    IptablesNft,
    Nftables,
}

impl Mode {
    fn load(self, ns: &Netns, dns: &[u8], web: &[u8]) {
        match self {
            Mode::IptablesNft => restore(ns, &rules(dns, web)),
            Mode::Nftables => nft_load(ns, &nft_rules(dns, web)),
        }
    }

    fn source(self) -> &'static str {
        match self {
            Mode::IptablesNft => "iptables-nft",
            Mode::Nftables => "nftables",
        }
    }
}
/// Pod i (1..=4) is 10.250.i.2 behind the node's veth 10.250.i.1.
fn pod_ip(i: u8) -> String {
    format!("10.250.{i}.2")
}

/// kube-proxy's nat rules (iptables mode) for the two services and the given endpoints.
fn rules(dns: &[u8], web: &[u8]) -> String {
    let eps = |svc: &str, pods: &[u8]| -> Vec<(String, String)> {
        pods.iter()
            .map(|&e| (format!("KUBE-SEP-{svc}P{e}"), pod_ip(e)))
            .collect()
    };
    let mut t = common::KubeNat::new();
    t.chain("KUBE-NODEPORTS")
        .chain("KUBE-EXT-DNSDNSDNSDNSDNS1")
        .rule(&format!(
            "-A KUBE-NODEPORTS -p udp -m comment --comment \"ns/dns:dns\" -m udp --dport {NODE_PORT} -j KUBE-EXT-DNSDNSDNSDNSDNS1"
        ))
        .rule("-A KUBE-EXT-DNSDNSDNSDNSDNS1 -j KUBE-MARK-MASQ")
        .rule("-A KUBE-EXT-DNSDNSDNSDNSDNS1 -j KUBE-SVC-DNSDNSDNSDNSDNS1")
        // Not kube-proxy's: a DNAT to the DNS pods through a non-service address.
        .rule("-A OUTPUT -d 10.123.0.1/32 -p udp -m udp --dport 53 -j DNAT --to-destination 10.250.1.2:53")
        .service("DNSDNSDNSDNSDNS1", DNS_IP, "udp", 53, 53, &eps("DNSDNSDNSDNSDNS1", dns))
        .service("WEBWEBWEBWEBWEB1", WEB_IP, "tcp", 80, 8080, &eps("WEBWEBWEBWEBWEB1", web))
        .rule("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS");
    t.render()
}

/// kube-proxy's `table ip kube-proxy` (nftables mode, the layout of kubernetes'
/// pkg/proxy/nftables) for the two services and the given endpoints, replacing
/// the table in one transaction as kube-proxy's resync does.
fn nft_rules(dns: &[u8], web: &[u8]) -> String {
    let dns_svc = "service-DNSDNSDN-ns/dns/udp/dns";
    let web_svc = "service-WEBWEBWE-ns/web/tcp/http";
    let dns_ext = "external-DNSDNSDN-ns/dns/udp/dns";
    let mut chains: Vec<(String, &str)> = vec![
        (
            "nat-output".into(),
            "type nat hook output priority -100; policy accept;",
        ),
        (
            "nat-prerouting".into(),
            "type nat hook prerouting priority -100; policy accept;",
        ),
        ("mark-for-masquerade".into(), ""),
        ("services".into(), ""),
        (dns_ext.into(), ""),
        (dns_svc.into(), ""),
        (web_svc.into(), ""),
    ];
    let mut rules: Vec<(String, String)> = vec![
        ("nat-output".into(), "jump services".into()),
        // Not kube-proxy's: a DNAT to the DNS pods through a non-service address.
        (
            "nat-output".into(),
            "ip daddr 10.123.0.1 udp dport 53 dnat to 10.250.1.2:53".into(),
        ),
        ("nat-prerouting".into(), "jump services".into()),
        ("mark-for-masquerade".into(), "meta mark set meta mark | 0x4000".into()),
        (
            "services".into(),
            "ip daddr . meta l4proto . th dport vmap @service-ips".into(),
        ),
        (
            "services".into(),
            format!("ip daddr {NODE_IP} meta l4proto . th dport vmap @service-nodeports"),
        ),
        (dns_ext.into(), "jump mark-for-masquerade".into()),
        (dns_ext.into(), format!("goto {dns_svc}")),
    ];
    for (svc, ip, proto, port, tport, eps) in [
        (dns_svc, DNS_IP, "udp", 53, 53, dns),
        (web_svc, WEB_IP, "tcp", 80, 8080, web),
    ] {
        let ep_chain = |e: u8| format!("endpoint-{}__{}/{tport}", &svc["service-".len()..], pod_ip(e));
        rules.push((
            svc.into(),
            format!("ip daddr {ip} {proto} dport {port} ip saddr != 10.244.0.0/16 jump mark-for-masquerade"),
        ));
        let vmap: Vec<String> = eps
            .iter()
            .enumerate()
            .map(|(k, e)| format!("{k} : goto {}", ep_chain(*e)))
            .collect();
        rules.push((
            svc.into(),
            format!("numgen random mod {} vmap {{ {} }}", eps.len(), vmap.join(", ")),
        ));
        for &e in eps {
            chains.push((ep_chain(e), ""));
            rules.push((ep_chain(e), format!("ip saddr {} jump mark-for-masquerade", pod_ip(e))));
            rules.push((
                ep_chain(e),
                format!("meta l4proto {proto} dnat to {}:{tport}", pod_ip(e)),
            ));
        }
    }
    let mut t = String::from("table ip kube-proxy {}\ndelete table ip kube-proxy\ntable ip kube-proxy {\n");
    for (c, hook) in &chains {
        t.push_str(&format!("\tchain {c} {{ {hook} }}\n"));
    }
    t.push_str(&format!(
        "\tmap service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; elements = {{ \
         {DNS_IP} . udp . 53 : goto {dns_svc}, {WEB_IP} . tcp . 80 : goto {web_svc} }} }}\n\
         \tmap service-nodeports {{ type inet_proto . inet_service : verdict; elements = {{ udp . {NODE_PORT} : goto {dns_ext} }} }}\n}}\n"
    ));
    for (c, r) in rules {
        t.push_str(&format!("add rule ip kube-proxy {c} {r}\n"));
    }
    t
}

fn nft_load(ns: &Netns, text: &str) {
    ns.exec_input("nft", &["-f", "-"], text);
}

fn restore(ns: &Netns, text: &str) {
    ns.exec_input("iptables-nft-restore", &[], text);
}

/// The agent's next `/snapshot` for which `ok` holds, within 30 s; else the last one, as `shown`
/// prints it, fails the test.
fn wait_for(agent: &common::Agent, what: &str, ok: &dyn Fn(&Value) -> bool, shown: &dyn Fn(&Value) -> String) -> Value {
    common::poll(what, Duration::from_secs(30), || {
        let doc = agent.snapshot()?;
        if ok(&doc) {
            Ok(doc)
        } else {
            Err(shown(&doc))
        }
    })
}

/// A python3 script in `ns`, stopped by its PID when the test ends, also on panic.
fn spawn(ns: &Netns, script: &str) -> common::Process {
    let child = ns
        .command("python3", &["-u", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::Process::new("python3", child, None)
}

const UDP_ECHO: &str = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 53))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
"#;

const TCP_ECHO: &str = r#"
import socketserver
class H(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            d = self.request.recv(2048)
            if not d:
                return
            self.request.sendall(d)
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S(("0.0.0.0", 8080), H).serve_forever()
"#;

/// 16 UDP clients to the DNS service and 12 to its NodePort (fixed source
/// ports), one to the non-service DNAT, and 12 TCP connections to the web
/// service, all sending every 200 ms.
const CLIENT: &str = r#"
import socket, time
udp = []
for p in range(40000, 40028):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", p))
    s.setblocking(False)
    udp.append((s, ("10.96.0.10", 53) if p < 40016 else ("10.250.1.1", 30053)))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 41000))
s.setblocking(False)
udp.append((s, ("10.123.0.1", 53)))
tcp = []
while len(tcp) < 12:
    try:
        c = socket.create_connection(("10.96.0.20", 80), timeout=5)
    except OSError:
        time.sleep(0.2)  # the echo servers may still be starting
        continue
    c.setblocking(False)
    tcp.append(c)
while True:
    for s, dst in udp:
        try:
            s.sendto(b"q", dst)
            s.recv(64)
        except OSError:
            pass
    for c in tcp:
        try:
            c.send(b"x")
            c.recv(64)
        except OSError:
            pass
    time.sleep(0.2)
"#;

/// Entries `conntrack -L` lists with this original destination and reply
/// source (IPv6 when the address is: conntrack lists IPv4 by default).
fn conntrack_count(ns: &Netns, proto: &str, orig_dst: &str, reply_src: &str) -> u64 {
    let mut args = vec!["-L", "-p", proto, "--orig-dst", orig_dst, "--reply-src", reply_src];
    if orig_dst.contains(':') {
        args.extend(["-f", "ipv6"]);
    }
    let out = ns.command("conntrack", &args).stderr(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(proto))
        .count() as u64
}

fn finding(doc: &Value) -> Option<&Value> {
    finding_of(doc, "conntrack_stale_endpoint_entries")
}

fn finding_of<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array()?.iter().find(|f| f["id"] == id)
}

const DRAINING: &str = "conntrack_draining_to_removed_endpoints";

#[test]
fn stale_entries_are_reported_persist_and_resolve() {
    if common::can_run(&["ip", "iptables-nft-restore", "conntrack", "python3"]) {
        scenario(Mode::IptablesNft, "ct");
    }
}

#[test]
fn stale_entries_are_reported_persist_and_resolve_nftables_mode() {
    if common::can_run(&["ip", "nft", "conntrack", "python3"]) {
        scenario(Mode::Nftables, "cn");
    }
}

fn scenario(mode: Mode, tag: &str) {
    let node = Netns::new(&format!("{tag}sn"));
    let pods: Vec<Netns> = (1..=4).map(|i| Netns::new(&format!("{tag}p{i}"))).collect();
    for (i, pod) in (1u8..=4).zip(&pods) {
        let veth = format!("pwv{i}-{}", std::process::id() % 10_000);
        node.exec_ok(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
            ],
        );
        node.exec_ok("ip", &["addr", "add", &format!("10.250.{i}.1/24"), "dev", &veth]);
        node.exec_ok("ip", &["link", "set", &veth, "up"]);
        pod.exec_ok("ip", &["addr", "add", &format!("{}/24", pod_ip(i)), "dev", "eth0"]);
        pod.exec_ok("ip", &["link", "set", "eth0", "up"]);
        pod.exec_ok("ip", &["route", "add", "default", "via", &format!("10.250.{i}.1")]);
    }
    // The service addresses need a route out of the node for OUTPUT's DNAT to see them.
    node.exec_ok("ip", &["route", "add", "10.96.0.0/16", "dev", "lo"]);
    node.exec_ok("ip", &["route", "add", "10.123.0.0/16", "dev", "lo"]);
    mode.load(&node, &[1, 2], &[3, 4]);

    let mut procs = vec![
        spawn(&pods[0], UDP_ECHO),
        spawn(&pods[1], UDP_ECHO),
        spawn(&pods[2], TCP_ECHO),
        spawn(&pods[3], TCP_ECHO),
    ];
    procs.push(spawn(&node, CLIENT));

    // Every client has its flow, NATed to one of the two pods of its service
    // (16 UDP ports, 12 NodePort ports and 12 connections, split at random).
    // Waited for: under load the echo servers and the client start slowly.
    let count = |p: &str, dst: &str, pod: u8| conntrack_count(&node, p, dst, &pod_ip(pod));
    let started = Instant::now();
    let (dead_udp, dead_tcp, dead_np) = loop {
        let flows = [
            count("udp", DNS_IP, 1) + count("udp", DNS_IP, 2),
            count("udp", NODE_IP, 1) + count("udp", NODE_IP, 2),
            count("tcp", WEB_IP, 3) + count("tcp", WEB_IP, 4),
            count("udp", "10.123.0.1", 1),
        ];
        if flows == [16, 12, 12, 1] {
            break (
                count("udp", DNS_IP, 1),
                count("tcp", WEB_IP, 3),
                count("udp", NODE_IP, 1),
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flows (ClusterIP udp, NodePort udp, tcp, non-service): {flows:?}, want [16, 12, 12, 1]"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // The rare all-to-one split (1 in 65,536 for UDP, 1 in 4,096 for TCP) fails plainly.
    assert!(
        dead_udp > 0 && dead_tcp > 0,
        "flows to pod 1: {dead_udp}, to pod 3: {dead_tcp}"
    );

    let port = 9893;
    let listen = format!("127.0.0.1:{port}");
    let agent = common::Serve::new()
        .in_netns(&node)
        .listen(&listen)
        .args(common::NO_KUBE_PROXY)
        .args(["--conntrack-stale.interval", "1s", "--iptables.save-interval", "0"])
        .no_wait()
        .start();

    let wait = |what: &str, ok: &dyn Fn(&Value) -> bool| -> Value {
        wait_for(&agent, what, ok, &|last| {
            format!(
                "conntrack_stale facts: {} probe: {}",
                last["facts"]["conntrack_stale"], last["probes"]["conntrack_stale"]
            )
        })
    };

    // All endpoints present: nothing stale, the metric at 0.
    let doc = wait("a first check", &|d| {
        d["facts"]["conntrack_stale"]["dst_nat_entries"].as_u64() > Some(0)
    });
    assert_eq!(doc["facts"]["conntrack_stale"]["stale_entries"]["udp"], 0);
    assert_eq!(doc["facts"]["conntrack_stale"]["draining_entries"]["tcp"], 0);
    assert!(finding(&doc).is_none(), "no finding while nothing is stale");
    assert!(finding_of(&doc, DRAINING).is_none(), "nor draining");

    assert_eq!(doc["facts"]["conntrack_stale"]["source"], mode.source());
    assert_eq!(doc["facts"]["conntrack_stale"]["node_ports"], 1);
    assert_eq!(doc["facts"]["conntrack_stale"]["endpoints"], 6);

    // kube-proxy removes pod 1 and pod 3: a new rule set without them.
    mode.load(&node, &[2], &[4]);
    // DNS, its NodePort and web: one endpoint each.
    let gen_after = |d: &Value| d["facts"]["conntrack_stale"]["endpoints"] == 3;
    let doc = wait("the finding after two checks", &|d| {
        gen_after(d) && finding(d).is_some_and(|f| f["severity"] == "critical") && finding_of(d, DRAINING).is_some()
    });
    let facts = &doc["facts"]["conntrack_stale"];
    // Exactly what conntrack -L shows NATed to the removed pods, per service.
    let want_udp = conntrack_count(&node, "udp", DNS_IP, &pod_ip(1));
    let want_tcp = conntrack_count(&node, "tcp", WEB_IP, &pod_ip(3));
    let want_np = conntrack_count(&node, "udp", NODE_IP, &pod_ip(1));
    assert_eq!(want_udp, dead_udp, "the UDP clients kept their entries");
    assert_eq!(want_np, dead_np, "the NodePort clients kept their entries");
    eprintln!(
        "{}: stale udp {want_udp} via the ClusterIP, {want_np} via the NodePort; tcp {want_tcp}",
        mode.source()
    );
    assert_eq!(facts["stale_entries"]["udp"], want_udp + want_np, "{facts}");
    // The open TCP connections to the pod that left the rules: draining, not stale.
    assert_eq!(facts["draining_entries"]["tcp"], want_tcp, "{facts}");
    assert!(facts["stale_entries"].get("tcp").is_none(), "{facts}");
    let groups: Vec<&Value> = facts["stale"]
        .as_array()
        .unwrap()
        .iter()
        .chain(facts["draining"].as_array().unwrap())
        .collect();
    assert_eq!(groups.len(), if want_np > 0 { 3 } else { 2 }, "{facts}");
    assert_eq!(facts["draining_groups"], 1, "{facts}");
    let group = |svc: &str| *groups.iter().find(|g| g["service"] == svc).unwrap();
    assert_eq!(group("10.96.0.10:53/udp")["endpoint"], "10.250.1.2:53");
    assert_eq!(group("10.96.0.10:53/udp")["entries"], want_udp);
    assert_eq!(group("10.96.0.20:80/tcp")["endpoint"], "10.250.3.2:8080");
    assert_eq!(group("10.96.0.20:80/tcp")["entries"], want_tcp);
    if want_np > 0 {
        // NodePort traffic: the group names the node address the clients sent to.
        let np = group("10.250.1.1:30053/udp");
        assert_eq!(
            (np["endpoint"].as_str(), &np["node_port"]),
            (Some("10.250.1.2:53"), &Value::Bool(true))
        );
        assert_eq!(np["entries"], want_np);
    }
    // The non-service DNAT to pod 1 is never counted.
    assert_eq!(conntrack_count(&node, "udp", "10.123.0.1", &pod_ip(1)), 1);
    let f = finding(&doc).unwrap();
    assert_eq!(f["evidence"]["stale_entries"], want_udp + want_np);
    // Within the drain window (5 min by default): info, and never a delete.
    let d = finding_of(&doc, DRAINING).unwrap();
    assert_eq!(d["severity"], "info", "{d}");
    assert_eq!(d["evidence"]["draining_entries"], want_tcp, "{d}");
    assert_eq!(
        d["evidence"]["services"][0]["removed_endpoint"], "10.250.3.2:8080",
        "{d}"
    );
    assert!(
        d["remediation"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| !r.as_str().unwrap().contains("conntrack -D")),
        "no delete within the drain window: {d}"
    );
    // The page's history of stale entries: 0 while every endpoint was there, then the count.
    let stale_series = |d: &Value| -> Vec<(f64, f64)> {
        d["derived"]["series"]["stale_entries"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let series = stale_series(&doc);
    assert_eq!(
        series.last().map(|p| p.1),
        Some((want_udp + want_np) as f64),
        "{series:?}"
    );
    assert_eq!(series.first().map(|p| p.1), Some(0.0), "{series:?}");
    assert!(series.windows(2).all(|w| w[1].0 > w[0].0), "{series:?}");
    // The command deletes the largest pair (which one depends on the random split).
    let largest = &f["evidence"]["services"][0];
    let cmd = match largest["service"].as_str().unwrap() {
        "10.96.0.10:53/udp" => "conntrack -D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.250.1.2",
        "10.250.1.1:30053/udp" => {
            "conntrack -D -p udp --orig-dst 10.250.1.1 --orig-port-dst 30053 --reply-src 10.250.1.2"
        }
        other => panic!("largest pair {other}: {f}"),
    };
    assert!(f["remediation"][0].as_str().unwrap().contains(cmd), "{f}");
    let metrics = agent.get_200("/metrics").unwrap();
    assert!(
        metrics.contains(&format!(
            "proxywatch_conntrack_stale_entries{{protocol=\"udp\"}} {}",
            want_udp + want_np
        )),
        "{metrics}"
    );

    // A second agent with a short drain window (1 s): the same pair past it is
    // a warning, and only then comes the delete.
    let short = port + 1;
    let short_agent = common::Serve::new()
        .in_netns(&node)
        .listen(&format!("127.0.0.1:{short}"))
        .args(common::NO_KUBE_PROXY)
        .args(["--conntrack-stale.interval", "1s", "--iptables.save-interval", "0"])
        .args(["--conntrack-stale.drain-window", "1s"])
        .no_wait()
        .start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let warned = loop {
        let doc: Option<Value> = short_agent
            .get_200("/snapshot")
            .and_then(|b| serde_json::from_str(&b).ok());
        if let Some(d) = doc.as_ref().and_then(|d| finding_of(d, DRAINING)) {
            if d["severity"] == "warning" {
                break d.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no draining warning past a 1 s window in 30 s: {doc:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        warned["remediation"][1]
            .as_str()
            .unwrap()
            .contains("conntrack -D -p tcp --orig-dst 10.96.0.20 --orig-port-dst 80 --reply-src 10.250.3.2"),
        "{warned}"
    );
    assert_eq!(warned["evidence"]["pairs_past_drain_window"], 1, "{warned}");

    // The SRE deletes the stale entries: the clients' next packets are NATed to
    // the remaining pods, and the finding resolves.
    for (p, dst, src) in [
        ("udp", DNS_IP, pod_ip(1)),
        ("udp", NODE_IP, pod_ip(1)),
        ("tcp", WEB_IP, pod_ip(3)),
    ] {
        let _ = node
            .command("conntrack", &["-D", "-p", p, "--orig-dst", dst, "--reply-src", &src])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let doc = wait("the finding to resolve", &|d| {
        finding(d).is_none()
            && d["facts"]["conntrack_stale"]["stale_groups"] == 0
            && d["facts"]["conntrack_stale"]["draining_groups"] == 0
    });
    assert_eq!(doc["facts"]["conntrack_stale"]["stale_entries"]["udp"], 0);
    assert!(
        doc["facts"]["conntrack_stale"]["dst_nat_entries"].as_u64() > Some(0),
        "the clients still send"
    );
    let after = stale_series(&doc);
    assert_eq!(after.last().map(|p| p.1), Some(0.0), "resolved: {after:?}");
    assert!(after.len() > series.len(), "the history kept: {after:?}");
    drop(procs);
}

/// IPv6 on the real kernel: ip6tables-nft rules (the ip6 family's nat table
/// over netlink) and IPv6 conntrack entries (the AF_INET6 ctnetlink dump,
/// 16-byte addresses), made with `conntrack -I --dst-nat` (no traffic: the
/// end-to-end tests above carry IPv4 traffic). Counts equal `conntrack -L`.
#[test]
fn ipv6_services_and_entries() {
    if !common::can_run(&["ip", "ip6tables-nft-restore", "conntrack"]) {
        return;
    }
    let node = Netns::new("c6sn");
    let rules =
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
        :KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SVC-DNS6 - [0:0]\n:KUBE-SVC-WEB6 - [0:0]\n\
        :KUBE-SEP-DNS6A - [0:0]\n:KUBE-SEP-DNS6B - [0:0]\n:KUBE-SEP-WEB6A - [0:0]\n\
        -A OUTPUT -j KUBE-SERVICES\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n\
        -A KUBE-SERVICES -d fd00:10:96::a/128 -p udp -m udp --dport 53 -j KUBE-SVC-DNS6\n\
        -A KUBE-SERVICES -d fd00:10:96::14/128 -p tcp -m tcp --dport 80 -j KUBE-SVC-WEB6\n\
        -A KUBE-SVC-DNS6 -m statistic --mode random --probability 0.5 -j KUBE-SEP-DNS6A\n\
        -A KUBE-SVC-DNS6 -j KUBE-SEP-DNS6B\n\
        -A KUBE-SEP-DNS6A -s fd00:10:244::2/128 -j KUBE-MARK-MASQ\n\
        -A KUBE-SEP-DNS6A -p udp -m udp -j DNAT --to-destination [fd00:10:244::2]:53\n\
        -A KUBE-SEP-DNS6B -p udp -m udp -j DNAT --to-destination [fd00:10:244::3]:53\n\
        -A KUBE-SVC-WEB6 -j KUBE-SEP-WEB6A\n\
        -A KUBE-SEP-WEB6A -p tcp -m tcp -j DNAT --to-destination [fd00:10:244::4]:8080\n\
        COMMIT\n";
    node.exec_input("ip6tables-nft-restore", &[], rules);
    let mut sport = 40000u16;
    let mut insert = |proto: &str, dst: &str, dport: u16, to: &str| {
        sport += 1;
        let (s, d) = (sport.to_string(), dport.to_string());
        let mut args = vec![
            "-I",
            "-p",
            proto,
            "-s",
            "fd00:1::1",
            "-d",
            dst,
            "--sport",
            &s,
            "--dport",
            &d,
            "--dst-nat",
            to,
            "-t",
            "600",
        ];
        if proto == "tcp" {
            args.extend(["--state", "ESTABLISHED"]);
        }
        node.exec_ok("conntrack", &args);
    };
    for _ in 0..4 {
        insert("udp", "fd00:10:96::a", 53, "[fd00:10:244::2]:53"); // current
    }
    for _ in 0..3 {
        insert("udp", "fd00:10:96::a", 53, "[fd00:10:244::9]:53"); // gone
    }
    for _ in 0..2 {
        insert("tcp", "fd00:10:96::14", 80, "[fd00:10:244::8]:8080"); // gone
        insert("udp", "fd00:10:99::1", 53, "[fd00:10:244::9]:53"); // not a service address
    }
    let doc = check_json(&node);
    let facts = &doc["facts"]["conntrack_stale"];
    assert_eq!(
        doc["probes"]["conntrack_stale"]["status"], "ok",
        "{}",
        doc["probes"]["conntrack_stale"]
    );
    let udp = conntrack_count(&node, "udp", "fd00:10:96::a", "fd00:10:244::9");
    let tcp = conntrack_count(&node, "tcp", "fd00:10:96::14", "fd00:10:244::8");
    assert_eq!((udp, tcp), (3, 2), "the ground truth");
    assert_eq!(facts["stale_entries"]["udp"], udp, "{facts}");
    assert_eq!(facts["draining_entries"]["tcp"], tcp, "TCP drains: {facts}");
    assert_eq!(
        (&facts["service_ports"], &facts["endpoints"]),
        (&Value::from(2), &Value::from(3))
    );
    assert_eq!(facts["dst_nat_entries"], 11, "every IPv6 DST_NAT entry dumped: {facts}");
    let (stale, draining) = (
        facts["stale"].as_array().unwrap(),
        facts["draining"].as_array().unwrap(),
    );
    assert_eq!((stale.len(), draining.len()), (1, 1), "{facts}");
    assert_eq!(stale[0]["service"], "[fd00:10:96::a]:53/udp");
    assert_eq!(stale[0]["endpoint"], "[fd00:10:244::9]:53");
    assert_eq!(draining[0]["service"], "[fd00:10:96::14]:80/tcp");
    assert_eq!(draining[0]["endpoint"], "[fd00:10:244::8]:8080");
}

/// `conntrack -I` one DST_NAT entry per call, each from its own source port.
struct Inserter<'a> {
    ns: &'a Netns,
    sport: u16,
}

impl Inserter<'_> {
    fn insert(&mut self, n: u32, proto: &str, dst: &str, dport: u16, to: &str) {
        for _ in 0..n {
            self.sport += 1;
            let (s, d) = (self.sport.to_string(), dport.to_string());
            let src = if dst.contains(':') { "fd00:1::1" } else { "10.1.0.1" };
            let mut args = vec![
                "-I",
                "-p",
                proto,
                "-s",
                src,
                "-d",
                dst,
                "--sport",
                &s,
                "--dport",
                &d,
                "--dst-nat",
                to,
                "-t",
                "600",
            ];
            if proto == "tcp" {
                args.extend(["--state", "ESTABLISHED"]);
            }
            self.ns.exec_ok("conntrack", &args);
        }
    }
}

fn check_json(ns: &Netns) -> Value {
    common::Check::new()
        .in_netns(ns)
        .args(["--iptables.save-interval", "0"])
        .args(common::NO_KUBE_PROXY)
        .run()
        .doc
}

fn finding_by<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array()?.iter().find(|f| f["id"] == id)
}

/// Never guess, on the real kernel in both kube-proxy modes: a service port
/// whose path goes to a chain of a prefix kube-proxy does not write
/// (`weird-*`, `KUBE-WEIRD-*`) is undecoded: its entries are not stale even
/// though they are NATed to an address the chain does not DNAT to, the port
/// is listed with the reason, and `conntrack_stale_partial` (info) says the
/// detection is partial. Next to it, an `internalTrafficPolicy: Local`
/// ClusterIP (nftables `local-*`, iptables `KUBE-SVL-*`) is decoded: only the
/// entries to its removed endpoint are stale, none of those to its local one.
#[test]
fn unknown_layout_is_undecoded_never_stale() {
    for (tool, tag, nft) in [("iptables-nft-restore", "uwi", false), ("nft", "uwn", true)] {
        if !common::can_run(&["ip", tool, "conntrack"]) {
            continue;
        }
        let node = Netns::new(tag);
        if nft {
            let weird = "weird-ODDODDOD-ns/odd/udp/dns";
            let local = "local-DNSDNSDN-ns/dns/udp/dns";
            let web = "service-WEBWEBWE-ns/web/tcp/http";
            let text = format!(
                "table ip kube-proxy {{\n\
                 \tchain nat-output {{ type nat hook output priority -100; policy accept; jump services; }}\n\
                 \tchain mark-for-masquerade {{ meta mark set meta mark | 0x4000; }}\n\
                 \tchain endpoint-ODD__10.244.0.3/53 {{ meta l4proto udp dnat to 10.244.0.3:53; }}\n\
                 \tchain endpoint-DNS__10.244.0.2/53 {{ meta l4proto udp dnat to 10.244.0.2:53; }}\n\
                 \tchain endpoint-WEB__10.244.0.4/8080 {{ meta l4proto tcp dnat to 10.244.0.4:8080; }}\n\
                 \tchain {weird} {{ numgen random mod 1 vmap {{ 0 : goto endpoint-ODD__10.244.0.3/53 }}; }}\n\
                 \tchain {local} {{ numgen random mod 1 vmap {{ 0 : goto endpoint-DNS__10.244.0.2/53 }}; }}\n\
                 \tchain {web} {{ ip daddr 10.96.0.20 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade; \
                 numgen random mod 1 vmap {{ 0 : goto endpoint-WEB__10.244.0.4/8080 }}; }}\n\
                 \tmap service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; elements = {{ \
                 10.96.0.10 . udp . 53 : goto {local}, 10.96.0.11 . udp . 53 : goto {weird}, 10.96.0.20 . tcp . 80 : goto {web} }} }}\n\
                 \tchain services {{ ip daddr . meta l4proto . th dport vmap @service-ips; }}\n}}\n"
            );
            node.exec_input("nft", &["-f", "-"], &text);
        } else {
            let rules = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
                :KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SVL-DNSDNSDNSDNSDNS1 - [0:0]\n\
                :KUBE-WEIRD-ODDODDODDODDODD1 - [0:0]\n:KUBE-SVC-WEBWEBWEBWEBWEB1 - [0:0]\n\
                :KUBE-SEP-DNSA - [0:0]\n:KUBE-SEP-ODDA - [0:0]\n:KUBE-SEP-WEBA - [0:0]\n\
                -A OUTPUT -j KUBE-SERVICES\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n\
                -A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVL-DNSDNSDNSDNSDNS1\n\
                -A KUBE-SERVICES -d 10.96.0.11/32 -p udp -m udp --dport 53 -j KUBE-WEIRD-ODDODDODDODDODD1\n\
                -A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-WEBWEBWEBWEBWEB1\n\
                -A KUBE-SVL-DNSDNSDNSDNSDNS1 -j KUBE-SEP-DNSA\n\
                -A KUBE-SEP-DNSA -p udp -m udp -j DNAT --to-destination 10.244.0.2:53\n\
                -A KUBE-WEIRD-ODDODDODDODDODD1 -j KUBE-SEP-ODDA\n\
                -A KUBE-SEP-ODDA -p udp -m udp -j DNAT --to-destination 10.244.0.3:53\n\
                -A KUBE-SVC-WEBWEBWEBWEBWEB1 -j KUBE-SEP-WEBA\n\
                -A KUBE-SEP-WEBA -p tcp -m tcp -j DNAT --to-destination 10.244.0.4:8080\n\
                COMMIT\n";
            node.exec_input(tool, &[], rules);
        }
        let mut ct = Inserter {
            ns: &node,
            sport: 40000,
        };
        ct.insert(3, "udp", "10.96.0.10", 53, "10.244.0.2:53"); // iTP=Local, current
        ct.insert(2, "udp", "10.96.0.10", 53, "10.244.0.9:53"); // iTP=Local, removed
        ct.insert(4, "udp", "10.96.0.11", 53, "10.244.0.7:53"); // undecoded: not judged
        ct.insert(1, "tcp", "10.96.0.20", 80, "10.244.0.4:8080"); // current
        ct.insert(2, "tcp", "10.96.0.20", 80, "10.244.0.8:8080"); // removed
        ct.insert(2, "udp", "10.99.0.1", 53, "10.244.0.9:53"); // no service address
        let truth = (
            conntrack_count(&node, "udp", "10.96.0.10", "10.244.0.9"),
            conntrack_count(&node, "udp", "10.96.0.11", "10.244.0.7"),
            conntrack_count(&node, "tcp", "10.96.0.20", "10.244.0.8"),
        );
        assert_eq!(truth, (2, 4, 2), "the ground truth");
        let doc = check_json(&node);
        let facts = &doc["facts"]["conntrack_stale"];
        let source = if nft { "nftables" } else { "iptables-nft" };
        assert_eq!(
            doc["probes"]["conntrack_stale"]["status"], "ok",
            "{}",
            doc["probes"]["conntrack_stale"]
        );
        assert_eq!(facts["source"], source, "{facts}");
        assert_eq!(facts["stale_entries"]["udp"], truth.0, "0 false stale: {facts}");
        assert_eq!(facts["draining_entries"]["tcp"], truth.2, "{facts}");
        assert_eq!(
            (&facts["service_ports"], &facts["endpoints"]),
            (&Value::from(2), &Value::from(2)),
            "{facts}"
        );
        assert_eq!(facts["undecoded"][source], 1, "{facts}");
        assert_eq!(facts["undecoded_entries"], truth.1, "{facts}");
        let port = &facts["undecoded_ports"][0];
        assert_eq!(port["service"], "10.96.0.11:53/udp", "{facts}");
        assert_eq!(port["source"], source);
        let weird = if nft {
            "weird-ODDODDOD"
        } else {
            "KUBE-WEIRD-ODDODDODDODDODD1"
        };
        assert!(port["reason"].as_str().unwrap().contains(weird), "{port}");
        let groups = facts["stale"].as_array().unwrap();
        assert!(groups.iter().all(|g| g["service"] != "10.96.0.11:53/udp"), "{facts}");
        let f = finding_by(&doc, "conntrack_stale_partial").unwrap_or_else(|| panic!("{}", doc["findings"]));
        assert_eq!(f["severity"], "info");
        assert_eq!(f["evidence"]["undecoded_service_ports"], 1);
        assert!(f["summary"].as_str().unwrap().contains(weird), "{f}");
    }
}

/// A verdict map of a type kube-proxy's layout does not have (`service-ips`
/// keyed by address and port, no protocol): its elements are counted as
/// undecoded, the info finding says so, and no entry is judged against ports
/// the decoder would have had to guess; the well-formed NodePort map next to
/// it still counts.
#[test]
fn verdict_map_of_an_unexpected_type_is_undecoded() {
    if !common::can_run(&["ip", "nft", "conntrack"]) {
        return;
    }
    let node = Netns::new("umt");
    node.exec_ok("ip", &["addr", "add", "10.250.9.1/32", "dev", "lo"]);
    let text = "table ip kube-proxy {\n\
        \tchain endpoint-WEB__10.244.0.4/8080 { meta l4proto tcp dnat to 10.244.0.4:8080; }\n\
        \tchain service-WEBWEBWE-ns/web/tcp/http { numgen random mod 1 vmap { 0 : goto endpoint-WEB__10.244.0.4/8080 }; }\n\
        \tmap service-ips { type ipv4_addr . inet_service : verdict; elements = { \
        10.96.0.20 . 80 : goto service-WEBWEBWE-ns/web/tcp/http, 10.96.0.21 . 80 : goto service-WEBWEBWE-ns/web/tcp/http } }\n\
        \tmap service-nodeports { type inet_proto . inet_service : verdict; elements = { tcp . 30080 : goto service-WEBWEBWE-ns/web/tcp/http } }\n\
        \tchain services { ip daddr . th dport vmap @service-ips; meta l4proto . th dport vmap @service-nodeports; }\n\
        \tchain nat-output { type nat hook output priority -100; policy accept; jump services; }\n}\n";
    node.exec_input("nft", &["-f", "-"], text);
    let mut ct = Inserter {
        ns: &node,
        sport: 41000,
    };
    ct.insert(3, "tcp", "10.96.0.20", 80, "10.244.0.9:8080"); // its port is unknown: not judged
    ct.insert(2, "tcp", "10.250.9.1", 30080, "10.244.0.9:8080"); // the NodePort: stale
    let doc = check_json(&node);
    let facts = &doc["facts"]["conntrack_stale"];
    assert_eq!(
        doc["probes"]["conntrack_stale"]["status"], "ok",
        "{}",
        doc["probes"]["conntrack_stale"]
    );
    assert_eq!(facts["undecoded"]["nftables"], 2, "{facts}");
    assert_eq!(facts["undecoded_ports"][0]["service"], "unknown", "{facts}");
    assert!(
        facts["undecoded_ports"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("map service-ips with a key of 8 bytes"),
        "{facts}"
    );
    assert_eq!(
        (&facts["service_ports"], &facts["node_ports"]),
        (&Value::from(1), &Value::from(1)),
        "{facts}"
    );
    assert_eq!(
        facts["draining_entries"]["tcp"], 2,
        "only the NodePort's entries: {facts}"
    );
    let f = finding_by(&doc, "conntrack_stale_partial").unwrap_or_else(|| panic!("{}", doc["findings"]));
    assert_eq!(f["severity"], "info");
}

/// Holds `n` TCP connections to `dst`:8080 open (retrying while the server starts).
fn hold_connections(n: u32) -> String {
    format!(
        r#"
import socket, time
held = []
while len(held) < {n}:
    try:
        held.append(socket.create_connection(("10.252.1.2", 8080), timeout=5))
    except OSError:
        time.sleep(0.2)
while True:
    time.sleep(1)
"#
    )
}

/// Entries `conntrack -L` shows source-NATed to `translated` toward 10.252.1.2:8080/tcp.
fn snat_count(ns: &Netns, translated: &str) -> u64 {
    let args = [
        "-L",
        "-p",
        "tcp",
        "--src-nat",
        "--reply-src",
        "10.252.1.2",
        "--reply-port-src",
        "8080",
        "--reply-dst",
        translated,
    ];
    let out = ns.command("conntrack", &args).stderr(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("tcp"))
        .count() as u64
}

/// SNAT on the real kernel: a "pod" namespace behind a veth of a "node"
/// namespace that masquerades its traffic toward a "remote" namespace with a
/// range of 10 ports (`--to-ports 20000-20009`, no `--random-fully`), a TCP
/// server there, and 8 then 10 concurrent connections from the pod to its one
/// port. The agent (serve in the node namespace, where the NAT happens) must
/// count, for the group (node address, 10.252.1.2, 8080, tcp), exactly the
/// entries `conntrack -L --src-nat` shows with that translated source, against
/// the rule's 10 ports: a warning at 8 (0.80), critical at 10. The rule's
/// counter (iptables-nft gives every rule one) moves when the two new
/// connections are made: masquerade_without_random_fully warns then, not
/// before; the rule with `--random-fully` next to it is listed as such.
#[test]
fn snat_ports_in_use_match_conntrack_and_masquerade_without_random_fully_is_reported() {
    if !common::can_run(&["ip", "iptables-nft", "conntrack", "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let node = Netns::new("snn");
    let pod = Netns::new("snp");
    let remote = Netns::new("snr");
    let tag = std::process::id() % 10_000;
    for (peer, i, veth) in [(&pod, 1, format!("pwsp{tag}")), (&remote, 2, format!("pwsr{tag}"))] {
        node.exec_ok(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &peer.name,
            ],
        );
        node.exec_ok("ip", &["addr", "add", &format!("10.25{i}.1.1/24"), "dev", &veth]);
        node.exec_ok("ip", &["link", "set", &veth, "up"]);
        peer.exec_ok("ip", &["addr", "add", &format!("10.25{i}.1.2/24"), "dev", "eth0"]);
        peer.exec_ok("ip", &["link", "set", "eth0", "up"]);
    }
    pod.exec_ok("ip", &["route", "add", "default", "via", "10.251.1.1"]);
    // The remote has no route back to the pod: only the masqueraded traffic gets answers.
    // ip_forward is per network namespace: this is the node namespace's own.
    node.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    for rule in [
        "-A POSTROUTING -s 10.251.1.0/24 -d 10.252.1.0/24 -p tcp -j MASQUERADE --to-ports 20000-20009",
        "-A POSTROUTING -s 10.253.0.0/16 -j MASQUERADE --random-fully",
    ] {
        let mut args = vec!["-t", "nat"];
        args.extend(rule.split(' '));
        node.exec_ok("iptables-nft", &args);
    }
    let mut procs = vec![spawn(&remote, TCP_ECHO)];
    procs.push(spawn(&pod, &hold_connections(8)));
    let started = Instant::now();
    while snat_count(&node, "10.252.1.1") < 8 {
        assert!(started.elapsed() < Duration::from_secs(60), "8 connections masqueraded");
        std::thread::sleep(Duration::from_millis(200));
    }

    let port = 9894;
    let listen = format!("127.0.0.1:{port}");
    let agent = common::Serve::new()
        .in_netns(&node)
        .listen(&listen)
        .args(common::NO_KUBE_PROXY)
        .args(["--conntrack-stale.interval", "1s", "--iptables.save-interval", "0"])
        .no_wait()
        .start();
    let wait = |what: &str, ok: &dyn Fn(&Value) -> bool| -> Value {
        wait_for(&agent, what, ok, &|last| {
            format!(
                "snat facts: {} probe: {}",
                last["facts"]["conntrack_stale"]["snat"], last["probes"]["conntrack_stale"]
            )
        })
    };
    let group = |d: &Value| d["facts"]["conntrack_stale"]["snat"]["top"][0].clone();
    // Two readings with the same 8 connections: the counter did not move.
    let doc = wait("two readings of 8 ports", &|d| {
        group(d)["ports_in_use"] == 8 && d["derived"]["snat_rules"]["rules"][0]["packets_delta"] == 0
    });
    let g = group(&doc);
    let listed = snat_count(&node, "10.252.1.1");
    eprintln!(
        "SNAT group: agent {} ports of {}, conntrack -L --src-nat {listed}",
        g["ports_in_use"], g["range_size"]
    );
    assert_eq!(g["ports_in_use"].as_u64(), Some(listed), "{g}");
    assert_eq!(
        (&g["source"], &g["destination"], &g["port"], &g["protocol"]),
        (
            &Value::from("10.252.1.1"),
            &Value::from("10.252.1.2"),
            &Value::from(8080),
            &Value::from("tcp")
        )
    );
    assert_eq!(
        (&g["range"], &g["range_from"], &g["range_size"]),
        (&Value::from("20000-20009"), &Value::from("rule"), &Value::from(10))
    );
    let snat = finding_by(&doc, "snat_ports_near_exhaustion").expect("8 of 10 ports: a warning");
    assert_eq!(snat["severity"], "warning", "{snat}");
    assert!(
        finding_by(&doc, "masquerade_without_random_fully").is_none(),
        "no new connection, no traffic through the rule"
    );
    let rules = doc["facts"]["conntrack_stale"]["snat"]["rules"].as_array().unwrap();
    let by_random: Vec<(bool, &str, u64)> = rules
        .iter()
        .filter(|r| r["family"] == "ipv4")
        .map(|r| {
            (
                r["random_fully"].as_bool().unwrap(),
                r["ports"].as_str().unwrap_or(""),
                r["packets"].as_u64().unwrap(),
            )
        })
        .collect();
    // The masquerade counts a connection's first packet only (nat sees no other): 8, and one
    // more per attempt refused while the server was starting.
    assert_eq!(by_random.len(), 2, "{rules:?}");
    assert!(matches!(by_random[0], (false, "20000-20009", p) if p >= 8), "{rules:?}");
    assert_eq!(by_random[1], (true, "", 0), "{rules:?}");

    procs.push(spawn(&pod, &hold_connections(2)));
    let doc = wait("10 of 10 ports, the counter moved", &|d| {
        group(d)["ports_in_use"] == 10
            && finding_by(d, "masquerade_without_random_fully").is_some_and(|f| f["severity"] == "warning")
    });
    assert_eq!(
        group(&doc)["ports_in_use"].as_u64(),
        Some(snat_count(&node, "10.252.1.1"))
    );
    let snat = finding_by(&doc, "snat_ports_near_exhaustion").unwrap();
    assert_eq!(snat["severity"], "critical", "all 10 ports in use: {snat}");
    // The same in /metrics: the fullest group's fill, the rules by random-fully.
    let metrics = agent.get_200("/metrics").expect("/metrics");
    assert_eq!(common::series(&metrics, "proxywatch_snat_ports_fill_ratio"), Some(1.0));
    assert_eq!(
        common::series(&metrics, "proxywatch_snat_rules{random_fully=\"false\"}"),
        Some(1.0)
    );
    assert_eq!(
        common::series(&metrics, "proxywatch_snat_rules{random_fully=\"true\"}"),
        Some(1.0)
    );
    let masq = finding_by(&doc, "masquerade_without_random_fully").unwrap();
    let listed = masq["evidence"]["rules_without_random_fully"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{masq}");
    assert_eq!(
        (&listed[0]["chain"], &listed[0]["position"]),
        (&Value::from("POSTROUTING"), &Value::from(1))
    );
    assert!(listed[0]["packets_delta"].as_u64() >= Some(2), "{masq}");

    // Turned off: no SNAT facts, no SNAT finding (nothing judged, not "fine").
    let out = node
        .command(
            common::binary().to_str().unwrap(),
            &[
                "check",
                "--format",
                "json",
                "--iptables.save-interval",
                "0",
                "--conntrack.snat",
                "false",
            ],
        )
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["probes"]["conntrack_stale"]["status"], "ok",
        "{}",
        doc["probes"]["conntrack_stale"]
    );
    assert!(doc["facts"]["conntrack_stale"]["snat"].is_null());
    assert!(finding_by(&doc, "snat_ports_near_exhaustion").is_none());
}

/// Sends from the node, every `every` seconds (once when 0): one UDP datagram
/// 10.252.1.1:40000 → 10.252.1.2:9999 with SO_MARK 1 and one with SO_MARK 2
/// (the raw table puts them in conntrack zones 1 and 2: the same tuple twice),
/// and one ICMP echo of id 0x4242 to 10.252.1.2.
fn zoned_traffic(every: u32) -> String {
    format!(
        r#"
import socket, struct, time
def once():
    for mark in (1, 2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, 36, mark)  # SO_MARK
        s.bind(("10.252.1.1", 40000))
        s.sendto(b"x", ("10.252.1.2", 9999))
        s.close()
    body = struct.pack("!BBHHH", 8, 0, 0, 0x4242, 1)
    c = 0
    for i in range(0, len(body), 2):
        c += (body[i] << 8) + body[i + 1]
    c = (c >> 16) + (c & 0xffff)
    c = ~(c + (c >> 16)) & 0xffff
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    r.sendto(struct.pack("!BBHHH", 8, 0, c, 0x4242, 1), ("10.252.1.2", 0))
    r.close()
once()
while {every} > 0:
    time.sleep({every})
    once()
"#
    )
}

/// Entries `conntrack -L` shows in `zone` (None: all) of `proto` source-NATed.
fn src_nat_entries(ns: &Netns, proto: &str, zone: Option<u16>) -> u64 {
    let mut args = vec!["-L".to_string(), "-p".into(), proto.into(), "--src-nat".into()];
    if let Some(z) = zone {
        args.extend(["--zone".into(), z.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ns.command("conntrack", &args).stderr(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(proto))
        .count() as u64
}

/// iptables-legacy's source NAT rules, from the iptables probe's own
/// `iptables-legacy-save -c`, on the real kernel: listed with their chain,
/// position, random-fully and counter; a MASQUERADE without random-fully
/// whose counter moves between two readings is the warning (as on
/// iptables-nft). The same run: two conntrack zones (raw `CT --zone`) holding
/// the same translated UDP tuple are two groups, and an ICMP echo SNATed to
/// another address is a group counted by its id, each equal to what
/// `conntrack -L --src-nat` lists.
#[test]
fn legacy_masquerade_counter_moves_zones_apart_and_icmp_counted() {
    if !common::can_run(&["ip", "iptables-legacy", "iptables-legacy-save", "conntrack", "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let node = Netns::new("snl");
    let remote = Netns::new("snlr");
    let veth = format!("pwsl{}", std::process::id() % 10_000);
    node.exec_ok(
        "ip",
        &[
            "link",
            "add",
            &veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &remote.name,
        ],
    );
    node.exec_ok("ip", &["addr", "add", "10.252.1.1/24", "dev", &veth]);
    node.exec_ok("ip", &["link", "set", &veth, "up"]);
    remote.exec_ok("ip", &["addr", "add", "10.252.1.2/24", "dev", "eth0"]);
    remote.exec_ok("ip", &["link", "set", "eth0", "up"]);
    for rule in [
        "-t nat -N KUBE-POSTROUTING",
        "-t nat -A POSTROUTING -m comment --comment kubernetes -j KUBE-POSTROUTING",
        "-t nat -A KUBE-POSTROUTING -s 10.9.0.0/16 -j MASQUERADE --random-fully",
        "-t nat -A POSTROUTING -d 10.252.1.2 -p udp -j MASQUERADE --to-ports 20000-20009",
        "-t nat -A POSTROUTING -d 10.252.1.2 -p icmp -j SNAT --to-source 10.252.1.100",
        "-t nat -N UNREACHED",
        "-t nat -A UNREACHED -j MASQUERADE",
        "-t raw -A OUTPUT -m mark --mark 1 -j CT --zone 1",
        "-t raw -A OUTPUT -m mark --mark 2 -j CT --zone 2",
    ] {
        node.exec_ok("iptables-legacy", &rule.split(' ').collect::<Vec<_>>());
    }
    let port = 9897;
    let listen = format!("127.0.0.1:{port}");
    let agent = common::Serve::new()
        .in_netns(&node)
        .listen(&listen)
        .args(common::NO_KUBE_PROXY)
        .args(["--conntrack-stale.interval", "1s", "--iptables.interval", "1s"])
        .args(["--iptables.save-interval", "0"])
        .no_wait()
        .start();
    let mut procs = Vec::new();
    let wait = |what: &str, ok: &dyn Fn(&Value) -> bool| -> Value {
        wait_for(&agent, what, ok, &|last| {
            format!(
                "snat facts: {} derived: {} probe: {}",
                last["facts"]["conntrack_stale"]["snat"],
                last["derived"]["snat_rules"],
                last["probes"]["conntrack_stale"]
            )
        })
    };
    let legacy = |d: &Value| -> Vec<Value> {
        d["derived"]["snat_rules"]["rules"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter(|r| r["backend"] == "iptables-legacy")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    // Two readings of the counters, no traffic yet: known, not moving.
    let doc = wait("two readings of the legacy counters", &|d| {
        legacy(d).len() == 3 && legacy(d).iter().all(|r| r["packets_delta"] == 0)
    });
    let rules: Vec<(String, u64, bool, Value, Value)> = legacy(&doc)
        .iter()
        .map(|r| {
            (
                r["chain"].as_str().unwrap().to_string(),
                r["position"].as_u64().unwrap(),
                r["random_fully"].as_bool().unwrap(),
                r["ports"].clone(),
                r["packets"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            (
                "POSTROUTING".to_string(),
                2,
                false,
                Value::from("20000-20009"),
                Value::from(0)
            ),
            ("POSTROUTING".to_string(), 3, false, Value::Null, Value::from(0)),
            ("KUBE-POSTROUTING".to_string(), 1, true, Value::Null, Value::from(0)),
        ],
        "{}",
        doc["facts"]["conntrack_stale"]["snat"]
    );
    let f = finding_by(&doc, "masquerade_without_random_fully").map(|f| f["severity"].clone());
    assert_eq!(f, None, "counters known and not moving: nothing to say");

    procs.push(spawn(&node, &zoned_traffic(5)));
    let groups = |d: &Value| -> Vec<(String, u64, u64, u64, String)> {
        d["facts"]["conntrack_stale"]["snat"]["top"]
            .as_array()
            .map(|t| {
                let mut v: Vec<_> = t
                    .iter()
                    .filter(|g| g["destination"] == "10.252.1.2")
                    .map(|g| {
                        (
                            g["protocol"].as_str().unwrap().to_string(),
                            g["port"].as_u64().unwrap(),
                            g["zone"].as_u64().unwrap_or(0),
                            g["ports_in_use"].as_u64().unwrap(),
                            g["range"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect();
                v.sort();
                v
            })
            .unwrap_or_default()
    };
    let doc = wait("the counter moved, zones and ICMP grouped", &|d| {
        groups(d).len() == 3
            && finding_by(d, "masquerade_without_random_fully").is_some_and(|f| f["severity"] == "warning")
    });
    assert_eq!(
        groups(&doc),
        [
            ("icmp".to_string(), 0, 0, 1, "0-65535".to_string()),
            ("udp".to_string(), 9999, 1, 1, "20000-20009".to_string()),
            ("udp".to_string(), 9999, 2, 1, "20000-20009".to_string()),
        ],
        "{}",
        doc["facts"]["conntrack_stale"]["snat"]
    );
    for (proto, zone, want) in [("udp", Some(1), 1), ("udp", Some(2), 1), ("icmp", None, 1)] {
        assert_eq!(
            src_nat_entries(&node, proto, zone),
            want,
            "conntrack -L {proto} zone {zone:?}"
        );
    }
    let g = &doc["facts"]["conntrack_stale"]["snat"]["top"];
    let icmp = g.as_array().unwrap().iter().find(|g| g["protocol"] == "icmp").unwrap();
    assert_eq!(icmp["source"], "10.252.1.100", "{icmp}");
    let masq = finding_by(&doc, "masquerade_without_random_fully").unwrap();
    let moved: Vec<(&Value, &Value)> = masq["evidence"]["rules_without_random_fully"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["packets_delta"].as_u64() > Some(0))
        .map(|r| (&r["backend"], &r["position"]))
        .collect();
    assert!(
        moved.contains(&(&Value::from("iptables-legacy"), &Value::from(2))),
        "{masq}"
    );
    assert!(
        masq["remediation"][0]
            .as_str()
            .unwrap()
            .contains("iptables-legacy -t nat -L POSTROUTING"),
        "{masq}"
    );
}

/// kube-proxy's nftables masquerading, read over netlink from `nat-postrouting`
/// through the chain it jumps to: `masquerade fully-random` (no counter: kube-proxy
/// writes none) is listed as random-fully, and nothing is reported about it.
#[test]
fn nftables_masquerading_chain_is_read_over_netlink() {
    if !common::can_run(&["ip", "nft", "conntrack"]) {
        return;
    }
    let _lock = common::global_lock();
    let node = Netns::new("snf");
    nft_load(
        &node,
        "table ip kube-proxy {
            chain nat-postrouting { type nat hook postrouting priority srcnat; policy accept; jump masquerading; }
            chain masquerading {
                meta mark & 0x00004000 == 0x00000000 return
                meta mark set meta mark ^ 0x00004000
                masquerade fully-random
            }
        }",
    );
    let doc = check_json(&node);
    let rules = doc["facts"]["conntrack_stale"]["snat"]["rules"].clone();
    let want = serde_json::json!([{
        "backend": "nftables", "family": "ipv4", "table": "kube-proxy", "chain": "masquerading",
        "position": 3, "action": "MASQUERADE", "random_fully": true, "packets": null,
    }]);
    assert_eq!(rules, want);
    eprintln!("kube-proxy's masquerading rule: {rules}");
    assert!(finding_by(&doc, "masquerade_without_random_fully").is_none(), "{rules}");
}
