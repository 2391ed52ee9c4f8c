//! Event sources: what the kernel tells as it happens, beside the probes that read one moment.
//!
//! A source is a task that reports [`Event`]s to the scheduler, which folds them into the
//! history stage (the journal) like a probe's reading, and, after the source's debounce, wakes
//! the probes its row names so that they re-read early. [`SOURCES`] is the explicit list; the
//! scheduler knows none by name.
//!
//! - [`nftables_watch`]: nf_tables notifications (every family, so iptables-nft's tables and
//!   kube-proxy's nftables tables alike), one [`Commit`] per NEWGEN, attributed to its writer
//!   ([`attribute`]); decoded by the pure [`nft_decode`]. A writer gone before `/proc` was
//!   read is told kube-proxy's child through the kernel's process events ([`proc_events`]).
//!   Each commit read whole carries the probes' rule counts to its generation, so the probes
//!   it wakes dump nothing.
//! - [`conntrack_stats`]: the per-CPU conntrack statistics every second (a timer, not a
//!   kernel event), reported only when a drop counter moved.
//! - [`process_exit`]: kube-proxy's exit, from a pidfd on the process the kube_proxy probe
//!   found; wakes that probe, and starts kube-proxy's absence at the exit, timed by the
//!   kernel's own exit event where the process events can be listened to.
//!
//! What two sources share ([`Shared`]): the process events, followed once while the kube_proxy
//! probe names a process (the nftables watcher names an exited writer's parent from them, the
//! exit watch takes kube-proxy's exit time from them).

pub mod attribute;
pub mod conntrack_stats;
pub mod nft_decode;
pub mod nftables_watch;
pub mod proc_events;
pub mod process_exit;
pub mod socket_filter;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::Sender;

use crate::probe::{ProbeContext, ProbeName};
use proc_events::KubeProxyChildren;

pub use attribute::Writer;
pub use nft_decode::{CommitFacts, TableChange};

/// One event source's row.
#[derive(Clone, Copy)]
pub struct Source {
    /// Its name in logs and in `/snapshot` (`derived.<name>`).
    pub name: &'static str,
    /// The probes an event that [`Event::wakes`] re-runs, once the source has been quiet for
    /// `debounce` (kube-proxy commits in bursts), at most `debounce_max` after the first.
    pub wakes: &'static [ProbeName],
    pub debounce: Duration,
    pub debounce_max: Duration,
    /// Starts it: it reports on the sender until the receiver is gone.
    pub start: fn(Arc<ProbeContext>, Arc<Shared>, tokio::sync::mpsc::Sender<Event>),
}

/// What the sources of one agent share: kube-proxy's process events, followed by one task (and
/// one socket) however many sources ask.
#[derive(Default)]
pub struct Shared {
    children: Arc<KubeProxyChildren>,
    following: std::sync::OnceLock<()>,
}

/// Said once per agent: the process events cannot be listened to.
static SAID_NO_PROC_EVENTS: std::sync::Once = std::sync::Once::new();

impl Shared {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// kube-proxy's children (and exit) as the process events tell them; the first call (with a
    /// live kernel and a runtime) starts the task that follows the process the kube_proxy probe
    /// names, until `tx`'s receiver is gone.
    pub fn follow_kube_proxy(&self, ctx: &Arc<ProbeContext>, tx: &Sender<Event>) -> Arc<KubeProxyChildren> {
        if matches!(ctx.host.kernel(), crate::netlink::replay::KernelSource::Live) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                self.following.get_or_init(|| {
                    rt.spawn(follow(ctx.clone(), self.children.clone(), tx.clone()));
                });
            }
        }
        self.children.clone()
    }
}

/// Listens to process events while the kube_proxy probe names a process, and drains them as
/// they come (a busy node forks a lot: the socket must not fill up between commits).
async fn follow(ctx: Arc<ProbeContext>, children: Arc<KubeProxyChildren>, tx: Sender<Event>) {
    let mut found = ctx.kube_proxy_found.subscribe();
    let mut refused = false;
    loop {
        let pid = found.borrow_and_update().map(|p| p.pid);
        let fd = match children.follow(pid.filter(|_| !refused)) {
            Ok(fd) => fd,
            Err(why) => {
                refused = true;
                SAID_NO_PROC_EVENTS.call_once(|| {
                    tracing::info!(
                        "kube-proxy's children cannot be followed through process events ({why}): a commit whose writer exited before it was looked at keeps its parent unknown, and kube-proxy's exit is timed when its pidfd is seen readable"
                    )
                });
                None
            }
        };
        // Deprecated for a raw fd closed while still registered (tokio#8587): this one is
        // closed only by `follow`, called after this AsyncFd is dropped.
        #[allow(deprecated)]
        let readable =
            fd.and_then(|fd| tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok());
        loop {
            let ready = async {
                match &readable {
                    Some(r) => r.readable().await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                guard = ready => {
                    children.drain();
                    if let Some(mut g) = guard {
                        g.clear_ready();
                    }
                }
                changed = found.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                _ = tx.closed() => return,
            }
        }
        drop(readable);
    }
}

/// nf_tables commits.
pub const NFTABLES_WATCH: Source = Source {
    name: "nftables_watch",
    wakes: &[ProbeName::Iptables, ProbeName::Nftables],
    debounce: Duration::from_millis(200),
    debounce_max: Duration::from_secs(1),
    start: nftables_watch::start,
};

/// kube-proxy's exit. The short debounce is no burst's: one exit, then the probe reads at once.
pub const KUBE_PROXY_EXIT: Source = Source {
    name: "kube_proxy_exit",
    wakes: &[ProbeName::KubeProxy],
    debounce: Duration::from_millis(20),
    debounce_max: Duration::from_millis(100),
    start: process_exit::start,
};

/// The conntrack statistics every `--conntrack-stats.interval`: it wakes no probe (its events
/// carry the counters themselves).
pub const CONNTRACK_STATS: Source = Source {
    name: "conntrack_stats",
    wakes: &[],
    debounce: Duration::ZERO,
    debounce_max: Duration::ZERO,
    start: conntrack_stats::start,
};

/// Every event source.
pub const SOURCES: &[Source] = &[NFTABLES_WATCH, KUBE_PROXY_EXIT, CONNTRACK_STATS];

/// What a source reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// It listens (the group joined).
    Watching,
    /// It cannot listen, and why; the probes keep polling.
    Unavailable(String),
    /// One nf_tables commit, attributed.
    Commit(Commit),
    /// The socket overflowed (ENOBUFS): notifications were lost; the rules are re-read.
    Lost {
        /// Unix time, in seconds.
        at_seconds: f64,
    },
    /// kube-proxy's exit watch can follow the process the probe finds.
    ExitWatching,
    /// It cannot, and why: kube-proxy's absence starts at the probe's next run.
    ExitUnavailable(String),
    /// The conntrack statistics reader reads every `--conntrack-stats.interval`.
    StatsReading,
    /// It does not, and why.
    StatsUnavailable(String),
    /// A drop counter moved: the per-CPU statistics summed, as the conntrack probe reads them.
    ConntrackStats {
        /// Where they were read (the probe's `stats_source`).
        source: String,
        stats: std::collections::BTreeMap<String, u64>,
        /// Unix time of the read, in seconds.
        at_seconds: f64,
    },
    /// The process the kube_proxy probe found exited.
    ProcessExited {
        pid: i32,
        /// Unix time the exit was seen, in seconds.
        at_seconds: f64,
    },
}

impl Event {
    /// Whether the probes the source names should re-read now.
    pub fn wakes(&self) -> bool {
        matches!(
            self,
            Event::Commit(Commit { filtered: false, .. }) | Event::Lost { .. } | Event::ProcessExited { .. }
        )
    }

    /// Whether it changes no verdict, so needs no publication of its own: a commit of
    /// kube-proxy's whose changes the socket filter dropped (its NEWGEN only: the journal and
    /// its counter take it, the next publication shows it).
    pub fn quiet(&self) -> bool {
        matches!(self, Event::Commit(Commit { filtered: true, .. }))
    }
}

/// One nf_tables commit as the watcher saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    /// Unix time the NEWGEN was received, in seconds.
    #[serde(rename = "timestamp_seconds")]
    pub at_seconds: f64,
    pub generation: u32,
    pub writer: Writer,
    /// The writer or its parent is named as `--kube-proxy.process-name` says (used only when
    /// the kube_proxy probe found no process to compare PIDs with).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub named_kube_proxy: bool,
    pub tables: Vec<TableChange>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_tables: u32,
    /// Notifications of this commit.
    pub notifications: u64,
    /// Notifications since the previous commit that could not be decoded (left out of the counts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undecoded: u32,
    /// Its changes were (or may have been) dropped in the kernel by the socket filter on
    /// kube-proxy's children ([`socket_filter`]): only its NEWGEN was read, `tables` is empty,
    /// and it wakes no probe (kube-proxy's own counts are re-read at the probes' polls).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub filtered: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
