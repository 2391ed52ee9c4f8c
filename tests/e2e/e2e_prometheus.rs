//! End to end with a real Prometheus (issue #7): on a node whose conntrack table
//! is full and dropping packets, the alerts of `manifests/prometheusrule.yaml` (the
//! file users deploy) fire, the agent reports the node not ready, and everything
//! resolves once the pressure is relieved; a second, healthy node scraped by the
//! same Prometheus never alerts.
//!
//! Layout (every namespace is created by the test and deleted on drop):
//!
//! ```text
//!  sick ns                                   healthy ns
//!  ├─ lo: prometheus 127.0.0.1:9090          ├─ proxywatch serve 169.254.77.2:9877
//!  │      proxywatch serve 127.0.0.1:9877    │    (this kernel, its own namespace)
//!  │        --host-root: a fixture node      │
//!  └─ mon0 169.254.77.1/30 ── veth ───────── mon1 169.254.77.2/30
//! ```
//!
//! One Prometheus scrapes both agents (job `proxywatch`, instances `pwt-sick`
//! and `pwt-healthy`), which is how a cluster sees two nodes.
//!
//! The sick node is a copy of the fixture node `healthy-iptables` whose conntrack
//! files the test writes as a full table shows them: `nf_conntrack_count` at
//! `nf_conntrack_max`, the `drop` column of `/proc/net/stat/nf_conntrack` rising on
//! each CPU. A real full table needs the host-wide `nf_conntrack_max` lowered (it is
//! read-only outside the initial namespace), which would drop the traffic of
//! everything else on the machine running the suite (issue 43): that reading of a
//! real kernel's full table is proven in the VM instead (tests/vm/vm_kernel.rs,
//! scenario `conntrack-full`). Here the rules, the scrapes, readiness and the
//! dashboard's queries are the real ones.
//!
//! Needs root, `ip`, `nft`, `prometheus` (Debian 12's 2.42) and `python3` with
//! PyYAML (tests/manifests/extract_rules.py). Takes about 3 minutes: the alert
//! `for:` and range durations are the production ones. Logs of Prometheus and the
//! agents are kept in `target/e2e-logs/e2e_prometheus/` and tailed to stderr on
//! failure. See docs/see-it-work.md.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Agent, Netns, Process, Serve};
use serde_json::Value;

/// The sick node's conntrack files, under its host root.
const COUNT: &str = "proc/sys/net/netfilter/nf_conntrack_count";
const MAX: &str = "proc/sys/net/netfilter/nf_conntrack_max";
const STAT: &str = "proc/net/stat/nf_conntrack";

/// Every port is free inside the test's own namespaces.
const PROMETHEUS: &str = "127.0.0.1:9090";
const SICK_AGENT: &str = "127.0.0.1:9877";
const HEALTHY_AGENT: &str = "169.254.77.2:9877";

const SICK: &str = "pwt-sick";
const HEALTHY: &str = "pwt-healthy";

/// Prometheus intervals; the scrape timeout is what `scrape_duration_seconds` must stay under.
const SCRAPE_INTERVAL_S: u64 = 1;
const SCRAPE_TIMEOUT_S: f64 = 1.0;

/// Deadlines of the polls: generous, only a failure reaches them. The values
/// are asserted, never the time they took.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How often the pressure writer raises the sick node's drop counters.
const DROP_TICK: Duration = Duration::from_millis(200);
/// ProxywatchConntrackTableFull has `for: 1m`.
const FIRE_DEADLINE: Duration = Duration::from_secs(180);
/// ProxywatchConntrackDropping counts increases over `[2m]`.
const RESOLVE_DEADLINE: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------
// Logs kept as CI output.

/// `target/e2e-logs/<name>`, next to the test binary (`target/<profile>/deps/`),
/// emptied at the start of a run.
fn log_dir(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("e2e-logs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// On a panic, prints where the logs are and the tail of each (they stay on disk).
struct LogReport {
    files: Vec<PathBuf>,
}

impl Drop for LogReport {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for f in &self.files {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!("\n===== {} (last {} lines) =====", f.display(), tail.len());
            for l in tail {
                eprintln!("{l}");
            }
        }
        eprintln!("\n(complete logs kept in the files above)");
    }
}

// ---------------------------------------------------------------------------
// Processes: each started by the test, stopped by its own PID (SIGTERM, then
// SIGKILL), always reaped (common::Process; the agents are common::Agent).

/// Runs `program args` in `ns` (`ip netns exec` execs it: the child's PID is
/// the program's), stdout and stderr to `log`.
fn spawn_in(what: &str, ns: &Netns, program: &str, args: &[&str], log: PathBuf) -> Process {
    Process::spawn(what, &mut ns.command(program, args), &log)
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant vector: each series' labels and value.
type Series = Vec<(BTreeMap<String, String>, f64)>;

/// Prometheus' HTTP API, reached inside the sick namespace.
struct Prom<'a> {
    ns: &'a Netns,
}

impl Prom<'_> {
    fn api(&self, path: &str) -> Result<Value, String> {
        let (code, body) = common::http_get_in(self.ns, PROMETHEUS.parse().unwrap(), path)?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {code} {e}: {body}"))?;
        if code != 200 || v["status"] != "success" {
            return Err(format!("{path}: {code} {body}"));
        }
        Ok(v["data"].clone())
    }

    /// An instant query: each series' labels and value.
    fn query(&self, q: &str) -> Series {
        self.try_query(q).unwrap_or_else(|e| panic!("query {q}: {e}"))
    }

    fn try_query(&self, q: &str) -> Result<Series, String> {
        let data = self.api(&format!("/api/v1/query?query={}", percent_encode(q)))?;
        if data["resultType"] != "vector" {
            return Err(format!("{q}: not a vector: {data}"));
        }
        Ok(data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let v = s["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (labels, v)
            })
            .collect())
    }

    /// The value per instance.
    fn by_instance(&self, q: &str) -> BTreeMap<String, f64> {
        self.query(q)
            .into_iter()
            .map(|(l, v)| (l.get("instance").cloned().unwrap_or_default(), v))
            .collect()
    }

    /// One series' value, if present.
    fn value(&self, q: &str) -> Option<f64> {
        let r = self.query(q);
        assert!(r.len() <= 1, "{q}: more than one series: {r:?}");
        r.first().map(|(_, v)| *v)
    }

    /// `/api/v1/alerts`: (alertname, instance) -> state (pending or firing).
    fn alerts(&self) -> BTreeMap<(String, String), String> {
        let data = self.api("/api/v1/alerts").unwrap_or_else(|e| panic!("{e}"));
        data["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let l = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
                (
                    (l("alertname"), l("instance")),
                    a["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// A query of manifests/dashboards/proxywatch.json's panel `title`, with its variables as
/// Grafana fills them when every cluster and node is selected and the job is proxywatch.
fn dashboard_query(title: &str, ref_id: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/dashboards/proxywatch.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panel = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no dashboard panel {title:?}"));
    let expr = panel["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["refId"] == ref_id)
        .and_then(|t| t["expr"].as_str())
        .unwrap_or_else(|| panic!("{title}: no query {ref_id}"));
    expr.replace("$cluster", ".*")
        .replace("$job", "proxywatch")
        .replace("$instance", ".*")
}

// ---------------------------------------------------------------------------
// Polling and the kernel's state.

/// Calls `f` until it returns Ok, or panics after `deadline` with its last Err.
fn wait_for<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if start.elapsed() > deadline => {
                panic!("{what}: not within {deadline:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn number(text: &str, what: &str) -> u64 {
    text.trim().parse().unwrap_or_else(|e| panic!("{what}: {text:?}: {e}"))
}

/// A number file of the sick node.
fn read_number(root: &Path, path: &str) -> u64 {
    number(&std::fs::read_to_string(root.join(path)).unwrap(), path)
}

/// A column of the sick node's `/proc/net/stat/nf_conntrack`, summed over CPUs
/// (its own sum, independent of the crate's parser).
fn stat_sum(root: &Path, column: &str) -> u64 {
    let text = std::fs::read_to_string(root.join(STAT)).unwrap();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let col = lines
        .next()
        .unwrap()
        .split_whitespace()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no {column} column in {text}"));
    lines
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(col).unwrap(), 16).unwrap())
        .sum()
}

/// The pressure on the sick node, as the kernel shows a full table: the count at
/// the limit, and each CPU's `drop` rising by one every `DROP_TICK`, until dropped
/// (then the count goes back to where it was and the drops stay where they are).
struct Pressure {
    stop: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Pressure {
    fn start(root: &Path) -> Pressure {
        let (root, stop) = (root.to_path_buf(), Arc::new(AtomicBool::new(false)));
        let original_count = std::fs::read_to_string(root.join(COUNT)).unwrap();
        let original_stat = std::fs::read_to_string(root.join(STAT)).unwrap();
        let cpus = original_stat.lines().count() - 1;
        common::replace_file(&root.join(COUNT), &format!("{}\n", read_number(&root, MAX)));
        let flag = stop.clone();
        let writer = std::thread::spawn(move || {
            let mut drops = 0;
            while !flag.load(Ordering::Relaxed) {
                drops += 1;
                let stat = common::stat_with_column(&original_stat, "drop", &vec![drops; cpus]);
                common::replace_file(&root.join(STAT), &stat);
                std::thread::sleep(DROP_TICK);
            }
            common::replace_file(&root.join(COUNT), &original_count);
        });
        Pressure {
            stop,
            writer: Some(writer),
        }
    }
}

impl Drop for Pressure {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

// ---------------------------------------------------------------------------
// The set-up.

/// The healthy namespace tracks its traffic (the scrapes it answers), as a
/// node does; its table stays nearly empty.
const HEALTHY_NFT: &str = r#"
table inet pwt {
    chain input {
        type filter hook input priority filter; policy accept;
        ct state new counter
    }
}
"#;

fn nft_load(ns: &Netns, ruleset: &str) {
    let mut child = ns
        .command("nft", &["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(ruleset.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f in {}: {}",
        ns.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A veth pair between two namespaces, with an address on each end.
fn veth(a: &Netns, a_if: &str, a_addr: &str, b: &Netns, b_if: &str, b_addr: &str) {
    common::run(
        "ip",
        &[
            "link", "add", a_if, "netns", &a.name, "type", "veth", "peer", "name", b_if, "netns", &b.name,
        ],
    );
    for (ns, ifname, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
        ns.exec_ok("ip", &["addr", "add", addr, "dev", ifname]);
        ns.exec_ok("ip", &["link", "set", ifname, "up"]);
    }
}

/// `proxywatch serve` in `ns` on `listen`, its output in `dir`; on the fixture node
/// `root` (no environment, nothing on PATH, no kube-proxy) or, without one, on this
/// kernel in `ns`. Returns once its first snapshot exists (before it, /metrics is 503
/// and a scrape would count as down), and asserts the node is ready.
fn start_agent(ns: &Netns, node: &str, listen: &str, dir: &Path, root: Option<&Path>) -> Agent {
    let mut serve = Serve::new().in_netns(ns).listen(listen).args([
        "--node-name",
        node,
        "--conntrack.interval",
        "500ms",
        "--conntrack.window",
        "30s",
        // The neighbour tables are the kernel's, shared by every namespace:
        // what other work on this machine does to them (it can fill them) is
        // not this test's healthy or sick node.
        "--neighbour-tables.interval",
        "0",
    ]);
    if let Some(root) = root {
        serve = serve
            .env_clear()
            .env("PATH", dir.join("empty-path"))
            .arg("--host-root")
            .arg(root)
            .args(common::NO_KUBE_PROXY);
    }
    let agent = serve.log(dir.join(format!("agent-{node}.log"))).start();
    let (code, body) = agent.get("/readyz").unwrap();
    assert_eq!(code, 200, "{listen}/readyz before any pressure: {body}");
    agent
}

/// The agent's active findings: id -> severity.
fn findings(agent: &Agent) -> BTreeMap<String, String> {
    let (code, body) = agent.get("/findings").unwrap();
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn prometheus_config(rules: &Path) -> String {
    format!(
        r#"# Written by tests/e2e/e2e_prometheus.rs.
global:
  scrape_interval: {SCRAPE_INTERVAL_S}s
  scrape_timeout: {SCRAPE_TIMEOUT_S}s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  # The rules select job="proxywatch"; instance is the node name, as with the ServiceMonitor.
  - job_name: proxywatch
    static_configs:
      - targets: ["{SICK_AGENT}"]
        labels:
          instance: {SICK}
      - targets: ["{HEALTHY_AGENT}"]
        labels:
          instance: {HEALTHY}
"#,
        rules = rules.display()
    )
}

// ---------------------------------------------------------------------------

/// The kernel's conntrack table fills and drops packets; through a real
/// Prometheus with the deployed rules, ProxywatchConntrackTableFull and
/// ProxywatchConntrackDropping fire and the node is not ready; after relief
/// they resolve and it is ready again. Scrapes never failed nor timed out, and
/// the healthy node scraped alongside never had an alert fire.
#[test]
fn fixture_node_conntrack_exhaustion_fires_and_resolves_alerts_in_real_prometheus() {
    if !common::can_run(&["ip", "nft", "prometheus", "python3"]) {
        return;
    }
    let dir = log_dir("e2e_prometheus");
    let _report = LogReport {
        files: ["prometheus.log", "agent-pwt-sick.log", "agent-pwt-healthy.log"]
            .iter()
            .map(|f| dir.join(f))
            .collect(),
    };
    eprintln!("logs: {}", dir.display());

    // ---- namespaces, the sick node's host root
    let sick = Netns::new("e2e-sick");
    let healthy = Netns::new("e2e-healthy");
    veth(&sick, "mon0", "169.254.77.1/30", &healthy, "mon1", "169.254.77.2/30");
    nft_load(&healthy, HEALTHY_NFT);
    // A fresh namespace has ip_forward=0, a critical finding of its own; a node has 1.
    // (Per namespace: gone with it.)
    healthy.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    let node_dir = tempfile::Builder::new().prefix("pwe2e-").tempdir().unwrap();
    let root = node_dir.path().join("node");
    common::copy_tree(&common::fixtures().join("nodes/healthy-iptables"), &root);
    std::fs::create_dir_all(dir.join("empty-path")).unwrap();

    // ---- the agents, then Prometheus
    let sick_agent = start_agent(&sick, SICK, SICK_AGENT, &dir, Some(&root));
    let healthy_agent = start_agent(&healthy, HEALTHY, HEALTHY_AGENT, &dir, None);

    // The same file users deploy: its spec is the rules file.
    let rules = dir.join("proxywatch-rules.yaml");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/prometheusrule.yaml");
    let extract = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests/extract_rules.py");
    common::run(
        "python3",
        &[
            extract.to_str().unwrap(),
            manifest.to_str().unwrap(),
            rules.to_str().unwrap(),
        ],
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, prometheus_config(&rules)).unwrap();
    let tsdb = tempfile::tempdir().unwrap();
    let prometheus = spawn_in(
        "prometheus",
        &sick,
        "prometheus",
        &[
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", tsdb.path().display()),
            &format!("--web.listen-address={PROMETHEUS}"),
            "--web.enable-lifecycle",
        ],
        dir.join("prometheus.log"),
    );
    let prom = Prom { ns: &sick };
    wait_for(
        "Prometheus ready, both targets up, rules loaded",
        START_DEADLINE,
        || {
            prometheus.assert_running();
            let up: BTreeMap<String, f64> = prom
                .try_query(r#"up{job="proxywatch"}"#)?
                .into_iter()
                .map(|(l, v)| (l.get("instance").cloned().unwrap_or_default(), v))
                .collect();
            let want: BTreeMap<String, f64> = [(SICK.to_string(), 1.0), (HEALTHY.to_string(), 1.0)].into();
            if up != want {
                return Err(format!("up: {up:?}"));
            }
            let groups = prom.api("/api/v1/rules")?;
            let names: BTreeSet<String> = groups["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().unwrap().iter())
                .map(|r| r["name"].as_str().unwrap().to_string())
                .collect();
            for a in ["ProxywatchConntrackTableFull", "ProxywatchConntrackDropping"] {
                if !names.contains(a) {
                    return Err(format!("rule {a} not loaded: {names:?}"));
                }
            }
            Ok(())
        },
    );
    let t_start = unix_now();
    let early: Vec<_> = prom.alerts().into_iter().filter(|(_, s)| s == "firing").collect();
    assert!(early.is_empty(), "alerts firing before any pressure: {early:?}");

    // ---- pressure: the table full, new flows dropped on every CPU
    let limit = read_number(&root, MAX);
    let pressure = Pressure::start(&root);
    let pressed = Instant::now();
    assert_eq!(read_number(&root, COUNT), limit, "the count at the limit");

    // Prometheus sees the node's numbers (both stay put while the table is full).
    wait_for(
        "proxywatch_conntrack_entries in Prometheus = nf_conntrack_count = nf_conntrack_max",
        START_DEADLINE,
        || {
            let p = prom.value(&format!(r#"proxywatch_conntrack_entries{{instance="{SICK}"}}"#));
            let l = prom.value(&format!(r#"proxywatch_conntrack_entries_limit{{instance="{SICK}"}}"#));
            if p == Some(limit as f64) && l == Some(limit as f64) {
                Ok(())
            } else {
                Err(format!("Prometheus entries {p:?}, limit {l:?}; node {limit}"))
            }
        },
    );

    // Both alerts fire (TableFull after its `for: 1m`); the healthy node has none.
    let firing = wait_for(
        "ProxywatchConntrackTableFull and ProxywatchConntrackDropping firing",
        FIRE_DEADLINE,
        || {
            prometheus.assert_running();
            let alerts = prom.alerts();
            let state = |a: &str| alerts.get(&(a.to_string(), SICK.to_string())).cloned();
            if state("ProxywatchConntrackTableFull").as_deref() == Some("firing")
                && state("ProxywatchConntrackDropping").as_deref() == Some("firing")
            {
                Ok(alerts)
            } else {
                Err(format!("{alerts:?}"))
            }
        },
    );
    let healthy_firing: Vec<_> = firing
        .iter()
        .filter(|((_, i), s)| i == HEALTHY && *s == "firing")
        .collect();
    assert!(healthy_firing.is_empty(), "the healthy node alerts: {healthy_firing:?}");

    // The agent: not ready, for both reasons.
    assert_eq!(
        prom.value(&format!(r#"proxywatch_node_ready{{instance="{SICK}"}}"#)),
        Some(0.0)
    );
    // The dashboard's fleet queries as Grafana sends them (variables at All, job proxywatch):
    // the sick node heads the conntrack fill top-k and the worst-nodes table.
    let fill = prom.by_instance(&dashboard_query("Conntrack table fill: top 10 nodes", "A"));
    assert!(
        fill.get(SICK).is_some_and(|&f| f > 0.9) && fill.get(SICK) > fill.get(HEALTHY),
        "dashboard fill top-k: {fill:?}"
    );
    let worst = prom.by_instance(&dashboard_query("Worst nodes", "A"));
    assert_eq!(worst.get(SICK), Some(&3.0), "dashboard worst nodes: {worst:?}");
    assert!(
        worst.get(HEALTHY).is_some_and(|&w| w < 3.0),
        "dashboard worst nodes: {worst:?}"
    );
    let (code, body) = sick_agent.get("/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("conntrack table ") && body.contains("% full ("),
        "readyz without the fill: {body}"
    );
    assert!(
        body.contains("table full, dropping packet"),
        "readyz without the drops: {body}"
    );
    let f = findings(&sick_agent);
    assert_eq!(
        f.get("conntrack_table_fill").map(String::as_str),
        Some("critical"),
        "{f:?}"
    );
    assert_eq!(f.get("conntrack_drops").map(String::as_str), Some("critical"), "{f:?}");
    // Prometheus' drop counter is the kernel's, read later.
    let p_drops = prom
        .value(&format!(r#"proxywatch_conntrack_stat_drop_total{{instance="{SICK}"}}"#))
        .expect("drop counter scraped");
    let k_drops = stat_sum(&root, "drop");
    assert!(
        p_drops > 0.0 && p_drops <= k_drops as f64,
        "Prometheus drop {p_drops}, node {k_drops}"
    );
    assert_eq!(
        prom.value(&format!(r#"proxywatch_node_ready{{instance="{HEALTHY}"}}"#)),
        Some(1.0)
    );

    // ---- relief: the drops stop, the count goes back to what it was
    drop(pressure);
    eprintln!(
        "the sick node was full and dropping for {:.0} s",
        pressed.elapsed().as_secs_f64()
    );
    let count_after = read_number(&root, COUNT);
    assert!(count_after < limit, "relieved: {count_after} of {limit}");
    let drops_at_relief = stat_sum(&root, "drop");

    wait_for("both alerts resolved, the node ready again", RESOLVE_DEADLINE, || {
        prometheus.assert_running();
        let alerts = prom.alerts();
        let left: Vec<_> = alerts
            .keys()
            .filter(|(a, i)| i == SICK && (a == "ProxywatchConntrackTableFull" || a == "ProxywatchConntrackDropping"))
            .collect();
        if !left.is_empty() {
            return Err(format!("still active: {alerts:?}"));
        }
        let ready = prom.value(&format!(r#"proxywatch_node_ready{{instance="{SICK}"}}"#));
        let (code, body) = sick_agent.get("/readyz")?;
        if ready != Some(1.0) || code != 200 {
            return Err(format!("node_ready {ready:?}, /readyz {code} {body}"));
        }
        Ok(())
    });
    assert_eq!(stat_sum(&root, "drop"), drops_at_relief, "no drop after the relief");
    assert_eq!(
        prom.value(&format!(r#"proxywatch_conntrack_entries{{instance="{SICK}"}}"#)),
        Some(count_after as f64)
    );

    // ---- over the whole run, from Prometheus' own records
    let seconds = (unix_now() - t_start).ceil() as u64 + 1;
    let range = format!("{seconds}s");
    let both = |m: BTreeMap<String, f64>, what: &str| {
        let instances: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(instances, [HEALTHY, SICK], "{what}: {m:?}");
        m
    };
    let up_min = both(
        prom.by_instance(&format!(r#"min_over_time(up{{job="proxywatch"}}[{range}])"#)),
        "min up",
    );
    assert!(up_min.values().all(|&v| v == 1.0), "a scrape failed: min up {up_min:?}");
    let samples = both(
        prom.by_instance(&format!(r#"count_over_time(up{{job="proxywatch"}}[{range}])"#)),
        "up samples",
    );
    assert!(
        samples
            .values()
            .all(|&n| n >= (seconds / SCRAPE_INTERVAL_S) as f64 / 2.0),
        "scraped throughout {range}: {samples:?}"
    );
    let slowest = both(
        prom.by_instance(&format!(
            r#"max_over_time(scrape_duration_seconds{{job="proxywatch"}}[{range}])"#
        )),
        "scrape duration",
    );
    assert!(
        slowest.values().all(|&d| d < SCRAPE_TIMEOUT_S),
        "a scrape took the timeout ({SCRAPE_TIMEOUT_S} s): {slowest:?}"
    );
    // The record of the firing alerts, for the sick node.
    for a in ["ProxywatchConntrackTableFull", "ProxywatchConntrackDropping"] {
        let fired = prom.value(&format!(
            r#"max_over_time(ALERTS{{alertname="{a}",instance="{SICK}",alertstate="firing"}}[{range}])"#
        ));
        assert_eq!(fired, Some(1.0), "{a} in ALERTS");
    }
    // No false alarm: no alert ever fired for the healthy node...
    let healthy_fired = prom.query(&format!(
        r#"count_over_time(ALERTS{{instance="{HEALTHY}",alertstate="firing"}}[{range}])"#
    ));
    assert!(
        healthy_fired.is_empty(),
        "fired for the healthy node: {healthy_fired:?}"
    );
    // ...and the only one even pending, if any, was the sizing alert (`for: 1h`),
    // true where this machine's nf_conntrack_max is below kube-proxy's recommended value.
    let pending: BTreeSet<String> = prom
        .query(&format!(
            r#"count by (alertname) (count_over_time(ALERTS{{instance="{HEALTHY}"}}[{range}]))"#
        ))
        .into_iter()
        .map(|(l, _)| l["alertname"].clone())
        .collect();
    assert!(
        pending.iter().all(|a| a == "ProxywatchConntrackMaxBelowRecommended"),
        "pending for the healthy node: {pending:?}"
    );
    assert_eq!(
        prom.value(&format!(
            r#"min_over_time(proxywatch_node_ready{{instance="{HEALTHY}"}}[{range}])"#
        )),
        Some(1.0),
        "the healthy node stayed ready"
    );
    assert_eq!(
        prom.value(&format!(
            r#"max_over_time(proxywatch_conntrack_stat_drop_total{{instance="{HEALTHY}"}}[{range}])"#
        )),
        Some(0.0),
        "the healthy node never dropped"
    );
    eprintln!("done over {range}: min up {up_min:?}, slowest scrape {slowest:?} s, healthy pending {pending:?}");

    // Clean shutdowns on SIGTERM.
    prometheus.stop_cleanly();
    sick_agent.stop_cleanly();
    healthy_agent.stop_cleanly();
}

// ---------------------------------------------------------------------------
// kube-proxy's latencies across nodes (issue 39).

/// kube-proxy's sync buckets (tests/fixtures/kube-proxy/SOURCES.md: 0.001 to 16.384 s, doubling).
const SYNC_LE: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
];

/// A kube-proxy /metrics body: `kubeproxy_sync_proxy_rules_duration_seconds` holding `obs`
/// (duration, count) pairs.
fn sync_histogram(obs: &[(f64, u64)]) -> String {
    let family = "kubeproxy_sync_proxy_rules_duration_seconds";
    let mut t = format!("# HELP {family} SyncProxyRules latency in seconds\n# TYPE {family} histogram\n");
    for le in SYNC_LE {
        let n: u64 = obs.iter().filter(|(v, _)| *v <= le).map(|(_, n)| n).sum();
        t += &format!("{family}_bucket{{le=\"{le}\"}} {n}\n");
    }
    let n: u64 = obs.iter().map(|(_, n)| n).sum();
    let sum: f64 = obs.iter().map(|(v, n)| v * *n as f64).sum();
    t += &format!("{family}_bucket{{le=\"+Inf\"}} {n}\n{family}_sum {sum}\n{family}_count {n}\n");
    t
}

/// The bucket of `v`: (lower, upper] among kube-proxy's sync buckets.
fn sync_bucket(v: f64) -> (f64, f64) {
    let i = SYNC_LE.iter().position(|le| v <= *le).expect("below 16.384 s");
    (if i == 0 { 0.0 } else { SYNC_LE[i - 1] }, SYNC_LE[i])
}

/// Two nodes, one whose kube-proxy syncs in 5 ms and one whose kube-proxy syncs in 1.5 s and
/// restarts halfway (its counters start again from 0). One real Prometheus scrapes both agents
/// and, for the truth, both kube-proxies. From the agents' re-exported histograms, the
/// dashboard's fleet p99 (`histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m])))`) lies in
/// the slow node's bucket and agrees with the same query on kube-proxy's own histograms within
/// one bucket; each node's p99 lies in its own bucket, the restart notwithstanding. Prometheus on
/// loopback, no namespace: needs `prometheus` only. About 25 s (scrapes every second).
#[test]
fn two_nodes_fleet_p99_from_reexported_kube_proxy_histograms_in_real_prometheus() {
    if !common::can_run(&["prometheus"]) {
        return;
    }
    use common::fake_kube_proxy::{FakeKubeProxy, Reply};
    let dir = tempfile::tempdir().unwrap();
    let (fast_kp, slow_kp) = (FakeKubeProxy::start(), FakeKubeProxy::start());
    let (mut fast, mut slow, mut slow_before_restart) = (0u64, 0u64, 0u64);
    let publish = |fast: u64, slow: u64| {
        fast_kp.set("/metrics", Reply::ok(sync_histogram(&[(0.005, fast)])));
        // The slow node also has a few fast syncs: its p99 is still in the slow bucket.
        slow_kp.set(
            "/metrics",
            Reply::ok(sync_histogram(&[(0.005, slow / 10), (1.5, slow)])),
        );
    };
    publish(0, 0);
    let root = common::fixtures().join("nodes/healthy-iptables");
    let empty = tempfile::tempdir().unwrap();
    let agent = |kp: &FakeKubeProxy, node: &str| {
        Serve::new()
            .env_clear()
            .env("PATH", empty.path())
            .args(["--node-name", node])
            .arg("--host-root")
            .arg(&root)
            .args([
                "--kube-proxy.metrics-url",
                &kp.url(),
                "--kube-proxy.healthz-url",
                &kp.url(),
            ])
            .args(["--kube-proxy.interval", "300ms"])
            .start()
    };
    let (fast_agent, slow_agent) = (agent(&fast_kp, "fast"), agent(&slow_kp, "slow"));
    let prom_port = common::free_port();
    let config = dir.path().join("prometheus.yml");
    let target = |job: &str, addr: String, node: &str| {
        format!("  - job_name: {job}\n    static_configs:\n      - targets: [\"{addr}\"]\n        labels: {{instance: {node}}}\n")
    };
    let kp_addr = |kp: &FakeKubeProxy| kp.url().trim_start_matches("http://").to_string();
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n{}{}\n{}{}",
            target("proxywatch", fast_agent.addr().to_string(), "fast"),
            target("proxywatch", slow_agent.addr().to_string(), "slow").replacen(
                "  - job_name: proxywatch\n    static_configs:\n",
                "",
                1
            ),
            target("kube-proxy", kp_addr(&fast_kp), "fast"),
            target("kube-proxy", kp_addr(&slow_kp), "slow").replacen(
                "  - job_name: kube-proxy\n    static_configs:\n",
                "",
                1
            ),
        ),
    )
    .unwrap();
    let log = dir.path().join("prometheus.log");
    let prometheus = Process::spawn(
        "prometheus",
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}")),
        &log,
    );
    let prom: std::net::SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();
    let query = |q: &str| -> Result<Series, String> {
        let (code, body) = common::http_get(prom, &format!("/api/v1/query?query={}", percent_encode(q)))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
        let result = v["data"]["result"].as_array().ok_or_else(|| format!("{q}: {body}"))?;
        Ok(result
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (labels, s["value"][1].as_str().unwrap().parse::<f64>().unwrap())
            })
            .collect())
    };
    wait_for("both agents and kube-proxies scraped", START_DEADLINE, || {
        prometheus.assert_running();
        let up = query("sum(up)")?;
        (up.first().map(|x| x.1) == Some(4.0))
            .then_some(())
            .ok_or(format!("{up:?}"))
    });
    // 20 s of syncs, every 200 ms: 40 fast ones on the fast node; 2 slow ones on the slow node
    // (and a fast one every 5 ticks), whose kube-proxy restarts halfway.
    for tick in 0..100 {
        fast += 40;
        slow += 2;
        if tick == 50 {
            slow_before_restart = slow;
            slow = 2;
        }
        publish(fast, slow);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(slow_before_restart > 0);
    prometheus.assert_running();
    let fleet = |expr: String| -> f64 {
        let r = query(&expr).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.len(), 1, "{expr}: {r:?}");
        r[0].1
    };
    let agents_fleet = fleet(dashboard_query("kube-proxy rule sync p99 across nodes", "A"));
    let worst = fleet(dashboard_query("kube-proxy rule sync p99 across nodes", "B"));
    let direct_fleet = fleet(
        "histogram_quantile(0.99, sum by (le) (rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{job=\"kube-proxy\"}[5m])))"
            .to_string(),
    );
    let per_node: BTreeMap<String, f64> = query(&dashboard_query("kube-proxy rule sync p99: top 10 nodes", "A"))
        .unwrap()
        .into_iter()
        .map(|(l, v)| (l["instance"].clone(), v))
        .collect();
    eprintln!("fleet p99 {agents_fleet} (kube-proxy's own: {direct_fleet}), worst node {worst}, per node {per_node:?}");
    let slow_bucket = sync_bucket(1.5);
    let within = |v: f64, (lo, hi): (f64, f64)| v > lo && v <= hi;
    assert!(within(per_node["fast"], sync_bucket(0.005)), "{per_node:?}");
    assert!(within(per_node["slow"], slow_bucket), "{per_node:?}");
    assert!(within(agents_fleet, slow_bucket), "fleet p99 {agents_fleet}");
    assert!(within(worst, slow_bucket), "worst node {worst}");
    assert!(
        (agents_fleet - direct_fleet).abs() <= slow_bucket.1 - slow_bucket.0,
        "fleet p99 from the agents {agents_fleet}, from kube-proxy {direct_fleet}"
    );
    // The re-exported histogram never went down across the restart; kube-proxy's own did.
    let resets = |job: &str| {
        fleet(format!(
            "resets(kubeproxy_sync_proxy_rules_duration_seconds_count{{job=\"{job}\",instance=\"slow\"}}[5m]) or \
             resets(proxywatch_kube_proxy_sync_latency_seconds_count{{job=\"{job}\",instance=\"slow\"}}[5m])"
        ))
    };
    assert_eq!(resets("proxywatch"), 0.0);
    assert_eq!(resets("kube-proxy"), 1.0);
    // The agent's own window is still served, for its verdict.
    let m = slow_agent.get("/metrics").unwrap().1;
    assert!(m.contains("proxywatch_kube_proxy_sync_duration_seconds_count"), "{m}");
    prometheus.stop_cleanly();
}
