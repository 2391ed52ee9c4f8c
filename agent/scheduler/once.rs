//! `proxywatch check`'s scheduler: every probe once, then what a verdict that turns with time
//! needs, then what the event sources said meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use super::{run_isolated, Aggregator, Publication, RunReport, Schedule};
use crate::probe::{Given, ProbeContext, Probed};
use crate::timefmt::unix_seconds;
use crate::watch::{Event, Source};

/// Runs every probe once, concurrently, and returns the publication (for `proxywatch check`).
/// A probe that reads others' readings (its row's `reads`) runs once the others are done,
/// given what they read.
/// The event sources run while the probes do: what they saw by the end is in the publication.
/// Before it waits on a verdict that depends on time (kube-proxy gone, within its grace) it hands
/// `notice` one line saying so, at once: `check` never sits silent.
pub async fn run_once(
    ctx: Arc<ProbeContext>,
    schedules: &[Schedule],
    sources: &[Source],
    mut aggregator: Aggregator,
    notice: &mut dyn FnMut(&str),
) -> Publication {
    let mut events = Vec::new();
    let shared = crate::watch::Shared::new();
    for source in sources {
        let (tx, rx) = mpsc::channel::<Event>(256);
        (source.start)(ctx.clone(), shared.clone(), tx);
        events.push(rx);
    }
    let origin = Instant::now();
    let mut last = None;
    for r in both_rounds(&ctx, schedules).await {
        let now = unix_seconds(SystemTime::now());
        last = aggregator.record(r, now, origin.elapsed().as_secs_f64()).or(last);
    }
    last = recheck_until_settled(&ctx, schedules, &mut aggregator, origin, notice)
        .await
        .or(last);
    // All the sources' events in one batch: journaled one by one, rendered once.
    let queued_events = queued(&mut events).await;
    if !queued_events.is_empty() {
        let now = unix_seconds(SystemTime::now());
        last = aggregator
            .record_events(&queued_events, now, origin.elapsed().as_secs_f64())
            .or(last);
    }
    last.expect("every probe reported")
}

async fn run_one(ctx: &Arc<ProbeContext>, s: &Schedule, given: Given) -> RunReport {
    let started = Instant::now();
    let result = run_isolated(s.probe, ctx, Arc::new(given), s.timeout).await;
    RunReport {
        probe: s.probe,
        result,
        duration: started.elapsed(),
    }
}

/// The probes that read no other first, all at once; then those that do, given what the first
/// round read (the latest there is: nothing was recorded before).
async fn both_rounds(ctx: &Arc<ProbeContext>, schedules: &[Schedule]) -> Vec<RunReport> {
    let later = |s: &&Schedule| !s.probe.reads().is_empty();
    let first = schedules.iter().filter(|s| !later(s));
    let mut reports = futures_util::future::join_all(first.map(|s| run_one(ctx, s, Given::default()))).await;
    let given = |s: &Schedule| {
        let read = s.probe.reads();
        Given::new(
            reports
                .iter()
                .filter(|r| read.contains(&r.probe))
                .filter_map(|r| match &r.result {
                    Ok(Probed::Present(reading)) => Some((r.probe, Ok(reading.clone()))),
                    Ok(Probed::Absent(_)) => None,
                    Err(e) => Some((r.probe, Err(e.to_string()))),
                })
                .collect(),
        )
    };
    let second: Vec<_> = schedules
        .iter()
        .filter(later)
        .map(|s| run_one(ctx, s, given(s)))
        .collect();
    reports.extend(futures_util::future::join_all(second).await);
    reports
}

/// A verdict that depends on time (kube-proxy gone, within its grace): reads that probe again on
/// its interval until the wait is over, so that a restart is not called down, nor a death fine.
/// Bounded by the monotonic clock, whatever the wall clock does. Returns the last publication.
async fn recheck_until_settled(
    ctx: &Arc<ProbeContext>,
    schedules: &[Schedule],
    aggregator: &mut Aggregator,
    origin: Instant,
    notice: &mut dyn FnMut(&str),
) -> Option<Publication> {
    let mut last = None;
    let mut give_up: Option<Instant> = None;
    while let Some((probe, wait)) = aggregator.recheck() {
        let Some(s) = schedules.iter().find(|s| s.probe == probe) else {
            break;
        };
        let limit = *give_up.get_or_insert_with(|| {
            if let Some(line) = aggregator.recheck_notice(wait, s.interval) {
                notice(&line);
            }
            Instant::now() + wait + s.interval + s.timeout
        });
        if Instant::now() >= limit {
            break;
        }
        tokio::time::sleep(wait.min(s.interval)).await;
        let report = run_one(ctx, s, aggregator.given(probe)).await;
        let now = unix_seconds(SystemTime::now());
        last = aggregator.record(report, now, origin.elapsed().as_secs_f64()).or(last);
    }
    last
}

/// What the sources said meanwhile (a commit during the check, or why they cannot watch);
/// a source that said nothing yet gets up to 2 s to say whether it listens (its first
/// event comes at once: the report must not depend on the machine's load).
async fn queued(events: &mut [mpsc::Receiver<Event>]) -> Vec<Event> {
    let mut queued_events = Vec::new();
    for rx in events {
        if rx.is_empty() {
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while rx.is_empty() && !rx.is_closed() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
        }
        // What is queued now, not what keeps coming: on a node committing faster than events
        // are recorded (a rule churn), draining until empty would never end.
        let queued = rx.len();
        queued_events.extend(std::iter::from_fn(|| rx.try_recv().ok()).take(queued));
    }
    queued_events
}
