//! Runs each probe in its own task on its own interval, with a timeout, and
//! publishes a new snapshot (evaluated and rendered once) after each result.
//! A hang or panic in one probe is reported as that probe's failure; the
//! others go on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::evaluate::Thresholds;
use crate::expose::http::Latest;
use crate::expose::Publication;
use crate::probe::{self, panic_message, ProbeContext, ProbeError, ProbeName, Probed};
use crate::snapshot::{FactUpdate, ProbeOutcome, ProbeStatus, Snapshot};
use crate::timefmt::unix_seconds;
use crate::trend::TrendHistory;
use crate::window::CounterWindow;

/// Which probes run, and how often.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub probe: ProbeName,
    pub interval: Duration,
    /// Bound on one run, commands included.
    pub timeout: Duration,
}

/// One probe run's result, as sent to the aggregator.
#[derive(Debug)]
pub struct RunReport {
    pub probe: ProbeName,
    pub result: Result<Probed<FactUpdate>, ProbeError>,
    pub duration: Duration,
}

/// The conntrack trend's default fit window and how long its history is kept, in seconds.
const DEFAULT_TREND_WINDOW: f64 = 900.0;
const TREND_HISTORY: f64 = 3600.0;

/// Folds probe results into the current snapshot. Pure apart from the times it is given.
pub struct Aggregator {
    snapshot: Snapshot,
    thresholds: Thresholds,
    conntrack_window: CounterWindow,
    conntrack_trend: TrendHistory,
    kube_proxy: crate::probe::kube_proxy::Tracker,
    waiting_for: BTreeSet<ProbeName>,
}

impl Aggregator {
    /// `window_seconds`: how far back counter increases (conntrack drops...) are counted.
    pub fn new(node: &str, thresholds: Thresholds, probes: &[ProbeName], window_seconds: f64) -> Self {
        Aggregator {
            snapshot: Snapshot::new(node),
            thresholds,
            conntrack_window: CounterWindow::new(window_seconds, 4096),
            conntrack_trend: TrendHistory::new(DEFAULT_TREND_WINDOW, TREND_HISTORY, 720),
            kube_proxy: Default::default(),
            waiting_for: probes.iter().copied().collect(),
        }
    }

    /// Sets the conntrack trend's fit window; the history keeps the last hour (or
    /// the window, if longer) at the probe's resolution, at most 4096 readings.
    pub fn with_trend(mut self, window_seconds: f64, conntrack_interval_seconds: f64) -> Self {
        let span = TREND_HISTORY.max(window_seconds);
        let capacity = (span / conntrack_interval_seconds.max(0.001)).ceil() as usize + 1;
        self.conntrack_trend = TrendHistory::new(window_seconds, span, capacity.min(4096));
        self
    }

    /// Records one run. Returns the new publication once every probe has reported at least once.
    /// `now` is the wall clock (for timestamps), `mono` a monotonic time in seconds (for windows).
    pub fn record(&mut self, report: RunReport, now: f64, mono: f64) -> Option<Publication> {
        let p = report.probe;
        let previous_success = self.snapshot.probes.get(&p).and_then(|o| o.last_success_seconds);
        let (status, error) = match report.result {
            Ok(Probed::Present(mut update)) => {
                match &mut update {
                    FactUpdate::Conntrack(ct) => {
                        ct.window = self.conntrack_window.push(mono, &ct.stats);
                        ct.trend = self.conntrack_trend.push(mono, ct.entries, ct.max);
                    }
                    FactUpdate::KubeProxy(kp) => self.kube_proxy.update(kp, now),
                    _ => {}
                }
                self.snapshot.facts.apply(update);
                (ProbeStatus::Ok, None)
            }
            Ok(Probed::Absent(why)) => {
                self.snapshot.facts.clear(p);
                (ProbeStatus::Absent, Some(why))
            }
            Err(e) => {
                self.snapshot.facts.clear(p);
                tracing::warn!(probe = %p, "probe failed: {e}");
                (ProbeStatus::Failed, Some(e.to_string()))
            }
        };
        let last_success_seconds = if status == ProbeStatus::Failed {
            previous_success
        } else {
            Some(now)
        };
        self.snapshot.probes.insert(
            p,
            ProbeOutcome {
                status,
                duration_seconds: report.duration.as_secs_f64(),
                error,
                last_run_seconds: now,
                last_success_seconds,
            },
        );
        self.snapshot.collected_at = now;
        self.waiting_for.remove(&p);
        self.waiting_for
            .is_empty()
            .then(|| Publication::new(&self.snapshot, &self.thresholds))
    }
}

/// Runs a probe in its own task, so a panic is caught and a hang is cut by the timeout.
async fn run_isolated(
    probe: ProbeName,
    ctx: &Arc<ProbeContext>,
    timeout: Duration,
) -> Result<Probed<FactUpdate>, ProbeError> {
    // The probe's own commands time out first, so their errors (with stderr)
    // win over the generic timeout; the outer bound catches everything else.
    let inner = timeout.mul_f64(0.95);
    let mut handle: JoinHandle<_> = tokio::spawn(probe::run(probe, ctx.clone(), inner));
    match tokio::time::timeout(timeout, &mut handle).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) if e.is_panic() => Err(ProbeError::Panicked(panic_message(e.into_panic()))),
        Ok(Err(e)) => Err(ProbeError::Panicked(e.to_string())),
        Err(_) => {
            // Dropping the task kills any command it runs (exec's group guard).
            handle.abort();
            Err(ProbeError::Timeout(timeout))
        }
    }
}

async fn probe_loop(schedule: Schedule, ctx: Arc<ProbeContext>, tx: mpsc::Sender<RunReport>) {
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let started = Instant::now();
        let result = run_isolated(schedule.probe, &ctx, schedule.timeout).await;
        let report = RunReport {
            probe: schedule.probe,
            result,
            duration: started.elapsed(),
        };
        if tx.send(report).await.is_err() {
            return; // the aggregator is gone: shutting down
        }
    }
}

/// Starts every probe loop and the aggregator; returns the latest publication's receiver.
pub fn spawn(ctx: Arc<ProbeContext>, schedules: Vec<Schedule>, mut aggregator: Aggregator) -> Latest {
    let (tx, mut rx) = mpsc::channel::<RunReport>(64);
    let (pub_tx, pub_rx) = watch::channel(None);
    for s in schedules {
        tokio::spawn(probe_loop(s, ctx.clone(), tx.clone()));
    }
    drop(tx);
    let origin = Instant::now();
    tokio::spawn(async move {
        while let Some(report) = rx.recv().await {
            let now = unix_seconds(SystemTime::now());
            let mono = origin.elapsed().as_secs_f64();
            if let Some(p) = aggregator.record(report, now, mono) {
                pub_tx.send_replace(Some(Arc::new(p)));
            }
        }
    });
    pub_rx
}

/// Runs every probe once, concurrently, and returns the publication (for `proxywatch check`).
pub async fn run_once(ctx: Arc<ProbeContext>, schedules: &[Schedule], mut aggregator: Aggregator) -> Publication {
    let runs = schedules.iter().map(|s| {
        let ctx = ctx.clone();
        async move {
            let started = Instant::now();
            let result = run_isolated(s.probe, &ctx, s.timeout).await;
            RunReport {
                probe: s.probe,
                result,
                duration: started.elapsed(),
            }
        }
    });
    let reports = futures_util::future::join_all(runs).await;
    let origin = Instant::now();
    let mut last = None;
    for r in reports {
        let now = unix_seconds(SystemTime::now());
        last = aggregator.record(r, now, origin.elapsed().as_secs_f64()).or(last);
    }
    last.expect("every probe reported")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::conntrack::ConntrackFacts;

    fn ct(entries: u64, drop: u64) -> FactUpdate {
        FactUpdate::Conntrack(ConntrackFacts {
            entries,
            max: 1000,
            stats: [("drop".to_string(), drop)].into(),
            stats_source: Some("test".into()),
            ..Default::default()
        })
    }

    fn ok(probe: ProbeName, u: FactUpdate) -> RunReport {
        RunReport {
            probe,
            result: Ok(Probed::Present(u)),
            duration: Duration::from_millis(2),
        }
    }

    #[test]
    fn publishes_after_every_probe_reported_and_windows_drops() {
        let probes = [ProbeName::Conntrack, ProbeName::Sysctls];
        let mut a = Aggregator::new("n", Thresholds::default(), &probes, 60.0);
        assert!(a.record(ok(ProbeName::Conntrack, ct(10, 5)), 100.0, 0.0).is_none());
        let p = a
            .record(
                RunReport {
                    probe: ProbeName::Sysctls,
                    result: Err(ProbeError::Inconsistent("boom".into())),
                    duration: Duration::ZERO,
                },
                101.0,
                1.0,
            )
            .expect("all probes reported");
        assert_eq!(p.document.probes["sysctls"].status, ProbeStatus::Failed);
        assert!(p.document.findings.iter().any(|f| f.id == "probe_failed"));
        // Drops since the first reading make the drop finding critical.
        let p = a.record(ok(ProbeName::Conntrack, ct(10, 9)), 105.0, 5.0).unwrap();
        let f = p.document.findings.iter().find(|f| f.id == "conntrack_drops").unwrap();
        assert_eq!(f.evidence["drop_increase"], 4);
        assert!(p.readiness().is_err());
    }

    #[test]
    fn trend_over_the_history_raises_time_to_full() {
        let mut a = Aggregator::new("n", Thresholds::default(), &[ProbeName::Conntrack], 60.0).with_trend(600.0, 5.0);
        let ct = |entries: u64| {
            FactUpdate::Conntrack(ConntrackFacts {
                entries,
                max: 100_000,
                ..Default::default()
            })
        };
        let p = a.record(ok(ProbeName::Conntrack, ct(10_000)), 1000.0, 0.0).unwrap();
        assert!(p.document.facts.conntrack.as_ref().unwrap().trend.is_none());
        // 100 entries/s for 10 minutes, with one reading spiking: 70 000 at t = 600 s,
        // 30 000 to go, so about 300 s to full: critical (< 10 min).
        let mut last = None;
        for i in 1..=120 {
            let t = i as f64 * 5.0;
            let entries = if i == 60 { 95_000 } else { 10_000 + 100 * (t as u64) };
            last = a.record(ok(ProbeName::Conntrack, ct(entries)), 1000.0 + t, t);
        }
        let p = last.unwrap();
        let tr = p.document.facts.conntrack.as_ref().unwrap().trend.clone().unwrap();
        assert!((tr.slope_per_second - 100.0).abs() < 0.5, "{tr:?}");
        assert!((tr.seconds_to_full.unwrap() - 300.0).abs() < 5.0, "{tr:?}");
        let f = p
            .document
            .findings
            .iter()
            .find(|f| f.id == "conntrack_time_to_full")
            .unwrap();
        assert_eq!(f.severity, crate::evaluate::Severity::Critical);
        assert!(String::from_utf8_lossy(&p.metrics).contains("proxywatch_conntrack_seconds_to_full 300"));
    }

    #[test]
    fn failure_clears_facts_and_keeps_last_success() {
        let mut a = Aggregator::new("n", Thresholds::default(), &[ProbeName::Conntrack], 60.0);
        let p = a.record(ok(ProbeName::Conntrack, ct(10, 0)), 100.0, 0.0).unwrap();
        assert!(p.document.facts.conntrack.is_some());
        let fail = RunReport {
            probe: ProbeName::Conntrack,
            result: Err(ProbeError::Timeout(Duration::from_secs(1))),
            duration: Duration::from_secs(1),
        };
        let p = a.record(fail, 110.0, 10.0).unwrap();
        assert!(p.document.facts.conntrack.is_none(), "no stale numbers after a failure");
        let o = &p.document.probes["conntrack"];
        assert_eq!(o.last_success_seconds, Some(100.0));
        assert!(o.error.as_deref().unwrap().contains("timed out"));
        assert!(String::from_utf8_lossy(&p.metrics).contains("proxywatch_probe_success{probe=\"conntrack\"} 0"));
    }
}
