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
use crate::probe::ProbeContext;
use crate::timefmt::unix_seconds;

/// The counters whose increase is worth an event (what `conntrack_drops` and
/// `conntrack_insert_failed` read).
pub const WATCHED: &[&str] = &["drop", "early_drop", "insert_failed"];

/// Starts the reader's thread, unless `--conntrack-stats.interval` is 0.
pub fn start(ctx: Arc<ProbeContext>, _shared: Arc<super::Shared>, tx: Sender<Event>) {
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

/// The statistics file, opened once and read again from its start each time, instead of the
/// four files the conntrack probe opens (count, max, stat, buckets): the drop counters are all
/// in the stat file, and an open's path walk costs more than the read. Measured on this
/// project's machine (the thread's `schedstat`, one read a second): 16.1 ms of CPU per 60 s
/// before, 12.1 ms after (9.3 and 4.6 ms in a 30 s run).
struct StatFile {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl StatFile {
    fn open(ctx: &ProbeContext) -> Option<StatFile> {
        let file = std::fs::File::open(ctx.host.path(crate::probe::conntrack::STAT)).ok()?;
        Some(StatFile { file, buf: Vec::new() })
    }

    /// The file's statistics now; None when it could not be read or parsed (then it is opened
    /// again next time).
    fn read(&mut self) -> Option<BTreeMap<String, u64>> {
        use std::io::{Read, Seek, SeekFrom};
        self.buf.clear();
        self.file.seek(SeekFrom::Start(0)).ok()?;
        // The same bound as the probe's reads (crate::host::MAX_FILE_BYTES).
        (&mut self.file)
            .take(crate::host::MAX_FILE_BYTES)
            .read_to_end(&mut self.buf)
            .ok()?;
        let text = std::str::from_utf8(&self.buf).ok()?;
        crate::probe::conntrack::parse_stat(crate::probe::conntrack::STAT, text).ok()
    }
}

/// One read: the stat file (kept open) where the kernel has it, else ctnetlink, as the
/// conntrack probe reads them (same source, same names: the window compares them).
fn read(ctx: &ProbeContext, file: &mut Option<StatFile>, deadline: Instant) -> Option<(String, BTreeMap<String, u64>)> {
    if file.is_none() {
        *file = StatFile::open(ctx);
    }
    if let Some(f) = file {
        let stats = f.read();
        if stats.is_none() {
            *file = None;
        }
        return stats.map(|s| (crate::probe::conntrack::STAT.to_string(), s));
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
    let mut file = None;
    loop {
        std::thread::sleep(every);
        if tx.is_closed() {
            return;
        }
        // A failed read (conntrack not loaded, a busy netlink) says nothing: the probe reports it.
        let Some((source, stats)) = read(ctx, &mut file, Instant::now() + every.min(Duration::from_secs(1))) else {
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

    #[test]
    fn the_stat_file_kept_open_reads_what_it_says_now() {
        let dir = tempfile::tempdir().unwrap();
        let stat = dir.path().join("proc/net/stat/nf_conntrack");
        std::fs::create_dir_all(stat.parent().unwrap()).unwrap();
        let header = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n";
        let row = |drop: u32| {
            format!("{header}00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {drop:08x} 00000000 00000000 00000000 00000000 00000000 00000000\n")
        };
        std::fs::write(&stat, row(1)).unwrap();
        let ctx = crate::probe::test_context(crate::host::Host::new(dir.path()));
        let mut f = StatFile::open(&ctx).unwrap();
        assert_eq!(f.read().unwrap()["drop"], 1);
        // Rewritten in place (the same file, as the kernel's is): the next read sees it.
        std::fs::write(&stat, row(0x2a)).unwrap();
        assert_eq!(f.read().unwrap()["drop"], 42);
        // Garbage: no reading (the caller opens the file again), never a zero.
        std::fs::write(&stat, "garbage\n").unwrap();
        assert_eq!(f.read(), None);
    }

    #[tokio::test]
    async fn a_recorded_root_has_no_statistics_to_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::probe::test_context(crate::host::Host::new(dir.path()));
        ctx.conntrack_stats_interval = Some(Duration::from_secs(1));
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        start(Arc::new(ctx), crate::watch::Shared::new(), tx);
        let Some(Event::StatsUnavailable(why)) = rx.recv().await else {
            panic!()
        };
        assert!(why.contains("--host-root is not /"), "{why}");
    }
}
