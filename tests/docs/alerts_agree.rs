//! The shipped alerts agree with the agent (issue #23): for states of the real binary (every
//! fixture node, modes declared where no kube-proxy answers, a stand-in kube-proxy syncing
//! slowly), its own `/metrics` is fed to promtool with manifests/prometheusrule.yaml, and the
//! alerts that fire after every `for:` are exactly those the agent's `/findings` call for:
//! each finding-backed alert at the finding's severity, with that severity as its label;
//! ProxywatchNodeNotReady when a finding is critical; ProxywatchProbeFailing per failed probe;
//! nothing for info or ok. `/findings` and `proxywatch_finding_severity` must agree too.
//!
//! Reached from the binary here: ProxywatchConntrackTableFilling and -Full,
//! -ConntrackMaxBelowRecommended, -SysctlMisconfigured (both severities), -IPVSModulesMissing,
//! -KubeProxyDown, -KubeProxySyncSlow and -NetworkProgrammingSlow (critical), -KubeProxySyncStale,
//! -KubeProxyRestarting, -KubeProxyModeMismatch, -ProxyModeLeftovers, -ProbeFailing,
//! -NodeNotReady. The others (conntrack counters and trends that need time, stale conntrack
//! entries, iptables rule-set sizes and backends) read the same `proxywatch_finding_severity`
//! series: tests/manifests/alerts_test.yaml tests their rules, and the end-to-end tests of their
//! findings the agent's side (tests/e2e/e2e_prometheus.rs fires ProxywatchConntrackDropping in a real
//! Prometheus).
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::fake_kube_proxy::{FakeKubeProxy, Reply};
use serde_json::Value;

/// One alerting rule of the manifest: name, expression, severity label.
#[derive(Debug)]
struct Rule {
    alert: String,
    expr: String,
    severity: String,
}

fn rules() -> Vec<Rule> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/prometheusrule.yaml")).unwrap();
    let mut out: Vec<Rule> = Vec::new();
    let mut in_expr = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("- alert: ") {
            out.push(Rule {
                alert: name.to_string(),
                expr: String::new(),
                severity: String::new(),
            });
            in_expr = false;
        } else if t == "expr: |" {
            in_expr = true;
        } else if in_expr && (t.starts_with("for:") || t.starts_with("labels:") || t.starts_with('#')) {
            in_expr = false;
        } else if in_expr {
            let r = out.last_mut().unwrap();
            r.expr.push_str(t);
            r.expr.push(' ');
        }
        if let Some(sev) = t.strip_prefix("severity: ") {
            if let Some(r) = out.last_mut() {
                r.severity = sev.trim_matches('"').to_string();
            }
        }
    }
    out
}

/// A rule that reads the agent's verdict: (id or id prefix for `=~"prefix.+"`, level).
fn finding_rule(r: &Rule) -> Option<(String, bool, u8)> {
    let e = r.expr.trim();
    let rest = e.strip_prefix("proxywatch_finding_severity{job=\"proxywatch\", id")?;
    let (regex, rest) = match rest.strip_prefix("=~\"") {
        Some(x) => (true, x),
        None => (false, rest.strip_prefix("=\"")?),
    };
    let (id, rest) = rest.split_once('"')?;
    let level: u8 = rest.trim().strip_prefix("} ==")?.trim().parse().ok()?;
    let id = if regex {
        id.strip_suffix(".+").expect("only prefix regexes").to_string()
    } else {
        id.to_string()
    };
    Some((id, regex, level))
}

fn level(sev: &str) -> u8 {
    match sev {
        "ok" => 0,
        "info" => 1,
        "warning" => 2,
        "critical" => 3,
        other => panic!("severity {other}"),
    }
}

#[test]
fn every_finding_rule_carries_the_agents_severity() {
    let rules = rules();
    assert!(rules.len() > 20, "{rules:?}");
    for r in &rules {
        if let Some((id, _, lvl)) = finding_rule(r) {
            assert_eq!(
                level(&r.severity),
                lvl,
                "{}: {id} == {lvl} labelled {}",
                r.alert,
                r.severity
            );
        } else {
            assert!(
                ["ProxywatchProbeFailing", "ProxywatchNodeNotReady", "ProxywatchAbsent"].contains(&r.alert.as_str()),
                "{} does not read the agent's verdict: {}",
                r.alert,
                r.expr
            );
        }
    }
}

/// What the agent serves at one moment: `/metrics` and `/findings` (id -> severity), checked
/// to agree with each other.
struct State {
    name: String,
    metrics: String,
    findings: BTreeMap<String, String>,
}

fn severities(metrics: &str) -> BTreeMap<String, u8> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("proxywatch_finding_severity{id=\""))
        .map(|l| {
            let (id, v) = l.split_once("\"} ").unwrap();
            (id.to_string(), v.parse::<f64>().unwrap() as u8)
        })
        .collect()
}

/// Reads `/metrics` and `/findings` until two `/metrics` around one `/findings` agree on the
/// verdict, and `/findings` with them.
fn state(name: &str, agent: &common::Agent) -> State {
    common::poll(&format!("{name}: a stable verdict"), Duration::from_secs(10), || {
        let m1 = agent.get_ok("/metrics");
        let f: Value = serde_json::from_str(&agent.get_ok("/findings")).unwrap();
        let m2 = agent.get_ok("/metrics");
        let (s1, s2) = (severities(&m1), severities(&m2));
        if s1 != s2 {
            return Err("the verdict changed meanwhile".into());
        }
        let findings: BTreeMap<String, String> = f
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["id"].as_str().unwrap().to_string(),
                    f["severity"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for (id, lvl) in &s1 {
            let said = findings.get(id).map_or(0, |s| level(s));
            assert_eq!(said, *lvl, "{name}: /findings says {said} for {id}, /metrics {lvl}");
        }
        Ok(State {
            name: name.to_string(),
            metrics: m1,
            findings,
        })
    })
}

fn fixture_state(node: &str, extra: &[&str]) -> State {
    root_state(node, &common::fixtures().join("nodes").join(node), extra)
}

fn root_state(node: &str, root: &Path, extra: &[&str]) -> State {
    let agent = common::Serve::new()
        .env_clear()
        .env("PATH", root.join("exec"))
        .args(["--node-name", "fixture", "--kube-proxy.interval", "1h"])
        .arg("--host-root")
        .arg(root)
        .args(common::NO_KUBE_PROXY)
        .args(common::ONE_ROUND)
        .args(extra)
        .start();
    let s = state(&format!("{node} {extra:?}"), &agent);
    agent.stop_cleanly();
    s
}

/// The promtool test: the state's series (with job and instance, as scraped) held for 100
/// minutes, and the firing alerts at 70 minutes (after every `for:`, the longest is 1h).
fn promtool_agrees(states: &[State], rules: &[Rule]) {
    let dir = tempfile::tempdir().unwrap();
    let extract = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests/extract_rules.py");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/prometheusrule.yaml");
    let rules_file = dir.path().join("proxywatch-rules.yaml");
    common::run(
        "python3",
        &[
            extract.to_str().unwrap(),
            manifest.to_str().unwrap(),
            rules_file.to_str().unwrap(),
        ],
    );
    let mut yaml = String::from("rule_files: [proxywatch-rules.yaml]\nevaluation_interval: 1m\ntests:\n");
    for (i, s) in states.iter().enumerate() {
        let instance = format!("node-{i}");
        yaml += &format!("  # {}\n  - interval: 1m\n    input_series:\n", s.name);
        yaml +=
            &format!("      - series: 'up{{job=\"proxywatch\",instance=\"{instance}\"}}'\n        values: '1x100'\n");
        for line in s.metrics.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let Ok(v) = value.parse::<f64>() else { continue };
            if !v.is_finite() {
                continue;
            }
            let labelled = match series.split_once('{') {
                Some((name, rest)) => format!("{name}{{job=\"proxywatch\",instance=\"{instance}\",{rest}"),
                None => format!("{series}{{job=\"proxywatch\",instance=\"{instance}\"}}"),
            };
            yaml += &format!(
                "      - series: '{}'\n        values: '{v}x100'\n",
                labelled.replace('\'', "''")
            );
        }
        // What the agent's verdict calls for.
        let mut expected: BTreeSet<String> = BTreeSet::new();
        let base = |alert: &str, sev: &str| {
            format!("alertname=\"{alert}\",alertstate=\"firing\",severity=\"{sev}\",job=\"proxywatch\",instance=\"{instance}\"")
        };
        for (id, sev) in &s.findings {
            for r in rules {
                if let Some((rid, regex, lvl)) = finding_rule(r) {
                    let matches = if regex { id.starts_with(&rid) } else { *id == rid };
                    if matches && level(sev) == lvl {
                        expected.insert(format!("ALERTS{{{},id=\"{id}\"}}", base(&r.alert, &r.severity)));
                    }
                }
            }
        }
        if s.findings.values().any(|v| v == "critical") {
            expected.insert(format!("ALERTS{{{}}}", base("ProxywatchNodeNotReady", "critical")));
        }
        for line in s.metrics.lines().filter(|l| l.starts_with("proxywatch_probe_success{")) {
            if line.ends_with(" 0") {
                let probe = line.split('"').nth(1).unwrap();
                assert_eq!(
                    s.findings.get("probe_failed").map(String::as_str),
                    Some("warning"),
                    "{}",
                    s.name
                );
                expected.insert(format!(
                    "ALERTS{{{},probe=\"{probe}\"}}",
                    base("ProxywatchProbeFailing", "warning")
                ));
            }
        }
        yaml += "    promql_expr_test:\n      - expr: 'ALERTS{alertstate=\"firing\"}'\n        eval_time: 70m\n";
        if expected.is_empty() {
            yaml += "        exp_samples: []\n";
        } else {
            yaml += "        exp_samples:\n";
            for e in &expected {
                yaml += &format!("          - labels: '{e}'\n            value: 1\n");
            }
        }
        eprintln!("{}: alerts {:?}", s.name, expected);
    }
    let test = dir.path().join("agree_test.yaml");
    std::fs::write(&test, &yaml).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&test)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: the alerts disagree with the agent:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A kube-proxy `/metrics` with `n` syncs and programmed changes, those after the 100th slow.
fn kube_proxy_metrics(n: u64) -> String {
    let fast = n.min(100);
    let mut s = String::from("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e9\n");
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_network_programming_duration_seconds",
    ] {
        s += &format!(
            "# TYPE {name} histogram\n{name}_bucket{{le=\"0.1\"}} {fast}\n{name}_bucket{{le=\"1\"}} {fast}\n\
             {name}_bucket{{le=\"10\"}} {n}\n{name}_bucket{{le=\"+Inf\"}} {n}\n{name}_sum 1\n{name}_count {n}\n"
        );
    }
    s
}

/// The agent on the healthy-iptables fixture, pointed at a stand-in kube-proxy that says `mode`
/// and serves `first`, then `then` once read: the state once `ready` holds of `/metrics`.
fn kube_proxy_state(name: &str, mode: &str, first: String, then: String, extra: &[&str], ready: &str) -> State {
    let kp = FakeKubeProxy::start();
    kp.set("/proxyMode", Reply::ok(mode.to_string()));
    kp.set("/metrics", Reply::ok(first));
    let root = common::fixtures().join("nodes/healthy-iptables");
    let agent = common::Serve::new()
        .env_clear()
        .env("PATH", root.join("exec"))
        .args(["--node-name", "fixture", "--kube-proxy.interval", "2s"])
        .arg("--host-root")
        .arg(&root)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args(common::ONE_ROUND)
        .args(extra)
        .start();
    kp.set("/metrics", Reply::ok(then));
    common::poll(&format!("{name}: {ready}"), Duration::from_secs(10), || {
        let t = agent.get_ok("/metrics");
        if t.lines().any(|l| l == ready) {
            Ok(())
        } else {
            Err(t
                .lines()
                .filter(|l| l.starts_with("proxywatch_finding_severity"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
    });
    let s = state(name, &agent);
    agent.stop_cleanly();
    s
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// kube-proxy's start time and its last sync and queued-change times.
fn kube_proxy_times(start: f64, last_sync: f64, last_queued: f64) -> String {
    format!(
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n\
         # TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last_sync}\n\
         # TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds {last_queued}\n"
    )
}

#[test]
fn the_alerts_fire_exactly_as_the_agent_says() {
    if !common::can_run(&["promtool", "python3"]) {
        return;
    }
    let rules = rules();
    let mut states = Vec::new();
    let mut nodes: Vec<String> = std::fs::read_dir(common::fixtures().join("nodes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    nodes.sort();
    for node in &nodes {
        states.push(fixture_state(node, &[]));
    }
    // Declared modes without a kube-proxy answering: kube_proxy_down, and IPVS modules missing.
    states.push(fixture_state("ipvs-modules-loaded", &["--kube-proxy.mode", "ipvs"]));
    states.push(fixture_state(
        "bridge-nf-call-iptables-off",
        &["--kube-proxy.mode", "ipvs"],
    ));
    // A kube-proxy whose syncs turned slow: the window's p99 is 9.9 s.
    let kp = FakeKubeProxy::start();
    kp.set("/metrics", Reply::ok(kube_proxy_metrics(100)));
    let root = common::fixtures().join("nodes/healthy-iptables");
    let agent = common::Serve::new()
        .env_clear()
        .env("PATH", root.join("exec"))
        .args(["--node-name", "fixture", "--kube-proxy.interval", "2s"])
        .arg("--host-root")
        .arg(&root)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args(common::ONE_ROUND)
        .start();
    kp.set("/metrics", Reply::ok(kube_proxy_metrics(110)));
    common::poll("slow syncs in the window", Duration::from_secs(10), || {
        let t = agent.get_ok("/metrics");
        match common::series(&t, "proxywatch_finding_severity{id=\"kube_proxy_sync_slow\"}") {
            Some(3.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    states.push(state("kube-proxy syncing slowly", &agent));
    agent.stop_cleanly();
    let now = unix_now();
    // Changes queued two minutes ago, never synced since.
    let stale = kube_proxy_times(now - 3600.0, now - 200.0, now - 120.0);
    states.push(kube_proxy_state(
        "kube-proxy not syncing its queued changes",
        "iptables",
        stale.clone(),
        stale,
        &[],
        "proxywatch_finding_severity{id=\"kube_proxy_sync_stale\"} 2",
    ));
    // A new start time between two reads: a restart.
    states.push(kube_proxy_state(
        "kube-proxy restarted",
        "iptables",
        kube_proxy_times(now - 3600.0, now, now),
        kube_proxy_times(now - 5.0, now, now),
        &[],
        "proxywatch_finding_severity{id=\"kube_proxy_restarted\"} 2",
    ));
    // IPVS running where iptables is declared (and this node has no IPVS modules).
    let ok = kube_proxy_times(now - 3600.0, now, now);
    states.push(kube_proxy_state(
        "kube-proxy in another mode than declared",
        "ipvs",
        ok.clone(),
        ok.clone(),
        &["--kube-proxy.mode", "iptables"],
        "proxywatch_finding_severity{id=\"kube_proxy_mode_mismatch\"} 3",
    ));
    // A table 85% full (the near-full node with fewer entries): a warning.
    let copy = tempfile::tempdir().unwrap();
    common::copy_tree(&common::fixtures().join("nodes/conntrack-near-full-drops"), copy.path());
    let max: u64 = std::fs::read_to_string(copy.path().join("proc/sys/net/netfilter/nf_conntrack_max"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(
        copy.path().join("proc/sys/net/netfilter/nf_conntrack_count"),
        format!("{}\n", max * 85 / 100),
    )
    .unwrap();
    states.push(root_state("conntrack table 85% full", copy.path(), &[]));
    // IPVS state where kube-proxy is declared absent: leftovers, not down.
    states.push(fixture_state("ipvs-mode-sysctls-off", &["--kube-proxy.mode", "none"]));

    // The scenarios reach these alerts at least (so the test cannot pass on nothing).
    let ids: BTreeSet<&str> = states
        .iter()
        .flat_map(|s| s.findings.keys().map(String::as_str))
        .collect();
    let warned: BTreeSet<&str> = states
        .iter()
        .flat_map(|s| {
            s.findings
                .iter()
                .filter(|(_, v)| *v == "warning")
                .map(|(k, _)| k.as_str())
        })
        .collect();
    assert!(warned.contains("conntrack_table_fill"), "{warned:?}");
    for id in [
        "conntrack_table_fill",
        "sysctl_ip_forward",
        "sysctl_bridge_nf_call_iptables",
        "ipvs_modules_missing",
        "kube_proxy_down",
        "kube_proxy_sync_slow",
        "kube_proxy_network_programming_slow",
        "probe_failed",
        "kube_proxy_sync_stale",
        "kube_proxy_restarted",
        "kube_proxy_mode_mismatch",
        "proxy_mode_leftovers",
    ] {
        assert!(ids.contains(id), "no scenario has {id}: {ids:?}");
    }
    promtool_agrees(&states, &rules);
}
