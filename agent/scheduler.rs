//! Drives the stages: each probe runs in its own task on its own interval,
//! until its deadline; each result goes through the history stage, then
//! evaluation, then rendering, once, into the publication HTTP handlers serve.
//! A hang or panic in one probe is reported as that probe's failure; the
//! others go on. The scheduler knows no probe by name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

use crate::evaluate::{self, Severity, Thresholds};
use crate::expose::Publication;
use crate::history::findings::{Change, FindingTracker, LogBudget, Transition};
use crate::history::{History, HistoryConfig};
use crate::liveness::Liveness;
use crate::probe::{self, panic_message, Deadline, Given, ProbeContext, ProbeError, ProbeName, Probed, Reading};
use crate::serve::http::Latest;
use crate::snapshot::{ProbeOutcome, ProbeStatus, Snapshot};
use crate::timefmt::{human_duration, unix_seconds};
use crate::watch::{Event, Source};

mod once;
pub use once::run_once;

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
pub(crate) const GRACE: Duration = Duration::from_millis(250);

/// How long a failing probe's last good reading stays in the snapshot, in
/// seconds: a transient failure (a rules commit during the stale check's dump,
/// a slow read) must not turn its gauges into a false 0 nor clear its findings
/// (which would reset every `for:` clause); a probe that keeps failing loses
/// its facts after this long, so nothing old passes for current for long.
/// Prometheus' own lookback for a series that stopped is the same 5 minutes.
pub const HOLD_SECONDS: f64 = 300.0;

/// Folds probe results into the current snapshot: probe -> history -> evaluate
/// -> expose. Pure apart from the times it is given.
pub struct Aggregator {
    snapshot: Snapshot,
    thresholds: Thresholds,
    history: History,
    /// Since when each finding is active, and its transitions (the history stage, fed verdicts).
    findings: FindingTracker,
    /// Log finding transitions and probe outcome changes (`serve`; `check` prints its report instead).
    log_changes: bool,
    log_budget: LogBudget,
    waiting_for: BTreeSet<ProbeName>,
    /// When each probe's latest reading was made, on the monotonic clock: what the hold
    /// (`HOLD_SECONDS`) is measured on. The wall-clock time is the outcome's `reading_seconds`.
    reading_mono: BTreeMap<ProbeName, f64>,
    /// Renders the verdict (`Publication::new`; a test swaps in one that panics).
    render: fn(&Snapshot, evaluate::Verdict) -> Publication,
}

impl Aggregator {
    pub fn new(node: &str, thresholds: Thresholds, probes: &[ProbeName], history: HistoryConfig) -> Self {
        Aggregator {
            snapshot: Snapshot::new(node),
            thresholds,
            history: History::new(history),
            findings: FindingTracker::default(),
            log_changes: false,
            log_budget: LogBudget::default(),
            waiting_for: probes.iter().copied().collect(),
            reading_mono: BTreeMap::new(),
            render: Publication::new,
        }
    }

    /// Panics caught while folding reports in, as the next publication reports them.
    pub fn note_panics(&mut self, total: u64) {
        self.snapshot.pipeline_panics = total;
    }

    /// Records one run. Returns the new publication once every probe has reported at least once.
    /// `now` is the wall clock (for timestamps), `mono` a monotonic time in seconds (for windows).
    pub fn record(&mut self, report: RunReport, now: f64, mono: f64) -> Option<Publication> {
        let p = report.probe;
        let previous = self.snapshot.probes.get(&p);
        let previous_success = previous.and_then(|o| o.last_success_seconds);
        let previous_status = previous.map(|o| o.status);
        let previous_reading = previous.and_then(|o| o.reading_seconds);
        let (status, error, reading_seconds) = match report.result {
            Ok(Probed::Present(reading)) => {
                self.history.observe(&reading, now, mono, &mut self.snapshot.derived);
                self.snapshot.facts.apply(reading);
                self.reading_mono.insert(p, mono);
                (ProbeStatus::Ok, None, Some(now))
            }
            Ok(Probed::Absent(why)) => {
                self.history.absent(p, now, mono, &mut self.snapshot.derived);
                self.reading_mono.remove(&p);
                self.snapshot.facts.clear(p);
                self.history.missed(p, &mut self.snapshot.derived);
                (ProbeStatus::Absent, Some(why), None)
            }
            Err(e) => {
                // The last good reading is held, with its time, until it is too old.
                let fresh = self.reading_mono.get(&p).is_some_and(|t| mono - t <= HOLD_SECONDS);
                let held = previous_reading.filter(|_| fresh);
                if held.is_none() {
                    self.reading_mono.remove(&p);
                    self.snapshot.facts.clear(p);
                    self.history.missed(p, &mut self.snapshot.derived);
                }
                (ProbeStatus::Failed, Some(e.to_string()), held)
            }
        };
        if self.log_changes && previous_status != Some(status) {
            self.log_probe_change(p, previous_status, status, error.as_deref(), mono);
        }
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
                reading_seconds,
            },
        );
        self.snapshot.collected_at = now;
        self.snapshot.collected_mono = mono;
        self.waiting_for.remove(&p);
        self.publish(now, mono)
    }

    /// What `probe` reads of the others (its row's `reads`), from the latest snapshot: a
    /// reading only when that probe's latest run read it, never one held after a failure.
    pub fn given(&self, probe: ProbeName) -> Given {
        let readings = probe
            .reads()
            .iter()
            .filter_map(|&p| {
                let outcome = self.snapshot.probes.get(&p)?;
                match outcome.status {
                    ProbeStatus::Ok => self.snapshot.facts.reading(p).map(|r| (p, Ok(r))),
                    ProbeStatus::Failed => Some((p, Err(outcome.error.clone().unwrap_or_default()))),
                    ProbeStatus::Absent => None,
                }
            })
            .collect();
        Given::new(readings)
    }

    /// Records one event of an event source (`crate::watch`): the history stage's journal takes
    /// it, and the verdict is made again (once every probe has reported).
    pub fn record_event(&mut self, event: &crate::watch::Event, now: f64, mono: f64) -> Option<Publication> {
        self.record_events(std::slice::from_ref(event), now, mono)
    }

    /// Records a batch of events (what was queued when the aggregator looked): each one goes into
    /// the history stage's journal, and the verdict is made once for the batch, not
    /// once per event (a rule churn is hundreds of commits).
    pub fn record_events(&mut self, events: &[crate::watch::Event], now: f64, mono: f64) -> Option<Publication> {
        let kube_proxy_pid = self
            .snapshot
            .facts
            .kube_proxy
            .as_ref()
            .and_then(|k| k.process.as_ref())
            .map(|p| p.pid);
        for event in events {
            self.history
                .event(event, kube_proxy_pid, now, mono, &mut self.snapshot.derived);
        }
        self.snapshot.collected_at = now;
        self.snapshot.collected_mono = mono;
        // kube-proxy's own commits dropped in the kernel change no verdict: the journal takes
        // them, and the next publication (a probe's report) shows them.
        if events.iter().all(crate::watch::Event::quiet) {
            return None;
        }
        self.publish(now, mono)
    }

    /// Evaluates and renders the snapshot, once every probe has reported at least once.
    fn publish(&mut self, now: f64, mono: f64) -> Option<Publication> {
        if !self.waiting_for.is_empty() {
            return None;
        }
        self.history.settle(&mut self.snapshot.derived);
        self.snapshot.publications += 1;
        let mut verdict = evaluate::evaluate(&self.snapshot, &self.thresholds);
        let transitions = self.findings.stamp(&mut verdict.findings, now);
        if self.log_changes {
            for t in &transitions {
                self.log_transition(t, now, mono);
            }
        }
        Some((self.render)(&self.snapshot, verdict))
    }

    /// Logs finding transitions and probe outcome changes from now on (what `serve` does).
    pub fn log_changes(mut self) -> Self {
        self.log_changes = true;
        self
    }

    /// One line per finding transition, within the log budget.
    fn log_transition(&mut self, t: &Transition, now: f64, mono: f64) {
        let Some(left_out) = self.log_budget.admit(mono) else {
            return;
        };
        let (id, severity) = (t.id.as_str(), t.severity.as_str());
        let note = left_out_note(left_out);
        match &t.change {
            Change::Appeared if t.severity >= Severity::Warning => {
                tracing::warn!(finding = id, severity, "finding appeared: {}{note}", t.summary)
            }
            Change::Appeared => tracing::info!(finding = id, severity, "finding appeared: {}{note}", t.summary),
            Change::SeverityChanged { from } if t.severity > *from && t.severity >= Severity::Warning => {
                tracing::warn!(
                    finding = id,
                    severity,
                    from = from.as_str(),
                    "finding worse: {}{note}",
                    t.summary
                )
            }
            Change::SeverityChanged { from } => {
                tracing::info!(
                    finding = id,
                    severity,
                    from = from.as_str(),
                    "finding better: {}{note}",
                    t.summary
                )
            }
            Change::Cleared => tracing::info!(
                finding = id,
                severity,
                "finding cleared after {} at {severity}: {}{note}",
                human_duration(now - t.since),
                t.summary
            ),
        }
    }

    /// A probe's outcome changed (failed, recovered, source absent): one line, within the log budget.
    fn log_probe_change(
        &mut self,
        p: ProbeName,
        before: Option<ProbeStatus>,
        now: ProbeStatus,
        error: Option<&str>,
        mono: f64,
    ) {
        if before.is_none() && now == ProbeStatus::Ok {
            return; // the first run went fine: nothing changed
        }
        let Some(left_out) = self.log_budget.admit(mono) else {
            return;
        };
        let note = left_out_note(left_out);
        let why = error.unwrap_or("");
        match now {
            ProbeStatus::Failed => tracing::warn!(probe = %p, "probe failed: {why}{note}"),
            ProbeStatus::Absent => tracing::info!(probe = %p, "probe source absent: {why}{note}"),
            ProbeStatus::Ok if before == Some(ProbeStatus::Failed) => {
                tracing::info!(probe = %p, "probe ok again{note}")
            }
            ProbeStatus::Ok => tracing::info!(probe = %p, "probe source present{note}"),
        }
    }

    /// The probe whose next reading the verdict waits on, and in how long (see `evaluate::recheck`).
    pub fn recheck(&self) -> Option<(ProbeName, Duration)> {
        let (p, secs) = evaluate::recheck(&self.snapshot, &self.thresholds)?;
        Some((p, Duration::from_secs_f64(secs.clamp(0.0, 86_400.0))))
    }

    /// The line `check` prints before it waits on [`Aggregator::recheck`]: what it waits for, how
    /// long at most (`wait` plus one more reading, `every`), and the flag that shortens or skips it.
    pub fn recheck_notice(&self, wait: Duration, every: Duration) -> Option<String> {
        let because = evaluate::recheck_because(&self.snapshot, &self.thresholds)?;
        let grace = self.thresholds.kube_proxy_down_grace_seconds;
        Some(format!(
            "proxywatch: kube-proxy does not answer and no kube-proxy process runs, while {because}: \
             waiting up to {} (--kube-proxy.down-grace {}, reading it again every {}) for it to come back \
             before calling it down; --kube-proxy.down-grace 0s does not wait",
            human_duration(wait.as_secs_f64().ceil()),
            as_flag(Duration::from_secs_f64(grace.max(0.0))),
            as_flag(every),
        ))
    }
}

/// A duration as a flag takes it: `30s`, `1500ms`.
fn as_flag(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn left_out_note(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(
            " ({n} earlier change{} not logged: log rate limit)",
            if n == 1 { "" } else { "s" }
        )
    }
}

/// How long the pipeline may go without progress before `/healthz` fails: three
/// times the longest a report of the most frequent probe can take to arrive (its
/// interval, its deadline and the grace past it), so that one slow or failed round
/// never trips it; at least 30 s.
pub fn liveness_bound(schedules: &[Schedule]) -> Duration {
    schedules
        .iter()
        .map(|s| s.interval + s.timeout + GRACE)
        .min()
        .map_or(Duration::from_secs(60), |d| (d * 3).max(Duration::from_secs(30)))
}

/// Folds one report in with the pipeline isolated: a panic in history,
/// evaluation or rendering is caught, logged and counted in `liveness` (the
/// previous publication stays up, and `/healthz` fails if no report goes
/// through for longer than its bound); the next report is folded in as usual.
pub fn step(
    aggregator: &mut Aggregator,
    input: impl Into<Input>,
    now: f64,
    mono: f64,
    liveness: &Liveness,
) -> Option<Publication> {
    let input = input.into();
    let what = match &input {
        Input::Run(r) => format!("probe {}", r.probe),
        Input::Events(_) => "an event source".to_string(),
    };
    let fold = || match input {
        Input::Run(report) => aggregator.record(*report, now, mono),
        Input::Events(events) => aggregator.record_events(&events, now, mono),
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(fold)) {
        Ok(publication) => {
            liveness.progressed();
            publication
        }
        Err(payload) => {
            let message = panic_message(payload);
            tracing::error!(
                "pipeline panicked folding in a report of {what} (history, evaluation or rendering): {message}"
            );
            liveness.panicked(&message);
            aggregator.note_panics(liveness.panics());
            None
        }
    }
}

/// What the aggregator folds in: a probe run's report, or a batch of event sources' events
/// (judged once).
#[derive(Debug)]
pub enum Input {
    /// Boxed: a report carries its probe's reading, much larger than an event.
    Run(Box<RunReport>),
    Events(Vec<crate::watch::Event>),
}

/// `first` and the events queued behind it when the aggregator looks: one batch, folded in
/// and judged once. What is queued now, not what keeps coming: under a churn faster than
/// the aggregator, draining until empty would never publish.
fn batch(first: Event, rx: &mut mpsc::Receiver<Event>) -> Vec<Event> {
    let queued = rx.len();
    let mut events = Vec::with_capacity(queued + 1);
    events.push(first);
    events.extend(std::iter::from_fn(|| rx.try_recv().ok()).take(queued));
    events
}

impl From<RunReport> for Input {
    fn from(r: RunReport) -> Self {
        Input::Run(Box::new(r))
    }
}

/// Runs a probe in its own task until its deadline, so a panic is caught and a hang is cut.
async fn run_isolated(
    probe: ProbeName,
    ctx: &Arc<ProbeContext>,
    given: Arc<Given>,
    timeout: Duration,
) -> Result<Probed<Reading>, ProbeError> {
    let deadline = Deadline::after(timeout);
    let task_ctx = ctx.clone();
    let mut handle: JoinHandle<_> = tokio::spawn(async move { probe::run(probe, &task_ctx, &given, deadline).await });
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

/// Runs one probe on its interval, and early when `wake` is notified (an event source's row
/// names it: the rules changed); a run woken early starts the interval again. Each run gets
/// what `given` holds then: the readings it reads of the others.
async fn probe_loop(
    schedule: Schedule,
    ctx: Arc<ProbeContext>,
    given: watch::Receiver<Arc<Given>>,
    tx: mpsc::Sender<RunReport>,
    wake: Arc<Notify>,
) {
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = wake.notified() => ticker.reset(),
        }
        let started = Instant::now();
        let given = given.borrow().clone();
        let result = run_isolated(schedule.probe, &ctx, given, schedule.timeout).await;
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

/// The shortest wait before a probe is woken for a verdict that turns with time.
const RECHECK_MIN: Duration = Duration::from_secs(1);

/// Starts every probe loop and the aggregator; returns the latest publication's receiver.
pub fn spawn(
    ctx: Arc<ProbeContext>,
    schedules: Vec<Schedule>,
    sources: &[Source],
    mut aggregator: Aggregator,
    liveness: Arc<Liveness>,
    trim_every: Option<Duration>,
) -> Latest {
    let (tx, mut rx) = mpsc::channel::<RunReport>(64);
    let (event_tx, mut event_rx) = mpsc::channel::<Event>(256);
    let (pub_tx, pub_rx) = watch::channel(None);
    let mut wakers = BTreeMap::new();
    // What each probe that reads others gets, sent again whenever one of those reports.
    let mut givens = BTreeMap::new();
    for s in schedules {
        let wake = Arc::new(Notify::new());
        wakers.insert(s.probe, wake.clone());
        let (given_tx, given_rx) = watch::channel(Arc::new(Given::default()));
        if !s.probe.reads().is_empty() {
            givens.insert(s.probe, given_tx);
        }
        tokio::spawn(probe_loop(s, ctx.clone(), given_rx, tx.clone(), wake));
    }
    drop(tx);
    let shared = crate::watch::Shared::new();
    for source in sources {
        let wakes: Vec<Arc<Notify>> = source.wakes.iter().filter_map(|p| wakers.get(p).cloned()).collect();
        let (tx, rx) = mpsc::channel::<Event>(256);
        (source.start)(ctx.clone(), shared.clone(), tx);
        tokio::spawn(source_loop(
            source.debounce,
            source.debounce_max,
            rx,
            event_tx.clone(),
            wakes,
        ));
    }
    drop(event_tx);
    let origin = Instant::now();
    tokio::spawn(async move {
        let mut events_open = true;
        // A verdict that turns with time (kube-proxy gone, within its grace): its probe is woken
        // when the wait is over, so that the verdict changes then, not at the probe's next run.
        let mut recheck: Option<(ProbeName, Instant)> = None;
        let mut trimmer = crate::trim::Trimmer::new(trim_every);
        loop {
            let timer = async move {
                match recheck {
                    Some((_, at)) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let input = tokio::select! {
                report = rx.recv() => match report {
                    Some(r) => Input::Run(Box::new(r)),
                    None => return,
                },
                event = event_rx.recv(), if events_open => match event {
                    Some(e) => Input::Events(batch(e, &mut event_rx)),
                    None => {
                        events_open = false;
                        continue;
                    }
                },
                _ = timer => {
                    if let Some(w) = recheck.take().and_then(|(p, _)| wakers.get(&p)) {
                        w.notify_one();
                    }
                    continue;
                }
            };
            let now = unix_seconds(SystemTime::now());
            let mono = origin.elapsed().as_secs_f64();
            let reported = match &input {
                Input::Run(r) => Some(r.probe),
                Input::Events(_) => None,
            };
            if let Some(p) = step(&mut aggregator, input, now, mono, &liveness) {
                // The previous publication is dropped here (unless a request still holds it):
                // what this run and its render freed goes back to the kernel (`trim`).
                drop(pub_tx.send_replace(Some(Arc::new(p))));
                trimmer.after_publication(Instant::now());
            }
            for (reader, tx) in &givens {
                if reported.is_some_and(|p| reader.reads().contains(&p)) {
                    tx.send_replace(Arc::new(aggregator.given(*reader)));
                }
            }
            // At least RECHECK_MIN apart: a probe that keeps failing is not re-run in a loop.
            recheck = aggregator
                .recheck()
                .map(|(p, wait)| (p, Instant::now() + wait.max(RECHECK_MIN)));
        }
    });
    pub_rx
}

/// Forwards one source's events to the aggregator, and wakes the probes its row names once
/// the source has been quiet for `debounce` after an event that wakes them (at most
/// `debounce_max` after the first of a burst).
async fn source_loop(
    debounce: Duration,
    debounce_max: Duration,
    mut rx: mpsc::Receiver<Event>,
    tx: mpsc::Sender<Event>,
    wakes: Vec<Arc<Notify>>,
) {
    // (first, latest) event of the burst waiting for its wake.
    let mut due: Option<(Instant, Instant)> = None;
    loop {
        let until = due.map(|(first, latest)| (latest + debounce).min(first + debounce_max));
        let timer = async move {
            match until {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = rx.recv() => {
                let Some(event) = event else { return };
                if event.wakes() {
                    let now = Instant::now();
                    due = Some((due.map_or(now, |(first, _)| first), now));
                }
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            _ = timer => {
                due = None;
                for w in &wakes {
                    w.notify_one();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::conntrack::ConntrackFacts;

    /// The active finding `id` of a publication.
    fn finding<'a>(p: &'a Publication, id: &str) -> Option<&'a crate::evaluate::Finding> {
        p.findings().iter().find(|f| f.id == id)
    }

    fn history(window: f64, trend_window: f64) -> HistoryConfig {
        HistoryConfig {
            conntrack_window_seconds: window,
            conntrack_trend_window_seconds: trend_window,
            conntrack_interval_seconds: 5.0,
            neighbour_tables_window_seconds: 300.0,
            rp_filter_window_seconds: 300.0,
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

    /// A probe that reads another's gets that probe's latest reading from the snapshot, its
    /// error once a run failed (never the reading held meanwhile), nothing once it is absent;
    /// a probe that reads none gets nothing.
    #[test]
    fn a_probe_is_given_the_latest_reading_of_those_it_reads() {
        use crate::probe::iptables::IptablesFacts;
        let reader = ProbeName::ConntrackStale;
        assert_eq!(reader.reads(), &[ProbeName::Iptables]);
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            PROBES_FOR_GIVEN,
            history(60.0, 60.0),
        );
        assert!(a.given(reader).iptables().is_none(), "not run yet");
        let facts = IptablesFacts {
            backend_in_use: "nft".into(),
            ..Default::default()
        };
        a.record(ok(ProbeName::Iptables, Reading::Iptables(facts.clone())), 1000.0, 0.0);
        assert_eq!(a.given(reader).iptables(), Some(Ok(&facts)));
        assert!(
            a.given(ProbeName::Conntrack).iptables().is_none(),
            "conntrack reads none"
        );
        let failed = RunReport {
            probe: ProbeName::Iptables,
            result: Err(ProbeError::Timeout(Duration::from_secs(30))),
            duration: Duration::from_secs(30),
        };
        a.record(failed, 1060.0, 60.0);
        assert!(
            a.snapshot.facts.iptables.is_some(),
            "the reading is held for the others"
        );
        assert_eq!(a.given(reader).iptables(), Some(Err("timed out after 30s")));
        let absent = RunReport {
            probe: ProbeName::Iptables,
            result: Ok(Probed::Absent("none".into())),
            duration: Duration::ZERO,
        };
        a.record(absent, 1120.0, 120.0);
        assert!(a.given(reader).iptables().is_none());
    }

    const PROBES_FOR_GIVEN: &[ProbeName] = &[ProbeName::Iptables, ProbeName::ConntrackStale];

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
        assert_eq!(p.document().probes["sysctls"].status, ProbeStatus::Failed);
        assert!(p.document().findings.iter().any(|f| f.id == "probe_failed"));
        // Drops since the first reading make the drop finding critical.
        let p = a.record(ok(ProbeName::Conntrack, ct(10, 9)), 105.0, 5.0).unwrap();
        let f = finding(&p, "conntrack_drops").unwrap();
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
        assert!(p.document().derived.conntrack.is_none(), "one reading: no trend");
        // 100 entries/s for 10 minutes, with one reading spiking: 70 000 at t = 600 s,
        // 30 000 to go, so about 300 s to full: critical (< 10 min).
        let mut last = None;
        for i in 1..=120 {
            let t = i as f64 * 5.0;
            let entries = if i == 60 { 95_000 } else { 10_000 + 100 * (t as u64) };
            last = a.record(ok(ProbeName::Conntrack, ct(entries)), 1000.0 + t, t);
        }
        let p = last.unwrap();
        let tr = p.document().derived.conntrack.as_ref().unwrap().trend.clone().unwrap();
        assert!((tr.slope_per_second - 100.0).abs() < 0.5, "{tr:?}");
        assert!((tr.seconds_to_full.unwrap() - 300.0).abs() < 5.0, "{tr:?}");
        let f = finding(&p, "conntrack_time_to_full").unwrap();
        assert_eq!(f.severity, crate::evaluate::Severity::Critical);
        assert!(String::from_utf8_lossy(&p.metrics().unwrap()).contains("proxywatch_conntrack_seconds_to_full 300"));
    }

    #[test]
    fn bound_follows_the_most_frequent_probe() {
        let s = |probe, i, t| Schedule {
            probe,
            interval: Duration::from_secs(i),
            timeout: Duration::from_secs(t),
        };
        let b = liveness_bound(&[s(ProbeName::Conntrack, 5, 10), s(ProbeName::Iptables, 60, 30)]);
        assert_eq!(b, (Duration::from_secs(15) + GRACE) * 3);
        assert_eq!(
            liveness_bound(&[s(ProbeName::Conntrack, 1, 1)]),
            Duration::from_secs(30),
            "never below 30 s"
        );
    }

    fn render_panics(_: &Snapshot, _: evaluate::Verdict) -> Publication {
        panic!("render on purpose")
    }

    #[test]
    fn a_panic_in_render_is_caught_counted_and_stalls_healthz_while_probes_go_on() {
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 900.0),
        );
        let live = Liveness::new(Duration::from_secs(1));
        let later = || live.elapsed() + Duration::from_secs(2);
        a.render = render_panics;
        assert!(step(&mut a, ok(ProbeName::Conntrack, ct(10, 0)), 100.0, 0.0, &live).is_none());
        assert_eq!(live.panics(), 1);
        let why = live.check_at(later()).unwrap_err();
        assert!(
            why.contains("pipeline stalled") && why.contains("render on purpose"),
            "{why}"
        );
        // The next report, with rendering fixed, goes through (the pipeline is not
        // poisoned by the panic), and the publication reports the panic.
        a.render = Publication::new;
        let p = step(&mut a, ok(ProbeName::Conntrack, ct(20, 0)), 105.0, 5.0, &live).expect("published");
        assert!(live.check().is_ok(), "a report went through: healthy again");
        assert_eq!(p.document().facts.conntrack.as_ref().unwrap().entries, 20);
        assert!(String::from_utf8_lossy(&p.metrics().unwrap()).contains("proxywatch_pipeline_panics_total 1"));
    }

    #[test]
    fn since_holds_across_runs_and_restarts_with_the_severity() {
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 900.0),
        )
        .log_changes();
        let fill = |entries: u64| {
            Reading::Conntrack(ConntrackFacts {
                entries,
                max: 1000,
                ..Default::default()
            })
        };
        let since = |p: &Publication| {
            let f = finding(p, "conntrack_table_fill");
            f.map(|f| (f.severity, f.since))
        };
        let p = a.record(ok(ProbeName::Conntrack, fill(850)), 100.0, 0.0).unwrap();
        assert_eq!(since(&p), Some((crate::evaluate::Severity::Warning, Some(100.0))));
        for t in [105.0, 110.0, 115.0] {
            let p = a.record(ok(ProbeName::Conntrack, fill(860)), t, t - 100.0).unwrap();
            assert_eq!(
                since(&p),
                Some((crate::evaluate::Severity::Warning, Some(100.0))),
                "at {t}"
            );
        }
        let p = a.record(ok(ProbeName::Conntrack, fill(970)), 120.0, 20.0).unwrap();
        assert_eq!(since(&p), Some((crate::evaluate::Severity::Critical, Some(120.0))));
        // Rendered where users read it.
        let json = String::from_utf8_lossy(&p.findings_json().unwrap()).into_owned();
        assert!(json.contains("\"since\": \"1970-01-01T00:02:00.000Z\""), "{json}");
        let metrics = String::from_utf8_lossy(&p.metrics().unwrap()).into_owned();
        assert!(metrics.contains("proxywatch_finding_active_since_timestamp_seconds{id=\"conntrack_table_fill\"} 120"));
        assert!(String::from_utf8_lossy(&p.page_html().unwrap())
            .contains("critical since <time datetime=\"1970-01-01T00:02:00.000Z\">"));
        let report = crate::expose::report::render(p.document());
        assert!(
            report.contains("       since: 1970-01-01T00:02:00.000Z (0 seconds at critical)"),
            "{report}"
        );
        let p = a.record(ok(ProbeName::Conntrack, fill(100)), 130.0, 30.0).unwrap();
        assert_eq!(since(&p), None);
        assert!(!String::from_utf8_lossy(&p.metrics().unwrap())
            .contains("proxywatch_finding_active_since_timestamp_seconds{id=\"conntrack_table_fill\"}"));
    }

    #[test]
    fn a_failure_holds_the_last_good_reading_with_its_time_then_drops_it() {
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 900.0),
        );
        a.record(ok(ProbeName::Conntrack, ct(10, 0)), 95.0, 0.0).unwrap();
        let p = a.record(ok(ProbeName::Conntrack, ct(10, 0)), 100.0, 5.0).unwrap();
        assert!(p.document().derived.conntrack.is_some(), "two readings: a window");
        let fail = || RunReport {
            probe: ProbeName::Conntrack,
            result: Err(ProbeError::Timeout(Duration::from_secs(1))),
            duration: Duration::from_secs(1),
        };
        let metrics = |p: &Publication| String::from_utf8_lossy(&p.metrics().unwrap()).into_owned();
        // A transient failure: the reading of t = 100 stays, said to be of t = 100.
        let p = a.record(fail(), 110.0, 10.0).unwrap();
        assert_eq!(p.document().facts.conntrack.as_ref().map(|c| c.entries), Some(10));
        assert!(
            p.document().derived.conntrack.is_some(),
            "nor are the values derived from it cleared"
        );
        let o = &p.document().probes["conntrack"];
        assert_eq!((o.last_success_seconds, o.reading_seconds), (Some(100.0), Some(100.0)));
        assert_eq!(o.last_run_seconds, 110.0);
        assert!(o.error.as_deref().unwrap().contains("timed out"));
        let m = metrics(&p);
        assert!(m.contains("proxywatch_probe_success{probe=\"conntrack\"} 0"), "{m}");
        assert!(m.contains("proxywatch_conntrack_entries 10"), "{m}");
        assert!(
            m.contains("proxywatch_probe_reading_timestamp_seconds{probe=\"conntrack\"} 100"),
            "{m}"
        );
        // Still failing past the hold: the facts go, with their time.
        let p = a.record(fail(), 100.0 + HOLD_SECONDS, 5.0 + HOLD_SECONDS).unwrap();
        assert!(p.document().facts.conntrack.is_some(), "held up to {HOLD_SECONDS} s");
        let p = a.record(fail(), 101.0 + HOLD_SECONDS, 6.0 + HOLD_SECONDS).unwrap();
        assert!(p.document().facts.conntrack.is_none(), "no old numbers past the hold");
        assert!(p.document().derived.conntrack.is_none(), "nor values derived from them");
        let o = &p.document().probes["conntrack"];
        assert_eq!((o.last_success_seconds, o.reading_seconds), (Some(100.0), None));
        let m = metrics(&p);
        assert!(!m.contains("proxywatch_conntrack_entries "), "{m}");
        assert!(
            !m.contains("proxywatch_probe_reading_timestamp_seconds{probe=\"conntrack\"}"),
            "{m}"
        );
        // A success brings them back, and an absent source clears them at once.
        let p = a.record(ok(ProbeName::Conntrack, ct(12, 0)), 500.0, 400.0).unwrap();
        assert_eq!(p.document().probes["conntrack"].reading_seconds, Some(500.0));
        let absent = RunReport {
            probe: ProbeName::Conntrack,
            result: Ok(Probed::Absent("gone".into())),
            duration: Duration::ZERO,
        };
        let p = a.record(absent, 505.0, 405.0).unwrap();
        assert!(p.document().facts.conntrack.is_none());
        let p = a.record(fail(), 510.0, 410.0).unwrap();
        assert!(
            p.document().facts.conntrack.is_none(),
            "nothing to hold after an absent run"
        );
    }

    #[test]
    fn a_failed_stale_check_keeps_its_gauge_and_finding_then_reads_unknown_not_zero() {
        use crate::probe::conntrack_stale::{ConntrackStaleFacts, StaleGroup};
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::ConntrackStale],
            history(60.0, 900.0),
        );
        let stale = || {
            let g = StaleGroup {
                service: "10.96.0.10:53/udp".into(),
                address: "10.96.0.10".parse().unwrap(),
                port: 53,
                protocol: "udp".into(),
                node_port: false,
                endpoint: "10.244.0.9:53".into(),
                entries: 685,
            };
            ok(
                ProbeName::ConntrackStale,
                Reading::ConntrackStale(ConntrackStaleFacts {
                    source: "iptables-nft".into(),
                    service_ports: 1,
                    stale_entries: crate::probe::service_endpoints::per_protocol([(17, 685)]),
                    stale_groups: 1,
                    stale: vec![g],
                    ..Default::default()
                }),
            )
        };
        let changed = || RunReport {
            probe: ProbeName::ConntrackStale,
            result: Err(ProbeError::RulesMoved("the rules changed".into())),
            duration: Duration::from_millis(5),
        };
        let severity = |p: &Publication| finding(p, "conntrack_stale_endpoint_entries").map(|f| f.severity);
        let gauge = |p: &Publication| {
            let m = String::from_utf8_lossy(&p.metrics().unwrap()).into_owned();
            m.lines()
                .find_map(|l| l.strip_prefix("proxywatch_conntrack_stale_entries{protocol=\"udp\"} "))
                .map(|v| v.to_string())
        };
        a.record(stale(), 100.0, 0.0).unwrap();
        let p = a.record(stale(), 160.0, 60.0).unwrap();
        assert_eq!(severity(&p), Some(crate::evaluate::Severity::Critical));
        let p = a.record(changed(), 220.0, 120.0).unwrap();
        assert_eq!(gauge(&p).as_deref(), Some("685"), "the last good value, not 0");
        assert_eq!(
            severity(&p),
            Some(crate::evaluate::Severity::Critical),
            "the finding holds"
        );
        let p = a.record(stale(), 280.0, 180.0).unwrap();
        let f = p.document().derived.conntrack_stale.as_ref().unwrap();
        assert_eq!(
            f.groups[0].first_seen_seconds, 100.0,
            "the pair's history survived the failure"
        );
        // Failing for longer than the hold: unknown (no series), never 0.
        for t in [400.0, 500.0, 600.0] {
            a.record(changed(), t, t - 100.0);
        }
        let p = a.record(changed(), 700.0, 600.0).unwrap();
        assert_eq!(gauge(&p), None);
    }

    /// The hold of a failing probe's last reading is measured on the monotonic clock: a wall
    /// clock set an hour ahead does not drop a reading 10 s old, one set back does not keep a
    /// reading past the hold.
    #[test]
    fn a_wall_clock_step_does_not_move_the_hold() {
        let fail = || RunReport {
            probe: ProbeName::Conntrack,
            result: Err(ProbeError::Timeout(Duration::from_secs(1))),
            duration: Duration::from_secs(1),
        };
        let mut a = Aggregator::new(
            "n",
            crate::config::default_thresholds(),
            &[ProbeName::Conntrack],
            history(60.0, 900.0),
        );
        a.record(ok(ProbeName::Conntrack, ct(10, 0)), 100.0, 0.0).unwrap();
        let p = a.record(fail(), 3710.0, 10.0).unwrap();
        assert!(
            p.document().facts.conntrack.is_some(),
            "10 s old, whatever the wall clock says"
        );
        assert_eq!(
            p.document().probes["conntrack"].reading_seconds,
            Some(100.0),
            "shown as read"
        );
        let p = a.record(fail(), 50.0, 1.0 + HOLD_SECONDS).unwrap();
        assert!(
            p.document().facts.conntrack.is_none(),
            "past the hold, wall clock set back or not"
        );
    }

    /// An NTP step of the wall clock while kube-proxy is gone: the grace is measured on the
    /// monotonic clock, so an hour's jump ahead does not make it down early, and a jump back
    /// does not hold it off; the timestamps shown stay wall-clock.
    #[test]
    fn a_wall_clock_step_neither_hastens_nor_delays_kube_proxy_down() {
        use crate::probe::iptables::{IptablesFacts, SaveRun};
        let probes = [ProbeName::Iptables, ProbeName::KubeProxy];
        let absent = || RunReport {
            probe: ProbeName::KubeProxy,
            result: Ok(Probed::Absent("nothing listens".into())),
            duration: Duration::ZERO,
        };
        let rules = || {
            let mut run = SaveRun {
                backend: "nft".into(),
                family: "ipv4".into(),
                ..Default::default()
            };
            run.counts.proxy_canary = true;
            Reading::Iptables(IptablesFacts {
                saves: vec![run],
                ..Default::default()
            })
        };
        let down = |p: &Publication| {
            let f = finding(p, "kube_proxy_down").unwrap();
            (
                f.severity,
                f.evidence["absent_since_timestamp_seconds"].as_f64().unwrap(),
            )
        };
        for step in [3600.0, -3600.0] {
            let mut a = Aggregator::new("n", crate::config::default_thresholds(), &probes, history(60.0, 900.0));
            a.record(ok(ProbeName::Iptables, rules()), 1000.0, 0.0);
            let p = a.record(absent(), 1000.0, 0.0).unwrap();
            assert_eq!(down(&p), (crate::evaluate::Severity::Info, 1000.0));
            // 15 s later on the monotonic clock, the wall clock stepped by an hour.
            let p = a.record(absent(), 1015.0 + step, 15.0).unwrap();
            assert_eq!(down(&p), (crate::evaluate::Severity::Info, 1000.0), "step {step}");
            assert_eq!(a.recheck(), Some((ProbeName::KubeProxy, Duration::from_secs(15))));
            // The grace (30 s) is over on the monotonic clock: down, whatever the wall says.
            let p = a.record(absent(), 1030.0 + step, 30.0).unwrap();
            assert_eq!(down(&p), (crate::evaluate::Severity::Critical, 1000.0), "step {step}");
        }
    }

    /// kube-proxy's exit seen by the exit watch: the evidence gives the exit time, and the grace
    /// runs from it (critical at exit + grace on the monotonic clock, whenever the probe reads).
    #[test]
    fn an_exit_starts_the_down_grace_at_the_exit() {
        use crate::probe::iptables::{IptablesFacts, SaveRun};
        use crate::probe::kube_proxy::{KubeProxyFacts, ProcessFacts};
        let probes = [ProbeName::Iptables, ProbeName::KubeProxy];
        let mut a = Aggregator::new("n", crate::config::default_thresholds(), &probes, history(60.0, 900.0));
        let mut run = SaveRun {
            backend: "nft".into(),
            family: "ipv4".into(),
            ..Default::default()
        };
        run.counts.proxy_canary = true;
        a.record(
            ok(
                ProbeName::Iptables,
                Reading::Iptables(IptablesFacts {
                    saves: vec![run],
                    ..Default::default()
                }),
            ),
            1000.0,
            0.0,
        );
        let present = Reading::KubeProxy(Box::new(KubeProxyFacts {
            metrics_up: true,
            process: Some(ProcessFacts {
                pid: 42,
                ..Default::default()
            }),
            ..Default::default()
        }));
        a.record(ok(ProbeName::KubeProxy, present), 1000.0, 0.0).unwrap();
        let exit = Event::ProcessExited {
            pid: 42,
            at_seconds: 1003.0,
        };
        a.record_event(&exit, 1003.02, 3.02).unwrap();
        let absent = || RunReport {
            probe: ProbeName::KubeProxy,
            result: Ok(Probed::Absent("nothing listens".into())),
            duration: Duration::ZERO,
        };
        let down = |p: &Publication| {
            let f = finding(p, "kube_proxy_down").unwrap();
            (f.severity, f.evidence.clone())
        };
        // Woken by the exit, the probe finds nothing: info, absent since the exit.
        let p = a.record(absent(), 1003.05, 3.05).unwrap();
        let (severity, ev) = down(&p);
        assert_eq!(severity, crate::evaluate::Severity::Info);
        assert_eq!(ev["exited_timestamp_seconds"], 1003.0);
        assert_eq!(ev["exited_pid"], 42);
        assert_eq!(ev["absent_since_timestamp_seconds"], 1003.0);
        let (_, wait) = a.recheck().unwrap();
        assert!((wait.as_secs_f64() - 29.95).abs() < 1e-6, "{wait:?}");
        // Read 29.9 s after the exit: still within the grace; 30 s after (and a float's): down.
        let p = a.record(absent(), 1032.9, 32.9).unwrap();
        assert_eq!(down(&p).0, crate::evaluate::Severity::Info);
        let p = a.record(absent(), 1033.001, 33.001).unwrap();
        assert_eq!(down(&p).0, crate::evaluate::Severity::Critical);
        assert_eq!(down(&p).1["exited_timestamp_seconds"], 1003.0);
    }

    /// A churn's commits, queued (as behind a slow render).
    const CHURN: u32 = 60;

    fn churn_source(_: Arc<ProbeContext>, _: Arc<crate::watch::Shared>, tx: mpsc::Sender<Event>) {
        for generation in 1..=CHURN {
            let commit = crate::watch::Commit {
                at_seconds: 1000.0 + f64::from(generation),
                generation,
                writer: crate::watch::Writer {
                    pid: Some(4242),
                    name: Some("nft".into()),
                    ..Default::default()
                },
                named_kube_proxy: false,
                tables: vec![],
                more_tables: 0,
                notifications: 3,
                undecoded: 0,
                filtered: false,
            };
            tx.try_send(Event::Commit(commit)).unwrap();
        }
    }

    /// A commit of kube-proxy's whose changes the socket filter dropped is journaled but makes no
    /// publication of its own (it changes no verdict); the next one shows it.
    #[test]
    fn a_dropped_commit_of_kube_proxy_s_is_journaled_and_shown_by_the_next_publication() {
        let mut a = Aggregator::new("n", crate::config::default_thresholds(), &[], history(60.0, 900.0));
        let commit = |generation, filtered| {
            Event::Commit(crate::watch::Commit {
                at_seconds: 1000.0 + f64::from(generation),
                generation,
                writer: crate::watch::Writer {
                    pid: Some(4242),
                    name: Some("iptables-restor".into()),
                    parent_pid: Some(10),
                    parent_from_fork: true,
                    ..Default::default()
                },
                named_kube_proxy: true,
                tables: vec![],
                more_tables: 0,
                notifications: 1,
                undecoded: 0,
                filtered,
            })
        };
        assert!(
            a.record_event(&commit(1, true), 1001.0, 1.0).is_none(),
            "published a dropped commit"
        );
        let p = a.record_event(&commit(2, false), 1002.0, 2.0).expect("published");
        let w = p.document().derived.nftables_watch.as_ref().unwrap();
        let seen: Vec<(u32, bool)> = w
            .journal
            .iter()
            .filter_map(|e| e.commit.as_ref())
            .map(|c| (c.generation, c.filtered))
            .collect();
        assert_eq!(seen, vec![(1, true), (2, false)]);
        assert_eq!(w.commits_kube_proxy_total, 2);
        assert!(!commit(1, true).wakes() && commit(2, false).wakes());
    }

    /// `serve` under a rule churn: every commit is journaled, but the snapshot is judged once
    /// per batch of queued events, not once per commit (counted by `proxywatch_publications_total`).
    #[tokio::test]
    async fn a_churn_of_commits_is_journaled_whole_and_rendered_per_batch() {
        let source = Source {
            name: "churn",
            wakes: &[],
            debounce: Duration::ZERO,
            debounce_max: Duration::ZERO,
            start: churn_source,
        };
        let ctx = Arc::new(crate::probe::test_context(crate::host::Host::new("/")));
        let a = Aggregator::new("n", crate::config::default_thresholds(), &[], history(60.0, 900.0));
        let liveness = Arc::new(Liveness::new(Duration::from_secs(30)));
        // One probe, on a long interval, keeps the aggregator running (the aggregator waits on
        // no probe: each batch is published).
        let keep = Schedule {
            probe: ProbeName::Sysctls,
            interval: Duration::from_secs(3600),
            timeout: Duration::from_secs(5),
        };
        let mut latest = spawn(ctx, vec![keep], &[source], a, liveness, Some(Duration::from_secs(5)));
        let publication = loop {
            latest.changed().await.unwrap();
            let p = latest.borrow().clone().unwrap();
            let w = p.document().derived.nftables_watch.as_ref().unwrap();
            if w.commits_other_total == u64::from(CHURN) {
                break p;
            }
        };
        let w = publication.document().derived.nftables_watch.as_ref().unwrap();
        let generations: Vec<u32> = w
            .journal
            .iter()
            .filter_map(|e| e.commit.as_ref())
            .map(|c| c.generation)
            .collect();
        assert_eq!(
            generations,
            (1..=CHURN).collect::<Vec<_>>(),
            "every commit journaled, in order"
        );
        let metrics = String::from_utf8_lossy(&publication.metrics().unwrap()).into_owned();
        let renders: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("proxywatch_publications_total "))
            .and_then(|v| v.parse().ok())
            .expect(&metrics);
        assert!(
            renders * 4 <= u64::from(CHURN),
            "{CHURN} commits rendered {renders} times: not once per batch"
        );
    }

    #[test]
    fn a_kube_proxy_gone_where_it_belongs_is_rechecked_until_the_grace_decides() {
        use crate::probe::iptables::{IptablesFacts, SaveRun};
        let probes = [ProbeName::Iptables, ProbeName::KubeProxy];
        let mut a = Aggregator::new("n", crate::config::default_thresholds(), &probes, history(60.0, 900.0));
        let mut run = SaveRun {
            backend: "nft".into(),
            family: "ipv4".into(),
            ..Default::default()
        };
        run.counts.proxy_canary = true;
        let rules = Reading::Iptables(IptablesFacts {
            saves: vec![run],
            ..Default::default()
        });
        let absent = || RunReport {
            probe: ProbeName::KubeProxy,
            result: Ok(Probed::Absent("nothing listens".into())),
            duration: Duration::ZERO,
        };
        a.record(ok(ProbeName::Iptables, rules), 100.0, 0.0);
        let p = a.record(absent(), 100.0, 0.0).unwrap();
        let f = finding(&p, "kube_proxy_down").unwrap();
        assert_eq!(f.severity, crate::evaluate::Severity::Info);
        assert_eq!(a.recheck(), Some((ProbeName::KubeProxy, Duration::from_secs(30))));
        let notice = a
            .recheck_notice(Duration::from_secs(30), Duration::from_secs(15))
            .unwrap();
        for part in [
            "KUBE-PROXY-CANARY",
            "waiting up to 30 seconds",
            "--kube-proxy.down-grace 30s",
            "every 15s",
            "--kube-proxy.down-grace 0s does not wait",
        ] {
            assert!(notice.contains(part), "{part:?} not in {notice}");
        }
        a.record(absent(), 115.0, 15.0);
        assert_eq!(a.recheck(), Some((ProbeName::KubeProxy, Duration::from_secs(15))));
        let p = a.record(absent(), 130.0, 30.0).unwrap();
        assert_eq!(a.recheck(), None, "decided: down");
        assert_eq!(
            a.recheck_notice(Duration::ZERO, Duration::ZERO),
            None,
            "nothing to wait for"
        );
        assert!(p.readiness().is_err());
        // A failed run in between says nothing new: still down (no false 0), not rechecked.
        let failed = RunReport {
            probe: ProbeName::KubeProxy,
            result: Err(ProbeError::Timeout(Duration::from_secs(2))),
            duration: Duration::from_secs(2),
        };
        let p = a.record(failed, 145.0, 45.0).unwrap();
        let f = finding(&p, "kube_proxy_down").unwrap();
        assert_eq!(f.severity, crate::evaluate::Severity::Critical);
        assert!(f.evidence["latest_run_failed"].as_str().unwrap().contains("timed out"));
        assert_eq!(a.recheck(), None);
        // Back: cleared.
        let back = Reading::KubeProxy(Box::new(crate::probe::kube_proxy::KubeProxyFacts {
            metrics_up: true,
            ..Default::default()
        }));
        let p = a.record(ok(ProbeName::KubeProxy, back), 160.0, 60.0).unwrap();
        assert!(p.document().findings.iter().all(|f| f.id != "kube_proxy_down"));
    }
}
