//! Probes: each reads one source of the node at one moment and returns a typed
//! reading, "absent", or a typed error.
//!
//! **The one contract.** Every probe is
//! `async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<Facts>, ProbeError>`:
//! the shared context (where the node's files are, how commands run, where
//! kube-proxy listens) and the deadline of the whole run. Commands get
//! `deadline - now` ([`Deadline::remaining`]); file reads run on the blocking
//! pool behind the hang guard ([`blocking`]); HTTP requests end at the deadline.
//! What needs more than one reading is the history stage's (`crate::history`).
//! The one exception is named: [`Memory`], the per-agent state the scheduler
//! hands every run through the context, which only spares work — rule-set
//! counts and the stale check's service table kept by the kernel's own ruleset
//! generation (served only to a run that has just read the same generation),
//! the legacy saves' tables by their text's hash, and when the save cross-check
//! last ran. It never changes what a reading says, only what it costs to make;
//! `probe/counted.rs` says why it cannot live in history (history sees a reading
//! only after the work is done).
//!
//! A probe that needs another's reading declares it in its row of the probe table
//! (`reads`); the scheduler hands it that probe's latest reading from the snapshot
//! in a [`Given`] (`probe(ctx, given, deadline)`), and in `check` runs it after
//! the probes it reads.
//!
//! A probe never panics on input and never decides what is healthy; that is
//! `evaluate`'s job. "Absent" (no IPVS on this kernel, no conntrack) is not a
//! failure: evaluation decides whether the absence matters.

pub mod conntrack;
pub mod conntrack_stale;
pub mod counted;
pub mod iptables;
pub mod ipvs;
pub mod kube_proxy;
pub mod modules;
pub mod neighbour_tables;
pub mod nftables;
pub mod node;
pub mod node_ports;
pub mod rp_filter;
pub mod rule_counters;
pub mod service_endpoints;
pub mod service_traffic;
pub mod snat;
pub mod sysctl;
pub mod xtables_lock;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::exec::{ExecError, Runner};
use crate::host::{Host, ReadError};

pub use crate::deadline::Deadline;

// `ProbeName` (one variant per probe), `PROBES`, `Reading` and `run`: from the probe table,
// `agent/probe_table.rs`, where each probe is registered once.
probe_table!(probe);

impl std::fmt::Display for ProbeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A probe's result when it ran without error.
#[derive(Debug, Clone, PartialEq)]
pub enum Probed<T> {
    Present(T),
    /// The source does not exist on this node; the reason says what is missing.
    Absent(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Parse(#[from] crate::parse::ParseError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("inconsistent host: {0}")]
    Inconsistent(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("panicked: {0}")]
    Panicked(String),
    /// An rtnetlink read (the interfaces, the neighbour tables): what was read, and the
    /// error as the netlink reader or rtnetlink gave it.
    #[error("netlink: {what}: {source} (needs the host network namespace)")]
    Rtnetlink {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An nf_tables or ctnetlink read: what was read (a table, a subsystem), and the netlink
    /// error kept whole (its errno, a malformed message, a dump the kernel interrupted).
    #[error("{what}: {source}")]
    NfNetlink {
        what: String,
        #[source]
        source: crate::netlink::NlError,
    },
    /// The rules kept changing under a reading (more often than it retries), or changed
    /// after a part of it: no reading, rather than one whose parts do not belong together.
    #[error("{0}")]
    RulesMoved(String),
    #[error(transparent)]
    Fetch(#[from] crate::fetch::FetchError),
    #[error("previous run still blocked after {0:?}; not started again")]
    StillRunning(Duration),
}

/// What every probe gets: where the node's files are, how commands run, and
/// where kube-proxy listens.
#[derive(Debug, Clone)]
pub struct ProbeContext {
    pub host: Host,
    pub runner: Runner,
    /// Cap on one command's stdout (rule-set dumps); beyond it the command is killed.
    pub max_output_bytes: u64,
    /// Where kube-proxy's endpoints are.
    pub kube_proxy: kube_proxy::Endpoints,
    /// What spares a re-read: rule-set counts kept by ruleset generation, the save cross-check's schedule.
    pub memory: std::sync::Arc<Memory>,
    /// The kube-proxy process the kube_proxy probe found, for the exit watch.
    pub kube_proxy_found: std::sync::Arc<KubeProxyFound>,
    /// How often iptables-nft-save cross-checks the netlink counts; None: never.
    pub iptables_save_interval: Option<Duration>,
    /// The conntrack_stale probe also groups SNAT entries and reads the source NAT rules.
    pub snat: bool,
    /// What the service_traffic probe tries (`--service-traffic.*`).
    pub service_traffic: service_traffic::Settings,
    /// How often the conntrack statistics are read between the conntrack probe's runs
    /// (`--conntrack-stats.interval`, `crate::watch::conntrack_stats`); None: never.
    pub conntrack_stats_interval: Option<Duration>,
    /// The nftables watcher drops kube-proxy's own commits' notifications in the kernel but
    /// their NEWGEN (`--nftables-watch.skip-kube-proxy`, [`crate::watch::socket_filter`]), and
    /// reads every one for this long after another process changed kube-proxy's rules
    /// (`--nftables-watch.window`); None: it reads every notification.
    pub nftables_skip_kube_proxy: Option<Duration>,
}

/// The kube-proxy process the kube_proxy probe found last (None: none), for the event source
/// that watches its exit (`crate::watch::process_exit`), which must open it at once rather than
/// at the next publication: what the probe found is in its reading too.
#[derive(Debug, Default)]
pub struct KubeProxyFound(tokio::sync::watch::Sender<Option<WatchedProcess>>);

impl KubeProxyFound {
    /// The kube_proxy probe found `process` (or none): the exit watch follows it.
    pub fn found(&self, process: Option<WatchedProcess>) {
        self.0.send_if_modified(|p| {
            let changed = *p != process;
            *p = process;
            changed
        });
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<WatchedProcess>> {
        self.0.subscribe()
    }
}

/// A context on `host` with nothing configured (unit tests).
#[cfg(test)]
pub fn test_context(host: Host) -> ProbeContext {
    ProbeContext {
        host,
        runner: crate::exec::Runner::new(1),
        max_output_bytes: 1 << 20,
        kube_proxy: kube_proxy::Endpoints {
            metrics_url: String::new(),
            healthz_url: String::new(),
            max_body_bytes: 0,
            cgroup_root: None,
            process_name: String::new(),
        },
        memory: Default::default(),
        kube_proxy_found: Default::default(),
        iptables_save_interval: None,
        snat: true,
        service_traffic: Default::default(),
        conntrack_stats_interval: None,
        nftables_skip_kube_proxy: None,
    }
}

/// A process the kube_proxy probe found, as the exit watch opens it: its PID and its start
/// time (what tells it from a later process given the same PID).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchedProcess {
    pub pid: i32,
    /// Unix time it started, in seconds (`/proc/<pid>/stat` with `btime`).
    pub start_time_seconds: f64,
}

impl Memory {
    /// Carries the iptables and nftables probes' counts of the generation before `generation`
    /// to it through that commit's notifications (`deltas`, per family it touched; a family it
    /// did not touch keeps its counts), at `at_seconds`: their next runs, at this generation,
    /// dump nothing. A family's counts are carried only from the generation just before, and
    /// only what the notifications account for (kube-proxy's nftables table, once changed, is
    /// dumped again; the iptables counts with the nat drop chains they were learned with, or
    /// neither); what is not carried stays, and the next run at `generation` counts it.
    /// Returns whether the iptables counts of both families were carried.
    pub fn advance(
        &self,
        generation: u32,
        deltas: &[crate::probe::iptables::delta::CountDelta],
        at_seconds: f64,
    ) -> bool {
        use crate::netlink::nft::Family;
        // The kernel's generation skips 0 when it wraps.
        let before = if generation == 1 {
            u32::MAX
        } else {
            generation.wrapping_sub(1)
        };
        let none = crate::probe::iptables::delta::CountDelta::default();
        let mut all = true;
        for family in [Family::Ip, Family::Ip6] {
            let d = deltas.iter().find(|d| d.family == family.code()).unwrap_or(&none);
            if !d.kube_table {
                self.nftables
                    .advance(family, before, generation, at_seconds, |c| Some(c.clone()));
            }
            let carried = d.uncounted.is_none() && self.iptables.advance(family, before, generation, at_seconds, d);
            all &= carried;
        }
        all
    }
}

/// File probes whose blocking read is still running, and since when. A read
/// stuck in the kernel (a hung FUSE or NFS file) cannot be cancelled; the next
/// interval must not start another thread behind it.
/// Global rather than in [`Memory`]: a stuck read pins a thread of this
/// process's blocking pool whichever context started it (`check` and `serve`
/// build one context each, tests several), so the guard is per process.
static BUSY: std::sync::Mutex<Vec<(ProbeName, std::time::Instant)>> = std::sync::Mutex::new(Vec::new());

struct Busy(ProbeName);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut b) = BUSY.lock() {
            b.retain(|(p, _)| *p != self.0);
        }
    }
}

/// Runs a probe's file reads on the blocking pool, at most one at a time per probe.
pub async fn blocking<T: Send + 'static>(
    probe: ProbeName,
    f: impl FnOnce() -> Result<T, ProbeError> + Send + 'static,
) -> Result<T, ProbeError> {
    {
        let mut busy = BUSY.lock().map_err(|e| ProbeError::Panicked(e.to_string()))?;
        if let Some((_, since)) = busy.iter().find(|(p, _)| *p == probe) {
            return Err(ProbeError::StillRunning(since.elapsed()));
        }
        busy.push((probe, std::time::Instant::now()));
    }
    let guard = Busy(probe);
    match tokio::task::spawn_blocking(move || {
        // Cleared when the read returns, however late: not when the probe times out.
        let _guard = guard;
        f()
    })
    .await
    {
        Ok(r) => r,
        Err(e) if e.is_panic() => Err(ProbeError::Panicked(panic_message(e.into_panic()))),
        Err(e) => Err(ProbeError::Panicked(e.to_string())),
    }
}

/// The text of a panic payload, for the probe's error.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit's notifications carry both families' counts to its generation (a family it did
    /// not touch unchanged), the nat drop chains with them, and kube-proxy's nftables table
    /// unless the commit changed it; an uncounted change leaves that family to be dumped.
    #[test]
    fn a_commit_carries_the_counts_it_accounts_for() {
        use crate::netlink::nft::Family;
        use crate::probe::iptables::delta::{CountDelta, TableDelta};
        let m = Memory::default();
        let at = |generation| counted::NetlinkCount {
            generation,
            ..Default::default()
        };
        let mut nat = iptables::SaveCounts::default();
        nat.tables
            .insert("nat".into(), iptables::TableCounts { chains: 5, rules: 2 });
        for f in [Family::Ip, Family::Ip6] {
            m.iptables.counts.put(f, nat.clone(), at(41));
            m.iptables.nat_drop_chains.put(f, vec!["KUBE-SVL-X".into()], at(41));
            m.nftables.put(f, None, at(41));
        }
        let ip = CountDelta {
            family: 2,
            tables: vec![TableDelta {
                table: "nat".into(),
                rules: 3,
                ..Default::default()
            }],
            kube_table: true,
            ..Default::default()
        };
        assert!(m.advance(42, &[ip], 1000.0));
        assert_eq!(m.iptables.counts.get(Family::Ip, 42).unwrap().0.tables["nat"].rules, 5);
        assert_eq!(
            m.iptables.counts.get(Family::Ip6, 42).unwrap().0,
            nat,
            "ip6 untouched, carried"
        );
        assert_eq!(
            m.iptables.nat_drop_chains.get(Family::Ip, 42).unwrap().0,
            ["KUBE-SVL-X"]
        );
        assert!(
            m.nftables.get(Family::Ip, 42).is_none(),
            "kube-proxy's ip table changed: dumped"
        );
        assert!(m.nftables.get(Family::Ip6, 42).is_some());
        let uncounted = CountDelta {
            family: 10,
            uncounted: Some("why"),
            ..Default::default()
        };
        assert!(!m.advance(43, &[uncounted], 1001.0));
        assert!(m.iptables.counts.get(Family::Ip, 43).is_some());
        assert!(m.iptables.counts.get(Family::Ip6, 43).is_none() && m.iptables.counts.get(Family::Ip6, 42).is_some());
        assert!(!m.advance(45, &[], 1002.0), "a commit missed (44): nothing carried");
    }

    #[test]
    fn a_probes_name_is_one_word_everywhere() {
        for p in PROBES {
            // The `probe` label and the JSON key of its outcome and of its facts.
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str(), "{p:?}");
            let facts = serde_json::to_value(crate::snapshot::Facts::default()).unwrap();
            let slot = facts.as_object().unwrap().contains_key(p.as_str());
            let omitted_while_empty = [
                ProbeName::ConntrackStale,
                ProbeName::NodePorts,
                ProbeName::NeighbourTables,
                ProbeName::ServiceTraffic,
                ProbeName::XtablesLock,
                ProbeName::RpFilter,
            ];
            assert_eq!(
                slot,
                !omitted_while_empty.contains(p),
                "{p}: its slot in /snapshot's facts"
            );
        }
    }

    #[test]
    fn cross_check_schedule() {
        let m = Memory::default();
        let t0 = std::time::Instant::now();
        assert!(!m.iptables.cross_check_due(None, t0), "0 = never");
        let every = Some(Duration::from_secs(600));
        assert!(m.iptables.cross_check_due(every, t0), "the first run checks");
        m.iptables.record_cross_check(t0, iptables::CrossCheck::default());
        assert!(!m.iptables.cross_check_due(every, t0 + Duration::from_secs(599)));
        assert!(m.iptables.cross_check_due(every, t0 + Duration::from_secs(600)));
        assert!(m.iptables.last_cross_check().is_some());
    }

    #[tokio::test]
    async fn a_panicking_read_is_a_failed_probe_and_frees_its_slot() {
        let err = blocking::<()>(ProbeName::Node, || panic!("garbage in /proc"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "panicked: garbage in /proc");
        // The busy mark is cleared on unwind: the next run starts.
        assert!(blocking(ProbeName::Node, || Ok(1)).await.is_ok());
    }

    #[tokio::test]
    async fn a_second_read_does_not_start_behind_a_stuck_one() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let stuck = tokio::spawn(blocking(ProbeName::Sysctls, move || {
            let _ = rx.recv();
            Ok(())
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let err = blocking(ProbeName::Sysctls, || Ok(())).await.unwrap_err();
        assert!(matches!(err, ProbeError::StillRunning(_)), "{err}");
        tx.send(()).unwrap();
        stuck.await.unwrap().unwrap();
        assert!(blocking(ProbeName::Sysctls, || Ok(())).await.is_ok());
    }
}
