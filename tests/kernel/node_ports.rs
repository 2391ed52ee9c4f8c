//! NodePorts against the ephemeral port range on the real kernel, in a
//! network namespace this test creates (its `ip_local_port_range` and
//! `ip_local_reserved_ports` are the namespace's own: nothing global changes).
//!
//! kube-proxy-shaped NodePorts in every source the probe reads: iptables-nft
//! `nat` `KUBE-NODEPORTS` (IPv4, and one IPv6-only NodePort in ip6tables-nft),
//! a `filter` `KUBE-EXTERNAL-SERVICES` REJECT (a NodePort without endpoints), a
//! `filter` `KUBE-NODEPORTS` ACCEPT (a healthCheckNodePort), and the nftables
//! mode's `service-nodeports` / `no-endpoint-nodeports` maps; plus a ClusterIP
//! service whose port is inside the range (no NodePort: never reported).
//! `proxywatch check` runs inside the namespace (`ip netns exec`), so the
//! sysctls it reads under /proc/sys/net are the namespace's.
//!
//! 1. The kernel's own behaviour first: with the range narrowed to one NodePort,
//!    an outgoing connection takes exactly that port, and the agent reports
//!    exactly that NodePort.
//! 2. A range covering some NodePorts, with a list and a range already
//!    reserved: exactly the NodePorts inside and unreserved are reported, with
//!    a reservation value that keeps what was reserved.
//! 3. That value applied (the finding's own command): none is reported, the
//!    finding resolves, and the kernel refuses to hand the port out.
use crate::common;

use common::Netns;
use serde_json::Value;

fn load(ns: &Netns) {
    let mut nat = common::KubeNat::new();
    nat.chain("KUBE-NODEPORTS")
        .chain("KUBE-EXT-WEB")
        .chain("KUBE-EXT-DNS")
        .chain("KUBE-EXT-FAR")
        .rule("-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns/web:http\" -m tcp --dport 30080 -j KUBE-EXT-WEB")
        .rule("-A KUBE-NODEPORTS -p udp -m comment --comment \"ns/dns:dns\" -m udp --dport 30053 -j KUBE-EXT-DNS")
        .rule("-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns/far:http\" -m tcp --dport 31000 -j KUBE-EXT-FAR")
        .rule("-A KUBE-EXT-WEB -j KUBE-MARK-MASQ")
        .service(
            "CLUSTERIPONLY",
            "10.96.0.30",
            "tcp",
            30081,
            8080,
            &[("KUBE-SEP-C1".into(), "10.250.9.2".into())],
        )
        .rule("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS");
    let filter = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
:KUBE-NODEPORTS - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n\
-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS\n\
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
-A KUBE-NODEPORTS -m comment --comment \"ns/lb health check node port\" -m tcp -p tcp --dport 30085 -j ACCEPT\n\
-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/empty:http has no endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30075 -j REJECT --reject-with icmp-port-unreachable\n\
-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/ext:http has no endpoints\" -d 192.0.2.10/32 -m tcp -p tcp --dport 30076 -j REJECT --reject-with icmp-port-unreachable\n\
COMMIT\n";
    ns.exec_input("iptables-nft-restore", &[], &format!("{}{filter}", nat.render()));
    // An IPv6-only NodePort.
    let nat6 = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
:KUBE-NODEPORTS - [0:0]\n:KUBE-EXT-V6 - [0:0]\n\
-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns/v6:http\" -m tcp --dport 30070 -j KUBE-EXT-V6\nCOMMIT\n";
    ns.exec_input("ip6tables-nft-restore", &[], nat6);
    // kube-proxy's nftables mode (pkg/proxy/nftables): NodePorts in verdict maps.
    let nft = "table ip kube-proxy {\n\
\tchain external-DNSNFT-ns/dns2/udp/dns { }\n\
\tmap service-nodeports { type inet_proto . inet_service : verdict; elements = { udp . 30060 : goto external-DNSNFT-ns/dns2/udp/dns } }\n\
\tmap no-endpoint-nodeports { type inet_proto . inet_service : verdict; elements = { tcp . 30065 : drop } }\n}\n";
    ns.exec_input("nft", &["-f", "-"], nft);
}

fn check(ns: &Netns) -> Value {
    let out = ns
        .command(
            common::binary().to_str().unwrap(),
            &[
                "check",
                "--format",
                "json",
                "--iptables.save-interval",
                "0",
                "--conntrack-stale.interval",
                "0",
            ],
        )
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        doc["probes"]["node_ports"]["status"], "ok",
        "{}",
        doc["probes"]["node_ports"]
    );
    doc
}

fn exposed(doc: &Value) -> Vec<String> {
    doc["facts"]["node_ports"]["exposed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap()))
        .collect()
}

fn finding(doc: &Value) -> Option<&Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "node_ports_in_ephemeral_range")
}

fn sysctl(ns: &Netns, name: &str, value: &str) {
    ns.exec_ok("sysctl", &["-q", "-w", &format!("{name}={value}")]);
}

/// The source port the kernel gives an outgoing TCP connection in `ns`, or the errno's name.
fn outgoing_port(ns: &Netns) -> String {
    let script = r#"
import errno, socket
l = socket.socket(); l.bind(("127.0.0.1", 9)); l.listen(1)
c = socket.socket()
try:
    c.connect(("127.0.0.1", 9)); print(c.getsockname()[1])
except OSError as e:
    print(errno.errorcode[e.errno])
"#;
    let out = ns.exec_ok("python3", &["-c", script]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn node_ports_inside_the_ephemeral_range_are_exactly_those_reported_until_reserved() {
    if !common::can_run(&[
        "ip",
        "iptables-nft-restore",
        "ip6tables-nft-restore",
        "nft",
        "python3",
        "sysctl",
    ]) {
        return;
    }
    let ns = Netns::new("nodeports");
    load(&ns);

    // 1. One port in the range: the kernel hands exactly that NodePort out.
    sysctl(&ns, "net.ipv4.ip_local_port_range", "30080 30080");
    assert_eq!(
        outgoing_port(&ns),
        "30080",
        "the kernel takes the NodePort for an outgoing connection"
    );
    let doc = check(&ns);
    assert_eq!(exposed(&doc), ["30080/tcp"], "{}", doc["facts"]["node_ports"]);

    // 2. A wider range, a list and a range already reserved.
    sysctl(&ns, "net.ipv4.ip_local_port_range", "30055 30085");
    sysctl(&ns, "net.ipv4.ip_local_reserved_ports", "40000,30064-30066");
    let doc = check(&ns);
    let facts = &doc["facts"]["node_ports"];
    assert_eq!(
        exposed(&doc),
        ["30060/udp", "30070/tcp", "30075/tcp", "30080/tcp", "30085/tcp"],
        "{facts}"
    );
    assert_eq!(facts["source"], "iptables-nft+nftables", "{facts}");
    // 30053/udp, 30060/udp, 30065/tcp, 30070/tcp, 30075/tcp, 30080/tcp, 31000/tcp, and the health check 30085/tcp.
    assert_eq!(
        (&facts["node_ports"], &facts["health_check_node_ports"]),
        (&Value::from(8), &Value::from(1)),
        "{facts}"
    );
    assert_eq!(facts["undecoded"], 0);
    let by_port = |p: u64| {
        facts["exposed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["port"] == p)
            .unwrap()
            .clone()
    };
    assert_eq!(by_port(30070)["families"], serde_json::json!(["ipv6"]));
    assert_eq!(by_port(30085)["kind"], "health_check");
    assert_eq!(by_port(30060)["sources"], serde_json::json!(["nftables"]));
    let value = facts["reserve_value"].as_str().unwrap();
    assert_eq!(value, "30060,30064-30066,30070,30075,30080,30085,40000");
    let f = finding(&doc).expect("the finding fires");
    assert_eq!(f["severity"], "warning");
    let cmd = f["remediation"][0].as_str().unwrap();
    assert!(
        cmd.ends_with(&format!("sysctl -w net.ipv4.ip_local_reserved_ports={value}")),
        "{cmd}"
    );

    // 3. The finding's value applied: nothing exposed, and the kernel keeps the port.
    sysctl(&ns, "net.ipv4.ip_local_reserved_ports", value);
    let doc = check(&ns);
    assert_eq!(exposed(&doc), Vec::<String>::new(), "{}", doc["facts"]["node_ports"]);
    assert_eq!(doc["facts"]["node_ports"]["in_ephemeral_range"], 0);
    assert!(finding(&doc).is_none(), "{}", doc["findings"]);
    sysctl(&ns, "net.ipv4.ip_local_port_range", "30080 30080");
    assert_eq!(
        outgoing_port(&ns),
        "EADDRNOTAVAIL",
        "a reserved NodePort is never handed out"
    );
}

/// Commits without a pause while `check` runs again and again: a commit between the two
/// families' walks makes the probe read both again (up to nft_count::ATTEMPTS times), so
/// the reading stays whole. The soak saw a single-try run fail on it.
#[test]
fn node_ports_read_again_when_commits_fall_between_the_families() {
    if !common::can_run(&["ip", "iptables-nft-restore", "ip6tables-nft-restore", "nft"]) {
        return;
    }
    let ns = Netns::new("npchurn");
    load(&ns);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Two committers, each adding and deleting a table of its own.
    let churn: Vec<_> = ["pwchurn0", "pwchurn1"]
        .into_iter()
        .map(|table| {
            let (name, stop) = (ns.name.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut commits = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for verb in ["add", "delete"] {
                        let ok = std::process::Command::new("ip")
                            .args(["netns", "exec", &name, "nft", verb, "table", "ip", table])
                            .status()
                            .is_ok_and(|s| s.success());
                        commits += u64::from(ok);
                    }
                }
                commits
            })
        })
        .collect();
    let runs = 100;
    let mut failed = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..runs {
        let out = ns
            .command(
                common::binary().to_str().unwrap(),
                &[
                    "check",
                    "--format",
                    "json",
                    "--iptables.save-interval",
                    "0",
                    "--conntrack-stale.interval",
                    "0",
                ],
            )
            .args(common::NO_KUBE_PROXY)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let p = &doc["probes"]["node_ports"];
        if p["status"] != "ok" {
            failed.push(p["error"].as_str().unwrap_or_default().to_string());
        } else {
            assert_eq!(
                exposed(&doc).len(),
                doc["facts"]["node_ports"]["exposed"].as_array().unwrap().len()
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let commits: u64 = churn.into_iter().map(|t| t.join().unwrap()).sum();
    let rate = commits as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "{commits} commits ({rate:.0}/s) during {runs} checks; node_ports failed {} times: {failed:?}",
        failed.len()
    );
    assert!(rate > 10.0, "the churn did not churn: {rate:.0} commits/s");
    assert!(failed.iter().all(|e| e.contains("generations")), "{failed:?}");
    assert!(
        failed.is_empty(),
        "node_ports failed {} of {runs} runs under churn: {failed:?}",
        failed.len()
    );
}
