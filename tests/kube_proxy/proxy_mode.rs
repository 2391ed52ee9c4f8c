//! Proxy-mode changes on the real binary: the declared mode against the one
//! kube-proxy runs (a stand-in kube-proxy on loopback reports it), state left
//! by another mode (real iptables-nft rules and a real nftables table in a
//! network namespace, IPVS state from a fixture host root), nftables-migration
//! blockers from kube-proxy's counters, and the runbook's mode switch replayed
//! with `baseline save` and `compare`.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::fake_kube_proxy::{FakeKubeProxy, Reply};

use serde_json::Value;

// --- a stand-in kube-proxy (tests/common/fake_kube_proxy.rs) ---------------------------------------

/// Makes the fake say `mode` on /proxyMode and serve `metrics` on /metrics.
fn say(kp: &FakeKubeProxy, mode: &str, metrics: &str) {
    kp.set("/proxyMode", Reply::ok(mode));
    kp.set("/metrics", Reply::ok(metrics));
}

/// The flags that point the agent at the fake.
fn pointing_at(kp: &FakeKubeProxy) -> Vec<String> {
    s(&[
        "--kube-proxy.metrics-url",
        &kp.url(),
        "--kube-proxy.healthz-url",
        &kp.url(),
    ])
}

const METRICS_NONE: &str = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e9\n";

fn metrics_with(localhost: u64, invalid: u64) -> String {
    format!(
        "{METRICS_NONE}# TYPE kubeproxy_iptables_localhost_nodeports_accepted_packets_total counter\n\
         kubeproxy_iptables_localhost_nodeports_accepted_packets_total {localhost}\n\
         # TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets_total counter\n\
         kubeproxy_iptables_ct_state_invalid_dropped_packets_total {invalid}\n"
    )
}

// --- running the agent --------------------------------------------------------------------------

struct Run {
    doc: Value,
    code: i32,
}

impl Run {
    fn finding(&self, id: &str) -> Option<&Value> {
        self.doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
    }
}

fn parse(out: Output) -> Run {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let code = out.status.code().expect("exit code");
    assert!(code <= 2, "{}", String::from_utf8_lossy(&out.stderr));
    Run { doc, code }
}

/// `check --format json` on a copy of a fixture node (PATH = its stand-in commands).
fn check_fixture(root: &Path, extra: &[String]) -> Run {
    let run = common::Check::new()
        .env_clear()
        .env("PATH", root.join("exec"))
        .args(["--node-name", "mode"])
        .host_root(root)
        .args(extra)
        .run();
    assert!((0..=2).contains(&run.code), "{}", run.stderr);
    Run {
        doc: run.doc,
        code: run.code,
    }
}

fn fixture_node(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // Files only: the tests bring the rule sets (stand-in saves), the recording would not.
    common::copy_files_only(name, dir.path());
    dir
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

// --- declared against running ---------------------------------------------------------------------

#[test]
fn declared_ipvs_while_kube_proxy_runs_iptables_is_critical() {
    let node = fixture_node("healthy-iptables");
    let kp = FakeKubeProxy::start();
    say(&kp, "iptables", METRICS_NONE);
    let mut flags = pointing_at(&kp);
    flags.extend(s(&["--kube-proxy.mode", "ipvs"]));
    let r = check_fixture(node.path(), &flags);
    let f = r
        .finding("kube_proxy_mode_mismatch")
        .unwrap_or_else(|| panic!("{:#}", r.doc["findings"]));
    assert_eq!(f["severity"], "critical", "{f:#}");
    assert_eq!(
        (f["evidence"]["declared"].as_str(), f["evidence"]["actual"].as_str()),
        (Some("ipvs"), Some("iptables"))
    );
    assert_eq!(f["evidence"]["actual_source"], "kube-proxy");
    // This node has no IPVS module: the likely cause names them.
    assert!(
        f["evidence"]["likely_cause"].as_str().unwrap().contains("ip_vs"),
        "{f:#}"
    );
    let pm = &r.doc["proxy_mode"];
    assert_eq!(
        (pm["mode"].as_str(), pm["declared"].as_str()),
        (Some("iptables"), Some("ipvs"))
    );
    assert_eq!(pm["observed"]["source"], "kube-proxy");
    assert_eq!(r.code, 2);
    // Judged as the iptables node it is: the missing IPVS modules are not critical.
    assert!(r
        .finding("ipvs_modules_missing")
        .is_none_or(|f| f["severity"] != "critical"));
}

#[test]
fn declared_ipvs_running_ipvs_with_its_modules_is_no_finding() {
    let node = fixture_node("ipvs-modules-loaded");
    let kp = FakeKubeProxy::start();
    say(&kp, "ipvs", METRICS_NONE);
    let mut flags = pointing_at(&kp);
    flags.extend(s(&["--kube-proxy.mode", "ipvs"]));
    let r = check_fixture(node.path(), &flags);
    assert!(
        r.finding("kube_proxy_mode_mismatch").is_none(),
        "{:#}",
        r.doc["findings"]
    );
    assert!(r.finding("ipvs_modules_missing").is_none(), "{:#}", r.doc["findings"]);
    assert_eq!(r.doc["proxy_mode"]["mode"], "ipvs");
    // Nothing declared: nothing to compare, the mode is kube-proxy's.
    let r = check_fixture(node.path(), &pointing_at(&kp));
    assert!(r.finding("kube_proxy_mode_mismatch").is_none());
    assert_eq!(r.doc["proxy_mode"]["declared"], Value::Null);
}

#[test]
fn nftables_migration_blockers_from_kube_proxys_counters() {
    let node = fixture_node("healthy-iptables");
    let kp = FakeKubeProxy::start();
    say(&kp, "iptables", &metrics_with(12, 3));
    let r = check_fixture(node.path(), &pointing_at(&kp));
    let f = r
        .finding("nftables_migration_blockers")
        .unwrap_or_else(|| panic!("{:#}", r.doc["findings"]));
    assert_eq!(f["severity"], "info");
    let b: Vec<&str> = f["evidence"]["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["evidence"].as_str().unwrap())
        .collect();
    assert!(
        b.contains(&"kubeproxy_iptables_localhost_nodeports_accepted_packets_total = 12"),
        "{b:?}"
    );
    assert!(
        b.contains(&"kubeproxy_iptables_ct_state_invalid_dropped_packets_total = 3"),
        "{b:?}"
    );
    // At 0, or not exported (kube-proxy < 1.31): no blocker from them.
    for metrics in [metrics_with(0, 0), METRICS_NONE.to_string()] {
        say(&kp, "iptables", &metrics);
        let r = check_fixture(node.path(), &pointing_at(&kp));
        let f = r.finding("nftables_migration_blockers");
        // This fixture's kernel (6.x) is recent enough: nothing else blocks.
        assert!(f.is_none(), "{f:?}");
    }
}

// --- leftovers on the real kernel -------------------------------------------------------------------

const TOOLS: &[&str] = &["ip", "iptables-nft-restore", "iptables-nft-save", "nft", "python3"];

fn restore(ns: &common::Netns, rules: &Path) {
    let out = ns
        .command("iptables-nft-restore", &[])
        .stdin(std::fs::File::open(rules).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs the agent in `ns` on host root `root`, with the system's PATH minus
/// ipvsadm (IPVS state comes from the host root's /proc/net/ip_vs).
fn agent_in(ns: &common::Netns, root: &Path, args: &[&str], extra: &[String]) -> Output {
    // By absolute path: the command's own PATH is the agent's.
    Command::new(common::which("ip").expect("ip"))
        .args(["netns", "exec", &ns.name])
        .arg(common::binary())
        .args(args)
        .args(["--node-name", "mode", "--host-root"])
        .arg(root)
        .args(extra)
        .env("PATH", path_without_ipvsadm(root))
        .env("PROXYWATCH_IPTABLES_SAVE_WARNING", "1h")
        .env("PROXYWATCH_IPTABLES_SAVE_CRITICAL", "2h")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The directories of the commands the probes run, linked into one folder
/// without ipvsadm: the IPVS facts must come from the fixture's /proc.
fn path_without_ipvsadm(root: &Path) -> PathBuf {
    let bin = root.join("bin-for-test");
    if !bin.exists() {
        std::fs::create_dir_all(&bin).unwrap();
        for tool in [
            "iptables-nft-save",
            "ip6tables-nft-save",
            "iptables-legacy-save",
            "ip6tables-legacy-save",
            "iptables-save",
            "nft",
            "conntrack",
        ] {
            if let Some(p) = common::which(tool) {
                std::os::unix::fs::symlink(p, bin.join(tool)).unwrap();
            }
        }
    }
    bin
}

fn kube_chains(expected: &Value) -> u64 {
    ["svc", "sep", "ext", "fw", "svl"]
        .iter()
        .map(|k| expected["kube"][k].as_u64().unwrap())
        .sum()
}

#[test]
fn iptables_chains_left_in_nftables_mode_are_counted_exactly() {
    if !common::can_run(TOOLS) {
        return;
    }
    let _lock = common::global_lock();
    let ns = common::Netns::new("mode-left");
    let tmp = tempfile::tempdir().unwrap();
    let (rules, expected) = common::generate_kube_rules(tmp.path(), 20, 2, &[]);
    restore(&ns, &rules);
    // kube-proxy's nftables table, as its nftables mode writes it.
    let table = common::fixtures().join("nft/pwgen-50svc-input.nft");
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
    let node = fixture_node("healthy-iptables");
    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    say(&kp, "nftables", METRICS_NONE);
    let r = parse(agent_in(
        &ns,
        node.path(),
        &["check", "--format", "json"],
        &pointing_at(&kp),
    ));
    assert_eq!(r.doc["proxy_mode"]["mode"], "nftables", "{:#}", r.doc["proxy_mode"]);
    let f = r
        .finding("proxy_mode_leftovers")
        .unwrap_or_else(|| panic!("{:#}\n{:#}", r.doc["findings"], r.doc["probes"]));
    assert_eq!(f["severity"], "warning");
    let items = f["evidence"]["leftovers"].as_array().unwrap();
    let ipt: Vec<&Value> = items
        .iter()
        .filter(|i| i["what"].as_str().unwrap().starts_with("iptables"))
        .collect();
    assert_eq!(ipt.len(), 1, "{items:#?}");
    assert_eq!(ipt[0]["where"], "nft ipv4");
    assert_eq!(
        ipt[0]["count"].as_u64(),
        Some(kube_chains(&expected)),
        "{items:#?} vs {expected:#}"
    );
    // The nftables table is the running mode's own, never a leftover here.
    assert!(
        items.iter().all(|i| i["what"] != "kube-proxy nftables table"),
        "{items:#?}"
    );
}

// --- the runbook's mode switch, replayed --------------------------------------------------------------

fn compare(ns: &common::Netns, root: &Path, baseline: &Path, kp: &FakeKubeProxy) -> Value {
    let args = ["compare", baseline.to_str().unwrap(), "--format", "json"];
    let out = agent_in(ns, root, &args, &pointing_at(kp));
    let code = out.status.code().unwrap();
    assert!(code <= 1, "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn runbook_mode_switch_and_rollback_replayed() {
    if !common::can_run(TOOLS) {
        return;
    }
    let _lock = common::global_lock();
    let ns = common::Netns::new("mode-switch");
    let tmp = tempfile::tempdir().unwrap();
    let (rules, _) = common::generate_kube_rules(tmp.path(), 10, 2, &[]);
    restore(&ns, &rules);
    // The node: IPVS modules loaded, IPVS state in /proc/net/ip_vs only after the switch.
    let node = fixture_node("ipvs-modules-loaded");
    let ip_vs = node.path().join("proc/net/ip_vs");
    let ipvs_state = std::fs::read(&ip_vs).unwrap();
    std::fs::remove_file(&ip_vs).unwrap();
    let kp = FakeKubeProxy::start_in(Some(&ns.name));

    // 1. Baseline in iptables mode.
    say(&kp, "iptables", METRICS_NONE);
    let baseline = tmp.path().join("baseline.json");
    let out = agent_in(
        &ns,
        node.path(),
        &["baseline", "save", baseline.to_str().unwrap()],
        &pointing_at(&kp),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // 2. The switch: kube-proxy now runs IPVS, its virtual servers exist, and
    //    (as kube-proxy's IPVS mode does) the iptables service chains are gone.
    say(&kp, "ipvs", METRICS_NONE);
    std::fs::write(&ip_vs, &ipvs_state).unwrap();
    ns.exec_ok("iptables-nft", &["-t", "nat", "-F"]);
    ns.exec_ok("iptables-nft", &["-t", "nat", "-X"]);
    let c = compare(&ns, node.path(), &baseline, &kp);
    assert_eq!(
        c["mode_change"],
        serde_json::json!({"before": "iptables", "after": "ipvs"}),
        "{c:#}"
    );
    assert!(
        !common::finding_ids(&c["appeared"]).contains(&"proxy_mode_leftovers"),
        "a clean switch: {c:#}"
    );

    // 3. Rollback: kube-proxy back to iptables, its rules back; the IPVS state stays.
    say(&kp, "iptables", METRICS_NONE);
    restore(&ns, &rules);
    let c = compare(&ns, node.path(), &baseline, &kp);
    assert_eq!(c["mode_change"], Value::Null, "same mode as the baseline: {c:#}");
    assert!(
        common::finding_ids(&c["appeared"]).contains(&"proxy_mode_leftovers"),
        "{c:#}"
    );
    assert_eq!(c["verdict"], "worse");
    let text = String::from_utf8(
        agent_in(
            &ns,
            node.path(),
            &["compare", baseline.to_str().unwrap()],
            &pointing_at(&kp),
        )
        .stdout,
    )
    .unwrap();
    assert!(text.contains("[WARN] proxy_mode_leftovers"), "{text}");

    // 4. Cleanup (ipvsadm -C): back to the baseline.
    std::fs::remove_file(&ip_vs).unwrap();
    let c = compare(&ns, node.path(), &baseline, &kp);
    assert_eq!(c["verdict"], "same", "{c:#}");
    assert!(c["appeared"].as_array().unwrap().is_empty(), "{c:#}");
}
