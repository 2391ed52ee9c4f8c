//! End-to-end tests of the iptables and nftables probes on the real kernel:
//! rule sets are loaded into throwaway network namespaces (`common::Netns`)
//! and the real binary runs `check --format json` inside them. The root
//! namespace's rules are never read or changed, and no traffic is sent.
//!
//! Needs root, `ip`, `iptables-nft-restore`, `iptables-legacy-restore` and
//! `python3` (and `nft` for the nftables test): skipped without them, except
//! with CI=true, where a missing prerequisite fails the test.

mod common;

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
    let ip = common::which("ip").expect("ip on PATH");
    let bin = common::binary();
    let mut cmd = Command::new(ip);
    cmd.args(["netns", "exec", &ns.name])
        .arg(&bin)
        .args(["check", "--format", "json", "--node-name", "t"])
        .args(extra)
        .envs(BASE_ENV.iter().copied())
        .stdin(Stdio::null());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().expect("running the agent");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "agent output is not JSON ({e}); status {}\nstdout: {}\nstderr: {stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let code = out.status.code().expect("agent killed by a signal");
    assert!(code <= 2, "exit code {code} (the agent could not run): {stderr}");
    Check { doc, code, stderr }
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
    let tag = format!("{services}x{endpoints}{}", extra.join(""));
    let rules = dir.join(format!("{tag}.rules"));
    let expected = dir.join(format!("{tag}.json"));
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_rules.py");
    let out = common::run(
        "python3",
        &[
            gen.to_str().unwrap(),
            "--services",
            &services.to_string(),
            "--endpoints",
            &endpoints.to_string(),
            "--expected",
            expected.to_str().unwrap(),
        ]
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    );
    std::fs::write(&rules, &out.stdout).unwrap();
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
    (rules, expected)
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
    // lines and bytes: what the same save prints when the test runs it. Its
    // `# Generated/Completed on <ctime>` comments have a fixed width, but the
    // builtin chains' `[packets:bytes]` may have grown in between (the agent
    // itself connects to kube-proxy's localhost ports), so bytes are compared
    // with every counter as `[0:0]`, plus at most 36 digits per builtin chain.
    let text = ns_stdout(&ns, save["command"].as_str().unwrap(), &[]);
    assert_eq!(counts["lines"], text.lines().count() as u64, "{backend}: lines");
    let zeroed: u64 = text.lines().map(|l| zero_counters(l).len() as u64 + 1).sum();
    let builtins = text
        .lines()
        .filter(|l| l.starts_with(':') && !l.contains(" - ["))
        .count() as u64;
    let bytes = counts["bytes"].as_u64().unwrap();
    assert!(
        (zeroed..=zeroed + 36 * builtins).contains(&bytes),
        "{backend}: bytes {bytes}, expected {zeroed} (+ counter digits of {builtins} builtin chains)"
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
    assert_eq!(t["family"], "ip");
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
    assert_eq!(counts["maps"], maps.len() as u64);
    assert_eq!(counts["sets"], sets.len() as u64);
    assert_eq!(counts["map_elements"], Value::Object(maps));
    assert_eq!(counts["set_elements"], Value::Object(sets));
    assert_eq!(count("service"), 50, "the fixture has 50 services");
    // The nftables table is no iptables rule set.
    assert_eq!(c.backend_in_use(), "none");
}
