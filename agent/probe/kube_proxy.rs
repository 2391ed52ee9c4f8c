//! kube-proxy itself, read locally: its mode (`/proxyMode`), its metrics
//! (sync and network-programming latency), its health endpoint, and its
//! process (CPU, memory, threads, start time, cgroup limits).
//!
//! The parsers live in the submodules and `crate::promtext`; this file holds the facts and the
//! thin probe. kube-proxy replaced by something else (nothing listening, no
//! process) is "absent", not a failure.

pub mod healthz;
pub mod metrics;
pub mod proxy_mode;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use self::metrics::KubeProxyMetrics;
use super::parse::{quote, ParseError};
use super::{ProbeError, Probed};
use crate::fetch::{self, FetchError};
use crate::host::Host;
use crate::promtext::{self, Histogram};

/// Where kube-proxy is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Base URL of the metrics server (`/metrics`, `/proxyMode`).
    pub metrics_url: String,
    /// Base URL of the health server (`/healthz`).
    pub healthz_url: String,
    /// Timeout of each request.
    pub timeout: Duration,
    /// Bodies larger than this fail the probe.
    pub max_body_bytes: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthzFacts {
    /// HTTP status: 200 healthy, 503 unhealthy.
    pub status_code: u16,
    pub last_updated: Option<String>,
    pub current_time: Option<String>,
    /// currentTime - lastUpdated, in seconds (0 while healthy: kube-proxy reports them equal).
    pub staleness_seconds: Option<f64>,
    /// Why the health endpoint could not be read, when it could not.
    pub error: Option<String>,
    /// Something accepted the connection but did not answer in time: a wedged
    /// kube-proxy, unlike "connection refused" (nothing there).
    #[serde(default)]
    pub timed_out: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFacts {
    pub pid: i32,
    /// Unix time the process started, in seconds.
    pub start_time_seconds: f64,
    /// User + system CPU time, in seconds.
    pub cpu_seconds_total: f64,
    pub resident_memory_bytes: u64,
    pub threads: i64,
    /// The memory limit of its cgroup, in bytes, when there is one.
    pub memory_limit_bytes: Option<u64>,
    /// The CPU limit of its cgroup, in cores, when there is one.
    pub cpu_limit_cores: Option<f64>,
}

/// A latency histogram reduced to what an SRE reads: quantiles, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// p50 / p99 over the window since the previous read (bucket deltas, as
    /// histogram_quantile(rate(...)) would); None when nothing happened in it.
    pub p50_window: Option<f64>,
    pub p99_window: Option<f64>,
    /// Events in that window.
    pub count_window: Option<f64>,
    /// Length of that window, in seconds.
    pub window_seconds: Option<f64>,
    /// p50 / p99 since kube-proxy started.
    pub p50_since_start: Option<f64>,
    pub p99_since_start: Option<f64>,
    pub count_since_start: f64,
}

impl Latency {
    pub fn since_start(h: &Histogram) -> Self {
        Latency {
            p50_since_start: promtext::quantile(0.5, &h.buckets),
            p99_since_start: promtext::quantile(0.99, &h.buckets),
            count_since_start: h.count,
            ..Default::default()
        }
    }

    /// Fills the window quantiles from the previous reading of the same histogram.
    pub fn with_window(mut self, newer: &Histogram, older: Option<&Histogram>, seconds: f64) -> Self {
        if let Some(d) = older.and_then(|o| promtext::delta(newer, o)) {
            self.count_window = Some(d.count);
            self.window_seconds = Some(seconds);
            self.p50_window = promtext::quantile(0.5, &d.buckets);
            self.p99_window = promtext::quantile(0.99, &d.buckets);
        }
        self
    }

    /// The p99 checks use: over the window when there is one, else since start.
    pub fn p99(&self) -> Option<f64> {
        match self.count_window {
            Some(_) => self.p99_window,
            None => self.p99_since_start,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeProxyFacts {
    /// `/proxyMode`: iptables, ipvs, nftables...; None when unreachable.
    pub mode: Option<String>,
    /// Whether `/metrics` answered.
    pub metrics_up: bool,
    /// Why `/metrics` could not be read, when it could not.
    pub metrics_error: Option<String>,
    pub metrics: Option<KubeProxyMetrics>,
    pub sync: Option<Latency>,
    pub network_programming: Option<Latency>,
    /// Seconds since kube-proxy's last successful sync (at the time of reading).
    pub last_sync_age_seconds: Option<f64>,
    /// Seconds a queued change has waited without a sync; 0 when nothing waits.
    pub queued_unsynced_seconds: Option<f64>,
    pub healthz: Option<HealthzFacts>,
    pub process: Option<ProcessFacts>,
    /// Restarts seen since the agent started (a changed process start time).
    pub restarts: u64,
    /// Unix time of the latest restart seen, in seconds.
    pub last_restart_seconds: Option<f64>,
}

/// Finds the kube-proxy process (comm `kube-proxy`) under `<host root>/proc`.
pub fn find_process(host: &Host) -> Result<Option<ProcessFacts>, ProbeError> {
    let proc_dir = host.path("/proc");
    let procs = match procfs::process::all_processes_with_root(&proc_dir) {
        Ok(p) => p,
        Err(e) => return Err(ProbeError::Inconsistent(format!("{}: {e}", proc_dir.display()))),
    };
    for p in procs.flatten() {
        // Processes come and go while we read: skip what vanished.
        let Ok(stat) = p.stat() else { continue };
        if stat.comm == "kube-proxy" {
            return Ok(Some(process_facts(host, &p, &stat)?));
        }
    }
    Ok(None)
}

fn process_facts(
    host: &Host,
    p: &procfs::process::Process,
    stat: &procfs::process::Stat,
) -> Result<ProcessFacts, ProbeError> {
    let ticks = procfs::ticks_per_second() as f64;
    let btime = boot_time(host)?;
    let (memory_limit_bytes, cpu_limit_cores) = cgroup_limits(host, p.pid);
    Ok(ProcessFacts {
        pid: stat.pid,
        start_time_seconds: btime + stat.starttime as f64 / ticks,
        cpu_seconds_total: (stat.utime + stat.stime) as f64 / ticks,
        resident_memory_bytes: stat.rss.saturating_mul(procfs::page_size()),
        threads: stat.num_threads,
        memory_limit_bytes,
        cpu_limit_cores,
    })
}

fn boot_time(host: &Host) -> Result<f64, ProbeError> {
    let text = host.read("/proc/stat")?;
    parse_btime(&host.path("/proc/stat").display().to_string(), &text).map_err(Into::into)
}

/// `btime` (boot time, Unix seconds) from `/proc/stat`.
pub fn parse_btime(source: &str, text: &str) -> Result<f64, ParseError> {
    for (i, line) in text.lines().enumerate() {
        if let Some(v) = line.strip_prefix("btime ") {
            return v
                .trim()
                .parse::<u64>()
                .map(|b| b as f64)
                .map_err(|_| ParseError::new(source, i + 1, format!("btime: expected seconds, found {}", quote(v))));
        }
    }
    Err(ParseError::whole(source, "no btime line"))
}

/// The memory and CPU limits of a process's cgroup (v2, or v1 memory), when set.
fn cgroup_limits(host: &Host, pid: i32) -> (Option<u64>, Option<f64>) {
    let Ok(Some(cg)) = host.read_optional(&format!("/proc/{pid}/cgroup")) else {
        return (None, None);
    };
    let (mut mem, mut cpu) = (None, None);
    for line in cg.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let read = |p: String| host.read_optional(&p).ok().flatten();
        if controllers.is_empty() {
            let base = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let base = base.display();
            mem = mem.or_else(|| read(format!("{base}/memory.max")).and_then(|v| v.trim().parse().ok()));
            cpu = cpu.or_else(|| read(format!("{base}/cpu.max")).and_then(|v| parse_cpu_max(&v)));
        } else if controllers.split(',').any(|c| c == "memory") {
            let v = read(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
            // v1 says "no limit" with a huge number.
            mem = mem.or_else(|| v.and_then(|v| v.trim().parse::<u64>().ok()).filter(|&b| b < 1 << 60));
        }
    }
    (mem, cpu)
}

/// cgroup v2 `cpu.max`: `max 100000` (no limit) or `QUOTA PERIOD`.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (period > 0.0).then(|| quota / period)
}

/// Reads kube-proxy's endpoints and process. Window quantiles, restarts and
/// ages are filled by the scheduler, which knows the previous reading.
pub async fn probe(host: Host, ep: &Endpoints) -> Result<Probed<KubeProxyFacts>, ProbeError> {
    let get = |path: &'static str, base: &str| {
        let url = fetch::join(base, path);
        async move { fetch::get(&url, ep.timeout, ep.max_body_bytes).await }
    };
    let (mode, metrics, health) = tokio::join!(
        get("/proxyMode", &ep.metrics_url),
        get("/metrics", &ep.metrics_url),
        get("/healthz", &ep.healthz_url)
    );
    let process = {
        let host = host.clone();
        super::blocking(super::ProbeName::KubeProxy, move || find_process(&host)).await?
    };
    let refused = |r: &Result<fetch::Fetched, FetchError>| matches!(r, Err(e) if e.is_refused());
    if process.is_none() && refused(&metrics) && refused(&health) {
        return Ok(Probed::Absent(format!(
            "no kube-proxy process and nothing listening on {} or {}",
            ep.metrics_url, ep.healthz_url
        )));
    }
    let mut facts = KubeProxyFacts {
        process,
        ..Default::default()
    };
    if let Ok(r) = &mode {
        if r.status == 200 {
            facts.mode = Some(proxy_mode::parse_proxy_mode(&r.body)?.as_str().to_string());
        }
    }
    match metrics {
        Ok(r) if r.status == 200 => {
            let m = metrics::extract(&fetch::join(&ep.metrics_url, "/metrics"), &r.body)?;
            facts.metrics_up = true;
            facts.sync = m.sync_duration.as_ref().map(Latency::since_start);
            facts.network_programming = m.network_programming.as_ref().map(Latency::since_start);
            facts.metrics = Some(m);
        }
        // A broken metrics endpoint on a running kube-proxy is a fact about kube-proxy
        // (reported as down), except garbage and oversize bodies, which fail the probe.
        Ok(r) => facts.metrics_error = Some(format!("HTTP {}", r.status)),
        Err(e @ FetchError::TooLarge { .. }) => return Err(ProbeError::Fetch(e)),
        Err(e) => facts.metrics_error = Some(e.to_string()),
    }
    facts.healthz = Some(match health {
        Ok(r) => {
            let mut h = HealthzFacts {
                status_code: r.status,
                ..Default::default()
            };
            match healthz::parse_healthz(&r.body) {
                Ok(parsed) => {
                    h.staleness_seconds = parsed.staleness_seconds().ok().flatten();
                    h.last_updated = Some(parsed.last_updated);
                    h.current_time = Some(parsed.current_time);
                }
                Err(e) => h.error = Some(e.to_string()),
            }
            h
        }
        Err(e) => HealthzFacts {
            timed_out: matches!(e, FetchError::Timeout { .. }),
            error: Some(e.to_string()),
            ..Default::default()
        },
    });
    Ok(Probed::Present(facts))
}

/// Derives what needs the previous reading: window quantiles, restarts, ages.
#[derive(Debug, Default)]
pub struct Tracker {
    previous: Option<(f64, KubeProxyMetrics)>,
    start_time: Option<f64>,
    restarts: u64,
    last_restart: Option<f64>,
}

impl Tracker {
    /// `now`: wall clock, Unix seconds.
    pub fn update(&mut self, facts: &mut KubeProxyFacts, now: f64) {
        // A restart: the process or its metrics report a new start time.
        let start = facts
            .process
            .as_ref()
            .map(|p| p.start_time_seconds)
            .or_else(|| facts.metrics.as_ref().and_then(|m| m.process_start_time_seconds));
        if let (Some(old), Some(new)) = (self.start_time, start) {
            if (new - old).abs() > 1.0 {
                self.restarts += 1;
                self.last_restart = Some(now);
            }
        }
        if start.is_some() {
            self.start_time = start;
        }
        facts.restarts = self.restarts;
        facts.last_restart_seconds = self.last_restart;

        if let Some(m) = &facts.metrics {
            let prev = self.previous.as_ref();
            let seconds = prev.map_or(0.0, |(t, _)| now - t);
            if let (Some(h), Some(l)) = (&m.sync_duration, facts.sync.take()) {
                let older = prev.and_then(|(_, p)| p.sync_duration.as_ref());
                facts.sync = Some(l.with_window(h, older, seconds));
            }
            if let (Some(h), Some(l)) = (&m.network_programming, facts.network_programming.take()) {
                let older = prev.and_then(|(_, p)| p.network_programming.as_ref());
                facts.network_programming = Some(l.with_window(h, older, seconds));
            }
            facts.last_sync_age_seconds = m.last_sync_timestamp_seconds.map(|t| (now - t).max(0.0));
            facts.queued_unsynced_seconds = match (m.last_queued_timestamp_seconds, m.last_sync_timestamp_seconds) {
                (Some(q), Some(s)) if q > s => Some((now - q).max(0.0)),
                (Some(_), _) => Some(0.0),
                _ => None,
            };
            self.previous = Some((now, m.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btime_and_cpu_max() {
        assert_eq!(
            parse_btime("s", "cpu 1 2\nbtime 1795990000\n").unwrap(),
            1_795_990_000.0
        );
        assert!(parse_btime("s", "cpu 1\n").is_err());
        assert!(parse_btime("s", "btime x\n").is_err());
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
    }

    fn metrics_with_sync(buckets: &[(f64, f64)], start: f64) -> KubeProxyMetrics {
        KubeProxyMetrics {
            sync_duration: Some(Histogram {
                buckets: buckets.to_vec(),
                count: buckets.last().unwrap().1,
                sum: 0.0,
            }),
            process_start_time_seconds: Some(start),
            last_sync_timestamp_seconds: Some(990.0),
            last_queued_timestamp_seconds: Some(995.0),
            ..Default::default()
        }
    }

    fn facts(m: KubeProxyMetrics) -> KubeProxyFacts {
        KubeProxyFacts {
            sync: m.sync_duration.as_ref().map(Latency::since_start),
            metrics: Some(m),
            ..Default::default()
        }
    }

    #[test]
    fn window_quantiles_follow_a_burst_of_slow_syncs() {
        let mut t = Tracker::default();
        let inf = f64::INFINITY;
        // 100 fast syncs (<= 0.1 s) since start.
        let mut f = facts(metrics_with_sync(
            &[(0.1, 100.0), (1.0, 100.0), (10.0, 100.0), (inf, 100.0)],
            500.0,
        ));
        t.update(&mut f, 1000.0);
        let s = f.sync.as_ref().unwrap();
        assert!(s.p99_since_start.unwrap() <= 0.1);
        assert_eq!(s.count_window, None, "first read: no window");
        assert_eq!(f.last_sync_age_seconds, Some(10.0));
        assert_eq!(f.queued_unsynced_seconds, Some(5.0), "queued at 995, last sync at 990");
        // Then 10 slow syncs (1-10 s): the window p99 moves, the since-start one barely.
        let mut f = facts(metrics_with_sync(
            &[(0.1, 100.0), (1.0, 100.0), (10.0, 110.0), (inf, 110.0)],
            500.0,
        ));
        t.update(&mut f, 1060.0);
        let s = f.sync.as_ref().unwrap();
        assert_eq!(s.count_window, Some(10.0));
        assert_eq!(s.window_seconds, Some(60.0));
        assert!(s.p99_window.unwrap() > 9.0, "{:?}", s.p99_window);
        assert_eq!(s.p99(), s.p99_window);
        assert_eq!(f.restarts, 0);
        // A restart: new start time, counters reset -> no window, restart counted.
        let mut f = facts(metrics_with_sync(
            &[(0.1, 1.0), (1.0, 1.0), (10.0, 1.0), (inf, 1.0)],
            1100.0,
        ));
        t.update(&mut f, 1120.0);
        assert_eq!(f.restarts, 1);
        assert_eq!(f.last_restart_seconds, Some(1120.0));
        assert_eq!(f.sync.as_ref().unwrap().count_window, None);
    }
}
