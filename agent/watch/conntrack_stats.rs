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
pub const WATCHED: [&str; 3] = ["drop", "early_drop", "insert_failed"];

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

/// The drop counters ([`WATCHED`], in that order) as one read gave them; None: not in it.
type Watched = [Option<u64>; 3];

/// Every statistic of one read, by name; None where it was not parsed (its drop counters were
/// as known).
type Stats = Option<BTreeMap<String, u64>>;

fn watched(stats: &BTreeMap<String, u64>) -> Watched {
    WATCHED.map(|k| stats.get(k).copied())
}

/// The drop counters summed over the CPUs straight from the stat file's text, without the map
/// of every counter (its 17 names allocated at each read were a third of the reader's CPU):
/// the file checked and walked as [`crate::probe::conntrack::parse_stat`] does
/// ([`crate::probe::conntrack::for_each_stat`]), so the same sums, and None for every text it
/// refuses. The map is parsed only when they moved. Measured on this project's machine (the
/// thread's `schedstat`, two agents side by side, 120 s, a quiet machine): 5.8 ms of CPU against
/// 8.5 ms before.
fn watched_in_text(text: &str) -> Option<Watched> {
    let mut sums: Watched = [None; 3];
    crate::probe::conntrack::for_each_stat(crate::probe::conntrack::STAT, text, |col, n| {
        if let Some(k) = WATCHED.iter().position(|w| *w == col) {
            sums[k] = Some(sums[k].unwrap_or(0).saturating_add(n));
        }
    })
    .ok()?;
    Some(sums)
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

    /// The file's drop counters now, with every statistic unless the drop counters are
    /// `known` (then nothing more is parsed); None when it could not be read or parsed (then it
    /// is opened again next time).
    fn read(&mut self, known: Option<&Watched>) -> Option<(Watched, Stats)> {
        use std::io::{Read, Seek, SeekFrom};
        self.buf.clear();
        self.file.seek(SeekFrom::Start(0)).ok()?;
        // The same bound as the probe's reads (crate::host::MAX_FILE_BYTES).
        (&mut self.file)
            .take(crate::host::MAX_FILE_BYTES)
            .read_to_end(&mut self.buf)
            .ok()?;
        let text = std::str::from_utf8(&self.buf).ok()?;
        let now = watched_in_text(text)?;
        if known == Some(&now) {
            return Some((now, None));
        }
        let stats = crate::probe::conntrack::parse_stat(crate::probe::conntrack::STAT, text).ok()?;
        Some((now, Some(stats)))
    }
}

/// One read: the stat file (kept open) where the kernel has it, else ctnetlink, as the
/// conntrack probe reads them (same source, same names: the window compares them). Its source,
/// its drop counters, and every statistic, but for a stat file whose drop counters are `known`.
fn read(
    ctx: &ProbeContext,
    file: &mut Option<StatFile>,
    deadline: Instant,
    known: Option<(&str, &Watched)>,
) -> Option<(&'static str, Watched, Stats)> {
    use crate::probe::conntrack::{CTNETLINK, STAT};
    if file.is_none() {
        *file = StatFile::open(ctx);
    }
    if let Some(f) = file {
        let known = known.filter(|(s, _)| *s == STAT).map(|(_, w)| w);
        let read = f.read(known);
        if read.is_none() {
            *file = None;
        }
        return read.map(|(w, stats)| (STAT, w, stats));
    }
    let stats = crate::probe::conntrack::read_ctnetlink(&ctx.host, deadline).ok()??;
    Some((CTNETLINK, watched(&stats), Some(stats)))
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
    let mut previous: Option<(&'static str, Watched)> = None;
    let mut file = None;
    loop {
        std::thread::sleep(every);
        if tx.is_closed() {
            return;
        }
        // A failed read (conntrack not loaded, a busy netlink) says nothing: the probe reports it.
        let deadline = Instant::now() + every.min(Duration::from_secs(1));
        let known = previous.as_ref().map(|(s, w)| (*s, w));
        let Some((source, now, stats)) = read(ctx, &mut file, deadline, known) else {
            previous = None;
            continue;
        };
        let changed = previous.is_some_and(|(s, before)| s == source && before != now);
        // Changed, the statistics were parsed whole (only drop counters equal to `known` skip it).
        if let (true, Some(stats)) = (changed, stats) {
            let event = Event::ConntrackStats {
                source: source.to_string(),
                stats,
                at_seconds: unix_seconds(SystemTime::now()),
            };
            if !send(event) {
                return;
            }
        }
        previous = Some((source, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_drop_counters_make_an_event() {
        let m = |pairs: &[(&str, u64)]| watched(&pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        let before = m(&[("drop", 1), ("found", 10), ("insert_failed", 0)]);
        assert_eq!(before, m(&[("drop", 1), ("found", 99), ("insert_failed", 0)]));
        assert_ne!(before, m(&[("drop", 2), ("found", 10), ("insert_failed", 0)]));
        assert_ne!(before, m(&[("drop", 1), ("found", 10), ("insert_failed", 1)]));
    }

    const HEADER: &str = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart";

    /// The drop counters read without the map are the parser's, and a text the parser refuses
    /// gives none: every fixture node's stat file, and texts built to break it.
    #[test]
    fn the_drop_counters_from_the_text_are_the_parser_s_sums() {
        let row = |vals: [u64; 17]| vals.iter().map(|v| format!("{v:08x}")).collect::<Vec<_>>().join(" ");
        let mut a = [0u64; 17];
        a[9] = 3; // insert_failed
        a[10] = 0xffff_ffff; // drop
        let mut b = [1u64; 17];
        b[11] = 7; // early_drop
        let cases = [
            format!("{HEADER}\n{}\n{}\n", row(a), row(b)),
            format!("{HEADER}\n{}\n", row(b)),
            // Wrapped per-CPU values summed to past u64: saturated, as the parser does.
            format!(
                "{HEADER}\n{}\n{}\n",
                "ffffffffffffffff ".repeat(17).trim(),
                "ffffffffffffffff ".repeat(17).trim()
            ),
            format!("{HEADER}\n"),
            format!("{HEADER}\n00000001 00000002\n"),
            format!("{HEADER}\n{} 0\n", row(a)),
            format!("{HEADER}\n{}\n", row(a).replace("00000003", "0000000g")),
            format!("{HEADER}\n{}\n", row(a).replace("00000003", "00000000000000003")),
            format!("{}\n{}\n", HEADER.replace("entries", "Entries"), row(a)),
            format!("{}\n{}\n", HEADER.replace(" drop ", " dr0p "), row(a)),
            format!("{}\n{}\n", HEADER.replace(" drop ", " drops "), row(a)),
            "garbage\n".into(),
            String::new(),
        ];
        let nodes = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes");
        let captured: Vec<String> = std::fs::read_dir(&nodes)
            .unwrap()
            .filter_map(|n| std::fs::read_to_string(n.unwrap().path().join("proc/net/stat/nf_conntrack")).ok())
            .collect();
        assert!(captured.len() >= 10, "{} fixture stat files", captured.len());
        for text in captured.iter().chain(&cases) {
            let parsed = crate::probe::conntrack::parse_stat("t", text).ok();
            assert_eq!(watched_in_text(text), parsed.as_ref().map(watched), "{text:?}");
        }
        assert_eq!(
            watched_in_text(&cases[0]),
            Some([Some(0xffff_ffff + 1), Some(7), Some(4)])
        );
    }

    #[test]
    fn the_stat_file_kept_open_reads_what_it_says_now() {
        let dir = tempfile::tempdir().unwrap();
        let stat = dir.path().join("proc/net/stat/nf_conntrack");
        std::fs::create_dir_all(stat.parent().unwrap()).unwrap();
        let row = |found: u32, drop: u32| {
            format!("{HEADER}\n00000001 00000000 {found:08x} 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {drop:08x} 00000000 00000000 00000000 00000000 00000000 00000000\n")
        };
        std::fs::write(&stat, row(5, 1)).unwrap();
        let ctx = crate::probe::test_context(crate::host::Host::new(dir.path()));
        let mut f = StatFile::open(&ctx).unwrap();
        let (known, stats) = f.read(None).unwrap();
        assert_eq!((known, stats.unwrap()["drop"]), ([Some(1), Some(0), Some(0)], 1));
        // Rewritten in place (the same file, as the kernel's is): the next read sees it.
        std::fs::write(&stat, row(5, 0x2a)).unwrap();
        let (now, stats) = f.read(Some(&known)).unwrap();
        assert_eq!((now, stats.unwrap()["drop"]), ([Some(42), Some(0), Some(0)], 42));
        // Only another counter moved: the drop counters as known, nothing more parsed.
        std::fs::write(&stat, row(6, 0x2a)).unwrap();
        assert_eq!(f.read(Some(&now)), Some((now, None)));
        // Garbage: no reading (the caller opens the file again), never a zero.
        std::fs::write(&stat, "garbage\n").unwrap();
        assert_eq!(f.read(Some(&now)), None);
        assert_eq!(f.read(None), None);
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
