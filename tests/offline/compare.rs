//! `proxywatch baseline save` and `proxywatch compare`, end to end on fixture
//! nodes (tests/fixtures/nodes), with the controlled environment of
//! tests/offline/fixture_nodes.rs: no inherited environment, PATH = the node's
//! stand-in commands, kube-proxy's URLs on a closed port.
use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const HEALTHY: &str = "healthy-iptables";
const NEAR_FULL: &str = "conntrack-near-full-drops";

fn nodes_dir() -> PathBuf {
    common::fixtures().join("nodes")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary from the nodes dir with the node's commands on PATH.
fn run(node: &str, args: &[&str]) -> Run {
    let out = Command::new(common::binary())
        .current_dir(nodes_dir())
        .env_clear()
        .env("PATH", nodes_dir().join(node).join("exec"))
        .args(args)
        .output()
        .expect("run proxywatch");
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!r.stderr.contains("panicked"), "panic:\n{}", r.stderr);
    r
}

/// The flags that make a run depend on the fixture only.
fn node_flags(node: &str) -> Vec<String> {
    [
        "--host-root",
        node,
        "--node-name",
        "fixture",
        "--kube-proxy.metrics-url",
        "http://127.0.0.1:9",
        "--kube-proxy.healthz-url",
        "http://127.0.0.1:9",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn save(node: &str, file: &Path) {
    let mut args = vec!["baseline".to_string(), "save".into(), file.display().to_string()];
    args.extend(node_flags(node));
    let r = run(node, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "baseline save {node}: {}", r.stderr);
    assert!(r.stderr.contains("baseline of node fixture saved to"), "{}", r.stderr);
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn compare(node: &str, args: &[&str]) -> Run {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    run(node, &all)
}

fn fact<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no fact {name} in {:#}", c["facts"]))
}

/// The fixture's conntrack fill in percent, from its own files, to one decimal.
fn fill_percent(node: &str) -> f64 {
    let n = |rel: &str| -> f64 {
        std::fs::read_to_string(nodes_dir().join(node).join(rel))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let ratio = n("proc/sys/net/netfilter/nf_conntrack_count") / n("proc/sys/net/netfilter/nf_conntrack_max");
    (ratio * 1000.0).round() / 10.0
}

fn assert_worse(c: &Value) {
    assert_eq!(c["verdict"], "worse", "{c:#}");
    let fill = fact(c, "conntrack fill");
    let (before, after) = (fill_percent(HEALTHY), fill_percent(NEAR_FULL));
    assert!(before < 50.0 && after > 95.0, "fixtures changed: {before} {after}");
    assert_eq!(fill["before"].as_f64(), Some(before), "{fill}");
    assert_eq!(fill["after"].as_f64(), Some(after), "{fill}");
    assert_eq!(fill["state"], "changed");
    assert!(
        (fill["change"].as_f64().unwrap() - (after - before)).abs() < 0.01,
        "{fill}"
    );
    let appeared = &c["appeared"];
    assert!(
        common::finding_ids(appeared).contains(&"conntrack_table_fill"),
        "{appeared:#}"
    );
    let f = appeared
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "conntrack_table_fill")
        .unwrap();
    assert_eq!(f["after"], "critical");
    assert!(c["reasons"]
        .as_array()
        .unwrap()
        .contains(&"conntrack_table_fill appeared (critical)".into()));
    // Drops since the baseline: the counters' change.
    let drops = fact(c, "conntrack drop (since boot)");
    assert_eq!(
        (drops["before"].as_u64(), drops["after"].as_u64()),
        (Some(0), Some(1000))
    );
}

#[test]
fn worse_against_a_saved_file_and_against_live_probes() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let near = dir.path().join("near-full.json");
    save(HEALTHY, &base);
    save(NEAR_FULL, &near);
    // The baseline is exactly the /snapshot document.
    let b = read_json(&base);
    assert_eq!(b["node"], "fixture");
    assert_eq!(b["status"], "ok");
    assert!(b["facts"]["conntrack"].is_object());
    let (base_s, near_s) = (base.to_str().unwrap(), near.to_str().unwrap());

    // --against a second file.
    let r = compare(HEALTHY, &[base_s, "--against", near_s, "--format", "json"]);
    assert_eq!(r.code, 1, "worse exits 1\n{}\n{}", r.stdout, r.stderr);
    let with_flag: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_worse(&with_flag);
    // `compare BEFORE AFTER`, as a user types it first (as with diff): the same comparison.
    let r = compare(HEALTHY, &[base_s, near_s, "--format", "json"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap(), with_flag);

    // The probes now, on the other node.
    let mut args = vec![base_s.to_string(), "--format".into(), "json".into()];
    args.extend(node_flags(NEAR_FULL));
    let r = compare(NEAR_FULL, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_worse(&c);
    assert_eq!(c["after"]["source"], "probes now");

    // Text, for people: the verdict, the fill numbers and the appeared finding, in 80 columns.
    let r = compare(HEALTHY, &[base_s, "--against", near_s]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.starts_with("proxywatch compare: WORSE\n"), "{}", r.stdout);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("conntrack fill "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    let want = [
        format!("{:.1}%", fill_percent(HEALTHY)),
        format!("{:.1}%", fill_percent(NEAR_FULL)),
    ];
    assert_eq!(line.split_whitespace().collect::<Vec<_>>()[2..4], want, "{line}");
    assert!(r.stdout.contains("findings appeared:\n"), "{}", r.stdout);
    assert!(r.stdout.contains("[CRIT] conntrack_table_fill\n"), "{}", r.stdout);
    assert!(r.stdout.lines().all(|l| l.chars().count() <= 80), "{}", r.stdout);

    // The reverse is better, the same file is the same: both exit 0.
    let r = compare(HEALTHY, &[near_s, "--against", base_s, "--format", "json"]);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!((r.code, c["verdict"].as_str()), (0, Some("better")), "{}", r.stdout);
    assert!(common::finding_ids(&c["resolved"]).contains(&"conntrack_table_fill"));
    let r = compare(HEALTHY, &[base_s, "--against", base_s, "--format", "json"]);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!((r.code, c["verdict"].as_str()), (0, Some("same")), "{}", r.stdout);
    assert!(c["facts"].as_array().unwrap().iter().all(|f| f["state"] == "same"));
}

#[test]
fn url_reads_a_running_agents_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let near = dir.path().join("near-full.json");
    save(HEALTHY, &base);
    save(NEAR_FULL, &near);
    let body = std::fs::read(&near).unwrap();
    // A one-shot HTTP server standing in for an agent: answers /snapshot only.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client closed early");
            req.extend_from_slice(&buf[..n]);
        }
        let req = String::from_utf8_lossy(&req).into_owned();
        let ok = req.starts_with("GET /snapshot ");
        let (status, payload) = if ok {
            ("200 OK", body)
        } else {
            ("404 Not Found", b"not found\n".to_vec())
        };
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            payload.len()
        );
        let _ = s.write_all(&payload);
        req
    });
    let url = format!("http://{addr}");
    let r = compare(HEALTHY, &[base.to_str().unwrap(), "--url", &url, "--format", "json"]);
    let req = server.join().unwrap();
    assert!(req.starts_with("GET /snapshot HTTP/1.1"), "{req}");
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_worse(&c);
    assert_eq!(c["after"]["source"], format!("{url}/snapshot"));
}

#[test]
fn not_a_snapshot_is_a_clear_error_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    save(HEALTHY, &base);
    let bogus = dir.path().join("findings.json");
    std::fs::write(&bogus, r#"[{"id": "x"}]"#).unwrap();
    let nofacts = dir.path().join("nofacts.json");
    std::fs::write(&nofacts, r#"{"node": "n", "findings": []}"#).unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "before the change: all good\n").unwrap();
    for (file, want) in [
        (&nofacts, "not a proxywatch snapshot: no `facts` object"),
        (&bogus, "not a proxywatch snapshot"),
        (&text, "not JSON"),
    ] {
        let f = file.to_str().unwrap();
        for args in [
            vec![f, "--against", base.to_str().unwrap()],
            vec![base.to_str().unwrap(), "--against", f],
        ] {
            let r = compare(HEALTHY, &args);
            assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
            assert!(r.stderr.contains(&format!("{f}: {want}")), "{args:?}: {}", r.stderr);
            assert!(r.stdout.is_empty());
        }
    }
    let r = compare(
        HEALTHY,
        &["/nonexistent/base.json", "--against", base.to_str().unwrap()],
    );
    assert_eq!(r.code, 3);
    assert!(r.stderr.contains("/nonexistent/base.json"), "{}", r.stderr);
}

#[test]
fn another_versions_document_still_compares() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let near = dir.path().join("near-full.json");
    save(HEALTHY, &base);
    save(NEAR_FULL, &near);
    // A "future" baseline: fields this agent does not know, and no sysctls fact.
    let mut doc = read_json(&base);
    doc["schema_version"] = 7.into();
    doc["facts"]["conntrack"]["per_zone"] = serde_json::json!({"0": 12});
    doc["facts"]["ebpf"] = serde_json::json!({"programs": 3});
    doc["facts"].as_object_mut().unwrap().remove("sysctls");
    let future = dir.path().join("future.json");
    std::fs::write(&future, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();

    let r = compare(
        HEALTHY,
        &[
            future.to_str().unwrap(),
            "--against",
            near.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_worse(&c);
    let ip_forward = fact(&c, "sysctl net.ipv4.ip_forward");
    assert_eq!(ip_forward["state"], "missing_before");
    assert_eq!(ip_forward["after"], 1);
    // In text: "missing" where the value would be.
    let r = compare(
        HEALTHY,
        &[future.to_str().unwrap(), "--against", near.to_str().unwrap()],
    );
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("sysctl net.ipv4.ip_forward "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>()[2..],
        ["missing", "1"],
        "{line}"
    );
}

#[test]
fn compare_help_states_its_exit_codes() {
    let out = Command::new(common::binary())
        .args(["compare", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("0 same or better, 1 worse, 3 could not run"), "{help}");
}

/// The real kernel: a network namespace with kube-proxy's iptables-nft rules, saved as
/// a baseline and compared with the probes a moment later, the rules untouched. Two
/// runs always differ in how long reading the rules took; that is not a change, so no
/// duration is listed (before, `compare` listed every one of them).
#[test]
fn unchanged_rules_on_the_real_kernel_list_no_duration() {
    if !common::can_run(&["ip", "iptables-nft-restore", "python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = common::Netns::new("cmpdur");
    let (rules, _) = common::generate_kube_rules(dir.path(), 200, 3, &[]);
    let out = ns
        .command("iptables-nft-restore", &[])
        .stdin(std::fs::File::open(&rules).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = std::env::var("PATH").unwrap();
    let agent = |args: &[&str]| {
        let out = Command::new(common::which("ip").unwrap())
            .args(["netns", "exec", &ns.name])
            .arg(common::binary())
            .args(args)
            .args(["--node-name", "t"])
            .args(common::NO_KUBE_PROXY)
            .env_clear()
            .env("PATH", &path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let base = dir.path().join("base.json");
    agent(&["baseline", "save", base.to_str().unwrap()]);
    let (json, stderr) = agent(&["compare", base.to_str().unwrap(), "--format", "json"]);
    let c: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}\n{stderr}"));
    let facts = c["facts"].as_array().unwrap();
    let durations: Vec<&Value> = facts
        .iter()
        .filter(|f| f["name"].as_str().unwrap().ends_with(" duration"))
        .collect();
    assert!(!durations.is_empty(), "no duration compared: {json}");
    for d in &durations {
        assert_eq!(d["state"], "same", "{d}");
    }
    // The rule counts are the same too, and both sides did read them.
    let rules = fact(&c, "iptables nft ipv4 nat rules");
    assert_eq!(
        (rules["state"].as_str(), rules["before"].as_u64() > Some(200)),
        (Some("same"), true),
        "{rules}"
    );
    let (text, _) = agent(&["compare", base.to_str().unwrap()]);
    assert!(!text.contains("duration"), "{text}");
    assert!(!text.contains("iptables nft ipv4 nat rules"), "{text}");
    assert!(text.contains(" facts unchanged"), "{text}");
}

/// `--url http://NODE:9877/metrics` (a natural first guess) says it got metrics text and where
/// the snapshot is, not only "not JSON".
#[test]
fn url_to_metrics_says_to_use_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    save(HEALTHY, &base);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client closed early");
            req.extend_from_slice(&buf[..n]);
        }
        let payload =
            "# HELP proxywatch_node_ready 1 unless...\n# TYPE proxywatch_node_ready gauge\nproxywatch_node_ready 1\n";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
            payload.len()
        );
        String::from_utf8_lossy(&req).into_owned()
    });
    let url = format!("http://{addr}/metrics");
    let r = compare(HEALTHY, &[base.to_str().unwrap(), "--url", &url]);
    let req = server.join().unwrap();
    assert!(req.starts_with("GET /metrics HTTP/1.1"), "{req}");
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("{url}: not JSON: this is Prometheus metrics text")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("/snapshot"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
}
