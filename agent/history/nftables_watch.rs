//! The journal of nf_tables commits (the `nftables_watch` source's events): the last
//! [`JOURNAL`] commits with their writer, each one's writer class (kube-proxy or other), the
//! counters by class, the losses, and the change another process made to kube-proxy's rules
//! that `rules_changed_by_other_process` reports until kube-proxy's next commit restores them.
//!
//! A commit is kube-proxy's when its writer is the process the kube_proxy probe found, or a
//! child of it (kube-proxy writes through `iptables-restore` and `nft -f -`); when the probe
//! found none, when the writer or its parent is named as kube-proxy; when the writer had
//! exited before it was looked at (its parent unknown) while kube-proxy runs or while its
//! process is not known yet, when it is named as one of the tools kube-proxy writes with.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::watch::{Commit, Event, TableChange};

/// Commits kept in the journal.
pub const JOURNAL: usize = 64;

/// The comms of the tools kube-proxy commits with (15 bytes at most, as the kernel keeps them).
pub const KUBE_PROXY_TOOLS: &[&str] = &[
    "iptables-restor",
    "iptables-nft-re",
    "ip6tables-resto",
    "ip6tables-nft-r",
    "xtables-nft-mul",
    "nft",
];

/// The tools kube-proxy adds its jumps with, one rule at a time (`iptables -I`), by comm.
const IPTABLES_TOOLS: &[&str] = &["iptables", "iptables-nft", "ip6tables", "ip6tables-nft"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriterClass {
    KubeProxy,
    Other,
}

impl WriterClass {
    /// The `writer` label of `proxywatch_nftables_commits_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            WriterClass::KubeProxy => "kube-proxy",
            WriterClass::Other => "other",
        }
    }
}

/// Whether the watcher listens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchState {
    #[default]
    Starting,
    Watching,
    Unavailable,
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// None for a loss: notifications lost, rules re-read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<Commit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_class: Option<WriterClass>,
    /// How the class was told: `pid`, `parent pid`, `name`, `exited tool name`, `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classified_by: Option<String>,
    /// For a loss: "notifications lost, rules re-read", with its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_timestamp_seconds: Option<f64>,
}

/// The change another process made to kube-proxy's rules, while it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherChange {
    /// The latest commit of the most severe kind (kube-proxy's own rules removed, or only
    /// rules of the built-in chains of the tables it hooks).
    pub commit: Commit,
    /// kube-proxy's own rules, chains or table were removed.
    pub removed_kube_rules: bool,
    /// Unix time of the first such commit since kube-proxy last restored its rules.
    pub first_seconds: f64,
    /// Such commits since.
    pub commits: u64,
    /// When it was recorded on the monotonic clock (the window is measured on it). Never shown.
    #[serde(skip)]
    pub mono: f64,
    /// What kube-proxy has to write back, per table the commit took from, before the change is
    /// over. Never shown.
    #[serde(skip)]
    pub pending: Vec<Pending>,
}

/// One table's part of an [`OtherChange`]: the rules of kube-proxy's chains that went (written
/// back by one of its restores, which rewrite whole chains), and the jumps to them from the
/// built-in chains that went (written back one by one: kube-proxy adds each with `iptables -I`,
/// and its restores never write them, so its partial syncs alone never end the change).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    family: String,
    table: String,
    /// Rules of kube-proxy's chains a single commit of its must add (1 when only other rules
    /// of the built-in chains went: any restore of its ends it).
    rules: u64,
    rules_back: bool,
    jumps: u64,
    jumps_back: u64,
}

impl Pending {
    fn of(c: &Commit) -> Vec<Pending> {
        c.tables
            .iter()
            .filter(|t| t.concerns_kube().is_some())
            .map(|t| {
                let own = t.kube_rules_removed.saturating_sub(t.base_kube_rules_removed);
                let rules = if own == 0 && t.base_kube_rules_removed == 0 {
                    1
                } else {
                    own
                };
                Pending {
                    family: t.family.clone(),
                    table: t.table.clone(),
                    rules,
                    rules_back: rules == 0,
                    jumps: t.base_kube_rules_removed,
                    jumps_back: 0,
                }
            })
            .collect()
    }

    /// Adds a later commit's pending tables to those already pending: a table taken from again
    /// needs the larger of the two chain rewrites and every jump.
    fn merge(into: &mut Vec<Pending>, more: Vec<Pending>) {
        for m in more {
            match into.iter_mut().find(|p| p.family == m.family && p.table == m.table) {
                Some(p) => {
                    if !m.rules_back {
                        p.rules = p.rules.max(m.rules);
                        p.rules_back = false;
                    }
                    p.jumps += m.jumps;
                }
                None => into.push(m),
            }
        }
    }

    /// Takes one of kube-proxy's commits; whether this table is back.
    fn restore(&mut self, c: &Commit) -> bool {
        for t in c
            .tables
            .iter()
            .filter(|t| t.family == self.family && t.table == self.table)
        {
            if t.kube_rules_added.saturating_sub(t.base_kube_rules_added) >= self.rules {
                self.rules_back = true;
            }
            self.jumps_back += t.base_kube_rules_added;
        }
        self.rules_back && self.jumps_back >= self.jumps
    }
}

/// What the history stage derived from the watcher's events (`derived.nftables_watch`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NftablesWatch {
    pub state: WatchState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last commits, oldest first.
    pub journal: Vec<Entry>,
    pub commits_kube_proxy_total: u64,
    pub commits_other_total: u64,
    pub notifications_lost_total: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by_other: Option<OtherChange>,
}

impl Entry {
    /// One line for `check` and the status page: `2026-12-01T21:00:00.000Z gen 41 iptables
    /// (PID 4242), parent bash (PID 880) [other]: ip nat -9 +0`; a loss says so.
    pub fn describe(&self) -> String {
        let Some(c) = &self.commit else {
            let at = self
                .lost_timestamp_seconds
                .map(crate::timefmt::rfc3339)
                .unwrap_or_default();
            return format!("{at} {}", self.lost.as_deref().unwrap_or("notifications lost"));
        };
        let mut tables: Vec<String> = c
            .tables
            .iter()
            .map(|t| {
                let mut s = format!("{} {}", t.family, t.table);
                if t.table_added {
                    s.push_str(" added");
                }
                if t.table_deleted {
                    s.push_str(" deleted");
                }
                if t.rules_added + t.rules_removed > 0 {
                    s.push_str(&format!(" +{} -{} rules", t.rules_added, t.rules_removed));
                }
                if t.chains_deleted > 0 {
                    s.push_str(&format!(" -{} chains", t.chains_deleted));
                }
                s
            })
            .collect();
        if c.more_tables > 0 {
            tables.push(format!("{} more tables", c.more_tables));
        }
        format!(
            "{} gen {} {} [{}]: {}",
            crate::timefmt::rfc3339(c.at_seconds),
            c.generation,
            c.writer.describe(),
            self.writer_class.map_or("?", WriterClass::as_str),
            if c.filtered {
                "changes not read (dropped in the kernel: kube-proxy's own, re-read at the polls)".into()
            } else if tables.is_empty() {
                "no table changed".into()
            } else {
                tables.join(", ")
            }
        )
    }
}

/// The journal's memory.
#[derive(Debug, Default)]
pub struct WatchHistory {
    journal: VecDeque<Entry>,
    derived: NftablesWatch,
}

/// kube-proxy's process as the kube_proxy probe found it (its PID), or none.
pub fn classify(c: &Commit, kube_proxy_pid: Option<i32>) -> (WriterClass, &'static str) {
    let w = &c.writer;
    // A writer gone before it was looked at is told by its name only where the process events
    // did not see its fork (not followed, lost, or before they were): where they saw it, its
    // parent is known, kube-proxy or not.
    let tool = || w.parent_pid.is_none() && w.name.as_deref().is_some_and(|n| KUBE_PROXY_TOOLS.contains(&n));
    // kube-proxy adds each jump from a built-in chain with `iptables -I`; a script uses the same
    // tool, so by that name only a gone writer whose commit adds such jumps and nothing else
    // (it can have taken nothing) is kube-proxy's.
    let jump_only = || {
        w.parent_pid.is_none()
            && w.name.as_deref().is_some_and(|n| IPTABLES_TOOLS.contains(&n))
            && !c.tables.is_empty()
            && c.tables.iter().all(|t| {
                t.rules_removed == 0
                    && t.chains_deleted == 0
                    && !t.table_deleted
                    && t.base_kube_rules_added > 0
                    && t.rules_added == t.base_kube_rules_added
            })
    };
    match kube_proxy_pid {
        Some(kp) if w.pid.is_some_and(|p| i64::from(p) == i64::from(kp)) => (WriterClass::KubeProxy, "pid"),
        _ if w.gone && jump_only() => (WriterClass::KubeProxy, "exited tool name"),
        Some(kp) if w.parent_pid == Some(kp) => (WriterClass::KubeProxy, "parent pid"),
        Some(_) if w.gone && tool() => (WriterClass::KubeProxy, "exited tool name"),
        Some(_) => (WriterClass::Other, "pid"),
        None if c.named_kube_proxy => (WriterClass::KubeProxy, "name"),
        // Before the kube_proxy probe's first report (the agent starting, its socket's queue
        // read late), a kube-proxy child gone is told by its name only.
        None if w.gone && tool() => (WriterClass::KubeProxy, "exited tool name"),
        None => (WriterClass::Other, "none"),
    }
}

impl WatchHistory {
    pub fn derived(&self) -> &NftablesWatch {
        &self.derived
    }

    /// Takes one event at `mono` (monotonic seconds).
    pub fn observe(&mut self, event: &Event, kube_proxy_pid: Option<i32>, mono: f64) -> &NftablesWatch {
        self.take(event, kube_proxy_pid, mono);
        self.settled()
    }

    /// What the events taken so far derive, the journal copied in.
    pub fn settled(&mut self) -> &NftablesWatch {
        self.derived.journal = self.journal.iter().cloned().collect();
        &self.derived
    }

    /// Takes one event, the derived journal left as it was until [`Self::settled`] (a churn of
    /// kube-proxy's dropped commits copies it once per publication, not once per commit).
    pub fn take(&mut self, event: &Event, kube_proxy_pid: Option<i32>, mono: f64) {
        let d = &mut self.derived;
        match event {
            Event::Watching => {
                d.state = WatchState::Watching;
                d.error = None;
            }
            Event::Unavailable(why) => {
                d.state = WatchState::Unavailable;
                d.error = Some(why.clone());
            }
            Event::Lost { at_seconds } => {
                d.notifications_lost_total += 1;
                self.journal.push_back(Entry {
                    commit: None,
                    writer_class: None,
                    classified_by: None,
                    lost: Some("notifications lost, rules re-read".into()),
                    lost_timestamp_seconds: Some(*at_seconds),
                });
            }
            // Another source's (kube-proxy's exit): not the journal's.
            Event::ExitWatching
            | Event::ExitUnavailable(_)
            | Event::ProcessExited { .. }
            | Event::StatsReading
            | Event::StatsUnavailable(_)
            | Event::ConntrackStats { .. } => {}
            Event::Commit(c) => {
                let (class, by) = classify(c, kube_proxy_pid);
                match class {
                    WriterClass::KubeProxy => {
                        d.commits_kube_proxy_total += 1;
                        // kube-proxy wrote its rules back in every table they were removed from:
                        // its chains' rules in one commit at least as many as went, and the
                        // jumps from the built-in chains as many as went (its partial syncs
                        // rewrite its chains only, never the jumps a flush took: not restored).
                        let restored = d.changed_by_other.as_mut().is_some_and(|o| {
                            let mut all = true;
                            for p in &mut o.pending {
                                all &= p.restore(c);
                            }
                            all
                        });
                        if restored {
                            d.changed_by_other = None;
                        }
                    }
                    WriterClass::Other => {
                        d.commits_other_total += 1;
                        let concern = c.tables.iter().filter_map(TableChange::concerns_kube).max();
                        if let Some(removed_kube_rules) = concern {
                            let (first, commits, worse) = match &d.changed_by_other {
                                Some(o) => (
                                    o.first_seconds,
                                    o.commits + 1,
                                    removed_kube_rules >= o.removed_kube_rules,
                                ),
                                None => (c.at_seconds, 1, true),
                            };
                            // What kube-proxy must write back adds up over the other
                            // process's commits, whichever of them is shown.
                            let previous = d.changed_by_other.take();
                            let mut pending = previous.as_ref().map(|o| o.pending.clone()).unwrap_or_default();
                            Pending::merge(&mut pending, Pending::of(c));
                            d.changed_by_other = Some(match previous {
                                Some(o) if !worse => OtherChange { commits, pending, ..o },
                                _ => OtherChange {
                                    commit: c.clone(),
                                    removed_kube_rules,
                                    first_seconds: first,
                                    commits,
                                    mono,
                                    pending,
                                },
                            });
                        }
                    }
                }
                self.journal.push_back(Entry {
                    commit: Some(c.clone()),
                    writer_class: Some(class),
                    classified_by: Some(by.into()),
                    lost: None,
                    lost_timestamp_seconds: None,
                });
            }
        }
        while self.journal.len() > JOURNAL {
            self.journal.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Writer;

    fn table(name: &str, f: impl FnOnce(&mut TableChange)) -> TableChange {
        let mut t = TableChange {
            family: "ip".into(),
            table: name.into(),
            ..Default::default()
        };
        f(&mut t);
        t
    }

    fn commit(pid: u32, ppid: Option<i32>, name: &str, tables: Vec<TableChange>) -> Commit {
        Commit {
            at_seconds: 1000.0 + f64::from(pid),
            generation: pid,
            writer: Writer {
                pid: Some(pid),
                name: Some(name.into()),
                parent_pid: ppid,
                gone: ppid.is_none(),
                ..Default::default()
            },
            named_kube_proxy: false,
            tables,
            more_tables: 0,
            notifications: 1,
            undecoded: 0,
            filtered: false,
        }
    }

    #[test]
    fn kube_proxy_and_its_children_are_kube_proxy_even_gone_others_are_not() {
        let c = commit(11, Some(10), "iptables-restor", vec![]);
        assert_eq!(classify(&c, Some(10)), (WriterClass::KubeProxy, "parent pid"));
        assert_eq!(
            classify(&commit(10, Some(1), "kube-proxy", vec![]), Some(10)).0,
            WriterClass::KubeProxy
        );
        assert_eq!(
            classify(&commit(12, Some(5), "iptables", vec![]), Some(10)),
            (WriterClass::Other, "pid")
        );
        assert_eq!(
            classify(&commit(13, None, "iptables-restor", vec![]), Some(10)),
            (WriterClass::KubeProxy, "exited tool name")
        );
        assert_eq!(
            classify(&commit(13, None, "iptables", vec![]), Some(10)).0,
            WriterClass::Other
        );
        assert_eq!(
            classify(&commit(13, None, "nft", vec![]), None),
            (WriterClass::KubeProxy, "exited tool name")
        );
        assert_eq!(classify(&commit(13, None, "bash", vec![]), None).0, WriterClass::Other);
        // The process events saw a tool that is gone forked from another process (a script's
        // `iptables-restore`): it is that process's, whatever its name...
        let mut forked = commit(15, Some(5), "iptables-restor", vec![]);
        (forked.writer.gone, forked.writer.parent_from_fork) = (true, true);
        assert_eq!(classify(&forked, Some(10)), (WriterClass::Other, "pid"));
        assert_eq!(classify(&forked, None), (WriterClass::Other, "none"));
        // ... and one whose parent is named kube-proxy, before the kube_proxy probe found it
        // (kube-proxy restarted), is kube-proxy's.
        forked.named_kube_proxy = true;
        assert_eq!(classify(&forked, None), (WriterClass::KubeProxy, "name"));
        // Gone, its fork unseen: an `iptables` that only added a jump to a KUBE-* chain from a
        // built-in chain is kube-proxy's; one that removed anything is not.
        let jump = |removed| {
            commit(
                16,
                None,
                "iptables",
                vec![table("nat", |t| {
                    (
                        t.rules_added,
                        t.kube_rules_added,
                        t.base_kube_rules_added,
                        t.rules_removed,
                    ) = (1, 1, 1, removed)
                })],
            )
        };
        assert_eq!(
            classify(&jump(0), Some(10)),
            (WriterClass::KubeProxy, "exited tool name")
        );
        assert_eq!(classify(&jump(0), None), (WriterClass::KubeProxy, "exited tool name"));
        assert_eq!(classify(&jump(1), Some(10)).0, WriterClass::Other);
        let mut seen = jump(0);
        (seen.writer.parent_pid, seen.writer.parent_from_fork) = (Some(5), true);
        assert_eq!(
            classify(&seen, Some(10)).0,
            WriterClass::Other,
            "its fork names another parent"
        );
        let mut named = commit(14, Some(3), "nft", vec![]);
        assert_eq!(classify(&named, None), (WriterClass::Other, "none"));
        named.named_kube_proxy = true;
        assert_eq!(classify(&named, None), (WriterClass::KubeProxy, "name"));
    }

    #[test]
    fn a_flush_by_another_process_stands_until_kube_proxy_restores_and_the_journal_is_bounded() {
        let mut h = WatchHistory::default();
        let kp = Some(10);
        let restore = |pid, n| {
            commit(
                pid,
                Some(10),
                "iptables-restor",
                vec![table("nat", |t| (t.rules_added, t.kube_rules_added) = (n, n))],
            )
        };
        // kube-proxy's own rewrites, removals included, raise nothing.
        let own = commit(
            11,
            Some(10),
            "iptables-restor",
            vec![table("nat", |t| (t.rules_removed, t.kube_rules_removed) = (5, 5))],
        );
        assert!(h.observe(&Event::Commit(own), kp, 1.0).changed_by_other.is_none());
        // Another process adds rules to its own table: journal only.
        let calico = commit(20, Some(1), "calico-node", vec![table("filter", |t| t.rules_added = 3)]);
        assert!(h.observe(&Event::Commit(calico), kp, 2.0).changed_by_other.is_none());
        // A base-chain rule removed in nat: a warning's fact; then the flush: critical.
        let base = commit(
            30,
            Some(1),
            "iptables",
            vec![table("nat", |t| (t.rules_removed, t.base_rules_removed) = (1, 1))],
        );
        let d = h.observe(&Event::Commit(base), kp, 3.0);
        let o = d.changed_by_other.as_ref().unwrap();
        assert!(!o.removed_kube_rules);
        let flush = commit(
            31,
            Some(30),
            "iptables",
            vec![table("nat", |t| (t.rules_removed, t.kube_rules_removed) = (9, 9))],
        );
        let d = h.observe(&Event::Commit(flush), kp, 4.0);
        let o = d.changed_by_other.as_ref().unwrap();
        assert!(o.removed_kube_rules);
        assert_eq!(
            (o.commit.writer.pid, o.commits, o.first_seconds, o.mono),
            (Some(31), 2, 1030.0, 4.0)
        );
        // A lesser change after it does not hide it.
        let base = commit(
            32,
            Some(1),
            "iptables",
            vec![table("nat", |t| (t.rules_removed, t.base_rules_removed) = (1, 1))],
        );
        let o = h
            .observe(&Event::Commit(base), kp, 5.0)
            .changed_by_other
            .clone()
            .unwrap();
        assert_eq!((o.commit.writer.pid, o.commits), (Some(31), 3));
        // kube-proxy rewrites fewer of its rules than went (a partial sync without the jumps): stands.
        assert!(h
            .observe(&Event::Commit(restore(12, 8)), kp, 5.5)
            .changed_by_other
            .is_some());
        // kube-proxy writes its rules back: cleared.
        let d = h.observe(&Event::Commit(restore(12, 9)), kp, 6.0);
        assert!(d.changed_by_other.is_none());
        assert_eq!((d.commits_kube_proxy_total, d.commits_other_total), (3, 4));
        let d = h.observe(&Event::Lost { at_seconds: 5.0 }, kp, 7.0);
        assert_eq!(d.notifications_lost_total, 1);
        assert_eq!(
            d.journal.last().unwrap().lost.as_deref(),
            Some("notifications lost, rules re-read")
        );
        for i in 0..100 {
            h.observe(&Event::Commit(restore(100 + i, 1)), kp, 8.0);
        }
        assert_eq!(h.derived().journal.len(), JOURNAL);
        assert_eq!(
            h.derived().journal[JOURNAL - 1].commit.as_ref().unwrap().generation,
            199
        );
    }

    /// Another process takes only the service portals (the jumps from PREROUTING and OUTPUT, as a
    /// firewall reload does): kube-proxy's partial syncs rewrite far more rules of its chains than
    /// went, but never the jumps, so the change stands until kube-proxy adds each jump back; a
    /// flush of two tables stands until both are back.
    #[test]
    fn removed_portals_stand_until_kube_proxy_adds_the_jumps_back_and_every_table_counts() {
        let mut h = WatchHistory::default();
        let kp = Some(10);
        let kube = |pid, tables| commit(pid, Some(10), "iptables-restor", tables);
        let portals = commit(
            40,
            Some(1),
            "iptables-nft-re",
            vec![table("nat", |t| {
                (
                    t.rules_removed,
                    t.kube_rules_removed,
                    t.base_rules_removed,
                    t.base_kube_rules_removed,
                ) = (2, 2, 2, 2)
            })],
        );
        let portals_again = || portals.clone();
        assert!(h
            .observe(&Event::Commit(portals_again()), kp, 1.0)
            .changed_by_other
            .is_some());
        let partial = kube(
            41,
            vec![table("nat", |t| (t.rules_added, t.kube_rules_added) = (700, 700))],
        );
        assert!(
            h.observe(&Event::Commit(partial), kp, 2.0).changed_by_other.is_some(),
            "a partial sync does not put the portals back"
        );
        let jump = |pid| {
            kube(
                pid,
                vec![table("nat", |t| {
                    (t.rules_added, t.kube_rules_added, t.base_kube_rules_added) = (1, 1, 1)
                })],
            )
        };
        assert!(h.observe(&Event::Commit(jump(42)), kp, 3.0).changed_by_other.is_some());
        assert!(h.observe(&Event::Commit(jump(43)), kp, 4.0).changed_by_other.is_none());

        let flush = commit(
            50,
            Some(1),
            "iptables",
            vec![
                table("nat", |t| (t.rules_removed, t.kube_rules_removed) = (9, 9)),
                table("filter", |t| (t.rules_removed, t.kube_rules_removed) = (4, 4)),
            ],
        );
        assert!(h.observe(&Event::Commit(flush), kp, 5.0).changed_by_other.is_some());
        let nat = kube(51, vec![table("nat", |t| (t.rules_added, t.kube_rules_added) = (9, 9))]);
        assert!(
            h.observe(&Event::Commit(nat), kp, 6.0).changed_by_other.is_some(),
            "filter is not back"
        );
        let filter = kube(
            52,
            vec![table("filter", |t| (t.rules_added, t.kube_rules_added) = (4, 4))],
        );
        assert!(h.observe(&Event::Commit(filter), kp, 7.0).changed_by_other.is_none());

        // A second change by another process: what the first one took still has to be written back.
        assert!(h
            .observe(&Event::Commit(portals_again()), kp, 8.0)
            .changed_by_other
            .is_some());
        let one = commit(
            60,
            Some(1),
            "iptables",
            vec![table("filter", |t| (t.rules_removed, t.kube_rules_removed) = (1, 1))],
        );
        let d = h.observe(&Event::Commit(one), kp, 9.0);
        assert_eq!(d.changed_by_other.as_ref().unwrap().commits, 2);
        assert_eq!(d.changed_by_other.as_ref().unwrap().pending.len(), 2);
        assert!(h.observe(&Event::Commit(jump(61)), kp, 10.0).changed_by_other.is_some());
        assert!(
            h.observe(&Event::Commit(jump(62)), kp, 11.0).changed_by_other.is_some(),
            "the filter rule the second commit took is not back"
        );
        let filter = kube(
            63,
            vec![table("filter", |t| (t.rules_added, t.kube_rules_added) = (3, 3))],
        );
        assert!(h.observe(&Event::Commit(filter), kp, 12.0).changed_by_other.is_none());
    }
}
