//! Real kube-proxy output, on the real kernel: the expected rule sets of
//! kube-proxy's own unit tests and layouts derived from its proxier (IPv4 and IPv6, on
//! iptables-nft, iptables-legacy and nftables)
//! (tests/fixtures/kube-proxy-corpus, origins in ORIGIN.md), each loaded into
//! a namespace with the real tools (`iptables-nft-restore`,
//! `iptables-legacy-restore`, `nft -f`) plus what kube-proxy adds outside its
//! restore input. For each:
//!
//! - every count the agent reports equals what the tool lists
//!   (`iptables-*-save`, `nft -j list table`);
//! - the service table equals what the rules route to (listed below by hand
//!   from each dump): per service port, one `conntrack -I` DST_NAT entry to
//!   each endpoint it routes to is never stale, one to an endpoint it does not
//!   have (10.180.9.9) is, per (service, endpoint) group; entries to a
//!   non-service address are never counted: 0 false stale, 0 missed, on the
//!   legacy backend too (decoded from the iptables probe's own save).
use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Netns;
use serde_json::Value;

/// The node address: `nodeport-ips` of the nftables dumps, a local address for KUBE-NODEPORTS.
const NODE_IP: &str = "192.168.0.2";
/// An endpoint no service routes to.
const GONE: &str = "10.180.9.9";

/// The addresses a case uses, per family.
struct Net {
    /// The node address (NodePorts, the legacy-save tests).
    node: &'static str,
    /// A pod address: the short-circuit prefix of eTP=Local ports.
    pod: &'static str,
    outside: &'static str,
    gone: &'static str,
    /// No service there.
    elsewhere: &'static str,
    /// nftables family of kube-proxy's table.
    nft: &'static str,
}

const V4: Net = Net {
    node: NODE_IP,
    pod: "10.1.0.1",
    outside: OUTSIDE_CLIENT,
    gone: GONE,
    elsewhere: "172.30.9.9",
    nft: "ip",
};

/// The addresses of kube-proxy's IPv6 tests (pod CIDR fd00:10::/64, node 2001:db8::1).
const V6: Net = Net {
    node: "2001:db8::1",
    pod: "fd00:10::1:1",
    outside: "2001:db8:99::2",
    gone: "fd00:180::9:9",
    elsewhere: "fd00:30::9:9",
    nft: "ip6",
};

impl Net {
    /// `addr:port`, bracketed for IPv6 (as conntrack and the agent write it).
    fn socket(&self, addr: &str, port: u16) -> String {
        if addr.contains(':') {
            format!("[{addr}]:{port}")
        } else {
            format!("{addr}:{port}")
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Load {
    /// `iptables-<backend>-restore` (IPv4).
    Iptables(&'static str),
    /// `ip6tables-<backend>-restore` (IPv6).
    Ip6tables(&'static str),
    Nftables,
}

/// What the rules route to: (service port, its endpoints), a NodePort as `:PORT/proto`.
type Table = &'static [(&'static str, &'static [&'static str])];

/// Entries from a client outside the cluster (not a pod, not the node):
/// (service port, endpoint it was NATed to, stale). An eTP=Local port sends
/// new outside traffic to its local endpoints only, but a flow to any
/// endpoint of the port's paths is current: kube-proxy's reconciler
/// (`pkg/proxy/conntrack/cleanup.go`) does "not take traffic policies,
/// topology, or terminating status of the service into account".
type Outside = &'static [(&'static str, &'static str, bool)];

const OUTSIDE_CLIENT: &str = "203.0.113.2";

/// svc2 of the Overall tests has no local endpoint: kube-proxy drops new
/// outside traffic to its external addresses and NodePort (only pods and the
/// host still reach 10.180.0.2), yet a flow to 10.180.0.2 is not stale.
/// svc4 and svc3 (eTP=Cluster) take it anywhere. Outside flows to an endpoint
/// in no path (10.180.9.9) are.
const OVERALL_OUTSIDE: Outside = &[
    ("1.2.3.4:80/tcp", "10.180.0.2:80", false),
    ("192.168.99.22:80/tcp", "10.180.0.2:80", false),
    (":3001/tcp", "10.180.0.2:80", false),
    ("192.168.99.33:80/tcp", "10.180.0.4:80", false),
    (":3003/tcp", "10.180.0.3:80", false),
    (":3001/tcp", "10.180.9.9:80", true),
    ("1.2.3.4:80/tcp", "10.180.9.9:80", true),
];

/// svc2 of the derived layout: outside traffic to its NodePort goes to the
/// local endpoint only; the flow to the remote one is not stale either.
const TRAFFIC_POLICY_LOCAL_OUTSIDE: Outside = &[
    (":3080/tcp", "10.180.1.20:80", false),
    (":3080/tcp", "10.180.0.20:80", false),
    (":3080/tcp", "10.180.9.9:80", true),
];

/// nftables-derived-traffic-policy-local-ipv6.nft: the same services in the ip6 family.
const TRAFFIC_POLICY_LOCAL_V6: Table = &[
    ("[fd00:30::10]:53/udp", &["[fd00:180::10]:53"]),
    ("[fd00:30::20]:80/tcp", &["[fd00:180::1:20]:80", "[fd00:180::20]:80"]),
    (":3080/tcp", &["[fd00:180::1:20]:80", "[fd00:180::20]:80"]),
    ("[fd00:30::30]:9999/sctp", &[]),
    ("[fd00:30::40]:8080/tcp", &["[fd00:180::20]:80"]),
];

const TRAFFIC_POLICY_LOCAL_V6_OUTSIDE: Outside = &[
    (":3080/tcp", "[fd00:180::1:20]:80", false),
    (":3080/tcp", "[fd00:180::20]:80", false),
    (":3080/tcp", "[fd00:180::9:9]:80", true),
];

/// TestOverallIPTablesRules and TestOverallNFTablesRules describe the same six
/// services: svc2 (eTP=Local without a local endpoint) sends its external
/// addresses and NodePort to its cluster endpoint for pod and host traffic
/// (the short-circuit), svc5's LoadBalancer IP goes through its firewall
/// chain, svc6 has no endpoints; 10.180.0.3 is the endpoint of svc3 and svc5.
const OVERALL: Table = &[
    ("172.30.0.41:80/tcp", &["10.180.0.1:80"]),
    ("172.30.0.42:80/tcp", &["10.180.0.2:80"]),
    ("192.168.99.22:80/tcp", &["10.180.0.2:80"]),
    ("1.2.3.4:80/tcp", &["10.180.0.2:80"]),
    (":3001/tcp", &["10.180.0.2:80"]),
    ("172.30.0.43:80/tcp", &["10.180.0.3:80"]),
    (":3003/tcp", &["10.180.0.3:80"]),
    ("172.30.0.44:80/tcp", &["10.180.0.4:80", "10.180.0.5:80"]),
    ("192.168.99.33:80/tcp", &["10.180.0.4:80", "10.180.0.5:80"]),
    ("172.30.0.45:80/tcp", &["10.180.0.3:80"]),
    ("5.6.7.8:80/tcp", &["10.180.0.3:80"]),
    (":3002/tcp", &["10.180.0.3:80"]),
    ("172.30.0.46:80/tcp", &[]),
];

/// iptables-derived-TestOverallIPTablesRules-ipv6.txt: [`OVERALL`] in kube-proxy's IPv6
/// addresses (no localhost NodePorts: kube-proxy writes them for IPv4 only).
const OVERALL_V6: Table = &[
    ("[fd00:30::41]:80/tcp", &["[fd00:180::1]:80"]),
    ("[fd00:30::42]:80/tcp", &["[fd00:180::2]:80"]),
    ("[fd00:99::22]:80/tcp", &["[fd00:180::2]:80"]),
    ("[2001:db8:1::4]:80/tcp", &["[fd00:180::2]:80"]),
    (":3001/tcp", &["[fd00:180::2]:80"]),
    ("[fd00:30::43]:80/tcp", &["[fd00:180::3]:80"]),
    (":3003/tcp", &["[fd00:180::3]:80"]),
    ("[fd00:30::44]:80/tcp", &["[fd00:180::4]:80", "[fd00:180::5]:80"]),
    ("[fd00:99::33]:80/tcp", &["[fd00:180::4]:80", "[fd00:180::5]:80"]),
    ("[fd00:30::45]:80/tcp", &["[fd00:180::3]:80"]),
    ("[2001:db8:5::8]:80/tcp", &["[fd00:180::3]:80"]),
    (":3002/tcp", &["[fd00:180::3]:80"]),
    ("[fd00:30::46]:80/tcp", &[]),
];

/// [`OVERALL_OUTSIDE`] in IPv6: svc2 (eTP=Local, no local endpoint)'s outside flows to its
/// serving remote endpoint are not stale; those to an endpoint in no path are.
const OVERALL_V6_OUTSIDE: Outside = &[
    ("[2001:db8:1::4]:80/tcp", "[fd00:180::2]:80", false),
    ("[fd00:99::22]:80/tcp", "[fd00:180::2]:80", false),
    (":3001/tcp", "[fd00:180::2]:80", false),
    ("[fd00:99::33]:80/tcp", "[fd00:180::4]:80", false),
    (":3003/tcp", "[fd00:180::3]:80", false),
    (":3001/tcp", "[fd00:180::9:9]:80", true),
    ("[2001:db8:1::4]:80/tcp", "[fd00:180::9:9]:80", true),
];

/// nftables-derived-traffic-policy-local.nft. The eTP=Local NodePort lists
/// both endpoints: the short-circuit sends pod and host traffic to the
/// cluster chain; outside traffic: [`TRAFFIC_POLICY_LOCAL_OUTSIDE`].
const TRAFFIC_POLICY_LOCAL: Table = &[
    ("172.30.0.10:53/udp", &["10.180.0.10:53"]),
    ("172.30.0.20:80/tcp", &["10.180.0.20:80", "10.180.1.20:80"]),
    (":3080/tcp", &["10.180.0.20:80", "10.180.1.20:80"]),
    ("172.30.0.30:9999/sctp", &[]),
    ("172.30.0.40:8080/tcp", &["10.180.0.20:80"]),
];

fn fixture(name: &str) -> String {
    std::fs::read_to_string(common::fixtures().join("kube-proxy-corpus").join(name)).unwrap()
}

/// What kube-proxy adds around its iptables-restore input: the jumps from the
/// built-in chains and the canary chains (pkg/proxy/iptables/proxier.go,
/// `iptablesJumpChains`, `iptablesKubeletJumpChains`, the canaries).
const IPTABLES_AROUND: &str = "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n\
*filter\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n\
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS\n\
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
-A INPUT -j KUBE-FIREWALL\n\
-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A OUTPUT -j KUBE-FIREWALL\nCOMMIT\n\
*nat\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\nCOMMIT\n";

fn load(ns: &Netns, how: Load, text: &str) {
    match how {
        Load::Iptables(backend) | Load::Ip6tables(backend) => {
            let six = if matches!(how, Load::Ip6tables(_)) { "6" } else { "" };
            let restore = format!("ip{six}tables-{backend}-restore");
            // The nfacct objects are kube-proxy's own (created over netlink);
            // this kernel has no xt_nfacct: those rules are left out.
            let text: String = text
                .lines()
                .filter(|l| !l.contains("-m nfacct"))
                .map(|l| format!("{l}\n"))
                .collect();
            ns.exec_input(&restore, &["--noflush"], &text);
            ns.exec_input(&restore, &["--noflush"], IPTABLES_AROUND);
        }
        Load::Nftables => {
            // kube-proxy's transaction order: table, sets and maps, chains, rules, elements.
            let rank = |l: &str| {
                [
                    "add table",
                    "add set",
                    "add map",
                    "add chain",
                    "add rule",
                    "add element",
                ]
                .iter()
                .position(|k| l.starts_with(k))
                .map(|p| if p == 2 { 1 } else { p })
            };
            let mut lines: Vec<&str> = text.lines().filter(|l| rank(l).is_some()).collect();
            lines.sort_by_key(|l| rank(l));
            ns.exec_input("nft", &["-f", "-"], &(lines.join("\n") + "\n"));
        }
    }
}

fn protocol(label: &str) -> &str {
    label.rsplit_once('/').unwrap().1
}

/// (address conntrack sees as the original destination, its port).
fn destination(net: &Net, label: &str) -> (String, u16) {
    let (addr_port, _) = label.rsplit_once('/').unwrap();
    let (addr, port) = addr_port.rsplit_once(':').unwrap();
    let addr = if addr.is_empty() {
        net.node
    } else {
        addr.trim_matches(|c| c == '[' || c == ']')
    };
    (addr.to_string(), port.parse().unwrap())
}

struct Inserter<'a> {
    ns: &'a Netns,
    sport: u16,
    pod: &'static str,
}

impl Inserter<'_> {
    fn insert(&mut self, proto: &str, dst: &str, dport: u16, to: &str) {
        self.insert_from(self.pod, proto, dst, dport, to);
    }

    fn insert_from(&mut self, src: &str, proto: &str, dst: &str, dport: u16, to: &str) {
        self.sport += 1;
        let (s, d) = (self.sport.to_string(), dport.to_string());
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
        match proto {
            "tcp" => args.extend(["--state", "ESTABLISHED"]),
            "sctp" => args.extend(["--state", "ESTABLISHED", "--orig-vtag", "1", "--reply-vtag", "2"]),
            _ => {}
        }
        self.ns.exec_ok("conntrack", &args);
    }
}

/// The agent's iptables counts equal the save's: chains and rules per table, kube chains.
fn iptables_counts_equal_the_save(ns: &Netns, backend: &str, family: &str, doc: &Value) {
    let six = if family == "ipv6" { "6" } else { "" };
    let save = String::from_utf8(ns.exec_ok(&format!("ip{six}tables-{backend}-save"), &[]).stdout).unwrap();
    let mut tables: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut kube: BTreeMap<&str, u64> = ["svc", "sep", "ext", "fw", "svl"].iter().map(|k| (*k, 0)).collect();
    let mut table = String::new();
    for l in save.lines() {
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
            tables.entry(table.clone()).or_default();
        } else if let Some(c) = l.strip_prefix(':') {
            tables.get_mut(&table).unwrap().0 += 1;
            let name = c.split_whitespace().next().unwrap();
            for k in ["svc", "sep", "ext", "fw", "svl"] {
                kube.entry(k)
                    .and_modify(|n| *n += u64::from(name.starts_with(&format!("KUBE-{}-", k.to_uppercase()))));
            }
        } else if l.starts_with("-A ") {
            tables.get_mut(&table).unwrap().1 += 1;
        }
    }
    let run = doc["facts"]["iptables"]["saves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["backend"] == backend && s["family"] == family)
        .unwrap_or_else(|| panic!("no {backend} {family} count: {}", doc["facts"]["iptables"]));
    let counts = &run["counts"];
    for (t, (chains, rules)) in &tables {
        assert_eq!(counts["tables"][t]["chains"], *chains, "{backend} {t} chains: {counts}");
        assert_eq!(counts["tables"][t]["rules"], *rules, "{backend} {t} rules: {counts}");
    }
    assert_eq!(counts["tables"].as_object().unwrap().len(), tables.len(), "{counts}");
    for (k, n) in kube {
        assert_eq!(counts["kube"][k], n, "{backend} kube chains {k}: {counts}");
    }
    assert_eq!(doc["facts"]["iptables"]["backend_in_use"], backend);
}

/// The agent's nftables counts equal `nft -j list table <family> kube-proxy`'s.
fn nftables_counts_equal_the_listing(ns: &Netns, family: &str, doc: &Value) {
    let t = doc["facts"]["nftables"]["tables"]
        .as_array()
        .unwrap()
        .iter()
        // The agent names families ipv4/ipv6 everywhere; nft says ip/ip6.
        .find(|t| t["family"] == if family == "ip6" { "ipv6" } else { "ipv4" })
        .unwrap_or_else(|| panic!("no {family} table: {}", doc["facts"]["nftables"]));
    assert_eq!(
        t["counts"],
        common::nft_listing_counts(ns, family),
        "{family}: netlink vs nft -j"
    );
}

fn corpus_case(tag: &str, file: &str, how: Load, table: Table, outside: Outside) -> Value {
    corpus_case_in(&V4, tag, file, how, table, outside)
}

/// Runs one case; returns the agent's conntrack_stale facts.
fn corpus_case_in(net: &Net, tag: &str, file: &str, how: Load, table: Table, outside: Outside) -> Value {
    corpus_case_rules(net, tag, file, &fixture(file), how, table, outside)
}

/// [`corpus_case_in`] on `rules` (named `file` in messages): a fixture as it is, or altered.
fn corpus_case_rules(
    net: &Net,
    tag: &str,
    file: &str,
    rules: &str,
    how: Load,
    table: Table,
    outside: Outside,
) -> Value {
    let node = Netns::new(tag);
    let host = if net.node.contains(':') { 128 } else { 32 };
    node.exec_ok("ip", &["addr", "add", &format!("{}/{host}", net.node), "dev", "lo"]);
    load(&node, how, rules);

    // Per service port (from a pod address, 10.1.0.1): one entry to each
    // endpoint (current), one to GONE (stale); then the outside client's.
    let mut ct = Inserter {
        ns: &node,
        sport: 20000,
        pod: net.pod,
    };
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    let mut want_groups: BTreeMap<(String, String), u64> = BTreeMap::new();
    let service = |label: &str| {
        let (dst, dport) = destination(net, label);
        format!("{}/{}", net.socket(&dst, dport), protocol(label))
    };
    for (label, eps) in table {
        let (dst, dport) = destination(net, label);
        let p = protocol(label);
        for ep in *eps {
            ct.insert(p, &dst, dport, ep);
        }
        let port = eps
            .first()
            .map_or(dport, |e| e.rsplit_once(':').unwrap().1.parse().unwrap());
        let gone = net.socket(net.gone, port);
        ct.insert(p, &dst, dport, &gone);
        *want.entry(p.to_string()).or_default() += 1;
        *want_groups.entry((service(label), gone)).or_default() += 1;
    }
    for (label, ep, stale) in outside {
        let (dst, dport) = destination(net, label);
        let p = protocol(label);
        ct.insert_from(net.outside, p, &dst, dport, ep);
        if *stale {
            *want.entry(p.to_string()).or_default() += 1;
            *want_groups.entry((service(label), ep.to_string())).or_default() += 1;
        }
    }
    // No service address: never counted.
    ct.insert("tcp", net.elsewhere, 80, &net.socket(net.gone, 80));
    ct.insert("udp", net.elsewhere, 53, &net.socket(net.gone, 53));

    let source = match how {
        Load::Iptables(b) | Load::Ip6tables(b) => format!("iptables-{b}"),
        Load::Nftables => "nftables".into(),
    };
    let port = 9000 + (std::process::id() % 500) as u16;
    let listen = format!("127.0.0.1:{port}");
    let agent = common::Serve::new()
        .in_netns(&node)
        .listen(&listen)
        .args(common::NO_KUBE_PROXY)
        .args([
            "--conntrack-stale.interval",
            "1s",
            "--iptables.interval",
            "1s",
            "--iptables.save-interval",
            "0",
        ])
        .no_wait()
        .start();
    let ports = table.len() as u64;
    let started = Instant::now();
    let doc = loop {
        let doc: Option<Value> = agent.get_200("/snapshot").and_then(|b| serde_json::from_str(&b).ok());
        if let Some(d) = doc {
            let f = &d["facts"]["conntrack_stale"];
            if f["source"] == source.as_str() && f["service_ports"] == ports && d["facts"]["iptables"].is_object() {
                break d;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{file} ({how:?}): no reading with source {source} and {ports} service ports in 30 s: {f} probe: {}",
                d["probes"]["conntrack_stale"]
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{file}: the agent never answered"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let f = &doc["facts"]["conntrack_stale"];
    let node_ports = table.iter().filter(|(l, _)| l.starts_with(':')).count() as u64;
    let endpoints: u64 = table.iter().map(|(_, e)| e.len() as u64).sum();
    assert_eq!(
        (&f["node_ports"], &f["endpoints"]),
        (&Value::from(node_ports), &Value::from(endpoints)),
        "{file}: {f}"
    );
    assert!(
        f["undecoded"].as_object().unwrap().values().all(|n| n == 0),
        "{file}: {f}"
    );
    // UDP is stale (what kube-proxy's reconciler clears), TCP and SCTP draining.
    for (p, key) in [
        ("tcp", "draining_entries"),
        ("udp", "stale_entries"),
        ("sctp", "draining_entries"),
    ] {
        assert_eq!(
            f[key][p],
            want.get(p).copied().unwrap_or(0),
            "{file} {p}: 0 false, 0 missed: {f}"
        );
    }
    // Exactly the stale (service, endpoint) groups: GONE per port, and the
    // outside client's entries the rules no longer route to.
    let groups: BTreeMap<(String, String), u64> = f["stale"]
        .as_array()
        .unwrap()
        .iter()
        .chain(f["draining"].as_array().unwrap())
        .map(|g| {
            let service = g["service"].as_str().unwrap().to_string();
            let node_port = g["node_port"].as_bool().unwrap_or(false);
            let on_node = service.trim_start_matches('[').starts_with(net.node);
            assert_eq!(node_port, on_node, "{file}: {g}");
            (
                (service, g["endpoint"].as_str().unwrap().to_string()),
                g["entries"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(groups, want_groups, "{file}: stale groups: {f}");
    match how {
        Load::Iptables(backend) => iptables_counts_equal_the_save(&node, backend, "ipv4", &doc),
        Load::Ip6tables(backend) => iptables_counts_equal_the_save(&node, backend, "ipv6", &doc),
        Load::Nftables => nftables_counts_equal_the_listing(&node, net.nft, &doc),
    }
    f.clone()
}

/// The Overall iptables dump, counted by hand: one entry to 10.180.9.9 per
/// service port (13) and two from outside, all TCP: draining, none stale;
/// svc2's three outside flows to its remote endpoint (eTP=Local, no local
/// endpoint) are neither.
fn overall_iptables_counts_exactly(f: &Value) {
    overall_iptables_counts_exactly_in(
        f,
        &V4,
        ["1.2.3.4:80/tcp", "192.168.0.2:3001/tcp", "192.168.99.22:80/tcp"],
    );
}

/// The same counts in `net`'s addresses: `svc2` its load-balancer IP, NodePort and external IP ports.
fn overall_iptables_counts_exactly_in(f: &Value, net: &Net, svc2_ports: [&str; 3]) {
    // What kube-proxy's reconciler (pkg/proxy/conntrack/cleanup.go) would clear: UDP
    // entries to no serving endpoint; all of these are TCP, so none.
    assert_eq!(
        f["stale_entries"].get("udp").and_then(Value::as_u64).unwrap_or(0),
        0,
        "{f}"
    );
    assert_eq!(f["draining_entries"]["tcp"], 15, "{f}");
    assert_eq!(f["draining_groups"], 13, "{f}");
    assert_eq!(f["stale_groups"], 0, "all TCP: draining, none stale: {f}");
    let svc2 = |svc: &str| {
        f["draining"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["service"] == svc)
            .map(|g| {
                (
                    g["endpoint"].as_str().unwrap().to_string(),
                    g["entries"].as_u64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let gone = net.socket(net.gone, 80);
    for svc in &svc2_ports[..2] {
        assert_eq!(svc2(svc), vec![(gone.clone(), 2)], "{svc}: {f}");
    }
    assert_eq!(svc2(svc2_ports[2]), vec![(gone, 1)], "{f}");
}

/// kube-proxy's Overall iptables rules in IPv6 (its IPv6 proxier writes no localhost
/// NodePorts), on `backend`: the eTP=Local NodePort and external flows to svc2's serving
/// remote endpoint are not stale, exactly the two to an endpoint in no path are counted.
fn overall_iptables_rules_ipv6_on(backend: &'static str, tag: &str) {
    if common::can_run(&["ip", &format!("ip6tables-{backend}-restore"), "conntrack"]) {
        let f = corpus_case_in(
            &V6,
            tag,
            "iptables-derived-TestOverallIPTablesRules-ipv6.txt",
            Load::Ip6tables(backend),
            OVERALL_V6,
            OVERALL_V6_OUTSIDE,
        );
        overall_iptables_counts_exactly_in(
            &f,
            &V6,
            [
                "[2001:db8:1::4]:80/tcp",
                "[2001:db8::1]:3001/tcp",
                "[fd00:99::22]:80/tcp",
            ],
        );
    }
}

/// [`OVERALL_V6`] with svc2 (eTP=Local, no local endpoint) on UDP: the derived IPv6 rules
/// with svc2's service rules matching `udp` instead of `tcp` (its health check node port
/// stays TCP, as kube-proxy serves it).
const OVERALL_V6_SVC2_UDP: Table = &[
    ("[fd00:30::41]:80/tcp", &["[fd00:180::1]:80"]),
    ("[fd00:30::42]:80/udp", &["[fd00:180::2]:80"]),
    ("[fd00:99::22]:80/udp", &["[fd00:180::2]:80"]),
    ("[2001:db8:1::4]:80/udp", &["[fd00:180::2]:80"]),
    (":3001/udp", &["[fd00:180::2]:80"]),
    ("[fd00:30::43]:80/tcp", &["[fd00:180::3]:80"]),
    (":3003/tcp", &["[fd00:180::3]:80"]),
    ("[fd00:30::44]:80/tcp", &["[fd00:180::4]:80", "[fd00:180::5]:80"]),
    ("[fd00:99::33]:80/tcp", &["[fd00:180::4]:80", "[fd00:180::5]:80"]),
    ("[fd00:30::45]:80/tcp", &["[fd00:180::3]:80"]),
    ("[2001:db8:5::8]:80/tcp", &["[fd00:180::3]:80"]),
    (":3002/tcp", &["[fd00:180::3]:80"]),
    ("[fd00:30::46]:80/tcp", &[]),
];

/// [`OVERALL_V6_OUTSIDE`] with svc2's flows on UDP: the three to its serving remote endpoint
/// are not what kube-proxy's reconciler clears (it ignores traffic policy), the two to an
/// endpoint in no path are.
const OVERALL_V6_SVC2_UDP_OUTSIDE: Outside = &[
    ("[2001:db8:1::4]:80/udp", "[fd00:180::2]:80", false),
    ("[fd00:99::22]:80/udp", "[fd00:180::2]:80", false),
    (":3001/udp", "[fd00:180::2]:80", false),
    ("[fd00:99::33]:80/tcp", "[fd00:180::4]:80", false),
    (":3003/tcp", "[fd00:180::3]:80", false),
    (":3001/udp", "[fd00:180::9:9]:80", true),
    ("[2001:db8:1::4]:80/udp", "[fd00:180::9:9]:80", true),
];

/// The UDP IPv6 case of eTP=Local: [`overall_iptables_rules_ipv6_on`] with svc2 on UDP, on
/// `backend`. UDP is what kube-proxy's reconciler clears, so here the outside flows to svc2's
/// serving remote endpoint would be false stale entries if the check judged them against the
/// local endpoints; exactly the 4 entries to GONE on svc2's ports and the 2 outside ones to an
/// endpoint in no path are stale.
fn overall_iptables_rules_ipv6_svc2_udp_on(backend: &'static str, tag: &str) {
    if !common::can_run(&["ip", &format!("ip6tables-{backend}-restore"), "conntrack"]) {
        return;
    }
    let file = "iptables-derived-TestOverallIPTablesRules-ipv6.txt";
    let rules: String = fixture(file)
        .lines()
        .map(|l| {
            if l.contains("ns2/svc2:p80") && !l.contains("health check node port") {
                l.replace("-m tcp -p tcp", "-m udp -p udp")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    assert_eq!(
        rules.matches("-m udp -p udp").count(),
        9,
        "svc2's service rules, moved to UDP"
    );
    let f = corpus_case_rules(
        &V6,
        tag,
        &format!("{file} (svc2 on UDP)"),
        &rules,
        Load::Ip6tables(backend),
        OVERALL_V6_SVC2_UDP,
        OVERALL_V6_SVC2_UDP_OUTSIDE,
    );
    assert_eq!(f["stale_entries"]["udp"], 6, "{f}");
    let stale_to_serving = f["stale"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["endpoint"] == "[fd00:180::2]:80")
        .count();
    assert_eq!(
        stale_to_serving, 0,
        "svc2's serving remote endpoint is never stale: {f}"
    );
}

#[test]
fn overall_iptables_rules_ipv6_svc2_udp_on_iptables_nft() {
    overall_iptables_rules_ipv6_svc2_udp_on("nft", "kpc-un6");
}

#[test]
fn overall_iptables_rules_ipv6_svc2_udp_on_iptables_legacy() {
    overall_iptables_rules_ipv6_svc2_udp_on("legacy", "kpc-ul6");
}

#[test]
fn overall_iptables_rules_ipv6_on_iptables_nft() {
    overall_iptables_rules_ipv6_on("nft", "kpc-in6");
}

#[test]
fn overall_iptables_rules_ipv6_on_iptables_legacy() {
    overall_iptables_rules_ipv6_on("legacy", "kpc-il6");
}

#[test]
fn overall_iptables_rules_on_iptables_nft() {
    if common::can_run(&["ip", "iptables-nft-restore", "conntrack"]) {
        let f = corpus_case(
            "kpc-in",
            "iptables-TestOverallIPTablesRules.txt",
            Load::Iptables("nft"),
            OVERALL,
            OVERALL_OUTSIDE,
        );
        overall_iptables_counts_exactly(&f);
    }
}

#[test]
fn overall_iptables_rules_on_iptables_legacy() {
    if common::can_run(&["ip", "iptables-legacy-restore", "conntrack"]) {
        let f = corpus_case(
            "kpc-il",
            "iptables-TestOverallIPTablesRules.txt",
            Load::Iptables("legacy"),
            OVERALL,
            OVERALL_OUTSIDE,
        );
        overall_iptables_counts_exactly(&f);
    }
}

#[test]
fn overall_nftables_rules() {
    if common::can_run(&["ip", "nft", "conntrack"]) {
        corpus_case(
            "kpc-n",
            "nftables-TestOverallNFTablesRules.nft",
            Load::Nftables,
            OVERALL,
            OVERALL_OUTSIDE,
        );
    }
}

#[test]
fn nftables_traffic_policy_local_derived() {
    if common::can_run(&["ip", "nft", "conntrack"]) {
        corpus_case(
            "kpc-nl",
            "nftables-derived-traffic-policy-local.nft",
            Load::Nftables,
            TRAFFIC_POLICY_LOCAL,
            TRAFFIC_POLICY_LOCAL_OUTSIDE,
        );
    }
}

/// A legacy save the decoder cannot read — cut (the save stops mid-table) or
/// garbled (a DNAT without its destination) — is a clear error in the stale
/// check's facts and its info finding, and the nftables source still counts.
/// The stand-in `iptables-legacy-save` on PATH prints the real save altered.
#[test]
fn legacy_save_cut_or_garbled_is_an_error_and_nftables_still_counts() {
    if !common::can_run(&[
        "ip",
        "iptables-legacy-restore",
        "iptables-legacy-save",
        "nft",
        "conntrack",
    ]) {
        return;
    }
    let real = common::which("iptables-legacy-save").unwrap();
    for (tag, filter, what) in [
        ("kpc-cut", "head -n 30", "iptables-legacy-save"),
        (
            "kpc-gbl",
            "sed 's/--to-destination 10.180.0.1:80//'",
            "DNAT without --to-destination",
        ),
    ] {
        let node = Netns::new(tag);
        node.exec_ok("ip", &["addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"]);
        load(
            &node,
            Load::Iptables("legacy"),
            &fixture("iptables-TestOverallIPTablesRules.txt"),
        );
        load(&node, Load::Nftables, &fixture("nftables-TestOverallNFTablesRules.nft"));
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("iptables-legacy-save");
        std::fs::write(&fake, format!("#!/bin/sh\n{} \"$@\" | {filter}\n", real.display())).unwrap();
        std::fs::set_permissions(
            &fake,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
        )
        .unwrap();
        let mut ct = Inserter {
            ns: &node,
            sport: 30000,
            pod: V4.pod,
        };
        ct.insert("tcp", "172.30.0.41", 80, &format!("{GONE}:80"));
        let port = 9500 + (std::process::id() % 400) as u16;
        let listen = format!("127.0.0.1:{port}");
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let agent = common::Serve::new()
            .in_netns(&node)
            .listen(&listen)
            .args(common::NO_KUBE_PROXY)
            .args([
                "--conntrack-stale.interval",
                "1s",
                "--iptables.interval",
                "1s",
                "--iptables.save-interval",
                "0",
            ])
            .env("PATH", path)
            .no_wait()
            .start();
        let started = Instant::now();
        let doc = loop {
            let doc: Option<Value> = agent.get_200("/snapshot").and_then(|b| serde_json::from_str(&b).ok());
            if let Some(d) = doc {
                let errors = &d["facts"]["conntrack_stale"]["legacy_errors"];
                if errors
                    .as_array()
                    .is_some_and(|e| e.iter().any(|e| e.as_str().unwrap_or("").contains(what)))
                {
                    break d;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{tag}: no legacy error in 30 s: {} iptables: {}",
                    d["facts"]["conntrack_stale"],
                    d["probes"]["iptables"]
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{tag}: the agent never answered"
            );
            std::thread::sleep(Duration::from_millis(250));
        };
        let f = &doc["facts"]["conntrack_stale"];
        assert_eq!(f["source"], "nftables", "{tag}: {f}");
        assert_eq!(f["service_ports"], OVERALL.len() as u64, "{tag}: {f}");
        assert_eq!(
            f["draining_entries"]["tcp"], 1,
            "{tag}: the nftables source still counts: {f}"
        );
        assert_eq!(f["legacy_errors"].as_array().unwrap().len(), 1, "{tag}: {f}");
        let finding = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == "conntrack_stale_partial")
            .unwrap_or_else(|| panic!("{tag}: {}", doc["findings"]));
        assert_eq!(finding["severity"], "info");
        assert!(
            finding["summary"].as_str().unwrap().contains("iptables-legacy"),
            "{finding}"
        );
    }
}

/// The derived eTP/iTP=Local layout in the ip6 family: IPv6 service ports,
/// endpoints, NodePort on an IPv6 node address and IPv6 conntrack entries.
#[test]
fn nftables_traffic_policy_local_derived_ipv6() {
    if common::can_run(&["ip", "nft", "conntrack"]) {
        corpus_case_in(
            &V6,
            "kpc-n6",
            "nftables-derived-traffic-policy-local-ipv6.nft",
            Load::Nftables,
            TRAFFIC_POLICY_LOCAL_V6,
            TRAFFIC_POLICY_LOCAL_V6_OUTSIDE,
        );
    }
}
