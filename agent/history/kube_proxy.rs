//! kube-proxy over time: latency over the interval since the previous reading
//! (bucket deltas, as `histogram_quantile(rate(...))` would give), restarts
//! (a new process start time), how long ago it last synced, and the share of its
//! CPU periods its cgroup was throttled in over the last minutes; and kube-proxy's latency
//! histograms accumulated across the agent's reads (see [`Cumulative`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::window::CounterWindow;
use crate::probe::kube_proxy::metrics::KubeProxyMetrics;
use crate::probe::kube_proxy::{KubeProxyFacts, Latency};
use crate::promtext::{delta, quantile, Histogram};

/// A latency histogram over the window since the previous reading, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyWindow {
    /// p50 / p99 over the window; None when nothing happened in it.
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// Events in the window.
    pub count: f64,
    /// Length of the window, in seconds.
    pub seconds: f64,
}

impl LatencyWindow {
    /// The window between two readings of one histogram; None without an
    /// older reading or when the counters went backwards (a restart).
    pub fn between(newer: &Histogram, older: Option<&Histogram>, seconds: f64) -> Option<Self> {
        let d = delta(newer, older?)?;
        Some(LatencyWindow {
            p50: quantile(0.5, &d.buckets),
            p99: quantile(0.99, &d.buckets),
            count: d.count,
            seconds,
        })
    }
}

/// The p99 to read: over the window since the previous reading when there is
/// one, else since kube-proxy started.
pub fn p99(since_start: &Latency, window: Option<&LatencyWindow>) -> Option<f64> {
    match window {
        Some(w) => w.p99,
        None => since_start.p99_since_start,
    }
}

/// One of kube-proxy's latency histograms accumulated across the agent's reads, with kube-proxy's
/// own buckets: what the agent re-exports as a Prometheus histogram, so that
/// `histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m])))` works across nodes and scrapes.
///
/// It starts at 0 at the agent's first read and grows by the increase between two reads of
/// kube-proxy: a reading whose count or a bucket went down is a kube-proxy restart and counts
/// whole (Prometheus's counter-reset rule for `rate()`), so the exported histogram never goes
/// down while the agent runs. A reading with other buckets (a kube-proxy of another version)
/// restarts it at 0 with the new buckets; a reading with a NaN, a negative or a non-cumulative
/// count changes nothing. Bounded: as many buckets as kube-proxy's histogram (the parser's bound).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cumulative {
    /// The histogram accumulated so far; None before the first read.
    pub total: Option<Histogram>,
    /// kube-proxy's latest reading, for the next increase.
    last: Option<Histogram>,
}

impl Cumulative {
    /// Takes one reading of kube-proxy's histogram.
    pub fn observe(&mut self, h: &Histogram) {
        let sane = h.count.is_finite()
            && h.count >= 0.0
            && h.sum.is_finite()
            && h.buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
            && h.buckets.iter().all(|(_, c)| c.is_finite() && *c >= 0.0);
        if !sane || h.buckets.is_empty() {
            return;
        }
        let same_buckets = |a: &Histogram| {
            a.buckets.len() == h.buckets.len() && a.buckets.iter().zip(&h.buckets).all(|(x, y)| x.0 == y.0)
        };
        let (Some(total), Some(last)) = (self.total.as_mut(), self.last.as_ref()) else {
            self.total = Some(zero(h));
            self.last = Some(h.clone());
            return;
        };
        if !same_buckets(total) || !same_buckets(last) {
            self.total = Some(zero(h));
            self.last = Some(h.clone());
            return;
        }
        // The increase since the previous read, or the whole reading after a restart.
        let increase = delta(h, last).unwrap_or_else(|| h.clone());
        for (t, d) in total.buckets.iter_mut().zip(&increase.buckets) {
            t.1 += d.1;
        }
        total.count += increase.count;
        total.sum += increase.sum.max(0.0);
        self.last = Some(h.clone());
    }
}

/// The same buckets, every count 0.
fn zero(h: &Histogram) -> Histogram {
    Histogram {
        buckets: h.buckets.iter().map(|(le, _)| (*le, 0.0)).collect(),
        count: 0.0,
        sum: 0.0,
    }
}

/// How far back CPU throttling is measured, in seconds: the 5 minutes of kubernetes-mixin's
/// CPUThrottlingHigh alert (`increase(container_cpu_cfs_throttled_periods_total[5m])`).
pub const THROTTLING_WINDOW_SECONDS: f64 = 300.0;
/// Readings kept for it, at most (one per second for the whole window).
const THROTTLING_CAPACITY: usize = 301;

/// CPU throttling of kube-proxy's cgroup over the window (`cpu.stat` increases).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuThrottling {
    /// Enforcement periods in which kube-proxy had runnable tasks.
    pub periods: u64,
    /// Periods in which it was throttled.
    pub throttled_periods: u64,
    /// Time it was throttled, in seconds.
    pub throttled_seconds: f64,
    /// throttled_periods / periods; None when no period elapsed.
    pub ratio: Option<f64>,
    /// Length of the window covered, in seconds.
    pub seconds: f64,
}

/// `derived.kube_proxy`: what needs the previous reading or the clock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeProxyDerived {
    /// Sync duration since the previous reading; absent on the first reading
    /// and right after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<LatencyWindow>,
    /// Network programming latency since the previous reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_programming: Option<LatencyWindow>,
    /// Seconds since kube-proxy's last successful sync (at the time of reading).
    pub last_sync_age_seconds: Option<f64>,
    /// Seconds a queued change has waited without a sync; 0 when nothing waits.
    pub queued_unsynced_seconds: Option<f64>,
    /// Restarts seen since the agent started (a changed process start time).
    pub restarts: u64,
    /// Unix time of the latest restart seen, in seconds.
    #[serde(rename = "last_restart_timestamp_seconds", alias = "last_restart_seconds")]
    pub last_restart_seconds: Option<f64>,
    /// The same restart on the monotonic clock (`Snapshot::collected_mono`'s): what the restart
    /// window is measured on. Never shown.
    #[serde(skip)]
    pub last_restart_mono: Option<f64>,
    /// CPU throttling over [`THROTTLING_WINDOW_SECONDS`]; absent until two readings of the same
    /// cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_throttling: Option<CpuThrottling>,
    /// kube-proxy's sync duration histogram accumulated across the agent's reads ([`Cumulative`]);
    /// /metrics only (kube-proxy's own reading is in facts).
    #[serde(skip)]
    pub sync_cumulative: Option<Histogram>,
    /// kube-proxy's network programming histogram, likewise.
    #[serde(skip)]
    pub network_programming_cumulative: Option<Histogram>,
}

/// Whether kube-proxy was seen, and since when it has not been: what lets evaluation tell a node
/// whose kube-proxy died (seen minutes ago, gone since) from one that never had it. Kept while the
/// kube-proxy probe finds it absent, unlike [`KubeProxyDerived`]; a failed probe run changes nothing
/// (unknown is not absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeProxyPresence {
    /// Unix time of the latest reading in which kube-proxy answered on its ports (/metrics or
    /// /healthz), in seconds; None when this agent never saw it answer.
    #[serde(rename = "last_seen_timestamp_seconds", alias = "last_seen_seconds")]
    pub last_seen_seconds: Option<f64>,
    /// Unix time of the first reading of the current absence (nothing listening on kube-proxy's
    /// ports and no process that looks like it), in seconds; None while it is present.
    #[serde(rename = "absent_since_timestamp_seconds", alias = "absent_since_seconds")]
    pub absent_since_seconds: Option<f64>,
    /// The same moment on the monotonic clock (`Snapshot::collected_mono`'s): what the absence's
    /// length is measured on, whatever the wall clock does. Never shown.
    #[serde(skip)]
    pub absent_since_mono: Option<f64>,
    /// kube-proxy's last successful sync as its /metrics last reported it
    /// (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`), Unix seconds: when it last wrote rules.
    #[serde(rename = "last_sync_timestamp_seconds", alias = "last_sync_seconds")]
    pub last_sync_seconds: Option<f64>,
    /// Unix time the exit watch saw kube-proxy's process exit, in seconds (the current absence
    /// starts there); None while it runs, or where the exit was not seen.
    #[serde(
        default,
        rename = "exited_timestamp_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub exited_seconds: Option<f64>,
    /// The PID of that process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_pid: Option<i32>,
    /// Why the exit watch cannot follow kube-proxy's process, where it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_watch_unavailable: Option<String>,
}

impl KubeProxyPresence {
    /// No presence known, or kube-proxy never seen answering (nothing worth a place in /snapshot).
    pub fn never_seen(p: &Option<KubeProxyPresence>) -> bool {
        p.as_ref().is_none_or(|p| p.last_seen_seconds.is_none())
    }
}

/// What is remembered of kube-proxy between readings.
#[derive(Debug, Default)]
pub struct KubeProxyHistory {
    presence: KubeProxyPresence,
    /// The previous metrics, with their reading's monotonic time.
    previous: Option<(f64, KubeProxyMetrics)>,
    start_time: Option<f64>,
    restarts: u64,
    /// The latest restart: wall clock (shown) and monotonic (for the window).
    last_restart: Option<(f64, f64)>,
    /// The throttling counters' readings, and whose they are (pid and cgroup path): another
    /// process or cgroup starts a new window.
    throttling: Option<(String, CounterWindow)>,
    /// kube-proxy's latency histograms accumulated across reads.
    sync_cumulative: Cumulative,
    network_programming_cumulative: Cumulative,
}

impl KubeProxyHistory {
    /// Takes a reading made at `now` (wall clock, Unix seconds: timestamps, and ages against
    /// kube-proxy's own timestamps) and `mono` (monotonic seconds: every window).
    pub fn observe(&mut self, facts: &KubeProxyFacts, now: f64, mono: f64) -> KubeProxyDerived {
        // A reading made before the exit it is folded after (the exited PID still in it) does
        // not end the absence that exit started.
        let stale =
            self.presence.exited_pid.is_some() && facts.process.as_ref().map(|p| p.pid) == self.presence.exited_pid;
        if !stale {
            self.presence.absent_since_seconds = None;
            self.presence.absent_since_mono = None;
            self.presence.exited_seconds = None;
            self.presence.exited_pid = None;
        }
        let answered = facts.metrics_up || facts.healthz.as_ref().is_some_and(|h| h.status_code != 0);
        if answered {
            self.presence.last_seen_seconds = Some(now);
        }
        if let Some(t) = facts.metrics.as_ref().and_then(|m| m.last_sync_timestamp_seconds) {
            self.presence.last_sync_seconds = Some(t);
        }
        // A restart: the process or its metrics report a new start time.
        let start = facts
            .process
            .as_ref()
            .map(|p| p.start_time_seconds)
            .or_else(|| facts.metrics.as_ref().and_then(|m| m.process_start_time_seconds));
        if let (Some(old), Some(new)) = (self.start_time, start) {
            if (new - old).abs() > 1.0 {
                self.restarts += 1;
                self.last_restart = Some((now, mono));
            }
        }
        if start.is_some() {
            self.start_time = start;
        }
        let mut d = KubeProxyDerived {
            restarts: self.restarts,
            last_restart_seconds: self.last_restart.map(|(wall, _)| wall),
            last_restart_mono: self.last_restart.map(|(_, m)| m),
            ..Default::default()
        };
        if let Some(m) = &facts.metrics {
            let prev = self.previous.as_ref();
            let seconds = prev.map_or(0.0, |(t, _)| mono - t);
            let older = |f: fn(&KubeProxyMetrics) -> Option<&Histogram>| prev.and_then(|(_, p)| f(p));
            d.sync = m
                .sync_duration
                .as_ref()
                .and_then(|h| LatencyWindow::between(h, older(|p| p.sync_duration.as_ref()), seconds));
            d.network_programming = m
                .network_programming
                .as_ref()
                .and_then(|h| LatencyWindow::between(h, older(|p| p.network_programming.as_ref()), seconds));
            d.last_sync_age_seconds = m.last_sync_timestamp_seconds.map(|t| (now - t).max(0.0));
            d.queued_unsynced_seconds = match (m.last_queued_timestamp_seconds, m.last_sync_timestamp_seconds) {
                (Some(q), Some(s)) if q > s => Some((now - q).max(0.0)),
                (Some(_), _) => Some(0.0),
                _ => None,
            };
            if let Some(h) = &m.sync_duration {
                self.sync_cumulative.observe(h);
            }
            if let Some(h) = &m.network_programming {
                self.network_programming_cumulative.observe(h);
            }
            self.previous = Some((mono, m.clone()));
        }
        // Kept while kube-proxy does not answer: no observation seen is no observation counted.
        d.sync_cumulative = self.sync_cumulative.total.clone();
        d.network_programming_cumulative = self.network_programming_cumulative.total.clone();
        d.cpu_throttling = self.throttling(facts, mono);
        d
    }

    /// The kube-proxy probe found nothing of kube-proxy at `now` (Unix seconds), `mono`
    /// (monotonic seconds).
    pub fn absent(&mut self, now: f64, mono: f64) {
        if self.presence.absent_since_mono.is_none() {
            self.presence.absent_since_seconds = Some(now);
            self.presence.absent_since_mono = Some(mono);
        }
    }

    /// An event of the exit watch (`crate::watch::process_exit`), folded in at `now` (Unix
    /// seconds) and `mono` (monotonic seconds): an exit starts the absence at its own time.
    pub fn exit_event(&mut self, event: &crate::watch::Event, now: f64, mono: f64) {
        use crate::watch::Event;
        match event {
            Event::ExitWatching => self.presence.exit_watch_unavailable = None,
            Event::ExitUnavailable(why) => self.presence.exit_watch_unavailable = Some(why.clone()),
            Event::ProcessExited { pid, at_seconds } => {
                // The exit on the monotonic clock: as long before this fold as the wall clock says.
                let ago = (now - at_seconds).clamp(0.0, 60.0);
                if self.presence.absent_since_mono.is_none() {
                    self.presence.absent_since_seconds = Some(*at_seconds);
                    self.presence.absent_since_mono = Some(mono - ago);
                }
                self.presence.exited_seconds = Some(*at_seconds);
                self.presence.exited_pid = Some(*pid);
            }
            _ => {}
        }
    }

    /// What is known of kube-proxy's presence so far.
    pub fn presence(&self) -> KubeProxyPresence {
        self.presence.clone()
    }

    /// The throttling window, on the monotonic clock (`mono`, seconds).
    fn throttling(&mut self, facts: &KubeProxyFacts, mono: f64) -> Option<CpuThrottling> {
        let p = facts.process.as_ref()?;
        let cg = p.cgroup.as_ref()?;
        let cpu = cg.cpu?;
        let owner = format!("{} {}", p.pid, cg.path);
        if self.throttling.as_ref().is_none_or(|(o, _)| *o != owner) {
            let window = CounterWindow::new(THROTTLING_WINDOW_SECONDS, THROTTLING_CAPACITY);
            self.throttling = Some((owner, window));
        }
        let (_, window) = self.throttling.as_mut()?;
        let counters = BTreeMap::from([
            ("periods".to_string(), cpu.periods_total),
            ("throttled_periods".to_string(), cpu.throttled_periods_total),
            ("throttled_us".to_string(), (cpu.throttled_seconds_total * 1e6) as u64),
        ]);
        let w = window.push(mono, &counters)?;
        let (periods, throttled) = (w.get("periods"), w.get("throttled_periods"));
        Some(CpuThrottling {
            periods,
            throttled_periods: throttled,
            throttled_seconds: w.get("throttled_us") as f64 / 1e6,
            ratio: (periods > 0).then(|| throttled as f64 / periods as f64),
            seconds: w.seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            metrics: Some(m),
            ..Default::default()
        }
    }

    #[test]
    fn presence_remembers_when_kube_proxy_was_seen_and_since_when_it_is_gone() {
        use crate::probe::kube_proxy::HealthzFacts;
        let mut h = KubeProxyHistory::default();
        h.absent(100.0, 100.0);
        h.absent(115.0, 115.0);
        assert_eq!(
            h.presence(),
            KubeProxyPresence {
                absent_since_seconds: Some(100.0),
                absent_since_mono: Some(100.0),
                ..Default::default()
            },
            "never seen: absent since the first absent reading"
        );
        let answering = KubeProxyFacts {
            metrics_up: true,
            ..facts(metrics_with_sync(&[(f64::INFINITY, 1.0)], 50.0))
        };
        h.observe(&answering, 130.0, 130.0);
        let p = h.presence();
        assert_eq!(
            (p.last_seen_seconds, p.absent_since_seconds, p.last_sync_seconds),
            (Some(130.0), None, Some(990.0))
        );
        // A process that answers on neither port is present, not seen answering.
        let silent = KubeProxyFacts {
            healthz: Some(HealthzFacts {
                refused: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        h.observe(&silent, 145.0, 145.0);
        assert_eq!(h.presence().last_seen_seconds, Some(130.0));
        h.absent(160.0, 160.0);
        h.absent(175.0, 175.0);
        let p = h.presence();
        assert_eq!(
            (p.last_seen_seconds, p.absent_since_seconds),
            (Some(130.0), Some(160.0))
        );
    }

    #[test]
    fn window_quantiles_follow_a_burst_of_slow_syncs() {
        let mut h = KubeProxyHistory::default();
        let inf = f64::INFINITY;
        // 100 fast syncs (<= 0.1 s) since start.
        let d = h.observe(
            &facts(metrics_with_sync(
                &[(0.1, 100.0), (1.0, 100.0), (10.0, 100.0), (inf, 100.0)],
                500.0,
            )),
            1000.0,
            1000.0,
        );
        assert_eq!(d.sync, None, "first read: no window");
        assert_eq!(d.last_sync_age_seconds, Some(10.0));
        assert_eq!(d.queued_unsynced_seconds, Some(5.0), "queued at 995, last sync at 990");
        // Then 10 slow syncs (1-10 s): the window p99 moves.
        let d = h.observe(
            &facts(metrics_with_sync(
                &[(0.1, 100.0), (1.0, 100.0), (10.0, 110.0), (inf, 110.0)],
                500.0,
            )),
            1060.0,
            1060.0,
        );
        let w = d.sync.as_ref().unwrap();
        assert_eq!((w.count, w.seconds), (10.0, 60.0));
        assert!(w.p99.unwrap() > 9.0, "{:?}", w.p99);
        assert_eq!(d.restarts, 0);
        // A restart: new start time, counters reset -> no window, restart counted.
        let d = h.observe(
            &facts(metrics_with_sync(
                &[(0.1, 1.0), (1.0, 1.0), (10.0, 1.0), (inf, 1.0)],
                1100.0,
            )),
            1120.0,
            1120.0,
        );
        assert_eq!(d.restarts, 1);
        assert_eq!(d.last_restart_seconds, Some(1120.0));
        assert_eq!(d.sync, None);
    }

    /// An NTP step between two readings: the windows (latency, throttling) are as long as the
    /// monotonic clock says; the timestamps (last seen, restart, absence) are the wall clock's.
    #[test]
    fn a_wall_clock_step_does_not_stretch_a_window() {
        let inf = f64::INFINITY;
        for step in [3600.0, -3600.0] {
            let mut h = KubeProxyHistory::default();
            let mut first = throttled(7, "/a", 1000, 100);
            first.metrics = Some(metrics_with_sync(&[(0.1, 100.0), (inf, 100.0)], 500.0));
            h.observe(&first, 1000.0, 0.0);
            let mut second = throttled(7, "/a", 1200, 150);
            second.metrics = Some(metrics_with_sync(&[(0.1, 100.0), (inf, 110.0)], 500.0));
            let d = h.observe(&second, 1015.0 + step, 15.0);
            assert_eq!(
                d.sync.as_ref().map(|w| (w.count, w.seconds)),
                Some((10.0, 15.0)),
                "step {step}"
            );
            let w = d.cpu_throttling.unwrap();
            assert_eq!((w.periods, w.seconds, w.ratio), (200, 15.0, Some(0.25)), "step {step}");
            // A restart after the step: shown at the wall time, windowed on the monotonic one.
            let mut restarted = throttled(7, "/a", 1300, 150);
            restarted.metrics = Some(metrics_with_sync(&[(0.1, 1.0), (inf, 1.0)], 2000.0));
            restarted.process.as_mut().unwrap().start_time_seconds = 2000.0;
            let d = h.observe(&restarted, 1030.0 + step, 30.0);
            assert_eq!(
                (d.last_restart_seconds, d.last_restart_mono),
                (Some(1030.0 + step), Some(30.0))
            );
            h.absent(1045.0 + step, 45.0);
            h.absent(1060.0, 60.0);
            let p = h.presence();
            assert_eq!(
                (p.absent_since_seconds, p.absent_since_mono),
                (Some(1045.0 + step), Some(45.0))
            );
        }
    }

    /// The exit watch saw the process exit: the absence starts at the exit (wall and monotonic
    /// alike), not at the probe's later run; a reading made before the exit, folded after it,
    /// does not end it; a new process does.
    #[test]
    fn an_exit_starts_the_absence_at_its_own_time() {
        use crate::watch::Event;
        let mut h = KubeProxyHistory::default();
        h.observe(&throttled(7, "/a", 0, 0), 1000.0, 0.0);
        h.exit_event(&Event::ExitWatching, 1000.0, 0.0);
        // Exited at 1004.9, folded in at 1005.0 (mono 5.0).
        let exit = Event::ProcessExited {
            pid: 7,
            at_seconds: 1004.9,
        };
        h.exit_event(&exit, 1005.0, 5.0);
        let p = h.presence();
        assert_eq!((p.exited_seconds, p.exited_pid), (Some(1004.9), Some(7)));
        assert_eq!(p.absent_since_seconds, Some(1004.9));
        assert!((p.absent_since_mono.unwrap() - 4.9).abs() < 1e-9);
        // The reading in flight at the exit (PID 7 still in it): the absence holds.
        h.observe(&throttled(7, "/a", 0, 0), 1005.1, 5.1);
        assert_eq!(h.presence().absent_since_seconds, Some(1004.9));
        // The probe finds nothing at 1005.2: still absent since the exit.
        h.absent(1005.2, 5.2);
        assert_eq!(h.presence().absent_since_seconds, Some(1004.9));
        // Restarted (PID 8): present, the exit forgotten.
        h.observe(&throttled(8, "/a", 0, 0), 1010.0, 10.0);
        let p = h.presence();
        assert_eq!(
            (p.absent_since_seconds, p.exited_seconds, p.exited_pid),
            (None, None, None)
        );
        // Where the watch cannot follow the process, the evidence says why.
        h.exit_event(&Event::ExitUnavailable("pidfd_open: ENOSYS".into()), 1011.0, 11.0);
        assert_eq!(
            h.presence().exit_watch_unavailable.as_deref(),
            Some("pidfd_open: ENOSYS")
        );
    }

    fn throttled(pid: i32, path: &str, periods: u64, throttled: u64) -> KubeProxyFacts {
        use crate::probe::kube_proxy::{CgroupFacts, CpuStat, ProcessFacts};
        KubeProxyFacts {
            process: Some(ProcessFacts {
                pid,
                cgroup: Some(CgroupFacts {
                    path: path.into(),
                    cpu: Some(CpuStat {
                        periods_total: periods,
                        throttled_periods_total: throttled,
                        throttled_seconds_total: throttled as f64 * 0.05,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_throttling_needs_two_readings_of_the_same_cgroup() {
        let mut h = KubeProxyHistory::default();
        assert_eq!(h.observe(&throttled(7, "/a", 1000, 100), 0.0, 0.0).cpu_throttling, None);
        let w = h
            .observe(&throttled(7, "/a", 1200, 150), 15.0, 15.0)
            .cpu_throttling
            .unwrap();
        assert_eq!((w.periods, w.throttled_periods, w.seconds), (200, 50, 15.0));
        assert_eq!(w.ratio, Some(0.25));
        assert!((w.throttled_seconds - 2.5).abs() < 1e-6, "{}", w.throttled_seconds);
        // Idle: no period elapsed, no ratio.
        let w = h
            .observe(&throttled(7, "/a", 1200, 150), 30.0, 30.0)
            .cpu_throttling
            .unwrap();
        assert_eq!(
            (w.periods, w.ratio),
            (200, Some(0.25)),
            "the window still holds the first 15 s"
        );
        // A new process (or cgroup) starts a new window: its counters are not compared with the old.
        assert_eq!(h.observe(&throttled(8, "/b", 5, 5), 45.0, 45.0).cpu_throttling, None);
        let w = h.observe(&throttled(8, "/b", 5, 5), 60.0, 60.0).cpu_throttling.unwrap();
        assert_eq!((w.periods, w.ratio), (0, None));
        // Readings older than the window leave it.
        let mut h = KubeProxyHistory::default();
        h.observe(&throttled(7, "/a", 0, 0), 0.0, 0.0);
        h.observe(&throttled(7, "/a", 100, 100), 10.0, 10.0);
        for t in 1..=40 {
            h.observe(
                &throttled(7, "/a", 100 + 10 * t, 100),
                10.0 + 10.0 * t as f64,
                10.0 + 10.0 * t as f64,
            );
        }
        let w = h
            .observe(&throttled(7, "/a", 510, 100), 420.0, 420.0)
            .cpu_throttling
            .unwrap();
        assert_eq!((w.throttled_periods, w.ratio), (0, Some(0.0)), "{w:?}");
    }

    fn hist(buckets: &[(f64, f64)], sum: f64) -> Histogram {
        Histogram {
            buckets: buckets.to_vec(),
            count: buckets.last().unwrap().1,
            sum,
        }
    }

    #[test]
    fn cumulative_starts_at_0_adds_increases_and_counts_a_restart_whole() {
        let inf = f64::INFINITY;
        let mut c = Cumulative::default();
        c.observe(&hist(&[(0.1, 50.0), (1.0, 90.0), (inf, 100.0)], 30.0));
        assert_eq!(
            c.total,
            Some(hist(&[(0.1, 0.0), (1.0, 0.0), (inf, 0.0)], 0.0)),
            "from 0"
        );
        c.observe(&hist(&[(0.1, 55.0), (1.0, 97.0), (inf, 110.0)], 40.0));
        assert_eq!(c.total, Some(hist(&[(0.1, 5.0), (1.0, 7.0), (inf, 10.0)], 10.0)));
        // kube-proxy restarted: 3 syncs since, counted whole; the total never goes down.
        c.observe(&hist(&[(0.1, 1.0), (1.0, 2.0), (inf, 3.0)], 2.5));
        assert_eq!(c.total, Some(hist(&[(0.1, 6.0), (1.0, 9.0), (inf, 13.0)], 12.5)));
        // A bucket that went down alone is a restart too (all of the reading counts).
        c.observe(&hist(&[(0.1, 0.0), (1.0, 4.0), (inf, 5.0)], 3.0));
        assert_eq!(c.total, Some(hist(&[(0.1, 6.0), (1.0, 13.0), (inf, 18.0)], 15.5)));
        // Garbage changes nothing, and the next sane reading continues from the last one.
        for bad in [
            hist(&[(0.1, f64::NAN), (1.0, 4.0), (inf, 5.0)], 3.0),
            hist(&[(0.1, 9.0), (1.0, 4.0), (inf, 5.0)], 3.0),
            hist(&[(0.1, -1.0), (1.0, 4.0), (inf, 5.0)], 3.0),
        ] {
            c.observe(&bad);
        }
        assert_eq!(c.total.as_ref().unwrap().count, 18.0);
        c.observe(&hist(&[(0.1, 1.0), (1.0, 6.0), (inf, 8.0)], 4.0));
        assert_eq!(c.total, Some(hist(&[(0.1, 7.0), (1.0, 15.0), (inf, 21.0)], 16.5)));
        // Other buckets (another kube-proxy version): from 0 again, with the new buckets.
        c.observe(&hist(&[(0.5, 1.0), (inf, 8.0)], 4.0));
        assert_eq!(c.total, Some(hist(&[(0.5, 0.0), (inf, 0.0)], 0.0)));
    }

    #[test]
    fn cumulative_histograms_are_kept_while_kube_proxy_does_not_answer() {
        let mut h = KubeProxyHistory::default();
        let m = |start: f64| facts(metrics_with_sync(&[(1.0, 2.0), (f64::INFINITY, 2.0)], start));
        h.observe(&m(0.0), 100.0, 1.0);
        let more = facts(metrics_with_sync(&[(1.0, 5.0), (f64::INFINITY, 6.0)], 0.0));
        let d = h.observe(&more, 101.0, 2.0);
        assert_eq!(d.sync_cumulative.as_ref().unwrap().count, 4.0);
        let down = KubeProxyFacts::default();
        let d = h.observe(&down, 102.0, 3.0);
        assert_eq!(d.sync_cumulative.as_ref().unwrap().count, 4.0, "{d:?}");
        assert!(d.sync.is_none());
    }
}
