//! Load and soak: 64 connections hammer /metrics and /snapshot while the
//! probes run. Asserts no errors other than the designed 503 (load shedding)
//! and bounded memory; prints p50/p99 and RSS before and after. A short run in
//! CI; the benchmark runs it longer:
//!
//!     PROXYWATCH_SOAK_SECONDS=30 cargo test --release --test http load:: -- --nocapture
use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Serve;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn get(addr: SocketAddr, path: &str) -> Result<u16, String> {
    common::http_get(addr, path).map(|(code, _)| code)
}

#[test]
fn sixty_four_connections_see_no_errors_and_memory_stays_flat() {
    let seconds: u64 = std::env::var("PROXYWATCH_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let empty = tempfile::tempdir().unwrap();
    // Waits for the first snapshot (/metrics 200).
    let agent = Serve::new()
        .env_clear()
        .env("PATH", empty.path())
        .arg("--host-root")
        .arg(common::fixtures().join("nodes/conntrack-near-full-drops"))
        .args(common::NO_KUBE_PROXY)
        // Probes keep publishing new snapshots during the load.
        .args([
            "--conntrack.interval",
            "100ms",
            "--sysctls.interval",
            "200ms",
            "--modules.interval",
            "500ms",
        ])
        .start();
    let (addr, pid) = (agent.addr(), agent.pid());
    // Warm up, then measure the baseline RSS.
    for _ in 0..200 {
        let _ = get(addr, "/snapshot");
    }
    let rss_before = rss_kib(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..64)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let path = if i % 2 == 0 { "/metrics" } else { "/snapshot" };
                let (mut ok, mut shed, mut errors, mut latencies) = (0u64, 0u64, Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    match get(addr, path) {
                        Ok(200) => ok += 1,
                        Ok(503) => shed += 1,
                        Ok(other) => errors.push(format!("{path}: HTTP {other}")),
                        Err(e) => errors.push(format!("{path}: {e}")),
                    }
                    latencies.push(t.elapsed());
                }
                (ok, shed, errors, latencies)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut shed, mut errors, mut latencies) = (0, 0, Vec::new(), Vec::new());
    for w in workers {
        let (o, s, e, l) = w.join().unwrap();
        ok += o;
        shed += s;
        errors.extend(e);
        latencies.extend(l);
    }
    let rss_after = rss_kib(pid);
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "load: {seconds} s, 64 connections: {ok} ok, {shed} shed (503), {} errors; p50 {:?} p99 {:?}; RSS {} -> {} KiB",
        errors.len(),
        pct(0.5),
        pct(0.99),
        rss_before,
        rss_after
    );
    assert!(
        errors.is_empty(),
        "errors under load: {:?}",
        &errors[..errors.len().min(10)]
    );
    assert!(ok > 100, "only {ok} successful requests");
    // Flat: nothing per request is kept. The bound is loose on purpose (allocator noise).
    assert!(
        rss_after < rss_before + 16 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
}
