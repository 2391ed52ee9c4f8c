//! The inhibitions docs/alerts.md documents, in a real Alertmanager (Debian 12's 0.25): with
//! ProxywatchKubeProxyDown firing on a node, ProxywatchNodeNotReady of that node does not page
//! again (suppressed, inhibited by it), nor do its stale/slow-sync alerts; on another node, a
//! ProxywatchNodeNotReady without another critical alert still pages. The configuration is the
//! `inhibit_rules` YAML block of the runbook itself, checked by `amtool check-config` first.
//!
//! Needs root (a network namespace of its own, so that port 9093 is free), `ip`,
//! `prometheus-alertmanager` and `amtool`.
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Netns, Process};
use serde_json::Value;

const AM: &str = "127.0.0.1:9093";

/// Every ```yaml block of docs/alerts.md that holds `inhibit_rules:`, in order.
fn inhibition_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.md")).unwrap();
    doc.split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .filter(|b| b.starts_with("inhibit_rules:"))
        .collect()
}

/// An Alertmanager configuration: a receiver that sends nothing, and `inhibit_rules`.
fn config_with(inhibit_rules: &str) -> String {
    format!("route:\n  receiver: blackhole\n  group_by: [alertname, instance]\nreceivers:\n  - name: blackhole\n{inhibit_rules}")
}

fn alert(name: &str, instance: &str, severity: &str) -> Value {
    serde_json::json!({
        "labels": {"alertname": name, "instance": instance, "job": "proxywatch", "namespace": "proxywatch", "severity": severity},
        "annotations": {"summary": "test"},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "2099-01-01T00:00:00Z",
    })
}

/// `/api/v2/alerts`: (alertname, instance) -> (state, inhibited by how many).
fn states(ns: &Netns) -> Result<Vec<(String, String, String, usize)>, String> {
    let (code, body) = common::http_get_in(ns, AM.parse().unwrap(), "/api/v2/alerts")?;
    if code != 200 {
        return Err(format!("{code} {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    let mut out: Vec<_> = v
        .as_array()
        .ok_or(body.clone())?
        .iter()
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or_default().to_string(),
                a["labels"]["instance"].as_str().unwrap_or_default().to_string(),
                a["status"]["state"].as_str().unwrap_or_default().to_string(),
                a["status"]["inhibitedBy"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

#[test]
fn node_not_ready_does_not_page_twice() {
    if !common::can_run(&["ip", "prometheus-alertmanager", "amtool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Every documented block is a valid configuration; the first (the runbook's suggestion,
    // both rules) is the one loaded.
    let blocks = inhibition_blocks();
    assert!(blocks.len() >= 2, "{blocks:?}");
    for (i, b) in blocks.iter().enumerate() {
        let c = dir.path().join(format!("check-{i}.yml"));
        std::fs::write(&c, config_with(b)).unwrap();
        common::run("amtool", &["check-config", c.to_str().unwrap()]);
    }
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(&config, config_with(&blocks[0])).unwrap();
    let ns = Netns::new("aminhib");
    ns.exec_ok("ip", &["link", "set", "lo", "up"]);
    let am = Process::spawn(
        "alertmanager",
        &mut ns.command(
            "prometheus-alertmanager",
            &[
                &format!("--config.file={}", config.display()),
                &format!("--storage.path={}", dir.path().display()),
                &format!("--web.listen-address={AM}"),
                "--cluster.listen-address=",
            ],
        ),
        &dir.path().join("alertmanager.log"),
    );
    let alerts = serde_json::json!([
        alert("ProxywatchNodeNotReady", "n1", "critical"),
        alert("ProxywatchKubeProxyDown", "n1", "critical"),
        alert("ProxywatchKubeProxySyncStale", "n1", "warning"),
        alert("ProxywatchNodeNotReady", "n2", "critical"),
    ])
    .to_string();
    common::poll("alerts posted", Duration::from_secs(20), || {
        am.assert_running();
        match common::http_post_json_in(&ns, AM.parse().unwrap(), "/api/v2/alerts", &alerts)? {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let want = vec![
        (
            "ProxywatchKubeProxyDown".to_string(),
            "n1".to_string(),
            "active".to_string(),
            0,
        ),
        (
            "ProxywatchKubeProxySyncStale".into(),
            "n1".into(),
            "suppressed".into(),
            1,
        ),
        ("ProxywatchNodeNotReady".into(), "n1".into(), "suppressed".into(), 1),
        ("ProxywatchNodeNotReady".into(), "n2".into(), "active".into(), 0),
    ];
    common::poll("inhibitions applied", Duration::from_secs(20), || {
        let got = states(&ns)?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    am.stop();
}

/// A real Alertmanager in a namespace of its own, with `inhibit_rules`, the `alerts` posted:
/// the states once they are `want`, or the test fails with the last seen.
fn run_with(tag: &str, inhibit_rules: &str, alerts: &Value, want: &[(&str, &str, &str, usize)]) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(&config, config_with(inhibit_rules)).unwrap();
    common::run("amtool", &["check-config", config.to_str().unwrap()]);
    let ns = Netns::new(tag);
    ns.exec_ok("ip", &["link", "set", "lo", "up"]);
    let am = Process::spawn(
        "alertmanager",
        &mut ns.command(
            "prometheus-alertmanager",
            &[
                &format!("--config.file={}", config.display()),
                &format!("--storage.path={}", dir.path().display()),
                &format!("--web.listen-address={AM}"),
                "--cluster.listen-address=",
            ],
        ),
        &dir.path().join("alertmanager.log"),
    );
    let body = alerts.to_string();
    common::poll("alerts posted", Duration::from_secs(20), || {
        am.assert_running();
        match common::http_post_json_in(&ns, AM.parse().unwrap(), "/api/v2/alerts", &body)? {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let want: Vec<(String, String, String, usize)> = want
        .iter()
        .map(|(a, i, s, n)| (a.to_string(), i.to_string(), s.to_string(), *n))
        .collect();
    common::poll("inhibitions applied", Duration::from_secs(20), || {
        let got = states(&ns)?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    am.stop();
}

/// The block of docs/alerts.md whose `equal:` line is `equal`.
fn block_with(equal: &str) -> String {
    let blocks = inhibition_blocks();
    let found: Vec<_> = blocks
        .iter()
        .filter(|b| b.contains(&format!("equal: {equal}\n")))
        .collect();
    assert_eq!(found.len(), 1, "one block with equal: {equal} in {blocks:?}");
    found[0].clone()
}

#[test]
fn a_critical_on_one_node_silences_the_warning_of_that_node_only() {
    if !common::can_run(&["ip", "prometheus-alertmanager", "amtool"]) {
        return;
    }
    // n1 has the alert at both severities (two rules of one name), n2 the warning only.
    let alerts = serde_json::json!([
        alert("ProxywatchKubeProxySyncSlow", "n1", "critical"),
        alert("ProxywatchKubeProxySyncSlow", "n1", "warning"),
        alert("ProxywatchKubeProxySyncSlow", "n2", "warning"),
    ]);
    const A: &str = "ProxywatchKubeProxySyncSlow";
    // kube-prometheus' default, as docs/alerts.md quotes it: n2's warning is silenced too.
    run_with(
        "aminhkp",
        &block_with("[namespace, alertname]"),
        &alerts,
        &[
            (A, "n1", "active", 0),
            (A, "n1", "suppressed", 1),
            (A, "n2", "suppressed", 1),
        ],
    );
    // The runbook's: the node in `equal`, n2's warning still notifies.
    run_with(
        "aminhnd",
        &block_with("[namespace, alertname, instance]"),
        &alerts,
        &[
            (A, "n1", "active", 0),
            (A, "n1", "suppressed", 1),
            (A, "n2", "active", 0),
        ],
    );
}
