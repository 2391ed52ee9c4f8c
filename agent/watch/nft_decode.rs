//! nf_tables notifications (NFNLGRP_NFTABLES) -> commits: a pure decoder.
//!
//! The kernel notifies every change of a commit as it applies it (a table, chain, rule, set or
//! set element added or deleted, in the message's own layout), then one `NFT_MSG_NEWGEN` with the
//! new generation and the committing process (`NFTA_GEN_PROC_PID`, `NFTA_GEN_PROC_NAME`:
//! include/uapi/linux/netfilter/nf_tables.h, `nf_tables_fill_gen_info`). Commits are serialised
//! per network namespace (the commit mutex), so the changes between two NEWGENs are one commit's.
//! [`Pending`] sums them per table and hands them out, with the writer, at the NEWGEN.
//!
//! Only what the journal and `rules_changed_by_other_process` need is kept: per table, the rules
//! added and removed (those of kube-proxy's chains and tables apart), the chains added and
//! deleted (names capped), set elements, the table added or deleted. And, per family (`ip`,
//! `ip6`), what the commit did to the counts the iptables probe keeps ([`CountDelta`]: rules and
//! chains per iptables-nft table, as iptables-nft-save prints them, kube-proxy's rules and
//! chain families), with what notifications cannot tell (a chain added without `NLM_F_EXCL` may
//! be an existing one updated) and whether kube-proxy's nftables table changed. Everything is
//! bounded: a full resync of 10 000 rules is a few counters. Garbage is an error, never a panic.

use serde::{Deserialize, Serialize};

use crate::netlink::nft::{self, msg_type};
use crate::netlink::nft_uapi::*;
use crate::netlink::{nfgen, Msg, NlError, NLM_F_EXCL};
use crate::probe::iptables::delta::CountDelta;
use crate::probe::iptables::node::XTABLES;

/// kube-proxy's iptables chains start with this; its nftables tables are named
/// [`crate::probe::nftables::TABLE`].
pub const KUBE_CHAIN_PREFIX: &str = "KUBE-";
/// The iptables built-in chains: where kube-proxy's jump rules into its own chains live.
pub const BASE_CHAINS: &[&str] = &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
/// Chain names kept per table and direction; more are only counted.
pub const MAX_CHAIN_NAMES: usize = 8;
/// Tables kept per commit; more are only counted.
pub const MAX_TABLES: usize = 16;

/// What one commit did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableChange {
    /// nft's family name: `ip`, `ip6`, `inet`, `bridge`, `arp`, `netdev`, or the number.
    pub family: String,
    pub table: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_added: bool,
    /// The table itself was deleted (with whatever it held).
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_deleted: bool,
    pub rules_added: u64,
    pub rules_removed: u64,
    /// Of `rules_added` / `rules_removed`: rules of kube-proxy's own chains (`KUBE-*`) or tables
    /// (`kube-proxy`), and rules anywhere that jump or go to a `KUBE-*` chain.
    pub kube_rules_added: u64,
    pub kube_rules_removed: u64,
    /// Of `rules_removed`: rules of the iptables built-in chains (PREROUTING, OUTPUT...).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_rules_removed: u64,
    /// Of `kube_rules_added` / `kube_rules_removed`: rules of the built-in chains that jump to a
    /// `KUBE-*` chain (the service portals kube-proxy adds with `iptables -I`, apart from its
    /// restores).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_kube_rules_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_kube_rules_removed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chains_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chains_deleted: u64,
    /// The first [`MAX_CHAIN_NAMES`] chains deleted, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains_deleted_names: Vec<String>,
    /// Of `chains_deleted`: kube-proxy's (`KUBE-*`, or any chain of its nftables table).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kube_chains_deleted: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sets_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sets_deleted: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elements_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elements_removed: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TableChange {
    /// Whether this is one of kube-proxy's nftables tables.
    pub fn is_kube_table(&self) -> bool {
        self.table == crate::probe::nftables::TABLE
    }

    /// Whether kube-proxy keeps state here: its nftables table, or a table with changes to its chains.
    pub fn holds_kube(&self) -> bool {
        self.is_kube_table() || self.kube_rules_added + self.kube_rules_removed + self.kube_chains_deleted > 0
    }

    /// kube-proxy's own rules, chains or table went: what makes the finding critical.
    pub fn removed_kube(&self) -> bool {
        self.kube_rules_removed > 0 || self.kube_chains_deleted > 0 || (self.table_deleted && self.holds_kube())
    }

    /// Whether another process's change here concerns kube-proxy: its own rules, chains or table
    /// removed (true), or rules of the built-in chains where its jump rules live, or the table,
    /// removed in an iptables table it hooks (false); none otherwise.
    pub fn concerns_kube(&self) -> Option<bool> {
        if self.removed_kube() {
            return Some(true);
        }
        let iptables =
            matches!(self.family.as_str(), "ip" | "ip6") && matches!(self.table.as_str(), "nat" | "filter" | "mangle");
        (iptables && (self.base_rules_removed > 0 || self.table_deleted)).then_some(false)
    }
}

/// One commit as its NEWGEN closes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitFacts {
    /// NFTA_GEN_ID: the ruleset generation this commit made.
    pub generation: u32,
    /// NFTA_GEN_PROC_PID (Linux 4.18+), in the initial PID namespace.
    pub pid: Option<u32>,
    /// NFTA_GEN_PROC_NAME: the writer's comm (15 bytes at most).
    pub name: Option<String>,
    /// The tables it changed, by family and name.
    pub tables: Vec<TableChange>,
    /// Tables changed beyond [`MAX_TABLES`], only counted.
    pub more_tables: u32,
    /// Notifications of this commit (for the journal's size line).
    pub messages: u64,
    /// What it did to the probes' counts, per family it touched (`ip`, `ip6`).
    pub counts: Vec<CountDelta>,
}

/// The changes of the commit under way, until its NEWGEN.
#[derive(Debug, Default)]
pub struct Pending {
    /// By family code, in the order first changed (sorted at the NEWGEN).
    tables: Vec<(u8, TableChange)>,
    more_tables: u32,
    messages: u64,
    counts: Vec<CountDelta>,
}

fn family_name(code: u8) -> String {
    match code {
        1 => "inet".into(),
        2 => "ip".into(),
        3 => "arp".into(),
        5 => "netdev".into(),
        7 => "bridge".into(),
        10 => "ip6".into(),
        n => n.to_string(),
    }
}

fn string_attr(payload: &[u8], kind: u16) -> Result<Option<&str>, NlError> {
    let (_, _, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if a.kind == kind {
            return a.str().map(Some);
        }
    }
    Ok(None)
}

fn missing(what: &str) -> NlError {
    NlError::Malformed(format!("an nf_tables notification without its {what}"))
}

impl Pending {
    /// Forgets the commit under way (its notifications were lost).
    pub fn reset(&mut self) {
        *self = Pending::default();
    }

    /// Whether changes are waiting for their NEWGEN.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    fn table(&mut self, family: u8, table: &str) -> Option<&mut TableChange> {
        let i = match self.tables.iter().position(|(f, t)| *f == family && t.table == table) {
            Some(i) => i,
            None if self.tables.len() >= MAX_TABLES => {
                self.more_tables = self.more_tables.saturating_add(1);
                return None;
            }
            None => {
                self.tables.push((
                    family,
                    TableChange {
                        family: family_name(family),
                        table: table.to_string(),
                        ..Default::default()
                    },
                ));
                self.tables.len() - 1
            }
        };
        Some(&mut self.tables[i].1)
    }

    /// The count delta of `family`, for the families the probes count (`ip`, `ip6`).
    fn counts(&mut self, family: u8) -> Option<&mut CountDelta> {
        if family != nft::Family::Ip.code() && family != nft::Family::Ip6.code() {
            return None;
        }
        let i = match self.counts.iter().position(|c| c.family == family) {
            Some(i) => i,
            None => {
                self.counts.push(CountDelta {
                    family,
                    ..Default::default()
                });
                self.counts.len() - 1
            }
        };
        Some(&mut self.counts[i])
    }

    /// The count delta of `table` of `family` when the probes count that table: an iptables-nft
    /// table (Some(true)), kube-proxy's nftables table (Some(false)).
    fn counted(&mut self, family: u8, table: &str) -> Option<(&mut CountDelta, bool)> {
        let xtables = XTABLES.contains(&table);
        if !xtables && table != crate::probe::nftables::TABLE {
            return None;
        }
        let c = self.counts(family)?;
        if !xtables {
            c.kube_table = true;
        }
        Some((c, xtables))
    }

    /// Takes one notification; at a NEWGEN, returns the commit it closes. Messages of other
    /// subsystems and types are skipped; a malformed one is an error (the commit's other
    /// changes stay pending).
    pub fn feed(&mut self, m: &Msg<'_>) -> Result<Option<CommitFacts>, NlError> {
        if m.ty >> 8 != NFNL_SUBSYS_NFTABLES {
            return Ok(None);
        }
        let kind = m.ty & 0xff;
        if kind == NFT_MSG_NEWGEN {
            return self.generation(m.payload).map(Some);
        }
        let family = *m.payload.first().ok_or_else(|| missing("nfgenmsg"))?;
        match kind {
            NFT_MSG_NEWTABLE | NFT_MSG_DELTABLE | NFT_MSG_DESTROYTABLE => self.table_msg(family, kind, m)?,
            NFT_MSG_NEWCHAIN | NFT_MSG_DELCHAIN | NFT_MSG_DESTROYCHAIN => self.chain_msg(family, kind, m)?,
            NFT_MSG_NEWRULE | NFT_MSG_DELRULE | NFT_MSG_DESTROYRULE => self.rule_msg(family, kind, m)?,
            NFT_MSG_NEWSET | NFT_MSG_DELSET | NFT_MSG_DESTROYSET => self.set_msg(family, kind, m)?,
            NFT_MSG_NEWSETELEM | NFT_MSG_DELSETELEM | NFT_MSG_DESTROYSETELEM => self.elements_msg(family, kind, m)?,
            _ => {}
        }
        Ok(None)
    }

    /// A table added or deleted.
    fn table_msg(&mut self, family: u8, kind: u16, m: &Msg<'_>) -> Result<(), NlError> {
        let name = string_attr(m.payload, NFTA_TABLE_NAME)?.ok_or_else(|| missing("table name"))?;
        self.messages += 1;
        if let Some((c, true)) = self.counted(family, name) {
            c.table_change(name, kind == NFT_MSG_NEWTABLE);
        }
        if let Some(t) = self.table(family, name) {
            if kind == NFT_MSG_NEWTABLE {
                t.table_added = true;
            } else {
                t.table_deleted = true;
            }
        }
        Ok(())
    }

    /// A chain added or deleted.
    fn chain_msg(&mut self, family: u8, kind: u16, m: &Msg<'_>) -> Result<(), NlError> {
        let table = string_attr(m.payload, NFTA_CHAIN_TABLE)?.ok_or_else(|| missing("chain's table"))?;
        let name = string_attr(m.payload, NFTA_CHAIN_NAME)?.ok_or_else(|| missing("chain name"))?;
        self.messages += 1;
        if let Some((c, true)) = self.counted(family, table) {
            c.chain(table, name, kind == NFT_MSG_NEWCHAIN, m.flags & NLM_F_EXCL != 0);
        }
        if let Some(t) = self.table(family, table) {
            if kind == NFT_MSG_NEWCHAIN {
                // A base chain's policy update is notified as NEWCHAIN again: counted twice.
                t.chains_added += 1;
            } else {
                t.chains_deleted += 1;
                if name.starts_with(KUBE_CHAIN_PREFIX) || t.is_kube_table() {
                    t.kube_chains_deleted += 1;
                }
                if t.chains_deleted_names.len() < MAX_CHAIN_NAMES {
                    t.chains_deleted_names.push(name.to_string());
                }
            }
        }
        Ok(())
    }

    /// A rule added or removed.
    fn rule_msg(&mut self, family: u8, kind: u16, m: &Msg<'_>) -> Result<(), NlError> {
        // The same layout as a dump's rule: decode it as one.
        let rule = nft::decode_rule(msg_type(NFT_MSG_NEWRULE), m.payload)?;
        // A rule of a KUBE-* chain is kube-proxy's whatever it jumps to (as the iptables
        // tally counts it): the expressions are walked only for a rule of another chain,
        // the built-in chains where the jumps to kube-proxy's live among them. Most of a
        // resync's notifications are of kube-proxy's chains.
        let own = rule.chain.starts_with(KUBE_CHAIN_PREFIX);
        let jumps = !own && rule.jumps_to(KUBE_CHAIN_PREFIX)?;
        if let Some((c, true)) = self.counted(family, rule.table) {
            c.rule(&rule, own || jumps, kind == NFT_MSG_NEWRULE)?;
        }
        self.messages += 1;
        let (chain, table) = (rule.chain, rule.table);
        if let Some(t) = self.table(family, table) {
            let kube = own || jumps || t.is_kube_table();
            let base = BASE_CHAINS.contains(&chain);
            if kind == NFT_MSG_NEWRULE {
                t.rules_added += 1;
                t.kube_rules_added += u64::from(kube);
                t.base_kube_rules_added += u64::from(base && jumps);
            } else {
                t.rules_removed += 1;
                t.kube_rules_removed += u64::from(kube);
                t.base_rules_removed += u64::from(base);
                t.base_kube_rules_removed += u64::from(base && jumps);
            }
        }
        Ok(())
    }

    /// A set added or deleted (they count for kube-proxy's table only).
    fn set_msg(&mut self, family: u8, kind: u16, m: &Msg<'_>) -> Result<(), NlError> {
        let table = string_attr(m.payload, NFTA_SET_TABLE)?.ok_or_else(|| missing("set's table"))?;
        self.messages += 1;
        // Sets count for kube-proxy's table only (the iptables tally counts none).
        self.counted(family, table);
        if let Some(t) = self.table(family, table) {
            if kind == NFT_MSG_NEWSET {
                t.sets_added += 1;
            } else {
                t.sets_deleted += 1;
            }
        }
        Ok(())
    }

    /// Set elements added or removed.
    fn elements_msg(&mut self, family: u8, kind: u16, m: &Msg<'_>) -> Result<(), NlError> {
        let (_, _, attrs) = nfgen(m.payload)?;
        let (mut table, mut count) = (None, 0u64);
        for a in attrs {
            let a = a?;
            match a.kind {
                NFTA_SET_ELEM_LIST_TABLE => table = Some(a.str()?),
                NFTA_SET_ELEM_LIST_ELEMENTS => {
                    for e in a.nested() {
                        e?;
                        count += 1;
                    }
                }
                _ => {}
            }
        }
        let table = table.ok_or_else(|| missing("element's table"))?;
        self.messages += 1;
        self.counted(family, table);
        if let Some(t) = self.table(family, table) {
            if kind == NFT_MSG_NEWSETELEM {
                t.elements_added += count;
            } else {
                t.elements_removed += count;
            }
        }
        Ok(())
    }

    fn generation(&mut self, payload: &[u8]) -> Result<CommitFacts, NlError> {
        let (_, _, attrs) = nfgen(payload)?;
        let (mut generation, mut pid, mut name) = (None, None, None);
        for a in attrs {
            let a = a?;
            match a.kind {
                NFTA_GEN_ID => generation = Some(a.be_u32()?),
                NFTA_GEN_PROC_PID => pid = Some(a.be_u32()?),
                NFTA_GEN_PROC_NAME => name = Some(a.str()?.to_string()),
                _ => {}
            }
        }
        let generation = generation.ok_or_else(|| missing("NFTA_GEN_ID"))?;
        let mut taken = std::mem::take(self);
        taken
            .tables
            .sort_by(|(fa, a), (fb, b)| (fa, &a.table).cmp(&(fb, &b.table)));
        Ok(CommitFacts {
            generation,
            pid,
            name,
            tables: taken.tables.into_iter().map(|(_, t)| t).collect(),
            more_tables: taken.more_tables,
            messages: taken.messages,
            counts: taken.counts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::messages;

    /// The datagrams of `nft_capture.hex` (see its header for what made them).
    fn capture() -> Vec<Vec<u8>> {
        include_str!("nft_capture.hex")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                (0..l.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect()
    }

    fn commits(datagrams: &[Vec<u8>]) -> Vec<CommitFacts> {
        let mut p = Pending::default();
        let mut out = Vec::new();
        for d in datagrams {
            for m in messages(d) {
                if let Some(c) = p.feed(&m.unwrap()).unwrap() {
                    out.push(c);
                }
            }
        }
        assert!(p.is_empty(), "every change closed by its NEWGEN");
        out
    }

    #[test]
    fn the_captured_commits_as_nft_monitor_printed_them() {
        let c = commits(&capture());
        let who: Vec<_> = c.iter().map(|c| (c.generation, c.pid, c.name.as_deref())).collect();
        assert_eq!(
            who,
            [
                (2, Some(14071), Some("iptables-nft-re")),
                (3, Some(14073), Some("iptables-nft")),
                (4, Some(14076), Some("nft")),
                (5, Some(14078), Some("nft")),
            ]
        );
        // iptables-nft-restore: the nat table, PREROUTING (notified twice) and KUBE-SERVICES, the
        // jump into KUBE-SERVICES and the rule in it: both kube-proxy's.
        let t = &c[0].tables;
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].family.as_str(), t[0].table.as_str()), ("ip", "nat"));
        assert!(t[0].table_added && !t[0].table_deleted);
        assert_eq!((t[0].rules_added, t[0].kube_rules_added, t[0].chains_added), (2, 2, 3));
        assert_eq!(t[0].base_kube_rules_added, 1, "the jump from PREROUTING");
        assert_eq!(c[0].messages, 6);
        // iptables-nft -t nat -F: both rules removed, one of a built-in chain; kube-proxy's.
        let t = &c[1].tables[0];
        assert_eq!((t.rules_removed, t.kube_rules_removed, t.base_rules_removed), (2, 2, 1));
        assert_eq!(t.base_kube_rules_removed, 1, "the jump from PREROUTING");
        assert!(t.removed_kube() && !t.table_deleted);
        // nft adds kube-proxy's table; then deletes it with its chain and rule.
        let t = &c[2].tables[0];
        assert_eq!(
            (t.table.as_str(), t.table_added, t.rules_added, t.kube_rules_added),
            ("kube-proxy", true, 1, 1)
        );
        assert!(!t.removed_kube());
        let t = &c[3].tables[0];
        assert!(t.table_deleted && t.removed_kube());
        assert_eq!((t.rules_removed, t.chains_deleted, t.kube_chains_deleted), (1, 1, 1));
        assert_eq!(t.chains_deleted_names, ["services"]);
    }

    /// What the captured commits did to the probes' counts: an iptables-nft table's deltas, and
    /// kube-proxy's nftables table only marked changed.
    #[test]
    fn the_captured_commits_count_deltas() {
        let c = commits(&capture());
        let nat =
            |t: &crate::probe::iptables::delta::TableDelta| (t.table.clone(), t.added, t.deleted, t.rules, t.chains);
        let d = &c[0].counts;
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].family, 2);
        assert_eq!(
            d[0].tables.iter().map(nat).collect::<Vec<_>>(),
            [("nat".to_string(), true, false, 2, 1)],
            "PREROUTING is built in: only KUBE-SERVICES is a chain more"
        );
        assert_eq!((d[0].kube_rules, d[0].uncounted, d[0].kube_table), (2, None, false));
        let d = &c[1].counts[0];
        assert_eq!((d.tables[0].rules, d.tables[0].chains, d.kube_rules), (-2, 0, -2));
        for commit in &c[2..] {
            let d = &commit.counts[0];
            assert!(d.kube_table && d.tables.is_empty() && d.kube_rules == 0, "{d:?}");
        }
    }

    fn chain_msg(ty: u16, flags: u16, table: &str, chain: &str) -> Vec<u8> {
        use crate::netlink::testing::{attr, msg};
        let payload = [
            &[2u8, 0, 0, 0][..],
            &attr(NFTA_CHAIN_TABLE, format!("{table}\0").as_bytes()),
            &attr(NFTA_CHAIN_NAME, format!("{chain}\0").as_bytes()),
        ]
        .concat();
        msg(msg_type(ty), flags, 0, &payload)
    }

    fn fed(datagram: &[u8]) -> CountDelta {
        let mut p = Pending::default();
        for m in messages(datagram) {
            p.feed(&m.unwrap()).unwrap();
        }
        p.counts.pop().unwrap_or_default()
    }

    /// A chain added with NLM_F_EXCL is new (the kernel refuses it otherwise); without, as `nft
    /// add chain` sends it, it may be an existing one updated: not counted, dumped. Deleting a
    /// canary is not counted either (another table may hold one); adding one is.
    #[test]
    fn chains_are_counted_only_when_the_notification_tells() {
        let d = fed(&chain_msg(
            NFT_MSG_NEWCHAIN,
            crate::netlink::NLM_F_EXCL,
            "nat",
            "KUBE-SVC-AAAAAAAAAAAAAAAA",
        ));
        assert_eq!(
            (d.tables[0].chains, d.kube_chains, d.uncounted),
            (1, [1, 0, 0, 0, 0], None)
        );
        let d = fed(&chain_msg(NFT_MSG_NEWCHAIN, 0x400, "nat", "KUBE-SVC-AAAAAAAAAAAAAAAA"));
        assert!(d.uncounted.is_some());
        let d = fed(&chain_msg(NFT_MSG_NEWCHAIN, 0x400, "nat", "PREROUTING"));
        assert_eq!(
            (d.tables.len(), d.uncounted),
            (0, None),
            "a built-in chain: no count moves"
        );
        let d = fed(&chain_msg(
            NFT_MSG_NEWCHAIN,
            crate::netlink::NLM_F_EXCL,
            "mangle",
            "KUBE-PROXY-CANARY",
        ));
        assert!(d.proxy_canary_added && d.uncounted.is_none());
        let d = fed(&chain_msg(NFT_MSG_DELCHAIN, 0, "mangle", "KUBE-PROXY-CANARY"));
        assert!(d.uncounted.is_some());
        let d = fed(&chain_msg(NFT_MSG_DELCHAIN, 0, "nat", "KUBE-SEP-AAAAAAAAAAAAAAAA"));
        assert_eq!((d.tables[0].chains, d.kube_chains[1], d.uncounted), (-1, -1, None));
        let d = fed(&chain_msg(NFT_MSG_NEWCHAIN, 0, "mytable", "KUBE-SVC-AAAAAAAAAAAAAAAA"));
        assert_eq!(d, CountDelta::default(), "a table the probes do not count");
    }

    #[test]
    fn a_commit_cut_anywhere_is_an_error_or_skipped_never_a_panic() {
        for d in capture() {
            for cut in 0..d.len() {
                let mut p = Pending::default();
                for m in messages(&d[..cut]).flatten() {
                    let _ = p.feed(&m);
                }
                // And every byte flipped in turn.
                let mut bad = d.clone();
                bad[cut] ^= 0xff;
                for m in messages(&bad).flatten() {
                    let _ = p.feed(&m);
                }
            }
        }
    }

    #[test]
    fn tables_beyond_the_cap_are_counted() {
        let mut p = Pending::default();
        for i in 0..(MAX_TABLES + 3) {
            let payload = [
                &[2u8, 0, 0, 0][..],
                &crate::netlink::testing::attr(NFTA_TABLE_NAME, format!("t{i}\0").as_bytes()),
            ]
            .concat();
            let m = Msg {
                ty: msg_type(NFT_MSG_NEWTABLE),
                flags: 0,
                seq: 0,
                payload: &payload,
            };
            assert_eq!(p.feed(&m).unwrap(), None);
        }
        let gen = [
            &[0u8, 0, 0, 0][..],
            &crate::netlink::testing::attr(NFTA_GEN_ID, &7u32.to_be_bytes()),
        ]
        .concat();
        let c = p
            .feed(&Msg {
                ty: msg_type(NFT_MSG_NEWGEN),
                flags: 0,
                seq: 0,
                payload: &gen,
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.generation, c.tables.len(), c.more_tables, c.pid),
            (7, MAX_TABLES, 3, None)
        );
    }
}
