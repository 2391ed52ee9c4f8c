//! `proxywatch npd`, the node-problem-detector plugin: its exit codes and its one
//! line against a running agent and against agents that fail in every way, and
//! end to end under the real NPD (`../shared/tools/node-problem-detector`) with
//! the monitor config the overlay ships (manifests/overlays/npd/proxywatch-monitor.json).
use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Agent, Process, Serve};

/// A fixture node copied to a temporary host root, so the test can change it.
struct Node {
    dir: tempfile::TempDir,
    exec: PathBuf,
}

impl Node {
    fn copy(name: &str) -> Node {
        let dir = tempfile::Builder::new().prefix("pw-npd-").tempdir().unwrap();
        let from = common::fixtures().join("nodes").join(name);
        common::copy_tree(&from, dir.path());
        Node {
            exec: dir.path().join("exec"),
            dir,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Adds `n` to the `drop` counter of CPU 0 in the stat file (hex, the kernel's %08x, in place).
    fn add_drops(&self, n: u64) {
        let p = self.root().join("proc/net/stat/nf_conntrack");
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let col = lines[0]
            .split_whitespace()
            .position(|c| c == "drop")
            .expect("a drop column");
        let row = &lines[1];
        let fields: Vec<&str> = row.split_whitespace().collect();
        let mut at = 0;
        for f in &fields[..col] {
            at += row[at..].find(f).unwrap() + f.len();
        }
        let start = at + row[at..].find(fields[col]).unwrap();
        let value = u64::from_str_radix(fields[col], 16).unwrap() + n;
        let mut new = row.clone();
        new.replace_range(start..start + 8, &format!("{value:08x}"));
        lines[1] = new;
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    }

    fn set_conntrack_count(&self, n: u64) {
        let p = self.root().join("proc/sys/net/netfilter/nf_conntrack_count");
        std::fs::write(&p, format!("{n}\n")).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }

    /// The agent on this node, re-reading conntrack every second; drops count over 3 s.
    fn serve(&self) -> Agent {
        self.serve_with(Serve::new())
    }

    /// The same from a given `Serve` (a bearer token, ...).
    fn serve_with(&self, serve: Serve) -> Agent {
        serve
            .env_clear()
            .env("PATH", &self.exec)
            .args([
                "--node-name",
                "fixture",
                "--conntrack.interval",
                "1s",
                "--conntrack.window",
                "3s",
                "--kube-proxy.interval",
                "1s",
            ])
            .arg("--host-root")
            .arg(self.root())
            .args(common::NO_KUBE_PROXY)
            .start()
    }
}

struct Run {
    code: i32,
    stdout: String,
}

fn npd(args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = Command::new(common::binary())
        .env_clear()
        .envs(env.iter().copied())
        .arg("npd")
        .args(args)
        .output()
        .expect("run proxywatch npd");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
    };
    // What NPD relies on: one line, within its 80 bytes, whatever happened.
    assert_eq!(run.stdout.matches('\n').count(), 1, "one line: {:?}", run.stdout);
    assert!(run.stdout.ends_with('\n'));
    assert!(run.stdout.trim_end().len() <= 80, "over 80 bytes: {:?}", run.stdout);
    run
}

fn from(agent: &Agent) -> String {
    format!("--from=http://{}", agent.addr())
}

#[test]
fn verdict_from_a_running_agent_agrees_with_check() {
    let node = Node::copy("conntrack-near-full-drops");
    let agent = node.serve();
    let r = npd(&[&from(&agent)], &[]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (1, "critical: conntrack_table_fill 97.0%\n")
    );
    let r = npd(&[&from(&agent), "--area=conntrack"], &[]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    // Other areas: nothing at critical; kube-proxy is absent here, and absent is no problem.
    for area in ["kube-proxy", "rules", "kernel"] {
        let r = npd(&[&from(&agent), &format!("--area={area}")], &[]);
        assert_eq!(r.code, 0, "{area}: {}", r.stdout);
        assert!(r.stdout.starts_with("ok: nothing at critical or above"), "{}", r.stdout);
    }
    // The environment variable the overlay sets, as NPD passes it on.
    let url = format!("http://{}", agent.addr());
    let r = npd(&["--area=conntrack"], &[("PROXYWATCH_NPD_FROM", &url)]);
    assert_eq!(r.code, 1);
    // One finding, for an Event: the drops since boot did not rise, so not even a warning.
    let r = npd(&[&from(&agent), "--finding=conntrack_drops", "--severity=warning"], &[]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    // The same node read directly, as `check` does: the same verdict.
    let exec = node.exec.to_str().unwrap();
    let root = format!("--host-root={}", node.root().display());
    let mut direct = vec![root.as_str()];
    direct.extend(common::NO_KUBE_PROXY);
    let r = npd(&direct, &[("PATH", exec)]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (1, "critical: conntrack_table_fill 97.0%\n")
    );
    // One reading: the drops since boot are info, named with their number at --severity info.
    let mut one = direct.clone();
    one.extend(["--finding=conntrack_drops", "--severity=info"]);
    let r = npd(&one, &[("PATH", exec)]);
    assert_eq!((r.code, r.stdout.as_str()), (1, "info: conntrack_drops 1000\n"));
    let check = Command::new(common::binary())
        .env_clear()
        .env("PATH", exec)
        .args(["check", "--format=json", &root])
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2), "check says critical too");
    // Recovered: the agent's next conntrack reading.
    node.set_conntrack_count(1000);
    common::poll("npd ok after recovery", Duration::from_secs(20), || {
        let r = npd(&[&from(&agent)], &[]);
        (r.code == 0).then_some(()).ok_or(r.stdout)
    });
    // The agent's log: one line when the finding appeared (not one per conntrack run
    // since), one when it cleared.
    let cleared = |l: &str| l.contains("finding cleared after") && l.contains("conntrack_table_fill");
    let log = common::poll("the cleared line", Duration::from_secs(10), || {
        let log = agent.log();
        log.lines().any(cleared).then_some(log.clone()).ok_or(log)
    });
    let appeared: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("finding appeared: conntrack table 97.0% full"))
        .collect();
    assert_eq!(appeared.len(), 1, "{log}");
    assert!(
        appeared[0].contains("WARN") && appeared[0].contains("critical"),
        "{log}"
    );
    let line = log.lines().find(|l| cleared(l)).unwrap();
    assert!(line.contains("at critical: conntrack table 97.0% full"), "{log}");
    // A probe's outcome is logged when it changes: kube-proxy, absent on every run, once.
    let last_run = || -> f64 {
        let doc: serde_json::Value = serde_json::from_str(&agent.get_ok("/snapshot")).unwrap();
        doc["probes"]["kube_proxy"]["last_run_timestamp_seconds"]
            .as_f64()
            .unwrap()
    };
    let first = last_run();
    common::poll("three more kube_proxy runs", Duration::from_secs(20), || {
        let t = last_run();
        (t - first >= 2.5).then_some(()).ok_or(format!("{t}"))
    });
    let log = agent.log();
    let absent = log
        .lines()
        .filter(|l| l.contains("probe source absent") && l.contains("probe=kube_proxy"))
        .count();
    assert_eq!(absent, 1, "{log}");
    agent.stop_cleanly();
}

/// An HTTP answer with its length.
fn answer(status: &str, body: &str) -> Option<String> {
    Some(format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

/// Serves one connection one fixed answer (or none: `None` accepts and stays silent).
fn fake_agent(answer: Option<String>) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        // One connection per run of the plugin below.
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        match answer {
            Some(a) => {
                let _ = s.write_all(a.as_bytes());
            }
            None => std::thread::sleep(Duration::from_secs(2)),
        }
    });
    (url, h)
}

#[test]
fn an_agent_that_cannot_tell_is_unknown_never_ok() {
    // Nothing listening.
    let port = common::free_port();
    let r = npd(&[&format!("--from=http://127.0.0.1:{port}")], &[]);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stdout,
        format!("unknown: agent not answering: connection refused at 127.0.0.1:{port}\n")
    );
    // 503 (the agent before its first snapshot, or over its request cap).
    let (url, h) = fake_agent(answer("503 Service Unavailable", "no snapshot yet: probes running\n"));
    let r = npd(&[&format!("--from={url}")], &[]);
    h.join().unwrap();
    assert_eq!(r.code, 2);
    assert!(r.stdout.contains(": HTTP 503: no snapshot yet"), "{}", r.stdout);
    // Garbage with a 200.
    let (url, h) = fake_agent(answer("200 OK", "<html>hi</html>"));
    let r = npd(&[&format!("--from={url}")], &[]);
    h.join().unwrap();
    assert_eq!(r.code, 2);
    assert!(r.stdout.contains("not a /findings answer"), "{}", r.stdout);
    // Slower than the plugin's timeout (kept below NPD's rule timeout).
    let (url, h) = fake_agent(None);
    let r = npd(&[&format!("--from={url}"), "--timeout=300ms"], &[]);
    h.join().unwrap();
    assert_eq!(r.code, 2);
    assert!(r.stdout.contains("did not answer within 300ms"), "{}", r.stdout);
    // A finding id this binary does not know: unknown, not OK forever.
    let r = npd(&[&format!("--from={url}"), "--finding=conntrack_tabel_fill"], &[]);
    assert_eq!(r.code, 2);
    assert!(
        r.stdout.starts_with("unknown: invalid value 'conntrack_tabel_fill'"),
        "{}",
        r.stdout
    );
}

// --- under the real NPD ------------------------------------------------------------------------

fn npd_binary() -> Option<PathBuf> {
    let p = std::env::var_os("PROXYWATCH_NPD_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/node-problem-detector/node-problem-detector")
        });
    if p.is_file() {
        return Some(p);
    }
    let msg = format!("node-problem-detector not found at {}", p.display());
    assert!(!common::in_ci(), "{msg} (CI=true: not skipping)");
    eprintln!("SKIPPED: {msg}");
    None
}

/// The shipped monitor config with the plugin's path substituted (the test's binary), the
/// invoke interval shortened from 30 s to 1 s, so the test takes seconds, and metricsReporting
/// on, so that the test reads NPD's problem gauges (the DaemonSet runs no exporter); nothing else.
fn monitor_config(dir: &Path) -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/overlays/npd/proxywatch-monitor.json");
    let text = std::fs::read_to_string(&shipped).unwrap();
    assert!(text.contains("\"/opt/proxywatch/proxywatch\"") && text.contains("\"invoke_interval\": \"30s\""));
    assert!(text.contains("\"metricsReporting\": false"));
    let text = text
        .replace("/opt/proxywatch/proxywatch", common::binary().to_str().unwrap())
        .replace("\"invoke_interval\": \"30s\"", "\"invoke_interval\": \"1s\"")
        .replace("\"metricsReporting\": false", "\"metricsReporting\": true");
    let p = dir.join("proxywatch-monitor.json");
    std::fs::write(&p, text).unwrap();
    p
}

/// `problem_gauge{reason=R,type=T}` in NPD's /metrics, whatever the label order.
fn problem_gauge(metrics: &str, condition: &str, reason: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (series.starts_with("problem_gauge{")
            && series.contains(&format!("type=\"{condition}\""))
            && series.contains(&format!("reason=\"{reason}\"")))
        .then(|| value.parse().unwrap())
    })
}

/// The real NPD with the shipped monitor config, its plugin pointed at `agent` (plus `env`);
/// returns it, its Prometheus port and the directory of its config and log.
fn start_npd(bin: &Path, agent: &str, env: &[(&str, &str)]) -> (Process, u16, tempfile::TempDir) {
    let dir = tempfile::Builder::new().prefix("pw-npd-run-").tempdir().unwrap();
    let config = monitor_config(dir.path());
    let (health, prom) = (common::free_port(), common::free_port());
    let log = dir.path().join("npd.log");
    let npd = Process::spawn(
        "node-problem-detector",
        Command::new(bin)
            .env_clear()
            .env("PROXYWATCH_NPD_FROM", agent)
            .envs(env.iter().copied())
            .args([
                "--enable-k8s-exporter=false",
                "--hostname-override=fixture",
                "--address=127.0.0.1",
                &format!("--port={health}"),
                "--prometheus-address=127.0.0.1",
                &format!("--prometheus-port={prom}"),
            ])
            .arg(format!("--config.custom-plugin-monitor={}", config.display())),
        &log,
    );
    (npd, prom, dir)
}

#[test]
fn real_npd_sets_the_condition_true_then_false_then_unknown() {
    let Some(npd_bin) = npd_binary() else { return };
    let node = Node::copy("conntrack-near-full-drops");
    let agent = node.serve();
    true_false_unknown(&npd_bin, &node, agent, &[]);
}

/// An agent started with `--web.bearer-token-file` (no token, a wrong one: 401 for /findings),
/// and NPD's plugin given the token in a file (`--bearer-token-file`, by its environment
/// variable as a DaemonSet would set it): True, False and Unknown as without a token. Plain
/// HTTP on loopback, the path overlays/npd takes (NPD on the host network reading the agent's
/// 127.0.0.1 port, behind rbac-proxy too); no TLS client in the plugin.
#[test]
fn real_npd_through_the_bearer_token_path_sets_true_false_unknown() {
    let Some(npd_bin) = npd_binary() else { return };
    let node = Node::copy("conntrack-near-full-drops");
    let dir = tempfile::tempdir().unwrap();
    let (token, agent_token) = (dir.path().join("token"), dir.path().join("agent-token"));
    std::fs::write(&token, "s3cret-npd-token\n").unwrap();
    std::fs::write(&agent_token, "s3cret-npd-token\n").unwrap();
    let agent = node.serve_with(
        Serve::new()
            .bearer_token("s3cret-npd-token")
            .arg(format!("--web.bearer-token-file={}", agent_token.display())),
    );
    // Without the token, or with another one: the agent refuses, the plugin cannot tell.
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token").unwrap();
    for extra in [vec![], vec![format!("--bearer-token-file={}", wrong.display())]] {
        let mut args = vec![from(&agent)];
        args.extend(extra);
        let r = npd(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        assert_eq!(r.code, 2, "{}", r.stdout);
        assert!(
            r.stdout
                .starts_with(&format!("unknown: agent at {}: HTTP 401", agent.addr())),
            "{}",
            r.stdout
        );
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let r = npd(
        &[&from(&agent), &format!("--bearer-token-file={}", empty.display())],
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(r.stdout.contains("empty"), "{}", r.stdout);
    // kube-rbac-proxy's HTTPS port: refused with the way out, not a confusing error.
    let r = npd(&["--from=https://10.0.0.1:9443"], &[]);
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(r.stdout.contains("no TLS"), "{}", r.stdout);
    let token = token.to_str().unwrap().to_string();
    true_false_unknown(&npd_bin, &node, agent, &[("PROXYWATCH_NPD_BEARER_TOKEN_FILE", &token)]);
}

/// The real NPD's plugin reading `agent` on `node` (plus `env`): ConntrackProblem True, a
/// ConntrackDrops Event, False once the node recovers, Unknown once the agent stops.
fn true_false_unknown(npd_bin: &Path, node: &Node, agent: Agent, env: &[(&str, &str)]) {
    let (npd, prom, _dir) = start_npd(npd_bin, &format!("http://{}", agent.addr()), env);
    let prom_addr = std::net::SocketAddr::from(([127, 0, 0, 1], prom));
    let gauge = |condition: &str, reason: &str| -> Result<f64, String> {
        let (code, body) = common::http_get(prom_addr, "/metrics")?;
        if code != 200 {
            return Err(format!("NPD /metrics: HTTP {code}"));
        }
        problem_gauge(&body, condition, reason).ok_or_else(|| format!("no problem_gauge {condition}/{reason}"))
    };
    let wait = Duration::from_secs(60);

    // Critical conntrack: the condition goes True with proxywatch's line as its message.
    common::poll("ConntrackProblem True", wait, || {
        npd.assert_running();
        match gauge("ConntrackProblem", "ConntrackIsUnhealthy")? {
            1.0 => Ok(()),
            v => Err(format!("problem_gauge {v}")),
        }
    });
    let said = npd.log();
    assert!(
        said.contains(
            r#"Node condition ConntrackProblem is now: True, reason: ConntrackIsUnhealthy, message: "critical: conntrack_table_fill 97.0%""#
        ),
        "NPD's log:\n{said}"
    );
    // The other conditions stay False: nothing critical there.
    for (c, r) in [
        ("KubeProxyProblem", "KubeProxyIsHealthy"),
        ("ProxyRulesProblem", "ProxyRulesAreHealthy"),
        ("ProxyKernelProblem", "ProxyKernelIsConfigured"),
    ] {
        assert_eq!(gauge(c, r), Ok(0.0), "{c}");
    }

    // Packets dropped: an Event (a temporary rule), reason ConntrackDrops, counted by NPD.
    node.add_drops(50);
    common::poll("a ConntrackDrops Event", wait, || {
        let (_, body) = common::http_get(prom_addr, "/metrics")?;
        let counted = body.lines().any(|l| {
            l.starts_with("problem_counter{")
                && l.contains("reason=\"ConntrackDrops\"")
                && l.rsplit_once(' ')
                    .is_some_and(|(_, v)| v.parse::<f64>().is_ok_and(|v| v >= 1.0))
        });
        counted
            .then_some(())
            .ok_or_else(|| "problem_counter ConntrackDrops not yet 1".to_string())
    });
    let said = npd.log();
    assert!(
        said.contains("Reason:ConntrackDrops Message:critical: conntrack_drops 50"),
        "NPD's log:\n{said}"
    );

    // The node recovers: False, with the default reason.
    node.set_conntrack_count(1000);
    common::poll("ConntrackProblem False", wait, || {
        let log = npd.log();
        log.contains("Node condition ConntrackProblem is now: False, reason: ConntrackIsHealthy")
            .then_some(())
            .ok_or_else(|| "not yet False".to_string())
    });
    assert_eq!(gauge("ConntrackProblem", "ConntrackIsUnhealthy"), Ok(0.0));
    assert_eq!(gauge("ConntrackProblem", "ConntrackIsHealthy"), Ok(0.0));

    // The agent stops: Unknown, with the plugin's reason, never False.
    let addr = agent.addr();
    agent.stop_cleanly();
    common::poll("ConntrackProblem Unknown", wait, || {
        let log = npd.log();
        log.contains(&format!(
            r#"Node condition ConntrackProblem is now: Unknown, reason: ConntrackIsHealthy, message: "unknown: agent not answering: connection refused at {addr}""#
        ))
        .then_some(())
        .ok_or_else(|| "not yet Unknown".to_string())
    });
    npd.stop_cleanly();
}

#[test]
fn shipped_monitor_config_matches_the_plugin() {
    use clap::ValueEnum;
    use proxywatch::expose::npd::{area_of, reason, Area};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/overlays/npd/proxywatch-monitor.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let conditions: Vec<&str> = config["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    let mut covered = Vec::new();
    for rule in config["rules"].as_array().unwrap() {
        let args: Vec<&str> = rule["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[0], "npd", "{rule}");
        // Every rule's arguments parse as the plugin's flags.
        let mut argv = vec!["proxywatch"];
        argv.extend(&args);
        if let Err(e) = <proxywatch::config::Cli as clap::Parser>::try_parse_from(&argv) {
            panic!("{rule}: {e}");
        }
        let value = |flag: &str| args.iter().find_map(|a| a.strip_prefix(&format!("--{flag}=")));
        match rule["type"].as_str().unwrap() {
            "permanent" => {
                let area = Area::from_str(value("area").expect("a condition is an area"), false).unwrap();
                assert_eq!(rule["condition"], area.condition(), "{rule}");
                assert!(conditions.contains(&area.condition()), "{rule}: no default condition");
                assert_eq!(value("severity"), None, "conditions use the default, critical: {rule}");
                covered.push(area);
            }
            "temporary" => {
                let id = value("finding").expect("an Event is one finding");
                assert_eq!(rule["reason"], reason(id), "{rule}");
            }
            other => panic!("rule type {other}"),
        }
        // Below NPD's global timeout, and the plugin's own 3 s deadline below both.
        assert_eq!(rule["timeout"], "5s");
    }
    assert_eq!(config["pluginConfig"]["timeout"], "5s");
    assert_eq!(config["pluginConfig"]["max_output_length"], 80);
    // Every finding reaches a condition.
    for c in proxywatch::evaluate::CHECKS {
        if let Some(area) = area_of(c.id) {
            assert!(
                covered.contains(&area),
                "{} ({area:?}) is in no shipped condition",
                c.id
            );
        }
    }
    assert_eq!(covered.len(), conditions.len(), "one rule per condition");
}

/// An agent that accepts connections and never answers, slower than the plugin's
/// --timeout (3 s: the plugin says so, exit 2) or, when the plugin is given more, than
/// NPD's rule timeout (5 s: NPD kills it). Either way the condition goes Unknown, never False.
#[test]
fn real_npd_reports_a_silent_agent_unknown_whichever_timeout_cuts_first() {
    let Some(npd_bin) = npd_binary() else { return };
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s); // kept open, never read: the agent "hangs"
        }
    });
    let cases = [
        (
            "the plugin's 3 s",
            vec![],
            format!("message: \"unknown: agent at {addr} did not answer within 3s\""),
        ),
        (
            "NPD's 5 s",
            vec![("PROXYWATCH_NPD_TIMEOUT", "30s")],
            "message: \"Timeout when running plugin".to_string(),
        ),
    ];
    for (which, env, message) in cases {
        let (npd, _, _dir) = start_npd(&npd_bin, &format!("http://{addr}"), &env);
        let want = format!("Node condition ConntrackProblem is now: Unknown, reason: ConntrackIsHealthy, {message}");
        common::poll(which, Duration::from_secs(60), || {
            npd.assert_running();
            let log = npd.log();
            assert!(
                !log.contains("ConntrackProblem is now: False"),
                "{which}: went False:\n{log}"
            );
            log.contains(&want)
                .then_some(())
                .ok_or_else(|| format!("no {want:?} in:\n{log}"))
        });
        npd.stop_cleanly();
    }
}
