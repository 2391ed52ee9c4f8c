//! kube-proxy itself, read locally: its mode (`/proxyMode`), its metrics
//! (sync and network-programming latency), its health endpoint, and its
//! process (CPU, memory, threads, start time, cgroup limits).
//!
//! The parsers live in the submodules and `crate::promtext`; which process is kube-proxy is
//! `process`'s; this file holds the facts and the thin probe. kube-proxy replaced by something
//! else (nothing listening, no process that looks like it) is "absent", not a failure.

pub mod cgroup;
pub mod healthz;
pub mod metrics;
pub mod process;
pub mod proxy_mode;

pub use cgroup::{parse_cpu_max, CgroupFacts, CpuStat};
pub use process::{parse_btime, Identity, ProcessCandidate};

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use self::metrics::KubeProxyMetrics;
use super::{Deadline, ProbeContext, ProbeError, Probed};
use crate::fetch::{self, FetchError};
use crate::promtext::{self, Histogram};

/// Where kube-proxy is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Base URL of the metrics server (`/metrics`, `/proxyMode`).
    pub metrics_url: String,
    /// Base URL of the health server (`/healthz`, and `/livez` when `/healthz` is not 200).
    pub healthz_url: String,
    /// `/metrics` bodies larger than this fail the probe (`--kube-proxy.max-body-bytes`).
    pub max_body_bytes: usize,
    /// The node's cgroup filesystem (`--host-cgroup-root`); None: `<host root>/sys/fs/cgroup`.
    pub cgroup_root: Option<PathBuf>,
    /// kube-proxy's process name, comm and argv[0]'s basename (`--kube-proxy.process-name`).
    pub process_name: String,
}

/// Cap on a `/proxyMode` body: one word (`iptables`, 8 bytes in `tests/fixtures/kube-proxy/`).
pub const MAX_PROXY_MODE_BYTES: usize = 4 << 10;
/// Cap on a `/healthz` body: a JSON object of three fields (149 to 175 bytes in the fixtures).
pub const MAX_HEALTHZ_BYTES: usize = 64 << 10;

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
    /// Nothing listens on the health port (connection refused).
    #[serde(default)]
    pub refused: bool,
    /// `nodeEligible` of the body (kube-proxy v1.28+): false while the node is being deleted or
    /// tainted `ToBeDeletedByClusterAutoscaler`, which alone makes `/healthz` answer 503.
    #[serde(default)]
    pub node_eligible: Option<bool>,
    /// `/livez` on the same port, asked only when `/healthz` answers another status than 200:
    /// its HTTP status (200 while the proxier syncs, whatever the node; 404 where kube-proxy
    /// does not serve it). None when not asked or when it did not answer.
    #[serde(default)]
    pub livez_status: Option<u16>,
    /// Why `/livez` could not be read, when it was asked and could not.
    #[serde(default)]
    pub livez_error: Option<String>,
}

impl HealthzFacts {
    /// `/healthz` answered non-200 because the node is leaving the cluster, not because
    /// kube-proxy's rules are late: `nodeEligible` false, or `/livez` (the proxier's health
    /// alone) 200. kube-proxy's `healthzHandler` answers `healthy && nodeEligible`, its
    /// `livezHandler` the proxier's health only (pkg/proxy/healthcheck/proxy_health.go).
    pub fn draining(&self) -> bool {
        self.status_code != 0
            && self.status_code != 200
            && (self.node_eligible == Some(false) || self.livez_status == Some(200))
    }
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
    /// Its cgroup (limits, usage, CPU throttling), when found.
    #[serde(default)]
    pub cgroup: Option<CgroupFacts>,
    /// Why its cgroup could not be read, when it could not.
    #[serde(default)]
    pub cgroup_error: Option<String>,
    /// Whether its start time agrees with kube-proxy's own `process_start_time_seconds`.
    #[serde(default)]
    pub identity: Identity,
}

/// A latency histogram since kube-proxy started, reduced to what an SRE reads:
/// quantiles, in seconds. The window since the previous reading is the history
/// stage's (`crate::history::kube_proxy::LatencyWindow`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
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
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeProxyFacts {
    /// `/proxyMode`: iptables, ipvs, nftables...; None when unreachable.
    pub mode: Option<proxy_mode::ProxyMode>,
    /// Whether `/metrics` answered.
    pub metrics_up: bool,
    /// Why `/metrics` could not be read, when it could not.
    pub metrics_error: Option<String>,
    pub metrics: Option<KubeProxyMetrics>,
    pub sync: Option<Latency>,
    pub network_programming: Option<Latency>,
    pub healthz: Option<HealthzFacts>,
    /// kube-proxy's process, when one is identified (see `process::identify`).
    pub process: Option<ProcessFacts>,
    /// Every process that looks like kube-proxy (name and argv[0]), by PID, at most 16.
    #[serde(default)]
    pub process_candidates: Vec<ProcessCandidate>,
    /// Processes named `kube-proxy` whose argv[0] is something else.
    #[serde(default)]
    pub processes_named_only: u32,
    /// Nothing listens on the metrics port (connection refused).
    #[serde(default)]
    pub metrics_refused: bool,
}

/// Parses a `/metrics` body on the blocking pool, so a large one cannot hold an async worker
/// (the agent has two; its HTTP server needs them), within [`metrics::LIMITS`] and the deadline:
/// the parser itself gives up at the deadline, and the probe does not wait past it.
async fn parse_metrics(
    source: String,
    body: String,
    deadline: Deadline,
) -> Result<metrics::KubeProxyMetrics, ProbeError> {
    let limits = promtext::Limits {
        deadline: Some(deadline.at()),
        ..metrics::LIMITS
    };
    let parse = super::blocking(super::ProbeName::KubeProxy, move || {
        metrics::extract_within(&source, &body, &limits).map_err(ProbeError::from)
    });
    match tokio::time::timeout_at(deadline.at().into(), parse).await {
        Ok(r) => r,
        Err(_) => Err(ProbeError::Timeout(deadline.budget())),
    }
}

/// Reads kube-proxy's endpoints and finds its process, all at once, until the
/// deadline. What needs the previous reading (latency windows, restarts, ages)
/// is the history stage's.
pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<KubeProxyFacts>, ProbeError> {
    let ep = &ctx.kube_proxy;
    let get = |path: &'static str, base: &str, cap: usize| {
        let url = fetch::join(base, path);
        async move { fetch::get_until(&url, deadline, cap).await }
    };
    let host = ctx.host.clone();
    let name = ep.process_name.clone();
    let (mode, metrics, health, scan) = tokio::join!(
        get("/proxyMode", &ep.metrics_url, MAX_PROXY_MODE_BYTES),
        get("/metrics", &ep.metrics_url, ep.max_body_bytes),
        get("/healthz", &ep.healthz_url, MAX_HEALTHZ_BYTES),
        super::blocking(super::ProbeName::KubeProxy, move || process::scan(&host, &name))
    );
    let scan = scan?;
    let refused = |r: &Result<fetch::Fetched, FetchError>| matches!(r, Err(e) if e.is_refused());
    if scan.candidates.is_empty() && refused(&metrics) && refused(&health) {
        ctx.kube_proxy_found.found(None);
        return Ok(Probed::Absent(format!(
            "no kube-proxy process and nothing listening on {} or {}",
            ep.metrics_url, ep.healthz_url
        )));
    }
    let mut facts = KubeProxyFacts {
        metrics_refused: refused(&metrics),
        process_candidates: scan.candidates.iter().map(|(c, _)| c.clone()).collect(),
        processes_named_only: scan.named_only.saturating_add(scan.more_candidates),
        ..Default::default()
    };
    match mode {
        Ok(r) if r.status == 200 => facts.mode = Some(proxy_mode::parse_proxy_mode(&r.body)?),
        // Garbage fails the probe, and so does a body over its cap.
        Err(e @ FetchError::TooLarge { .. }) => return Err(ProbeError::Fetch(e)),
        _ => {}
    }
    match metrics {
        Ok(r) if r.status == 200 => {
            let m = parse_metrics(fetch::join(&ep.metrics_url, "/metrics"), r.body, deadline).await?;
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
    facts.healthz = Some(healthz(health, ep, deadline).await);
    // kube-proxy's process: the candidate its own metrics vouch for, or the only one.
    let metrics_start = facts.metrics.as_ref().and_then(|m| m.process_start_time_seconds);
    let starts: Vec<f64> = scan.candidates.iter().map(|(c, _)| c.start_time_seconds).collect();
    if let Some((i, identity)) = process::identify(&starts, metrics_start) {
        let mut p = scan.candidates[i].1.clone();
        p.identity = identity;
        facts.process = Some(with_cgroup(ctx, p, deadline).await?);
    }
    ctx.kube_proxy_found
        .found(facts.process.as_ref().map(|p| super::WatchedProcess {
            pid: p.pid,
            start_time_seconds: p.start_time_seconds,
        }));
    Ok(Probed::Present(facts))
}

/// What `/healthz` answered (`health`), with what `/livez` on the same port answers
/// when `/healthz` is not 200.
async fn healthz(health: Result<fetch::Fetched, FetchError>, ep: &Endpoints, deadline: Deadline) -> HealthzFacts {
    match health {
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
                    h.node_eligible = parsed.node_eligible;
                }
                Err(e) => h.error = Some(e.to_string()),
            }
            // A 503 is either late rules or a node leaving the cluster: /livez tells which.
            // Asked only then, so a healthy kube-proxy sees no extra request.
            if r.status != 200 {
                let livez = fetch::join(&ep.healthz_url, "/livez");
                match fetch::get_until(&livez, deadline, MAX_HEALTHZ_BYTES).await {
                    Ok(l) => h.livez_status = Some(l.status),
                    Err(e) => h.livez_error = Some(e.to_string()),
                }
            }
            h
        }
        Err(e) => HealthzFacts {
            timed_out: matches!(e, FetchError::Timeout { .. }),
            refused: e.is_refused(),
            error: Some(e.to_string()),
            ..Default::default()
        },
    }
}

/// kube-proxy's process with its cgroup read (limits, usage, CPU throttling), on the
/// blocking pool until the deadline. Not finding the cgroup is a missing fact
/// (`cgroup_error`), not a failed probe.
async fn with_cgroup(ctx: &ProbeContext, mut p: ProcessFacts, deadline: Deadline) -> Result<ProcessFacts, ProbeError> {
    let host = ctx.host.clone();
    let root = ctx
        .kube_proxy
        .cgroup_root
        .clone()
        .unwrap_or_else(|| host.path("/sys/fs/cgroup"));
    let pid = p.pid;
    let read = super::blocking(super::ProbeName::KubeProxy, move || Ok(cgroup::read(&host, &root, pid)));
    match tokio::time::timeout_at(deadline.at().into(), read).await {
        Ok(Ok(Ok(cg))) => {
            p.memory_limit_bytes = cg.memory_limit_bytes;
            p.cpu_limit_cores = cg.cpu_limit_cores;
            p.cgroup = Some(cg);
        }
        // Not finding the cgroup is a missing fact, not a failed probe.
        Ok(Ok(Err(why))) => p.cgroup_error = Some(why),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(ProbeError::Timeout(deadline.budget())),
    }
    Ok(p)
}
