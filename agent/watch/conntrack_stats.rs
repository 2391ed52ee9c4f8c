//! Conntrack drops within a second: the kernel's per-CPU conntrack statistics (one small read:
//! `/proc/net/stat/nf_conntrack`, else ctnetlink's `IPCTNL_MSG_CT_GET_STATS_CPU`, no table
//! dump), read every `--conntrack-stats.interval` (1 s) on a thread of its own, while the full
//! conntrack probe keeps its 5 s. It reports [`Event::ConntrackStats`] only when a counter the
//! drop findings read (`drop`, `early_drop`, `insert_failed`) moved since its previous read, so
//! an idle node renders nothing more than before; the history stage adds the reading to the
//! conntrack counter window (`--conntrack.window`), and `conntrack_drops` and
//! `conntrack_insert_failed` see the increase then, not at the probe's next run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::Sender;

use super::Event;
use crate::netlink::replay::KernelSource;
use crate::probe::{ProbeContext, Probed};
use crate::timefmt::unix_seconds;

/// The counters whose increase is worth an event (what `conntrack_drops` and
/// `conntrack_insert_failed` read).
pub const WATCHED: &[&str] = &["drop", "early_drop", "insert_failed"];

/// Starts the reader's thread, unless `--conntrack-stats.interval` is 0.
pub fn start(ctx: Arc<ProbeContext>, tx: Sender<Event>) {
    let Some(every) = ctx.conntrack_stats_interval else {
        let _ = tx.try_send(Event::StatsUnavailable("--conntrack-stats.interval 0: off".into()));
        return;
    };
    let spawned = std::thread::Builder::new().name("conntrack-stats".into()).spawn({
        let tx = tx.clone();
        move || run(&ctx, every, &tx)
    });
    if let Err(e) = spawned {
        let _ = tx.try_send(Event::StatsUnavailable(format!("starting its thread: {e}")));
    }
}

/// One read, as the conntrack probe makes it (same source, same names: the window compares them).
fn read(ctx: &ProbeContext, deadline: Instant) -> Option<(String, BTreeMap<String, u64>)> {
    if let Ok(Probed::Present(f)) = crate::probe::conntrack::read_files(&ctx.host) {
        if let Some(source) = f.stats_source {
            return Some((source, f.stats));
        }
    }
    let stats = crate::probe::conntrack::read_ctnetlink(&ctx.host, deadline).ok()??;
    Some((crate::probe::conntrack::CTNETLINK.to_string(), stats))
}

fn moved(before: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>) -> bool {
    WATCHED.iter().any(|k| before.get(*k) != now.get(*k))
}

fn run(ctx: &ProbeContext, every: Duration, tx: &Sender<Event>) {
    let send = |e: Event| tx.blocking_send(e).is_ok();
    if !matches!(ctx.host.kernel(), KernelSource::Live) {
        send(Event::StatsUnavailable(format!(
            "--host-root is not / (kernel answers from {}): no statistics to read",
            ctx.host.kernel().as_str()
        )));
        return;
    }
    if !send(Event::StatsReading) {
        return;
    }
    let mut previous: Option<(String, BTreeMap<String, u64>)> = None;
    loop {
        std::thread::sleep(every);
        if tx.is_closed() {
            return;
        }
        // A failed read (conntrack not loaded, a busy netlink) says nothing: the probe reports it.
        let Some((source, stats)) = read(ctx, Instant::now() + every.min(Duration::from_secs(1))) else {
            previous = None;
            continue;
        };
        let changed = previous
            .as_ref()
            .is_some_and(|(s, before)| *s == source && moved(before, &stats));
        if changed
            && !send(Event::ConntrackStats {
                source: source.clone(),
                stats: stats.clone(),
                at_seconds: unix_seconds(SystemTime::now()),
            })
        {
            return;
        }
        previous = Some((source, stats));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_drop_counters_make_an_event() {
        let m = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let before = m(&[("drop", 1), ("found", 10), ("insert_failed", 0)]);
        assert!(!moved(&before, &m(&[("drop", 1), ("found", 99), ("insert_failed", 0)])));
        assert!(moved(&before, &m(&[("drop", 2), ("found", 10), ("insert_failed", 0)])));
        assert!(moved(&before, &m(&[("drop", 1), ("found", 10), ("insert_failed", 1)])));
    }

    #[tokio::test]
    async fn a_recorded_root_has_no_statistics_to_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::probe::test_context(crate::host::Host::new(dir.path()));
        ctx.conntrack_stats_interval = Some(Duration::from_secs(1));
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        start(Arc::new(ctx), tx);
        let Some(Event::StatsUnavailable(why)) = rx.recv().await else {
            panic!()
        };
        assert!(why.contains("--host-root is not /"), "{why}");
    }
}
