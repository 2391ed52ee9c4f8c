//! End-to-end tests of the iptables and nftables probes on the real kernel:
//! rule sets are loaded into throwaway network namespaces (`common::Netns`)
//! and the real binary runs `check --format json` inside them. The root
//! namespace's rules are never read or changed, and no traffic is sent.
//!
//! Needs root, `ip`, `iptables-nft-restore`, `iptables-legacy-restore` and
//! `python3` (and `nft` for the nftables test): skipped without them, except
//! with CI=true, where a missing prerequisite fails the test.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Netns;
use serde_json::Value;

const TOOLS: &[&str] = &[
    "ip",
    "iptables-nft-restore",
    "ip6tables-nft-restore",
    "iptables-legacy-restore",
    "python3",
];

/// Settings every run gets, as environment variables so a test's flags can
/// override them: the save-time findings are wall-clock based, so their
/// thresholds are moved out of reach (no test depends on timing), and the
/// probe timeouts are generous for a loaded machine.
const BASE_ENV: &[(&str, &str)] = &[
    ("PROXYWATCH_IPTABLES_SAVE_WARNING", "1h"),
    ("PROXYWATCH_IPTABLES_SAVE_CRITICAL", "2h"),
    ("PROXYWATCH_IPTABLES_TIMEOUT", "5m"),
    ("PROXYWATCH_NFTABLES_TIMEOUT", "5m"),
    // No kube-proxy runs here: with its canary in the rules, `check` would wait the 30 s
    // grace for it to come back, then say `kube_proxy_down` as it does at once with none.
    ("PROXYWATCH_KUBE_PROXY_DOWN_GRACE", "0s"),
];

/// One `proxywatch check --format json` run.
struct Check {
    doc: Value,
    code: i32,
    stderr: String,
}

impl Check {
    fn finding(&self, id: &str) -> Option<&Value> {
        self.doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
    }

    fn finding_ids(&self) -> Vec<String> {
        self.doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    }

    fn iptables_finding_ids(&self) -> Vec<String> {
        self.finding_ids()
            .into_iter()
            .filter(|i| i.starts_with("iptables_"))
            .collect()
    }

    fn probe(&self, name: &str) -> &Value {
        &self.doc["probes"][name]
    }

    fn iptables(&self) -> &Value {
        let ipt = &self.doc["facts"]["iptables"];
        assert!(
            ipt.is_object(),
            "facts.iptables is {ipt}; probe: {}\n{}",
            self.probe("iptables"),
            self.stderr
        );
        ipt
    }

    /// The counts of `backend`/`family` (a netlink count or a save), which must exist.
    fn save(&self, backend: &str, family: &str) -> &Value {
        self.try_save(backend, family)
            .unwrap_or_else(|| panic!("no {backend}/{family} save in {}", self.iptables()))
    }

    fn try_save(&self, backend: &str, family: &str) -> Option<&Value> {
        self.iptables()["saves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["backend"] == backend && s["family"] == family)
    }

    /// The iptables-nft-save run of the cross-check for `family`.
    fn cross_check_save(&self, family: &str) -> &Value {
        let cc = &self.iptables()["cross_check"];
        cc["saves"]
            .as_array()
            .unwrap_or_else(|| panic!("no cross-check in {}", self.iptables()))
            .iter()
            .find(|s| s["family"] == family)
            .unwrap_or_else(|| panic!("no {family} save in the cross-check {cc}"))
    }

    fn backend_in_use(&self) -> &str {
        self.iptables()["backend_in_use"].as_str().unwrap()
    }
}

/// Runs the agent inside `ns`. `path`: the PATH it sees (the test's own when None).
fn check_in(ns: &Netns, path: Option<&Path>, extra: &[&str]) -> Check {
    let mut check = common::Check::new().in_netns(ns).args(["--node-name", "t"]).args(extra);
    for (k, v) in BASE_ENV {
        check = check.env(k, v);
    }
    if let Some(p) = path {
        check = check.env("PATH", p);
    }
    let run = check.run();
    assert!(
        (0..=2).contains(&run.code),
        "exit code {} (the agent could not run): {}",
        run.code,
        run.stderr
    );
    Check {
        doc: run.doc,
        code: run.code,
        stderr: run.stderr,
    }
}

/// A fresh namespace with `net.ipv4.ip_forward=1` (the namespace's own copy),
/// so the sysctl finding does not decide the exit code.
fn netns(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    ns
}

/// Generates a kube-proxy rule set; returns (rules file, expected counts).
fn generate(dir: &Path, services: u32, endpoints: u32, extra: &[&str]) -> (PathBuf, Value) {
    common::generate_kube_rules(dir, services, endpoints, extra)
}

/// Loads a rules file with `restore` (`iptables-nft-restore`...) inside `ns`.
fn load(ns: &Netns, restore: &str, rules: &Path) {
    let out = ns
        .command(restore, &[])
        .stdin(std::fs::File::open(rules).unwrap())
        .output()
        .unwrap_or_else(|e| panic!("{restore}: {e}"));
    assert!(
        out.status.success(),
        "{restore} < {}: {}\n{}",
        rules.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stdout of a command in `ns` that must succeed.
fn ns_stdout(ns: &Netns, program: &str, args: &[&str]) -> String {
    String::from_utf8(ns.exec_ok(program, args).stdout).unwrap()
}

fn restore_cmd(backend: &str) -> &'static str {
    match backend {
        "nft" => "iptables-nft-restore",
        "legacy" => "iptables-legacy-restore",
        _ => unreachable!(),
    }
}

fn other(backend: &str) -> &'static str {
    if backend == "nft" {
        "legacy"
    } else {
        "nft"
    }
}

/// A PATH directory holding only symlinks to the four iptables save commands.
/// `nft list tables` needs ~14 s of kernel time on a namespace with the 5000x3
/// set in the nft backend (nft 1.0.6 dumps every rule to build its cache), so
/// the large runs leave `nft` off PATH to keep this file fast.
fn saves_only_path() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for c in [
        "iptables-nft-save",
        "iptables-legacy-save",
        "ip6tables-nft-save",
        "ip6tables-legacy-save",
    ] {
        let target = common::which(c).unwrap_or_else(|| panic!("{c} not on PATH"));
        std::os::unix::fs::symlink(target, dir.path().join(c)).unwrap();
    }
    dir
}

// ---------------------------------------------------------------------------
// 1. Exact counts, both backends.

fn exact_counts(backend: &str, services: u32, endpoints: u32) {
    if !common::can_run(TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, expected) = generate(dir.path(), services, endpoints, &[]);
    let ns = netns(&format!("exact-{backend}-{services}"));
    load(&ns, restore_cmd(backend), &rules);
    // The nft backend also gets the IPv6 variant of the set.
    let expected6 = (backend == "nft").then(|| {
        let (rules6, expected6) = generate(dir.path(), services, endpoints, &["--ipv6"]);
        load(&ns, "ip6tables-nft-restore", &rules6);
        expected6
    });

    let large = services >= 1000;
    let path = large.then(saves_only_path);
    let extra: &[&str] = if large {
        &["--iptables.rules-warning", "1000"]
    } else {
        &[]
    };
    let c = check_in(&ns, path.as_ref().map(|d| d.path()), extra);

    assert_eq!(c.probe("iptables")["status"], "ok", "{}", c.probe("iptables"));
    let mut want = vec![("ipv4", &expected)];
    if let Some(e6) = &expected6 {
        want.push(("ipv6", e6));
    }
    for (family, expected) in want {
        let counts = &c.save(backend, family)["counts"];
        for key in [
            "tables",
            "kube",
            "hint_chain",
            "kubelet_canary",
            "proxy_canary",
            "kube_rules",
        ] {
            assert_eq!(
                counts[key], expected[key],
                "{backend} {family} {services}x{endpoints}: `{key}`"
            );
        }
        assert_eq!(counts["legacy_warning"], false);
        assert_eq!(counts["empty_with_warning"], false);
    }
    // The stale check's service table: KUBE-SERVICES and KUBE-NODEPORTS followed
    // to the KUBE-SEP DNATs (nft backend over netlink, both families; legacy
    // decoded from the iptables probe's own iptables-legacy-save, IPv4 here).
    let stale = &c.doc["facts"]["conntrack_stale"];
    for key in ["service_ports", "node_ports", "endpoints"] {
        let want = match &expected6 {
            Some(e6) => expected["service_table"][key].as_u64().unwrap() + e6["service_table"][key].as_u64().unwrap(),
            None => expected["service_table"][key].as_u64().unwrap(),
        };
        assert_eq!(
            stale[key], want,
            "{backend} {services}x{endpoints}: conntrack_stale `{key}`: {stale}"
        );
    }
    assert_eq!(
        stale["source"],
        if backend == "nft" {
            "iptables-nft"
        } else {
            "iptables-legacy"
        }
    );
    // The node_ports probe: the same NodePorts (one per port and protocol, both
    // families' alike) and the healthCheckNodePorts; from legacy rules none, said as unread.
    let np = &c.doc["facts"]["node_ports"];
    let (ports, health) = match &expected6 {
        Some(_) => (
            expected["service_table"]["node_ports"].as_u64().unwrap()
                + expected["health_check_node_ports"].as_u64().unwrap(),
            expected["health_check_node_ports"].as_u64().unwrap(),
        ),
        None => (0, 0),
    };
    assert_eq!(
        (np["node_ports"].as_u64(), np["health_check_node_ports"].as_u64()),
        (Some(ports), Some(health)),
        "{backend} {services}x{endpoints}: node_ports {np}"
    );
    assert_eq!(np["undecoded"], 0, "{np}");
    assert_eq!(np["unread"].is_array(), backend == "legacy", "{np}");
    // The run that printed text: the legacy save, or the nft cross-check's save.
    let save = if backend == "nft" {
        let run = c.save("nft", "ipv4");
        assert_eq!(run["command"], "netlink", "{run}");
        let n = &run["netlink"];
        assert_eq!(
            (n["reused"].as_bool(), n["attempts"].as_u64()),
            (Some(false), Some(1)),
            "{n}"
        );
        let cc = &c.iptables()["cross_check"];
        assert_eq!(cc["mismatches"], serde_json::json!([]), "{cc}");
        assert_eq!(cc["not_compared"], serde_json::json!([]), "{cc}");
        assert_eq!(cc["generations"]["ipv4"], n["generation"], "{cc}");
        assert!(cc.get("error").is_none(), "{cc}");
        // The save's own counts equal the netlink counts, family by family.
        for family in ["ipv4", "ipv6"] {
            assert_eq!(
                c.cross_check_save(family)["counts"]["tables"],
                c.save("nft", family)["counts"]["tables"]
            );
        }
        c.cross_check_save("ipv4")
    } else {
        c.save(backend, "ipv4")
    };
    let counts = &save["counts"];
    // lines and bytes: what the same save prints when the test runs it (the legacy
    // save with -c, as the probe runs it for the rules' counters). Its
    // `# Generated/Completed on <ctime>` comments have a fixed width, but the
    // `[packets:bytes]` counters may have grown in between (the agent itself
    // connects to kube-proxy's localhost ports), never shrunk, so bytes are between
    // the text with every counter as `[0:0]` and the text as the test reads it.
    let args: &[&str] = if backend == "legacy" { &["-c"] } else { &[] };
    let text = ns_stdout(&ns, save["command"].as_str().unwrap(), args);
    assert_eq!(counts["lines"], text.lines().count() as u64, "{backend}: lines");
    let zeroed: u64 = text.lines().map(|l| zero_counters(l).len() as u64 + 1).sum();
    let now: u64 = text.lines().map(|l| l.len() as u64 + 1).sum();
    let bytes = counts["bytes"].as_u64().unwrap();
    assert!(
        (zeroed..=now).contains(&bytes),
        "{backend}: bytes {bytes}, expected {zeroed} (counters zeroed) to {now} (counters as the test reads them)"
    );

    // Nothing anywhere else: the nft backend of the legacy test is empty and
    // says legacy tables exist; the legacy backend is not even run where it
    // has no table (the IPv6 legacy save never runs, nor any legacy save in
    // the nft test).
    if backend == "legacy" {
        for f in ["ipv4", "ipv6"] {
            let s = c.save("nft", f);
            assert_eq!(
                s["counts"]["tables"],
                serde_json::json!({}),
                "nft/{f} should have no table"
            );
        }
        let nft = &c.save("nft", "ipv4")["counts"];
        assert_eq!(nft["legacy_warning"], true, "{nft}");
        assert_eq!(nft["empty_with_warning"], true, "{nft}");
    }
    assert!(c.try_save("legacy", "ipv6").is_none(), "{}", c.iptables());
    let runs = if backend == "nft" { 2 } else { 3 };
    assert_eq!(
        c.iptables()["saves"].as_array().unwrap().len(),
        runs,
        "{}",
        c.iptables()
    );
    assert_eq!(c.backend_in_use(), backend);
    assert_eq!(c.iptables()["backends_with_kube_rules"], serde_json::json!([backend]));

    if large {
        let f = c
            .finding("iptables_rules_large")
            .unwrap_or_else(|| panic!("no iptables_rules_large finding: {:?}", c.finding_ids()));
        assert_eq!(f["severity"], "warning", "{f}");
        assert_eq!(f["evidence"]["nat_rules"], expected["tables"]["nat"]["rules"]);
        assert_eq!(f["evidence"]["backend"], backend);
        assert_eq!(f["evidence"]["family"], "ipv4");
        assert_eq!(f["evidence"]["kube_svc_chains"], expected["kube"]["svc"]);
        assert_eq!(f["evidence"]["kube_sep_chains"], expected["kube"]["sep"]);
        assert_eq!(c.iptables_finding_ids(), ["iptables_rules_large"]);
        assert!(
            c.code >= 1,
            "a warning finding must give exit code >= 1, got {}",
            c.code
        );
    } else {
        assert_eq!(c.iptables_finding_ids(), Vec::<String>::new());
    }
}

#[test]
fn exact_counts_100x2_nft() {
    exact_counts("nft", 100, 2);
}

#[test]
fn exact_counts_100x2_legacy() {
    exact_counts("legacy", 100, 2);
}

/// The one mid-size case; 5000x3 and 10000x5 are in tests/bench/netlink_counts.sh.
#[test]
fn exact_counts_1000x3_nft() {
    exact_counts("nft", 1000, 3);
}

#[test]
fn exact_counts_5000x3_legacy() {
    exact_counts("legacy", 5000, 3);
}

// ---------------------------------------------------------------------------
// 2. Backend matrix.

/// 500 rules in the filter table, none of them kube-proxy's.
fn write_plain_rules(dir: &Path) -> PathBuf {
    let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for i in 0..500 {
        text.push_str(&format!(
            "-A INPUT -s 192.0.2.{}/32 -p tcp --dport {} -j ACCEPT\n",
            i % 250 + 1,
            1000 + i
        ));
    }
    text.push_str("COMMIT\n");
    let path = dir.join("plain.rules");
    std::fs::write(&path, text).unwrap();
    path
}

/// kube-proxy's set with the hint in `backend`; 500 plain rules in the other
/// backend, which would win on rule count: the hint must decide.
fn hint_decides(backend: &str) {
    if !common::can_run(TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, expected) = generate(dir.path(), 20, 1, &[]);
    let plain = write_plain_rules(dir.path());
    let ns = netns(&format!("hint-{backend}"));
    load(&ns, restore_cmd(backend), &rules);
    load(&ns, restore_cmd(other(backend)), &plain);
    let c = check_in(&ns, None, &[]);
    assert!(
        expected["tables"]["nat"]["rules"].as_u64().unwrap() + expected["tables"]["filter"]["rules"].as_u64().unwrap()
            < 500
    );
    assert_eq!(
        c.save(other(backend), "ipv4")["counts"]["tables"]["filter"]["rules"],
        500
    );
    assert_eq!(c.save(backend, "ipv4")["counts"]["hint_chain"], true);
    assert_eq!(c.backend_in_use(), backend, "{}", c.iptables());
    assert!(
        c.iptables()["backend_reason"]
            .as_str()
            .unwrap()
            .contains("KUBE-IPTABLES-HINT"),
        "{}",
        c.iptables()
    );
    assert_eq!(c.iptables()["backends_with_kube_rules"], serde_json::json!([backend]));
    assert_eq!(c.iptables_finding_ids(), Vec::<String>::new());
}

#[test]
fn backend_hint_only_in_nft() {
    hint_decides("nft");
}

#[test]
fn backend_hint_only_in_legacy() {
    hint_decides("legacy");
}

#[test]
fn backend_kube_rules_in_both_is_critical() {
    if !common::can_run(TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, _) = generate(dir.path(), 20, 1, &[]);
    let ns = netns("both");
    load(&ns, "iptables-nft-restore", &rules);
    load(&ns, "iptables-legacy-restore", &rules);
    let c = check_in(&ns, None, &[]);
    assert_eq!(
        c.iptables()["backends_with_kube_rules"],
        serde_json::json!(["legacy", "nft"]),
        "{}",
        c.iptables()
    );
    // Both have the hint: nft is checked first, as iptables-wrappers does.
    assert_eq!(c.backend_in_use(), "nft");
    let f = c
        .finding("iptables_backend_mismatch")
        .unwrap_or_else(|| panic!("no iptables_backend_mismatch finding: {:?}", c.finding_ids()));
    assert_eq!(f["severity"], "critical", "{f}");
    assert_eq!(
        f["evidence"]["backends_with_kube_rules"],
        serde_json::json!(["legacy", "nft"])
    );
    assert_eq!(c.doc["status"], "critical");
    assert_eq!(c.code, 2, "{}", c.stderr);
}

#[test]
fn backend_none_in_empty_netns() {
    if !common::can_run(TOOLS) {
        return;
    }
    let ns = netns("none");
    let c = check_in(&ns, None, &[]);
    assert_eq!(c.probe("iptables")["status"], "ok");
    assert_eq!(c.backend_in_use(), "none");
    assert_eq!(c.iptables()["backends_with_kube_rules"], serde_json::json!([]));
    for s in c.iptables()["saves"].as_array().unwrap() {
        assert_eq!(s["counts"]["tables"], serde_json::json!({}), "{s}");
    }
    assert_eq!(c.iptables_finding_ids(), Vec::<String>::new());
}

#[test]
fn stale_kube_rules_without_canary() {
    if !common::can_run(TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, expected) = generate(dir.path(), 20, 1, &["--no-canary"]);
    let ns = netns("stale");
    load(&ns, "iptables-nft-restore", &rules);
    let c = check_in(&ns, None, &[]);
    let counts = &c.save("nft", "ipv4")["counts"];
    assert_eq!(counts["tables"], expected["tables"]);
    assert_eq!(counts["proxy_canary"], false);
    assert_eq!(counts["kubelet_canary"], false);
    assert_eq!(c.backend_in_use(), "nft");
    let f = c
        .finding("iptables_stale_kube_rules")
        .unwrap_or_else(|| panic!("no iptables_stale_kube_rules finding: {:?}", c.finding_ids()));
    assert_eq!(f["severity"], "warning", "{f}");
    assert_eq!(f["evidence"]["backends"], serde_json::json!(["nft/ipv4"]));
    assert_eq!(c.iptables_finding_ids(), ["iptables_stale_kube_rules"]);
    assert!(c.code >= 1);
}

// ---------------------------------------------------------------------------
// 3. No side effects.

/// Everything the two backends hold in `ns`, as text that does not change by itself.
fn rule_state(ns: &Netns) -> String {
    let mut s = String::new();
    for f in ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"] {
        // A missing file (no legacy table code loaded) means no table.
        let out = ns.command("cat", &[f]).stderr(Stdio::null()).output().unwrap();
        let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        names.sort();
        s.push_str(&format!("== {f}\n{}\n", names.join("\n")));
    }
    s.push_str(&format!(
        "== nft list tables\n{}",
        ns_stdout(ns, "nft", &["list", "tables"])
    ));
    for save in [
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "iptables-nft-save",
        "ip6tables-nft-save",
    ] {
        s.push_str(&format!("== {save}\n"));
        for line in ns_stdout(ns, save, &[]).lines() {
            if line.starts_with("# Generated") || line.starts_with("# Completed") {
                continue;
            }
            let words: Vec<&str> = line.split(' ').filter(|w| !is_counter(w)).collect();
            s.push_str(&words.join(" "));
            s.push('\n');
        }
    }
    s
}

/// `line` with every `[packets:bytes]` word as `[0:0]`.
fn zero_counters(line: &str) -> String {
    line.split(' ')
        .map(|w| if is_counter(w) { "[0:0]" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[packets:bytes]`.
fn is_counter(w: &str) -> bool {
    w.strip_prefix('[')
        .and_then(|w| w.strip_suffix(']'))
        .and_then(|w| w.split_once(':'))
        .is_some_and(|(p, b)| !p.is_empty() && !b.is_empty() && (p.to_owned() + b).bytes().all(|c| c.is_ascii_digit()))
}

#[test]
fn probe_has_no_side_effects() {
    if !common::can_run(&[
        "ip",
        "iptables-nft-restore",
        "iptables-legacy-restore",
        "python3",
        "nft",
    ]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, _) = generate(dir.path(), 20, 1, &[]);

    // An empty namespace must stay empty: no legacy table created by a save,
    // no nft table created by iptables-nft-save.
    let empty = netns("fx-empty");
    let before = rule_state(&empty);
    let c = check_in(&empty, None, &[]);
    assert_eq!(c.backend_in_use(), "none");
    let after = rule_state(&empty);
    assert_eq!(before, after, "the probe changed an empty namespace");
    for f in ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"] {
        let out = empty.command("cat", &[f]).stderr(Stdio::null()).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{f} gained a table");
    }
    assert_eq!(ns_stdout(&empty, "nft", &["list", "tables"]), "", "nft gained a table");

    // A namespace with the set in both backends (every save has output).
    let loaded = netns("fx-loaded");
    load(&loaded, "iptables-nft-restore", &rules);
    load(&loaded, "iptables-legacy-restore", &rules);
    let before = rule_state(&loaded);
    assert!(before.contains("KUBE-IPTABLES-HINT"), "{before}");
    check_in(&loaded, None, &[]);
    let after = rule_state(&loaded);
    assert_eq!(before, after, "the probe changed the rule sets");
}

// ---------------------------------------------------------------------------
// 4. Bad input from stand-in commands.

/// Runs the agent with PATH holding only a stand-in `iptables-nft-save` with
/// `script` as its body. On the node the nft counts come over netlink and the
/// save is only the cross-check: its failure is recorded there, with its
/// error, and the probe keeps its counts.
fn with_fake_save(tag: &str, script: &str, extra: &[&str]) -> Check {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iptables-nft-save");
    std::fs::write(&path, format!("#!/bin/sh\n{script}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ns = netns(tag);
    let c = check_in(&ns, Some(dir.path()), extra);
    assert_eq!(c.probe("iptables")["status"], "ok", "{}", c.probe("iptables"));
    assert_eq!(c.save("nft", "ipv4")["command"], "netlink");
    let f = c
        .finding("iptables_count_mismatch")
        .unwrap_or_else(|| panic!("no iptables_count_mismatch finding: {:?}", c.finding_ids()));
    assert_eq!(f["severity"], "warning", "{f}");
    for p in ["node", "modules", "conntrack", "sysctls"] {
        assert_eq!(c.probe(p)["status"], "ok", "probe {p}: {}", c.probe(p));
    }
    c
}

fn error_of(c: &Check) -> String {
    c.iptables()["cross_check"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no cross-check error in {}", c.iptables()))
        .to_string()
}

/// Pids of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn fake_save_hangs() {
    if !common::can_run(TOOLS) {
        return;
    }
    // Unique durations mark our sleeps. The first replaces the shell; the
    // second is the shell's child, so only a kill of the whole group gets it.
    let pid = std::process::id();
    let exec_marker = format!("600.{pid}1");
    let child_marker = format!("600.{pid}2");
    let script = format!("/bin/sleep {child_marker} &\nexec /bin/sleep {exec_marker}\n");
    let c = with_fake_save("fake-hang", &script, &["--iptables.timeout", "2s"]);
    let e = error_of(&c);
    assert!(e.contains("iptables-nft-save") && e.contains("timed out"), "{e}");

    // The agent has exited; give the kernel a moment to reap SIGKILLed processes.
    let mut left = Vec::new();
    for _ in 0..50 {
        left = processes_with(&exec_marker);
        left.extend(processes_with(&child_marker));
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for &p in &left {
        // Ours (unique marker): clean up before failing.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(left.is_empty(), "sleep processes left after the timeout: {left:?}");
}

#[test]
fn fake_save_fails() {
    if !common::can_run(TOOLS) {
        return;
    }
    let c = with_fake_save(
        "fake-fail",
        "echo '*filter'\necho 'iptables-nft-save: could not fetch rule set: zebra-4711' >&2\nexit 3\n",
        &[],
    );
    let e = error_of(&c);
    assert!(e.contains("iptables-nft-save"), "{e}");
    assert!(e.contains("zebra-4711"), "stderr text missing: {e}");
    assert!(e.contains("exit status: 3"), "exit status missing: {e}");
}

#[test]
fn fake_save_prints_garbage() {
    if !common::can_run(TOOLS) {
        return;
    }
    let c = with_fake_save(
        "fake-garbage",
        "echo '# Generated by a stand-in'\necho '*filter'\necho ':INPUT ACCEPT [0:0]'\necho 'hello garbage world'\necho COMMIT\n",
        &[],
    );
    let e = error_of(&c);
    assert!(e.contains("iptables-nft-save"), "{e}");
    assert!(e.contains("line 4"), "line number missing: {e}");
    assert!(e.contains("hello garbage world"), "{e}");
}

#[test]
fn fake_save_table_incompatible() {
    if !common::can_run(TOOLS) {
        return;
    }
    let c = with_fake_save(
        "fake-incompat",
        "echo '*filter'\necho ':INPUT ACCEPT [0:0]'\necho COMMIT\necho \"# Table \\`nat' is incompatible, use 'nft' tool.\"\n",
        &[],
    );
    let e = error_of(&c);
    assert!(e.contains("\"nat\"") && e.contains("incompatible"), "{e}");
}

#[test]
fn fake_save_truncated() {
    if !common::can_run(TOOLS) {
        return;
    }
    let c = with_fake_save(
        "fake-trunc",
        "echo '*mangle'\necho ':PREROUTING ACCEPT [0:0]'\necho COMMIT\necho '*nat'\necho ':PREROUTING ACCEPT [0:0]'\necho '-A PREROUTING -j ACCEPT'\n",
        &[],
    );
    let e = error_of(&c);
    assert!(e.contains("iptables-nft-save"), "{e}");
    assert!(e.contains("line 4"), "the open table's line missing: {e}");
    assert!(
        e.contains("nat") && e.contains("COMMIT") && e.contains("truncated"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// 5. nftables.

/// Whether `name` is `<prefix>-<8 base32 chars>-...`, like kube-proxy's per-service chains.
fn hashed(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|r| {
            r.len() > 9
                && r.as_bytes()[..8]
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(b))
                && r.as_bytes()[8] == b'-'
        })
}

#[test]
fn nftables_table_counts() {
    if !common::can_run(&[
        "ip",
        "iptables-nft-restore",
        "iptables-legacy-restore",
        "python3",
        "nft",
    ]) {
        return;
    }
    let absent = netns("nft-absent");
    let c = check_in(&absent, None, &[]);
    assert_eq!(c.probe("nftables")["status"], "absent", "{}", c.probe("nftables"));
    assert!(c.doc["facts"]["nftables"].is_null());

    let ns = netns("nft");
    let input = common::fixtures().join("nft/pwgen-50svc-input.nft");
    ns.exec_ok("nft", &["-f", input.to_str().unwrap()]);
    let json: Value =
        serde_json::from_str(&ns_stdout(&ns, "nft", &["-j", "list", "table", "ip", "kube-proxy"])).unwrap();
    let objects = json["nftables"].as_array().unwrap();
    let of = |kind: &'static str| objects.iter().filter_map(move |o| o.get(kind));
    let chain_names: Vec<&str> = of("chain").map(|c| c["name"].as_str().unwrap()).collect();
    let count = |prefix: &str| chain_names.iter().filter(|n| hashed(n, prefix)).count() as u64;
    let maps: serde_json::Map<String, Value> = of("map")
        .map(|m| {
            let n = m.get("elem").and_then(Value::as_array).map_or(0, Vec::len);
            (m["name"].as_str().unwrap().to_string(), Value::from(n))
        })
        .collect();
    let sets: serde_json::Map<String, Value> = of("set")
        .map(|m| {
            let n = m.get("elem").and_then(Value::as_array).map_or(0, Vec::len);
            (m["name"].as_str().unwrap().to_string(), Value::from(n))
        })
        .collect();

    let c = check_in(&ns, None, &[]);
    assert_eq!(c.probe("nftables")["status"], "ok", "{}", c.probe("nftables"));
    let tables = c.doc["facts"]["nftables"]["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 1, "{tables:?}");
    let t = &tables[0];
    // The address family, as in iptables' and IPVS' keys (nft calls it `ip`).
    assert_eq!(t["family"], "ipv4");
    let counts = &t["counts"];
    assert_eq!(counts["map_elements"]["service-ips"], 50);
    assert_eq!(counts["chains"], chain_names.len() as u64);
    assert_eq!(
        counts["base_chains"],
        of("chain").filter(|c| c.get("hook").is_some()).count() as u64
    );
    assert_eq!(counts["rules"], of("rule").count() as u64);
    assert_eq!(counts["service_chains"], count("service"));
    assert_eq!(counts["endpoint_chains"], count("endpoint"));
    assert_eq!(counts["external_chains"], count("external"));
    assert_eq!(counts["local_chains"], count("local"));
    assert_eq!(counts["maps"], maps.len() as u64);
    assert_eq!(counts["sets"], sets.len() as u64);
    assert_eq!(counts["map_elements"], Value::Object(maps));
    assert_eq!(counts["set_elements"], Value::Object(sets));
    assert_eq!(count("service"), 50, "the fixture has 50 services");
    // The nftables table is no iptables rule set.
    assert_eq!(c.backend_in_use(), "none");
}

/// kube-proxy's nftables mode at 1,000 services, IPv4 and IPv6: the netlink
/// counts equal the generator's and what `nft -j list table` shows (counted by
/// tests/common, not by the agent). 10,000 services are in tests/bench/netlink_counts.sh.
#[test]
fn nftables_generated_1000_services_both_families() {
    if !common::can_run(&["ip", "nft", "python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("nft-gen");
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_nft.py");
    let mut expected = std::collections::BTreeMap::new();
    let mut service_table = [0u64; 3];
    for (family, flag) in [("ip", None), ("ip6", Some("--ipv6"))] {
        let table = dir.path().join(format!("{family}.nft"));
        let exp = dir.path().join(format!("{family}.json"));
        let mut args = vec![
            gen.to_str().unwrap(),
            "--services",
            "1000",
            "--endpoints",
            "2",
            "--expected",
            exp.to_str().unwrap(),
        ];
        args.extend(flag);
        std::fs::write(&table, common::run("python3", &args).stdout).unwrap();
        ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
        let mut e: Value = serde_json::from_str(&std::fs::read_to_string(&exp).unwrap()).unwrap();
        let st = e.as_object_mut().unwrap().remove("service_table").unwrap();
        for (sum, key) in service_table
            .iter_mut()
            .zip(["service_ports", "node_ports", "endpoints"])
        {
            *sum += st[key].as_u64().unwrap();
        }
        expected.insert(family, e);
    }
    let c = check_in(&ns, None, &["--iptables.save-interval", "0"]);
    assert_eq!(c.probe("nftables")["status"], "ok", "{}", c.probe("nftables"));
    // The stale check's service table: every service-ips / service-nodeports
    // element followed through its chains and numgen maps to the endpoints' dnat.
    let stale = &c.doc["facts"]["conntrack_stale"];
    assert_eq!(stale["source"], "nftables", "{}", c.probe("conntrack_stale"));
    assert_eq!(
        [&stale["service_ports"], &stale["node_ports"], &stale["endpoints"]],
        service_table.map(Value::from).each_ref(),
        "conntrack_stale's service table vs the generator's"
    );
    let tables = c.doc["facts"]["nftables"]["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 2, "{tables:?}");
    for t in tables {
        let family = match t["family"].as_str().unwrap() {
            "ipv4" => "ip",
            "ipv6" => "ip6",
            other => panic!("family {other}: want ipv4 or ipv6"),
        };
        assert_eq!(t["counts"], expected[family], "{family}: netlink vs the generator");
        assert_eq!(
            t["counts"],
            common::nft_listing_counts(&ns, family),
            "{family}: netlink vs nft -j list table"
        );
        assert_eq!(t["netlink"]["reused"], false);
        assert_eq!(t["counts"]["service_chains"], 1000);
    }
    // The iptables probe does not mistake kube-proxy's table for an iptables one.
    for f in ["ipv4", "ipv6"] {
        assert_eq!(c.save("nft", f)["counts"]["tables"], serde_json::json!({}));
    }
}

// ---------------------------------------------------------------------------
// 6. Counts follow changes; an unchanged generation reuses them.

/// `iptables-nft-restore --noflush` of `text` inside `ns`: one transaction.
fn restore_noflush(ns: &Netns, text: &str) {
    use std::io::Write;
    let mut child = ns
        .command("iptables-nft-restore", &["--noflush"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "iptables-nft-restore --noflush of:\n{text}");
}

#[test]
fn counts_follow_changes_and_are_reused_at_an_unchanged_generation() {
    if !common::can_run(&["ip", "iptables-nft-restore", "iptables-nft", "nft", "python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rules, expected) = generate(dir.path(), 20, 1, &[]);
    let ns = netns("follow");
    load(&ns, "iptables-nft-restore", &rules);
    let port = 9878;
    let listen = format!("127.0.0.1:{port}");
    let agent = common::Serve::new()
        .in_netns(&ns)
        .listen(&listen)
        .args(common::NO_KUBE_PROXY)
        .args(["--iptables.interval", "200ms", "--iptables.save-interval", "0"])
        .no_wait()
        .start();
    // The nft/ipv4 run of each new snapshot, until `done` says stop.
    let runs = |done: &dyn Fn(&Value) -> bool| -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no snapshot satisfied the test in 30 s"
            );
            if let Some(body) = agent.get_200("/snapshot") {
                let doc: Value = serde_json::from_str(&body).unwrap();
                let saves = &doc["facts"]["iptables"]["saves"];
                if let Some(run) = saves.as_array().and_then(|a| a.iter().find(|s| s["family"] == "ipv4")) {
                    if done(run) {
                        return run.clone();
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // A fresh count is shown for one interval (200 ms) before the next run reuses it: a
    // poller on a loaded machine can miss that window, so the tests below tell a fresh count
    // by its time (`counted_timestamp_seconds` moves only when the agent counts again).
    let counted = |r: &Value| r["netlink"]["counted_timestamp_seconds"].as_f64().unwrap();
    let first = runs(&|r| r["netlink"]["generation"].is_u64());
    assert_eq!(first["counts"]["tables"], expected["tables"]);
    let g0 = first["netlink"]["generation"].clone();
    // Nothing changes: later runs reuse the count, of the same generation, made at the same time.
    let reused = runs(&|r| r["netlink"]["reused"] == true);
    assert_eq!(reused["netlink"]["generation"], g0);
    assert_eq!(
        reused["netlink"]["counted_timestamp_seconds"],
        first["netlink"]["counted_timestamp_seconds"]
    );
    assert_eq!(reused["counts"], first["counts"]);

    // A service added (a chain and a rule in KUBE-SERVICES jumping to it): the next count follows.
    // In one transaction, as kube-proxy writes: with `-N` then `-I`, a run between the two
    // commits saw the chain without its rule and failed this test now and then.
    let svc = "KUBE-SVC-PWTESTADDEDSVC01";
    ns.exec_input(
        "iptables-nft-restore",
        &["--noflush"],
        &format!("*nat\n:{svc} - [0:0]\n-I KUBE-SERVICES -d 10.96.99.99/32 -j {svc}\nCOMMIT\n"),
    );
    let added = runs(&|r| {
        r["netlink"]["generation"] != g0 && r["counts"]["kube"]["svc"] == expected["kube"]["svc"].as_u64().unwrap() + 1
    });
    let nat = |r: &Value, k: &str| r["counts"]["tables"]["nat"][k].as_u64().unwrap();
    assert!(
        counted(&added) > counted(&first),
        "a new generation is counted again: {added:#}"
    );
    assert_eq!(nat(&added, "rules"), nat(&first, "rules") + 1);
    assert_eq!(nat(&added, "chains"), nat(&first, "chains") + 1);
    assert_eq!(
        added["counts"]["kube_rules"].as_u64(),
        first["counts"]["kube_rules"].as_u64().map(|n| n + 1)
    );
    let g1 = added["netlink"]["generation"].clone();

    // An endpoint removed: its KUBE-SEP chain, its two rules, and the rule jumping to it.
    let text = std::fs::read_to_string(&rules).unwrap();
    let sep = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(':')
                .and_then(|l| l.split_whitespace().next())
                .filter(|c| c.starts_with("KUBE-SEP-"))
        })
        .unwrap()
        .to_string();
    let jump = text
        .lines()
        .find(|l| l.starts_with("-A KUBE-SVC-") && l.ends_with(&format!("-j {sep}")))
        .unwrap();
    restore_noflush(&ns, &format!("*nat\n-D{}\n-F {sep}\n-X {sep}\nCOMMIT\n", &jump[2..]));
    let removed = runs(&|r| r["netlink"]["generation"] != g1);
    assert!(
        counted(&removed) > counted(&added),
        "a new generation is counted again: {removed:#}"
    );
    assert_eq!(nat(&removed, "rules"), nat(&added, "rules") - 3);
    assert_eq!(nat(&removed, "chains"), nat(&added, "chains") - 1);
    assert_eq!(
        removed["counts"]["kube"]["sep"].as_u64(),
        added["counts"]["kube"]["sep"].as_u64().map(|n| n - 1)
    );
    assert_eq!(
        removed["counts"]["kube_rules"].as_u64(),
        added["counts"]["kube_rules"].as_u64().map(|n| n - 3)
    );
}

// ---------------------------------------------------------------------------
// 7. Without CAP_NET_ADMIN each netlink probe fails alone, naming what it read.

#[test]
fn without_cap_net_admin_only_the_netlink_probes_fail() {
    if !common::can_run(&["ip", "nft", "setpriv"]) {
        return;
    }
    let ns = netns("eperm");
    ns.exec_ok("nft", &["add", "table", "ip", "kube-proxy"]);
    let out = ns
        .command("setpriv", &["--inh-caps=-all", "--bounding-set=-net_admin", "--"])
        .arg(common::binary())
        .args([
            "check",
            "--format",
            "json",
            "--node-name",
            "t",
            "--iptables.save-interval",
            "0",
        ])
        .args(common::NO_KUBE_PROXY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    for (probe, names) in [
        (
            "iptables",
            "nf_tables over netlink, ip tables filter/nat/mangle/raw/security",
        ),
        ("nftables", "nf_tables over netlink, table ip kube-proxy"),
    ] {
        let p = &doc["probes"][probe];
        assert_eq!(p["status"], "failed", "{probe}: {p}");
        let e = p["error"].as_str().unwrap();
        assert!(
            e.contains(names) && e.contains("EPERM") && e.contains("CAP_NET_ADMIN"),
            "{probe}: {e}"
        );
    }
    for p in ["node", "modules", "conntrack", "sysctls"] {
        assert_eq!(doc["probes"][p]["status"], "ok", "{p}: {}", doc["probes"][p]);
    }
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "probe_failed")
        .unwrap();
    assert_eq!(f["severity"], "warning", "{f}");
}

/// `prog args...` in `ns` and in a mount namespace of its own where `dir` is `/run`: its
/// `/run/xtables.lock` is `dir`'s copy, never the host's.
fn with_own_run(ns: &Netns, dir: &Path, prog_args: &[&str]) -> Command {
    let mut args = vec![
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind \"$0\" /run && exec \"$@\"",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(prog_args);
    ns.command("unshare", &args)
}

/// The xtables lock (a copy, in mount namespaces of the test's own) held by `flock` while
/// `iptables-legacy-restore --wait` waits for it: iptables_lock_held names the holder, its PID
/// and the waiter; released, the restore goes through and the finding clears.
#[test]
fn xtables_lock_held_by_another_process_is_named_and_clears_when_released() {
    if !common::can_run(&["ip", "iptables-legacy-restore", "flock", "unshare", "mount"]) {
        return;
    }
    let ns = netns("xtlock");
    let run = tempfile::tempdir().unwrap();
    std::fs::write(run.path().join("xtables.lock"), "").unwrap();
    let mut serve = common::Serve::new();
    for (k, v) in BASE_ENV {
        serve = serve.env(k, v);
    }
    let agent = serve
        .in_netns(&ns)
        .wrap([
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$0\" /run && exec \"$@\"",
            run.path().to_str().unwrap(),
        ])
        .args([
            "--node-name=t",
            "--xtables-lock.interval=300ms",
            "--xtables-lock.held-warning=2s",
        ])
        .start();
    // flock -o: the lock is flock's own, released when cat ends (its stdin closed).
    let mut child = with_own_run(&ns, run.path(), &["flock", "-o", "/run/xtables.lock", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let release = child.stdin.take().unwrap();
    let holder = common::Process::new("flock holder", child, None);
    let holder_pid = holder.pid();
    common::poll("the lock taken", std::time::Duration::from_secs(10), || {
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        locks
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some(&holder_pid.to_string()))
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    let mut waiter = with_own_run(&ns, run.path(), &["iptables-legacy-restore", "--wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = waiter.stdin.take().unwrap();
        stdin
            .write_all(b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 192.0.2.1/32 -j DROP\nCOMMIT\n")
            .unwrap();
    }
    let finding = common::poll("iptables_lock_held", std::time::Duration::from_secs(30), || {
        let list: Value = serde_json::from_str(&agent.get_ok("/findings")).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "iptables_lock_held")
            .cloned()
            .ok_or_else(|| format!("not yet: {list}"))
    });
    assert_eq!(finding["severity"], "warning", "{finding}");
    assert_eq!(finding["evidence"]["holder_pid"], holder_pid, "{finding}");
    assert_eq!(finding["evidence"]["holder_name"], "flock", "{finding}");
    assert_eq!(
        finding["evidence"]["holder_command"], "flock -o /run/xtables.lock cat",
        "{finding}"
    );
    assert_eq!(finding["evidence"]["waiters"], 1, "{finding}");
    assert!(
        finding["evidence"]["held_seconds"].as_f64().unwrap() >= 2.0,
        "{finding}"
    );
    let summary = finding["summary"].as_str().unwrap();
    assert!(summary.starts_with(&format!("flock (PID {holder_pid})")), "{summary}");
    assert!(summary.contains("while 1 process(es) wait for it"), "{summary}");
    let metrics = agent.get_ok("/metrics");
    assert_eq!(common::series(&metrics, "proxywatch_xtables_lock_held"), Some(1.0));
    assert_eq!(common::series(&metrics, "proxywatch_xtables_lock_waiters"), Some(1.0));

    // Released: the restore that waited goes through, and the finding clears.
    drop(release);
    holder.stop();
    let out = waiter.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ns_stdout(&ns, "iptables-legacy-save", &["-t", "filter"]).contains("192.0.2.1"));
    common::poll("iptables_lock_held cleared", std::time::Duration::from_secs(30), || {
        let list: Value = serde_json::from_str(&agent.get_ok("/findings")).unwrap();
        (!common::finding_ids(&list).contains(&"iptables_lock_held"))
            .then_some(())
            .ok_or_else(|| format!("still: {list}"))
    });
    assert_eq!(
        common::series(&agent.get_ok("/metrics"), "proxywatch_xtables_lock_held"),
        Some(0.0)
    );
}
