//! History: the only stage with memory. It takes each probe's reading of one
//! moment and derives what needs more than one reading — counter increases
//! over a window, the conntrack growth trend and time to full, kube-proxy's
//! latency over the last interval, its restarts and the age of its last sync;
//! and (`findings`), fed each verdict, since when each finding is active.
//!
//! Probes derive nothing from the past (their context's `probe::Memory` only
//! spares work, keyed by the kernel's ruleset generation); evaluation is pure. Everything derived here
//! lands in [`Derived`], the snapshot's part beside the readings, so a reader
//! can tell a value read from the node from one computed over time.
//!
//! One clock for every window: the monotonic one (`mono`); the wall clock only where a
//! time is shown (see `History::observe`).

pub mod findings;
pub mod ipvs_weight_zero;
pub mod kube_proxy;
pub mod kube_proxy_syncs;
pub mod neighbour;
pub mod nftables_watch;
pub mod rp_filter;
pub mod series;
pub mod service_rejects;
pub mod service_traffic;
pub mod snat;
pub mod stale;
pub mod trend;
pub mod window;
pub mod xtables_lock;

use serde::{Deserialize, Serialize};

use crate::probe::{ProbeName, Reading};
use kube_proxy::{KubeProxyDerived, KubeProxyHistory};
use trend::{ConntrackTrend, TrendHistory};
use window::{CounterDeltas, CounterWindow};

/// What the history stage derived from the readings so far. A slot is empty
/// while its probe's latest run failed or found its source absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackDerived>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxyDerived>,
    /// kube-proxy's failed syncs over the last few minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy_sync_failures: Option<kube_proxy_syncs::SyncFailures>,
    /// Whether kube-proxy was seen and since when it is gone: kept while the kube-proxy probe
    /// finds it absent (see `kube_proxy::KubeProxyPresence`). Left out of the document until
    /// kube-proxy was seen (kube_proxy_down's evidence has the rest).
    #[serde(default, skip_serializing_if = "kube_proxy::KubeProxyPresence::never_seen")]
    pub kube_proxy_presence: Option<kube_proxy::KubeProxyPresence>,
    /// Stale conntrack entries with their first-seen times (the conntrack_stale probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack_stale: Option<stale::StaleDerived>,
    /// Points over the history window for the status page's charts. Kept across a
    /// failed run (a gap in the line), unlike the slots above.
    #[serde(default, skip_serializing_if = "series::Series::is_empty")]
    pub series: series::Series,
    /// The neighbour tables' counter increases (the neighbour_tables probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_tables: Option<neighbour::NeighbourDerived>,
    /// Whether each source NAT rule's counter moved (the conntrack_stale probe's SNAT facts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snat_rules: Option<snat::SnatDerived>,
    /// Packets kube-proxy's reject and drop rules count, per second (the iptables probe's counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_rejects: Option<service_rejects::ServiceRejects>,
    /// The service_traffic probe's tries per target: time histogram, p50/p99, results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_traffic: Option<service_traffic::ServiceTrafficDerived>,
    /// The nf_tables commits the watcher saw (the `nftables_watch` event source): its state,
    /// the journal of the last commits with their writers, the counters by writer class, and
    /// the change another process made to kube-proxy's rules while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nftables_watch: Option<nftables_watch::NftablesWatch>,
    /// How long the xtables lock's current holder has held it (the xtables_lock probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xtables_lock: Option<xtables_lock::XtablesLockHold>,
    /// Packets the reverse-path filter dropped over `--rp-filter.window` (the rp_filter probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rp_filter_drops: Option<rp_filter::RpFilterDrops>,
    /// How long each IPVS real server now at weight 0 has been so (the ipvs probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvs_weight_zero: Option<ipvs_weight_zero::WeightZeroAges>,
}

impl Derived {
    /// Nothing derived worth showing (a presence that never saw kube-proxy counts as nothing).
    pub fn is_empty(&self) -> bool {
        let presence = if kube_proxy::KubeProxyPresence::never_seen(&self.kube_proxy_presence) {
            None
        } else {
            self.kube_proxy_presence.clone()
        };
        Derived {
            kube_proxy_presence: presence,
            ..self.clone()
        } == Derived::default()
    }
}

/// conntrack over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackDerived {
    /// Counter increases (drop, early_drop, insert_failed...) over
    /// `--conntrack.window`; absent after a single reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<CounterDeltas>,
    /// Growth of the entry count over `--conntrack.trend-window` and the time
    /// until the table is full; absent until the readings cover half the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend: Option<ConntrackTrend>,
}

/// How far back the history looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryConfig {
    /// Counter increases count over this many seconds (`--conntrack.window`).
    pub conntrack_window_seconds: f64,
    /// The conntrack trend is fitted over this many seconds (`--conntrack.trend-window`).
    pub conntrack_trend_window_seconds: f64,
    /// How often the conntrack probe reads, in seconds: sizes the trend's history.
    pub conntrack_interval_seconds: f64,
    /// Neighbour table counter increases count over this many seconds (`--neighbour-tables.window`).
    pub neighbour_tables_window_seconds: f64,
    /// The reverse-path filter's drops count over this many seconds (`--rp-filter.window`).
    pub rp_filter_window_seconds: f64,
}

/// Readings kept for the counter window, at most (a reading every second for an hour).
const WINDOW_CAPACITY: usize = 4096;
/// The trend's readings are kept this long (seconds), or the fit window if longer.
const TREND_HISTORY_SECONDS: f64 = 3600.0;
/// The trend keeps at most this many readings.
const TREND_CAPACITY: usize = 4096;

/// Everything the agent remembers between probe runs.
#[derive(Debug)]
pub struct History {
    conntrack_window: CounterWindow,
    conntrack_trend: TrendHistory,
    kube_proxy: KubeProxyHistory,
    kube_proxy_syncs: kube_proxy_syncs::SyncFailureHistory,
    stale: stale::StaleHistory,
    /// The trend's fit window, in seconds: the shortest forecast horizon.
    conntrack_trend_window: f64,
    fill: series::Ring,
    sync_p99: series::Ring,
    stale_entries: series::Ring,
    neighbour: neighbour::NeighbourHistory,
    snat: snat::SnatHistory,
    service_rejects: service_rejects::ServiceRejectHistory,
    service_traffic: service_traffic::ServiceTrafficHistory,
    nftables_watch: nftables_watch::WatchHistory,
    /// Quiet events were taken since `derived.nftables_watch` was last set ([`Self::settle`]).
    nftables_unsettled: bool,
    xtables_lock: xtables_lock::XtablesLockHistory,
    /// Where the conntrack probe's latest statistics came from (`stats_source`).
    conntrack_source: Option<String>,
    rp_filter: rp_filter::RpFilterHistory,
    ipvs_weight_zero: ipvs_weight_zero::WeightZeroHistory,
}

impl History {
    pub fn new(c: HistoryConfig) -> Self {
        let span = TREND_HISTORY_SECONDS.max(c.conntrack_trend_window_seconds);
        let capacity = (span / c.conntrack_interval_seconds.max(0.001)).ceil() as usize + 1;
        History {
            conntrack_window: CounterWindow::new(c.conntrack_window_seconds, WINDOW_CAPACITY),
            conntrack_trend: TrendHistory::new(c.conntrack_trend_window_seconds, span, capacity.min(TREND_CAPACITY)),
            kube_proxy: KubeProxyHistory::default(),
            kube_proxy_syncs: kube_proxy_syncs::SyncFailureHistory::default(),
            stale: stale::StaleHistory::default(),
            conntrack_trend_window: c.conntrack_trend_window_seconds,
            fill: series::Ring::new(span, series::CAPACITY),
            sync_p99: series::Ring::new(span, series::CAPACITY),
            stale_entries: series::Ring::new(span, series::CAPACITY),
            neighbour: neighbour::NeighbourHistory::new(c.neighbour_tables_window_seconds),
            snat: snat::SnatHistory::default(),
            service_rejects: Default::default(),
            service_traffic: Default::default(),
            nftables_watch: Default::default(),
            nftables_unsettled: false,
            xtables_lock: Default::default(),
            conntrack_source: None,
            rp_filter: rp_filter::RpFilterHistory::new(c.rp_filter_window_seconds),
            ipvs_weight_zero: Default::default(),
        }
    }

    /// Takes one probe's reading and updates what derives from it. `mono` is a monotonic time
    /// in seconds: every window is measured on it (counter windows, the trend, kube-proxy's
    /// latency and throttling windows, its restart and absence, the charts' span), so a wall
    /// clock step (NTP) moves no window. `now` is the wall clock (Unix seconds), used only for
    /// what is shown as a time and for ages against the node's own timestamps (kube-proxy's
    /// last sync).
    pub fn observe(&mut self, reading: &Reading, now: f64, mono: f64, derived: &mut Derived) {
        match reading {
            Reading::Conntrack(ct) => {
                self.conntrack_source = ct.stats_source.clone();
                let d = ConntrackDerived {
                    window: self.conntrack_window.push(mono, &ct.stats),
                    trend: self.conntrack_trend.push(mono, ct.entries, ct.max),
                };
                if let Some(r) = ct.fill_ratio() {
                    self.fill.push(now, mono, r);
                }
                derived.series.conntrack_fill = self.fill.points();
                // The forecast reaches as far ahead as the drawn history reaches back, at least the trend window.
                let horizon = self.fill.covered().max(self.conntrack_trend_window);
                derived.series.conntrack_fill_forecast = d.trend.as_ref().map_or(Vec::new(), |t| {
                    series::fill_forecast(now, t.entries_fitted, t.slope_per_second, ct.max, horizon)
                });
                // Nothing derived yet (a first reading): no slot, as in `check`.
                derived.conntrack = (d != ConntrackDerived::default()).then_some(d);
            }
            Reading::KubeProxy(kp) => {
                let d = self.kube_proxy.observe(kp, now, mono);
                if let Some(p99) = d.sync.as_ref().and_then(|w| w.p99) {
                    self.sync_p99.push(now, mono, p99);
                }
                derived.series.kube_proxy_sync_p99_seconds = self.sync_p99.points();
                derived.kube_proxy = Some(d);
                derived.kube_proxy_sync_failures = self.kube_proxy_syncs.observe(kp, mono);
                derived.kube_proxy_presence = Some(self.kube_proxy.presence());
            }
            Reading::ConntrackStale(f) => {
                self.stale_entries
                    .push(now, mono, f.stale_entries.values().sum::<u64>() as f64);
                derived.series.stale_entries = self.stale_entries.points();
                derived.conntrack_stale = Some(self.stale.observe(f, now, mono));
                derived.snat_rules = f.snat.as_ref().map(|s| self.snat.observe(s, mono));
            }
            Reading::NeighbourTables(f) => derived.neighbour_tables = Some(self.neighbour.observe(f, mono)),
            Reading::Iptables(f) => {
                derived.service_rejects = f
                    .rule_counters
                    .as_ref()
                    .and_then(|c| self.service_rejects.observe(c, mono))
            }
            Reading::ServiceTraffic(f) => derived.service_traffic = Some(self.service_traffic.observe(f)),
            Reading::RpFilter(f) => derived.rp_filter_drops = self.rp_filter.observe(f, mono),
            Reading::XtablesLock(f) => derived.xtables_lock = self.xtables_lock.observe(f, now, mono),
            Reading::Ipvs(f) => derived.ipvs_weight_zero = Some(self.ipvs_weight_zero.observe(f, now, mono)),
            _ => {}
        }
    }

    /// An event source reported `event` (see `crate::watch`), folded in at `now` (Unix seconds)
    /// and `mono`: the nf_tables journal takes a commit, kube-proxy's presence an exit.
    /// `kube_proxy_pid` is the kube-proxy process the kube_proxy probe found last, if any.
    pub fn event(
        &mut self,
        event: &crate::watch::Event,
        kube_proxy_pid: Option<i32>,
        now: f64,
        mono: f64,
        derived: &mut Derived,
    ) {
        use crate::watch::Event;
        match event {
            Event::ExitWatching | Event::ExitUnavailable(_) | Event::ProcessExited { .. } => {
                self.kube_proxy.exit_event(event, now, mono);
                derived.kube_proxy_presence = Some(self.kube_proxy.presence());
            }
            // Between the conntrack probe's readings, into the same counter window, when they
            // come from the same place (the window compares counters of one source).
            Event::ConntrackStats { source, stats, .. } => {
                if self.conntrack_source.as_deref() == Some(source.as_str()) {
                    let window = self.conntrack_window.push(mono, stats);
                    match derived.conntrack.as_mut() {
                        Some(d) => d.window = window,
                        None => {
                            derived.conntrack = window.map(|w| ConntrackDerived {
                                window: Some(w),
                                trend: None,
                            })
                        }
                    }
                }
            }
            Event::StatsReading | Event::StatsUnavailable(_) => {}
            // A quiet one (kube-proxy's commit dropped in the kernel) is published with the
            // next publication, which settles it first.
            Event::Commit(_) if event.quiet() => {
                self.nftables_watch.take(event, kube_proxy_pid, mono);
                self.nftables_unsettled = true;
            }
            Event::Watching | Event::Unavailable(_) | Event::Commit(_) | Event::Lost { .. } => {
                derived.nftables_watch = Some(self.nftables_watch.observe(event, kube_proxy_pid, mono).clone());
                self.nftables_unsettled = false;
            }
        }
    }

    /// Brings into `derived` what quiet events were taken since it was last set: called before
    /// each verdict.
    pub fn settle(&mut self, derived: &mut Derived) {
        if std::mem::take(&mut self.nftables_unsettled) {
            derived.nftables_watch = Some(self.nftables_watch.settled().clone());
        }
    }

    /// A probe found its source absent at `now` (Unix seconds), `mono` (monotonic seconds);
    /// `missed` follows. Only kube-proxy's absence is remembered: a node should have it or not,
    /// and whether it was seen matters.
    pub fn absent(&mut self, probe: ProbeName, now: f64, mono: f64, derived: &mut Derived) {
        if probe == ProbeName::KubeProxy {
            self.kube_proxy.absent(now, mono);
            derived.kube_proxy_presence = Some(self.kube_proxy.presence());
        }
    }

    /// A probe ran without a reading (failed or absent): what derived from its
    /// readings is no longer current. What was remembered stays, so a single
    /// failed run does not restart the windows.
    pub fn missed(&mut self, probe: ProbeName, derived: &mut Derived) {
        match probe {
            ProbeName::Conntrack => {
                derived.conntrack = None;
                // The forecast is the current trend's, not history: it goes with it.
                derived.series.conntrack_fill_forecast.clear();
            }
            ProbeName::KubeProxy => {
                derived.kube_proxy = None;
                derived.kube_proxy_sync_failures = None;
            }
            ProbeName::ConntrackStale => {
                derived.conntrack_stale = None;
                derived.snat_rules = None;
            }
            ProbeName::NeighbourTables => derived.neighbour_tables = None,
            ProbeName::Iptables => derived.service_rejects = None,
            ProbeName::RpFilter => derived.rp_filter_drops = None,
            ProbeName::XtablesLock => {
                self.xtables_lock.missed();
                derived.xtables_lock = None;
            }
            ProbeName::Ipvs => {
                self.ipvs_weight_zero.missed();
                derived.ipvs_weight_zero = None;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::conntrack::ConntrackFacts;

    fn ct(entries: u64, drop: u64) -> Reading {
        Reading::Conntrack(ConntrackFacts {
            entries,
            max: 1000,
            stats: [("drop".to_string(), drop)].into(),
            ..Default::default()
        })
    }

    #[test]
    fn windows_need_two_readings_and_a_miss_clears_only_the_derived_slot() {
        let mut h = History::new(HistoryConfig {
            conntrack_window_seconds: 60.0,
            conntrack_trend_window_seconds: 600.0,
            conntrack_interval_seconds: 5.0,
            neighbour_tables_window_seconds: 300.0,
            rp_filter_window_seconds: 300.0,
        });
        let mut d = Derived::default();
        assert!(d.is_empty());
        h.observe(&ct(10, 5), 100.0, 0.0, &mut d);
        assert_eq!(d.conntrack, None, "one reading: nothing derived yet");
        h.missed(ProbeName::Conntrack, &mut d);
        assert!(d.is_empty());
        h.observe(&ct(10, 9), 110.0, 10.0, &mut d);
        let w = d.conntrack.as_ref().unwrap().window.clone().unwrap();
        assert_eq!((w.seconds, w.get("drop")), (10.0, 4), "the window spans the failed run");
    }

    /// The statistics read between the conntrack probe's runs go into its window when they come
    /// from the same source: the drop shows a second after it, not at the probe's next run.
    #[test]
    fn conntrack_statistics_between_readings_fill_the_window() {
        use crate::watch::Event;
        let mut h = History::new(HistoryConfig {
            conntrack_window_seconds: 60.0,
            conntrack_trend_window_seconds: 600.0,
            conntrack_interval_seconds: 5.0,
            neighbour_tables_window_seconds: 300.0,
            rp_filter_window_seconds: 300.0,
        });
        let mut d = Derived::default();
        let reading = |drop: u64| {
            let Reading::Conntrack(mut f) = ct(10, drop) else {
                unreachable!()
            };
            f.stats_source = Some("/proc/net/stat/nf_conntrack".into());
            Reading::Conntrack(f)
        };
        h.observe(&reading(5), 100.0, 0.0, &mut d);
        let stats = |source: &str, drop: u64| Event::ConntrackStats {
            source: source.into(),
            stats: [("drop".to_string(), drop)].into(),
            at_seconds: 101.0,
        };
        // Another source's numbers are not compared with the probe's.
        h.event(&stats("ctnetlink", 9), None, 101.0, 1.0, &mut d);
        assert_eq!(d.conntrack, None);
        h.event(&stats("/proc/net/stat/nf_conntrack", 9), None, 101.0, 1.0, &mut d);
        let w = d.conntrack.as_ref().unwrap().window.clone().unwrap();
        assert_eq!((w.seconds, w.get("drop")), (1.0, 4));
        // The probe's next reading goes on from there.
        h.observe(&reading(10), 105.0, 5.0, &mut d);
        let w = d.conntrack.as_ref().unwrap().window.clone().unwrap();
        assert_eq!((w.seconds, w.get("drop")), (5.0, 5));
    }

    #[test]
    fn series_follow_the_readings_and_survive_a_miss() {
        let mut h = History::new(HistoryConfig {
            conntrack_window_seconds: 60.0,
            conntrack_trend_window_seconds: 40.0,
            conntrack_interval_seconds: 5.0,
            neighbour_tables_window_seconds: 300.0,
            rp_filter_window_seconds: 300.0,
        });
        let mut d = Derived::default();
        // 100 entries more every 5 s of a 1000 limit: a trend, and a forecast to full.
        for i in 0..10u64 {
            h.observe(&ct(100 + 10 * i, 0), 1000.0 + 5.0 * i as f64, 5.0 * i as f64, &mut d);
        }
        let fill = &d.series.conntrack_fill;
        assert_eq!(fill.len(), 10);
        assert_eq!((fill[0], fill[9]), ([1000.0, 0.1], [1045.0, 0.19]));
        // 2 entries/s from 190: full (1000) in 405 s; the horizon (45 s covered, 40 s window) comes first.
        assert_eq!(d.series.conntrack_fill_forecast, vec![[1045.0, 0.19], [1090.0, 0.28]]);
        h.missed(ProbeName::Conntrack, &mut d);
        assert_eq!(d.conntrack, None);
        assert_eq!(d.series.conntrack_fill.len(), 10, "a miss is a gap, not a reset");
        assert!(d.series.conntrack_fill_forecast.is_empty(), "no trend now, no forecast");
    }
}
