//! The agent is read-only: a full run (`check`, then a few seconds of `serve`
//! with fast intervals) inside a network namespace holding a small kube-proxy
//! like rule set in both iptables backends and in nftables must leave
//! everything it could touch byte-identical:
//!
//! - in the namespace: `/proc/net/ip_tables_names` and `ip6_tables_names`
//!   (the legacy backend's table list: a legacy save with `-t` would create a
//!   table), `nft list tables`, the full saves of both backends and both
//!   families (counters zeroed, `#` comment lines dropped: they carry the
//!   time), `nft -s list ruleset`, and the watched sysctls;
//! - on the host: the root namespace's table lists, `/sys/module` (a module
//!   loaded by `ipvsadm` or by a netlink request would appear there) and
//!   `/proc/modules` when the kernel has it.
//!
//! Honest limits: on a kernel built without module support (CONFIG_MODULES=n,
//! no /proc/modules) nothing can load a module, so the /sys/module comparison
//! cannot fail there; the test says so on stderr. tests/vm/vm_kernel.rs shows it
//! on a kernel whose IPVS and nf_tables modules are available but not loaded.
use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The commands whose output is compared, run in the namespace.
const NS_COMMANDS: &[(&str, &[&str])] = &[
    ("cat", &["/proc/net/ip_tables_names"]),
    ("cat", &["/proc/net/ip6_tables_names"]),
    ("nft", &["list", "tables"]),
    ("nft", &["-s", "list", "ruleset"]),
    ("iptables-nft-save", &[]),
    ("ip6tables-nft-save", &[]),
    ("iptables-legacy-save", &[]),
    ("ip6tables-legacy-save", &[]),
];

const RULES: &str = "\
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment \"ns/svc:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment \"ns/svc:p80 -> 10.244.0.5:80\" -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment ns/svc:p80 -m tcp -j DNAT --to-destination 10.244.0.5:80
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
";

const NFT_TABLE: &str = "\
table ip kube-proxy {
    comment \"rules for kube-proxy\"
    set cluster-ips {
        type ipv4_addr
        elements = { 10.96.0.10 }
    }
    chain services {
        ip daddr . meta l4proto . th dport vmap { 10.96.0.10 . tcp . 80 : goto service-AAAAAAAA-ns/svc/tcp/p80 }
    }
    chain service-AAAAAAAA-ns/svc/tcp/p80 {
        ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
        numgen random mod 1 vmap { 0 : goto endpoint-BBBBBBBB-ns/svc/tcp/p80__10.244.0.5/80 }
    }
    chain endpoint-BBBBBBBB-ns/svc/tcp/p80__10.244.0.5/80 {
        meta l4proto tcp dnat to 10.244.0.5:80
    }
    chain mark-for-masquerade {
        mark set mark or 0x4000
    }
    chain nat-prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        jump services
    }
}
";

fn output(mut cmd: Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    // The exit status is part of the state (e.g. a missing table list file).
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Zeroes `[packets:bytes]` counters and drops `#` lines (they carry the date).
fn normalize_save(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut l = line.to_string();
        if let (Some(a), Some(b)) = (l.find('['), l.rfind(']')) {
            if a < b && l[a + 1..b].split(':').all(|n| n.bytes().all(|c| c.is_ascii_digit())) {
                l.replace_range(a..=b, "[0:0]");
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn sysctl_files() -> Vec<String> {
    proxywatch::probe::sysctl::WATCHED
        .iter()
        .map(|n| proxywatch::probe::sysctl::proc_path(n))
        .collect()
}

/// Everything compared, by name.
fn state(ns: &common::Netns) -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    for (program, args) in NS_COMMANDS {
        let text = output(ns.command(program, args));
        s.insert(format!("netns: {program} {}", args.join(" ")), normalize_save(&text));
    }
    // Read from inside the namespace: /proc/sys/net is per namespace.
    let mut script = String::new();
    for f in sysctl_files() {
        script.push_str(&format!("printf '%s: ' {f}; cat {f} 2>&1 || true\n"));
    }
    s.insert("netns: sysctls".into(), output(ns.command("/bin/sh", &["-c", &script])));
    for f in ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"] {
        s.insert(
            format!("host: {f}"),
            std::fs::read_to_string(f).unwrap_or_else(|e| e.to_string()),
        );
    }
    let mut nft = Command::new("nft");
    nft.args(["list", "tables"]);
    s.insert("host: nft list tables".into(), output(nft));
    let mut modules: Vec<String> = std::fs::read_dir("/sys/module")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    modules.sort();
    s.insert("host: /sys/module".into(), modules.join("\n"));
    if let Ok(text) = std::fs::read_to_string("/proc/modules") {
        // Names only: reference counts move with any netfilter use on the host.
        let mut names: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().next()).collect();
        names.sort();
        s.insert("host: /proc/modules names".into(), names.join("\n"));
    }
    s
}

fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, what: &str) {
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (k, b) in before {
        let a = &after[k];
        assert!(a == b, "{what} changed {k}:\n--- before\n{b}\n--- after\n{a}");
    }
    let new: Vec<&str> = after["host: /sys/module"]
        .lines()
        .filter(|m| !before["host: /sys/module"].lines().any(|b| b == *m))
        .collect();
    assert!(new.is_empty(), "{what} loaded modules: {new:?}");
}

fn restore(ns: &common::Netns, program: &str, text: &str) {
    let mut child = ns
        .command(program, &[])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_full_agent_run_changes_nothing() {
    let tools = [
        "ip",
        "nft",
        "iptables-nft-restore",
        "iptables-legacy-restore",
        "iptables-nft-save",
        "iptables-legacy-save",
        "ip6tables-nft-save",
        "ip6tables-legacy-save",
    ];
    if !common::can_run(&tools) {
        return;
    }
    let _lock = common::global_lock();
    let ns = common::Netns::new("nse");
    restore(&ns, "iptables-nft-restore", RULES);
    restore(&ns, "iptables-legacy-restore", RULES);
    let dir = tempfile::tempdir().unwrap();
    let nft_file = dir.path().join("kube-proxy.nft");
    std::fs::write(&nft_file, NFT_TABLE).unwrap();
    ns.exec_ok("nft", &["-f", nft_file.to_str().unwrap()]);
    if !Path::new("/proc/modules").exists() {
        eprintln!("note: this kernel has no module support (no /proc/modules): /sys/module cannot change");
    }

    let before = state(&ns);
    // The rule sets are really there, so the comparison is not between two empty states.
    assert!(before["netns: iptables-legacy-save "].contains("KUBE-SVC-AAAAAAAAAAAAAAAA"));
    assert!(before["netns: iptables-nft-save "].contains("KUBE-SVC-AAAAAAAAAAAAAAAA"));
    assert!(before["netns: nft list tables"].contains("table ip kube-proxy"));

    let path = std::env::var("PATH").unwrap_or_default();
    let kube_proxy_flags = [
        "--kube-proxy.metrics-url",
        "http://127.0.0.1:9",
        "--kube-proxy.healthz-url",
        "http://127.0.0.1:9",
    ];

    // 1. check: every probe once, on the real host root and the real tools.
    // No grace: with kube-proxy's canary and no kube-proxy, check would wait 30 s re-reading
    // kube-proxy's ports only (serve below runs every probe on its intervals anyway).
    let doc = common::Check::new()
        .in_netns(&ns)
        .args(["--node-name", "nse"])
        .args(kube_proxy_flags)
        .args(["--kube-proxy.down-grace", "0s"])
        .env_clear()
        .env("PATH", &path)
        .run()
        .doc;
    // The probes saw the rules (so they ran their commands against them).
    assert_eq!(doc["probes"]["iptables"]["status"], "ok", "{:#}", doc["probes"]);
    let saves = doc["facts"]["iptables"]["saves"].as_array().unwrap();
    for backend in ["nft", "legacy"] {
        assert!(
            saves
                .iter()
                .any(|s| s["backend"] == backend && s["counts"]["kube_rules"].as_u64().unwrap_or(0) > 0),
            "{backend}: {saves:#?}"
        );
    }
    assert_eq!(doc["probes"]["nftables"]["status"], "ok", "{:#}", doc["probes"]);
    let after_check = state(&ns);
    assert_same(&before, &after_check, "proxywatch check");

    // 2. serve: a few seconds of every probe on a fast schedule.
    let fast = "300ms";
    // No wait for an answer: the test sends no traffic into the namespace.
    let mut serve = common::Serve::new()
        .in_netns(&ns)
        .listen("127.0.0.1:19877")
        .args(["--node-name", "nse", "--log.level", "error"])
        .args(kube_proxy_flags)
        .env_clear()
        .env("PATH", &path)
        .no_wait();
    for probe in [
        "conntrack",
        "sysctls",
        "modules",
        "node",
        "iptables",
        "nftables",
        "ipvs",
        "kube-proxy",
    ] {
        serve = serve.args([format!("--{probe}.interval"), fast.to_string()]);
    }
    let agent = serve.start();
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        if let Some(status) = agent.exited() {
            panic!("proxywatch serve exited early: {status}\n{}", agent.log());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGTERM by the agent's PID (`ip netns exec` execs it); it must stop within 5 s.
    agent.stop_within(Duration::from_secs(5));
    let after_serve = state(&ns);
    assert_same(&before, &after_serve, "proxywatch serve");
}

/// tests/run.sh's host guard (tests/tools/host_guard.sh) notices what a test might
/// change by mistake: run in a namespace of this test's own (never the initial one),
/// it passes on an unchanged namespace, fails naming a table added and a sysctl
/// changed there, and passes again once they are put back.
#[test]
fn host_guard_fails_on_a_change_and_passes_once_restored() {
    if !common::can_run(&["ip", "nft", "bash", "diff"]) {
        return;
    }
    let ns = common::Netns::new("guard");
    let guard = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/host_guard.sh");
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("before");
    let run = |verb: &str| {
        ns.command("bash", &[guard.to_str().unwrap(), verb, record.to_str().unwrap()])
            .output()
            .unwrap()
    };
    assert!(run("record").status.success());
    let same = run("compare");
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stdout));

    ns.exec_ok("nft", &["add", "table", "inet", "pw_guard_probe"]);
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    let changed = run("compare");
    let diff = String::from_utf8_lossy(&changed.stdout);
    assert!(!changed.status.success(), "a change passed the guard:\n{diff}");
    assert!(diff.contains("+table inet pw_guard_probe"), "{diff}");
    assert!(
        diff.contains("-net/ipv4/ip_forward = 0") && diff.contains("+net/ipv4/ip_forward = 1"),
        "{diff}"
    );

    ns.exec_ok("nft", &["delete", "table", "inet", "pw_guard_probe"]);
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=0"]);
    let restored = run("compare");
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stdout)
    );
}
