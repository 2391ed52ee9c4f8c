//! kube-proxy's side of the node, hostile, through the real binary (issue 16):
//!
//! 1. A fake kube-proxy on loopback whose `/metrics` is built to exhaust the agent: one 16 MiB
//!    line of 1.5 M labels, 16 MiB of distinct families, huge label values. The agent's own
//!    `/metrics` must keep answering, the kube-proxy probe must fail within its deadline with an
//!    error under 1 KiB, and the agent's peak RSS (VmHWM) must stay under 64 MiB.
//! 2. Bodies over the per-endpoint caps with the default flags.
//! 3. Processes named `kube-proxy` that are not kube-proxy: one that serves nothing on a node
//!    without kube-proxy (no critical finding, `proxywatch_node_ready` 1), and two at once
//!    (ambiguous; the one whose start time agrees with `process_start_time_seconds` wins).
//!
//! The node is the `healthy-iptables` fixture; for 3 it is a copy of it whose `proc/<pid>` are
//! symlinks to the real processes the test starts (and `proc/stat` the real one, for their
//! start times), so the other probes see a healthy node whatever this machine is.
use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

const METRICS_FIXTURE: &str = "v1.21.1-iptables-kind-datadog-integrations-core.prom";
const HEALTHZ_FIXTURE: &str = "v1.30-kind-nodeEligible-raesene-2024-06-16.json";
/// The kube-proxy probe's deadline in these tests.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a poll waits for the agent to reach a state.
const DEADLINE: Duration = Duration::from_secs(40);
/// The bounds.
const MAX_ERROR_BYTES: usize = 1024;
const MAX_RSS_BYTES: u64 = 64 << 20;

fn fixture(name: &str) -> String {
    let p = common::fixtures().join("kube-proxy").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// healthy-iptables without its netlink recording: the tests' fake kube-proxy reports rules that
/// the recorded kernel (a namespace without rules) does not hold.
fn healthy_node() -> common::FilesOnlyNode {
    common::files_only_node("healthy-iptables")
}

// ---------------------------------------------------------------------------
// The fake kube-proxy: fixed bodies per path, one thread per connection.

type Routes = Arc<Mutex<HashMap<String, (u16, Arc<Vec<u8>>)>>>;

struct FakeKubeProxy {
    addr: SocketAddr,
    routes: Routes,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl FakeKubeProxy {
    fn start() -> FakeKubeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let routes: Routes = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (routes, stop) = (routes.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let routes = routes.clone();
                    std::thread::spawn(move || serve_one(conn, &routes));
                }
            })
        };
        let fake = FakeKubeProxy {
            addr,
            routes,
            stop,
            accept: Some(accept),
        };
        fake.set("/metrics", 200, fixture(METRICS_FIXTURE).into_bytes());
        fake.set("/proxyMode", 200, fixture("iptables.txt").into_bytes());
        fake.set("/healthz", 200, fixture(HEALTHZ_FIXTURE).into_bytes());
        fake
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, path: &str, status: u16, body: Vec<u8>) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, Arc::new(body)));
    }
}

impl Drop for FakeKubeProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve_one(mut conn: TcpStream, routes: &Routes) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
    let (status, body) = routes
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or_else(|| (404, Arc::new(b"404 page not found\n".to_vec())));
    let out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // Write errors are expected: the agent hangs up on bodies over its caps.
    if conn.write_all(out.as_bytes()).is_ok() {
        let _ = conn.write_all(&body);
    }
}

fn closed_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

// ---------------------------------------------------------------------------
// The agent.

/// `proxywatch serve` on `host_root`, kube-proxy at the given URLs, no command on PATH.
fn serve(host_root: &Path, metrics_url: &str, healthz_url: &str, extra: &[&str]) -> (common::Agent, tempfile::TempDir) {
    let empty = tempfile::tempdir().unwrap();
    let agent = common::Serve::new()
        .env_clear()
        .env("PATH", empty.path())
        .args(["--node-name", "fixture", "--host-root"])
        .arg(host_root)
        .args(["--kube-proxy.metrics-url", metrics_url])
        .args(["--kube-proxy.healthz-url", healthz_url])
        .args(extra)
        .no_wait()
        .start();
    (agent, empty)
}

/// Peak resident set size (VmHWM) of the agent, in bytes.
fn peak_rss(agent: &common::Agent) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid())).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kb * 1024
}

/// Stops the agent; nothing in its log may say it panicked.
fn stop(agent: common::Agent) {
    let log = agent.log();
    agent.stop();
    assert!(!log.contains("panicked"), "panic:\n{log}");
}

/// Calls `f` until it returns Ok, at most DEADLINE; panics with its last Err.
fn poll<T>(what: &str, f: impl FnMut() -> Result<T, String>) -> T {
    common::poll(what, DEADLINE, f)
}

fn findings(doc: &Value) -> &Vec<Value> {
    doc["findings"].as_array().expect("findings")
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    findings(doc).iter().find(|f| f["id"] == id)
}

fn critical_ids(doc: &Value) -> Vec<String> {
    findings(doc)
        .iter()
        .filter(|f| f["severity"] == "critical")
        .map(|f| f["id"].as_str().unwrap_or("").to_string())
        .collect()
}

/// GETs the agent's `/metrics` every 100 ms from another thread, recording the slowest answer
/// and every failure, until stopped.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<(Duration, Vec<String>, u32)>>,
}

impl Watcher {
    fn start(addr: SocketAddr) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut slowest, mut failures, mut answers) = (Duration::ZERO, Vec::new(), 0u32);
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    match common::http_get(addr, "/metrics") {
                        Ok((200, body)) if body.contains("proxywatch_node_ready") => answers += 1,
                        Ok((code, _)) => failures.push(format!("HTTP {code}")),
                        Err(e) => failures.push(e),
                    }
                    slowest = slowest.max(t.elapsed());
                    std::thread::sleep(Duration::from_millis(100));
                }
                (slowest, failures, answers)
            })
        };
        Watcher {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> (Duration, Vec<String>, u32) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------
// 1. Bodies built to exhaust the agent.

/// One line of `labels` distinct labels (`l000000=""`, 11 bytes each) on a family the agent keeps.
fn one_line_of_labels(labels: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(labels * 11 + 64);
    out.extend_from_slice(b"kubeproxy_sync_proxy_rules_iptables_total{");
    for i in 0..labels {
        if i > 0 {
            out.push(b',');
        }
        write!(out, "l{i:06x}=\"\"").unwrap();
    }
    out.extend_from_slice(b"} 1\n");
    out
}

/// `bytes` of one-sample families with distinct names.
fn distinct_families(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 64);
    let mut i = 0u64;
    while out.len() < bytes {
        writeln!(out, "hostile_family_{i:010} 1").unwrap();
        i += 1;
    }
    out
}

/// `bytes` of samples the agent keeps whose label values are 32 KiB each: a `git_version`,
/// then one `table` per line.
fn huge_label_values(bytes: usize) -> Vec<u8> {
    let value = "x".repeat(32 << 10);
    let mut out = Vec::with_capacity(bytes + (64 << 10));
    writeln!(out, "# TYPE kubernetes_build_info gauge").unwrap();
    writeln!(out, "kubernetes_build_info{{git_version=\"v1.30.0-{value}\"}} 1").unwrap();
    writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge").unwrap();
    let mut i = 0;
    while out.len() < bytes {
        writeln!(
            out,
            "kubeproxy_sync_proxy_rules_iptables_total{{table=\"t{i}{value}\"}} 1"
        )
        .unwrap();
        i += 1;
    }
    out
}

/// What one hostile body did to a running agent.
struct Outcome {
    error: String,
    /// The longest failed run of the kube-proxy probe.
    duration: Duration,
    failed_runs: usize,
    slowest_metrics: Duration,
    metrics_failures: Vec<String>,
    metrics_answers: u32,
    peak_rss: u64,
}

/// Serves `body` as kube-proxy's `/metrics` (with a body cap raised to 32 MiB, so the parser
/// itself meets it) and watches the agent through three failed kube-proxy runs.
fn run_hostile(what: &str, body: Vec<u8>) -> Outcome {
    let size = body.len();
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", 200, body);
    let url = fake.url();
    // Kept for the agent's life: its root is deleted on drop.
    let root = healthy_node();
    let (agent, _path) = serve(
        &root,
        &url,
        &url,
        &[
            "--kube-proxy.interval",
            "1s",
            "--kube-proxy.timeout",
            "2s",
            "--kube-proxy.max-body-bytes",
            "33554432",
        ],
    );
    // /metrics answers 503 until every probe has run once; from then on it must always answer.
    poll("the agent's first publication", || match agent.get("/metrics")? {
        (200, _) => Ok(()),
        (code, _) => Err(format!("HTTP {code}")),
    });
    let watcher = Watcher::start(agent.addr());
    let mut runs: Vec<(f64, f64, String)> = Vec::new();
    let started = Instant::now();
    while runs.len() < 3 && started.elapsed() < DEADLINE {
        if let Ok(doc) = agent.snapshot() {
            let p = &doc["probes"]["kube_proxy"];
            let at = p["last_run_timestamp_seconds"].as_f64().unwrap_or(0.0);
            if p["status"] == "failed" && runs.last().is_none_or(|r| r.0 != at) {
                runs.push((
                    at,
                    p["duration_seconds"].as_f64().unwrap_or(f64::MAX),
                    p["error"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (slowest_metrics, metrics_failures, metrics_answers) = watcher.finish();
    let outcome = Outcome {
        error: runs.last().map(|r| r.2.clone()).unwrap_or_default(),
        duration: Duration::from_secs_f64(runs.iter().map(|r| r.1).fold(0.0, f64::max).min(1e6)),
        failed_runs: runs.len(),
        slowest_metrics,
        metrics_failures,
        metrics_answers,
        peak_rss: peak_rss(&agent),
    };
    eprintln!(
        "{what} ({size} bytes): {} failed kube-proxy runs, longest {:?}, error {} bytes: {:?}; \
         agent /metrics answered {} times, slowest {:?}, {} failures; peak RSS {:.1} MiB",
        outcome.failed_runs,
        outcome.duration,
        outcome.error.len(),
        outcome.error,
        outcome.metrics_answers,
        outcome.slowest_metrics,
        outcome.metrics_failures.len(),
        outcome.peak_rss as f64 / (1 << 20) as f64
    );
    stop(agent);
    outcome
}

fn assert_bounded(what: &str, o: &Outcome) {
    assert_eq!(o.failed_runs, 3, "{what}: the kube-proxy probe did not fail 3 times");
    assert!(
        !o.error.is_empty() && o.error.len() < MAX_ERROR_BYTES,
        "{what}: error of {} bytes",
        o.error.len()
    );
    // The deadline, plus the scheduler's grace and a slow machine's margin.
    assert!(
        o.duration < TIMEOUT + Duration::from_millis(500),
        "{what}: a run took {:?}",
        o.duration
    );
    assert!(
        o.metrics_failures.is_empty() && o.metrics_answers >= 5,
        "{what}: the agent's /metrics failed: {:?} ({} answers)",
        o.metrics_failures,
        o.metrics_answers
    );
    assert!(
        o.slowest_metrics < Duration::from_secs(1),
        "{what}: the agent's /metrics took {:?}",
        o.slowest_metrics
    );
    assert!(
        o.peak_rss < MAX_RSS_BYTES,
        "{what}: peak RSS {:.1} MiB",
        o.peak_rss as f64 / (1 << 20) as f64
    );
}

#[test]
fn one_line_of_one_and_a_half_million_labels() {
    let body = one_line_of_labels(1_500_000);
    assert!(body.len() > 15 << 20 && body.len() < 17 << 20, "{}", body.len());
    let o = run_hostile("one line of 1.5 M labels", body);
    assert_bounded("one line of 1.5 M labels", &o);
}

#[test]
fn sixteen_mib_of_distinct_families() {
    let o = run_hostile("16 MiB of distinct families", distinct_families(16 << 20));
    assert_bounded("16 MiB of distinct families", &o);
}

#[test]
fn huge_label_values_on_kept_families() {
    let o = run_hostile("huge label values", huge_label_values(16 << 20));
    assert_bounded("huge label values", &o);
}

// ---------------------------------------------------------------------------
// 2. The default per-endpoint caps.

/// `proxywatch check --format json` on the healthy node against `url`.
fn check(host_root: &Path, metrics_url: &str, healthz_url: &str, extra: &[&str]) -> Value {
    common::Check::new()
        .env_clear()
        .args(["--node-name", "fixture"])
        .host_root(host_root)
        .args(["--kube-proxy.metrics-url", metrics_url])
        .args(["--kube-proxy.healthz-url", healthz_url])
        .args(extra)
        .run()
        .doc
}

#[test]
fn default_caps_per_endpoint() {
    // /metrics: 4 MiB by default; a 5 MiB body of comments fails the probe.
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", 200, "# padding\n".repeat(512 << 10).into_bytes());
    let doc = check(&healthy_node(), &fake.url(), &fake.url(), &[]);
    let p = &doc["probes"]["kube_proxy"];
    assert_eq!(p["status"], "failed", "{p:#}");
    assert_eq!(
        p["error"],
        format!("{}/metrics: body exceeds 4194304 bytes", fake.url()),
        "{p:#}"
    );

    // /proxyMode: 4 KiB. A mode word padded with 8 KiB of blanks fails the probe too.
    let fake = FakeKubeProxy::start();
    fake.set(
        "/proxyMode",
        200,
        format!("iptables{}", " ".repeat(8 << 10)).into_bytes(),
    );
    let doc = check(&healthy_node(), &fake.url(), &fake.url(), &[]);
    let p = &doc["probes"]["kube_proxy"];
    assert_eq!(p["status"], "failed", "{p:#}");
    assert_eq!(
        p["error"],
        format!("{}/proxyMode: body exceeds 4096 bytes", fake.url()),
        "{p:#}"
    );

    // /healthz: 64 KiB. A body over it is kube-proxy's health error, not the probe's.
    let fake = FakeKubeProxy::start();
    let healthz = fixture(HEALTHZ_FIXTURE);
    fake.set(
        "/healthz",
        200,
        format!("{healthz}{}", " ".repeat(64 << 10)).into_bytes(),
    );
    let doc = check(&healthy_node(), &fake.url(), &fake.url(), &[]);
    let kp = &doc["facts"]["kube_proxy"];
    assert_eq!(doc["probes"]["kube_proxy"]["status"], "ok");
    assert_eq!(
        kp["healthz"]["error"],
        format!("{}/healthz: body exceeds 65536 bytes", fake.url()),
        "{kp:#}"
    );
    assert_eq!(kp["metrics_up"], true);
    assert!(critical_ids(&doc).is_empty(), "{:#}", doc["findings"]);
}

// ---------------------------------------------------------------------------
// 3. Processes named kube-proxy that are not kube-proxy.

/// A copy of `/bin/sleep` named `kube-proxy` (comm and argv[0]), running `sleep 600`; killed and
/// reaped on drop.
struct Impostor {
    child: Child,
}

impl Impostor {
    fn start(binary: &Path) -> Impostor {
        for _ in 0..50 {
            match Command::new(binary)
                .arg("600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
            {
                Ok(child) => return Impostor { child },
                // ETXTBSY: another test thread forked while the copy was open for writing.
                Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => panic!("{}: {e}", binary.display()),
            }
        }
        panic!("{}: text file busy", binary.display());
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its start time as kube-proxy's process collector computes it: btime + starttime / ticks.
    fn start_time_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
        // Field 22 (starttime) is the 20th after the comm.
        let ticks: f64 = after_comm.split(' ').nth(19).unwrap().parse().unwrap();
        let btime: f64 = std::fs::read_to_string("/proc/stat")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // CLK_TCK: 100 on every Linux this runs on (the agent asks sysconf).
        btime + ticks / 100.0
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The healthy fixture node with this machine's `/proc/stat` and `proc/<pid>` linked to the
/// real processes `pids`.
fn node_with_processes(pids: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(&healthy_node(), dir.path());
    std::fs::copy("/proc/stat", dir.path().join("proc/stat")).unwrap();
    for pid in pids {
        std::os::unix::fs::symlink(format!("/proc/{pid}"), dir.path().join(format!("proc/{pid}"))).unwrap();
    }
    dir
}

/// A copy of /bin/sleep called kube-proxy, in its own directory.
fn impostor_binary() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("kube-proxy");
    std::fs::copy("/bin/sleep", &binary).expect("copy /bin/sleep");
    (dir, binary)
}

#[test]
fn a_process_named_kube_proxy_that_serves_nothing_is_not_critical() {
    // Processes named kube-proxy: no other test's agent reads the live /proc meanwhile.
    let _kube_proxy = common::kube_proxy_process_lock();
    let (_bin_dir, binary) = impostor_binary();
    let impostor = Impostor::start(&binary);
    let node = node_with_processes(&[impostor.pid()]);
    let closed = closed_url();
    let (agent, _path) = serve(node.path(), &closed, &closed, &["--kube-proxy.interval", "300ms"]);
    let doc = poll("the impostor seen", || {
        let d = agent.snapshot()?;
        let kp = &d["facts"]["kube_proxy"];
        (kp["process"]["pid"] == impostor.pid())
            .then_some(d.clone())
            .ok_or_else(|| format!("{:#}", d["probes"]["kube_proxy"]))
    });
    assert_eq!(doc["probes"]["kube_proxy"]["status"], "ok");
    assert!(critical_ids(&doc).is_empty(), "{:#}", doc["findings"]);
    let f = finding(&doc, "kube_proxy_unhealthy").expect("kube_proxy_unhealthy");
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert_eq!(doc["facts"]["kube_proxy"]["process"]["identity"], "unconfirmed");
    let (code, metrics) = agent.get("/metrics").unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        common::series(&metrics, "proxywatch_node_ready"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        common::series(&metrics, "proxywatch_finding_severity{id=\"kube_proxy_unhealthy\"}"),
        Some(2.0)
    );
    let (code, _) = agent.get("/readyz").unwrap();
    assert_eq!(code, 200, "/readyz");
    stop(agent);
}

#[test]
fn two_processes_named_kube_proxy_are_ambiguous_until_metrics_tell() {
    // Processes named kube-proxy: no other test's agent reads the live /proc meanwhile.
    let _kube_proxy = common::kube_proxy_process_lock();
    let (_bin_dir, binary) = impostor_binary();
    let older = Impostor::start(&binary);
    // Start times agree within 2 s at most: the second must start clearly later.
    std::thread::sleep(Duration::from_millis(2600));
    let newer = Impostor::start(&binary);
    let (older_pid, newer_pid) = (older.pid(), newer.pid());
    let node = node_with_processes(&[older_pid, newer_pid]);

    // Nothing answers: no process is taken for kube-proxy, a warning says why, nothing is critical.
    let closed = closed_url();
    let doc = check(node.path(), &closed, &closed, &[]);
    let kp = &doc["facts"]["kube_proxy"];
    assert_eq!(kp["process"], Value::Null, "{kp:#}");
    let pids: Vec<u64> = kp["process_candidates"]
        .as_array()
        .unwrap_or_else(|| panic!("{kp:#}"))
        .iter()
        .map(|c| c["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [u64::from(older_pid), u64::from(newer_pid)]);
    let f = finding(&doc, "kube_proxy_process_ambiguous").expect("ambiguous finding");
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert!(critical_ids(&doc).is_empty(), "{:#}", doc["findings"]);

    // kube-proxy's metrics name the newer one's start time: it is kube-proxy, not the
    // first by PID; the other is still worth a note.
    let fake = FakeKubeProxy::start();
    let metrics = fixture(METRICS_FIXTURE);
    let old_line = metrics
        .lines()
        .find(|l| l.starts_with("process_start_time_seconds "))
        .unwrap()
        .to_string();
    let start = newer.start_time_seconds();
    let served = metrics.replace(&old_line, &format!("process_start_time_seconds {start}"));
    fake.set("/metrics", 200, served.into_bytes());
    let doc = check(node.path(), &fake.url(), &fake.url(), &[]);
    let kp = &doc["facts"]["kube_proxy"];
    assert_eq!(kp["process"]["pid"], newer_pid, "{kp:#}");
    assert_eq!(kp["process"]["identity"], "confirmed", "{kp:#}");
    let f = finding(&doc, "kube_proxy_process_ambiguous").expect("ambiguous finding");
    assert_eq!(f["severity"], "info", "{f:#}");
    assert_eq!(f["evidence"]["pid"], newer_pid, "{f:#}");
    assert!(critical_ids(&doc).is_empty(), "{:#}", doc["findings"]);
    drop((older, newer));
}
