//! kube-proxy's view against the kernel's, on the real kernel: a network namespace with a
//! generated kube-proxy rule set (iptables-nft and iptables-legacy) and a stand-in kube-proxy
//! in it that reports, as the real one does, how many rules it wrote per table, when it last
//! synced and how many syncs failed. Flushing the rules behind the stand-in's back raises
//! `kube_proxy_rules_lost`; restoring them clears it (in nftables mode: its table deleted).
//! A failure counter that rises raises
//! `kube_proxy_sync_failing`, critical once the last good sync is old.
mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fake_kube_proxy::{FakeKubeProxy, Reply};
use common::{Netns, Serve};
use serde_json::Value;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// What the stand-in reports: kube-proxy's own series, as v1.28+ names them.
fn metrics(nat: u64, filter: u64, last_sync: f64, failures: u64) -> String {
    format!(
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last_sync}\n\
         # TYPE kubeproxy_sync_proxy_rules_iptables_total gauge\n\
         kubeproxy_sync_proxy_rules_iptables_total{{table=\"nat\"}} {nat}\n\
         kubeproxy_sync_proxy_rules_iptables_total{{table=\"filter\"}} {filter}\n\
         # TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter\n\
         kubeproxy_sync_proxy_rules_iptables_restore_failures_total {failures}\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds 1.7e9\n"
    )
}

fn finding<'a>(findings: &'a Value, id: &str) -> Option<&'a Value> {
    findings.as_array()?.iter().find(|f| f["id"] == id)
}

fn findings(agent: &common::Agent) -> Result<Value, String> {
    let (code, body) = agent.get("/findings")?;
    if code != 200 {
        return Err(format!("/findings: {code}"));
    }
    serde_json::from_str(&body).map_err(|e| e.to_string())
}

/// Rules of `table` in the namespace, as `iptables-save` prints them.
fn kernel_rules(ns: &Netns, save: &str, table: &str) -> u64 {
    let out = ns.exec_ok(save, &["-t", table]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .count() as u64
}

fn rules_lost_then_restored(backend: &str) {
    if !common::can_run(&["ip", &format!("iptables-{backend}-restore"), "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let ns = Netns::new(&format!("kpk-{backend}"));
    let dir = tempfile::tempdir().unwrap();
    let (rules, _) = common::generate_kube_rules(dir.path(), 100, 2, &[]);
    let restore = format!("iptables-{backend}-restore");
    let save = format!("iptables-{backend}-save");
    let text = std::fs::read_to_string(&rules).unwrap();
    ns.exec_input(&restore, &[], &text);
    let (nat, filter) = (kernel_rules(&ns, &save, "nat"), kernel_rules(&ns, &save, "filter"));
    assert!(nat > 300 && filter > 0, "nat {nat} filter {filter}");

    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("iptables"));
    // kube-proxy synced 5 s ago and says it wrote what the kernel holds.
    kp.set("/metrics", Reply::ok(metrics(nat, filter, now() - 5.0, 0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args([
            "--iptables.interval",
            "1s",
            "--kube-proxy.interval",
            "1s",
            "--iptables.save-interval",
            "0",
        ])
        .start();
    let intact = common::poll("a comparison with every rule in place", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => {
                let snap = agent.snapshot()?;
                if snap["facts"]["iptables"]["backend_in_use"] != backend {
                    return Err(format!("backend {}", snap["facts"]["iptables"]["backend_in_use"]));
                }
                Ok(snap)
            }
            Some(x) => Err(format!("rules_lost while intact: {x:#}")),
        }
    });
    eprintln!("intact: backend {}", intact["facts"]["iptables"]["backend_in_use"]);

    // A firewall reload behind kube-proxy's back: the nat table flushed.
    ns.exec_ok(&format!("iptables-{backend}"), &["-t", "nat", "-F"]);
    let lost = common::poll("kube_proxy_rules_lost after the flush", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        finding(&f, "kube_proxy_rules_lost")
            .cloned()
            .ok_or_else(|| "not yet".to_string())
    });
    assert_eq!(lost["severity"], "critical", "{lost:#}");
    assert_eq!(
        lost["evidence"]["tables"]["nat"]["kube_proxy_reported"], nat as f64,
        "{lost:#}"
    );
    assert_eq!(lost["evidence"]["tables"]["nat"]["kernel"], 0, "{lost:#}");
    assert_eq!(lost["evidence"]["backend"], backend);
    let metrics_body = agent.get_ok("/metrics");
    assert_eq!(
        common::series(&metrics_body, "proxywatch_kube_proxy_iptables_rules{table=\"nat\"}"),
        Some(nat as f64)
    );
    assert_eq!(
        common::series(
            &metrics_body,
            "proxywatch_finding_severity{id=\"kube_proxy_rules_lost\"}"
        ),
        Some(3.0)
    );

    // kube-proxy's next full sync puts them back (here: the test does), and says so.
    ns.exec_input(&restore, &[], &text);
    kp.set("/metrics", Reply::ok(metrics(nat, filter, now(), 0)));
    common::poll("kube_proxy_rules_lost cleared", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => Ok(()),
            Some(x) => Err(format!("{}", x["summary"])),
        }
    });
    agent.stop_cleanly();
}

#[test]
fn rules_flushed_behind_kube_proxy_are_lost_then_restored_nft() {
    rules_lost_then_restored("nft");
}

#[test]
fn rules_flushed_behind_kube_proxy_are_lost_then_restored_legacy() {
    rules_lost_then_restored("legacy");
}

#[test]
fn failing_syncs_warn_then_page_once_the_last_good_sync_is_old() {
    if !common::can_run(&["ip"]) {
        return;
    }
    let ns = Netns::new("kpfail");
    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("iptables"));
    let synced = now();
    kp.set("/metrics", Reply::ok(metrics(0, 0, synced, 0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args([
            "--kube-proxy.interval",
            "1s",
            "--kube-proxy.sync-failing-critical",
            "8s",
        ])
        .start();
    // Two readings without a failure: the window exists and says nothing.
    common::poll("a window of syncs", Duration::from_secs(20), || {
        let snap = agent.snapshot()?;
        let w = &snap["derived"]["kube_proxy_sync_failures"];
        if w.is_null() {
            return Err("no window yet".into());
        }
        assert_eq!(w["increase"], 0, "{w:#}");
        Ok(())
    });
    assert!(finding(&findings(&agent).unwrap(), "kube_proxy_sync_failing").is_none());

    // Every sync now fails: the counter rises, the last good sync stays where it was.
    let mut failures = 0;
    let warn = common::poll("kube_proxy_sync_failing", Duration::from_secs(20), || {
        failures += 1;
        kp.set("/metrics", Reply::ok(metrics(0, 0, synced, failures)));
        finding(&findings(&agent)?, "kube_proxy_sync_failing")
            .cloned()
            .ok_or_else(|| "not yet".to_string())
    });
    assert!(
        warn["evidence"]["failures_in_window"].as_u64().unwrap() >= 1,
        "{warn:#}"
    );
    let page = common::poll(
        "critical once the last good sync is older than 8 s",
        Duration::from_secs(30),
        || {
            failures += 1;
            kp.set("/metrics", Reply::ok(metrics(0, 0, synced, failures)));
            std::thread::sleep(Duration::from_millis(500));
            let f = finding(&findings(&agent)?, "kube_proxy_sync_failing")
                .cloned()
                .ok_or("cleared")?;
            if f["severity"] == "critical" {
                Ok(f)
            } else {
                Err(format!("{}", f["severity"]))
            }
        },
    );
    assert!(
        page["evidence"]["last_sync_age_seconds"].as_f64().unwrap() >= 8.0,
        "{page:#}"
    );
    let body = agent.get_ok("/metrics");
    assert!(common::series(&body, "proxywatch_kube_proxy_sync_failures_total").unwrap() >= 2.0);
    agent.stop_cleanly();
}

/// What a stand-in in nftables mode reports: no rule counts (kube-proxy has none there), the
/// last sync and the nftables sync failures.
fn nft_metrics(last_sync: f64) -> String {
    format!(
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last_sync}\n\
         # TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter\n\
         kubeproxy_sync_proxy_rules_nftables_sync_failures_total 0\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds 1.7e9\n"
    )
}

/// nftables mode: kube-proxy's table deleted behind the stand-in's back (`nft delete table`,
/// in the test's own namespace) is `kube_proxy_rules_lost`, critical within a few probe
/// intervals; the table written again by a sync clears it.
#[test]
fn nftables_table_deleted_behind_kube_proxy_is_lost_then_restored() {
    if !common::can_run(&["ip", "nft", "python3"]) {
        return;
    }
    let _lock = common::global_lock();
    let ns = Netns::new("kpk-nftables");
    let dir = tempfile::tempdir().unwrap();
    let gen = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_nft.py");
    let table = dir.path().join("kube-proxy.nft");
    let out = common::run(
        "python3",
        &[gen.to_str().unwrap(), "--services", "20", "--endpoints", "2"],
    );
    std::fs::write(&table, out.stdout).unwrap();
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);

    let kp = FakeKubeProxy::start_in(Some(&ns.name));
    kp.set("/proxyMode", Reply::ok("nftables"));
    kp.set("/metrics", Reply::ok(nft_metrics(now() - 5.0)));
    let agent = Serve::new()
        .in_netns(&ns)
        .args([
            "--kube-proxy.metrics-url",
            &kp.url(),
            "--kube-proxy.healthz-url",
            &kp.url(),
        ])
        .args(["--nftables.interval", "1s", "--kube-proxy.interval", "1s"])
        .start();
    common::poll("the table read, nothing lost", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        if let Some(x) = finding(&f, "kube_proxy_rules_lost") {
            return Err(format!("rules_lost with the table in place: {x:#}"));
        }
        let snap = agent.snapshot()?;
        match snap["facts"]["nftables"]["tables"].as_array() {
            Some(t) if !t.is_empty() => Ok(()),
            _ => Err(format!("no table read yet: {}", snap["probes"]["nftables"])),
        }
    });

    ns.exec_ok("nft", &["delete", "table", "ip", "kube-proxy"]);
    let lost = common::poll(
        "kube_proxy_rules_lost after the delete",
        Duration::from_secs(20),
        || {
            let f = findings(&agent)?;
            finding(&f, "kube_proxy_rules_lost")
                .cloned()
                .ok_or_else(|| "not yet".to_string())
        },
    );
    assert_eq!(lost["severity"], "critical", "{lost:#}");
    assert_eq!(lost["evidence"]["kernel_tables"], serde_json::json!([]), "{lost:#}");
    assert_eq!(
        common::series(
            &agent.get_ok("/metrics"),
            "proxywatch_finding_severity{id=\"kube_proxy_rules_lost\"}"
        ),
        Some(3.0)
    );

    // kube-proxy's next sync writes the table again (here: the test does), and says so.
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
    kp.set("/metrics", Reply::ok(nft_metrics(now())));
    common::poll("kube_proxy_rules_lost cleared", Duration::from_secs(20), || {
        let f = findings(&agent)?;
        match finding(&f, "kube_proxy_rules_lost") {
            None => Ok(()),
            Some(x) => Err(format!("still {x:#}")),
        }
    });
}
