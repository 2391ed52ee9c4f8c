//! `promtool check metrics` (Prometheus' own linter, Debian 12's 2.42) on the `/metrics` the
//! real binary serves: on every fixture node under tests/fixtures/nodes (read from the
//! directory, so a new one is checked too), and on a node where kube-proxy is present and syncing
//! (a stand-in kube-proxy whose sync and network-programming histograms grow between two reads):
//! its latency quantiles are a summary, the one type promtool lets carry a `quantile` label.
use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::fake_kube_proxy::{FakeKubeProxy, Reply};

/// promtool's verdict on an exposition: Ok, or its complaints.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("promtool check metrics: {:?}: {said}", out.status.code()))
    }
}

#[test]
fn promtool_checks_its_own_linter_rule() {
    if !common::can_run(&["promtool"]) {
        return;
    }
    // The form the agent used to serve: a gauge with a quantile label. Refused.
    let bad = "# HELP x_seconds a\n# TYPE x_seconds gauge\nx_seconds{quantile=\"0.5\"} 1\n";
    assert!(promtool_check(bad).unwrap_err().contains("quantile"));
}

#[test]
fn every_fixture_node_passes_promtool_check_metrics() {
    if !common::can_run(&["promtool"]) {
        return;
    }
    let nodes = common::fixtures().join("nodes");
    let mut checked = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&nodes).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for root in entries.into_iter().filter(|p| p.is_dir()) {
        let agent = common::Serve::new()
            .env_clear()
            .env("PATH", root.join("exec"))
            .args(["--node-name", "fixture", "--kube-proxy.interval", "1h"])
            .arg("--host-root")
            .arg(&root)
            .args(common::NO_KUBE_PROXY)
            .args(common::ONE_ROUND)
            .start();
        let text = agent.get_ok("/metrics");
        agent.stop_cleanly();
        assert!(text.contains("proxywatch_kube_proxy_up "), "{}: {text}", root.display());
        promtool_check(&text).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        checked.push(root.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(checked.len() >= 13, "{checked:?}");
}

/// A kube-proxy `/metrics` with `n` syncs and `n` programmed changes so far, the last `n - 100`
/// of them slow (1 to 10 s).
fn kube_proxy_metrics(n: u64) -> String {
    let fast = n.min(100);
    let mut s = String::from("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e9\n");
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_network_programming_duration_seconds",
    ] {
        s += &format!(
            "# HELP {name} x\n# TYPE {name} histogram\n\
             {name}_bucket{{le=\"0.1\"}} {fast}\n{name}_bucket{{le=\"1\"}} {fast}\n\
             {name}_bucket{{le=\"10\"}} {n}\n{name}_bucket{{le=\"+Inf\"}} {n}\n\
             {name}_sum {}\n{name}_count {n}\n",
            fast as f64 * 0.05 + (n - fast) as f64 * 5.0
        );
    }
    s
}

#[test]
fn a_node_with_kube_proxy_syncing_passes_promtool_check_metrics() {
    if !common::can_run(&["promtool"]) {
        return;
    }
    let kp = FakeKubeProxy::start();
    kp.set("/metrics", Reply::ok(kube_proxy_metrics(100)));
    let root = common::fixtures().join("nodes/healthy-iptables");
    let agent = common::Serve::new()
        .env_clear()
        .env("PATH", root.join("exec"))
        .args(["--node-name", "fixture", "--kube-proxy.interval", "300ms"])
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
    common::poll("a first read of kube-proxy", Duration::from_secs(10), || {
        let t = agent.get_ok("/metrics");
        match common::series(&t, "proxywatch_kube_proxy_sync_duration_seconds_count") {
            Some(100.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // 10 slow syncs since: the window's p99 is among them.
    kp.set("/metrics", Reply::ok(kube_proxy_metrics(110)));
    let text = common::poll("a window with syncs in it", Duration::from_secs(10), || {
        let t = agent.get_ok("/metrics");
        match common::series(&t, "proxywatch_kube_proxy_sync_duration_seconds{quantile=\"0.99\"}") {
            Some(p99) if p99 > 1.0 => Ok(t),
            other => Err(format!("{other:?}")),
        }
    });
    agent.stop_cleanly();
    for name in [
        "proxywatch_kube_proxy_sync_duration_seconds",
        "proxywatch_kube_proxy_network_programming_duration_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {name} summary\n")), "{text}");
        assert_eq!(common::series(&text, &format!("{name}_count")), Some(110.0));
        assert_eq!(
            common::series(&text, &format!("{name}_sum")),
            Some(100.0 * 0.05 + 10.0 * 5.0)
        );
        assert!(common::series(&text, &format!("{name}{{quantile=\"0.5\"}}")).is_some());
    }
    assert_eq!(common::series(&text, "proxywatch_kube_proxy_up"), Some(1.0));
    promtool_check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}
