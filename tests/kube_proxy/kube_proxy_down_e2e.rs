//! End to end (issue #23): kube-proxy dies on a node whose data plane holds its rules, and the
//! agent says so, everywhere alike. In a network namespace the test creates, with kube-proxy's
//! iptables-mode rules (50 services, tests/tools/gen_kube_rules.py, loaded with the real
//! `iptables-nft-restore`) and a stand-in kube-proxy on loopback (tests/common/fake_kube_proxy.rs,
//! real captures):
//!
//! - a restart gap shorter than `--kube-proxy.down-grace` is not down (info at most);
//! - killed, within the grace plus one probe interval `/findings` has the critical
//!   `kube_proxy_down`, `/metrics` shows `proxywatch_kube_proxy_up 0` and
//!   `proxywatch_node_ready 0`, `check` exits 2 with it, and a real Prometheus evaluating the
//!   shipped rules (manifests/prometheusrule.yaml) fires ProxywatchKubeProxyDown with the agent's
//!   severity;
//! - restarted, everything resolves; a `check` started while it is gone and ended by its return
//!   within the grace does not call it down;
//! - the same namespace without kube-proxy's state and without a declared mode: no finding;
//!   with `--kube-proxy.mode iptables` declared: kube_proxy_down.
//!
//! Needs root, `ip`, `iptables-nft-restore`, `nft`, `prometheus` and `python3` with PyYAML.
//! About 2 minutes: ProxywatchKubeProxyDown has `for: 1m`, the production value. Logs in
//! `target/e2e-logs/kube_proxy_down_e2e/`.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::fake_kube_proxy::FakeKubeProxy;
use common::{Agent, Netns, Process, Serve};
use serde_json::Value;

const NODE: &str = "pwt-kp";
const AGENT: &str = "127.0.0.1:9877";
const PROMETHEUS: &str = "127.0.0.1:9090";
/// The agent's grace and kube-proxy interval in this test (production: 30 s and 15 s).
const GRACE_S: u64 = 5;
const INTERVAL_S: u64 = 1;
/// The agent and `check` see only their own processes (a PID namespace with its own /proc):
/// other tests on this machine run stand-ins named kube-proxy, which would count as kube-proxy
/// here. A node's agent sees the node's, which is what this one's /proc shows: nothing of
/// kube-proxy but what the test runs.
const OWN_PIDS: &[&str] = &["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"];

fn log_dir() -> PathBuf {
    log_dir_of("kube_proxy_down_e2e")
}

fn log_dir_of(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let dir = target.join("e2e-logs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' API inside the namespace: `/api/v1/alerts` as (alertname, severity) -> state.
fn alerts(ns: &Netns) -> Result<BTreeMap<(String, String), String>, String> {
    let (code, body) = common::http_get_in(ns, PROMETHEUS.parse().unwrap(), "/api/v1/alerts")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
    Ok(v["data"]["alerts"]
        .as_array()
        .ok_or(format!("no alerts in {body}"))?
        .iter()
        .map(|a| {
            let l = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
            (
                (l("alertname"), l("severity")),
                a["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

fn query(ns: &Netns, q: &str) -> Result<Vec<Value>, String> {
    let path = format!("/api/v1/query?query={}", percent_encode(q));
    let (code, body) = common::http_get_in(ns, PROMETHEUS.parse().unwrap(), &path)?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The agent's active findings: id -> severity.
fn findings(agent: &Agent) -> BTreeMap<String, String> {
    let v: Value = serde_json::from_str(&agent.get_ok("/findings")).unwrap();
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

fn metric(agent: &Agent, series: &str) -> Option<f64> {
    common::series(&agent.get_ok("/metrics"), series)
}

fn kube_proxy_flags(port: u16, grace: &str) -> Vec<String> {
    let url = format!("http://127.0.0.1:{port}");
    [
        "--kube-proxy.metrics-url",
        &url,
        "--kube-proxy.healthz-url",
        &url,
        "--kube-proxy.interval",
        &format!("{INTERVAL_S}s"),
        "--kube-proxy.down-grace",
        grace,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `proxywatch check --format json` in `ns`: the document and the exit code.
fn check(ns: &Netns, extra: &[String]) -> (Value, i32) {
    check_in(&ns.name, extra)
}

/// The same by the namespace's name (from another thread).
fn check_in(ns: &str, extra: &[String]) -> (Value, i32) {
    let run = common::Check::new()
        .in_netns_named(ns)
        .wrap(OWN_PIDS)
        .args(["--node-name", NODE])
        .args(extra)
        .run();
    (run.doc, run.code)
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
}

fn prometheus_config(rules: &Path) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: proxywatch\n    static_configs:\n      - targets: [\"{AGENT}\"]\n        labels:\n          instance: {NODE}\n",
        rules.display()
    )
}

#[test]
fn dead_kube_proxy_is_critical_everywhere_and_resolves_on_restart() {
    if !common::can_run(&["ip", "iptables-nft-restore", "nft", "prometheus", "python3", "unshare"]) {
        return;
    }
    let dir = log_dir();
    let ns = Netns::new("kpdown");
    ns.exec_ok("ip", &["link", "set", "lo", "up"]);
    // A node forwards; a fresh namespace does not (that would be a critical finding of its own).
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    let (rules, expected) = common::generate_kube_rules(&dir, 50, 2, &[]);
    let out = ns
        .command("iptables-nft-restore", &[])
        .stdin(std::fs::File::open(&rules).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        expected["proxy_canary"], true,
        "the generator writes kube-proxy's canary"
    );

    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    let port = kp.port();
    let agent = Serve::new()
        .in_netns(&ns)
        .wrap(OWN_PIDS)
        .listen(AGENT)
        .args(["--node-name", NODE, "--iptables.interval", "1s"])
        .args(kube_proxy_flags(port, &format!("{GRACE_S}s")))
        .log(dir.join("agent.log"))
        .start();
    let extract = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests/extract_rules.py");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/prometheusrule.yaml");
    let rules_file = dir.join("proxywatch-rules.yaml");
    common::run(
        "python3",
        &[
            extract.to_str().unwrap(),
            manifest.to_str().unwrap(),
            rules_file.to_str().unwrap(),
        ],
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, prometheus_config(&rules_file)).unwrap();
    let tsdb = tempfile::tempdir().unwrap();
    let prometheus = Process::spawn(
        "prometheus",
        &mut ns.command(
            "prometheus",
            &[
                &format!("--config.file={}", config.display()),
                &format!("--storage.tsdb.path={}", tsdb.path().display()),
                &format!("--web.listen-address={PROMETHEUS}"),
            ],
        ),
        &dir.join("prometheus.log"),
    );

    // kube-proxy answers: up 1, no kube_proxy_down, the node ready; Prometheus scrapes it.
    common::poll("kube-proxy seen and the node ready", Duration::from_secs(30), || {
        let f = findings(&agent);
        match (
            metric(&agent, "proxywatch_kube_proxy_up"),
            metric(&agent, "proxywatch_node_ready"),
        ) {
            (Some(1.0), Some(1.0)) if !f.contains_key("kube_proxy_down") => Ok(()),
            other => Err(format!("{other:?} {f:?}")),
        }
    });
    common::poll("Prometheus scrapes the agent", Duration::from_secs(30), || {
        prometheus.assert_running();
        let up = query(&ns, r#"up{job="proxywatch"}"#)?;
        match up.first().map(|s| s["value"][1].clone()) {
            Some(v) if v == "1" => Ok(()),
            other => Err(format!("up: {other:?}")),
        }
    });
    assert_eq!(
        metric(&agent, "proxywatch_finding_severity{id=\"kube_proxy_down\"}"),
        Some(0.0)
    );

    // A restart shorter than the grace: gone for 2 s (two probe runs), then back on its port.
    drop(kp);
    let gap = Instant::now();
    let mut worst = String::new();
    while gap.elapsed() < Duration::from_secs(2) {
        if let Some(s) = findings(&agent).get("kube_proxy_down") {
            worst = worst.max(s.clone());
            assert_ne!(s, "critical", "a 2 s gap is not down (grace {GRACE_S} s)");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let kp = FakeKubeProxy::start_at(Some(&ns.name), port);
    common::poll(
        "back after the short gap",
        Duration::from_secs(10),
        || match findings(&agent).get("kube_proxy_down") {
            None => Ok(()),
            Some(s) => Err(s.clone()),
        },
    );
    eprintln!("during the 2 s gap kube_proxy_down was at most {worst:?} (info expected)");

    // Killed: critical within the grace plus one interval (and some slack for the probe's run).
    drop(kp);
    let killed = Instant::now();
    let deadline = Duration::from_secs(GRACE_S + INTERVAL_S + 3);
    common::poll("kube_proxy_down critical", deadline, || {
        match findings(&agent).get("kube_proxy_down").map(String::as_str) {
            Some("critical") => Ok(()),
            other => {
                let doc = agent.snapshot()?;
                Err(format!(
                    "{other:?}; probe {}; presence {}; proxy_mode {}; facts {}",
                    doc["probes"]["kube_proxy"],
                    doc["derived"]["kube_proxy_presence"],
                    doc["proxy_mode"],
                    doc["facts"]["kube_proxy"]
                ))
            }
        }
    });
    eprintln!(
        "kube_proxy_down critical {:.1} s after the kill (grace {GRACE_S} s, interval {INTERVAL_S} s)",
        killed.elapsed().as_secs_f64()
    );
    let doc: Value = serde_json::from_str(&agent.get_ok("/findings")).unwrap();
    let f = doc
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "kube_proxy_down")
        .unwrap();
    let why = f["evidence"]["expected_because"].as_array().unwrap();
    assert!(
        why.iter().any(|w| w.as_str().unwrap().contains("KUBE-PROXY-CANARY")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|w| w.as_str().unwrap().starts_with("this agent saw kube-proxy")),
        "{why:?}"
    );
    assert_eq!(
        f["evidence"]["services_programmed"]["iptables nft ipv4 KUBE-SVC chains"], expected["kube"]["svc"],
        "{f:#}"
    );
    assert!(
        f["evidence"]["kube_proxy_last_sync_timestamp_seconds"].is_number(),
        "{f:#}"
    );
    assert_eq!(metric(&agent, "proxywatch_kube_proxy_up"), Some(0.0));
    assert_eq!(metric(&agent, "proxywatch_node_ready"), Some(0.0));
    assert_eq!(
        metric(&agent, "proxywatch_finding_severity{id=\"kube_proxy_down\"}"),
        Some(3.0)
    );
    let (code, _) = agent.get("/readyz").unwrap();
    assert_eq!(code, 503);

    // `check`, a fresh process without history: the canary is evidence enough; it re-reads
    // kube-proxy until the grace is over, then exits 2.
    let started = Instant::now();
    let (doc, code) = check(&ns, &kube_proxy_flags(port, &format!("{GRACE_S}s")));
    assert_eq!(code, 2, "{:#}", doc["findings"]);
    let f = finding(&doc, "kube_proxy_down").unwrap_or_else(|| panic!("{:#}", doc["findings"]));
    assert_eq!(f["severity"], "critical");
    assert!(
        started.elapsed() >= Duration::from_secs(GRACE_S),
        "check waited the grace"
    );

    // Prometheus with the shipped rules: ProxywatchKubeProxyDown fires (for: 1m), critical as
    // the agent rates the finding.
    common::poll("ProxywatchKubeProxyDown firing", Duration::from_secs(120), || {
        prometheus.assert_running();
        let a = alerts(&ns)?;
        match a
            .get(&("ProxywatchKubeProxyDown".into(), "critical".into()))
            .map(String::as_str)
        {
            Some("firing") => Ok(()),
            other => Err(format!("{other:?} in {a:?}")),
        }
    });
    let firing = alerts(&ns).unwrap();
    assert!(
        !firing
            .keys()
            .any(|(n, s)| n == "ProxywatchKubeProxyDown" && s != "critical"),
        "{firing:?}"
    );

    // Restarted: resolved everywhere.
    let kp = FakeKubeProxy::start_at(Some(&ns.name), port);
    common::poll("kube-proxy back", Duration::from_secs(10), || {
        match (
            metric(&agent, "proxywatch_kube_proxy_up"),
            findings(&agent).get("kube_proxy_down"),
        ) {
            (Some(1.0), None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(metric(&agent, "proxywatch_node_ready"), Some(1.0));
    common::poll("ProxywatchKubeProxyDown resolved", Duration::from_secs(30), || {
        let a = alerts(&ns)?;
        if a.keys().any(|(n, _)| n == "ProxywatchKubeProxyDown") {
            return Err(format!("{a:?}"));
        }
        Ok(())
    });
    // `check` during a restart: it waits, kube-proxy comes back within the grace, not down.
    drop(kp);
    let (ns_name, flags) = (ns.name.clone(), kube_proxy_flags(port, &format!("{GRACE_S}s")));
    let during = std::thread::spawn(move || check_in(&ns_name, &flags));
    std::thread::sleep(Duration::from_secs(2));
    let kp = FakeKubeProxy::start_at(Some(&ns.name), port);
    let (doc, _) = during.join().unwrap();
    assert!(
        finding(&doc, "kube_proxy_down").is_none_or(|f| f["severity"] != "critical"),
        "{:#}",
        doc["findings"]
    );
    assert_eq!(doc["probes"]["kube_proxy"]["status"], "ok", "read again once back");
    drop(kp);
    // unshare waits for the agent and ignores SIGTERM: the agent (its child) gets it, and
    // unshare exits with it.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", agent.pid())).unwrap();
    for pid in children.split_whitespace() {
        let pid = nix::unistd::Pid::from_raw(pid.parse().unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }
    agent.stop();
    prometheus.stop();

    // The same namespace without kube-proxy's state, nothing declared: absence stays absent.
    for table in ["nat", "filter", "mangle"] {
        ns.exec_ok("nft", &["delete", "table", "ip", table]);
    }
    let mut no_wait = kube_proxy_flags(port, "0s");
    let (doc, code) = check(&ns, &no_wait);
    assert!(finding(&doc, "kube_proxy_down").is_none(), "{:#}", doc["findings"]);
    assert!(code < 2, "{:#}", doc["findings"]);
    // ...but a declared mode says kube-proxy belongs here.
    no_wait.extend(["--kube-proxy.mode".to_string(), "iptables".to_string()]);
    let (doc, code) = check(&ns, &no_wait);
    let f = finding(&doc, "kube_proxy_down").unwrap_or_else(|| panic!("{:#}", doc["findings"]));
    assert_eq!((f["severity"].as_str(), code), (Some("critical"), 2));
    assert_eq!(
        f["evidence"]["expected_because"],
        serde_json::json!(["--kube-proxy.mode iptables is declared"])
    );
}

/// `check` on a node with kube-proxy's canary chain and no kube-proxy: before it waits out the
/// grace it says so on stderr, first thing (what it waits for, how long, the flag); with the grace
/// at 0s it does not wait. Needs root, `ip`, `iptables-nft-restore` and `unshare`; seconds.
#[test]
fn check_says_at_once_that_it_waits_for_the_down_grace() {
    use std::io::BufRead;
    if !common::can_run(&["ip", "iptables-nft-restore", "unshare"]) {
        return;
    }
    let ns = Netns::new("kpwait");
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    ns.exec_input(
        "iptables-nft-restore",
        &[],
        "*nat\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n",
    );
    // Nothing listens there: kube-proxy is gone.
    let port = common::free_port();
    let run = |grace: &str| {
        let started = Instant::now();
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .args(OWN_PIDS)
            .arg(common::binary())
            .args(["check", "--node-name", NODE])
            .args(kube_proxy_flags(port, grace))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        let latency = started.elapsed();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        let code = child.wait().unwrap().code();
        (first, latency, rest, code, started.elapsed())
    };
    let (first, latency, rest, code, total) = run("3s");
    eprintln!("grace 3s: first stderr line after {latency:?}, exit after {total:?}: {first}");
    for part in [
        "KUBE-PROXY-CANARY",
        "waiting up to 3 seconds",
        "--kube-proxy.down-grace 3s",
        "--kube-proxy.down-grace 0s does not wait",
    ] {
        assert!(
            first.contains(part),
            "{part:?} not in the first stderr line: {first}{rest}"
        );
    }
    assert_eq!(code, Some(2), "kube_proxy_down is critical once the grace is over");
    let (first, latency, _, code, _) = run("0s");
    eprintln!("grace 0s: exit after {latency:?}");
    assert!(!first.contains("waiting"), "no grace, no wait: {first}");
    assert_eq!(code, Some(2));
}

/// kube-proxy SIGKILLed, seen at its instant (issue #36): a stand-in kube-proxy process (`sleep`
/// under the name `pwt-kpx`, `--kube-proxy.process-name`) beside the stand-in's ports, the
/// kube_proxy probe every 60 s. Killed: `kube_proxy_down`'s evidence gives the exit time the
/// agent's pidfd saw (within 100 ms of the kill's, as both recorded them), the absence starts
/// there, and the finding turns critical once exit + grace is over: after it, never before,
/// and long before the probe's next 60 s run (the exit woke the probe, the grace's end woke it
/// again). The test reaps its own stand-in; the agent waits on nothing it did not start.
/// Needs root, `ip`, `iptables-nft-restore`, `sleep`; about 5 s.
#[test]
fn a_killed_kube_proxy_is_seen_at_its_exit_and_down_at_exit_plus_grace() {
    if !common::can_run(&["ip", "iptables-nft-restore", "sleep"]) {
        return;
    }
    // Its own directory: log_dir() of a test running beside it empties the shared one.
    let dir = log_dir_of("kube_proxy_down_e2e_exit");
    let ns = Netns::new("kpexit");
    ns.exec_ok("ip", &["link", "set", "lo", "up"]);
    ns.exec_ok("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    ns.exec_input(
        "iptables-nft-restore",
        &[],
        "*nat\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n",
    );
    const NAME: &str = "pwt-kpx";
    const GRACE: f64 = 2.0;
    let standin = dir.join(NAME);
    let _ = std::fs::remove_file(&standin);
    std::os::unix::fs::symlink(common::which("sleep").unwrap(), &standin).unwrap();
    let child = std::process::Command::new(&standin)
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let standin_pid = child.id();
    let standin = Process::new("stand-in kube-proxy", child, None);
    // Its ports: the fake's, without a start time in /metrics (the only candidate is kube-proxy).
    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    let scrape: String = common::fake_kube_proxy::kube_proxy_fixture(common::fake_kube_proxy::METRICS_FIXTURE)
        .lines()
        .filter(|l| !l.starts_with("process_start_time_seconds"))
        .map(|l| format!("{l}\n"))
        .collect();
    kp.set("/metrics", common::fake_kube_proxy::Reply::ok(scrape));
    let url = format!("http://127.0.0.1:{}", kp.port());
    let agent = Serve::new()
        .in_netns(&ns)
        .listen(AGENT)
        .args(["--node-name", NODE, "--kube-proxy.process-name", NAME])
        .args(["--kube-proxy.metrics-url", &url, "--kube-proxy.healthz-url", &url])
        .args(["--kube-proxy.interval", "60s", "--kube-proxy.down-grace", "2s"])
        .log(dir.join("agent.log"))
        .start();
    common::poll("the stand-in found as kube-proxy", Duration::from_secs(30), || {
        let s = agent.snapshot()?;
        let pid = s["facts"]["kube_proxy"]["process"]["pid"].as_u64();
        (pid == Some(u64::from(standin_pid)))
            .then_some(())
            .ok_or(format!("process {pid:?}: {}", s["facts"]["kube_proxy"]))
    });
    // The pidfd is opened as the probe's report reaches the watch: give it that moment.
    std::thread::sleep(Duration::from_millis(300));

    drop(kp);
    let killed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(standin_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = standin.terminate(Duration::from_secs(5));
    assert!(matches!(status, Some((_, true))), "SIGKILLed: {status:?}");

    let f = common::poll("kube_proxy_down critical", Duration::from_secs(30), || {
        let doc: Value = serde_json::from_str(&agent.get_ok("/findings")).map_err(|e| e.to_string())?;
        let f = doc
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "kube_proxy_down")
            .cloned();
        match f {
            Some(f) if f["severity"] == "critical" => Ok(f),
            other => Err(format!("{other:?}")),
        }
    });
    let ev = &f["evidence"];
    let exited = ev["exited_timestamp_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no exit time: {f:#}"));
    eprintln!("exit seen {:.1} ms after the kill", (exited - killed) * 1000.0);
    assert!(
        exited >= killed && exited - killed <= 0.1,
        "exit time {exited} against the kill's {killed}: {f:#}"
    );
    assert_eq!(ev["exited_pid"], u64::from(standin_pid), "{f:#}");
    assert_eq!(
        ev["absent_since_timestamp_seconds"].as_f64(),
        Some(exited),
        "the absence starts at the exit"
    );
    let critical_since = metric(
        &agent,
        "proxywatch_finding_active_since_timestamp_seconds{id=\"kube_proxy_down\"}",
    )
    .unwrap();
    eprintln!(
        "critical {:.2} s after the exit (grace {GRACE} s)",
        critical_since - exited
    );
    assert!(
        critical_since >= exited + GRACE,
        "critical at {critical_since}, before exit + grace {}",
        exited + GRACE
    );
    assert!(
        critical_since < exited + 60.0,
        "critical at {critical_since}: at the probe's next run, not at exit + grace"
    );
    agent.stop();
}
