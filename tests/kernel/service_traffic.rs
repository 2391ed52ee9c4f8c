//! Service traffic tried for real, on the real kernel: a node namespace with
//! kube-proxy-shaped iptables-nft rules DNATing a kubernetes-like ClusterIP:443
//! and a kube-dns-like ClusterIP:53 (UDP and TCP) over a veth to an endpoint
//! namespace with real servers (a TCP listener, a DNS responder written here
//! in python3). `check --try-services` runs in the node namespace: both tries
//! succeed and name the endpoint their conntrack entry reached, as `conntrack
//! -L` shows for the same tuple; stopping the DNS server raises
//! service_traffic_failing; a lossy endpoint link (its first SYN dropped: this
//! kernel has no netem) raises service_connect_slow, removing the drop clears it; without
//! `--try-services` the agent creates no conntrack entry toward the Services and sends them
//! no packet (a counter on the namespace's output hook, before conntrack);
//! `compare` of `baseline save --try-services` before and after the loss says
//! worse for the API server's connect time.
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use common::Netns;
use serde_json::Value;

const API: &str = "10.96.0.1";
const DNS: &str = "10.96.0.10";
const NODE: &str = "10.77.0.1";
const EP: &str = "10.77.0.2";

/// A TCP listener (accept, close) or a DNS responder (UDP and TCP: one A
/// record for any question), on `addr`.
const SERVER: &str = r#"
import socket, struct, sys, threading
addr, mode = sys.argv[1], sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 6443
def answer(q):
    hdr = q[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x00\x00\x00"
    end = 12
    while q[end] != 0:
        end += q[end] + 1
    question = q[12:end + 5]
    rr = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x1e\x00\x04" + socket.inet_aton("10.96.0.1")
    return hdr + question + rr
if mode == "tcp":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(64)
    print("ready", flush=True)
    while True:
        c, _ = s.accept(); c.close()
else:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 53))
    t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((addr, 53)); t.listen(64)
    def tcp():
        while True:
            c, _ = t.accept()
            n = struct.unpack("!H", c.recv(2))[0]
            q = b""
            while len(q) < n:
                q += c.recv(n - len(q))
            a = answer(q)
            c.sendall(struct.pack("!H", len(a)) + a); c.close()
    threading.Thread(target=tcp, daemon=True).start()
    print("ready", flush=True)
    while True:
        q, peer = u.recvfrom(512)
        u.sendto(answer(q), peer)
"#;

/// Drops each source's first SYN to the API endpoint (a lossy link: the client retransmits).
const SLOW: &str = "table inet pwslow {
  set seen { type ipv4_addr; flags timeout; timeout 60s; }
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport 6443 tcp flags & (syn | ack) == syn ip saddr @seen accept
    tcp dport 6443 tcp flags & (syn | ack) == syn add @seen { ip saddr } drop
  }
}
";

/// Every packet the node namespace sends toward a Service or the endpoint, counted on its
/// output hook before conntrack and NAT (raw priority): what a capture of its egress to them
/// would hold, conntrack or not.
const CAPTURE: &str = "table inet pwcap {
  chain out {
    type filter hook output priority raw; policy accept;
    ip daddr { 10.96.0.0/16, 10.77.0.2 } counter
  }
}
";

/// The packets [`CAPTURE`] counted.
fn captured(ns: &Netns) -> u64 {
    let out = ns
        .command("nft", &["list", "table", "inet", "pwcap"])
        .output()
        .expect("nft");
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text
        .find("counter packets ")
        .unwrap_or_else(|| panic!("no counter: {text}"));
    text[at + 16..].split_whitespace().next().unwrap().parse().unwrap()
}

/// A server in the endpoint namespace, killed (by its pid) on drop.
struct Server(Child);

impl Server {
    fn start(ns: &Netns, mode: &str) -> Server {
        Server::start_on(ns, mode, "6443")
    }

    fn start_on(ns: &Netns, mode: &str, port: &str) -> Server {
        let mut child = ns
            .command("python3", &["-c", SERVER, EP, mode, port])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the {mode} server did not start");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `--service-traffic.target` Service with a NodePort (its endpoint: `EP:8080`).
const WEB: &str = "10.96.0.20";
const WEB_NODE_PORT: u16 = 30080;

/// kube-proxy's iptables layout (pkg/proxy/iptables) for the three Services, one endpoint each;
/// `default/web` also has a NodePort (`KUBE-NODEPORTS`, from `KUBE-SERVICES`'s last rule).
fn rules() -> String {
    format!(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
         :KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
         :KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n:KUBE-SEP-API0000000000000 - [0:0]\n\
         :KUBE-SVC-TCOU7JCQXEZGVUNU - [0:0]\n:KUBE-SEP-DNSUDP000000000 - [0:0]\n\
         :KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]\n:KUBE-SEP-DNSTCP000000000 - [0:0]\n\
         :KUBE-NODEPORTS - [0:0]\n:KUBE-SVC-WEB0000000000000 - [0:0]\n:KUBE-EXT-WEB0000000000000 - [0:0]\n:KUBE-SEP-WEB0000000000000 - [0:0]\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-SERVICES -d {API}/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y\n\
         -A KUBE-SERVICES -d {DNS}/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU\n\
         -A KUBE-SERVICES -d {DNS}/32 -p tcp -m comment --comment \"kube-system/kube-dns:dns-tcp cluster IP\" -m tcp --dport 53 -j KUBE-SVC-ERIFXISQEP7F7OF4\n\
         -A KUBE-SERVICES -d {WEB}/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-WEB0000000000000\n\
         -A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n\
         -A KUBE-NODEPORTS -p tcp -m comment --comment \"default/web:http\" -m tcp --dport {WEB_NODE_PORT} -j KUBE-EXT-WEB0000000000000\n\
         -A KUBE-EXT-WEB0000000000000 -m comment --comment \"masquerade traffic for default/web:http external destinations\" -j KUBE-MARK-MASQ\n\
         -A KUBE-EXT-WEB0000000000000 -j KUBE-SVC-WEB0000000000000\n\
         -A KUBE-SVC-WEB0000000000000 -m comment --comment \"default/web:http -> {EP}:8080\" -j KUBE-SEP-WEB0000000000000\n\
         -A KUBE-SEP-WEB0000000000000 -p tcp -m comment --comment \"default/web:http\" -m tcp -j DNAT --to-destination {EP}:8080\n\
         -A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment \"default/kubernetes:https -> {EP}:6443\" -j KUBE-SEP-API0000000000000\n\
         -A KUBE-SEP-API0000000000000 -s {EP}/32 -m comment --comment \"default/kubernetes:https\" -j KUBE-MARK-MASQ\n\
         -A KUBE-SEP-API0000000000000 -p tcp -m comment --comment \"default/kubernetes:https\" -m tcp -j DNAT --to-destination {EP}:6443\n\
         -A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> {EP}:53\" -j KUBE-SEP-DNSUDP000000000\n\
         -A KUBE-SEP-DNSUDP000000000 -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination {EP}:53\n\
         -A KUBE-SVC-ERIFXISQEP7F7OF4 -m comment --comment \"kube-system/kube-dns:dns-tcp -> {EP}:53\" -j KUBE-SEP-DNSTCP000000000\n\
         -A KUBE-SEP-DNSTCP000000000 -p tcp -m comment --comment \"kube-system/kube-dns:dns-tcp\" -m tcp -j DNAT --to-destination {EP}:53\n\
         COMMIT\n"
    )
}

/// How kube-proxy's rules are loaded in the lab's node namespace.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Backend {
    IptablesNft,
    IptablesLegacy,
    /// kube-proxy's nftables mode: its `kube-proxy` table, from tests/tools/gen_kube_nft.py.
    Nftables,
}

impl Backend {
    fn tools(self) -> &'static [&'static str] {
        match self {
            Backend::IptablesNft => &["ip", "iptables-nft-restore", "nft", "conntrack", "python3"],
            Backend::IptablesLegacy => &[
                "ip",
                "iptables-legacy-restore",
                "iptables-legacy-save",
                "nft",
                "conntrack",
                "python3",
            ],
            Backend::Nftables => &["ip", "nft", "conntrack", "python3"],
        }
    }

    fn load(self, node: &Netns) {
        match self {
            Backend::IptablesNft => drop(node.exec_input("iptables-nft-restore", &[], &rules())),
            Backend::IptablesLegacy => drop(node.exec_input("iptables-legacy-restore", &[], &rules())),
            Backend::Nftables => drop(node.exec_input("nft", &["-f", "-"], &nft_rules())),
        }
    }
}

/// kube-proxy's nftables layout (pkg/proxy/nftables) for the two Services, one endpoint each.
fn nft_rules() -> String {
    let gen = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_nft.py");
    let out = common::run(
        "python3",
        &[
            gen.to_str().unwrap(),
            "--services",
            "0",
            "--endpoints",
            "1",
            "--node-ip",
            NODE,
            "--service",
            &format!("default/kubernetes/tcp/https={API}:443@{EP}:6443"),
            "--service",
            &format!("kube-system/kube-dns/udp/dns={DNS}:53@{EP}:53"),
            "--service",
            &format!("kube-system/kube-dns/tcp/dns-tcp={DNS}:53@{EP}:53"),
            "--service",
            &format!("default/web/tcp/http={WEB}:80@{EP}:8080,{WEB_NODE_PORT}"),
        ],
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The node namespace (rules, route to the ClusterIPs) and the endpoint namespace, joined by a veth.
fn lab(backend: Backend) -> (Netns, Netns) {
    let node = Netns::new("st-node");
    let ep = Netns::new("st-ep");
    node.exec_ok("ip", &["link", "add", "st-n", "type", "veth", "peer", "name", "st-e"]);
    node.exec_ok("ip", &["link", "set", "st-e", "netns", &ep.name]);
    node.exec_ok("ip", &["addr", "add", &format!("{NODE}/24"), "dev", "st-n"]);
    node.exec_ok("ip", &["link", "set", "st-n", "up"]);
    node.exec_ok("ip", &["route", "add", "10.96.0.0/12", "dev", "st-n"]);
    ep.exec_ok("ip", &["addr", "add", &format!("{EP}/24"), "dev", "st-e"]);
    ep.exec_ok("ip", &["link", "set", "st-e", "up"]);
    backend.load(&node);
    (node, ep)
}

const RUN_FLAGS: &[&str] = &[
    "--kube-proxy.down-grace",
    "0s",
    "--service-traffic.try-timeout",
    "2s",
    "--service-traffic.target",
    "default/web:80",
];

/// `check --format json` in the node namespace (its exit code says the status: not asserted here).
fn check(node: &Netns, extra: &[&str]) -> Value {
    common::Check::new()
        .in_netns(node)
        .args(RUN_FLAGS)
        .args(extra)
        .run()
        .doc
}

/// `baseline save --try-services FILE` in the node namespace: the document it wrote.
fn baseline(node: &Netns, file: &std::path::Path) -> Value {
    let mut args = vec!["baseline", "save", file.to_str().unwrap(), "--try-services"];
    args.extend_from_slice(RUN_FLAGS);
    let out = node
        .command(common::binary().to_str().unwrap(), &args)
        .output()
        .expect("proxywatch baseline save");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

fn tries(doc: &Value) -> Vec<Value> {
    doc["facts"]["service_traffic"]["tries"]
        .as_array()
        .unwrap_or_else(|| panic!("no service_traffic facts: {doc:#}"))
        .clone()
}

fn try_of<'a>(tries: &'a [Value], target: &str) -> &'a Value {
    tries
        .iter()
        .find(|t| t["target"] == target)
        .unwrap_or_else(|| panic!("no try of {target}: {tries:#?}"))
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array()?.iter().find(|f| f["id"] == id)
}

/// `conntrack -L` lines in `ns` of entries whose original destination is `dst`.
fn conntrack_lines(ns: &Netns, proto: &str, dst: &str) -> Vec<String> {
    let out = ns
        .command("conntrack", &["-L", "-p", proto, "--orig-dst", dst])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The three built-in tries succeed, each naming the endpoint its own conntrack
/// entry reached, as `conntrack -L` shows for the same tuple.
fn assert_tries_reach_the_endpoint(node: &Netns, doc: &Value, source: &str) {
    let t = tries(doc);
    assert_eq!(
        doc["facts"]["service_traffic"]["source"], source,
        "{:#}",
        doc["facts"]["service_traffic"]
    );
    for target in [
        "default/kubernetes:443/tcp",
        "kube-system/kube-dns:53/udp",
        "kube-system/kube-dns:53/tcp",
        "default/web:80/tcp",
        "default/web:80/tcp nodeport",
    ] {
        let tr = try_of(&t, target);
        assert_eq!(tr["result"], "ok", "{tr:#}");
        assert_eq!(tr["path"], "current", "{tr:#}");
    }
    // The NodePort, on the node's own address, reached the Service's endpoint.
    let np = try_of(&t, "default/web:80/tcp nodeport");
    assert_eq!(np["service"], format!("{NODE}:{WEB_NODE_PORT}/tcp"), "{np:#}");
    assert_eq!(np["endpoint"], format!("{EP}:8080"), "{np:#}");
    assert_eq!(
        np["rule_endpoints"],
        serde_json::json!([format!("{EP}:8080")]),
        "{np:#}"
    );
    let api = try_of(&t, "default/kubernetes:443/tcp");
    assert_eq!(api["service"], format!("{API}:443/tcp"));
    assert_eq!(api["endpoint"], format!("{EP}:6443"));
    assert_eq!(api["rule_endpoints"], serde_json::json!([format!("{EP}:6443")]));
    let dns_udp = try_of(&t, "kube-system/kube-dns:53/udp");
    assert_eq!(dns_udp["endpoint"], format!("{EP}:53"));
    assert!(
        dns_udp["detail"].as_str().unwrap().starts_with("NOERROR, 1 answer"),
        "{dns_udp:#}"
    );
    let dns_tcp = try_of(&t, "kube-system/kube-dns:53/tcp");
    assert_eq!(dns_tcp["endpoint"], format!("{EP}:53"));
    // The same tuple in `conntrack -L`: the try's source port, answered by the endpoint (to the
    // node's address; kube-proxy's nftables masquerade is fully-random, so the reply's port may
    // differ from the source's).
    for (tr, proto, dst, ep_port) in [
        (api, "tcp", API, 6443),
        (dns_udp, "udp", DNS, 53),
        (dns_tcp, "tcp", DNS, 53),
        (np, "tcp", NODE, 8080),
    ] {
        let sport = tr["source"].as_str().unwrap().rsplit(':').next().unwrap().to_string();
        let lines = conntrack_lines(node, proto, dst);
        assert!(
            lines.iter().any(|l| l.contains(&format!("sport={sport} dport="))
                && l.contains(&format!("src={EP} dst={NODE} sport={ep_port} "))),
            "no conntrack entry of the try from port {sport} reaching {EP}:{ep_port}: {lines:#?}"
        );
    }
    assert_eq!(finding(doc, "service_traffic_failing"), None, "{:#}", doc["findings"]);
    assert_eq!(finding(doc, "service_connect_slow"), None, "{:#}", doc["findings"]);
}

/// The lab on `backend`, its servers up: both built-in tries reach the endpoint.
fn tries_reach_the_endpoint_on(backend: Backend, source: &str) {
    if !common::can_run(backend.tools()) {
        return;
    }
    let (node, ep) = lab(backend);
    let _api = Server::start(&ep, "tcp");
    let _web = Server::start_on(&ep, "tcp", "8080");
    let _dns = Server::start(&ep, "dns");
    let on = check(&node, &["--try-services"]);
    assert_tries_reach_the_endpoint(&node, &on, source);
}

#[test]
fn service_tries_on_iptables_legacy_name_the_endpoint_conntrack_shows() {
    tries_reach_the_endpoint_on(Backend::IptablesLegacy, "iptables-legacy");
}

#[test]
fn service_tries_on_kube_proxys_nftables_table_name_the_endpoint_conntrack_shows() {
    tries_reach_the_endpoint_on(Backend::Nftables, "nftables");
}

#[test]
fn service_tries_name_the_endpoint_conntrack_shows_and_fail_or_slow_down_with_the_data_plane() {
    if !common::can_run(Backend::IptablesNft.tools()) {
        return;
    }
    let (node, ep) = lab(Backend::IptablesNft);
    let _api = Server::start(&ep, "tcp");
    let _web = Server::start_on(&ep, "tcp", "8080");
    let dns = Server::start(&ep, "dns");

    // Off: no try, no conntrack entry toward the Services, no packet sent to them.
    let _ = node.command("conntrack", &["-F"]).stderr(Stdio::null()).status();
    node.exec_input("nft", &["-f", "-"], CAPTURE);
    let off = check(&node, &[]);
    assert_eq!(captured(&node), 0, "the probe off sent packets toward the Services");
    assert!(
        off["facts"].get("service_traffic").is_none_or(Value::is_null),
        "{:#}",
        off["facts"]
    );
    for (p, d) in [("tcp", API), ("udp", DNS), ("tcp", DNS)] {
        assert_eq!(
            conntrack_lines(&node, p, d),
            Vec::<String>::new(),
            "the probe off sent to {d}/{p}"
        );
    }

    // On (a baseline, as the runbook saves before a change): both Services tried, each
    // naming the endpoint its own conntrack entry reached.
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = (dir.path().join("before.json"), dir.path().join("after.json"));
    let on = baseline(&node, &before);
    assert_tries_reach_the_endpoint(&node, &on, "iptables-nft");
    // The same count sees the tries: it would have seen packets of the agent off.
    assert!(captured(&node) > 0, "the capture saw none of the tries");

    // A slow data plane: this kernel has no netem (CONFIG_NET_SCH_NETEM is not set, and no
    // module is loaded), so the endpoint's namespace drops each client's first SYN to the
    // API endpoint: the connect waits for the retransmission (TCP's initial RTO, 1 s).
    // Slow, naming the endpoint; the drop removed: clear.
    ep.exec_input("nft", &["-f", "-"], SLOW);
    let slow = baseline(&node, &after);
    let f = finding(&slow, "service_connect_slow").unwrap_or_else(|| panic!("{:#}", slow["findings"]));
    assert_eq!(f["severity"], "warning");
    assert!(
        f["summary"].as_str().unwrap().contains(&format!("reached {EP}:6443")),
        "{f:#}"
    );
    let api = try_of(&tries(&slow), "default/kubernetes:443/tcp").clone();
    assert!(api["seconds"].as_f64().unwrap() > 0.1, "{api:#}");
    // compare, the runbook's verification step: the connect time change is worse, by itself.
    let out = std::process::Command::new(common::binary())
        .args([
            "compare",
            before.to_str().unwrap(),
            after.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "worse exits 1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["verdict"], "worse", "{c:#}");
    assert!(
        c["reasons"].as_array().unwrap().iter().any(|r| r
            .as_str()
            .unwrap()
            .starts_with("default/kubernetes:443/tcp connects slower (")),
        "{:#}",
        c["reasons"]
    );
    let fact = c["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "service connect time default/kubernetes:443/tcp")
        .unwrap_or_else(|| panic!("{:#}", c["facts"]));
    assert_eq!(fact["state"], "changed", "{fact:#}");
    // The DNS tries were not slowed: unchanged.
    let dns_fact = c["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "service connect time kube-system/kube-dns:53/udp")
        .unwrap();
    assert_eq!(dns_fact["state"], "same", "{dns_fact:#}");
    ep.exec_ok("nft", &["delete", "table", "inet", "pwslow"]);
    let fast = check(&node, &["--try-services"]);
    assert_eq!(finding(&fast, "service_connect_slow"), None, "{:#}", fast["findings"]);

    // The DNS server stopped: refused (the endpoint's ICMP port unreachable, its RST), critical.
    drop(dns);
    let down = check(&node, &["--try-services"]);
    let f = finding(&down, "service_traffic_failing").unwrap_or_else(|| panic!("{:#}", down["findings"]));
    assert_eq!(f["severity"], "critical");
    let t = tries(&down);
    let udp = try_of(&t, "kube-system/kube-dns:53/udp");
    assert_eq!(udp["result"], "refused", "{udp:#}");
    assert_eq!(
        udp["endpoint"],
        format!("{EP}:53"),
        "the entry names the endpoint that refused: {udp:#}"
    );
    let tcp = try_of(&t, "kube-system/kube-dns:53/tcp");
    assert_eq!(tcp["result"], "refused", "{tcp:#}");
    // A RST before the connection was established: the kernel removed its entry; unknown, not "no DNAT".
    assert_eq!(tcp["path"], "unknown", "{tcp:#}");
    assert!(f["summary"].as_str().unwrap().contains("refused"), "{f:#}");
    assert_eq!(try_of(&t, "default/kubernetes:443/tcp")["result"], "ok");
}

/// The histogram's bounds (`le`), as `/metrics` and `derived.service_traffic.targets[].buckets` count them.
const BOUNDS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// Whether `v` can be the nearest-rank `q` quantile of the tries a target's histogram counted
/// (every try since the agent started, all of them in the window): at least the rank's number
/// of tries took at most any bound at or above `v`, fewer than it at most any bound below.
fn nearest_rank_fits(t: &serde_json::Value, q: f64, v: f64) -> bool {
    let n = t["count"].as_u64().unwrap();
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    BOUNDS.iter().zip(t["buckets"].as_array().unwrap()).all(|(le, c)| {
        let c = c.as_u64().unwrap();
        if *le >= v {
            c >= rank
        } else {
            c < rank
        }
    })
}

/// `serve` trying every 300 ms, its API endpoint's first SYN dropped (the first try slow):
/// what a user reads, the `/` text for curl and the status page's chart, gives for each
/// target the snapshot's p50 and p99 (`derived.service_traffic.targets[]`, from one
/// publication), and those are the nearest-rank quantiles of the tries the target's histogram
/// counted (fewer than the window's 60: every try so far).
#[test]
fn served_text_and_page_give_the_p50_and_p99_of_the_tries_the_history_keeps() {
    if !common::can_run(Backend::IptablesNft.tools()) {
        return;
    }
    let (node, ep) = lab(Backend::IptablesNft);
    let _api = Server::start(&ep, "tcp");
    let _web = Server::start_on(&ep, "tcp", "8080");
    let _dns = Server::start(&ep, "dns");
    ep.exec_input("nft", &["-f", "-"], SLOW);
    let agent = common::Serve::new()
        .in_netns(&node)
        .args(RUN_FLAGS)
        .args(["--service-traffic.interval", "300ms"])
        .start();
    const API_TARGET: &str = "default/kubernetes:443/tcp";
    let (snap, text, html) = common::poll(
        "6 tries of the API server, page and snapshot of one run",
        std::time::Duration::from_secs(60),
        || {
            let snap = agent.snapshot()?;
            let targets = snap["derived"]["service_traffic"]["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let api = targets
                .iter()
                .find(|t| t["target"] == API_TARGET)
                .ok_or("no API server target yet")?;
            if api["window_tries"].as_u64().unwrap_or(0) < 6 {
                return Err(format!("{} tries", api["window_tries"]));
            }
            let (_, text) = agent.get("/")?;
            let html = agent.request(&format!(
                "GET / HTTP/1.0\r\nHost: {}\r\nAccept: text/html\r\n\r\n",
                agent.addr()
            ))?;
            let at = snap["collected_at"].as_str().unwrap();
            // Both renderings from the same snapshot (a run may land between the requests).
            if !text.lines().next().is_some_and(|l| {
                l.ends_with(&format!("at {at} (0 critical, 0 warning, 0 info)")) || l.contains(&format!(" at {at} "))
            }) || !html.contains(&format!("snapshot {at}"))
            {
                return Err("a run between the requests".into());
            }
            Ok((snap, text, html))
        },
    );
    let mut seen = 0;
    for t in snap["derived"]["service_traffic"]["targets"].as_array().unwrap() {
        let target = t["target"].as_str().unwrap();
        let (Some(p50), Some(p99)) = (t["p50_seconds"].as_f64(), t["p99_seconds"].as_f64()) else {
            continue;
        };
        let n = t["window_tries"].as_u64().unwrap();
        assert_eq!(
            n,
            t["count"].as_u64().unwrap(),
            "every success so far in the window: {t:#}"
        );
        for (q, v) in [(0.5, p50), (0.99, p99)] {
            assert!(nearest_rank_fits(t, q, v), "{v} as the {q} quantile: {t:#}");
        }
        let words = format!("p50 {:.2} ms, p99 {:.2} ms over {n} tries", p50 * 1000.0, p99 * 1000.0);
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("  {target}: ")))
            .unwrap_or_else(|| panic!("no line for {target} in\n{text}"));
        assert!(line.ends_with(&words), "{line:?} does not end with {words:?}");
        assert!(
            html.contains(&format!(">{target}: {words}</text>")),
            "{target}: {words} not drawn"
        );
        assert!(
            html.contains(&format!(
                "<rect class=\"p99\" data-target=\"{target}\" data-seconds=\"{p99}\""
            )),
            "{target}'s p99 bar"
        );
        seen += 1;
    }
    assert!(
        seen >= 3,
        "the API server and DNS over UDP and TCP: {:#}",
        snap["derived"]["service_traffic"]
    );
    // The first try waited for the SYN's retransmission (a second at least): the one try the
    // histogram counts above 100 ms, the API server's p99, not its p50.
    let api = snap["derived"]["service_traffic"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == API_TARGET)
        .unwrap();
    let within_100ms = api["buckets"][BOUNDS.iter().position(|le| *le == 0.1).unwrap()].as_u64();
    assert_eq!(within_100ms, Some(api["count"].as_u64().unwrap() - 1), "{api:#}");
    assert!(
        api["p99_seconds"].as_f64().unwrap() > 0.1 && api["p50_seconds"].as_f64().unwrap() < 0.1,
        "{api:#}"
    );
}
