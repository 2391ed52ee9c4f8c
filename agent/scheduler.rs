//! Drives the stages: each probe runs in its own task on its own interval,
//! until its deadline; each result goes through the history stage, then
//! evaluation, then rendering, once, into the publication HTTP handlers serve.
//! A hang or panic in one probe is reported as that probe's failure; the
//! others go on. The scheduler knows no probe by name.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::evaluate::{self, Thresholds};
use crate::expose::http::Latest;
use crate::expose::Publication;
use crate::history::{History, HistoryConfig};
use crate::probe::{self, panic_message, Deadline, ProbeContext, ProbeError, ProbeName, Probed, Reading};
use crate::snapshot::{ProbeOutcome, ProbeStatus, Snapshot};
use crate::timefmt::unix_seconds;

/// Which probes run, and how often.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub probe: ProbeName,
    pub interval: Duration,
    /// The deadline of one run, commands and requests included (the probe's `--*.timeout`).
    pub timeout: Duration,
}

/// One probe run's result, as sent to the aggregator.
#[derive(Debug)]
pub struct RunReport {
    pub probe: ProbeName,
    pub result: Result<Probed<Reading>, ProbeError>,
    pub duration: Duration,
}

/// Past its deadline a probe gets this long to return its own error (a
/// command's timeout, with its stderr) before the run is cut from outside.
const GRACE: Duration = Duration::from_millis(250);

/// Folds probe results into the current snapshot: probe -> history -> evaluate
/// -> expose. Pure apart from the times it is given.
pub struct Aggregator {
    snapshot: Snapshot,
    thresholds: Thresholds,
    history: History,
    waiting_for: BTreeSet<ProbeName>,
}

impl Aggregator {
    pub fn new(node: &str, thresholds: Thresholds, probes: &[ProbeName], history: HistoryConfig) -> Self {
        Aggregator {
            snapshot: Snapshot::new(node),
            thresholds,
            history: History::new(history),
            waiting_for: probes.iter().copied().collect(),
        }
    }

    /// Records one run. Returns the new publication once every probe has reported at least once.
    /// `now` is the wall clock (for timestamps), `mono` a monotonic time in seconds (for windows).
    pub fn record(&mut self, report: RunReport, now: f64, mono: f64) -> Option<Publication> {
        let p = report.probe;
        let previous_success = self.snapshot.probes.get(&p).and_then(|o| o.last_success_seconds);
        let (status, error) = match report.result {
            Ok(Probed::Present(reading)) => {
                self.history.observe(&reading, now, mono, &mut self.snapshot.derived);
                self.snapshot.facts.apply(reading);
                (ProbeStatus::Ok, None)
            }
            Ok(Probed::Absent(why)) => {
                self.snapshot.facts.clear(p);
                self.history.missed(p, &mut self.snapshot.derived);
                (ProbeStatus::Absent, Some(why))
            }
            Err(e) => {
                self.snapshot.facts.clear(p);
                self.history.missed(p, &mut self.snapshot.derived);
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
        if !self.waiting_for.is_empty() {
            return None;
        }
        let verdict = evaluate::evaluate(&self.snapshot, &self.thresholds);
        Some(Publication::new(&self.snapshot, verdict))
    }
}

/// Runs a probe in its own task until its deadline, so a panic is caught and a hang is cut.
async fn run_isolated(
    probe: ProbeName,
    ctx: &Arc<ProbeContext>,
    timeout: Duration,
) -> Result<Probed<Reading>, ProbeError> {
    let deadline = Deadline::after(timeout);
    let task_ctx = ctx.clone();
    let mut handle: JoinHandle<_> = tokio::spawn(async move { probe::run(probe, &task_ctx, deadline).await });
    match tokio::time::timeout_at((deadline.at() + GRACE).into(), &mut handle).await {
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
/// conntrack_stale runs once the others are done: it judges iptables-legacy
/// rules by the table the iptables probe decoded from its save.
pub async fn run_once(ctx: Arc<ProbeContext>, schedules: &[Schedule], mut aggregator: Aggregator) -> Publication {
    let later = |s: &&Schedule| s.probe == crate::probe::ProbeName::ConntrackStale;
    let run = |s: &Schedule| {
        let (ctx, probe, timeout) = (ctx.clone(), s.probe, s.timeout);
        async move {
            let started = Instant::now();
            let result = run_isolated(probe, &ctx, timeout).await;
            RunReport {
                probe,
                result,
                duration: started.elapsed(),
            }
        }
    };
    let mut reports = futures_util::future::join_all(schedules.iter().filter(|s| !later(s)).map(run)).await;
    reports.extend(futures_util::future::join_all(schedules.iter().filter(later).map(run)).await);
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

    fn history(window: f64, trend_window: f64) -> HistoryConfig {
        HistoryConfig {
            conntrack_window_seconds: window,
            conntrack_trend_window_seconds: trend_window,
            conntrack_interval_seconds: 5.0,
        }
    }

    fn ct(entries: u64, drop: u64) -> Reading {
        Reading::Conntrack(ConntrackFacts {
            entries,
            max: 1000,
            stats: [("drop".to_string(), drop)].into(),
            stats_source: Some("test".into()),
            ..Default::default()
        })
    }

    fn ok(probe: ProbeName, u: Reading) -> RunReport {
        RunReport {
            probe,
            result: Ok(Probed::Present(u)),
            duration: Duration::from_millis(2),
        }
    }

    #[test]
    fn publishes_after_every_probe_reported_and_windows_drops() {
        let probes = [ProbeName::Conntrack, ProbeName::Sysctls];
        let mut a = Aggregator::new("n", crate::config::default_thresholds(), &probes, history(60.0, 900.0));
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
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 600.0),
        );
        let ct = |entries: u64| {
            Reading::Conntrack(ConntrackFacts {
                entries,
                max: 100_000,
                ..Default::default()
            })
        };
        let p = a.record(ok(ProbeName::Conntrack, ct(10_000)), 1000.0, 0.0).unwrap();
        assert!(p.document.derived.conntrack.is_none(), "one reading: no trend");
        // 100 entries/s for 10 minutes, with one reading spiking: 70 000 at t = 600 s,
        // 30 000 to go, so about 300 s to full: critical (< 10 min).
        let mut last = None;
        for i in 1..=120 {
            let t = i as f64 * 5.0;
            let entries = if i == 60 { 95_000 } else { 10_000 + 100 * (t as u64) };
            last = a.record(ok(ProbeName::Conntrack, ct(entries)), 1000.0 + t, t);
        }
        let p = last.unwrap();
        let tr = p.document.derived.conntrack.as_ref().unwrap().trend.clone().unwrap();
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
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 900.0),
        );
        let p = a.record(ok(ProbeName::Conntrack, ct(10, 0)), 100.0, 0.0).unwrap();
        assert!(p.document.facts.conntrack.is_some());
        let fail = RunReport {
            probe: ProbeName::Conntrack,
            result: Err(ProbeError::Timeout(Duration::from_secs(1))),
            duration: Duration::from_secs(1),
        };
        let p = a.record(fail, 110.0, 10.0).unwrap();
        assert!(p.document.facts.conntrack.is_none(), "no stale numbers after a failure");
        assert!(p.document.derived.conntrack.is_none(), "nor values derived from them");
        let o = &p.document.probes["conntrack"];
        assert_eq!(o.last_success_seconds, Some(100.0));
        assert!(o.error.as_deref().unwrap().contains("timed out"));
        assert!(String::from_utf8_lossy(&p.metrics).contains("proxywatch_probe_success{probe=\"conntrack\"} 0"));
    }
}
