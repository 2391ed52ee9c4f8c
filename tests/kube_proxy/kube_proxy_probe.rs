//! The kube-proxy probe end to end, through the real binary:
//!
//! 1. `proxywatch serve` against a fake kube-proxy (a small HTTP/1.1 server on loopback whose
//!    answers the test changes mid-run): steady state, a burst of slow syncs and its end, IPVS
//!    mode without IPVS modules, and a stale `/healthz`; a change queued for 120 s without a
//!    sync (`kube_proxy_sync_stale`, then cleared by a sync) and slow network programming
//!    that goes on (`kube_proxy_network_programming_slow`, cleared when it stops).
//! 2. Bad answers, one `proxywatch check` each: nothing listening, no answer in time, HTTP 500,
//!    bodies over the cap, malformed exposition, broken histograms.
//! 3. A real process named `kube-proxy` (a copy of `/bin/sleep`) in the real `/proc`: its
//!    process facts, and a restart seen by `serve`.
//!
//! Expected numbers are computed here from the fixture text, with the test's own bucket parsing
//! and `histogram_quantile`, never by the agent's parsers.
use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::fake_kube_proxy::{kube_proxy_fixture, FakeKubeProxy, Reply, HEALTHZ_FIXTURE, METRICS_FIXTURE};
use serde_json::Value;

/// The sync-duration histogram family.
const SYNC: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
/// The probes that only read host files: whatever kube-proxy answers, they stay ok.
const FILE_PROBES: &[&str] = &["conntrack", "modules", "node", "sysctls"];
/// How long a poll waits for the agent to reach a state (generous: CI machines are slow).
const DEADLINE: Duration = Duration::from_secs(30);

/// The fixture node without its netlink recording: the tests' fake kube-proxy reports rules
/// that the recorded kernel (a namespace without rules) does not hold.
fn node(name: &str) -> common::FilesOnlyNode {
    common::files_only_node(name)
}

// ---------------------------------------------------------------------------
// The test's own reading of a Prometheus histogram.

fn parse_le(le: &str) -> f64 {
    if le == "+Inf" {
        f64::INFINITY
    } else {
        le.parse().unwrap_or_else(|_| panic!("le={le:?}"))
    }
}

/// The `(le, cumulative count)` pairs of `family` (one label set, `le` only) in exposition text.
fn buckets(text: &str, family: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{family}_bucket{{le=\"");
    let b: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|rest| {
            let (le, v) = rest
                .split_once("\"} ")
                .unwrap_or_else(|| panic!("bucket line {rest:?}"));
            (parse_le(le), v.trim().parse().unwrap())
        })
        .collect();
    assert!(b.len() > 2, "{family}: buckets {b:?}");
    b
}

/// PromQL `histogram_quantile(q, …)` for one classic histogram with observations.
fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> f64 {
    let mut b = buckets.to_vec();
    b.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
    let (last_le, total) = *b.last().unwrap();
    assert!(last_le.is_infinite() && total > 0.0, "{b:?}");
    let rank = q * total;
    let i = b.iter().position(|&(_, c)| c >= rank).unwrap();
    if b[i].0.is_infinite() {
        return b[i - 1].0;
    }
    let (lower, before) = if i == 0 { (0.0, 0.0) } else { b[i - 1] };
    lower + (b[i].0 - lower) * (rank - before) / (b[i].1 - before)
}

/// Bucket-wise `newer - older`.
fn bucket_delta(newer: &[(f64, f64)], older: &[(f64, f64)]) -> Vec<(f64, f64)> {
    assert_eq!(newer.len(), older.len());
    newer.iter().zip(older).map(|(n, o)| (n.0, n.1 - o.1)).collect()
}

/// The fixture text with `n` more observations of `value` seconds in `family`: every bucket
/// with `le >= value`, `_count` and `_sum` move together, as kube-proxy's would.
fn add_observations(text: &str, family: &str, value: f64, n: u64) -> String {
    let bucket = format!("{family}_bucket{{le=\"");
    let count = format!("{family}_count ");
    let sum = format!("{family}_sum ");
    let (mut buckets_changed, mut counts, mut sums) = (0, 0, 0);
    let n_f = n as f64;
    let out: Vec<String> = text
        .split('\n')
        .map(|line| {
            if let Some(rest) = line.strip_prefix(bucket.as_str()) {
                let (le, v) = rest.split_once("\"} ").unwrap();
                let c: f64 = v.parse().unwrap();
                if value <= parse_le(le) {
                    buckets_changed += 1;
                    return format!("{bucket}{le}\"}} {}", c + n_f);
                }
            } else if let Some(v) = line.strip_prefix(count.as_str()) {
                counts += 1;
                return format!("{count}{}", v.parse::<f64>().unwrap() + n_f);
            } else if let Some(v) = line.strip_prefix(sum.as_str()) {
                sums += 1;
                return format!("{sum}{}", v.parse::<f64>().unwrap() + n_f * value);
            }
            line.to_string()
        })
        .collect();
    assert!(
        buckets_changed >= 1 && counts == 1 && sums == 1,
        "{family}: not rewritten"
    );
    out.join("\n")
}

/// The 1-based line number of the one line equal to `old`, and the text with it replaced
/// (`None`: removed).
fn replace_line(text: &str, old: &str, new: Option<&str>) -> (usize, String) {
    let lines: Vec<&str> = text.split('\n').collect();
    let hits: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == old).collect();
    assert_eq!(hits.len(), 1, "{old:?} must occur once");
    let mut out: Vec<&str> = lines[..hits[0]].to_vec();
    out.extend(new);
    out.extend(&lines[hits[0] + 1..]);
    (hits[0] + 1, out.join("\n"))
}

/// A loopback URL nothing listens on (bound, port learned, closed).
fn closed_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

// ---------------------------------------------------------------------------
// The agent.

/// `proxywatch serve` (the shared harness's agent) with no inherited environment and an
/// empty PATH; stopped and reaped on drop (also on panic).
struct Agent {
    agent: common::Agent,
    _empty_path: tempfile::TempDir,
}

impl Agent {
    fn serve(host_root: &Path, metrics_url: &str, healthz_url: &str, extra: &[&str]) -> Agent {
        let empty = tempfile::tempdir().unwrap();
        let agent = common::Serve::new()
            .env_clear()
            .env("PATH", empty.path())
            .args(["--node-name", "fixture"])
            .arg("--host-root")
            .arg(host_root)
            .args(["--kube-proxy.metrics-url", metrics_url])
            .args(["--kube-proxy.healthz-url", healthz_url])
            .args(extra)
            .start();
        Agent {
            agent,
            _empty_path: empty,
        }
    }

    /// GET a path; Err while the agent is not answering. Panics if the agent exited.
    fn get(&mut self, path: &str) -> Result<(u16, String), String> {
        self.agent.assert_running();
        self.agent.get(path)
    }

    fn snapshot(&mut self) -> Result<Value, String> {
        match self.get("/snapshot")? {
            (200, body) => serde_json::from_str(&body).map_err(|e| format!("/snapshot: {e}: {body}")),
            (code, body) => Err(format!("/snapshot: HTTP {code}: {body}")),
        }
    }

    fn metrics(&mut self) -> String {
        self.agent.assert_running();
        self.agent.get_ok("/metrics")
    }

    fn readyz(&mut self) -> (u16, String) {
        self.get("/readyz").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Stops the agent and checks it never panicked.
    fn stop(self) {
        let log = self.agent.log();
        self.agent.stop();
        assert!(!log.contains("panicked"), "panic:\n{log}");
    }
}

/// Calls `f` until it returns Ok, at most DEADLINE; panics with its last Err.
fn poll<T>(what: &str, f: impl FnMut() -> Result<T, String>) -> T {
    common::poll(what, DEADLINE, f)
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
}

fn must_find<'a>(doc: &'a Value, id: &str) -> &'a Value {
    finding(doc, id).unwrap_or_else(|| panic!("no finding {id} in {:#}", doc["findings"]))
}

fn assert_file_probes_ok(doc: &Value) {
    for p in FILE_PROBES {
        assert_eq!(doc["probes"][p]["status"], "ok", "{p}: {:#}", doc["probes"][p]);
    }
}

fn f64_at(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what}: not a number: {v}"))
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-9, "{what}: got {got}, want {want}");
}

/// The kube-proxy facts of a snapshot, for polls.
fn kp_facts(doc: &Value) -> Result<&Value, String> {
    let kp = &doc["facts"]["kube_proxy"];
    if kp.is_object() {
        Ok(kp)
    } else {
        Err(format!("no kube-proxy facts; probe: {}", doc["probes"]["kube_proxy"]))
    }
}

// ---------------------------------------------------------------------------
// 1. serve against the fake kube-proxy.

#[test]
fn serve_follows_a_fake_kube_proxy() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let base = buckets(&fixture, SYNC);
    let fake = FakeKubeProxy::start();
    let url = fake.url();
    // Kept for the agent's life: its root is deleted on drop.
    let root = node("healthy-iptables");
    let mut agent = Agent::serve(&root, &url, &url, &["--kube-proxy.interval", "300ms"]);

    // Steady state: the fixture as served.
    let doc = poll("kube_proxy probe ok in iptables mode", || {
        let d = agent.snapshot()?;
        let ok = d["probes"]["kube_proxy"]["status"] == "ok" && kp_facts(&d)?["mode"] == "iptables";
        ok.then_some(d.clone())
            .ok_or_else(|| format!("{:#}", d["probes"]["kube_proxy"]))
    });
    assert_file_probes_ok(&doc);
    let kp = &doc["facts"]["kube_proxy"];
    assert_eq!(doc["proxy_mode"]["mode"], "iptables");
    assert_eq!(doc["proxy_mode"]["source"], "kube-proxy");
    assert_eq!(kp["metrics_up"], true);
    assert_eq!(kp["metrics_error"], Value::Null);
    assert_eq!(kp["metrics"]["version"], "v1.21.1");
    assert_eq!(kp["process"], Value::Null, "the fixture node's /proc has no processes");
    assert_eq!(kp["healthz"]["status_code"], 200);
    assert_eq!(kp["healthz"]["staleness_seconds"], 0.0);
    let count = base.last().unwrap().1;
    assert_eq!(count, 23.0, "the fixture's +Inf bucket");
    assert_eq!(kp["sync"]["count_since_start"], count);
    let p99 = histogram_quantile(0.99, &base);
    assert!((p99 - 1.9695).abs() < 1e-4, "own p99 {p99}");
    assert_close(f64_at(&kp["sync"]["p99_since_start"], "p99_since_start"), p99, "p99");
    assert_close(
        f64_at(&kp["sync"]["p50_since_start"], "p50_since_start"),
        histogram_quantile(0.5, &base),
        "p50",
    );
    let m = agent.metrics();
    assert_eq!(common::series(&m, "proxywatch_kube_proxy_up"), Some(1.0), "{m}");
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_mode{mode=\"iptables\"}"),
        Some(1.0)
    );

    // Later reads of the same text: an empty window, no sync finding, ready.
    poll("an empty sync window", || {
        let d = agent.snapshot()?;
        let ok = d["derived"]["kube_proxy"]["sync"]["count"] == 0.0 && finding(&d, "kube_proxy_sync_slow").is_none();
        ok.then_some(())
            .ok_or_else(|| format!("{:#}", d["derived"]["kube_proxy"]))
    });
    poll("ready", || match agent.readyz() {
        (200, _) => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // A burst of 20 slow syncs (12 s each: the 8.192-16.384 s bucket). The window with the
    // burst lasts one read (300 ms); if a poll misses it, the next attempt adds 20 more.
    let mut served = fixture.clone();
    let mut burst = None;
    for attempt in 1..=5u64 {
        let older = served.clone();
        served = add_observations(&fixture, SYNC, 12.0, 20 * attempt);
        fake.set("/metrics", Reply::ok(served.clone()));
        let want_total = count + 20.0 * attempt as f64;
        let first = poll("the burst read", || {
            let d = agent.snapshot()?;
            let sync = &kp_facts(&d)?["sync"];
            (sync["count_since_start"] == want_total)
                .then_some(d.clone())
                .ok_or_else(|| format!("{sync:#}"))
        });
        if first["derived"]["kube_proxy"]["sync"]["count"] != 20.0 {
            eprintln!("attempt {attempt}: missed the burst window, adding another burst");
            continue;
        }
        // /metrics and /readyz must describe the same kube-proxy read as the snapshot.
        let (m, ready) = (agent.metrics(), agent.readyz());
        let again = agent.snapshot().unwrap();
        let run = |d: &Value| d["probes"]["kube_proxy"]["last_run_timestamp_seconds"].clone();
        if run(&again) == run(&first) {
            burst = Some((first, m, ready, older));
            break;
        }
        eprintln!("attempt {attempt}: the agent read again meanwhile, adding another burst");
    }
    let (doc, m, ready, older) = burst.expect("a consistent burst read in 5 attempts");
    let sync = &doc["derived"]["kube_proxy"]["sync"];
    let window = bucket_delta(&buckets(&served, SYNC), &buckets(&older, SYNC));
    assert_eq!(window.last().unwrap().1, 20.0);
    let want = histogram_quantile(0.99, &window);
    let p99w = f64_at(&sync["p99"], "window p99");
    assert_close(p99w, want, "window p99");
    assert!(p99w > 5.0, "{p99w}");
    assert!(f64_at(&sync["seconds"], "window seconds") > 0.0);
    let f = must_find(&doc, "kube_proxy_sync_slow");
    assert_eq!(f["severity"], "critical", "{f:#}");
    assert_close(f64_at(&f["evidence"]["p99_seconds"], "p99_seconds"), want, "evidence");
    assert_eq!(f["evidence"]["count_window"], 20.0);
    let q99 = common::series(&m, "proxywatch_kube_proxy_sync_duration_seconds{quantile=\"0.99\"}");
    assert!(q99.is_some_and(|v| v > 5.0 && (v - want).abs() < 1e-9), "{q99:?}\n{m}");
    assert_eq!(
        common::series(&m, "proxywatch_finding_severity{id=\"kube_proxy_sync_slow\"}"),
        Some(3.0)
    );
    assert_eq!(ready.0, 503, "{ready:?}");
    assert!(ready.1.contains("kube-proxy rule sync p99"), "{ready:?}");

    // The same text again (no new syncs): the window empties and the finding clears.
    let doc = poll("the burst's end", || {
        let d = agent.snapshot()?;
        let ok = d["derived"]["kube_proxy"]["sync"]["count"] == 0.0 && finding(&d, "kube_proxy_sync_slow").is_none();
        ok.then_some(d.clone())
            .ok_or_else(|| format!("{:#}", d["derived"]["kube_proxy"]))
    });
    assert_eq!(doc["derived"]["kube_proxy"]["sync"]["p99"], Value::Null);
    let m = poll("metrics after the burst", || {
        let m = agent.metrics();
        let cleared = common::series(&m, "proxywatch_finding_severity{id=\"kube_proxy_sync_slow\"}") == Some(0.0);
        cleared.then_some(m.clone()).ok_or(m)
    });
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_sync_duration_seconds{quantile=\"0.99\"}"),
        None,
        "no sync in the window: no quantile"
    );
    poll("ready after the burst", || match agent.readyz() {
        (200, _) => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // kube-proxy in IPVS mode on a node without IPVS modules.
    fake.set("/proxyMode", Reply::ok(kube_proxy_fixture("ipvs.txt")));
    let doc = poll("ipvs mode from kube-proxy", || {
        let d = agent.snapshot()?;
        (d["proxy_mode"]["mode"] == "ipvs")
            .then_some(d.clone())
            .ok_or_else(|| format!("{}", d["proxy_mode"]))
    });
    assert_eq!(doc["proxy_mode"]["source"], "kube-proxy");
    assert_eq!(doc["facts"]["kube_proxy"]["mode"], "ipvs");
    assert_eq!(doc["facts"]["modules"]["modules"]["ip_vs"], "missing");
    let f = must_find(&doc, "ipvs_modules_missing");
    assert_eq!(f["severity"], "critical", "{f:#}");
    assert_eq!(f["evidence"]["proxy_mode"], "ipvs");
    assert!(f["evidence"]["missing"]
        .as_array()
        .is_some_and(|m| m.contains(&"ip_vs".into())));
    let m = poll("ipvs mode in /metrics", || {
        let m = agent.metrics();
        let ipvs = common::series(&m, "proxywatch_kube_proxy_mode{mode=\"ipvs\"}") == Some(1.0);
        ipvs.then_some(m.clone()).ok_or(m)
    });
    // A state set: the mode change flips the old mode's series to 0 rather than ending it.
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_mode{mode=\"iptables\"}"),
        Some(0.0)
    );
    assert_eq!(agent.readyz().0, 503);

    // /healthz 503 with a lastUpdated 638 s before currentTime.
    let fresh = kube_proxy_fixture(HEALTHZ_FIXTURE);
    let current = "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918";
    let stale_at = "2024-06-16 13:00:00.000000000 +0000 UTC";
    let want_staleness = 638.185046097;
    let stale = fresh.replacen(current, &format!("{stale_at} m=+17961.736349821"), 1);
    assert!(stale != fresh && stale.contains(current), "{stale}");
    fake.set("/healthz", Reply::new(503, stale));
    let doc = poll("kube_proxy_unhealthy", || {
        let d = agent.snapshot()?;
        finding(&d, "kube_proxy_unhealthy")
            .is_some()
            .then_some(d.clone())
            .ok_or_else(|| format!("{:#}", d["facts"]["kube_proxy"]["healthz"]))
    });
    let h = &doc["facts"]["kube_proxy"]["healthz"];
    assert_eq!(h["status_code"], 503);
    assert_eq!(h["last_updated"], stale_at);
    let staleness = f64_at(&h["staleness_seconds"], "staleness_seconds");
    assert!((staleness - want_staleness).abs() < 1e-6, "{staleness}");
    let f = must_find(&doc, "kube_proxy_unhealthy");
    assert_eq!(f["severity"], "critical", "{f:#}");
    assert_eq!(f["evidence"]["healthz_status"], 503);
    assert!(f["summary"].as_str().unwrap().contains(stale_at), "{f:#}");
    assert_file_probes_ok(&doc);

    assert!(fake.hits("/metrics") >= 4 && fake.hits("/healthz") >= 4);
    agent.stop();
}

/// The network-programming histogram family.
const PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
const LAST_QUEUED: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";

/// The fixture with its last-queued and last-sync timestamps set (both gauges occur once).
fn with_timestamps(fixture: &str, queued: f64, synced: f64) -> String {
    let line = |name: &str| {
        fixture
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} sample in the fixture"))
            .to_string()
    };
    let (_, text) = replace_line(fixture, &line(LAST_QUEUED), Some(&format!("{LAST_QUEUED} {queued:.3}")));
    let (_, text) = replace_line(&text, &line(LAST_SYNC), Some(&format!("{LAST_SYNC} {synced:.3}")));
    text
}

#[test]
fn serve_raises_kube_proxy_sync_stale() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let fake = FakeKubeProxy::start();
    let url = fake.url();
    // Kept for the agent's life: its root is deleted on drop.
    let root = node("healthy-iptables");
    let mut agent = Agent::serve(&root, &url, &url, &["--kube-proxy.interval", "300ms"]);
    // The fixture as served: its last queued change is older than its last sync, nothing waits.
    poll("nothing queued", || {
        let d = agent.snapshot()?;
        let waited = &d["derived"]["kube_proxy"]["queued_unsynced_seconds"];
        (*waited == 0.0 && finding(&d, "kube_proxy_sync_stale").is_none())
            .then_some(())
            .ok_or_else(|| format!("queued_unsynced_seconds {waited}, findings {}", d["findings"]))
    });

    // A change queued 120 s ago, the last sync 600 s ago: over the 60 s default.
    let now = now_seconds();
    fake.set(
        "/metrics",
        Reply::ok(with_timestamps(&fixture, now - 120.0, now - 600.0)),
    );
    let f = poll("kube_proxy_sync_stale", || {
        let d = agent.snapshot()?;
        finding(&d, "kube_proxy_sync_stale")
            .cloned()
            .ok_or_else(|| format!("{:#}", d["derived"]["kube_proxy"]))
    });
    assert_eq!(f["severity"], "warning", "{f:#}");
    let waited = f64_at(&f["evidence"]["queued_unsynced_seconds"], "queued_unsynced_seconds");
    assert!(
        (120.0..150.0).contains(&waited),
        "waited {waited} s for a change queued 120 s ago"
    );
    let age = f64_at(&f["evidence"]["last_sync_age_seconds"], "last_sync_age_seconds");
    assert!((600.0..630.0).contains(&age), "last sync {age} s ago, want about 600");
    assert_eq!(f["evidence"]["warning_at_seconds"], 60.0);
    poll("sync_stale in /metrics", || {
        let m = agent.metrics();
        let level = common::series(&m, "proxywatch_finding_severity{id=\"kube_proxy_sync_stale\"}");
        (level == Some(2.0)).then_some(()).ok_or(format!("{level:?}"))
    });

    // kube-proxy syncs: the queued change is applied, the finding clears.
    let now = now_seconds();
    fake.set("/metrics", Reply::ok(with_timestamps(&fixture, now - 120.0, now)));
    poll("sync_stale cleared", || {
        let d = agent.snapshot()?;
        match finding(&d, "kube_proxy_sync_stale") {
            None if d["derived"]["kube_proxy"]["queued_unsynced_seconds"] == 0.0 => Ok(()),
            other => Err(format!("{other:?} {:#}", d["derived"]["kube_proxy"])),
        }
    });
    agent.stop();
}

#[test]
fn serve_raises_kube_proxy_network_programming_slow() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let fake = FakeKubeProxy::start();
    let url = fake.url();
    // Kept for the agent's life: its root is deleted on drop.
    let root = node("healthy-iptables");
    let mut agent = Agent::serve(&root, &url, &url, &["--kube-proxy.interval", "300ms"]);
    // The fixture as served again and again: an empty window, no finding.
    poll("an empty programming window", || {
        let d = agent.snapshot()?;
        let w = &d["derived"]["kube_proxy"]["network_programming"];
        (w["count"] == 0.0 && finding(&d, "kube_proxy_network_programming_slow").is_none())
            .then_some(())
            .ok_or_else(|| format!("window {w}, findings {}", d["findings"]))
    });

    // kube-proxy keeps programming slowly: 5 more changes of 12 s every poll (every
    // 20 ms or so), so every 300 ms window holds some, and nothing else changes.
    let mut added = 0;
    let f = poll("kube_proxy_network_programming_slow", || {
        added += 5;
        fake.set(
            "/metrics",
            Reply::ok(add_observations(&fixture, PROGRAMMING, 12.0, added)),
        );
        let d = agent.snapshot()?;
        let f = finding(&d, "kube_proxy_network_programming_slow")
            .cloned()
            .ok_or_else(|| format!("{:#}", d["derived"]["kube_proxy"]))?;
        assert!(finding(&d, "kube_proxy_sync_slow").is_none(), "{}", d["findings"]);
        Ok(f)
    });
    assert_eq!(f["severity"], "critical", "{f:#}");
    // Every change in the window fell in the (11, 12] bucket: p99 interpolates to 11.99.
    let p99 = f64_at(&f["evidence"]["p99_seconds"], "p99_seconds");
    let mut one = buckets(&add_observations(&fixture, PROGRAMMING, 12.0, 5), PROGRAMMING);
    let base = buckets(&fixture, PROGRAMMING);
    one = bucket_delta(&one, &base);
    assert_close(p99, histogram_quantile(0.99, &one), "window p99");
    assert_close(p99, 11.99, "window p99");
    assert!(f64_at(&f["evidence"]["count_window"], "count_window") >= 5.0, "{f:#}");
    assert_eq!(f["evidence"]["critical_at_seconds"], 5.0);

    // The changes stop (the same text served again): the window empties, the finding clears.
    poll("network_programming_slow cleared", || {
        let d = agent.snapshot()?;
        let w = &d["derived"]["kube_proxy"]["network_programming"];
        (w["count"] == 0.0 && finding(&d, "kube_proxy_network_programming_slow").is_none())
            .then_some(())
            .ok_or_else(|| format!("window {w}"))
    });
    assert!(fake.hits("/metrics") >= 4);
    agent.stop();
}

// ---------------------------------------------------------------------------
// 2. Bad answers, one `proxywatch check` each.

struct Run {
    doc: Value,
    code: i32,
}

/// `proxywatch check --format json` with no inherited environment and an empty PATH.
fn check(host_root: &Path, metrics_url: &str, healthz_url: &str, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let run = common::Check::new()
        .env_clear()
        .env("PATH", dir.path())
        .args(["--node-name", "fixture"])
        .host_root(host_root)
        .args(["--kube-proxy.metrics-url", metrics_url])
        .args(["--kube-proxy.healthz-url", healthz_url])
        .args(extra)
        .run();
    Run {
        doc: run.doc,
        code: run.code,
    }
}

/// `check` on the healthy fixture node against `fake`; the file probes must stay ok.
fn check_fake(fake: &FakeKubeProxy, extra: &[&str]) -> Run {
    let run = check(&node("healthy-iptables"), &fake.url(), &fake.url(), extra);
    assert_file_probes_ok(&run.doc);
    run
}

/// The kube-proxy probe failed with exactly `error`: no facts, a probe_failed warning naming it.
fn assert_failed(run: &Run, error: &str) {
    let probe = &run.doc["probes"]["kube_proxy"];
    assert_eq!(probe["status"], "failed", "{probe:#}");
    assert_eq!(probe["error"], error, "{probe:#}");
    assert_eq!(run.doc["facts"]["kube_proxy"], Value::Null);
    let f = must_find(&run.doc, "probe_failed");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["evidence"]["kube_proxy"], error);
    assert_eq!(run.code, 1, "a failed probe is a warning");
}

#[test]
fn nothing_listening_and_no_process_is_absent() {
    let url = closed_url();
    let run = check(&node("healthy-iptables"), &url, &url, &[]);
    assert_file_probes_ok(&run.doc);
    let probe = &run.doc["probes"]["kube_proxy"];
    assert_eq!(probe["status"], "absent", "{probe:#}");
    assert_eq!(
        probe["error"],
        format!("no kube-proxy process and nothing listening on {url} or {url}")
    );
    assert_eq!(run.doc["facts"]["kube_proxy"], Value::Null);
    assert!(finding(&run.doc, "kube_proxy_unhealthy").is_none());
    assert_eq!(run.code, 0, "{:#}", run.doc["findings"]);
}

#[test]
fn no_answer_within_the_timeout() {
    let fake = FakeKubeProxy::start();
    for path in ["/metrics", "/proxyMode", "/healthz"] {
        let mut slow = fake.reply(path);
        slow.delay = Duration::from_secs(5);
        fake.set(path, slow);
    }
    let run = check_fake(&fake, &["--kube-proxy.timeout", "500ms"]);
    // A timeout is not "absent" (something listens) nor a probe failure: kube-proxy is down.
    let probe = &run.doc["probes"]["kube_proxy"];
    assert_eq!(probe["status"], "ok", "{probe:#}");
    let kp = &run.doc["facts"]["kube_proxy"];
    let url = fake.url();
    assert_eq!(kp["metrics_up"], false);
    assert_eq!(kp["metrics_error"], format!("{url}/metrics: no answer within 500ms"));
    assert_eq!(kp["healthz"]["error"], format!("{url}/healthz: no answer within 500ms"));
    assert_eq!(kp["healthz"]["status_code"], 0);
    assert_eq!(kp["mode"], Value::Null);
    assert_eq!(kp["sync"], Value::Null);
    assert_eq!((fake.hits("/metrics"), fake.hits("/healthz")), (1, 1));
}

#[test]
fn metrics_http_500() {
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", Reply::new(500, "internal error\n"));
    let run = check_fake(&fake, &[]);
    assert_eq!(run.doc["probes"]["kube_proxy"]["status"], "ok");
    let kp = &run.doc["facts"]["kube_proxy"];
    assert_eq!(kp["metrics_up"], false);
    assert_eq!(kp["metrics_error"], "HTTP 500");
    assert_eq!(kp["metrics"], Value::Null);
    assert_eq!(kp["mode"], "iptables", "/proxyMode still answers");
    assert_eq!(kp["healthz"]["status_code"], 200);
    assert!(finding(&run.doc, "kube_proxy_unhealthy").is_none(), "healthz says 200");
}

#[test]
fn body_over_the_cap_fails_the_probe() {
    let huge = Arc::new(vec![b'#'; 20 << 20]);
    for chunked in [false, true] {
        let fake = FakeKubeProxy::start();
        fake.set(
            "/metrics",
            Reply {
                status: 200,
                body: huge.clone(),
                delay: Duration::ZERO,
                chunked,
            },
        );
        let run = check_fake(&fake, &["--kube-proxy.max-body-bytes", "1048576"]);
        assert_failed(&run, &format!("{}/metrics: body exceeds 1048576 bytes", fake.url()));
    }
}

#[test]
fn malformed_sample_value_names_the_line() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let old = format!("{SYNC}_bucket{{le=\"1.024\"}} 20");
    let (line, text) = replace_line(&fixture, &old, Some(&format!("{SYNC}_bucket{{le=\"1.024\"}} abc")));
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", Reply::ok(text));
    let run = check_fake(&fake, &[]);
    let error = run.doc["probes"]["kube_proxy"]["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let prefix = format!("{}/metrics: line {line}: ", fake.url());
    assert!(error.starts_with(&prefix) && error.contains("\"abc\""), "{error}");
    assert_failed(&run, &error);
}

/// The kube-proxy probe's error, which must be one of `forms` (the agent may print the empty
/// label set of an unlabelled series as `{}`), checked as [`assert_failed`] does.
fn assert_failed_with_one_of(run: &Run, forms: &[String]) {
    let error = run.doc["probes"]["kube_proxy"]["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(forms.contains(&error), "{error:?} is none of {forms:#?}");
    assert_failed(run, &error);
}

/// `family` as histogram errors name an unlabelled series: bare, or with `{}`.
fn series_forms(family: &str) -> [String; 2] {
    [family.to_string(), format!("{family}{{}}")]
}

#[test]
fn histogram_without_inf_bucket() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let (removed, text) = replace_line(&fixture, &format!("{SYNC}_bucket{{le=\"+Inf\"}} 23"), None);
    // The family's lines in the served text: from its # HELP to its _count.
    let first = text
        .lines()
        .position(|l| l.starts_with(&format!("# HELP {SYNC} ")))
        .unwrap()
        + 1;
    let last = text
        .lines()
        .position(|l| l.starts_with(&format!("{SYNC}_count ")))
        .unwrap()
        + 1;
    assert!(first < removed && removed <= last);
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", Reply::ok(text));
    let run = check_fake(&fake, &[]);
    let error = run.doc["probes"]["kube_proxy"]["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    // It names a line of the family (the agent picks the series' last line).
    let line: usize = error
        .strip_prefix(&format!("{}/metrics: line ", fake.url()))
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no line in {error:?}"));
    assert!(
        (first..=last).contains(&line),
        "line {line} is outside {first}..={last}: {error}"
    );
    let forms = series_forms(SYNC).map(|s| format!("{}/metrics: line {line}: {s}: no le=\"+Inf\" bucket", fake.url()));
    assert_failed_with_one_of(&run, &forms);
}

#[test]
fn histogram_with_decreasing_buckets() {
    let fixture = kube_proxy_fixture(METRICS_FIXTURE);
    let old = format!("{SYNC}_bucket{{le=\"1.024\"}} 20");
    let (line, text) = replace_line(&fixture, &old, Some(&format!("{SYNC}_bucket{{le=\"1.024\"}} 5")));
    let fake = FakeKubeProxy::start();
    fake.set("/metrics", Reply::ok(text));
    let run = check_fake(&fake, &[]);
    let forms = series_forms(SYNC).map(|s| {
        format!(
            "{}/metrics: line {line}: {s}: bucket le=1.024 has count 5, below 18 of the bucket \
             before it (le=0.512); buckets must not decrease",
            fake.url()
        )
    });
    assert_failed_with_one_of(&run, &forms);
}

// ---------------------------------------------------------------------------
// 3. A real process named kube-proxy in the real /proc.

/// A copy of `/bin/sleep` named `kube-proxy`, running `sleep 600`; killed and reaped on drop.
struct FakeProcess {
    child: Child,
    started: Instant,
}

impl FakeProcess {
    fn start(binary: &Path) -> FakeProcess {
        for _ in 0..50 {
            match Command::new(binary)
                .arg("600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
            {
                Ok(child) => {
                    return FakeProcess {
                        child,
                        started: Instant::now(),
                    }
                }
                // ETXTBSY: another test thread forked while the copy was still open for writing.
                Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => panic!("{}: {e}", binary.display()),
            }
        }
        panic!("{}: text file busy", binary.display());
    }

    fn pid(&self) -> i64 {
        i64::from(self.child.id())
    }
}

impl Drop for FakeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// PIDs whose comm is `kube-proxy` in the real /proc.
fn kube_proxy_pids() -> Vec<i64> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == "kube-proxy") {
            pids.push(pid);
        }
    }
    pids
}

fn now_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn real_process_facts_and_restart() {
    // Processes named kube-proxy: no other test's agent reads the live /proc meanwhile.
    let _kube_proxy = common::kube_proxy_process_lock();
    let others = kube_proxy_pids();
    if !others.is_empty() {
        let msg = format!("processes named kube-proxy already run here ({others:?}): the probe could pick them");
        assert!(!common::in_ci(), "{msg} (CI=true: not skipping)");
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("kube-proxy");
    std::fs::copy("/bin/sleep", &binary).expect("copy /bin/sleep");
    let first = FakeProcess::start(&binary);
    let closed = closed_url();

    // One check on the real /proc: the process facts, and endpoints that do not answer.
    let run = check(Path::new("/"), &closed, &closed, &[]);
    let kp = kp_facts(&run.doc).unwrap_or_else(|e| panic!("{e}"));
    let p = &kp["process"];
    assert_eq!(p["pid"], first.pid(), "{p:#}");
    let rss = p["resident_memory_bytes"].as_u64().unwrap();
    assert!((100 << 10..=50 << 20).contains(&rss), "rss {rss}");
    assert!(p["threads"].as_i64().unwrap() >= 1, "{p:#}");
    let start = f64_at(&p["start_time_seconds"], "start_time_seconds");
    assert!(
        (start - now_seconds()).abs() < 60.0,
        "start {start}, now {}",
        now_seconds()
    );
    assert_eq!(kp["metrics_up"], false);
    assert_eq!(kp["metrics_error"], format!("{closed}/metrics: connection refused"));
    // A process named kube-proxy with nothing on its ports: a warning, never critical.
    let f = must_find(&run.doc, "kube_proxy_unhealthy");
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert_eq!(f["evidence"]["pid"], first.pid(), "{f:#}");

    // serve sees the process, then a new one with the same name: one restart.
    let mut agent = Agent::serve(Path::new("/"), &closed, &closed, &["--kube-proxy.interval", "300ms"]);
    let doc = poll("the first kube-proxy seen", || {
        let d = agent.snapshot()?;
        let pid = &kp_facts(&d)?["process"]["pid"];
        (*pid == first.pid())
            .then_some(d.clone())
            .ok_or_else(|| pid.to_string())
    });
    assert_eq!(doc["derived"]["kube_proxy"]["restarts"], 0);
    // Start times have a 1 s tolerance: the second process must start later than that.
    let wait = Duration::from_millis(2500).saturating_sub(first.started.elapsed());
    std::thread::sleep(wait);
    drop(first);
    let second = FakeProcess::start(&binary);
    let doc = poll("the restart", || {
        let d = agent.snapshot()?;
        let kp = kp_facts(&d)?;
        let restarts = &d["derived"]["kube_proxy"]["restarts"];
        let ok = kp["process"]["pid"] == second.pid() && *restarts == 1;
        ok.then_some(d.clone())
            .ok_or_else(|| format!("pid {} restarts {restarts}", kp["process"]["pid"]))
    });
    let f = must_find(&doc, "kube_proxy_restarted");
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert_eq!(f["evidence"]["restarts"], 1);
    let m = poll("restarts_total in /metrics", || {
        let m = agent.metrics();
        let ok = common::series(&m, "proxywatch_kube_proxy_restarts_total") == Some(1.0);
        ok.then_some(m.clone()).ok_or(m)
    });
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_process_start_time_seconds").map(|s| s > start + 1.0),
        Some(true)
    );
    agent.stop();
    drop(second);
}

/// `--kube-proxy.process-name`: a kube-proxy installed under a name longer than comm keeps
/// (15 bytes) is found by its full name, argv[0] and comm both; the default name does not take it.
#[test]
fn process_name_flag_finds_a_renamed_binary_by_comm_and_argv0() {
    let name = "kube-proxy-renamed-for-test";
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join(name);
    std::fs::copy("/bin/sleep", &binary).expect("copy /bin/sleep");
    let renamed = FakeProcess::start(&binary);
    let closed = closed_url();
    let pid_seen = |extra: &[&str]| {
        let run = check(Path::new("/"), &closed, &closed, extra);
        let kp = &run.doc["facts"]["kube_proxy"];
        (kp["process"]["pid"].clone(), run.doc["probes"]["kube_proxy"].clone())
    };
    let (pid, probe) = pid_seen(&["--kube-proxy.process-name", name]);
    assert_eq!(pid, renamed.pid(), "{probe:#}");
    // Its comm is the name's first 15 bytes: a process whose comm alone matches is not a candidate.
    let (pid, _) = pid_seen(&["--kube-proxy.process-name", &name[..15]]);
    assert_ne!(pid, renamed.pid());
    // The default name never takes it.
    let (pid, _) = pid_seen(&[]);
    assert_ne!(pid, renamed.pid());
    drop(renamed);
}

/// A draining node (issue 41): kube-proxy's `/healthz` 503 with `nodeEligible: false` while
/// `/livez` 200 is kube_proxy_node_draining (info), neither kube_proxy_unhealthy nor any critical;
/// the same 503 with `nodeEligible: true` (and `/livez` 503, as kube-proxy answers then) stays
/// kube_proxy_unhealthy critical; without `/livez` (404), `nodeEligible: false` alone tells.
#[test]
fn a_draining_nodes_healthz_503_is_info_not_unhealthy() {
    let fake = FakeKubeProxy::start();
    let body = |eligible: bool| {
        kube_proxy_fixture(HEALTHZ_FIXTURE).replace("\"nodeEligible\": true", &format!("\"nodeEligible\": {eligible}"))
    };
    assert!(body(false).contains("\"nodeEligible\": false"));
    let livez = r#"{"lastUpdated": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.92","currentTime": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.92"}"#;

    fake.set("/healthz", Reply::new(503, body(false)));
    fake.set("/livez", Reply::ok(livez));
    let run = check_fake(&fake, &[]);
    let kp = &run.doc["facts"]["kube_proxy"];
    assert_eq!(kp["metrics_up"], true, "{kp:#}");
    assert_eq!(kp["healthz"]["node_eligible"], false);
    assert_eq!(kp["healthz"]["livez_status"], 200);
    let f = must_find(&run.doc, "kube_proxy_node_draining");
    assert_eq!(f["severity"], "info", "{f:#}");
    assert!(f["summary"].as_str().unwrap().contains("draining"), "{f:#}");
    let loud: Vec<&Value> = run.doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            ["kube_proxy_unhealthy", "kube_proxy_down"].contains(&f["id"].as_str().unwrap())
                || f["severity"] == "critical"
        })
        .collect();
    assert!(loud.is_empty(), "{loud:#?}");
    // The fixture's own scrape has a slow network-programming p99 (a warning): exit 1, not 2.
    assert_eq!(run.code, 1, "{:#}", run.doc["findings"]);
    assert!(fake.hits("/livez") >= 1);

    // An older kube-proxy without /livez: nodeEligible false alone.
    fake.set("/livez", Reply::new(404, "404 page not found\n"));
    let run = check_fake(&fake, &[]);
    assert_eq!(must_find(&run.doc, "kube_proxy_node_draining")["severity"], "info");
    assert!(
        finding(&run.doc, "kube_proxy_unhealthy").is_none(),
        "{:#}",
        run.doc["findings"]
    );
    assert_eq!(run.code, 1);

    // Eligible: the 503 is kube-proxy's own, as before.
    fake.set("/healthz", Reply::new(503, body(true)));
    fake.set("/livez", Reply::new(503, livez));
    let run = check_fake(&fake, &[]);
    assert_eq!(must_find(&run.doc, "kube_proxy_unhealthy")["severity"], "critical");
    assert!(finding(&run.doc, "kube_proxy_node_draining").is_none());
    assert_eq!(run.code, 2);
}
