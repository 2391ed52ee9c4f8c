//! Findings that need time or a slow command, raised end to end by the real binary
//! (`proxywatch serve`, read through `/snapshot` and `/metrics`), not on hand-built
//! snapshots:
//!
//! - `conntrack_insert_failed`: the fixture node's `/proc/net/stat/nf_conntrack` is
//!   rewritten between conntrack probe runs with `insert_failed` risen on two CPUs;
//! - `conntrack_time_to_full`: its `nf_conntrack_count` grows at a fixed rate, written
//!   by the test from the clock; the trend is fitted over `--conntrack.trend-window 2s`;
//!   the finding clears once the growth stops;
//! - `iptables_save_slow`: a stand-in `iptables-nft-save` on PATH that sleeps before
//!   printing a valid save, against `--iptables.save-warning 400ms`;
//! - `ipvs_real_servers_lingering`: the fixture node's TCP real server at weight 0 with 12
//!   active connections in `/proc/net/ip_vs`, read every 200 ms against
//!   `--ipvs.weight-zero-warning 5s`; then set back to weight 100, to 0 again, and deleted.
//!
//! Each test first sees the finding absent on the same agent, so the finding comes
//! from the change the test makes. Files are replaced atomically (written beside,
//! then renamed): a torn read would be a different test (faults.rs has it).
use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Agent, Serve};
use serde_json::Value;

const STAT: &str = "proc/net/stat/nf_conntrack";
const COUNT: &str = "proc/sys/net/netfilter/nf_conntrack_count";
const MAX: &str = "proc/sys/net/netfilter/nf_conntrack_max";
/// How long a poll waits for the agent to reach a state (generous: the machine is shared).
const DEADLINE: Duration = Duration::from_secs(30);

/// A copy of a fixture node the test may rewrite.
fn node_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("pwfind-").tempdir().unwrap();
    let root = dir.path().join("node");
    common::copy_tree(&common::fixtures().join("nodes").join(name), &root);
    (dir, root)
}

fn write_executable(path: &Path, text: &str) {
    let tmp = path.with_extension("pwtmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `proxywatch serve` on `root` with nothing of this machine: no environment, PATH = `path`.
fn serve(root: &Path, path: &Path, extra: &[&str]) -> Agent {
    Serve::new()
        .env_clear()
        .env("PATH", path)
        .args(["--node-name", "findings", "--host-root"])
        .arg(root)
        .args(common::NO_KUBE_PROXY)
        .args(extra)
        .start()
}

fn snapshot(agent: &Agent) -> Result<Value, String> {
    agent.assert_running();
    match agent.get("/snapshot")? {
        (200, body) => serde_json::from_str(&body).map_err(|e| format!("/snapshot: {e}")),
        (code, body) => Err(format!("/snapshot: HTTP {code}: {body}")),
    }
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
}

/// Polls `/snapshot` until `want` returns Some; panics with its last complaint after DEADLINE.
fn poll<T>(agent: &Agent, what: &str, want: impl Fn(&Value) -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < DEADLINE {
        match snapshot(agent).and_then(|d| want(&d)) {
            Ok(t) => return t,
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!(
        "{what}: not reached within {DEADLINE:?}; last: {last}\nagent log:\n{}",
        agent.log()
    );
}

fn severity_series(id: &str) -> String {
    format!("proxywatch_finding_severity{{id=\"{id}\"}}")
}

/// Polls `/metrics` until the finding's severity series has `level`.
fn wait_metric(agent: &Agent, id: &str, level: f64) -> String {
    let start = Instant::now();
    loop {
        let m = agent.get_ok("/metrics");
        if common::series(&m, &severity_series(id)) == Some(level) {
            return m;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{}: not {level} within {DEADLINE:?}",
            severity_series(id)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

// ---------------------------------------------------------------------------
// conntrack_insert_failed

#[test]
fn conntrack_insert_failed_from_a_rising_counter() {
    let (_dir, root) = node_copy("healthy-iptables");
    let stat_path = root.join(STAT);
    let original = std::fs::read_to_string(&stat_path).unwrap();
    let cpus = original.lines().count() - 1;
    assert_eq!(cpus, 2, "the fixture has two CPU rows");
    let empty = tempfile::tempdir().unwrap();
    let agent = serve(
        &root,
        empty.path(),
        &["--conntrack.interval", "200ms", "--conntrack.window", "1m"],
    );
    // Two readings of the unchanged file: a window with no increase, no finding.
    poll(&agent, "a counter window without insert failures", |d| {
        let w = &d["derived"]["conntrack"]["window"];
        if w.is_object() && w["increase"]["insert_failed"] == 0 && finding(d, "conntrack_insert_failed").is_none() {
            Ok(())
        } else {
            Err(format!("window {w}, findings {}", d["findings"]))
        }
    });
    assert_eq!(
        common::series(&agent.get_ok("/metrics"), &severity_series("conntrack_insert_failed")),
        Some(0.0)
    );

    // insert_failed rises by 5 on CPU 0 and 2 on CPU 1.
    common::replace_file(
        &stat_path,
        &common::stat_with_column(&original, "insert_failed", &[5, 2]),
    );
    let f = poll(&agent, "conntrack_insert_failed", |d| {
        finding(d, "conntrack_insert_failed")
            .cloned()
            .ok_or_else(|| format!("findings {}", d["findings"]))
    });
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert_eq!(f["evidence"]["insert_failed_increase"], 7, "{f:#}");
    let m = wait_metric(&agent, "conntrack_insert_failed", 2.0);
    assert_eq!(
        common::series(&m, "proxywatch_conntrack_stat_insert_failed_total"),
        Some(7.0)
    );
    // Only insert_failed moved: no drop finding.
    let doc = snapshot(&agent).unwrap();
    assert!(finding(&doc, "conntrack_drops").is_none(), "{}", doc["findings"]);
    agent.stop_cleanly();
}

// ---------------------------------------------------------------------------
// conntrack_time_to_full

/// Writes `nf_conntrack_count` = start + rate × (seconds since the writer started),
/// every 20 ms, until dropped; the count then stays where it was.
struct Growth {
    stop: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<u64>>,
}

impl Growth {
    fn start(count: PathBuf, start: u64, rate_per_second: f64) -> Growth {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let writer = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut n = start;
            while !flag.load(Ordering::SeqCst) {
                n = start + (rate_per_second * t0.elapsed().as_secs_f64()) as u64;
                common::replace_file(&count, &format!("{n}\n"));
                std::thread::sleep(Duration::from_millis(20));
            }
            n
        });
        Growth {
            stop,
            writer: Some(writer),
        }
    }

    /// Stops the growth; the last count written.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.writer.take().unwrap().join().unwrap()
    }
}

impl Drop for Growth {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

#[test]
fn conntrack_time_to_full_from_a_growing_table() {
    const RATE: f64 = 2000.0; // entries per second
    let (_dir, root) = node_copy("healthy-iptables");
    let read = |rel: &str| -> u64 { std::fs::read_to_string(root.join(rel)).unwrap().trim().parse().unwrap() };
    let (start, max) = (read(COUNT), read(MAX));
    let empty = tempfile::tempdir().unwrap();
    let agent = serve(
        &root,
        empty.path(),
        &["--conntrack.interval", "100ms", "--conntrack.trend-window", "2s"],
    );
    // A flat table: a trend (slope 0, never full), no finding.
    poll(&agent, "a flat trend", |d| {
        let tr = &d["derived"]["conntrack"]["trend"];
        if tr["slope_per_second"] == 0.0
            && tr["seconds_to_full"].is_null()
            && finding(d, "conntrack_time_to_full").is_none()
        {
            Ok(())
        } else {
            Err(format!("trend {tr}, findings {}", d["findings"]))
        }
    });

    // Growth at RATE: full in (max - count) / RATE, under 10 minutes: critical.
    let growth = Growth::start(root.join(COUNT), start, RATE);
    // Read once the growth has lasted longer than the fit window (2 s) plus a probe
    // interval: the fit then holds growing readings only (earlier, flat ones pull the
    // median slope down, as they should).
    let grown = Instant::now() + Duration::from_millis(2500);
    let (f, entries) = poll(&agent, "conntrack_time_to_full", |d| {
        let f = finding(d, "conntrack_time_to_full").ok_or_else(|| format!("findings {}", d["findings"]))?;
        if Instant::now() < grown {
            return Err(format!("growing for less than the fit window: {f}"));
        }
        Ok((f.clone(), d["facts"]["conntrack"]["entries"].as_u64().unwrap()))
    });
    assert_eq!(f["severity"], "critical", "{f:#}");
    let slope = f["evidence"]["slope_per_second"].as_f64().unwrap();
    assert!(
        (0.7 * RATE..1.3 * RATE).contains(&slope),
        "fitted growth {slope}/s, the test grows the table at {RATE}/s: {f:#}"
    );
    let to_full = f["evidence"]["seconds_to_full"].as_f64().unwrap();
    let want = (max - entries) as f64 / RATE;
    assert!(
        (0.7 * want..1.3 * want).contains(&to_full),
        "seconds_to_full {to_full}, the test computes {want:.0} ({entries} of {max} at {RATE}/s): {f:#}"
    );
    assert!(
        to_full < 600.0,
        "{to_full}: under --conntrack.time-to-full-critical (10m)"
    );
    wait_metric(&agent, "conntrack_time_to_full", 3.0);

    // The growth stops: once the fit window holds only the flat count, the finding clears.
    let last = growth.stop();
    poll(&agent, "the finding cleared", |d| {
        match finding(d, "conntrack_time_to_full") {
            None => Ok(()),
            Some(f) => Err(format!("{f}")),
        }
    });
    assert_eq!(
        snapshot(&agent).unwrap()["facts"]["conntrack"]["entries"].as_u64(),
        Some(last)
    );
    agent.stop_cleanly();
}

// ---------------------------------------------------------------------------
// iptables_save_slow

/// A stand-in `iptables-nft-save` that waits `delay` seconds, then prints `save`
/// with shell builtins (the agent's PATH holds nothing else).
fn save_stand_in(bin: &Path, save: &Path, delay: Option<f64>) {
    let wait = delay.map(|s| format!("/bin/sleep {s}\n")).unwrap_or_default();
    write_executable(
        &bin.join("iptables-nft-save"),
        &format!(
            "#!/bin/sh\n{wait}while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done < '{}'\n",
            save.display()
        ),
    );
}

#[test]
fn iptables_save_slow_from_a_slow_save() {
    const SLEEP: f64 = 0.8;
    let save = common::fixtures().join("iptables/kube-20x1-no-hint-no-canary-iptables-nft-save.txt");
    let bin = tempfile::tempdir().unwrap();
    save_stand_in(bin.path(), &save, None);
    // Without its netlink recording, the iptables probe runs the save each time.
    let node = common::files_only_node("healthy-iptables");
    let agent = serve(
        &node,
        bin.path(),
        &[
            "--iptables.interval",
            "300ms",
            "--iptables.save-warning",
            "400ms",
            "--iptables.save-critical",
            "5s",
        ],
    );
    // The prompt save: the probe is ok and no finding.
    poll(&agent, "a prompt save without finding", |d| {
        let ok = d["probes"]["iptables"]["status"] == "ok";
        if ok && finding(d, "iptables_save_slow").is_none() {
            Ok(())
        } else {
            Err(format!("{} {}", d["probes"]["iptables"], d["findings"]))
        }
    });

    // The same save after SLEEP seconds: a warning (400 ms ≤ duration < 5 s).
    save_stand_in(bin.path(), &save, Some(SLEEP));
    let f = poll(&agent, "iptables_save_slow", |d| {
        finding(d, "iptables_save_slow")
            .cloned()
            .ok_or_else(|| format!("{} {}", d["probes"]["iptables"], d["findings"]))
    });
    assert_eq!(f["severity"], "warning", "{f:#}");
    assert_eq!(f["evidence"]["command"], "iptables-nft-save", "{f:#}");
    let took = f["evidence"]["duration_seconds"].as_f64().unwrap();
    assert!(
        (SLEEP..5.0).contains(&took),
        "duration {took} s for a save sleeping {SLEEP} s"
    );
    assert_eq!(f["evidence"]["warning_at_seconds"], 0.4);
    let m = wait_metric(&agent, "iptables_save_slow", 2.0);
    let d = common::series(
        &m,
        "proxywatch_iptables_save_duration_seconds{backend=\"nft\",family=\"ipv4\"}",
    );
    assert!(d.is_some_and(|d| d >= SLEEP), "{d:?}");
    agent.stop_cleanly();
}

// ---------------------------------------------------------------------------
// ipvs_real_servers_lingering

const IP_VS: &str = "proc/net/ip_vs";
/// The weight-0 real server of ipvs-mode-sysctls-off with connections: 192.168.49.32:3306
/// under 192.168.0.55:3306, 12 active and 3 inactive.
const HELD_LINE: &str = "  -> C0A83120:0CEA      Tunnel  0      12         3         ";

/// The snapshot's age of 192.168.49.32:3306 under 192.168.0.55:3306: (seconds, since).
fn held_age(d: &Value) -> Option<(f64, f64)> {
    d["derived"]["ipvs_weight_zero"]["real_servers"]
        .as_array()?
        .iter()
        .find(|a| a["address"] == "192.168.49.32" && a["service"]["address"] == "192.168.0.55")
        .map(|a| {
            (
                a["seconds"].as_f64().unwrap(),
                a["since_timestamp_seconds"].as_f64().unwrap(),
            )
        })
}

#[test]
fn ipvs_real_server_left_at_weight_zero_lingers_with_its_age_and_clears() {
    let (_dir, root) = node_copy("ipvs-mode-sysctls-off");
    let path = root.join(IP_VS);
    let original = std::fs::read_to_string(&path).unwrap();
    assert_eq!(original.matches(HELD_LINE).count(), 1, "the fixture's line");
    // Long enough that the first snapshot, a moment after the first reading, is younger on a
    // loaded machine too.
    const AFTER: f64 = 5.0;
    let empty = tempfile::tempdir().unwrap();
    let agent = serve(
        &root,
        empty.path(),
        &["--ipvs.interval", "200ms", "--ipvs.weight-zero-warning", "5s"],
    );
    // Seen at weight 0, younger than the threshold: aged, not lingering.
    let (young, since) = poll(&agent, "the real server aged", |d| {
        held_age(d).ok_or_else(|| format!("derived {}", d["derived"]))
    });
    assert!(young < AFTER, "{young}: the machine was too slow to see it young");
    let doc = snapshot(&agent).unwrap();
    if held_age(&doc).unwrap().0 < AFTER {
        assert!(
            finding(&doc, "ipvs_real_servers_lingering").is_none(),
            "{}",
            doc["findings"]
        );
    }
    // Past it: a warning naming it, with its connections and age, counted from that first reading.
    let f = poll(&agent, "ipvs_real_servers_lingering warning", |d| {
        finding(d, "ipvs_real_servers_lingering")
            .filter(|f| f["severity"] == "warning")
            .cloned()
            .ok_or_else(|| format!("findings {}", d["findings"]))
    });
    let first = &f["evidence"]["first"][0];
    assert_eq!(first["virtual_server"], "TCP 192.168.0.55:3306", "{f:#}");
    assert_eq!(first["real_server"], "192.168.49.32:3306");
    assert_eq!(
        (
            first["active_connections"].as_u64(),
            first["inactive_connections"].as_u64()
        ),
        (Some(12), Some(3))
    );
    assert!(first["seconds_at_weight_zero"].as_f64().unwrap() >= AFTER, "{first:#}");
    assert_eq!(
        first["since_timestamp_seconds"].as_f64(),
        Some(since),
        "the first reading's time"
    );
    // The fixture's two other weight-0 real servers (no connections) linger too, as info.
    assert_eq!(
        (
            f["evidence"]["lingering"].as_u64(),
            f["evidence"]["held_by_active_connections"].as_u64()
        ),
        (Some(3), Some(1))
    );
    let m = wait_metric(&agent, "ipvs_real_servers_lingering", 2.0);
    assert_eq!(
        common::series(&m, "proxywatch_ipvs_weight_zero_real_servers{protocol=\"tcp\"}"),
        Some(3.0)
    );
    assert_eq!(
        common::series(&m, "proxywatch_ipvs_weight_zero_real_servers{protocol=\"udp\"}"),
        Some(0.0)
    );
    assert!(common::series(&m, "proxywatch_ipvs_weight_zero_max_seconds").unwrap() >= AFTER);

    // Back at weight 100: forgotten, and what lingers is info only.
    let back = original.replace(
        HELD_LINE,
        "  -> C0A83120:0CEA      Tunnel  100    12         3         ",
    );
    common::replace_file(&path, &back);
    let f = poll(&agent, "the warning gone", |d| {
        let f = finding(d, "ipvs_real_servers_lingering").cloned();
        match (&f, held_age(d)) {
            (Some(f), None) if f["severity"] == "info" => Ok(f.clone()),
            _ => Err(format!("finding {f:?}, age {:?}", held_age(d))),
        }
    });
    assert_eq!(f["evidence"]["held_by_active_connections"], 0, "{f:#}");
    wait_metric(&agent, "ipvs_real_servers_lingering", 1.0);
    // At 0 again: aged afresh from that reading.
    common::replace_file(&path, &original);
    let (_, again) = poll(&agent, "aged afresh", |d| {
        held_age(d).ok_or_else(|| format!("derived {}", d["derived"]))
    });
    assert!(again > since, "{again} after {since}");
    // Gone from the table (kube-proxy deleted it): forgotten.
    common::replace_file(&path, &original.replace(&format!("{HELD_LINE}\n"), ""));
    poll(&agent, "forgotten once deleted", |d| match held_age(d) {
        None if d["derived"]["ipvs_weight_zero"].is_object() => Ok(()),
        a => Err(format!("age {a:?}")),
    });
    agent.stop_cleanly();
}
